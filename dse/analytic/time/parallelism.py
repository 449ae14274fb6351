"""Parallel layout: data-parallel degree, micro-batches, and which layouts can run."""

from __future__ import annotations

import numpy as np


def _indivisible(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a % b != 0`` for integer-valued float arrays, without float ``fmod`` (~30x slower).

    ``a / b`` is an exact integer iff ``b`` divides ``a`` (for integers below 2**53 a
    remainder r >= 1 moves the quotient by more than its rounding error); NaN, an
    infinite quotient (b = 0) count as not dividing, as ``fmod`` gives NaN there.
    """
    q = a / b
    return ~((q == np.floor(q)) & np.isfinite(q))


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a // b`` for integer-valued float arrays (exact below 2**53, see :func:`_indivisible`;
    NaN for an infinite ``a``, as ``//`` gives)."""
    return np.where(np.isinf(a), np.nan, np.floor(a / b))


def layout(
    num_accelerators: np.ndarray,
    tensor_parallel: np.ndarray,
    pipeline_parallel: np.ndarray,
    global_batch_size: np.ndarray,
    micro_batch_size: np.ndarray,
    layers: np.ndarray,
    heads: np.ndarray,
    kv_heads: np.ndarray,
    interleave: np.ndarray,
    sequence_parallel: np.ndarray,
    seq_len: np.ndarray,
) -> tuple[dict[str, np.ndarray], list[tuple[np.ndarray, str]]]:
    """Derived degrees and a list of ``(mask, reason)`` for layouts that cannot run.

    ``data_parallel = N / (tp * pp)``; each data-parallel replica runs
    ``micro_batches = global_batch / (dp * micro_batch)`` micro-batches per iteration
    (gradient accumulation). The interleaved 1F1B schedule (Narayanan et al. 2021) splits
    each stage into ``interleave`` model chunks and needs the micro-batches to be a
    multiple of the pipeline degree (Megatron-LM's requirement).
    """
    n, tp, pp = num_accelerators, tensor_parallel, pipeline_parallel
    gb, mb = global_batch_size, micro_batch_size
    v = np.maximum(interleave, 1)
    kv = kv_heads
    model_parallel = np.maximum(tp * pp, 1)
    dp = np.maximum(_floor_div(n, model_parallel), 1)
    micro_batches = np.maximum(_floor_div(gb, np.maximum(dp * mb, 1)), 1)
    checks = [
        (_indivisible(n, model_parallel), "tensor x pipeline parallel does not divide the accelerator count"),
        (_indivisible(heads, tp), "tensor parallel degree does not divide the attention heads"),
        (_indivisible(kv, tp) & _indivisible(tp, kv), "tensor parallel degree and key-value heads do not divide each other"),
        (_indivisible(layers, pp * v), "pipeline parallel x interleave does not divide the layers"),
        (_indivisible(gb, dp * mb), "data parallel x micro batch does not divide the global batch"),
        ((v > 1) & (pp == 1), "interleaved schedule needs pipeline parallelism"),
        ((v > 1) & _indivisible(micro_batches, pp), "interleaved schedule needs micro-batches to be a multiple of the pipeline degree"),
        ((sequence_parallel > 0) & _indivisible(seq_len, tp),
         "sequence parallelism needs the tensor parallel degree to divide the sequence length"),
    ]
    return {"data_parallel": dp, "micro_batches": micro_batches, "interleave": v}, checks
