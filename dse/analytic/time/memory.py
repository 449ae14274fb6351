"""Memory per accelerator: weights, gradients, optimizer state and activations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes per accelerator on the most loaded pipeline stage, by kind."""

    weights_bytes: np.ndarray
    gradients_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    activations_bytes: np.ndarray
    reserved_bytes: np.ndarray
    total_bytes: np.ndarray


def activation_bytes_per_layer(s, b, h, a, tp, sp, recompute, flash) -> np.ndarray:
    """Activation bytes one layer keeps for the backward pass, per micro-batch (16-bit).

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models", Table 2: none ``sbh(10 + 24/t + 5as/(ht))``; with sequence parallelism
    ``sbh(34 + 5as/h)/t``; selective recomputation drops the ``5as/h`` attention term;
    full recomputation keeps only the layer input, ``2sbh`` (``/t`` with sequence parallelism).
    """
    none, selective, full = _activation_variants(s, b, h, a, tp, sp, flash)
    return np.where(recompute == 2, full, np.where(recompute == 1, selective, none))


def _activation_variants(s, b, h, a, tp, sp, flash) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`activation_bytes_per_layer` for no, selective and full recomputation."""
    sbh = s * b * h
    attn = np.where(flash > 0, 0.0, 5.0 * a * s / h)  # FlashAttention keeps no s x s scores
    replicated = np.where(sp > 0, 10.0 / tp, 10.0)
    none = sbh * (replicated + 24.0 / tp + attn / tp)
    selective = sbh * (replicated + 24.0 / tp)
    full = 2.0 * sbh / np.where(sp > 0, tp, 1)
    return none, selective, full


def memory_breakdown(
    *, layer_params: np.ndarray, embed_params: np.ndarray, layers: np.ndarray, tp: np.ndarray,
    pp: np.ndarray, dp: np.ndarray, interleave: np.ndarray, zero_stage: np.ndarray,
    micro_batch: np.ndarray, micro_batches: np.ndarray, seq_len: np.ndarray, hidden: np.ndarray,
    heads: np.ndarray, vocab: np.ndarray, sp: np.ndarray, recompute: np.ndarray,
    reserved: np.ndarray, flash: np.ndarray,
) -> MemoryBreakdown:
    """Bytes per accelerator on the most loaded pipeline stage (the first).

    Mixed-precision Adam: weights 2 B/param, gradients 2 B/param, optimizer 12 B/param
    (fp32 master copy, momentum, variance; Rajbhandari et al. 2020, ZeRO, section 3.1),
    sharded over data parallel: ZeRO 1 the optimizer, 2 also gradients, 3 also weights.
    The first stage holds the input embedding (and, with an untied output layer on the
    last stage, the same size again there). Activations: under 1F1B the first stage has
    ``min(pp, m)`` micro-batches in flight over ``L/pp`` layers (Narayanan et al. 2021),
    times ``1 + (pp-1)/(pp v)`` with ``v`` interleaved chunks (Korthikanti et al. 2022,
    section 4.2.3); full recomputation adds one layer's full activations as working set;
    the output layer adds fp32 logits ``4 s b V / t`` (cross entropy).
    """
    stage_params = layers / pp * layer_params / tp + embed_params / tp
    weights = 2.0 * stage_params / np.where(zero_stage >= 3, dp, 1)
    grads = 2.0 * stage_params / np.where(zero_stage >= 2, dp, 1)
    optimizer = 12.0 * stage_params / np.where(zero_stage >= 1, dp, 1)
    none, selective, full = _activation_variants(seq_len, micro_batch, hidden, heads, tp, sp, flash)
    per_layer = np.where(recompute == 2, full, np.where(recompute == 1, selective, none))
    in_flight = np.minimum(pp, micro_batches) * (1.0 + np.where(interleave > 1, (pp - 1) / (pp * interleave), 0.0))
    activations = per_layer * layers / pp * in_flight
    working = np.where(recompute == 2, none, 0.0)  # one layer's activations without recomputation
    logits = np.where(pp == 1, 4.0 * seq_len * micro_batch * vocab / tp, 0.0)
    activations = activations + working + logits
    total = weights + grads + optimizer + activations + reserved
    return MemoryBreakdown(weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=optimizer,
                           activations_bytes=activations, reserved_bytes=reserved, total_bytes=total)
