"""Step time: the per-iteration breakdown of the pace-setting pipeline stage's work,
communication, bubble and optimizer step, composed from the per-phenomenon modules (see
docs/model.md, section 6).

One micro-batch on one pipeline stage costs forward + backward (backward GEMMs = 2 x
forward FLOPs) + recomputation (:mod:`~dse.analytic.time.layer`) over the stage's layers
(:class:`~dse.analytic.time.parallelism.Stages`; the output layer on the last stage); the
slowest stage sets the pace of the 1F1B schedule, which runs ``m`` micro-batches plus a
bubble of ``(pp-1)/v`` average stage slots (:mod:`~dse.analytic.time.pipeline`, Narayanan
et al. 2021). What the training stack overlaps with compute
(:mod:`~dse.analytic.time.frameworks`) hides behind the window it overlaps with, at a cost
of ``overlap_tax`` per second overlapped; what does not fit is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.rows import Choice, where
from dse.analytic.time import (
    adapters,
    data_parallel,
    experts,
    gemm,
    layer,
    optimizer,
    parallelism,
    pipeline,
    tensor_parallel,
    traffic,
)
from dse.analytic.time.collectives import Network, exposed, exposed_in
from dse.analytic.time.frameworks import Stack
from dse.analytic.time.hardware import Hardware
from dse.analytic.time.parallelism import Layout, Stages
from dse.analytic.time.workload import ModelShape, ParameterCounts


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Per-iteration time (seconds) by phase and per-accelerator traffic (bytes).

    ``step_s`` is the sum of the seven phases and the exposed offloading copies (``offload_s``); ``overhead_s`` (kernel launch cost and the
    GPU's wait for its host, ``host_idle_s``) is part of ``memory_s``.
    """

    compute_s: np.ndarray  # clock-bound GEMM time
    memory_s: np.ndarray  # memory-bound kernels
    layer_comm_s: (
        np.ndarray
    )  # exposed per-layer collectives: tensor-, context- and expert-parallel (all three)
    pp_comm_s: np.ndarray  # pipeline point-to-point and tied-embedding all-reduce
    dp_comm_s: np.ndarray  # exposed data-parallel communication
    bubble_s: np.ndarray  # pipeline bubble
    optimizer_s: np.ndarray  # optimizer step
    step_s: np.ndarray  # iteration time
    overhead_s: np.ndarray  # kernel launch overhead (inside memory_s)
    hbm_traffic_bytes: np.ndarray  # HBM traffic of the element-wise kernels, weights and optimizer
    scaleup_bytes: np.ndarray  # bytes sent on scale-up links
    scaleout_bytes: np.ndarray  # bytes sent on scale-out links
    # for composing pipeline parts (dse.analytic.fleet); None where a caller builds a breakdown itself
    slot_s: np.ndarray | None = (
        None  # one micro-batch on the pace stage (compute, memory, TP/CP/EP)
    )
    work_s: np.ndarray | None = (
        None  # one micro-batch on every stage of this pipeline (part), summed
    )
    host_idle_s: np.ndarray | None = (
        None  # GPU waiting for its host's dispatch (inside memory_s; clock-independent until compute fills it)
    )
    cp_comm_s: np.ndarray | None = None  # the context-parallel exchange's share of layer_comm_s
    ep_comm_s: np.ndarray | None = (
        None  # the experts' dispatch, combine and expert-tensor collectives' share of layer_comm_s
    )
    # one micro-batch (compute, memory, TP) on the first, the most loaded middle and the last
    # stage of a whole pipeline (a per-stage clock plan emulates them; None for a part)
    first_slot_s: np.ndarray | None = None
    middle_slot_s: np.ndarray | None = None
    last_slot_s: np.ndarray | None = None
    #: exposed activation-offloading copies to and from host memory (:func:`offload_time`)
    offload_s: np.ndarray | float = 0.0

    @classmethod
    def one_accelerator(
        cls, compute_s: np.ndarray, memory_s: np.ndarray, hbm_traffic_bytes: np.ndarray
    ) -> StepBreakdown:
        """Kernels back to back on one accelerator (a profiled stage or kernel): no
        communication, no bubble, no optimizer step."""
        zero = np.zeros(np.shape(compute_s))
        return cls(
            compute_s=compute_s,
            memory_s=memory_s,
            layer_comm_s=zero,
            pp_comm_s=zero,
            dp_comm_s=zero,
            bubble_s=zero,
            optimizer_s=zero,
            step_s=compute_s + memory_s,
            overhead_s=zero,
            hbm_traffic_bytes=hbm_traffic_bytes,
            scaleup_bytes=zero,
            scaleout_bytes=zero,
        )


@dataclass(frozen=True, slots=True)
class StepInputs:
    """What the step time depends on besides the clock: the model, its parallel layout and
    pipeline stages, its parameter counts and expert layout, the accelerator, the training
    stack and the network."""

    shape: ModelShape
    layout: Layout
    stages: Stages
    counts: ParameterCounts
    ex: experts.ExpertLayout
    hw: Hardware
    stack: Stack
    net: Network | None  # None in a time.model.Front: made at the clock (timed)
    #: activation offloading: bytes one micro-batch sends to host memory in its forward and
    #: fetches back in its backward, on the device's stage (MemoryBreakdown)
    offload_bytes: np.ndarray | float = 0.0
    #: LoRA fine-tuning's adapters beside frozen weights (None: every weight trained)
    adapters: adapters.Adapters | None = None
    #: the keys a query attends to where packed documents are masked apart (None: the sequence)
    attention_span: np.ndarray | None = None


def offload_time(offload_bytes, host_link_bps, mb_busy_s) -> np.ndarray:
    """Exposed time of activation offloading per micro-batch: the stacks that offload copy
    asynchronously (Transformer Engine's CPU offload, XLA's host offload, side-stream
    copies), the forward's copies to the host behind the forward's kernels (a third of the
    micro-batch's compute and memory time, the backward being twice the forward) and the
    backward's fetches behind the backward's two thirds; what does not fit is exposed. The
    link is full duplex (one direction each way)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        copy_s = where(offload_bytes > 0, offload_bytes / host_link_bps, 0.0)
    return np.maximum(copy_s - mb_busy_s / 3.0, 0.0) + np.maximum(
        copy_s - 2.0 * mb_busy_s / 3.0, 0.0
    )


def step_time(x: StepInputs, clock_ratio: np.ndarray) -> StepBreakdown:
    """Per-iteration time breakdown and traffic of the candidates ``x`` at ``clock_ratio`` =
    f / f_max."""
    # stays ~60 lines: the phases in the order each feeds the next; each phase is one call
    shape, stages, ex, hw, stack, net = x.shape, x.stages, x.ex, x.hw, x.stack, x.net
    layout = x.layout
    tp, cp, pp, dp, v, m, b = (
        layout.tp,
        layout.cp,
        layout.pp,
        layout.dp,
        layout.interleave,
        layout.micro_batches,
        layout.micro_batch,
    )
    recompute, zero = layout.recompute, layout.zero_stage
    T = b * shape.seq_len / cp  # tokens per micro-batch on one accelerator
    T_tiles = np.ceil(T * (1.0 / gemm.TILE))
    g = gemm.roofline(hw, clock_ratio)
    g16 = gemm.roofline(hw, clock_ratio, sixteen_bit=True, like=g) if hw.fp8.any() else g
    eager = where(stack.fused_kernels > 0, 1.0, hw.eager_elementwise_factor)
    # FlashAttention-2 (the stack's kernel) on a part it was not written for: its published ceiling
    attn_cap = where(stack.fa2_attention > 0, hw.fa2_peak_fraction, np.inf)
    # Nemotron-4's squared ReLU: eager PyTorch ops unless the stack compiles its blocks
    sq_relu = shape.squared_relu * (stack.compiled_activations == 0)
    kernels = layer.Kernels(T, T_tiles, g, g16, eager, attn_cap, sq_relu, x.attention_span)
    lt = layer.layer_time(shape, layout, ex, hw, kernels, x.adapters)
    hbm = g.hbm_bw_bps  # (hw.hbm_bw_bps * hw.memory_eff, the roofline's)
    tax = hw.overlap_tax
    act_bytes = gemm.BYTES * T * shape.hidden
    n_tp = tensor_parallel.collectives_per_layer(lt.full_recompute)
    with_cp = bool((cp > 1).any())
    layer_comm, out_tp, cp_layer, ep_layer = _layer_comm(x, lt, act_bytes, T, n_tp, with_cp)
    if x.adapters is not None:  # LoRA: the adapters' output gathers beside row-parallel layers
        layer_comm = layer_comm + adapters.gather_time(
            x.net, x.adapters, act_bytes, tp, layout.sequence_parallel, lt.full_recompute
        )

    # one micro-batch on each candidate stage; the slowest sets the pace
    # the output layer: 3 passes, 2 where it is frozen (LoRA: no weight gradient)
    out_passes = 3.0 if x.adapters is None else 3.0 - x.adapters.lora
    out_c, out_m = layer.output_layer(shape, tp, T, T_tiles, g16, out_passes)
    lt_m = lt.memory_s + lt.overhead_s
    count = stages.count if stages.part else pp  # stages of this (part of the) pipeline
    one = count == 1

    (t_first, t_middle, t_last), (c_mb, m_mb, tp_mb, idle_mb, layers_mb) = _pace_stage(
        stages, count, one, lt, lt_m, layer_comm, out_c, out_m, out_tp
    )
    compute_s, memory_s, layer_comm_s = m * c_mb, m * m_mb, m * tp_mb
    # the parts of layer_comm_s that are the context-parallel exchange and the experts' traffic (reported apart)
    no_share = np.zeros_like(layer_comm_s) if cp_layer is None or ep_layer is None else None
    cp_s = m * layers_mb * cp_layer if cp_layer is not None else no_share
    ep_s = m * layers_mb * ep_layer if ep_layer is not None else no_share
    # the bubble: (pp - 1) / v slots of the average stage (the pipeline's total work / pp)
    if stages.part:  # this part's stages' work per micro-batch; the fleet composes the bubble
        work = t_first + where(count >= 2, t_last, 0.0) + np.maximum(count - 2.0, 0.0) * t_middle
        mean_stage = work / count
    else:
        mean_stage = (
            np.maximum(
                shape.layers * (lt.compute_s + lt_m + layer_comm) + out_c + out_m + out_tp,
                shape.layers * lt.host_s,
            )
            / pp
        )
        work = mean_stage * pp
    bubble_s = pipeline.bubble_time(pp, v, mean_stage)

    dp_group = (
        dp * cp if with_cp else dp
    )  # gradients are reduced over the data- and context-parallel ranks
    # the pipeline stays in one domain only when the job does (a mixed fleet's parts never share one)
    same = (tp * cp * pp * dp <= net.size) & (not stages.part)
    pp_s = pipeline.p2p_time(net, act_bytes, tp, pp, v, m, same, stack.p2p_scatter_gather)
    pp_s = exposed(pp_s, stack.p2p_overlap * (v > 1), compute_s, tax)
    tied_s = pipeline.tied_embedding_time(net, shape, tp, pp, dp_group)
    if x.adapters is not None:  # a frozen embedding has no gradient to reduce
        tied_s = tied_s * (1.0 - x.adapters.lora)
    pp_s = pp_s + tied_s

    # data parallelism on the stage holding the most parameters (the embedding stages or a middle one)
    held = _stage_parameters(shape, stages, x.counts, one, tp, ex, x.adapters)
    stage_params, busiest, expert_dp = held.params, held.layers, held.experts
    trained = stage_params if held.trained is None else held.trained
    mb_compute = c_mb + m_mb  # one micro-batch's kernels on the pace stage (forward + backward)
    dp_s = data_parallel.dp_time(
        net, held, dp_group, layout, stack, mb_compute, tax, hw.kernel_overhead_us * 1e-6, hw.fp8
    )
    opt_bytes = optimizer.optimizer_bytes(trained, zero, dp_group)
    if ex.on:
        opt_bytes = opt_bytes + optimizer.optimizer_bytes(expert_dp[0], zero, expert_dp[1])
    optimizer_s = opt_bytes * eager / hbm  # fused Adam, or the eager stack's unfused kernels

    offload_s = m * offload_time(x.offload_bytes, hw.host_link_bps, mb_compute)
    step_s = compute_s + memory_s + layer_comm_s + pp_s + dp_s + bubble_s + optimizer_s + offload_s
    cp_volume = (
        tensor_parallel.cp_bytes(shape, b, tp, cp, recompute) * m * busiest if with_cp else None
    )
    scaleup, scaleout = _link_bytes(x, lt, act_bytes, T, n_tp, same, cp_volume, dp_group, held)
    weight_params = x.counts.layer / tp
    if ex.on:
        weight_params = weight_params + ex.params / (ex.ep * ex.etp)
    return StepBreakdown(
        compute_s=compute_s,
        memory_s=memory_s,
        layer_comm_s=layer_comm_s,
        pp_comm_s=pp_s,
        dp_comm_s=dp_s,
        bubble_s=bubble_s,
        optimizer_s=optimizer_s,
        step_s=step_s,
        overhead_s=m * (busiest * lt.overhead_s + idle_mb),
        hbm_traffic_bytes=traffic.hbm_traffic_bytes(
            lt, busiest, m, opt_bytes, weight_params, 3.0 if x.adapters is None else out_passes
        ),
        scaleup_bytes=scaleup,
        scaleout_bytes=scaleout,
        slot_s=c_mb + m_mb + tp_mb,
        work_s=work,
        host_idle_s=m * idle_mb,
        cp_comm_s=cp_s,
        ep_comm_s=ep_s,
        first_slot_s=None if stages.part else t_first,
        middle_slot_s=None if stages.part else np.broadcast_to(t_middle, np.shape(t_first)),
        last_slot_s=None if stages.part else t_last,
        offload_s=offload_s,
    )


def _layer_comm(x: StepInputs, lt, act_bytes, T, n_tp, with_cp) -> tuple:
    """Exposed communication of one layer (its times ``lt``) and one micro-batch of ``T``
    tokens per accelerator (tensor-parallel collectives, the context-parallel exchange,
    expert dispatch and combine), the output layer's tensor-parallel time, and the
    context-parallel and expert parts of the layer's (None without context parallelism or
    experts)."""
    net, shape, ex, stack, layout = x.net, x.shape, x.ex, x.stack, x.layout
    b, tp, cp = layout.micro_batch, layout.tp, layout.cp
    # a stack that splits every activation over the tensor ranks (MaxText's logical axis
    # rules, frameworks.yaml activations_tp_sharded) runs its tensor-parallel collectives as
    # all-gather / reduce-scatter pairs, sequence parallelism in all but name: overlappable
    sp = np.maximum(layout.sequence_parallel, stack.activations_tp_sharded * (tp > 1))
    tax = x.hw.overlap_tax
    layer_comm, out_tp = tensor_parallel.tp_times(net, act_bytes, T, tp, n_tp)
    # the dense GEMMs are one window: what the TP traffic hides there, the experts' cannot
    layer_comm, window_s = exposed_in(layer_comm, stack.tp_overlap * (sp > 0), lt.dense_gemm_s, tax)
    cp_layer = ep_layer = None
    if with_cp:  # ring attention overlaps its exchange with the attention blocks by design
        cp_layer = exposed(
            tensor_parallel.cp_time(net, shape, b, tp, cp, layout.recompute),
            layout.cp_overlap,
            lt.attn_core_s,
            tax,
        )
        layer_comm = layer_comm + cp_layer
    if ex.on:  # expert dispatch and combine, behind another micro-batch's GEMMs where overlapped
        ep_layer = experts.comm_times(
            net, shape, ex, layout, T, lt.full_recompute, window_s, stack.tp_overlap * (sp > 0), tax
        )
        layer_comm = layer_comm + ep_layer
    return layer_comm, out_tp, cp_layer, ep_layer


def _link_bytes(x: StepInputs, lt, act_bytes, T, n_tp, same, cp_volume, dp_group, held) -> tuple:
    """Bytes one accelerator sends per iteration on scale-up and on scale-out links
    (:func:`~dse.analytic.time.traffic.link_bytes`, plus the experts' dispatch and their
    gradients' reduction). ``held``: :func:`_stage_parameters`."""
    net, shape, ex, stack, layout = x.net, x.shape, x.ex, x.stack, x.layout
    tp, pp, v, m, zero = (
        layout.tp,
        layout.pp,
        layout.interleave,
        layout.micro_batches,
        layout.zero_stage,
    )
    stage_params, busiest, expert_dp = held.params, held.layers, held.experts
    # FSDP with a pipeline that gathers once (pp_gather_once): one micro-batch's traffic
    m_dp = where((stack.pp_gather_once > 0) & (pp > 1) & (zero >= 3), 1.0, m)
    wb = data_parallel.weight_bytes(stack, x.hw.fp8)  # fp8 weight gathers where the stack does
    sizes = traffic.CollectiveBytes(
        activations=act_bytes,
        data_parallel=data_parallel.volume_bytes(
            stage_params, zero, m_dp, stack.grad_bytes, wb, held.trained
        ),
        pipeline=pipeline.p2p_bytes(act_bytes, tp, pp, v, m, stack.p2p_scatter_gather),
        context_parallel=cp_volume,
    )
    scaleup, scaleout = traffic.link_bytes(net, layout, dp_group, busiest, n_tp, same, sizes)
    if ex.on:
        e_up, e_out = experts.link_bytes(net, shape, ex, T, tp, n_tp, lt.full_recompute)
        ed_up, ed_out = net.traffic(
            data_parallel.volume_bytes(expert_dp[0], zero, m, stack.grad_bytes, wb),
            expert_dp[1],
            expert_dp[2],
            factor=1.0,
        )
        scaleup = scaleup + m * busiest * e_up + ed_up
        scaleout = scaleout + m * busiest * e_out + ed_out
    return scaleup, scaleout


def _pace_stage(stages, count, one, lt, lt_m, layer_comm, out_c, out_m, out_tp) -> tuple:
    """One micro-batch on the first, the most loaded middle and the last stage: their
    (compute + memory + TP) times, and the (compute, memory, TP, host wait, layers) of the
    one that sets the pace (the slowest)."""

    def stage(n_layers, with_output):
        """(compute, memory, TP) of one micro-batch on a stage; a GPU with less work than its
        host dispatches in ``n_layers * lt.host_s`` waits for it (in the memory slot)."""
        c, mm, tt = (
            n_layers * lt.compute_s + with_output * out_c,
            n_layers * lt_m + with_output * out_m,
            n_layers * layer_comm + with_output * out_tp,
        )
        idle = np.maximum(n_layers * lt.host_s - (c + mm + tt), 0.0)
        return c, mm + idle, tt, idle, n_layers

    if stages.part:
        first, last = stage(stages.first, one * stages.output), stage(stages.last, stages.output)
    else:
        first, last = stage(stages.first, one), stage(stages.last, 1.0)
    middle = stage(stages.middle, 0.0) if (count >= 3).any() else (0.0, 0.0, 0.0, 0.0, 0.0)
    t_first, t_middle, t_last = sum(first[:3]), sum(middle[:3]), sum(last[:3])
    pace_first = (t_first > t_last) & (t_first >= t_middle)
    pace_middle = ~pace_first & (t_middle > t_last)
    # each mask's count and integer form once for the five pairs it picks
    by_first, by_middle = Choice(pace_first), Choice(pace_middle)
    pace = tuple(
        by_first(f, by_middle(mid, la)) for f, mid, la in zip(first, middle, last, strict=True)
    )
    return (t_first, t_middle, t_last), pace


def _stage_parameters(
    shape, stages, counts: ParameterCounts, one, tp, ex, ad=None
) -> data_parallel.HeldStage:
    """Parameters per accelerator on the stage holding the most (the embedding stages or a
    middle one), the most layers on a stage, the routed experts' share on that stage
    with its expert-data-parallel group and split (None when dense), and the parameters it
    trains where a candidate fine-tunes with LoRA (``ad``; None: every parameter)."""
    vh = shape.vocab * shape.hidden
    layer_params, embed_params = counts.layer, counts.embedding
    if stages.part:
        emb_first, emb_last = parallelism.part_embeddings(vh, stages, shape.tied_embeddings)
        stage_params = (
            np.maximum(
                np.maximum(
                    stages.first * layer_params + emb_first, stages.last * layer_params + emb_last
                ),
                stages.middle * layer_params,
            )
            / tp
        )
    else:
        stage_params = (
            np.maximum(
                np.maximum(stages.first, stages.last) * layer_params + where(one, embed_params, vh),
                stages.middle * layer_params,
            )
            / tp
        )
    busiest = np.maximum(np.maximum(stages.first, stages.last), stages.middle)
    expert_dp = None
    if ex.on:  # the routed experts' share on the busiest stage, reduced over the expert-data-parallel ranks
        expert_params = busiest * ex.params / (ex.ep * ex.etp)
        expert_dp = (expert_params, where(ex.frac > 0, ex.edp, 1.0), ex.etp * ex.ep)
    trained = None
    if ad is not None:  # the adapters of the stage with the most layers
        trained = adapters.trained_parameters(stage_params, busiest, ad, tp)
    return data_parallel.HeldStage(
        params=stage_params, layers=busiest, experts=expert_dp, trained=trained
    )
