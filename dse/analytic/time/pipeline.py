"""Pipeline parallelism: point-to-point sends between stages, the tied-embedding
all-reduce and the 1F1B bubble (Narayanan et al. 2021)."""

from __future__ import annotations

import numpy as np

from dse.analytic.rows import where, where_or_zero
from dse.analytic.time.gemm import BYTES


def p2p_time(net, act_bytes, tp, pp, v, m, same_domain, scatter_gather) -> np.ndarray:
    """Point-to-point of activations (forward) and their gradients (backward) per iteration:
    ``2 v (m + pp - 1)`` sends of ``act_bytes / tp`` with the stack's scatter-gather over
    tensor ranks (Narayanan et al. 2021, section 4.1), else of ``act_bytes``; inside one
    scale-up domain only when the whole job is (``same_domain``)."""
    p2p = net.p2p(act_bytes / where(scatter_gather > 0, tp, 1.0), same_domain)
    return where_or_zero(pp > 1, 2.0 * v * (m + pp - 1) * p2p)


def tied_embedding_time(net, shape, tp, pp, dp) -> np.ndarray:
    """Tied embeddings: the first and last stage all-reduce the embedding gradient
    (``V h / tp`` 16-bit values) once per iteration."""
    emb_grad = BYTES * shape.vocab * shape.hidden / tp
    tied = (shape.tied_embeddings > 0) & (pp > 1)
    return where_or_zero(tied, net.all_reduce(emb_grad, 2.0 * np.ones_like(tp), tp * dp * (pp - 1)))


def bubble_time(pp, v, per_micro_batch_s) -> np.ndarray:
    """The 1F1B bubble: ``(pp - 1) / v`` micro-batch slots of a stage (Narayanan et al. 2021)."""
    return (pp - 1) / v * per_micro_batch_s


def p2p_bytes(act_bytes, tp, pp, v, m, scatter_gather) -> np.ndarray:
    """Bytes each accelerator sends point-to-point per iteration."""
    return where_or_zero(pp > 1, 2.0 * v * m * act_bytes / where(scatter_gather > 0, tp, 1.0))
