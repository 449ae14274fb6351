"""Step time: the per-iteration breakdown of one pipeline stage's work, communication,
bubble and optimizer step, composed from the per-phenomenon modules (see docs/model.md).

One micro-batch on one pipeline stage (``L/pp`` layers; the output layer on the last
stage) costs forward + backward (backward GEMMs = 2 x forward FLOPs) + recomputation
(:mod:`~dse.analytic.time.layer`); 1F1B runs ``m`` of them plus a bubble of ``(pp-1)/v``
(:mod:`~dse.analytic.time.pipeline`, Narayanan et al. 2021). Tensor-parallel collectives
are exposed (:mod:`~dse.analytic.time.tensor_parallel`); data-parallel gradient reduction
overlaps with the last micro-batch's backward by ``dp_overlap``
(:mod:`~dse.analytic.time.data_parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.time import (
    data_parallel,
    gemm,
    layer,
    optimizer,
    pipeline,
    tensor_parallel,
    traffic,
)
from dse.analytic.time.collectives import Network


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Per-iteration time (seconds) by phase and per-accelerator traffic (bytes).

    ``step_s`` is the sum of the seven phases; ``overhead_s`` (kernel launch cost) is
    part of ``memory_s``.
    """

    compute_s: np.ndarray       # clock-bound GEMM time
    memory_s: np.ndarray        # memory-bound kernels
    tp_comm_s: np.ndarray       # exposed tensor-parallel collectives
    pp_comm_s: np.ndarray       # pipeline point-to-point and tied-embedding all-reduce
    dp_comm_s: np.ndarray       # exposed data-parallel communication
    bubble_s: np.ndarray        # pipeline bubble
    optimizer_s: np.ndarray     # optimizer step
    step_s: np.ndarray          # iteration time
    overhead_s: np.ndarray      # kernel launch overhead (inside memory_s)
    hbm_bytes: np.ndarray       # HBM traffic of the element-wise kernels, weights and optimizer
    scaleup_bytes: np.ndarray   # bytes sent on scale-up links
    scaleout_bytes: np.ndarray  # bytes sent on scale-out links


def step_time(*, shape, tp, pp, dp, v, m, b, sp, recompute, zero, hw, clock_ratio, net: Network,
              layer_params, embed_params, flash) -> StepBreakdown:
    """Per-iteration time breakdown and traffic of one candidate layout (arrays per candidate:
    tensor, pipeline and data-parallel degrees, interleave ``v``, micro-batches ``m`` of
    ``b`` sequences, sequence parallelism, recompute code, ZeRO stage, FlashAttention)."""
    T = b * shape["seq_len"]  # tokens per micro-batch
    T_tiles = np.ceil(T * (1.0 / gemm.TILE))
    g = gemm.roofline(hw, clock_ratio)
    lay = layer.layer_time(shape, tp, sp, b, T, T_tiles, recompute, flash, hw, g)
    hbm = hw.hbm_bw_bps * hw.memory_eff
    act_bytes = gemm.BYTES * T * shape["hidden"]
    n_tp = tensor_parallel.collectives_per_layer(lay.full_recompute)
    tp_layer, out_tp = tensor_parallel.tp_times(net, act_bytes, T, tp, n_tp)

    Ls = shape["layers"] / pp
    stage_c = Ls * lay.compute_s
    stage_m = Ls * (lay.memory_s) + Ls * lay.overhead_s
    stage_tp = Ls * tp_layer
    out_c, out_m = layer.output_layer(shape, tp, T, T_tiles, g)
    per_mb = stage_c + stage_m + stage_tp  # a transformer stage's time per micro-batch
    compute_s = m * (stage_c + out_c)
    memory_s = m * (stage_m + out_m)
    tp_s = m * (stage_tp + out_tp)

    same = tp * pp * dp <= net.size  # the pipeline stays in one domain only when the job does
    pp_s = pipeline.p2p_time(net, act_bytes, tp, pp, v, m, same)
    pp_s = pp_s + pipeline.tied_embedding_time(net, shape, tp, pp, dp)
    bubble_s = pipeline.bubble_time(pp, v, per_mb)

    stage_params = Ls * layer_params / tp + embed_params / tp
    grad_bytes = gemm.BYTES * stage_params
    backward_last = (Ls * (lay.compute_s + lay.memory_s) * 2.0 / 3.0)
    dp_s = data_parallel.dp_time(net, grad_bytes, dp, tp, hw.dp_overlap, backward_last, zero, m, compute_s)
    opt_bytes = optimizer.optimizer_bytes(stage_params, zero, dp)
    optimizer_s = opt_bytes / hbm

    step_s = compute_s + memory_s + tp_s + pp_s + dp_s + bubble_s + optimizer_s
    scaleup, scaleout = traffic.link_bytes(net, act_bytes, grad_bytes, tp, dp, m, Ls, n_tp,
                                           pipeline.p2p_bytes(act_bytes, tp, pp, v, m), same)
    return StepBreakdown(
        compute_s=compute_s, memory_s=memory_s, tp_comm_s=tp_s, pp_comm_s=pp_s, dp_comm_s=dp_s,
        bubble_s=bubble_s, optimizer_s=optimizer_s, step_s=step_s, overhead_s=m * Ls * lay.overhead_s,
        hbm_bytes=traffic.hbm_bytes(lay, Ls, m, opt_bytes, layer_params, tp),
        scaleup_bytes=scaleup, scaleout_bytes=scaleout)
