"""Memory per accelerator: weights, gradients, optimizer state and activations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.rows import Choice, select, where
from dse.analytic.time.adapters import Adapters, saved_input_bytes, trained_parameters
from dse.analytic.time.parallelism import Layout, Stages, part_embeddings
from dse.analytic.time.workload import ModelShape, ParameterCounts

#: activation recomputation policies (the ``recompute`` input): Korthikanti et al. 2022's
#: none / selective / full, torchtitan's op-level selective AC (``op``), MaxText's ``minimal``
#: (weight-dot outputs saved) and ``minimal_offloaded`` (``offload``: the dots go to host)
RECOMPUTE = ("none", "selective", "full", "op", "minimal", "offload")
#: the ``activation_offload`` input: ``auto``, a stack that offloads does so for just enough
#: layers to fit (docs/model.md, section 3); ``off``, only ``activation_offload_layers``
ACTIVATION_OFFLOAD = ("auto", "off")
#: the recompute code the time model costs each policy at (minimal and offload recompute
#: no more than Korthikanti's selective: costed as selective, docs/model.md; ``op`` is
#: costed as what it recomputes, code 3, by the time model itself: time/model.py)
TIME_RECOMPUTE = np.array([0.0, 1.0, 2.0, 1.0, 1.0, 1.0])


def time_recompute(policy: np.ndarray) -> np.ndarray:
    """The time model's recompute code (0 none, 1 selective, 2 full) of a policy code
    (index into :data:`RECOMPUTE`; -1, no value, stays -1)."""
    return where(policy < 0, policy, TIME_RECOMPUTE.take(np.clip(policy, 0, 5).astype(int)))


@dataclass(frozen=True, slots=True)
class StackMemory:
    """What the training stack and the run keep beyond the layout (``frameworks.yaml``'s
    memory fields, docs/model.md section 4; per candidate).

    ``policy``: recompute policy code (index into :data:`RECOMPUTE`);
    ``fp8_activations``: 1 where Transformer Engine keeps fp8 GEMM inputs as 1-byte casts
    (the stack does and the candidate trains in fp8); ``loss_bytes_per_logit``: the loss's
    peak per logit element on the last stage; ``tp_sharded_activations``: 1 where every
    saved activation is split over the tensor ranks (MaxText's logical axis rules);
    ``allocator_overhead``: the caching allocator's reserve over live activations and
    buffers; ``gathered_bytes_per_layer_param``: ZeRO-3 / FSDP unsharded buffers;
    ``pp_keeps_unsharded``: FSDP with a pipeline keeps the stage's weights gathered and its
    gradients unsharded; ``pp_keeps_outputs``: the last stage keeps every micro-batch's
    16-bit output; ``offload_layers``: layers whose activations go to host memory;
    ``auto_offload``: 1 where the stack may offload more layers, just enough to fit
    (``activation_offload: auto``), up to ``layers - 1`` (the last layer's activations are
    used at once by the backward: Megatron-Core offloads at most ``num_layers - 1``);
    ``sp_gathered_bytes``: bytes per element at which a DTensor sequence-parallel stack saves
    the all-gathered inputs of the attention's and the MLP's column-parallel linears (0: it
    keeps the shard, as Megatron);
    ``dropout_masks``: bytes per token of dropout masks per layer (0 without dropout);
    ``torch_cp_buffers``: 1 where context parallelism runs through PyTorch's
    ``context_parallel`` ring attention, whose backward holds the exchanged K/V and fp32
    gradient accumulators (:func:`cp_attention_bytes`)."""

    policy: np.ndarray
    fp8_activations: np.ndarray
    loss_bytes_per_logit: np.ndarray
    tp_sharded_activations: np.ndarray
    allocator_overhead: np.ndarray
    gathered_bytes_per_layer_param: np.ndarray
    pp_keeps_unsharded: np.ndarray
    pp_keeps_outputs: np.ndarray
    offload_layers: np.ndarray
    dropout_masks: np.ndarray
    auto_offload: np.ndarray | float = 0.0
    sp_gathered_bytes: np.ndarray | float = 0.0
    torch_cp_buffers: np.ndarray | float = 0.0


def default_stack_memory(lay) -> StackMemory:
    """The memory facts of a plain stack: the layout's policy, 16-bit activations, fp32
    logits, no offload, no allocator reserve (``fsdp``'s gathered buffers)."""
    zero = np.zeros_like(lay.tp, dtype=float)
    return StackMemory(
        policy=lay.recompute,
        fp8_activations=zero,
        loss_bytes_per_logit=zero + 4.0,
        tp_sharded_activations=zero,
        allocator_overhead=zero,
        gathered_bytes_per_layer_param=zero + 6.0,
        pp_keeps_unsharded=zero,
        pp_keeps_outputs=zero,
        offload_layers=zero,
        dropout_masks=zero + 2.0,
    )


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
    #: activation offloading on that stage: layers offloaded (of the model's), the bytes
    #: held in host memory at the peak, and the bytes each micro-batch sends to the host in
    #: its forward (and fetches back in its backward)
    offload_layers: np.ndarray | float = 0.0
    host_bytes: np.ndarray | float = 0.0
    offload_bytes_per_micro_batch: np.ndarray | float = 0.0


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
    return where(recompute == 2, full, where(recompute == 1, selective, none))


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
    latents = where(mla, where(rq > 0, rq, 0.0) + shape.kv_lora_rank + shape.rope_head_dim, 0.0)
    # without a query rank the queries come straight from the layer's input: no query latent
    selective = where(mla, (2.0 * (where(rq > 0, 0.0, dims.q) + dims.o) + mlp) / h, none)
    return none, selective, 2.0 * latents / h


def policy_bytes_per_token(shape) -> tuple[tuple, tuple, tuple]:
    """Bytes per token one layer keeps for the op-level policies (16-bit tensors), as
    (part replicated over the tensor ranks unless sequence-parallel, part split over them):

    ``op`` (torchtitan's op-level selective AC: ``_save_list`` and ``_custom_policy`` in
    torchtitan/models/llama3/parallelize_llama.py at e7c0cae, parallelisms/parallelize_llama.py
    at 9dec370 the same): every ``aten.mm`` output except every second one per block (of wq,
    wk, wv, wo, w1, w3, w2 it keeps wq, wv, w1, w2), the SDPA output and the block input:
    ``2 (h + g h)`` replicated, ``2 (q + v + o + f)`` split.
    ``minimal`` (MaxText ``remat_policy: minimal`` = jax ``checkpoint_dots_with_no_batch_dims``,
    MaxText/layers/models.py at 04262f3c): the weight projections' outputs the backward needs
    (q, k, v, the attention's output projection, the MLP's up and gate) and the scanned
    layer's input: ``2 (2 h)`` replicated, ``2 (q + k + v + (1 + g) f)`` split.
    ``te_fp8``: what Transformer Engine's fp8 GEMMs save against 16-bit when the GEMM inputs
    are kept: the normalisations' outputs (``h``) and the down projection's input (``f``) as
    1-byte casts (TE transformer_engine/pytorch/module/linear.py: ``saved_inputmat`` is the
    quantized input)."""
    dims = shape.attention
    h, f, g = shape.hidden, shape.ffn_hidden, shape.gated_mlp
    return (
        (2.0 * (1.0 + g) * h, 2.0 * (dims.q + dims.v + dims.o + f)),
        (4.0 * h, 2.0 * (dims.q + dims.k + dims.v + (1.0 + g) * f)),
        (h, f),
    )


def cp_attention_bytes(tokens, shape: ModelShape, lay: Layout) -> np.ndarray:
    """Bytes PyTorch's context-parallel ring attention holds in one layer's backward beyond
    plain SDPA, for ``tokens`` local tokens (``s b / c``) on a rank; 0 without context
    parallelism. torch.distributed.tensor.experimental._attention,
    ``_templated_ring_attention_backward`` (PyTorch 2.6, as torchtitan 9dec370 runs it), at
    the loop's steady state, per local token and unit of ``w`` (the width the model hands
    SDPA per tensor rank: the query heads', torchtitan's Llama ``repeat_kv``s the key-value
    heads before ``F.scaled_dot_product_attention``):

    - the exchanged keys and values, 2 B each: ``_AllGatherRotater`` all-gathers every
      rank's K and V once (``c`` chunks, the whole sequence's: ``4 c``), the ring
      (``_AllToAllRotater``) holds the chunk in hand and the one arriving (``8``); plus the
      ``torch.cat([key.flatten(), value.flatten()])`` copy each step sends (``4``);
    - the gradients (``_cp_options.convert_to_f32``): the fp32 ``grad_query`` accumulator
      (``4``), the fp32 ``grad_key``/``grad_value`` in hand and the pair in flight to the next
      rank (``dkv_rotater``, an all-to-all: ``16``), and the step's 16-bit dq, dk, dv from
      the SDPA backward (``6``).

    All-gather: ``(4 c + 30) w`` bytes per token; ring: ``38 w``."""
    width = shape.attention.q / lay.tp  # query heads' width on the rank (K, V repeated)
    held = where(lay.cp_overlap > 0, 8.0, 4.0 * lay.cp)  # ring: 2 chunks; all-gather: c
    per_token = held + 4.0 + 4.0 + 16.0 + 6.0
    return where(lay.cp > 1, tokens * per_token * width, 0.0)


def _activation_variants(
    s, b, h, a, tp, sp, flash, split=(24.0, 24.0, 0.0), rep=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`activation_bytes_per_layer` for no, selective and full recomputation
    (``split``: :func:`split_bytes_per_hidden`'s three parts; ``rep``: the ranks the
    replicated part is split over, ``tp`` with sequence parallelism, else 1, when the
    caller has it)."""
    sbh = s * b * h
    attn = where(flash > 0, 0.0, 5.0 * a * s / h)  # FlashAttention keeps no s x s scores
    rep = where(sp > 0, tp, 1.0) if rep is None else rep
    replicated = (10.0 + split[2]) / rep
    none = sbh * (replicated + split[0] / tp + attn / tp)
    selective = sbh * (replicated + split[1] / tp)
    full = 2.0 * sbh / rep
    return none, selective, full


def _shards(zero_stage, ranks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Divisors of the weights, gradients and optimizer state: ZeRO 1 shards the optimizer
    state over ``ranks``, 2 also the gradients, 3 also the weights."""
    return (
        where(zero_stage >= 3, ranks, 1.0),
        where(zero_stage >= 2, ranks, 1.0),
        where(zero_stage >= 1, ranks, 1.0),
    )


def in_flight_chunks(rank, pp, v, most) -> np.ndarray:
    """Model chunks whose activations pipeline rank ``rank`` holds at its peak: 1F1B keeps
    ``pp - rank`` micro-batches in flight (Narayanan et al. 2021); the interleaved schedule
    ``2 (pp - rank - 1) + (v - 1) pp + 1`` chunks (Megatron-LM's warm-up count, which
    reproduces Korthikanti et al. 2022's ``pp (1 + (pp - 1) / (pp v))`` stages' worth on the
    first rank); never more than ``most``, the ``m v`` chunks of the iteration."""
    interleaved = v > 1
    if interleaved.any():
        chunks = where(interleaved, 2.0 * (pp - rank - 1.0) + (v - 1.0) * pp + 1.0, pp - rank)
    else:  # plain 1F1B everywhere
        chunks = pp - rank
    return np.minimum(chunks, most)


def _layer_activations(s, b, shape: ModelShape, lay: Layout, moe_act, split, mem: StackMemory):
    """(activations one layer keeps per micro-batch of ``b`` sequences of ``s`` tokens, the
    working set recomputation adds) for the policy code ``mem.policy`` (0 none, 1 selective,
    2 full, 3 op, 4 minimal, 5 offload); ``moe_act``: the mixture-of-experts layer's extra
    activations (kept unless fully recomputed), None when dense; ``split``:
    :func:`split_bytes_per_hidden`. ``mem.fp8_activations`` removes the 1-byte savings of
    Transformer Engine's fp8 GEMM inputs from the no and selective policies. The working set:
    one layer's activations without recomputation less what the policy keeps (full, op,
    minimal: recomputed in the backward), one ``minimal`` layer in transit (offload)."""
    policy = mem.policy
    sp = np.maximum(lay.sequence_parallel, mem.tp_sharded_activations * (lay.tp > 1))
    rep = where(sp > 0, lay.tp, 1.0)  # the ranks the replicated activations are split over
    none, selective, full = _activation_variants(
        s, b, shape.hidden, shape.heads, lay.tp, sp, lay.flash_attention, split, rep
    )
    op_tok, minimal_tok, fp8_tok = policy_bytes_per_token(shape)
    tokens = s * b
    saving = mem.fp8_activations * tokens * (fp8_tok[0] / rep + fp8_tok[1] / lay.tp)
    none, selective = none - saving, selective - saving
    # PyTorch's DTensor sequence parallelism (torchtitan's plan) all-gathers the attention's
    # and the MLP's inputs before their column-parallel linears, which save the gathered
    # tensor (at ``sp_gathered_bytes`` per element) where Megatron keeps a 2-byte shard and
    # gathers it again in the backward: 2 h (w - 2/t) bytes per token more
    if np.any(mem.sp_gathered_bytes > 0):
        gathered = (mem.sp_gathered_bytes > 0) & (sp > 0) & (lay.tp > 1)
        extra = where(
            gathered, tokens * 2.0 * shape.hidden * (mem.sp_gathered_bytes - 2.0 / lay.tp), 0.0
        )
        none, selective = none + extra, selective + extra
    # each policy's rows once; a policy no row has is left out of the choices (they exclude
    # one another, so the others' picks are the same)
    is_policy = [policy == k for k in range(len(RECOMPUTE))]
    has = [bool(np.any(rows)) for rows in is_policy]
    op = tokens * (op_tok[0] / rep + op_tok[1] / lay.tp) if has[3] else None
    minimal = (
        tokens * (minimal_tok[0] / rep + minimal_tok[1] / lay.tp) if has[4] or has[5] else None
    )
    kept = [(0, none), (1, selective), (3, op), (4, minimal)]
    per_layer = select(
        [is_policy[k] for k, _ in kept if has[k]], [x for k, x in kept if has[k]], full
    )  # full and offload keep the layer's input
    extra = [
        (2, lambda: none),
        (3, lambda: none - op),
        (4, lambda: none - minimal),
        (5, lambda: minimal),
    ]
    working = np.maximum(
        select([is_policy[k] for k, _ in extra if has[k]], [x() for k, x in extra if has[k]], 0.0),
        0.0,
    )
    if moe_act is not None:
        per_layer = per_layer + where(is_policy[2], 0.0, moe_act)
        working = working + where(is_policy[2], moe_act, 0.0)
    # what the offload policy sends to the host per layer: the saved dots (``minimal``)
    sent = where(is_policy[5], minimal, 0.0) if has[5] else np.zeros(np.shape(is_policy[5]))
    return per_layer, working, sent


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
        candidates = [(stages.last, where(one, embed_params, vh), pp - 1.0, logits)]
        if not one.all():
            candidates.append((stages.first, vh, 0.0, 0.0))  # (pp = 1 rows: the same stage again)
        if (pp >= 3).any():
            candidates.append((stages.middle, 0.0, 1.0, 0.0))
    return candidates


@dataclass(frozen=True, slots=True)
class _StageParts:
    """One candidate stage's memory before offloading (:func:`memory_breakdown`): its
    parameters (and routed-expert parameters) per rank, their training state, the
    activations of its layers in flight, the rest (recompute working set, logits, ZeRO-3
    buffers), the in-flight share one layer in transit keeps, its layers and chunks."""

    params: np.ndarray
    e_params: np.ndarray | float
    state: np.ndarray
    in_flight: np.ndarray
    other: np.ndarray
    transit: np.ndarray
    layers: np.ndarray
    chunks: np.ndarray
    trained: np.ndarray | None  # the parameters it trains where not all (LoRA); None: all


@dataclass(frozen=True, slots=True)
class _Chosen:
    """The parts of a candidate stage :func:`memory_breakdown` reads once it has chosen the
    most loaded one, and the share of its in-flight activations kept on the device (None
    where nothing is offloaded: all of them)."""

    params: np.ndarray
    e_params: np.ndarray | float
    in_flight: np.ndarray
    layers: np.ndarray
    chunks: np.ndarray
    trained: np.ndarray | None
    kept: np.ndarray | None

    @classmethod
    def of(cls, part: _StageParts, kept) -> _Chosen:
        return cls(
            part.params, part.e_params, part.in_flight, part.layers, part.chunks, part.trained, kept
        )


def _pick(choose: Choice, new: _Chosen, old: _Chosen) -> _Chosen:
    """Per candidate, ``new``'s parts where ``choose``'s mask is true and ``old``'s elsewhere."""

    def one(a, b):
        if a is None:  # (no kept share: nothing offloaded; no adapters: every parameter trained)
            return None
        # a dense model's expert parameters stay the scalar 0 (no array of zeros picked)
        return a if np.isscalar(a) and np.isscalar(b) and a == b else choose(a, b)

    return _Chosen(*(one(getattr(new, f), getattr(old, f)) for f in _Chosen.__slots__))


def _auto_offload_share(parts, layers, mem: StackMemory, room_bytes) -> np.ndarray:
    """The share of the model's layers ``activation_offload: auto`` offloads: the fewest
    whole layers (of ``layers``) for which every candidate stage fits in ``room_bytes``
    (the capacity less the reserve), at most ``layers - 1``; 0 where the stage fits
    without offloading or the stack may not offload (``mem.auto_offload``).

    A stage keeping ``1 - x + transit`` of its in-flight activations ``A`` (the rest,
    ``O``, and the state ``S`` stay) fits when ``S + (A (1 - x + transit) + O)(1 + r) <=
    room``: ``x >= 1 + transit - (room - S - O (1 + r)) / (A (1 + r))``."""
    grow = 1.0 + mem.allocator_overhead
    need = np.zeros_like(np.asarray(layers, dtype=float))
    for part in parts:
        fits = part.state + (part.in_flight + part.other) * grow <= room_bytes
        with np.errstate(divide="ignore", invalid="ignore"):
            share = (
                1.0
                + part.transit
                - (room_bytes - part.state - part.other * grow) / (part.in_flight * grow)
            )
        share = where(fits | ~np.isfinite(share), 0.0, share)
        need = np.maximum(need, share)
    whole = np.ceil(need * layers - 1e-9)
    most = np.maximum(layers - 1.0, 0.0)
    return where(
        (mem.auto_offload > 0) & (need > 0), np.minimum(whole, most) / np.maximum(layers, 1.0), 0.0
    )


def _loss_or_cp_buffers(logit, cp_buffers, loss_share, layers):
    """A candidate stage's logits (``logit``: the loss's peak and any kept outputs) with the
    ring attention's backward buffers (``cp_buffers``, None where no candidate has any): the
    kept outputs stay, and the larger of the loss's peak and the buffers counts (the buffers
    live in a layer's backward, after the logits are freed)."""
    if cp_buffers is None:
        return logit
    loss = logit * loss_share
    return logit - loss + np.maximum(loss, where(layers > 0, cp_buffers, 0.0))


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
    stack_memory: StackMemory | None = None,
    capacity_bytes: np.ndarray | None = None,
    adapters: Adapters | None = None,
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

    LoRA fine-tuning (``adapters``): the frozen weights keep their 16-bit copy only (sharded
    by ZeRO 3); gradients, the optimizer state and the checkpoint are the adapters'
    (:func:`~dse.analytic.time.adapters.trained_parameters`), which also keep a 16-bit copy.
    The activations are counted as for training every weight: a frozen linear layer's
    input is still saved where its adapter's backward needs it.
    """
    # long by its docstring (the memory rules and sources); the code is ~50 lines
    tp, cp, pp, dp, v = lay.tp, lay.cp, lay.pp, lay.dp, lay.interleave
    seq_len, micro_batch, vocab = shape.seq_len, lay.micro_batch, shape.vocab
    mem = default_stack_memory(lay) if stack_memory is None else stack_memory
    split = split_bytes_per_hidden(shape)
    # trained without dropout (dropout_masks 0): no masks, the replicated 10 sbh is 8 sbh
    split = (split[0], split[1], split[2] - (2.0 - mem.dropout_masks))
    per_layer, working, policy_offload = _layer_activations(
        seq_len / cp,
        micro_batch,
        shape,
        lay,
        None if experts is None else experts.activation_bytes,
        split,
        mem,
    )
    if adapters is not None:  # LoRA with sequence parallelism: the adapters' whole inputs
        per_layer = per_layer + where(
            mem.policy == RECOMPUTE.index("full"),
            0.0,
            saved_input_bytes(
                adapters, shape, seq_len / cp * micro_batch, tp, lay.sequence_parallel
            ),
        )
    if experts is not None:
        expert_params, expert_split, edp = experts.params_per_layer, experts.split, experts.edp
    logit_elems = seq_len / cp * micro_batch * vocab / tp
    # the loss's peak (bytes per logit element, the stack's); a last stage that keeps every
    # micro-batch's 16-bit output for the step's merge (torch.distributed.pipelining)
    loss_peak = mem.loss_bytes_per_logit * logit_elems
    logits = loss_peak + where(
        (pp > 1) & (mem.pp_keeps_outputs > 0), 2.0 * logit_elems * lay.micro_batches, 0.0
    )
    # PyTorch's ring attention holds its exchange and gradient buffers in a layer's backward,
    # after the loss's logits are freed: the larger of the two sets the stage's peak
    cp_on = (mem.torch_cp_buffers > 0) & (cp > 1)
    cp_buffers, loss_share = None, 0.0  # (skipped where no candidate has them: speed)
    if np.any(cp_on):
        cp_buffers = where(cp_on, cp_attention_bytes(seq_len / cp * micro_batch, shape, lay), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            loss_share = where(logits > 0, loss_peak / logits, 0.0)
    candidates = _stage_candidates(
        stages, pp, vocab * shape.hidden, counts.embedding, shape.tied_embeddings, logits
    )
    w_div, g_div, o_div = _shards(lay.zero_stage, dp * cp)
    state_per_param = 2.0 / w_div + 2.0 / g_div + 12.0 / o_div
    if experts is not None:
        ew_div, eg_div, eo_div = _shards(lay.zero_stage, edp)
        expert_state = 2.0 / ew_div + 2.0 / eg_div + 12.0 / eo_div
    stage_parts = []  # per candidate stage: its parts, before any offloading
    zero3 = lay.zero_stage >= 3
    unsharded = zero3 & (pp > 1) & (mem.pp_keeps_unsharded > 0)
    any_unsharded = bool(unsharded.any())
    # the same for every candidate stage: computed once
    by_zero3, layer_gathered = Choice(zero3), mem.gathered_bytes_per_layer_param * counts.layer
    iteration_chunks = lay.micro_batches * v
    for layers, emb, rank, logit in candidates:
        params = (layers * counts.layer + emb) / tp
        chunks = in_flight_chunks(rank, pp, v, iteration_chunks)
        # ZeRO-3 / FSDP: one layer's unsharded weights and gradients in flight (the gathered
        # and prefetched layers' 16-bit weights, a 16-bit gradient before its reduce-scatter;
        # the output embedding and its gradient when larger); FSDP with a pipeline kept
        # unsharded (torchtitan): the stage's 16-bit weights and fp32 gradients, 6 B/param
        gathered = by_zero3(np.maximum(layer_gathered, 4.0 * emb) / tp, 0.0)
        e_params = 0.0
        state = params * state_per_param
        trained = None
        if adapters is not None:  # LoRA: the frozen weights' 16-bit copy, the adapters' state
            trained = trained_parameters(params, layers, adapters, tp)
            state = where(
                adapters.lora > 0, 2.0 * params / w_div + trained * state_per_param, state
            )
        if any_unsharded:  # (fp32 gradients of the trained parameters only)
            kept = 6.0 * params
            if trained is not None:
                kept = where(adapters.lora > 0, 2.0 * params + 4.0 * trained, kept)
            gathered = where(unsharded, kept, gathered)
        if experts is not None:
            e_params = layers * expert_params / expert_split
            state = state + e_params * expert_state
        stage_parts.append(
            _StageParts(
                params=params,
                e_params=e_params,
                state=state,
                in_flight=per_layer * layers / v * chunks,
                other=where(layers > 0, working, 0.0)
                + _loss_or_cp_buffers(logit, cp_buffers, loss_share, layers)
                + gathered,
                transit=v / np.maximum(layers * chunks, 1.0),
                layers=layers,
                chunks=chunks,
                trained=trained,
            )
        )
    offloaded = np.clip(mem.offload_layers / np.maximum(shape.layers, 1.0), 0.0, 1.0)
    if capacity_bytes is not None and np.any(mem.auto_offload > 0):
        offloaded = np.maximum(
            offloaded,
            _auto_offload_share(stage_parts, shape.layers, mem, capacity_bytes - reserved_bytes),
        )
    # activation offloading (Megatron-Core cpu_offloading_num_layers): the offloaded share
    # leaves the device, one layer's worth stays in transit (double buffer); ``kept`` is
    # exactly 1 where nothing is offloaded, which the products below then leave out
    offloading = bool(np.any(offloaded))
    if offloading:
        left, offloads = 1.0 - offloaded, offloaded > 0
    grow = 1.0 + mem.allocator_overhead
    best = None  # (the chosen stage's parts, activations, total)
    for part in stage_parts:
        if offloading:
            kept = np.minimum(left + where(offloads, part.transit, 0.0), 1.0)
            activations = (part.in_flight * kept + part.other) * grow
        else:
            kept = None
            activations = (part.in_flight + part.other) * grow
        total = part.state + activations
        chosen = _Chosen.of(part, kept)
        if best is None:
            best = (chosen, activations, total)
        else:
            more = total > best[2]
            choose = Choice(more)
            best = (
                _pick(choose, chosen, best[0]),
                choose(activations, best[1]),
                choose(total, best[2]),
            )
    part, activations, total = best
    params, e_params = part.params, part.e_params
    # host memory: the offloaded share of the layers in flight (or the offload policy's dots)
    host = part.in_flight * (1.0 - part.kept if offloading else 0.0)
    host = host + policy_offload * part.layers / v * part.chunks
    sent = (per_layer * offloaded + policy_offload) * part.layers  # per micro-batch, each way
    weights, grads, optimizer = 2.0 * params / w_div, 2.0 * params / g_div, 12.0 * params / o_div
    checkpoint = 14.0 * params / (dp * cp)  # (2 + 12) B per parameter over its dp x cp copies
    if part.trained is not None:  # LoRA: the adapters' state; the frozen weights' 16-bit copy
        lora, t = adapters.lora > 0, part.trained
        weights = where(lora, 2.0 * (params + t) / w_div, weights)
        grads = where(lora, 2.0 * t / g_div, grads)
        optimizer = where(lora, 12.0 * t / o_div, optimizer)
        checkpoint = where(lora, 14.0 * t / (dp * cp), checkpoint)
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
        offload_layers=offloaded * shape.layers,
        host_bytes=host,
        offload_bytes_per_micro_batch=sent,
    )
