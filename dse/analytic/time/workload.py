"""Transformer workload: shapes from presets, parameter counts and FLOPs per iteration."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import numpy as np
import yaml

from dse.analytic.columns import factorise

SHAPE_FIELDS = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "seq_len", "vocab",
                "gated_mlp", "tied_embeddings")
# Fields a shape needs when there is no preset (custom model): defaults if absent. They are
# not inputs (no Input declares them): the common GPT-2/-3 shape (ungated MLP, tied
# embeddings; Radford et al. 2019, Brown et al. 2020).
_SHAPE_DEFAULTS = {"gated_mlp": 0.0, "tied_embeddings": 1.0}


@cache
def presets() -> dict[str, dict]:
    """Model preset name -> shape (see ``dse/analytic/data/models.yaml`` for sources)."""
    return yaml.safe_load(files("dse.analytic.data").joinpath("models.yaml").read_text())


def resolve_shape(model: np.ndarray, overrides: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Shape arrays per candidate: the preset's values, replaced where an override is finite.

    Unknown preset names give NaN fields unless every field is overridden; ``ffn_hidden``
    defaults to 4 x hidden and ``kv_heads`` to ``heads`` for custom shapes.
    """
    codes, names = factorise(model)
    out = {}
    for f in SHAPE_FIELDS:
        table = np.array([presets().get(str(n), {}).get(f, _SHAPE_DEFAULTS.get(f, np.nan)) for n in names]
                         + [np.nan], dtype=float)
        base = table[codes]
        ov = overrides.get(f)
        if ov is None:
            out[f] = base
        else:
            ov = np.asarray(ov, dtype=float)
            out[f] = np.where(np.isfinite(ov), ov, base)
    out["ffn_hidden"] = np.where(np.isfinite(out["ffn_hidden"]), out["ffn_hidden"], 4 * out["hidden"])
    out["kv_heads"] = np.where(np.isfinite(out["kv_heads"]), out["kv_heads"], out["heads"])
    return out


def layer_parameters(shape: dict[str, np.ndarray]) -> np.ndarray:
    """Parameters of one decoder layer (weights and biases, two norms).

    Attention: q and o are h x h, k and v are h x (kv_heads * head_dim); MLP: 2 or, gated
    (SwiGLU), 3 matrices of h x ffn (Vaswani et al. 2017; Shazeer 2020).
    """
    h, ffn = shape["hidden"], shape["ffn_hidden"]
    kv_dim = h * shape["kv_heads"] / shape["heads"]
    attn = 2 * h * h + 2 * h * kv_dim + (2 * h + 2 * kv_dim)
    mlp = (2 + shape["gated_mlp"]) * h * ffn + ffn + h
    return attn + mlp + 4 * h


def embedding_parameters(shape: dict[str, np.ndarray]) -> np.ndarray:
    """Input embedding plus an untied output layer (V x h each)."""
    return shape["vocab"] * shape["hidden"] * (2 - shape["tied_embeddings"])


def parameter_count(shape: dict[str, np.ndarray]) -> np.ndarray:
    """All parameters: layers, embeddings, final norm."""
    return shape["layers"] * layer_parameters(shape) + embedding_parameters(shape) + 2 * shape["hidden"]


def layer_forward_flops_per_token(shape: dict[str, np.ndarray]) -> np.ndarray:
    """Forward FLOPs of one layer per token: 2 per matrix weight, plus attention.

    Attention scores QK^T and the weighted sum of V each cost 2*s*h per token (Narayanan
    et al. 2021, eq. 3, non-causal count as in Megatron's MFU).
    """
    h, ffn, s = shape["hidden"], shape["ffn_hidden"], shape["seq_len"]
    kv_dim = h * shape["kv_heads"] / shape["heads"]
    matmul = 2 * (2 * h * h + 2 * h * kv_dim + (2 + shape["gated_mlp"]) * h * ffn)
    return matmul + 4 * s * h


def attention_score_flops_per_token(shape: dict[str, np.ndarray]) -> np.ndarray:
    """The s^2 part of one layer's forward FLOPs per token (recomputed by selective recompute)."""
    return 4 * shape["seq_len"] * shape["hidden"]


def model_flops_per_iteration(shape: dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    """Model FLOPs of one training iteration (forward + backward, no recomputation).

    Forward per token: L layers plus the output layer 2*h*V; backward costs twice the
    forward (Narayanan et al. 2021, eq. 3; Chowdhery et al. 2022, appendix B for MFU).
    """
    forward = shape["layers"] * layer_forward_flops_per_token(shape) + 2 * shape["hidden"] * shape["vocab"]
    return 3 * forward * tokens
