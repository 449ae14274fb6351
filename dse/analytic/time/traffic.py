"""Bytes each accelerator moves per iteration (HBM, scale-up and scale-out links): what
the energy model charges per byte and per bit."""

from __future__ import annotations

import numpy as np

from dse.analytic.time.gemm import BYTES


def hbm_traffic_bytes(layer, Ls, m, opt_bytes, rank_layer_params) -> np.ndarray:
    """HBM traffic per iteration: the element-wise kernels over every pass of the stage's
    ``Ls`` layers for ``m`` micro-batches, the optimizer step, and the 16-bit weights this
    rank holds per layer (``rank_layer_params``) read on each of the 3 passes."""
    passes_bytes = (layer.dense_passes * layer.dense_ew_bytes + layer.attn_passes * layer.attn_ew_bytes) * Ls
    return m * passes_bytes + opt_bytes + 3.0 * m * BYTES * Ls * rank_layer_params


def link_bytes(net, act_bytes, dp_volume, tp, dp, m, Ls, n_tp, p2p_bytes, same_domain, cp_volume, cp):
    """``(scaleup_bytes, scaleout_bytes)`` per iteration: tensor-parallel all-reduces
    (``n_tp`` per layer plus the output layer's, per micro-batch), the data-parallel
    collectives (``dp_volume`` bytes reduce-scattered or gathered over ``dp`` ranks of stride
    ``tp``), the context-parallel key/value exchange (``cp_volume``; None: no context
    parallelism) and the pipeline sends, on the fabric each crosses."""
    tp_up, tp_out = net.traffic(act_bytes, tp, 1)
    dp_up, dp_out = net.traffic(dp_volume, dp, tp, factor=1.0)
    cp_up, cp_out = (0.0, 0.0) if cp_volume is None else net.traffic(cp_volume, cp, tp, factor=1.0)
    n_tp_total = m * (Ls * n_tp + 1.0)
    scaleup = n_tp_total * tp_up + dp_up + cp_up + np.where(same_domain, p2p_bytes, 0.0)
    scaleout = n_tp_total * tp_out + dp_out + cp_out + np.where(same_domain, 0.0, p2p_bytes)
    return scaleup, scaleout
