"""The optimizer step: mixed-precision Adam, memory-bound."""

from __future__ import annotations

import numpy as np

from dse.analytic.rows import where


def optimizer_bytes(stage_params, zero, dp) -> np.ndarray:
    """HBM bytes of one fused Adam step (Megatron's and DeepSpeed's): it reads/writes the
    fp32 master weights, momentum and variance (24 B), reads the gradient (4 B) and writes
    the 16-bit weight (2 B) per parameter it owns (its ``1 / dp`` share with ZeRO >= 1;
    Rajbhandari et al. 2020). An eager stack's unfused Adam moves the eager factor more."""
    owned = stage_params / where(zero >= 1, dp, 1)
    return 30.0 * owned
