"""One transformer layer on one accelerator, per micro-batch: its GEMMs, the attention core
(unfused or FlashAttention), the element-wise kernels' HBM traffic and the passes that
forward, backward and activation recomputation make over it (docs/model.md, section 3)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.time.gemm import BYTES, compute_time, gemm


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Time of one layer per micro-batch on one accelerator, forward + backward +
    recomputation (s), and the passes and element-wise bytes behind it."""

    compute_s: np.ndarray        # clock-bound GEMM time
    memory_s: np.ndarray         # memory-bound GEMM time and element-wise kernels
    overhead_s: np.ndarray       # fixed per-kernel launch cost, all passes
    dense_passes: np.ndarray     # passes over the dense part (3 or 4)
    attn_passes: np.ndarray      # passes over the attention core (3 or 4)
    full_recompute: np.ndarray   # bool: full activation recomputation
    dense_ew_bytes: np.ndarray   # element-wise bytes of one forward pass, dense part
    attn_ew_bytes: np.ndarray    # element-wise bytes of one forward pass, attention core


def attention_core(shape, tp, b, T, flash, g) -> tuple[tuple, tuple]:
    """Forward time of the attention core ``softmax(QK^T) V``: ``(score, ctx)``, each a
    ``(compute_s, memory_s)`` pair.

    Unfused: scores and context as two batched GEMMs (``b a / t`` heads of ``s x s x d``).
    FlashAttention (Dao et al. 2022): scores never reach HBM; one fused kernel at the
    attention FLOPs (Q, K, V, O traffic only), counted as one batched GEMM in ``score``.
    """
    h, s, a = shape["hidden"], shape["seq_len"], shape["heads"]
    d = h / a
    on = flash > 0
    all_flash = bool(on.all())
    if not all_flash:  # unfused attention: scores and context as two batched GEMMs
        score = gemm(s, s, d, b * a / tp, **g)
        ctx = gemm(s, d, s, b * a / tp, **g)
    fa_c = compute_time(s, s, d, 2.0 * b * a / tp, **g)
    fa_m = BYTES * 4.0 * T * h / tp / g["hbm_bw"]
    fa_bound = fa_c >= fa_m
    fused = (np.where(fa_bound, fa_c, 0.0), np.where(fa_bound, 0.0, fa_m))
    if all_flash:
        no_time = np.zeros_like(fa_c)
        return fused, (no_time, no_time)
    score = (np.where(on, fused[0], score[0]), np.where(on, fused[1], score[1]))
    ctx = (np.where(on, 0.0, ctx[0]), np.where(on, 0.0, ctx[1]))
    return score, ctx


def dense_gemms(shape, tp, T, T_tiles, g) -> tuple[np.ndarray, np.ndarray]:
    """Forward ``(compute_s, memory_s)`` of a layer's dense GEMMs: QKV projection (grouped
    key-value heads), attention output projection, the MLP's first (two with a gated MLP)
    and second matrix, split over ``tp`` ranks (Megatron, Shoeybi et al. 2019)."""
    h, ffn = shape["hidden"], shape["ffn_hidden"]
    kv_dim = h * shape["kv_heads"] / shape["heads"]
    qkv = gemm(T, (h + 2 * kv_dim) / tp, h, None, m_tiles=T_tiles, **g)
    proj = gemm(T, h, h / tp, None, m_tiles=T_tiles, **g)
    fc1 = gemm(T, (1 + shape["gated_mlp"]) * ffn / tp, h, None, m_tiles=T_tiles, **g)
    fc2 = gemm(T, h, ffn / tp, None, m_tiles=T_tiles, **g)
    return qkv[0] + proj[0] + fc1[0] + fc2[0], qkv[1] + proj[1] + fc1[1] + fc2[1]


def elementwise_bytes(shape, tp, sp, b, T, flash) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HBM bytes of a layer's element-wise kernels, one forward pass: ``(replicated, mlp,
    attention)``.

    Megatron kernels, 16-bit: two layer norms (read + write, 4 B/elem each) and two fused
    bias-dropout-residual adds (7 B/elem), replicated across tensor ranks unless sequence
    parallel; bias-GeLU (SwiGLU) on the ffn activations; scale-mask-softmax and dropout on
    the s x s scores (9 B/elem), none with FlashAttention.
    """
    h, s, a = shape["hidden"], shape["seq_len"], shape["heads"]
    rep = 22.0 * T * h / np.where(sp > 0, tp, 1)
    mlp_ew = (4.0 + 2.0 * shape["gated_mlp"]) * T * shape["ffn_hidden"] / tp
    on = flash > 0
    if bool(on.all()):
        attn_ew = np.zeros_like(T)
    else:
        attn_ew = 9.0 * b * a * s * s / tp
        attn_ew = np.where(on, 0.0, attn_ew)
    return rep, mlp_ew, attn_ew


def layer_time(shape, tp, sp, b, T, T_tiles, recompute, flash, hw, g) -> LayerTime:
    """One layer per micro-batch: forward 1 pass, backward 2 (backward GEMMs = 2 x forward
    FLOPs; element-wise backward ~2x forward), plus a forward for full recomputation;
    selective recomputation re-runs the attention core only (Korthikanti et al. 2022).
    ``T``: tokens per micro-batch, ``T_tiles``: ``ceil(T / TILE)``."""
    dense_c, dense_m = dense_gemms(shape, tp, T, T_tiles, g)
    score, ctx = attention_core(shape, tp, b, T, flash, g)
    attn_c, attn_m = score[0] + ctx[0], score[1] + ctx[1]
    hbm = hw.hbm_bw_bps * hw.memory_eff
    rep, mlp_ew, attn_ew = elementwise_bytes(shape, tp, sp, b, T, flash)
    ew_dense_m = (rep + mlp_ew) / hbm
    ew_attn_m = attn_ew / hbm
    full = recompute == 2
    sel = recompute == 1
    dense_passes = 3.0 + full
    attn_passes = 3.0 + (full | sel)
    return LayerTime(
        compute_s=dense_c * dense_passes + attn_c * attn_passes,
        memory_s=(dense_m + ew_dense_m) * dense_passes + (attn_m + ew_attn_m) * attn_passes,
        overhead_s=hw.kernel_overhead_us * 1e-6 * dense_passes,
        dense_passes=dense_passes, attn_passes=attn_passes, full_recompute=full,
        dense_ew_bytes=rep + mlp_ew, attn_ew_bytes=attn_ew)


def output_layer(shape, tp, T, T_tiles, g) -> tuple[np.ndarray, np.ndarray]:
    """Forward + backward ``(compute_s, memory_s)`` of the output layer on the last stage:
    vocab-parallel logits GEMM (3 passes) and an fp32 softmax cross entropy (4 B per logit,
    read and written over the 3 passes)."""
    V = shape["vocab"]
    out = gemm(T, V / tp, shape["hidden"], None, m_tiles=T_tiles, **g)
    return 3.0 * out[0], 3.0 * out[1] + 3.0 * 4.0 * T * V / tp / g["hbm_bw"]
