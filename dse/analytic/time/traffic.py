"""Bytes each accelerator moves per iteration (HBM, scale-up and scale-out links): what
the energy model charges per byte and per bit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.rows import where_or_zero
from dse.analytic.time.gemm import BYTES


def hbm_traffic_bytes(layer, Ls, m, opt_bytes, rank_layer_params, weight_passes=3.0) -> np.ndarray:
    """HBM traffic per iteration: the element-wise kernels over every pass of the stage's
    ``Ls`` layers for ``m`` micro-batches, the optimizer step, and the 16-bit weights this
    rank holds per layer (``rank_layer_params``) read on each of the ``weight_passes`` passes
    that use them (3; 2 for frozen weights, which no weight gradient reads)."""
    passes_bytes = (
        layer.dense_passes * layer.dense_ew_bytes + layer.attn_passes * layer.attn_ew_bytes
    ) * Ls
    return m * passes_bytes + opt_bytes + weight_passes * m * BYTES * Ls * rank_layer_params


@dataclass(frozen=True, slots=True)
class CollectiveBytes:
    """Sizes (bytes) of the collectives one accelerator takes part in."""

    activations: np.ndarray  # one tensor-parallel all-reduce: a micro-batch's activations
    data_parallel: (
        np.ndarray
    )  # the data-parallel collectives per iteration (reduce-scattered or gathered)
    pipeline: np.ndarray  # the pipeline sends per iteration
    context_parallel: (
        np.ndarray | None
    )  # the key/value exchange per iteration (None: no context parallelism)


def link_bytes(net, lay, dp, Ls, n_tp, same_domain, sizes: CollectiveBytes):
    """``(scaleup_bytes, scaleout_bytes)`` per iteration: tensor-parallel all-reduces
    (``n_tp`` per layer of the stage's ``Ls`` plus the output layer's, per micro-batch of the
    layout ``lay``), the data-parallel collectives over ``dp`` ranks of stride ``tp``, the
    context-parallel key/value exchange and the pipeline sends (within one scale-up domain
    where ``same_domain``), on the fabric each crosses."""
    tp, m, cp = lay.tp, lay.micro_batches, lay.cp
    act_bytes, dp_volume, p2p_bytes, cp_volume = (
        sizes.activations,
        sizes.data_parallel,
        sizes.pipeline,
        sizes.context_parallel,
    )
    tp_up, tp_out = net.traffic(act_bytes, tp, 1)
    dp_up, dp_out = net.traffic(dp_volume, dp, tp, factor=1.0)
    cp_up, cp_out = (0.0, 0.0) if cp_volume is None else net.traffic(cp_volume, cp, tp, factor=1.0)
    n_tp_total = m * (Ls * n_tp + 1.0)
    scaleup = n_tp_total * tp_up + dp_up + cp_up + where_or_zero(same_domain, p2p_bytes)
    scaleout = n_tp_total * tp_out + dp_out + cp_out + where_or_zero(~same_domain, p2p_bytes)
    return scaleup, scaleout
