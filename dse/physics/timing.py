"""Step time: per-operation roofline with achievable-efficiency curves, hierarchical
collectives, the pipeline bubble and the optimizer step (see docs/model.md)."""

from __future__ import annotations

import numpy as np

from dse.physics.collectives import Network

BYTES = 2.0  # 16-bit activations, weights and gradients (mixed precision)
TILE = 128.0  # GEMM output tile edge for wave quantisation (cuBLAS/CUTLASS default class)


def gemm(m, n, k, batch, *, peak, clock_ratio, cu, eff_max, half_flops, hbm_bw, m_tiles=None):
    """Time of a (batched) GEMM ``[m x k] @ [k x n]``: ``(compute_s, memory_s)``.

    Roofline (Williams et al. 2009): compute-bound time = FLOPs / (peak x clock ratio x
    efficiency); the efficiency is ``eff_max`` times the wave-quantisation utilisation of
    ``cu`` compute units by ``TILE x TILE`` output tiles (Nvidia, "Matrix multiplication
    background" guide) times ``F / (F + half_flops)`` for a GEMM of ``F`` FLOPs (the fixed
    prologue, epilogue and tail of a kernel, which small GEMMs cannot amortise). Memory-bound time = operand and result bytes /
    achievable bandwidth. Whichever is larger is the time; it is returned in the matching
    slot so that only the compute-bound part scales with the clock.

    ``batch=None`` is a single GEMM (no multiplications by one); ``m_tiles`` is
    ``ceil(m / TILE)`` when the caller has it (the token dimension is shared by most GEMMs).
    """
    t_c = _compute_time(m, n, k, batch, peak=peak, clock_ratio=clock_ratio, cu=cu, eff_max=eff_max,
                        half_flops=half_flops, m_tiles=m_tiles)
    t_m = BYTES * (m * k + k * n + m * n) if batch is None else BYTES * batch * (m * k + k * n + m * n)
    t_m = t_m / hbm_bw
    bound = t_c >= t_m
    return np.where(bound, t_c, 0.0), np.where(bound, 0.0, t_m)


def _compute_time(m, n, k, batch, *, peak, clock_ratio, cu, eff_max, half_flops, hbm_bw=None, m_tiles=None):
    """The compute-bound time of :func:`gemm` alone."""
    flops = 2.0 * m * n * k
    tiles = (np.ceil(m * (1.0 / TILE)) if m_tiles is None else m_tiles) * np.ceil(n * (1.0 / TILE))
    if batch is not None:
        flops = flops * batch
        tiles = tiles * batch
    waves_cu = np.ceil(tiles / cu) * cu
    # flops / (peak * ratio * eff_max * (tiles / waves_cu) * flops / (flops + half))
    return (flops + half_flops) * waves_cu / (tiles * peak * clock_ratio * eff_max)


def step_time(*, shape, tp, pp, dp, v, m, b, sp, recompute, zero, hw, clock_ratio, net: Network,
              layer_params, embed_params, flash=None) -> dict[str, np.ndarray]:
    """Per-iteration time breakdown (seconds) and per-accelerator traffic (bytes).

    One micro-batch on one pipeline stage (``L/pp`` layers; the output layer on the last
    stage) costs forward + backward (backward GEMMs = 2 x forward FLOPs) + recomputation;
    1F1B runs ``m`` of them plus a bubble of ``(pp-1)/v`` (Narayanan et al. 2021).
    Tensor-parallel collectives (Megatron: 2 all-reduces forward and 2 backward per layer,
    or all-gather + reduce-scatter pairs with sequence parallelism, Korthikanti et al. 2022)
    are exposed; data-parallel gradient reduction overlaps with the last micro-batch's
    backward by ``dp_overlap``.
    """
    h, s, a = shape["hidden"], shape["seq_len"], shape["heads"]
    ffn, V = shape["ffn_hidden"], shape["vocab"]
    kv_dim = h * shape["kv_heads"] / a
    d = h / a
    T = b * s  # tokens per micro-batch
    g = dict(peak=hw["peak_flops"], clock_ratio=clock_ratio, cu=hw["compute_units"],
             eff_max=hw["matmul_eff_max"], half_flops=hw["matmul_half_gflop"] * 1e9,
             hbm_bw=hw["hbm_bw_bps"] * hw["memory_eff"])
    ones = np.ones_like(T)
    T_tiles = np.ceil(T * (1.0 / TILE))
    # forward GEMMs of one layer on one accelerator: (compute_s, memory_s)
    qkv = gemm(T, (h + 2 * kv_dim) / tp, h, None, m_tiles=T_tiles, **g)
    on = None if flash is None else flash > 0
    all_flash = on is not None and bool(on.all())
    if not all_flash:  # unfused attention: scores and context as two batched GEMMs
        score = gemm(s, s, d, b * a / tp, **g)
        ctx = gemm(s, d, s, b * a / tp, **g)
    if flash is not None:
        # FlashAttention (Dao et al. 2022): scores never reach HBM; one fused kernel at the
        # attention FLOPs (Q, K, V, O traffic only), counted as one batched GEMM.
        fa_c = _compute_time(s, s, d, 2.0 * b * a / tp, **g)
        fa_m = BYTES * 4.0 * T * h / tp / g["hbm_bw"]
        fa_bound = fa_c >= fa_m
        fused = (np.where(fa_bound, fa_c, 0.0), np.where(fa_bound, 0.0, fa_m))
        if all_flash:
            no_time = np.zeros_like(fa_c)
            score, ctx = fused, (no_time, no_time)
        else:
            score = (np.where(on, fused[0], score[0]), np.where(on, fused[1], score[1]))
            ctx = (np.where(on, 0.0, ctx[0]), np.where(on, 0.0, ctx[1]))
    proj = gemm(T, h, h / tp, None, m_tiles=T_tiles, **g)
    fc1 = gemm(T, (1 + shape["gated_mlp"]) * ffn / tp, h, None, m_tiles=T_tiles, **g)
    fc2 = gemm(T, h, ffn / tp, None, m_tiles=T_tiles, **g)
    out = gemm(T, V / tp, h, None, m_tiles=T_tiles, **g)
    dense_c = qkv[0] + proj[0] + fc1[0] + fc2[0]
    dense_m = qkv[1] + proj[1] + fc1[1] + fc2[1]
    attn_c, attn_m = score[0] + ctx[0], score[1] + ctx[1]

    # element-wise kernels, bytes per layer forward (Megatron kernels, 16-bit): two layer
    # norms (read + write, 4 B/elem each) and two fused bias-dropout-residual adds (7 B/elem),
    # replicated across tensor ranks unless sequence parallel; bias-GeLU (SwiGLU) on the
    # ffn activations; scale-mask-softmax and dropout on the s x s scores (9 B/elem).
    hbm = hw["hbm_bw_bps"] * hw["memory_eff"]
    rep = 22.0 * T * h / np.where(sp > 0, tp, 1)
    mlp_ew = (4.0 + 2.0 * shape["gated_mlp"]) * T * ffn / tp
    if all_flash:
        attn_ew = np.zeros_like(T)
    else:
        attn_ew = 9.0 * b * a * s * s / tp
        if flash is not None:
            attn_ew = np.where(on, 0.0, attn_ew)
    ew_dense_m = (rep + mlp_ew) / hbm
    ew_attn_m = attn_ew / hbm

    full = recompute == 2
    sel = recompute == 1
    # passes over the layer: forward 1, backward 2 (element-wise backward ~2x forward),
    # plus a forward for full recomputation; selective re-runs the attention core only.
    dense_passes = 3.0 + full
    attn_passes = 3.0 + (full | sel)
    layer_c = dense_c * dense_passes + attn_c * attn_passes
    layer_m = (dense_m + ew_dense_m) * dense_passes + (attn_m + ew_attn_m) * attn_passes
    overhead = hw["kernel_overhead_us"] * 1e-6 * dense_passes

    # tensor-parallel collectives per layer per micro-batch
    act_bytes = BYTES * T * h
    n_tp = 4.0 + 2.0 * full
    tp_ar = net.all_reduce(act_bytes, tp, 1)
    tp_layer = n_tp * tp_ar
    # output layer: vocab-parallel logits; all-reduces of the input gradient and 3 small
    # cross-entropy reductions of 4 B per token (Shoeybi et al. 2019)
    out_tp = tp_ar + 3.0 * net.all_reduce(4.0 * T, tp, 1)

    Ls = shape["layers"] / pp
    stage_c = Ls * layer_c
    stage_m = Ls * (layer_m) + Ls * overhead
    stage_tp = Ls * tp_layer
    out_c = 3.0 * out[0]
    out_m = 3.0 * out[1] + 3.0 * 4.0 * T * V / tp / hbm  # fp32 softmax cross entropy
    per_mb = stage_c + stage_m + stage_tp  # a transformer stage's time per micro-batch
    compute_s = m * (stage_c + out_c)
    memory_s = m * (stage_m + out_m)
    tp_s = m * (stage_tp + out_tp)

    # pipeline: point-to-point of activations (forward) and their gradients (backward);
    # scatter-gather over tensor ranks (Narayanan et al. 2021, section 4.1); the pipeline
    # stays in one scale-up domain only when the whole job does.
    n = tp * pp * dp
    same = n <= net.size
    p2p = net.p2p(act_bytes / tp, same)
    pp_s = np.where(pp > 1, 2.0 * v * (m + pp - 1) * p2p, 0.0)
    # tied embeddings: the first and last stage all-reduce the embedding gradient
    emb_grad = BYTES * shape["vocab"] * h / tp
    tied = (shape["tied_embeddings"] > 0) & (pp > 1)
    pp_s = pp_s + np.where(tied, net.all_reduce(emb_grad, 2.0 * ones, tp * dp * (pp - 1)), 0.0)
    bubble_s = (pp - 1) / v * per_mb

    # data parallel: gradient reduce-scatter + parameter all-gather (ZeRO >= 1) or all-reduce
    stage_params = Ls * layer_params / tp + embed_params / tp
    grad_bytes = BYTES * stage_params
    dp_total = net.all_reduce(grad_bytes, dp, tp)
    backward_last = (Ls * (layer_c + layer_m) * 2.0 / 3.0)
    dp_s = np.maximum(dp_total - hw["dp_overlap"] * backward_last, 0.0)
    # ZeRO-3: all-gather the stage's weights for every forward and backward of every micro-batch
    z3 = np.where(zero >= 3, 2.0 * m * net.all_gather(grad_bytes, dp, tp), 0.0)
    dp_s = dp_s + np.maximum(z3 - compute_s, 0.0)

    # optimizer: Adam reads/writes fp32 master, momentum, variance (24 B), reads the
    # gradient (4 B) and writes the 16-bit weight (2 B) per parameter it owns
    owned = stage_params / np.where(zero >= 1, dp, 1)
    opt_bytes = 30.0 * owned
    optimizer_s = opt_bytes / hbm

    step_s = compute_s + memory_s + tp_s + pp_s + dp_s + bubble_s + optimizer_s
    passes_bytes = (dense_passes * (rep + mlp_ew) + attn_passes * attn_ew) * Ls
    hbm_bytes = m * passes_bytes + opt_bytes + 3.0 * m * BYTES * Ls * (layer_params / tp)
    tp_up, tp_out = net.traffic(act_bytes, tp, 1)
    dp_up, dp_out = net.traffic(grad_bytes, dp, tp)
    n_tp_total = m * (Ls * n_tp + 1.0)
    p2p_bytes = np.where(pp > 1, 2.0 * v * m * act_bytes / tp, 0.0)
    scaleup_bytes = n_tp_total * tp_up + dp_up + np.where(same, p2p_bytes, 0.0)
    scaleout_bytes = n_tp_total * tp_out + dp_out + np.where(same, 0.0, p2p_bytes)
    return {
        "compute_s": compute_s, "memory_s": memory_s, "tp_comm_s": tp_s, "pp_comm_s": pp_s,
        "dp_comm_s": dp_s, "bubble_s": bubble_s, "optimizer_s": optimizer_s, "step_s": step_s,
        "overhead_s": m * Ls * overhead,
        "hbm_bytes": hbm_bytes, "scaleup_bytes": scaleup_bytes, "scaleout_bytes": scaleout_bytes,
    }
