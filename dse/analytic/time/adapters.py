"""Fine-tuning with low-rank adapters (LoRA; Hu et al. 2021, "LoRA: Low-Rank Adaptation of
Large Language Models", arXiv:2106.09685): the model's weights are frozen and beside each
adapted weight matrix ``W`` (``d_in x d_out``) two trained matrices ``A`` (``d_in x r``)
and ``B`` (``r x d_out``) add ``x A B`` to its output (docs/model.md, section 1b).

What changes against training every weight: the frozen weights get no weight gradient (a
linear layer's backward computes only the input gradient, one GEMM of the forward's size
instead of two), no gradient reduction, no fp32 master copy, no optimizer state and no
checkpoint write; the adapters get all of these, and their GEMMs run at 16 bits whatever
the base layer's precision (NeMo ``TELinearAdapter``: "LoRA fwd is performed in original
precision regardless of FP8 enabled"). Tensor parallelism splits an adapter as NeMo's
``ParallelLinearAdapter`` does: beside a column-parallel base layer (QKV, FC1) ``A`` is
whole on every rank and ``B`` split by columns; beside a row-parallel one (the attention's
output projection, FC2) ``A`` is split by rows and ``B`` whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.columns import Factorised, choice_codes
from dse.analytic.rows import where
from dse.analytic.time.gemm import gemm

#: the ``adapter`` input's choices: every weight trained, or LoRA adapters beside frozen weights
ADAPTERS = ("none", "lora")
#: the ``lora_targets`` input's choices, the weight matrices that get an adapter: every linear
#: layer of a block (NeMo 2 ``llm.peft.LoRA``'s default target_modules linear_qkv,
#: linear_proj, linear_fc1, linear_fc2), the attention's (QKV and output projections), or
#: the QKV projection alone (NeMo 1's default ``attention_qkv``; the LoRA paper adapted
#: W_q and W_v)
LORA_TARGETS = ("all", "attention", "qkv")


@dataclass(frozen=True, slots=True)
class Adapters:
    """A block's fine-tuning adapters, one value per candidate."""

    lora: np.ndarray  # 1 where the candidate trains LoRA adapters beside frozen weights
    rank: np.ndarray  # the adapters' rank r
    targets: np.ndarray  # code into LORA_TARGETS
    params_per_layer: np.ndarray  # adapter parameters of one layer (all tensor ranks)


def of(adapter, rank: np.ndarray, lora_targets, shape) -> Adapters | None:
    """The candidates' adapters (``adapter`` and ``lora_targets``: the text inputs), or None
    where no candidate of the block fine-tunes with LoRA (the model then does no adapter
    arithmetic)."""
    if isinstance(adapter, Factorised) and "lora" not in adapter.uniques:
        return None  # (a column left at its default: nothing to compare row by row)
    lora = (choice_codes(adapter, ADAPTERS) == ADAPTERS.index("lora")).astype(float)
    if not lora.any():
        return None
    targets = choice_codes(lora_targets, LORA_TARGETS)
    return Adapters(
        lora=lora,
        rank=rank,
        targets=targets,
        params_per_layer=lora * parameters_per_layer(shape, rank, targets),
    )


def _matrices(shape, targets) -> list[tuple[np.ndarray, np.ndarray, bool, np.ndarray]]:
    """The adapted matrices of a layer: ``(d_in, d_out, column_parallel, on)`` each, ``on``
    1 where the candidate's targets include it."""
    dims, h = shape.attention, shape.hidden
    ffn, gated = shape.ffn_hidden, shape.gated_mlp
    attention = (targets <= LORA_TARGETS.index("attention")).astype(float)
    mlp = (targets == LORA_TARGETS.index("all")).astype(float)
    return [
        (h, dims.q + dims.k + dims.v, True, np.ones_like(targets)),  # QKV
        (dims.o, h, False, attention),  # the attention's output projection
        (h, (1.0 + gated) * ffn, True, mlp),  # FC1 (gate and up projections when gated)
        (ffn, h, False, mlp),  # FC2
    ]


def parameters_per_layer(shape, rank, targets) -> np.ndarray:
    """Adapter parameters of one decoder layer: ``r (d_in + d_out)`` per adapted matrix."""
    return sum(on * rank * (d_in + d_out) for d_in, d_out, _, on in _matrices(shape, targets))


def forward_gemms(shape, ad: Adapters, tp, T, T_tiles, g16) -> tuple[np.ndarray, np.ndarray]:
    """Forward ``(compute_s, memory_s)`` of one layer's adapter GEMMs on one tensor rank
    (``T`` tokens, 16-bit roofline ``g16``), zero where the candidate has none."""
    c = m = 0.0
    r = ad.rank
    for d_in, d_out, column, on in _matrices(shape, ad.targets):
        a_in = d_in if column else d_in / tp  # A: whole beside a column-parallel layer
        b_out = d_out / tp if column else d_out  # B: split by columns beside it, else whole
        a = gemm(T, r, a_in, None, g16, m_tiles=T_tiles)
        b = gemm(T, b_out, r, None, g16, m_tiles=T_tiles)
        c = c + on * (a[0] + b[0])
        m = m + on * (a[1] + b[1])
    return where(ad.lora > 0, c, 0.0), where(ad.lora > 0, m, 0.0)


def rank_parameters_per_layer(shape, ad: Adapters, tp) -> np.ndarray:
    """Adapter parameters one tensor rank holds per layer: beside a column-parallel layer
    the whole ``A`` and its share of ``B``, beside a row-parallel one its share of ``A`` and
    the whole ``B``."""
    r = ad.rank
    held = 0.0
    for d_in, d_out, column, on in _matrices(shape, ad.targets):
        held = held + on * r * (d_in + d_out / tp if column else d_in / tp + d_out)
    return ad.lora * held


def trained_parameters(params: np.ndarray, layers, ad: Adapters | None, shape, tp) -> np.ndarray:
    """Trained parameters per accelerator on a stage of ``layers`` layers holding ``params``
    (its tensor-parallel share of the weights): all of them, or where the candidate
    fine-tunes with LoRA its adapters' (:func:`rank_parameters_per_layer`)."""
    if ad is None:
        return params
    return where(ad.lora > 0, layers * rank_parameters_per_layer(shape, ad, tp), params)
