"""Mixture-of-experts layers on one accelerator: expert parallelism, the routed and shared
experts' GEMMs, the dispatch and combine all-to-alls, and what the experts add to memory
(docs/model.md, sections 1-3 and 6).

Layout (Megatron-Core's "MoE parallel folding", Liu et al. 2025, arXiv:2504.14960): the
attention layers run on the ``t x c x D`` ranks of a pipeline stage; the expert layers fold
the same ranks into ``ETP x EP x EDP`` (expert-tensor, expert and expert-data parallel,
ETP innermost). Each of the ``EP`` ranks of an expert group holds ``E / EP`` routed experts
of every MoE layer of its stage, split ``ETP`` ways; their gradients are reduced over the
``EDP = t c D / (ETP EP)`` ranks holding the same experts. Megatron-Core's rules: ``EP``
divides the experts and ``ETP x EP`` divides ``t c D``; ``ETP`` defaults to ``t``
(``expert_tensor_parallel_size`` None).

Work per rank and micro-batch (forward; backward 2x): each rank routes the ``T / t``
tokens it holds (sequence parallel) to ``k`` experts, ``T k c_f / t`` assignments, where
``c_f`` is the capacity factor: the load of the most loaded expert over the mean (1 =
perfectly balanced, as NVIDIA's benchmarks force; with token dropping, the capacity an
expert is padded to, Fedus et al. 2022, Switch Transformer, section 2.1). An expert group
of ``EP`` ranks processes ``EP`` ranks' assignments, so each rank computes ``T k c_f ETP / t``
rows (gathered over ETP) of its ``E / EP`` experts, ``f_e / ETP`` wide each (a grouped
GEMM). Dispatch and combine are two all-to-alls of ``T k c_f h`` 16-bit values per rank
over the EP group (``2 T k c_f h / t`` bytes), backward two more, two more with full
recomputation (DeepSeek-V3 report, section 3.2.2; Megatron-Core alltoall dispatcher).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.rows import where
from dse.analytic.time import workload
from dse.analytic.time.collectives import exposed, exposed_in
from dse.analytic.time.gemm import BYTES, gemm
from dse.analytic.time.parallelism import Layout, indivisible
from dse.analytic.time.tensor_parallel import collectives_per_layer
from dse.analytic.time.workload import ModelShape

#: HBM bytes per element of the token permutation before dispatch and after combine
#: (read 2 B and write 2 B, once each way): Megatron-Core's moe_permute / moe_unpermute
PERMUTE_BYTES = 8.0
#: CUDA streams Transformer Engine's grouped GEMM spreads the experts' GEMMs over: its
#: GroupedLinear runs one cuBLAS GEMM per local expert, expert ``i`` on compute stream
#: ``i % num_streams`` (transformer_engine/common/include/transformer_engine/gemm.h
#: ``constexpr int num_streams = 4``; ``multi_stream_cublas_gemm`` in
#: common/gemm/cublaslt_gemm.cu; NVIDIA/TransformerEngine PR #853, "Grouped GEMM via
#: multi-stream cuBLAS", the path Megatron-Core's ``--moe-grouped-gemm`` takes)
GROUPED_GEMM_STREAMS = 4.0


@dataclass(frozen=True, slots=True)
class ExpertLayout:
    """Per-candidate expert layout; ``on`` is False when no candidate of the block has
    experts (every MoE term is then skipped and the dense model is unchanged)."""

    on: bool
    frac: np.ndarray  # share of the layers with a MoE feed-forward block (0: dense)
    ep: np.ndarray  # expert parallel degree
    etp: np.ndarray  # expert tensor parallel degree
    edp: np.ndarray  # expert data parallel degree t c D / (ETP EP)
    cf: np.ndarray  # capacity factor (most loaded expert / mean)
    overlap: np.ndarray  # 1: dispatch/combine overlapped with another micro-batch's compute
    dedup: np.ndarray  # 1: one copy per destination domain over the fabric (DeepEP)
    params: np.ndarray  # routed-expert parameters per (average) layer, whole model


def layout(
    shape: ModelShape, ep, etp, cf, overlap, dedup, lay: Layout
) -> tuple[ExpertLayout, list[tuple[np.ndarray, str]]]:
    """The :class:`ExpertLayout` of the expert inputs (degrees ``ep`` and ``etp``, capacity
    factor, overlap and deduplicated-dispatch flags) on the layout ``lay``, and ``(mask,
    reason)`` for expert layouts that cannot run.

    ``etp`` NaN: the tensor-parallel degree (Megatron-Core's default)."""
    tp, cp, dp = lay.tp, lay.cp, lay.dp
    moe = workload.is_moe(shape)
    on = bool(moe.any())
    checks = [((ep > 1) & ~moe, "expert parallelism needs a mixture-of-experts model")]
    if not on:
        return ExpertLayout(
            on=False,
            frac=None,
            ep=ep,
            etp=etp,
            edp=None,
            cf=cf,
            overlap=overlap,
            dedup=dedup,
            params=None,
        ), checks
    etp = where(np.isfinite(etp), etp, tp)
    group = tp * cp * dp
    checks += [
        (
            moe & indivisible(shape.experts, ep),
            "expert parallel degree does not divide the experts",
        ),
        (
            moe & indivisible(group, etp * ep),
            "expert x expert-tensor parallel does not divide the tensor x context x data-parallel ranks",
        ),
        (moe & (shape.experts_per_token > shape.experts), "more experts per token than experts"),
    ]
    edp = np.maximum(np.floor(tp * cp * dp / np.maximum(etp * ep, 1.0)), 1.0)
    return ExpertLayout(
        on=on,
        frac=workload.moe_fraction(shape),
        ep=ep,
        etp=etp,
        edp=edp,
        cf=cf,
        overlap=overlap,
        dedup=dedup,
        params=workload.expert_parameters(shape),
    ), checks


def assignments(shape, ex: ExpertLayout, T, tp) -> np.ndarray:
    """Token-expert assignments one rank routes per micro-batch, ``T k c_f / t``."""
    return T * shape.experts_per_token * ex.cf / tp


def ffn_gemms(shape, ex: ExpertLayout, tp, T, T_tiles, g) -> tuple[np.ndarray, np.ndarray]:
    """Forward ``(compute_s, memory_s)`` of one MoE feed-forward block on one rank: the router
    ``[T/t x h] . [h x E]``, the shared experts as a dense MLP ``s f_e`` wide split over ``t``,
    and the routed experts as a grouped GEMM of ``E / EP`` experts with ``T k c_f ETP / (t E/EP)``
    rows each (``(1+g) f_e / ETP`` then ``f_e / ETP`` wide). The grouped GEMM is one kernel
    per expert over :data:`GROUPED_GEMM_STREAMS` streams: the kernels of one stream run one
    after another, so ``ceil(E/EP / streams)`` kernels' fixed costs (the GEMM's
    ``half_flops``, what a kernel cannot amortise) lie on its path, where one batched
    kernel would pay one; the waves are counted over all the experts' tiles (the streams'
    kernels share the SMs)."""
    h, f_e, gated = shape.hidden, shape.expert_ffn_hidden, shape.gated_mlp
    router = gemm(T / tp, shape.experts, h, None, g)
    shared_f = shape.shared_experts * f_e
    has_shared = shared_f > 0
    sh1 = gemm(T, (1 + gated) * shared_f / tp, h, None, g, m_tiles=T_tiles)
    sh2 = gemm(T, h, shared_f / tp, None, g, m_tiles=T_tiles)
    # experts per rank; a dense row of a block with MoE rows has none: one, so that its
    # (unused, zero-weighted) expert terms stay finite instead of 0 x inf = NaN
    local = where(shape.experts > 0, shape.experts / ex.ep, 1.0)
    rows = assignments(shape, ex, T, tp) * ex.etp / local
    serial = np.ceil(local / GROUPED_GEMM_STREAMS)  # kernels one after another on a stream
    fc1 = gemm(rows, (1 + gated) * f_e / ex.etp, h, local, g, kernels=serial)
    fc2 = gemm(rows, h, f_e / ex.etp, local, g, kernels=serial)
    compute = router[0] + where(has_shared, sh1[0] + sh2[0], 0.0) + fc1[0] + fc2[0]
    memory = router[1] + where(has_shared, sh1[1] + sh2[1], 0.0) + fc1[1] + fc2[1]
    return compute, memory


def elementwise_bytes(shape, ex: ExpertLayout, tp, T, eager) -> np.ndarray:
    """HBM bytes of one MoE block's element-wise kernels, one forward pass: the token
    permutation and its inverse (:data:`PERMUTE_BYTES` per element of the ``T k c_f / t``
    assignments of ``h``), and the activation (SwiGLU or GeLU, ``4 + 2g`` bytes per element,
    as the dense MLP's) on the routed and shared experts' ``f_e``-wide outputs."""
    a = assignments(shape, ex, T, tp)
    act = (
        (4.0 + 2.0 * shape.gated_mlp)
        * shape.expert_ffn_hidden
        * (a + T * shape.shared_experts / tp)
    )
    return (PERMUTE_BYTES * a * shape.hidden + act) * eager


def cast_elements(shape, ex: ExpertLayout, tp, T) -> np.ndarray:
    """Elements of a MoE feed-forward block's linear-layer inputs that fp8 training casts in
    one pass on one rank (Transformer Engine quantises every GEMM input; the router stays
    in 16 or 32 bit): the routed experts' FC1 input, the dispatched rows (``T k c_f ETP / t``
    of ``h``), and their FC2 input (``T k c_f / t`` rows of ``f_e``), plus the shared
    experts' (``T`` of ``h`` and ``T`` of ``s f_e / t``, as the dense MLP's). A dense MLP's
    are ``T h`` and ``T f / t``: the experts' FC1 input is ``k c_f ETP / t`` times as many
    rows (``k c_f`` with ETP = t, Megatron-Core's default)."""
    a = assignments(shape, ex, T, tp)
    f_e, h = shape.expert_ffn_hidden, shape.hidden
    shared = where(shape.shared_experts > 0, T * h + T * shape.shared_experts * f_e / tp, 0.0)
    return a * ex.etp * h + a * f_e + shared


def activation_bytes(shape, ex: ExpertLayout, tp, T) -> np.ndarray:
    """Activation bytes one MoE block keeps for backward per micro-batch on one rank, *beyond*
    the dense feed-forward share (``(4 + 2g) f T / t``,
    :func:`~dse.analytic.time.memory.split_bytes_per_hidden`) that the model counts for
    every layer: the dispatched tokens (2 B x ``h`` per row, ``T k c_f ETP / t`` rows) and
    the ``(4 + 2g) f_e / ETP`` activation bytes per row, plus the shared experts'."""
    a = assignments(shape, ex, T, tp)
    per_elem = 4.0 + 2.0 * shape.gated_mlp
    kept = (
        BYTES * shape.hidden * a * ex.etp
        + per_elem * shape.expert_ffn_hidden * a
        + per_elem * shape.shared_experts * shape.expert_ffn_hidden * T / tp
    )
    return kept - per_elem * shape.ffn_hidden * T / tp


def a2a_bytes(shape, ex: ExpertLayout, T, tp) -> np.ndarray:
    """Bytes one rank sends in one dispatch (or combine) all-to-all, ``2 T k c_f h / t``."""
    return BYTES * assignments(shape, ex, T, tp) * shape.hidden


def dispatch_shares(net, shape, ex: ExpertLayout) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(intra_share, inter_share)`` of a dispatch's bytes on the scale-up domain and the
    fabric (None: the plain all-to-all's). With one copy per destination domain (DeepEP,
    DeepSeek-V3 section 3.2.2), a token whose ``k`` experts fall uniformly on the ``n``
    domains the EP group spans reaches ``(n-1)(1 - (1 - 1/n)^k)`` remote domains: that many
    of its ``k`` copies cross the fabric. Inside a domain of ``m`` group members a copy moves
    once unless it is already on its expert's rank: one sent to its own domain unless it is
    its own rank's, one arriving from another domain unless it lands on the expert's rank
    (DeepEP sends to the rank of the same local index): ``(m-1)/m`` of the copies, none when
    each domain holds one member. DeepSeek's node-limited routing (at most 4 nodes per token)
    is not modelled."""
    if not ex.dedup.any():
        return None, None
    g, kd, n, *_ = net.split(ex.ep, ex.etp)
    k = shape.experts_per_token
    remote = (n - 1.0) * (1.0 - (1.0 - 1.0 / n) ** k)
    plain_intra, plain_inter = (kd - 1.0) / g, (g - kd) / g
    on = ex.dedup > 0
    return where(on, (kd - 1.0) / kd, plain_intra), where(on, remote / k, plain_inter)


def a2a_per_layer(full_recompute) -> np.ndarray:
    """All-to-alls per MoE layer and micro-batch: dispatch + combine forward, their
    gradients backward (4), 2 more when full recomputation re-runs the forward."""
    return 4.0 + 2.0 * full_recompute


def partnered_share(m):
    """Share of an iteration's micro-batches whose expert all-to-alls another micro-batch's
    compute can hide: the overlap runs one micro-batch's forward beside another's backward
    (Megatron-Core's combined 1F1B, DualPipe's paired chunks), so the first forward and the
    last backward of the ``m`` micro-batches have no partner: (m - 1) / m, none with one
    micro-batch. Those hide what fits in their window; the others, nothing. (Earlier
    pipeline stages have more unpaired warm-up forwards: this is the most the overlap hides.)"""
    return np.maximum(m - 1.0, 0.0) / np.maximum(m, 1.0)


def comm_times(
    net, shape, ex: ExpertLayout, lay: Layout, T, full_recompute, window_s, tp_overlap, tax
):
    """Exposed time of one (average) layer's expert communication per micro-batch: the
    all-to-alls over the EP group (stride ETP), overlapped with ``window_s`` of another
    micro-batch's compute where the study says so (Megatron-Core
    ``--overlap-moe-expert-parallel-comm``, DeepSeek's DualPipe), on the share of the ``m``
    micro-batches that have a partner (:func:`partnered_share`), and with ETP > 1 the
    expert-tensor all-gather / reduce-scatter of the gathered rows (``n_tp / 2`` all-reduce
    equivalents over ETP, overlapped as the stack overlaps tensor-parallel traffic). Scaled
    by the MoE share of the layers. ``lay``: the layout (tensor degree, micro-batches)."""
    tp, m = lay.tp, lay.micro_batches
    n_tp = collectives_per_layer(full_recompute)
    intra, inter = dispatch_shares(net, shape, ex)
    a2a = a2a_per_layer(full_recompute) * net.all_to_all(
        a2a_bytes(shape, ex, T, tp), ex.ep, ex.etp, intra, inter
    )
    # the partnered micro-batches hide what fits in their window, the others hide nothing
    share = partnered_share(m)
    hidden_a2a, left_s = exposed_in(a2a, ex.overlap, window_s, tax)
    a2a, window_s = (
        share * hidden_a2a + (1.0 - share) * a2a,
        share * left_s + (1.0 - share) * window_s,
    )
    gathered = a2a_bytes(shape, ex, T, tp) * ex.etp
    etp_s = where(ex.etp > 1, 0.5 * n_tp * net.all_reduce(gathered, ex.etp, 1.0), 0.0)
    etp_s = exposed(etp_s, tp_overlap, window_s, tax)
    return ex.frac * (a2a + etp_s)


def link_bytes(
    net, shape, ex: ExpertLayout, T, tp, n_tp, full_recompute
) -> tuple[np.ndarray, np.ndarray]:
    """Scale-up and scale-out bytes one rank sends per micro-batch per (average) layer for
    its expert communication (all-to-alls and ETP collectives)."""
    vol = a2a_bytes(shape, ex, T, tp)
    up, out = net.all_to_all_traffic(vol, ex.ep, ex.etp, *dispatch_shares(net, shape, ex))
    n = a2a_per_layer(full_recompute)
    e_up, e_out = net.traffic(vol * ex.etp, ex.etp, 1.0)
    e_up, e_out = (
        where(ex.etp > 1, 0.5 * n_tp * e_up, 0.0),
        where(ex.etp > 1, 0.5 * n_tp * e_out, 0.0),
    )
    return ex.frac * (n * up + e_up), ex.frac * (n * out + e_out)
