"""Transformer workload: shapes from presets, parameter counts and FLOPs per iteration."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import numpy as np
import yaml

SHAPE_FIELDS = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "seq_len", "vocab")


@cache
def presets() -> dict[str, dict]:
    """Model preset name -> shape (see ``dse/data/models.yaml`` for sources)."""
    return yaml.safe_load(files("dse.data").joinpath("models.yaml").read_text())


def resolve_shape(model: np.ndarray, overrides: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Shape arrays per candidate: the preset's values, replaced where an override is finite."""
    model = np.asarray(model).astype(str)
    names, inverse = np.unique(model, return_inverse=True)
    out = {}
    for f in SHAPE_FIELDS:
        base = np.array([presets()[n][f] if n in presets() else np.nan for n in names], dtype=float)[inverse]
        ov = np.asarray(overrides.get(f, np.nan), dtype=float)
        out[f] = np.where(np.isfinite(ov), ov, base)
    return out


def parameter_count(shape: dict[str, np.ndarray]) -> np.ndarray:
    """Parameters of a dense decoder: attention (q, o, and k, v for ``kv_heads``), MLP, embeddings.

    Attention: h*h (q) + 2*h*h*kv/heads (k, v) + h*h (o); MLP: 2*h*ffn; two layer norms
    (4*h); input embedding V*h (tied with the output layer, as in GPT-2/3 and Megatron).
    """
    h, L, ffn = shape["hidden"], shape["layers"], shape["ffn_hidden"]
    kv_frac = shape["kv_heads"] / shape["heads"]
    per_layer = 2 * h * h + 2 * h * h * kv_frac + 2 * h * ffn + 4 * h
    return L * per_layer + shape["vocab"] * h


def model_flops_per_iteration(shape: dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    """Model FLOPs of one training iteration (forward + backward, no recomputation).

    Per token and layer the forward pass costs 2 FLOPs per matrix weight plus the
    attention scores and weighted sum 2*2*s*h (Narayanan et al. 2021, eq. 3); the output
    layer costs 2*h*V. Backward costs twice the forward.
    """
    h, L, ffn, s, V = (shape[k] for k in ("hidden", "layers", "ffn_hidden", "seq_len", "vocab"))
    kv_frac = shape["kv_heads"] / shape["heads"]
    matmul = 2 * (2 * h * h + 2 * h * h * kv_frac + 2 * h * ffn)
    attention = 4 * s * h
    forward_per_token = L * (matmul + attention) + 2 * h * V
    return 3 * forward_per_token * tokens
