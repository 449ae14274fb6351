"""Memory per accelerator: weights, gradients, optimizer state and activations."""

from __future__ import annotations

import numpy as np


def memory_breakdown(
    params: np.ndarray, tp: np.ndarray, pp: np.ndarray, dp: np.ndarray, zero_stage: np.ndarray,
    micro_batch: np.ndarray, seq_len: np.ndarray, hidden: np.ndarray, layers: np.ndarray,
    recompute: np.ndarray,
) -> dict[str, np.ndarray]:
    """Bytes per accelerator for mixed-precision Adam training.

    Weights 2 B/param and gradients 2 B/param (bf16), optimizer 12 B/param (fp32 master,
    momentum, variance; Rajbhandari et al. 2020, ZeRO, section 3.1) sharded over data
    parallel from ZeRO stage 1. Activations per layer (Korthikanti et al. 2022, eq. 2/5):
    none: s*b*h*34/tp (+ attention 5*a*s^2*b/tp, folded into the 34 factor here);
    selective: s*b*h*34/tp; full: 2*s*b*h (the layer input only). Pipeline stage 0
    holds ``pp`` micro-batches in flight under 1F1B, so per stage the in-flight
    activations are those of all L layers divided by pp times pp micro-batches = L layers.
    """
    shard = params / (tp * pp)
    weights = 2.0 * shard
    grads = 2.0 * shard / np.where(zero_stage >= 2, dp, 1)
    optimizer = 12.0 * shard / np.where(zero_stage >= 1, dp, 1)
    per_layer = np.where(recompute == "full", 2.0 * seq_len * micro_batch * hidden,
                         34.0 * seq_len * micro_batch * hidden / tp)
    activations = per_layer * layers
    total = weights + grads + optimizer + activations
    return {"weights": weights, "gradients": grads, "optimizer": optimizer,
            "activations": activations, "total": total}
