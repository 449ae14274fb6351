"""Fine-tuning with low-rank adapters (LoRA; Hu et al. 2021, "LoRA: Low-Rank Adaptation of
Large Language Models", arXiv:2106.09685): the model's weights are frozen and beside each
adapted weight matrix ``W`` (``d_in x d_out``) two trained matrices ``A`` (``d_in x r``)
and ``B`` (``r x d_out``) add ``x A B`` to its output (docs/model.md, section 1b).

What changes against training every weight: the frozen weights get no weight gradient (a
linear layer's backward computes only the input gradient, one GEMM of the forward's size
instead of two), no gradient reduction, no fp32 master copy, no optimizer state and no
checkpoint write; the adapters get all of these, and their GEMMs run at 16 bits whatever
the base layer's precision (NeMo ``TELinearAdapter``: "LoRA fwd is performed in original
precision regardless of FP8 enabled").

Tensor parallelism splits every adapter matrix over the ranks, as NeMo's
``ParallelLinearAdapter`` does (``nemo/collections/llm/peft/utils.py``): beside a
column-parallel base layer (QKV, FC1) ``A`` is a column-parallel linear over ``r`` whose
``T x r`` output is gathered (``gather_output=True``) and ``B`` a column-parallel one;
beside a row-parallel base layer (the attention's output projection, FC2) ``A`` is a
row-parallel linear (its ``T x r`` output reduced) and ``B`` a column-parallel one whose
``T x d_out`` output is all-gathered, an activation-sized collective that the base layer's
tensor-parallel overlap does not hide (:func:`gather_time`). The ``T x r`` collectives are
``r / h`` of an activation (under 1% at these widths) and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.columns import Factorised, choice_codes
from dse.analytic.rows import where
from dse.analytic.time.gemm import BYTES, Roofline

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


def _adapted(targets) -> list[tuple[bool, np.ndarray]]:
    """A layer's matrices in order (QKV, the attention's output projection, FC1, FC2): for
    each, whether its base layer is column-parallel, and 1 where the candidate's
    ``targets`` adapt it (else 0). The one place that says what each target adapts."""
    attention = (targets <= LORA_TARGETS.index("attention")).astype(float)
    mlp = (targets == LORA_TARGETS.index("all")).astype(float)
    return [(True, np.ones_like(mlp)), (False, attention), (True, mlp), (False, mlp)]


def _matrices(shape, targets) -> list[tuple[np.ndarray, np.ndarray, bool, np.ndarray]]:
    """The adapted matrices of a layer: ``(d_in, d_out, column_parallel, on)`` each, ``on``
    1 where the candidate's targets include it (:func:`_adapted`)."""
    dims, h = shape.attention, shape.hidden
    ffn, gated = shape.ffn_hidden, shape.gated_mlp
    sizes = [
        (h, dims.q + dims.k + dims.v),  # QKV
        (dims.o, h),  # the attention's output projection
        (h, (1.0 + gated) * ffn),  # FC1 (gate and up projections when gated)
        (ffn, h),  # FC2
    ]
    return [(*size, *adapted) for size, adapted in zip(sizes, _adapted(targets), strict=True)]


def _count(ad: Adapters, column: bool) -> np.ndarray:
    """Adapted matrices per layer whose base layer is column-parallel (``column``), else
    row-parallel."""
    return sum(on for is_column, on in _adapted(ad.targets) if is_column == column)


def parameters_per_layer(shape, rank, targets) -> np.ndarray:
    """Adapter parameters of one decoder layer: ``r (d_in + d_out)`` per adapted matrix."""
    return sum(on * rank * (d_in + d_out) for d_in, d_out, _, on in _matrices(shape, targets))


def _gemm(m, n, k, g: Roofline) -> tuple[np.ndarray, np.ndarray]:
    """``(compute_s, memory_s)`` of an adapter GEMM ``[m x k] @ [k x n]``: the FLOPs at the
    part's large-GEMM efficiency, or the operands' and result's bytes at its bandwidth,
    whichever is longer, in its slot. An adapter GEMM is thin (``r`` wide) and moves as
    many bytes as an activation: the calibrated fixed cost of a GEMM (``half_flops``, from
    the layers' wide GEMMs and the single-node runs) would charge each such kernel ~100 us,
    several times what its bytes take. The scale and the addition to the base layer's
    output are element-wise kernels of their own (:func:`elementwise_bytes`)."""
    compute = 2.0 * m * n * k / (g.peak_flops * g.clock_ratio * g.eff_max)
    memory = BYTES * (m * k + k * n + m * n) / g.hbm_bw_bps
    bound = compute >= memory
    return where(bound, compute, 0.0), where(bound, 0.0, memory)


def forward_gemms(shape, ad: Adapters, tp, T, g16: Roofline) -> tuple[np.ndarray, np.ndarray]:
    """Forward ``(compute_s, memory_s)`` of one layer's adapter GEMMs on one tensor rank
    (``T`` tokens, 16-bit roofline ``g16``), zero where the candidate has none: ``A`` over
    its share (``r / tp`` columns beside a column-parallel layer, ``d_in / tp`` rows beside
    a row-parallel one), ``B`` over ``d_out / tp`` columns."""
    c = m = 0.0
    r = ad.rank
    for d_in, d_out, column, on in _matrices(shape, ad.targets):
        a = _gemm(T, r / tp, d_in, g16) if column else _gemm(T, r, d_in / tp, g16)
        b = _gemm(T, d_out / tp, r, g16)
        c = c + on * (a[0] + b[0])
        m = m + on * (a[1] + b[1])
    return where(ad.lora > 0, c, 0.0), where(ad.lora > 0, m, 0.0)


#: HBM traffic of an adapter's element-wise kernels, in 16-bit elements of its output (per
#: rank, ``T x d_out / tp``) or input. Forward: the scale ``x * (alpha / dim)`` reads and
#: writes the output (2) and the addition to the base layer's output reads both and writes
#: the sum (3) (NeMo 24.07 ``ParallelLinearAdapter.forward`` and ``mcore_mixins``'
#: ``mixed_qkv = mixed_qkv + lora_mixed_qkv``; the scale runs at ``alpha = dim`` too).
#: Backward: the addition passes its gradient on untouched, the scale's backward reads and
#: writes it (2), and the adapter's input gradient is summed into the base layer's (read
#: both, write one: 3 of the input; Transformer Engine's ``LayerNormLinear`` backward adds
#: the returned LayerNorm output's gradient, ``dgrad + grad_outputs[1]``; beside a
#: row-parallel layer autograd sums the shared input's two gradients).
FORWARD_OUTPUT_ELEMENTS = 5.0
BACKWARD_OUTPUT_ELEMENTS = 2.0
BACKWARD_INPUT_ELEMENTS = 3.0


def elementwise_bytes(shape, ad: Adapters, tp, T, full_recompute) -> np.ndarray:
    """HBM bytes of one layer's adapter element-wise kernels per micro-batch on one tensor
    rank, every pass (the forward again where the layer is fully recomputed), zero where the
    candidate has none: per adapted matrix, the scale and the addition over ``B``'s
    ``T x d_out / tp`` output and the input gradient's sum over ``A``'s input (``T x d_in``
    beside a column-parallel layer, whose adapter takes the gathered LayerNorm output;
    ``T x d_in / tp`` beside a row-parallel one)."""
    forward = BYTES * FORWARD_OUTPUT_ELEMENTS * (1.0 + full_recompute)
    total = 0.0
    for d_in, d_out, column, on in _matrices(shape, ad.targets):
        out = T * d_out / tp
        inp = T * d_in if column else T * d_in / tp
        per = forward * out + BYTES * (
            BACKWARD_OUTPUT_ELEMENTS * out + BACKWARD_INPUT_ELEMENTS * inp
        )
        total = total + on * per
    return where(ad.lora > 0, total, 0.0)


#: Python-level operations of a Megatron-style GPT layer's forward, the unit of the fitted
#: host dispatch time per layer pass (``benchmarks/host_dispatch.py``; docs/model.md,
#: section 6, "Host dispatch")
LAYER_OPS = 30.0
#: the operations an adapter adds to its layer's forward: ``A``, ``B``, the scale and the
#: addition to the base layer's output (NeMo ``LoRALinear``; no dropout at its default 0)
ADAPTER_OPS = 4.0


def host_factor(ad: Adapters) -> np.ndarray:
    """The host's dispatch time per layer pass with the adapters, as a multiple of the
    layer's alone: ``1 + 4 n / 30`` for ``n`` adapted matrices (1 where the candidate has
    none). A frozen linear's backward is still one autograd operation (its weight gradient
    skipped inside it), so nothing is taken off."""
    adapted = _count(ad, column=True) + _count(ad, column=False)
    return 1.0 + ad.lora * ADAPTER_OPS * adapted / LAYER_OPS


def gather_time(net, ad: Adapters, act_bytes, tp, sequence_parallel, full_recompute) -> np.ndarray:
    """Exposed time of one layer's adapter output gathers per micro-batch: beside each adapted
    row-parallel layer, ``B``'s ``T x h`` output all-gathered over the tensor ranks in the
    forward (again when the layer is recomputed), and in the backward where sequence
    parallelism scatters it back (the scatter's backward gathers)."""
    per = net.all_gather(act_bytes, tp, 1) * (1.0 + (sequence_parallel > 0) + full_recompute)
    return where((ad.lora > 0) & (tp > 1), _count(ad, column=False) * per, 0.0)


def saved_input_bytes(ad: Adapters, shape, tokens, tp, sequence_parallel) -> np.ndarray:
    """Activation bytes per layer and micro-batch a LoRA layer keeps beyond training every
    weight: with sequence parallelism, ``A`` beside a column-parallel layer gathers its input
    from the sequence-parallel region and keeps it whole for its weight gradient, where
    training every weight keeps the ``1 / tp`` share (Megatron gathers it again in the
    backward) and a frozen base layer keeps none."""
    extra = BYTES * tokens * shape.hidden * (1.0 - 1.0 / tp) * _count(ad, column=True)
    return where((ad.lora > 0) & (sequence_parallel > 0) & (tp > 1), extra, 0.0)


def trained_parameters(params: np.ndarray, layers, ad: Adapters | None, tp) -> np.ndarray:
    """Trained parameters per accelerator on a stage of ``layers`` layers holding ``params``
    (its tensor-parallel share of the weights): all of them, or where the candidate
    fine-tunes with LoRA its adapters' share (every adapter matrix split over the ranks)."""
    if ad is None:
        return params
    return where(ad.lora > 0, layers * ad.params_per_layer / tp, params)
