"""One transformer layer on one accelerator, per micro-batch: its GEMMs, the attention core
(unfused or FlashAttention), the element-wise kernels' HBM traffic and the passes that
forward, backward and activation recomputation make over it (docs/model.md, section 6).

``T`` is the tokens one accelerator holds per micro-batch: ``b s / cp`` with context
parallelism, whose ranks each attend their ``s / cp`` queries to all ``s`` keys."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dse.analytic.rows import where, where_or_zero
from dse.analytic.time import adapters, experts
from dse.analytic.time.gemm import BYTES, Roofline, compute_time, gemm
from dse.analytic.time.parallelism import Layout

#: share of the s x s attention blocks a causal fused-attention kernel computes
CAUSAL_SHARE = 0.5
#: HBM bytes per logit of Megatron's vocab-parallel cross entropy over forward and backward
#: (megatron/mpu/cross_entropy.py): the fp32 cast of the logits (read 2, write 4), max (4),
#: subtract the max (8), exp (8), sum (4), divide into the softmax kept for backward (8);
#: backward: scale by the output gradient (8) and the cast back to 16 bit (6)
CROSS_ENTROPY_BYTES = 52.0
#: HBM bytes per feed-forward activation element over forward and backward of a squared ReLU
#: run as eager PyTorch ops (Megatron-Core's MLP fuses only GeLU and SwiGLU; Nemotron-4's
#: ``torch.pow(F.relu(x), 2)``, NeMo ``NemotronConfig.activation_func``), 16-bit: forward relu
#: (read 2, write 2) and pow (2, 2); backward ``PowBackward0`` = ``grad * (2 * x.pow(1))``:
#: the pow(1) copy (2, 2), the scalar product (2, 2), the product with the gradient (4, 2),
#: and ``ReluBackward0`` / ``threshold_backward`` (4, 2): 8 + 20 = 28 B
SQUARED_RELU_BYTES = 28.0
#: the fused bias-GeLU's bytes over the same three passes (read 2 + write 2 per pass)
FUSED_ACTIVATION_BYTES = 12.0


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Time of one layer per micro-batch on one accelerator, forward + backward +
    recomputation (s), and the passes and element-wise bytes behind it."""

    compute_s: np.ndarray  # clock-bound GEMM time
    memory_s: np.ndarray  # memory-bound GEMM time and element-wise kernels
    dense_gemm_s: (
        np.ndarray
    )  # time of the dense GEMMs, clock- or memory-bound, all passes (hides TP traffic)
    attn_core_s: np.ndarray  # time of the attention core's products, all passes (hides CP traffic)
    overhead_s: np.ndarray  # fixed per-kernel launch cost, all passes
    host_s: np.ndarray  # host (CPU) dispatch time of the layer's kernels, all passes
    dense_passes: np.ndarray  # passes over the dense part (3 or 4)
    attn_passes: np.ndarray  # passes over the attention core (3 or 4)
    full_recompute: np.ndarray  # bool: full activation recomputation
    dense_ew_bytes: np.ndarray  # element-wise bytes of one forward pass, dense part
    attn_ew_bytes: np.ndarray  # element-wise bytes of one forward pass, attention core


@dataclass(frozen=True, slots=True)
class Kernels:
    """How one accelerator runs a micro-batch's kernels: the tokens it holds, the roofline
    terms of its GEMMs and how much more an unfused stack's element-wise kernels move."""

    tokens: np.ndarray  # T = b s / cp, tokens per micro-batch on this accelerator
    token_tiles: np.ndarray  # ceil(T / TILE)
    roofline: Roofline  # at the candidate's precision (the linear layers)
    roofline16: Roofline  # at 16 bit (attention, output layer)
    eager: np.ndarray  # 1 for fused kernels, the eager stack's byte factor otherwise
    # the highest share of the 16-bit peak the stack's fused attention reaches on the part
    # (FlashAttention-2 on Hopper; inf: the fitted attention efficiency alone)
    attention_cap: np.ndarray
    # 1 where the model's squared-ReLU activation runs as eager PyTorch ops (the stack
    # compiles no activation and the model has one), else 0
    eager_squared_relu: np.ndarray
    # the keys a query attends to where packed documents are masked apart (the document's
    # tokens, at most the sequence's); None: the whole sequence
    attention_span: np.ndarray | None = None


def attention_core(shape, tp, cp, b, flash, k: Kernels, attention_eff) -> tuple[tuple, tuple]:
    """Forward time of the attention core ``softmax(QK^T) V``: ``(score, ctx)``, each a
    ``(compute_s, memory_s)`` pair (``k``: the micro-batch's tokens on one accelerator, its
    16-bit roofline terms, the stack's ``cap`` and the documents' ``span`` below).

    Unfused: scores and context as two batched GEMMs (``b a / t`` heads of ``s/cp x s x d``).
    FlashAttention (Dao et al. 2022): scores never reach HBM; one fused kernel over the
    unmasked (causal: lower) half of the scores (Q, K, V, O traffic only) at
    ``attention_eff`` of a large GEMM's efficiency, at most ``cap`` of the peak (a kernel
    not written for the part: FlashAttention-2 on Hopper), counted as one batched GEMM in
    ``score``. Packed documents masked apart (``span``: each query's document, at most the
    sequence): the fused kernel skips the blocks between documents (FlashAttention's
    variable-length kernels, ``cu_seqlens``), so a query attends to ``span`` keys, half of
    them on average under the causal mask; unfused attention computes every score.
    """
    s, a, d = shape.seq_len, shape.heads, shape.head_dim
    T, g, cap, span = k.tokens, k.roofline16, k.attention_cap, k.attention_span
    mla = shape.kv_lora_rank > 0
    any_mla = bool(mla.any())
    dims = shape.attention if any_mla else None
    qk = dims.qk if any_mla else d  # score width (MLA: + the decoupled RoPE width)
    s_q = s / cp
    on = flash > 0
    all_flash = bool(on.all())
    if not all_flash:  # unfused attention: scores and context as two batched GEMMs
        score = gemm(s_q, s, qk, b * a / tp, g)
        ctx = gemm(s_q, d, s, b * a / tp, g)
    # causal training: the fused kernel skips the masked upper triangle, half the score blocks
    # (Dao 2023, FlashAttention-2, section 3.1.1); unfused attention computes all of them
    width = (qk + d) / 2.0 if any_mla else d  # the two products' mean inner width
    fa_c = CAUSAL_SHARE * compute_time(
        s_q,
        s if span is None else span,
        width,
        2.0 * b * a / tp,
        replace(g, eff_max=np.minimum(g.eff_max * attention_eff, cap)),
    )
    # Q, K, V and O once: 4 T a d with as many key-value as query heads (and for GQA, whose
    # smaller K and V the count does not shrink); MLA's K and V are per head
    qkvo = a * d * 4.0
    if any_mla:
        qkvo = where(mla, dims.q + dims.k + dims.v + dims.o, qkvo)
    fa_m = BYTES * T * qkvo / tp / g.hbm_bw_bps
    fa_bound = fa_c >= fa_m
    fused = (where_or_zero(fa_bound, fa_c), where_or_zero(~fa_bound, fa_m))
    if all_flash:
        no_time = np.zeros_like(fa_c)
        return fused, (no_time, no_time)
    score = (where(on, fused[0], score[0]), where(on, fused[1], score[1]))
    ctx = (where(on, 0.0, ctx[0]), where(on, 0.0, ctx[1]))
    return score, ctx


def dense_gemms(shape, tp, T, T_tiles, g, ex) -> tuple[np.ndarray, np.ndarray]:
    """Forward ``(compute_s, memory_s)`` of a layer's GEMMs outside the attention core:
    the attention projections (:func:`attention_projections`) and the feed-forward block,
    split over ``tp`` ranks (Megatron, Shoeybi et al. 2019): the dense MLP's first (two with
    a gated MLP) and second matrix, or, on the MoE share ``ex.frac`` of the layers, the
    experts (:func:`~dse.analytic.time.experts.ffn_gemms`)."""
    h, ffn = shape.hidden, shape.ffn_hidden
    attn_c, attn_m = attention_projections(shape, tp, T, T_tiles, g)
    fc1 = gemm(T, (1 + shape.gated_mlp) * ffn / tp, h, None, g, m_tiles=T_tiles)
    fc2 = gemm(T, h, ffn / tp, None, g, m_tiles=T_tiles)
    mlp_c, mlp_m = fc1[0] + fc2[0], fc1[1] + fc2[1]
    if ex.on:
        moe_c, moe_m = experts.ffn_gemms(shape, ex, tp, T, T_tiles, g)
        mlp_c = (1.0 - ex.frac) * mlp_c + ex.frac * moe_c
        mlp_m = (1.0 - ex.frac) * mlp_m + ex.frac * moe_m
    return attn_c + mlp_c, attn_m + mlp_m


def op_recompute_share(shape) -> np.ndarray:
    """Share of a dense block's forward GEMM FLOPs that torchtitan's op-level selective
    activation checkpointing recomputes: the output of every second ``mm`` of the block is
    not saved (torchtitan 9dec370 ``parallelisms/parallelize_llama.py``
    ``_apply_ac_to_transformer_block``, ``selective_ac_option = 'op'``: ``_save_list`` holds
    ``aten.mm`` and the SDPA kernels, and a ``mm`` whose count in the block is even is
    recomputed). In a block's forward order wq, wk, wv, wo, w1, w3, w2 (gated MLP; w1, w2
    ungated) that is wk, wo and w3 (wk and wo ungated); about 36% of a Llama 3 8B block's."""
    h, f = shape.hidden, shape.ffn_hidden
    dims = shape.attention
    gated = shape.gated_mlp > 0
    total = h * (dims.q + dims.k + dims.v + dims.o) + where(gated, 3.0, 2.0) * h * f
    redone = h * (dims.k + dims.o) + where(gated, h * f, 0.0)
    return redone / total


def attention_projections(shape, tp, T, T_tiles, g) -> tuple[np.ndarray, np.ndarray]:
    """Forward ``(compute_s, memory_s)`` of the attention's projections: QKV (grouped
    key-value heads) and the output projection, or with MLA (DeepSeek-V2/V3) the query and
    key-value down-projections (not split over tensor ranks), their up-projections and the
    output projection."""
    h = shape.hidden
    dims = shape.attention
    qkv = gemm(T, (dims.q + dims.k + dims.v) / tp, h, None, g, m_tiles=T_tiles)
    proj = gemm(T, h, dims.o / tp, None, g, m_tiles=T_tiles)
    c, m = qkv[0] + proj[0], qkv[1] + proj[1]
    mla = shape.kv_lora_rank > 0
    if mla.any():
        rq, rkv, dr = shape.q_lora_rank, shape.kv_lora_rank, shape.rope_head_dim
        with_q_rank = rq > 0
        q_a = gemm(T, rq, h, None, g, m_tiles=T_tiles)
        q_b = gemm(T, dims.q / tp, rq, None, g, m_tiles=T_tiles)
        q_full = gemm(T, dims.q / tp, h, None, g, m_tiles=T_tiles)
        kv_a = gemm(T, rkv + dr, h, None, g, m_tiles=T_tiles)
        kv_b = gemm(T, (dims.k - shape.heads * dr + dims.v) / tp, rkv, None, g, m_tiles=T_tiles)
        q_c = where(with_q_rank, q_a[0] + q_b[0], q_full[0])
        q_m = where(with_q_rank, q_a[1] + q_b[1], q_full[1])
        c = where(mla, q_c + kv_a[0] + kv_b[0] + proj[0], c)
        m = where(mla, q_m + kv_a[1] + kv_b[1] + proj[1], m)
    return c, m


def elementwise_bytes(
    shape, lay: Layout, T, fp8, eager, ex, eager_squared_relu=0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HBM bytes of a layer's element-wise kernels, one forward pass of ``T`` tokens on one
    accelerator: ``(replicated, mlp, attention)``.

    Megatron kernels, 16-bit: two layer norms (read + write, 4 B/elem each) and two fused
    bias-dropout-residual adds (7 B/elem), replicated across tensor ranks unless sequence
    parallel; bias-GeLU (SwiGLU) on the ffn activations; scale-mask-softmax and dropout on
    the s x s scores (9 B/elem), none with FlashAttention; a squared ReLU run as eager ops
    (``eager_squared_relu``) moves :data:`SQUARED_RELU_BYTES` over the three passes where
    the fused activation moves :data:`FUSED_ACTIVATION_BYTES`. ``eager``: the factor by which
    unfused (eager PyTorch) kernels move more bytes (1 for fused stacks). fp8 (Transformer
    Engine): each linear layer's input is cast, read 2 B and written 1 B per element
    (QKV and FC1 inputs ``T h``, projection and FC2 inputs ``T h / t`` and ``T f / t``). On
    the MoE share of the layers the MLP's kernels are the experts'
    (:func:`~dse.analytic.time.experts.elementwise_bytes`), and so are the inputs fp8 casts
    (:func:`~dse.analytic.time.experts.cast_elements`: the dispatched ``k c_f`` copies of
    each token).
    """
    h, s, a = shape.hidden, shape.seq_len, shape.heads
    tp, cp, sp, b, flash = (
        lay.tp,
        lay.cp,
        lay.sequence_parallel,
        lay.micro_batch,
        lay.flash_attention,
    )
    rep = 22.0 * T * h / where(sp > 0, tp, 1) * eager
    mlp_ew = (4.0 + 2.0 * shape.gated_mlp) * T * shape.ffn_hidden / tp * eager
    if np.any(eager_squared_relu):  # per forward pass, as the other bytes (x 3 passes)
        extra = (SQUARED_RELU_BYTES - FUSED_ACTIVATION_BYTES) / 3.0
        mlp_ew = mlp_ew + eager_squared_relu * extra * T * shape.ffn_hidden / tp
    if ex.on:
        mlp_ew = (1.0 - ex.frac) * mlp_ew + ex.frac * experts.elementwise_bytes(
            shape, ex, tp, T, eager
        )
    if fp8.any():
        cast = 3.0 * T * (2.0 * h + (h + shape.ffn_hidden) / tp)
        if ex.on:  # the experts' inputs in place of the dense MLP's on the MoE share
            moe_cast = 3.0 * (T * (h + h / tp) + experts.cast_elements(shape, ex, tp, T))
            cast = where(ex.frac > 0, (1.0 - ex.frac) * cast + ex.frac * moe_cast, cast)
        rep = rep + where(fp8 > 0, cast, 0.0)
    on = flash > 0
    if bool(on.all()):
        attn_ew = np.zeros_like(T)
    else:
        attn_ew = 9.0 * b * a * (s / cp) * s / tp * eager
        attn_ew = where(on, 0.0, attn_ew)
    return rep, mlp_ew, attn_ew


def layer_time(shape, lay: Layout, ex, hw, k: Kernels, ad=None) -> LayerTime:
    """One layer per micro-batch: forward 1 pass, backward 2 (backward GEMMs = 2 x forward
    FLOPs; element-wise backward ~2x forward), plus a forward for full recomputation;
    selective recomputation re-runs the attention core only (Korthikanti et al. 2022).
    FlashAttention's backward recomputes the scores: 5 matrix products against the
    forward's 2, so 2.5 forward passes (Dao 2023, FlashAttention-2, section 3.1.2).
    ``k``: the micro-batch's :class:`Kernels` on one accelerator; ``ex``: the
    :class:`~dse.analytic.time.experts.ExpertLayout`. LoRA fine-tuning (``ad``,
    :class:`~dse.analytic.time.adapters.Adapters`): the frozen weights' GEMMs skip the
    weight gradient (backward = 1 x forward), the adapters' GEMMs (16-bit) take every pass."""
    tp, cp, b, recompute, flash = (
        lay.tp,
        lay.cp,
        lay.micro_batch,
        lay.recompute,
        lay.flash_attention,
    )
    T, T_tiles, g, g16, eager = k.tokens, k.token_tiles, k.roofline, k.roofline16, k.eager
    dense_c, dense_m = dense_gemms(shape, tp, T, T_tiles, g, ex)
    score, ctx = attention_core(shape, tp, cp, b, flash, k, hw.attention_eff)
    attn_c, attn_m = score[0] + ctx[0], score[1] + ctx[1]
    hbm = g.hbm_bw_bps  # (hw.hbm_bw_bps * hw.memory_eff, the roofline's)
    rep, mlp_ew, attn_ew = elementwise_bytes(shape, lay, T, hw.fp8, eager, ex, k.eager_squared_relu)
    ew_dense_m = (rep + mlp_ew) / hbm
    ew_attn_m = attn_ew / hbm
    full = recompute == 2
    sel = recompute == 1
    # torchtitan's op-level selective AC (recompute code 3): every second matmul of a block
    # re-run (op_recompute_share of its GEMMs) and every element-wise op, the attention
    # kernel's output saved (not recomputed)
    op = recompute == 3
    dense_passes = 3.0 + full + where(op, op_recompute_share(shape), 0.0)
    ew_passes = 3.0 + (full | op)
    attn_passes = where(flash > 0, 3.5, 3.0) + (full | sel)
    gemm_c, gemm_m = dense_c * dense_passes, dense_m * dense_passes
    gemm_s = (dense_c + dense_m) * dense_passes
    launch_passes = dense_passes  # (the host's and the launches' work per layer pass)
    if ad is not None:  # frozen weights: one pass fewer; the adapters: every pass
        frozen_passes = dense_passes - ad.lora
        ad_c, ad_m = adapters.forward_gemms(shape, ad, tp, T, g16)
        ad_passes = 3.0 + full
        gemm_c = dense_c * frozen_passes + ad_c * ad_passes
        gemm_m = dense_m * frozen_passes + ad_m * ad_passes
        gemm_s = gemm_c + gemm_m
        # the adapters' kernels are more operations for the host to issue and launch
        launch_passes = dense_passes * adapters.host_factor(ad)
    memory_s = gemm_m + ew_dense_m * ew_passes + (attn_m + ew_attn_m) * attn_passes
    dense_ew_bytes = rep + mlp_ew
    if ad is not None:  # the adapters' scale and addition, and their input gradients' sums
        ad_bytes = adapters.elementwise_bytes(shape, ad, tp, T, full)  # (every pass)
        memory_s = memory_s + ad_bytes / hbm
        # in the traffic too (dense_passes x dense_ew_bytes), for the HBM's energy
        dense_ew_bytes = dense_ew_bytes + ad_bytes / dense_passes
    return LayerTime(
        compute_s=gemm_c + attn_c * attn_passes,
        memory_s=memory_s,
        # the overlap windows are the kernels' whole time: a GEMM that turns memory-bound at a
        # higher clock still runs beside the traffic it hides
        dense_gemm_s=gemm_s,
        attn_core_s=(attn_c + attn_m) * attn_passes,
        overhead_s=hw.kernel_overhead_us * 1e-6 * launch_passes,
        host_s=hw.host_dispatch_us * 1e-6 * launch_passes,
        dense_passes=dense_passes,
        attn_passes=attn_passes,
        full_recompute=full,
        dense_ew_bytes=dense_ew_bytes,
        attn_ew_bytes=attn_ew,
    )


def output_layer(shape, tp, T, T_tiles, g16, passes=3.0) -> tuple[np.ndarray, np.ndarray]:
    """Forward + backward ``(compute_s, memory_s)`` of the output layer on the last stage:
    the vocab-parallel logits GEMM (``passes``: 3, or 2 where it is frozen and gets no
    weight gradient; 16-bit) and the fp32 softmax cross entropy,
    :data:`CROSS_ENTROPY_BYTES` per logit."""
    V = shape.vocab
    out = gemm(T, V / tp, shape.hidden, None, g16, m_tiles=T_tiles)
    return passes * out[0], passes * out[1] + CROSS_ENTROPY_BYTES * T * V / tp / g16.hbm_bw_bps
