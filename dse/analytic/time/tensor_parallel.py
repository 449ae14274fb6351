"""Tensor- and context-parallel collectives per micro-batch (Megatron-LM, Shoeybi et al.
2019; ring attention for context parallelism).

Per layer 2 all-reduces of the activations forward and 2 backward (or, with sequence
parallelism, all-gather + reduce-scatter pairs of the same cost, Korthikanti et al. 2022),
2 more with full recomputation. Context parallelism passes the keys and values around the
``cp`` ranks of a sequence (Megatron-Core / Transformer Engine ring attention).
"""

from __future__ import annotations

import numpy as np

from dse.analytic.rows import where
from dse.analytic.time.gemm import BYTES


def collectives_per_layer(full_recompute: np.ndarray) -> np.ndarray:
    """All-reduces per layer per micro-batch: 4, or 6 with full recomputation."""
    return 4.0 + 2.0 * full_recompute


def tp_times(net, act_bytes, T, tp, n_tp) -> tuple[np.ndarray, np.ndarray]:
    """``(layer_s, output_layer_s)``: one layer's ``n_tp`` all-reduces of ``act_bytes``
    (bytes of a micro-batch's activations), and the output layer's: vocab-parallel logits
    with an all-reduce of the input gradient and 3 small cross-entropy reductions of 4 B
    per token (``T`` tokens per micro-batch; Shoeybi et al. 2019)."""
    tp_ar = net.all_reduce(act_bytes, tp, 1)
    return n_tp * tp_ar, tp_ar + 3.0 * net.all_reduce(4.0 * T, tp, 1)


def cp_bytes(shape, b, tp, cp, recompute) -> np.ndarray:
    """Key and value bytes one layer exchanges per micro-batch across the context-parallel
    ranks (the collective size): the 16-bit keys and values of the whole sequence on one
    tensor rank, gathered forward, gathered again with their gradients reduce-scattered
    backward, and gathered once more when the attention is recomputed. The widths are the
    attention's own (:class:`~dse.analytic.time.workload.AttentionDims`): ``kv_heads x
    head_dim`` each, MLA's expanded per-head keys ``a (d + d_r)`` and values ``a d``."""
    dims = shape.attention
    kv = BYTES * b * shape.seq_len * (dims.k + dims.v) / tp
    return where(cp > 1, kv * (3.0 + ((recompute == 1) | (recompute == 2))), 0.0)


def cp_time(net, shape, b, tp, cp, recompute) -> np.ndarray:
    """Time of one layer's context-parallel exchange per micro-batch (before overlap)."""
    return net.all_gather(cp_bytes(shape, b, tp, cp, recompute), cp, tp)
