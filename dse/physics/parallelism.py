"""Parallel layout: data-parallel degree, micro-batches, and which layouts can run."""

from __future__ import annotations

import numpy as np


def layout(
    num_accelerators: np.ndarray,
    tensor_parallel: np.ndarray,
    pipeline_parallel: np.ndarray,
    global_batch_size: np.ndarray,
    micro_batch_size: np.ndarray,
    layers: np.ndarray,
    heads: np.ndarray,
) -> tuple[dict[str, np.ndarray], list[tuple[np.ndarray, str]]]:
    """Derived degrees and a list of ``(mask, reason)`` for layouts that cannot run.

    ``data_parallel = N / (tp * pp)``; each data-parallel replica runs
    ``micro_batches = global_batch / (dp * micro_batch)`` micro-batches per iteration
    (gradient accumulation).
    """
    n, tp, pp = num_accelerators, tensor_parallel, pipeline_parallel
    gb, mb = global_batch_size, micro_batch_size
    model_parallel = tp * pp
    dp = np.maximum(n // np.maximum(model_parallel, 1), 1)
    micro_batches = np.maximum(gb // np.maximum(dp * mb, 1), 1)
    checks = [
        (n % model_parallel != 0, "tensor x pipeline parallel does not divide the accelerator count"),
        (heads % tp != 0, "tensor parallel degree does not divide the attention heads"),
        (layers % pp != 0, "pipeline parallel degree does not divide the layers"),
        (gb % (dp * mb) != 0, "data parallel x micro batch does not divide the global batch"),
    ]
    return {"data_parallel": dp, "micro_batches": micro_batches}, checks
