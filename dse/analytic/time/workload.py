"""Transformer workload: shapes from presets, parameter counts and FLOPs per iteration.

Dense decoders and mixture-of-experts (MoE) decoders: a MoE layer replaces the
feed-forward block by a router over ``experts`` routed experts of width
``expert_ffn_hidden``, of which each token uses ``experts_per_token`` (top-k), plus
``shared_experts`` experts every token uses (Shazeer et al. 2017; Lepikhin et al. 2021,
GShard; Fedus et al. 2022, Switch Transformer; DeepSeek-AI 2024, DeepSeek-V3 section 2.1.2).
The first ``dense_layers`` layers keep a dense feed-forward block of width ``ffn_hidden``
(DeepSeek-V3: 3; Llama 4 Maverick interleaves 24 dense and 24 MoE layers, which counts the
same here). Attention is multi-head with grouped key-value heads (``kv_heads``) of width
``head_dim`` (which need not be ``hidden / heads``: Qwen3), or DeepSeek's multi-head latent
attention (MLA) when ``kv_lora_rank`` > 0. The model's layers are counted as ``L``
identical *average* layers: each carries ``moe_fraction = (L - dense_layers) / L`` of a MoE
feed-forward block and the rest of a dense one (docs/model.md, section 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import numpy as np

from dse.analytic.columns import factorise
from dse.analytic.rows import where
from dse.yamlfile import load_packaged

#: fields every preset states
REQUIRED_SHAPE_FIELDS = (
    "layers",
    "hidden",
    "ffn_hidden",
    "heads",
    "kv_heads",
    "seq_len",
    "vocab",
    "gated_mlp",
    "tied_embeddings",
)
#: fields a preset states where they apply (mixture-of-experts, latent attention, a head
#: width other than hidden / heads); absent: the defaults below
OPTIONAL_SHAPE_FIELDS = (
    "head_dim",
    "experts",
    "experts_per_token",
    "shared_experts",
    "expert_ffn_hidden",
    "dense_layers",
    "q_lora_rank",
    "kv_lora_rank",
    "rope_head_dim",
    "squared_relu",
)
SHAPE_FIELDS = REQUIRED_SHAPE_FIELDS + OPTIONAL_SHAPE_FIELDS
# Fields a shape needs when the preset or a custom model leaves them out. They are not
# inputs where no Input declares them: the common GPT-2/-3 shape (ungated MLP, tied
# embeddings; Radford et al. 2019, Brown et al. 2020), dense (no experts), standard
# multi-head attention (no latent ranks). head_dim (hidden / heads), experts_per_token (1)
# and expert_ffn_hidden (ffn_hidden) are filled in resolve_shape.
_SHAPE_DEFAULTS = {
    "gated_mlp": 0.0,
    "tied_embeddings": 1.0,
    "experts": 0.0,
    "shared_experts": 0.0,
    "dense_layers": 0.0,
    "q_lora_rank": 0.0,
    "kv_lora_rank": 0.0,
    "rope_head_dim": 0.0,
    "squared_relu": 0.0,
}


@dataclass(frozen=True, slots=True)
class AttentionDims:
    """Widths of one layer's attention projections (:func:`_attention_dims`), per candidate."""

    q: np.ndarray  # all query heads
    k: np.ndarray  # the key heads (MLA: every head, expanded from the latent)
    v: np.ndarray  # the value heads (MLA: every head)
    o: np.ndarray  # the output projection's input
    qk: np.ndarray  # score head width (MLA: + the decoupled RoPE width)
    d: np.ndarray  # context head width


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The transformer's shape per candidate (:func:`resolve_shape`): counts and widths as
    float arrays, flags (``gated_mlp``, ``tied_embeddings``) as 0/1."""

    layers: np.ndarray  # decoder layers
    hidden: np.ndarray  # model width h
    ffn_hidden: np.ndarray  # dense feed-forward width f
    heads: np.ndarray  # attention (query) heads a
    kv_heads: np.ndarray  # key-value heads (grouped-query attention)
    seq_len: np.ndarray  # tokens per sequence s
    vocab: np.ndarray  # vocabulary size V
    gated_mlp: np.ndarray  # 1: gated feed-forward (SwiGLU, three matrices)
    tied_embeddings: np.ndarray  # 1: the output layer shares the input embedding
    head_dim: np.ndarray  # attention head width d
    experts: np.ndarray  # routed experts per MoE layer (0: dense)
    experts_per_token: np.ndarray  # routed experts a token uses (top-k)
    shared_experts: np.ndarray  # experts every token uses besides its top-k
    expert_ffn_hidden: np.ndarray  # feed-forward width of one expert
    dense_layers: np.ndarray  # layers of a MoE model with a dense feed-forward block
    q_lora_rank: np.ndarray  # MLA query latent rank (0: none)
    kv_lora_rank: np.ndarray  # MLA key-value latent rank (0: no MLA)
    rope_head_dim: np.ndarray  # MLA decoupled RoPE width per head
    squared_relu: (
        np.ndarray
    )  # 1: squared-ReLU feed-forward activation (Nemotron-4), 0: GeLU / SwiGLU
    attention: AttentionDims  # the attention projections' widths


@cache
def presets() -> dict[str, dict]:
    """Model preset name -> shape (see ``dse/analytic/data/models.yaml`` for sources)."""
    return load_packaged(files("dse.analytic.data").joinpath("models.yaml").read_text())


def resolve_shape(model: np.ndarray, overrides: dict[str, np.ndarray]) -> ModelShape:
    """Shape arrays per candidate: the preset's values, replaced where an override is finite.

    Unknown preset names give NaN fields unless every field is overridden; ``ffn_hidden``
    defaults to 4 x hidden, ``kv_heads`` to ``heads``, ``head_dim`` to ``hidden / heads``,
    ``expert_ffn_hidden`` to ``ffn_hidden`` and ``experts_per_token`` to 1 for custom
    shapes. A field every row shares is a read-only broadcast of one value.
    """
    codes, names = factorise(model)
    n = len(codes)
    missing = bool((codes < 0).any())
    out = {}
    for f in SHAPE_FIELDS:
        values = [presets().get(str(m), {}).get(f, _SHAPE_DEFAULTS.get(f, np.nan)) for m in names]
        ov = overrides.get(f)
        if ov is not None:
            ov = np.asarray(ov, dtype=float)
            given = np.isfinite(ov)
            if not given.any():  # no row overrides the field (the usual case): the preset's
                ov = None
        if ov is None and len(set(values)) == 1 and not missing:
            out[f] = np.broadcast_to(
                np.float64(values[0] if values[0] is not None else np.nan), (n,)
            )
            continue
        table = np.array(values + [np.nan], dtype=float)
        base = table.take(codes)  # (take: the same values as table[codes], faster)
        if ov is None:
            out[f] = base
        else:
            out[f] = where(given, ov, base)
    out["ffn_hidden"] = _fill(out["ffn_hidden"], 4 * out["hidden"])
    out["kv_heads"] = _fill(out["kv_heads"], out["heads"])
    head_dim = out["head_dim"]
    out["head_dim"] = (
        out["hidden"] / out["heads"]
        if np.isnan(head_dim).all()
        else _fill(head_dim, out["hidden"] / out["heads"])
    )
    if (out["experts"] > 0).any():  # dense models never read the expert fields
        out["expert_ffn_hidden"] = _fill(out["expert_ffn_hidden"], out["ffn_hidden"])
        out["experts_per_token"] = _fill(out["experts_per_token"], np.ones(n))
    return ModelShape(
        **out,
        attention=_attention_dims(
            *(out[f] for f in ("heads", "head_dim", "kv_heads", "kv_lora_rank", "rope_head_dim"))
        ),
    )


def _fill(values: np.ndarray, default: np.ndarray) -> np.ndarray:
    """``values`` where finite, else ``default`` (no copy when every value is finite)."""
    missing = ~np.isfinite(values)
    return where(missing, default, values) if missing.any() else values


def is_moe(shape: ModelShape) -> np.ndarray:
    """True for candidates whose model has routed experts."""
    return shape.experts > 0


def any_moe(shape: ModelShape) -> bool:
    return bool(is_moe(shape).any())


def moe_fraction(shape: ModelShape) -> np.ndarray:
    """Share of the layers that carry a MoE feed-forward block (0 for a dense model)."""
    moe_layers = np.clip(shape.layers - shape.dense_layers, 0.0, shape.layers)
    return where(is_moe(shape), moe_layers / shape.layers, 0.0)


def _attention_dims(heads, head_dim, kv_heads, kv_lora_rank, rope_head_dim) -> AttentionDims:
    """Widths of the attention projections: ``q`` (all query heads), ``k`` and ``v`` (the
    key-value heads), ``o`` (the output projection's input), and the score and context
    head widths ``qk`` and ``d``. MLA (``kv_lora_rank`` > 0): queries and keys carry
    ``rope_head_dim`` more (decoupled RoPE), keys and values are expanded per head from the
    latent, so ``k`` and ``v`` span every head (DeepSeek-V2, Liu et al. 2024, section 2.1)."""
    a, d = heads, head_dim
    if not ((kv_lora_rank > 0).any() or (rope_head_dim > 0).any()):
        q, kv = a * d, kv_heads * d
        return AttentionDims(q=q, k=kv, v=kv, o=q, qk=d, d=d)
    dr = rope_head_dim
    kv_heads = where(kv_lora_rank > 0, a, kv_heads)
    return AttentionDims(
        q=a * (d + dr), k=kv_heads * (d + dr), v=kv_heads * d, o=a * d, qk=d + dr, d=d
    )


def attention_parameters(shape: ModelShape) -> np.ndarray:
    """Weights and biases of one layer's attention: standard (grouped) attention
    ``h (q + k + v) + o h`` plus biases, or MLA's down- and up-projections ``h r_q + r_q q``
    (``h q`` without a query rank), ``h (r_kv + d_r) + r_kv (k_nope + v)`` and ``o h``
    (DeepSeek-V3 has no biases in attention)."""
    h = shape.hidden
    dims = shape.attention
    standard = h * dims.q + 2 * h * dims.v + dims.o * h + (dims.q + 2 * dims.v + h)
    mla = shape.kv_lora_rank > 0
    if not mla.any():
        return standard
    rq, rkv, dr = shape.q_lora_rank, shape.kv_lora_rank, shape.rope_head_dim
    q = where(rq > 0, h * rq + rq * dims.q, h * dims.q)
    latent = h * (rkv + dr) + rkv * shape.heads * 2 * shape.head_dim + dims.o * h
    return where(mla, q + latent, standard)


def _mlp_matrices(shape: ModelShape) -> np.ndarray:
    """Weight matrices of one feed-forward block: 2, or 3 when gated (SwiGLU)."""
    return 2 + shape.gated_mlp


def expert_parameters(shape: ModelShape) -> np.ndarray:
    """Routed-expert weights per (average) layer: ``moe_fraction x E x (2+g) h f_e`` (0 for a
    dense model). They are sharded by expert parallelism; every other weight is not."""
    if not any_moe(shape):
        return np.zeros_like(shape.hidden)
    return (
        moe_fraction(shape)
        * shape.experts
        * _mlp_matrices(shape)
        * shape.hidden
        * shape.expert_ffn_hidden
    )


def layer_parameters(shape: ModelShape) -> np.ndarray:
    """Parameters of one (average) decoder layer that are not routed experts: attention,
    two norms, and the feed-forward block: dense ``(2+g) h f`` plus biases on the dense
    share of the layers, router ``h E`` and shared experts ``s (2+g) h f_e`` on the MoE share
    (Vaswani et al. 2017; Shazeer 2020 for the gated MLP)."""
    h, ffn = shape.hidden, shape.ffn_hidden
    attn = attention_parameters(shape)
    mlp = _mlp_matrices(shape) * h * ffn + ffn + h
    if not any_moe(shape):
        return attn + mlp + 4 * h
    frac = moe_fraction(shape)
    moe = (
        h * shape.experts
        + shape.shared_experts * _mlp_matrices(shape) * h * shape.expert_ffn_hidden
    )
    return attn + (1 - frac) * mlp + frac * moe + 4 * h


def embedding_parameters(shape: ModelShape) -> np.ndarray:
    """Input embedding plus an untied output layer (V x h each)."""
    return shape.vocab * shape.hidden * (2 - shape.tied_embeddings)


@dataclass(frozen=True, slots=True)
class ParameterCounts:
    """Parameters of one (average) decoder layer without its routed experts
    (:func:`layer_parameters`) and of the embeddings (:func:`embedding_parameters`)."""

    layer: np.ndarray
    embedding: np.ndarray

    @classmethod
    def of(cls, shape: ModelShape) -> ParameterCounts:
        return cls(layer=layer_parameters(shape), embedding=embedding_parameters(shape))


def parameter_count(
    shape: ModelShape, layer_params: np.ndarray | None = None, embedding: np.ndarray | None = None
) -> np.ndarray:
    """All parameters (total: every expert): layers, embeddings, final norm
    (``layer_params``: :func:`layer_parameters`, ``embedding``: :func:`embedding_parameters`,
    when the caller has them)."""
    layer_params = layer_parameters(shape) if layer_params is None else layer_params
    embedding = embedding_parameters(shape) if embedding is None else embedding
    if not any_moe(shape):
        return shape.layers * layer_params + embedding + 2 * shape.hidden
    return shape.layers * (layer_params + expert_parameters(shape)) + embedding + 2 * shape.hidden


def active_parameter_count(
    shape: ModelShape, layer_params: np.ndarray | None = None, total: np.ndarray | None = None
) -> np.ndarray:
    """Parameters one token uses: every parameter but the routed experts it is not sent
    to (``experts_per_token`` of ``experts`` per MoE layer); the total for a dense model
    (``total``: :func:`parameter_count` when the caller has it)."""
    if not any_moe(shape):
        return parameter_count(shape, layer_params) if total is None else total
    layer_params = layer_parameters(shape) if layer_params is None else layer_params
    active_experts = (
        moe_fraction(shape)
        * shape.experts_per_token
        * _mlp_matrices(shape)
        * shape.hidden
        * shape.expert_ffn_hidden
    )
    return (
        shape.layers * (layer_params + active_experts)
        + embedding_parameters(shape)
        + 2 * shape.hidden
    )


def layer_forward_flops_per_token(shape: ModelShape) -> np.ndarray:
    """Forward FLOPs of one (average) layer per token: 2 per matrix weight a token uses,
    plus attention.

    Attention scores QK^T and the weighted sum of V each cost ``2 s a d`` per token (``4 s h``
    when ``a d = h``; Narayanan et al. 2021, eq. 3, non-causal count as in Megatron's MFU);
    MLA's scores are ``d + d_r`` wide. A MoE layer's token passes the router (``h E``) and
    ``experts_per_token + shared_experts`` experts.
    """
    h, ffn, s = shape.hidden, shape.ffn_hidden, shape.seq_len
    if not (any_moe(shape) or (shape.kv_lora_rank > 0).any() or (shape.rope_head_dim > 0).any()):
        kv_dim = shape.kv_heads * shape.head_dim
        q_dim = shape.heads * shape.head_dim
        matmul = 2 * (2 * h * q_dim + 2 * h * kv_dim + (2 + shape.gated_mlp) * h * ffn)
        return matmul + 4 * s * q_dim
    dims = shape.attention
    attn_weights = attention_parameters(shape) - where(
        shape.kv_lora_rank > 0, 0.0, dims.q + 2 * dims.v + h
    )  # no biases
    frac = moe_fraction(shape)
    dense_ffn = _mlp_matrices(shape) * h * ffn
    moe_ffn = h * shape.experts + (
        (shape.experts_per_token + shape.shared_experts)
        * _mlp_matrices(shape)
        * h
        * shape.expert_ffn_hidden
    )
    matmul = 2 * (attn_weights + (1 - frac) * dense_ffn + frac * moe_ffn)
    return matmul + 2 * s * shape.heads * (dims.qk + dims.d)


def model_flops_per_iteration(
    shape: ModelShape, tokens: np.ndarray, adapters=None, attention_span=None
) -> np.ndarray:
    """Model FLOPs of one training iteration (forward + backward, no recomputation).

    Forward per token: L layers plus the output layer 2*h*V; backward costs twice the
    forward (Narayanan et al. 2021, eq. 3; Chowdhery et al. 2022, appendix B for MFU). For a
    MoE model these are the *active* parameters' FLOPs (``~6 N_active`` per token). Packed
    documents masked apart (``attention_span``: the keys per query): the attention scores
    within documents only, as NVIDIA's published model FLOPs of packed fine-tuning count
    them (docs/model.md, section 1b). LoRA fine-tuning (``adapters``): the frozen weights'
    backward computes the input gradient only (one forward's FLOPs), the attention's
    backward is unchanged and the adapters train (``6`` per adapter parameter and token):
    ``~4 N`` per token.
    """
    forward = shape.layers * layer_forward_flops_per_token(shape) + 2 * shape.hidden * shape.vocab
    if adapters is None and attention_span is None:
        return 3 * forward * tokens
    # the attention scores' forward FLOPs per token over the whole sequence
    attention = (
        shape.layers * 2 * shape.seq_len * shape.heads * (shape.attention.qk + shape.attention.d)
    )
    if attention_span is not None:
        within = attention * (attention_span / shape.seq_len)
        forward, attention = forward - attention + within, within
    flops = 3 * forward * tokens
    if adapters is None:
        return flops
    lora = (
        2 * (forward - attention) + 3 * attention + 6 * shape.layers * adapters.params_per_layer
    ) * tokens
    return where(adapters.lora > 0, lora, flops)
