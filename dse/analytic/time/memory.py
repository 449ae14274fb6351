"""Memory per accelerator: weights, gradients, optimizer state and activations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.time.parallelism import Layout, Stages, part_embeddings
from dse.analytic.time.workload import ModelShape, ParameterCounts

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
    #: this accelerator's share of the training state a checkpoint writes: weights and
    #: optimizer state, each tensor once, its write spread over the ranks holding a copy
    checkpoint_bytes: np.ndarray


def activation_bytes_per_layer(
    s, b, h, a, tp, sp, recompute, flash, split=(24.0, 24.0, 0.0)
) -> np.ndarray:
    """Activation bytes one layer keeps for the backward pass, per micro-batch (16-bit).

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models", Table 2: none ``sbh(10 + 24/t + 5as/(ht))``; with sequence parallelism
    ``sbh(34 + 5as/h)/t``; selective recomputation drops the ``5as/h`` attention term;
    full recomputation keeps only the layer input, ``2sbh`` (``/t`` with sequence parallelism).
    ``split``: per token in units of ``h`` bytes, the tensor-parallel share without and with
    selective recomputation (24 for the paper's GPT layer) and what is kept beyond the
    paper's replicated 10 (:func:`split_bytes_per_hidden` for another shape).
    """
    none, selective, full = _activation_variants(s, b, h, a, tp, sp, flash, split)
    return np.where(recompute == 2, full, np.where(recompute == 1, selective, none))


def split_bytes_per_hidden(shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shape's per-token activations beyond Korthikanti et al.'s GPT layer, in units of
    ``h`` bytes: the tensor-parallel part without and with selective recomputation, and
    what the layer keeps on every tensor rank besides the paper's replicated ``10``.

    The tensor-parallel part: the attention's Q, K, V and the output projection's input,
    ``2 (q + k + v + o)`` (grouped key-value heads, a head width other than ``h / a``,
    MLA's expanded heads: :class:`~dse.analytic.time.workload.AttentionDims`), and the
    feed-forward block's ``(4 + 2g) f``: the up projection's output and the activation's
    output, the gate's output too when gated (the fused SwiGLU keeps its input, ``2 x 2f``
    bytes, and output, ``2f``). The paper's GPT layer (``q = k = v = o = h``, ``f = 4h``,
    ungated) gives its ``24``. The replicated ``10 sbh`` (two norms' inputs, the attention's
    and the MLP's inputs, two dropout masks) stays as the paper has it.
    MLA: the query and key-value latents, ``2 (r_q + r_kv + d_r)``, inputs of the
    up-projections, are kept on every tensor rank (Megatron-Core duplicates the
    down-projections); selective recomputation also recomputes the up-projections
    (DeepSeek-V3 report, section 3.2.3; Megatron-Core ``--recompute-modules mla_up_proj``),
    so the layer keeps the latents, not the expanded heads."""
    dims = shape.attention
    h = shape.hidden
    mlp = (4.0 + 2.0 * shape.gated_mlp) * shape.ffn_hidden
    none = (2.0 * (dims.q + dims.k + dims.v + dims.o) + mlp) / h
    mla = shape.kv_lora_rank > 0
    if not mla.any():
        return none, none, np.zeros_like(none)
    rq = shape.q_lora_rank
    latents = np.where(
        mla, np.where(rq > 0, rq, 0.0) + shape.kv_lora_rank + shape.rope_head_dim, 0.0
    )
    # without a query rank the queries come straight from the layer's input: no query latent
    selective = np.where(mla, (2.0 * (np.where(rq > 0, 0.0, dims.q) + dims.o) + mlp) / h, none)
    return none, selective, 2.0 * latents / h


def _activation_variants(
    s, b, h, a, tp, sp, flash, split=(24.0, 24.0, 0.0)
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`activation_bytes_per_layer` for no, selective and full recomputation
    (``split``: :func:`split_bytes_per_hidden`'s three parts)."""
    sbh = s * b * h
    attn = np.where(flash > 0, 0.0, 5.0 * a * s / h)  # FlashAttention keeps no s x s scores
    replicated = (10.0 + split[2]) / np.where(sp > 0, tp, 1.0)
    none = sbh * (replicated + split[0] / tp + attn / tp)
    selective = sbh * (replicated + split[1] / tp)
    full = 2.0 * sbh / np.where(sp > 0, tp, 1)
    return none, selective, full


def _shards(zero_stage, ranks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Divisors of the weights, gradients and optimizer state: ZeRO 1 shards the optimizer
    state over ``ranks``, 2 also the gradients, 3 also the weights."""
    return (
        np.where(zero_stage >= 3, ranks, 1.0),
        np.where(zero_stage >= 2, ranks, 1.0),
        np.where(zero_stage >= 1, ranks, 1.0),
    )


def in_flight_chunks(rank, pp, v, m) -> np.ndarray:
    """Model chunks whose activations pipeline rank ``rank`` holds at its peak: 1F1B keeps
    ``pp - rank`` micro-batches in flight (Narayanan et al. 2021); the interleaved schedule
    ``2 (pp - rank - 1) + (v - 1) pp + 1`` chunks (Megatron-LM's warm-up count, which
    reproduces Korthikanti et al. 2022's ``pp (1 + (pp - 1) / (pp v))`` stages' worth on the
    first rank); never more than the ``m v`` chunks of the iteration."""
    chunks = np.where(v > 1, 2.0 * (pp - rank - 1.0) + (v - 1.0) * pp + 1.0, pp - rank)
    return np.minimum(chunks, m * v)


def _layer_activations(s, b, shape: ModelShape, lay: Layout, moe_act, split):
    """(activations one layer keeps per micro-batch of ``b`` sequences of ``s`` tokens, the
    working set full recomputation adds) for the layout's recompute code (0 none, 1
    selective, 2 full); ``moe_act``: the mixture-of-experts layer's extra activations (kept
    unless fully recomputed), None when dense; ``split``: :func:`split_bytes_per_hidden`."""
    recompute = lay.recompute
    none, selective, full = _activation_variants(
        s, b, shape.hidden, shape.heads, lay.tp, lay.sequence_parallel, lay.flash_attention, split
    )
    per_layer = np.where(recompute == 2, full, np.where(recompute == 1, selective, none))
    working = np.where(recompute == 2, none, 0.0)  # one layer's activations without recomputation
    if moe_act is not None:
        per_layer = per_layer + np.where(recompute == 2, 0.0, moe_act)
        working = working + np.where(recompute == 2, moe_act, 0.0)
    return per_layer, working


def _stage_candidates(stages, pp, vh, embed_params, tied, logits) -> list[tuple]:
    """(layers, embedding parameters, pipeline rank, logits) of the stages that may be the
    most loaded: the last, the first (unless every row has one stage) and a middle one
    (when some row has three or more)."""
    if stages.part:  # a mixed fleet's part: its own stages, flags and first rank
        count, rank0 = stages.count, stages.rank0
        one = count == 1
        emb_first, emb_last = part_embeddings(vh, stages, tied)
        candidates = [(stages.last, emb_last, rank0 + count - 1.0, logits * stages.output)]
        if not one.all():
            candidates.append((stages.first, emb_first, rank0, 0.0))
        if (count >= 3).any():
            candidates.append((stages.middle, 0.0, rank0 + 1.0, 0.0))
    else:
        one = pp == 1
        candidates = [(stages.last, np.where(one, embed_params, vh), pp - 1.0, logits)]
        if not one.all():
            candidates.append((stages.first, vh, 0.0, 0.0))  # (pp = 1 rows: the same stage again)
        if (pp >= 3).any():
            candidates.append((stages.middle, 0.0, 1.0, 0.0))
    return candidates


@dataclass(frozen=True, slots=True)
class ExpertMemory:
    """What a mixture-of-experts layer adds to the memory (:func:`memory_breakdown`)."""

    params_per_layer: np.ndarray  # routed-expert parameters per (average) layer, whole model
    split: np.ndarray  # EP x ETP: ranks one layer's experts are split over
    edp: np.ndarray  # expert-data-parallel ranks their state is sharded over
    activation_bytes: (
        np.ndarray
    )  # bytes per layer and micro-batch (dispatched tokens, experts' activations)


def memory_breakdown(
    shape: ModelShape,
    lay: Layout,
    stages: Stages,
    counts: ParameterCounts,
    reserved_bytes: np.ndarray,
    experts: ExpertMemory | None = None,
) -> MemoryBreakdown:
    """Bytes per accelerator on the most loaded pipeline stage (of the first, the most
    loaded middle and the last stage, the one with the largest total).

    Mixed-precision Adam: weights 2 B/param, gradients 2 B/param, optimizer 12 B/param
    (fp32 master copy, momentum, variance; Rajbhandari et al. 2020, ZeRO, section 3.1),
    sharded over the ``dp x cp`` data-parallel ranks: ZeRO 1 the optimizer, 2 also
    gradients, 3 also weights. With pipeline parallelism the first stage holds the input
    embedding and the last the output layer (a copy of the embedding when tied, as
    Megatron keeps it); one stage holds both (once when tied). Activations per layer
    (:func:`activation_bytes_per_layer` with the shape's ``split``, :func:`split_bytes_per_hidden`,
    on ``s / cp`` tokens) times the layers of the
    chunks in flight (:func:`in_flight_chunks`); full recomputation adds one layer's full
    activations as working set; the last stage adds the fp32 logits ``4 s b V / (t cp)``
    of one micro-batch (cross entropy). A checkpoint writes the weights and optimizer
    state (2 + 12 B per parameter) once: its share per accelerator is that state over the
    ``dp x cp`` ranks holding copies (``EDP`` for experts), as Megatron-Core's fully
    parallel save and PyTorch DCP's deduplicated plans spread a replicated tensor's write.

    Mixture of experts (``experts``: :class:`ExpertMemory`):
    each rank holds its ``1 / (EP ETP)`` share of every MoE layer's routed experts on its
    stage, 16 B per parameter sharded over the ``EDP`` expert-data-parallel ranks as the
    ZeRO stage says; each layer keeps ``activation_bytes`` more per micro-batch (the
    dispatched tokens and the experts' activations,
    :func:`~dse.analytic.time.experts.activation_bytes`) unless fully recomputed.
    """
    # long by its docstring (the memory rules and sources); the code is ~35 lines
    tp, cp, pp, dp, v = lay.tp, lay.cp, lay.pp, lay.dp, lay.interleave
    seq_len, micro_batch, vocab = shape.seq_len, lay.micro_batch, shape.vocab
    per_layer, working = _layer_activations(
        seq_len / cp,
        micro_batch,
        shape,
        lay,
        None if experts is None else experts.activation_bytes,
        split_bytes_per_hidden(shape),
    )
    if experts is not None:
        expert_params, expert_split, edp = experts.params_per_layer, experts.split, experts.edp
    logits = 4.0 * seq_len / cp * micro_batch * vocab / tp
    candidates = _stage_candidates(
        stages, pp, vocab * shape.hidden, counts.embedding, shape.tied_embeddings, logits
    )
    w_div, g_div, o_div = _shards(lay.zero_stage, dp * cp)
    state_per_param = 2.0 / w_div + 2.0 / g_div + 12.0 / o_div
    if experts is not None:
        ew_div, eg_div, eo_div = _shards(lay.zero_stage, edp)
        expert_state = 2.0 / ew_div + 2.0 / eg_div + 12.0 / eo_div
    best = (
        None  # (parameters, expert parameters, activations, total) of the most loaded stage so far
    )
    for layers, emb, rank, logit in candidates:
        params = (layers * counts.layer + emb) / tp
        chunks = in_flight_chunks(rank, pp, v, lay.micro_batches)
        activations = per_layer * layers / v * chunks + np.where(layers > 0, working, 0.0) + logit
        total = params * state_per_param + activations
        e_params = 0.0
        if experts is not None:
            e_params = layers * expert_params / expert_split
            total = total + e_params * expert_state
        if best is None:
            best = (params, e_params, activations, total)
        else:
            more = total > best[3]
            best = tuple(
                np.where(more, new, old)
                for new, old in zip((params, e_params, activations, total), best, strict=True)
            )
    params, e_params, activations, total = best
    weights, grads, optimizer = 2.0 * params / w_div, 2.0 * params / g_div, 12.0 * params / o_div
    checkpoint = 14.0 * params / (dp * cp)  # (2 + 12) B per parameter over its dp x cp copies
    if experts is not None:
        weights = weights + 2.0 * e_params / ew_div
        grads = grads + 2.0 * e_params / eg_div
        optimizer = optimizer + 12.0 * e_params / eo_div
        checkpoint = checkpoint + 14.0 * e_params / edp
    total = total + reserved_bytes
    return MemoryBreakdown(
        weights_bytes=weights,
        gradients_bytes=grads,
        optimizer_bytes=optimizer,
        activations_bytes=activations,
        reserved_bytes=reserved_bytes,
        total_bytes=total,
        checkpoint_bytes=checkpoint,
    )
