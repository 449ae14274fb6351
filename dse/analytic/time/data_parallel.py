"""Data parallelism: gradient reduction and sharded-weight gathers per ZeRO stage
(Rajbhandari et al. 2020), overlapped as the training stack does."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.rows import where
from dse.analytic.time.collectives import exposed, kept_share
from dse.analytic.time.gemm import BYTES

#: share of a micro-batch's kernel time spent in its backward pass (backward = 2 x forward)
BACKWARD_SHARE = 2.0 / 3.0


@dataclass(frozen=True, slots=True)
class HeldStage:
    """The pipeline stage holding the most parameters, whose reduction ends the iteration."""

    params: (
        np.ndarray
    )  # parameters per accelerator (its tensor-parallel share), routed experts apart
    layers: np.ndarray  # the most layers on a stage
    experts: (
        tuple | None
    )  # routed experts' (params per accelerator, expert-data-parallel ranks, stride); None: dense
    #: the parameters per accelerator it trains where they are not all (LoRA's adapters beside
    #: frozen weights: only they have gradients and an optimizer step); None: every one
    trained: np.ndarray | None = None


def chunked(comm_s, overlaps, window_s, chunks, tax) -> np.ndarray:
    """Exposed time of a collective issued in ``chunks`` equal buckets, each behind the
    compute after it (``window_s`` in all): the last bucket has nothing after it and is
    exposed whole, the others hide behind the window at ``tax`` per second overlapped
    (Megatron-Core's distributed optimizer "exposes only one DP communication chunk"; with
    pipeline parallelism the chunk is a virtual stage's layers: NVIDIA Megatron-Bridge
    communication-overlap guide, docs.nvidia.com/nemo/megatron-bridge/latest/training/
    communication-overlap.html)."""
    last = comm_s / np.maximum(chunks, 1.0)
    hidden = np.minimum((comm_s - last) * overlaps, window_s)
    return comm_s - kept_share(tax) * hidden


def weight_bytes(stack, fp8) -> np.ndarray:
    """Bytes per weight in the data-parallel all-gathers: 16 bits, or 1 where an fp8 run's
    stack gathers fp8 weights (Megatron-Core ``fp8_param_gather``, torchao
    ``enable_fsdp_float8_all_gather``: ``stack.fp8_param_gather``)."""
    return where((stack.fp8_param_gather > 0) & (fp8 > 0), 1.0, BYTES)


def dp_time(net, stage: HeldStage, dp, lay, stack, mb_compute_s, tax, launch_s, fp8) -> np.ndarray:
    """Exposed data-parallel communication per iteration (s) of the ``stage`` over ``dp``
    ranks of stride ``lay.tp`` (the layout's ZeRO stage and ``micro_batches``; ``fp8``: 1
    where the candidate trains in fp8), and the
    routed experts' parameters over their expert-data-parallel ranks, reduced in the same
    buckets (their times add).

    Gradients (``stack.grad_bytes`` per value) and 16-bit weights:
    ZeRO 0 all-reduces the gradients once (during the last micro-batch's backward when the
    stack overlaps gradient reduction); ZeRO 1 reduce-scatters them and all-gathers the
    updated weights after the optimizer step (behind the next forward when the stack
    overlaps that gather); ZeRO 2 reduce-scatters in every micro-batch's backward;
    ZeRO 3 (FSDP FULL_SHARD) also all-gathers the weights for every micro-batch's forward
    and again for its backward, prefetched behind that micro-batch's kernels
    (``mb_compute_s``) when the stack overlaps them. Each of these three collectives is
    issued per layer (``layers`` on the stage) as ``stack.zero3_calls_per_layer`` calls
    (FSDP: one flat parameter per wrapped layer; DeepSpeed: one per weight matrix), each
    call paying the ring's latency (:meth:`~.collectives.Network.ring_latency`), and, for a
    stack whose collectives go through PyTorch's list API (``stack.per_rank_copies``), one
    copy per rank (``launch_s`` each).

    ``stack.dp_chunk_overlap`` (Megatron-Core's distributed optimizer, ZeRO 0/1): the
    reduction and the gather are issued per bucket (:func:`chunked`): ``v`` chunks when
    interleaved, behind the other chunks' backward / forward of the last / first ``pp``
    micro-batches (``pp (v - 1) / v`` micro-batch slots), else one bucket per layer behind
    one micro-batch. ``stack.pp_gather_once`` (FSDP with a pipeline, torchtitan 9dec370
    ``reshard_after_forward=False`` "to avoid per-microbatch all-gathers"; torch pipelining
    reduces on the last backward only): ZeRO 3 gathers once and reduce-scatters once per
    iteration.
    """
    stage_params, experts, layers = stage.params, stage.experts, stage.layers
    tp, zero, m = lay.tp, lay.zero_stage, lay.micro_batches
    wb = weight_bytes(stack, fp8)
    trained = stage_params if stage.trained is None else stage.trained
    grads = stack.grad_bytes * trained  # (reduce-scattered, or all-reduced by ZeRO 0)
    rs = net.reduce_scatter(grads, dp, tp)
    ag = net.all_gather(wb * stage_params, dp, tp)  # every weight (ZeRO 3's gathers)
    if experts is not None:
        params, ranks, stride = experts
        rs = rs + net.reduce_scatter(stack.grad_bytes * params, ranks, stride)
        ag = ag + net.all_gather(wb * params, ranks, stride)
    # the gather after the optimizer step (ZeRO 1 and 2): the weights it updated, a LoRA
    # candidate's adapters (its model has no routed experts; the other candidates' trained
    # parameters are their stage's, the same values)
    ag_step = ag
    if stage.trained is not None:
        # (the adapters are 16-bit: an fp8 weight gather does not reach them)
        ag_step = where(trained != stage_params, net.all_gather(BYTES * trained, dp, tp), ag)
    backward = BACKWARD_SHARE * mb_compute_s
    forward = mb_compute_s - backward
    gather_once = exposed(ag_step, stack.step_gather_overlap, forward, tax)
    ar = net.all_reduce(grads, dp, tp)
    z0 = exposed(ar, stack.grad_overlap, backward, tax)
    rs_exposed = exposed(rs, stack.grad_overlap, backward, tax)  # (ZeRO 2's, per micro-batch)
    rs_once = rs_exposed
    if bool((stack.dp_chunk_overlap > 0).any()):
        v, pp = lay.interleave, lay.pp
        chunks = where(v > 1, v, np.maximum(layers, 1.0))
        window = where(v > 1, pp * (v - 1.0) / v, 1.0)
        on = stack.dp_chunk_overlap > 0
        rs_once = where(
            on, chunked(rs, stack.grad_overlap, window * backward, chunks, tax), rs_once
        )
        z0 = where(on, chunked(ar, stack.grad_overlap, window * backward, chunks, tax), z0)
        gather_once = where(
            on,
            chunked(ag_step, stack.step_gather_overlap, window * forward, chunks, tax),
            gather_once,
        )
    z1 = rs_once + gather_once
    z2 = m * rs_exposed + gather_once
    if bool((zero >= 3).any()):  # per-call costs of the layer-by-layer collectives
        calls = np.maximum(layers * stack.zero3_calls_per_layer, 1.0)
        per_call = (calls - 1.0) * net.ring_latency(
            dp, tp
        ) + calls * stack.per_rank_copies * dp * launch_s
        ag, rs = ag + per_call, rs + per_call
    hideable = 2.0 * ag * stack.gather_overlap + rs * stack.grad_overlap
    z3 = m * (2.0 * ag + rs - kept_share(tax) * np.minimum(hideable, mb_compute_s))
    once = (stack.pp_gather_once > 0) & (lay.pp > 1)
    z3 = where(
        once,
        exposed(ag, stack.gather_overlap, forward, tax)
        + exposed(rs, stack.grad_overlap, backward, tax),
        z3,
    )
    return where(zero >= 3, z3, where(zero >= 2, z2, where(zero >= 1, z1, z0)))


def volume_bytes(stage_params, zero, m, grad_bytes, weight_bytes=BYTES, trained=None) -> np.ndarray:
    """Bytes per iteration the data-parallel collectives reduce-scatter or all-gather
    (the collective size, as :meth:`~dse.analytic.time.collectives.Network.traffic` takes it):
    ZeRO 0 an all-reduce (2 x the gradients), 1 the gradients and the updated weights, 2 the
    gradients of every micro-batch and the updated weights, 3 per micro-batch the gradients
    and every weight twice (``weight_bytes`` per weight: :func:`weight_bytes`; gradients and
    updates of the ``trained`` parameters only where not all are, LoRA's)."""
    grads, weights = grad_bytes * stage_params, weight_bytes * stage_params
    updated = weights
    if trained is not None:  # (the adapters are gathered at 16 bits)
        grads = grad_bytes * trained
        updated = where(trained != stage_params, BYTES * trained, weights)
    return where(
        zero >= 3,
        m * (grads + 2.0 * weights),
        where(zero >= 2, m * grads + updated, where(zero >= 1, grads + updated, 2.0 * grads)),
    )
