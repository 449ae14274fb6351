"""Parallel layout (:class:`Layout`), pipeline stages (:class:`Stages`) and which layouts can run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.rows import where


def indivisible(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a % b != 0`` for integer-valued float arrays, without float ``fmod`` (~30x slower).

    ``a / b`` is an exact integer iff ``b`` divides ``a`` (for integers below 2**53 a
    remainder r >= 1 moves the quotient by more than its rounding error); NaN, an
    infinite quotient (b = 0) count as not dividing, as ``fmod`` gives NaN there: the
    quotient less its floor is 0 exactly for a whole quotient and NaN for those (four
    array passes; ``~((q == floor(q)) & isfinite(q))``, the same answer, took six).
    """
    q = a / b
    return (q - np.floor(q)) != 0.0


def _unless(gate: np.ndarray, check) -> np.ndarray:
    """``gate & check()``: a check that applies only where ``gate`` holds, not computed
    where it holds nowhere (a block without interleaving or context parallelism)."""
    return gate & check() if gate.any() else gate


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a // b`` for integer-valued float arrays (exact below 2**53, see :func:`indivisible`;
    NaN for an infinite ``a``, as ``//`` gives)."""
    return where(np.isinf(a), np.nan, np.floor(a / b))


@dataclass(frozen=True, slots=True)
class Stages:
    """Transformer layers per pipeline stage, as Megatron and DeepSpeed place them.

    When ``pp`` divides ``L``: ``L / pp`` layers on every stage, the input embedding on the
    first and the output layer on the last (Megatron-LM's default). Otherwise the embedding
    and the output layer count as one layer each and the ``L + 2`` units are spread as
    evenly as possible, the extra units going to the middle stages first: Megatron-Core's
    ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split``,
    DeepSpeed's ``partition_method='type:transformer|embedding'`` (BLOOM: 70 layers on 12
    stages, 6 units each) and Llama 3's "one Transformer layer less on the first and the
    last stage" (126 layers on 16 stages; Dubey et al. 2024, section 3.3.2). With one stage,
    ``first`` and ``last`` are the same stage.
    """

    first: np.ndarray  # layers on the first stage (which holds the input embedding)
    middle: np.ndarray  # layers on the most loaded middle stage (0 when pp < 3)
    last: np.ndarray  # layers on the last stage (which holds the output layer)
    units: np.ndarray  # placement units: L, or L + 2 when pp does not divide L
    # A *part* of a pipeline (a mixed fleet's stages on one accelerator type,
    # :mod:`dse.analytic.fleet`): ``count`` stages from pipeline rank ``rank0``, whose first
    # holds the input embedding where ``embedding`` is 1 and whose last holds the output
    # layer where ``output`` is 1. ``part`` is False for a whole pipeline (count = pp,
    # rank0 = 0, both flags 1), which the model then reads with no extra array operation.
    part: bool = False
    count: np.ndarray | None = None
    rank0: np.ndarray | None = None
    embedding: np.ndarray | None = None
    output: np.ndarray | None = None


def pipeline_stages(layers: np.ndarray, pp: np.ndarray) -> Stages:
    """The :class:`Stages` of ``layers`` transformer layers on ``pp`` stages."""
    even = ~indivisible(layers, pp)
    units = where(even, layers, layers + 2.0)
    q = np.floor(units / pp)
    extra = units - q * pp  # units left after q per stage
    to_middle = np.minimum(extra, np.maximum(pp - 2.0, 0.0))  # middle stages take them first
    rest = extra - to_middle  # then the first, then the last
    per_stage = layers / pp
    first = where(even, per_stage, q + (rest >= 1) - 1.0)
    last = where(even, per_stage, q + (rest >= 2) - 1.0)
    middle = where(pp >= 3, where(even, per_stage, q + (to_middle > 0)), 0.0)
    return Stages(first=first, middle=middle, last=last, units=units)


def part_embeddings(vh, stages: Stages, tied) -> tuple[np.ndarray, np.ndarray]:
    """Embedding parameters on a pipeline part's first and last stage: ``V h`` for the input
    embedding where the part starts the pipeline, ``V h`` for the output layer where it ends
    it (a copy when tied, as Megatron keeps it); a one-stage part holds both on its one
    stage, once when tied (``vh`` = ``V h``)."""
    one = stages.count == 1
    e, o = vh * stages.embedding, vh * stages.output
    both = e + o - vh * stages.embedding * stages.output * tied
    return where(one, both, e), where(one, both, o)


@dataclass(frozen=True, slots=True)
class Layout:
    """A candidate's parallel layout and schedule, one float per candidate (:meth:`of`
    derives the data-parallel degree and the micro-batches from the inputs).

    ``dp = N / (tp cp pp)``; each data-parallel replica runs ``micro_batches = global_batch /
    (dp micro_batch)`` micro-batches per iteration (gradient accumulation; context-parallel
    ranks share a micro-batch).
    """

    accelerators: np.ndarray  # N, accelerators in the job
    tp: np.ndarray  # tensor-parallel degree
    cp: np.ndarray  # context-parallel degree
    pp: np.ndarray  # pipeline-parallel degree
    dp: np.ndarray  # data-parallel degree
    global_batch: np.ndarray  # sequences per iteration
    micro_batch: np.ndarray  # sequences per micro-batch
    micro_batches: np.ndarray  # micro-batches per iteration on one replica
    interleave: np.ndarray  # model chunks per pipeline stage (>= 1; 1 = 1F1B)
    sequence_parallel: np.ndarray  # 1: sequence parallelism (only with tensor parallelism)
    zero_stage: np.ndarray  # sharding (ZeRO) stage 0-3
    recompute: np.ndarray  # activation recomputation, code into memory.RECOMPUTE
    flash_attention: np.ndarray  # 1: fused attention kernel
    cp_overlap: np.ndarray  # 1: the context-parallel exchange overlaps the attention (ring)

    @classmethod
    def of(
        cls,
        *,
        accelerators,
        tp,
        cp,
        pp,
        global_batch,
        micro_batch,
        interleave,
        sequence_parallel,
        zero_stage,
        recompute,
        flash_attention,
        cp_overlap,
    ) -> Layout:
        """The layout of these inputs, with its data-parallel degree and micro-batches."""
        model_parallel = np.maximum(tp * cp * pp, 1)
        dp = np.maximum(_floor_div(accelerators, model_parallel), 1)
        micro_batches = np.maximum(_floor_div(global_batch, np.maximum(dp * micro_batch, 1)), 1)
        return cls(
            accelerators=accelerators,
            tp=tp,
            cp=cp,
            pp=pp,
            dp=dp,
            global_batch=global_batch,
            micro_batch=micro_batch,
            micro_batches=micro_batches,
            interleave=np.maximum(interleave, 1),
            sequence_parallel=sequence_parallel,
            zero_stage=zero_stage,
            recompute=recompute,
            flash_attention=flash_attention,
            cp_overlap=cp_overlap,
        )


def infeasible(lay: Layout, stages: Stages, shape) -> list[tuple[np.ndarray, str]]:
    """``(mask, reason)`` for layouts that cannot run (``shape``: the
    :class:`~dse.analytic.time.workload.ModelShape`; ``stages``: the whole pipeline's).

    The interleaved 1F1B schedule (Narayanan et al. 2021) splits each stage into
    ``interleave`` model chunks and needs the micro-batches to be a multiple of the pipeline
    degree (Megatron-LM's requirement). A pipeline with more stages than layers cannot run.
    Context parallelism splits each sequence into ``2 cp`` chunks (load-balanced causal
    attention in Megatron-Core), so ``2 cp`` must divide it.
    """
    n, tp, cp, pp, v = lay.accelerators, lay.tp, lay.cp, lay.pp, lay.interleave
    model_parallel = np.maximum(tp * cp * pp, 1)
    seq_len = shape.seq_len
    return [
        (
            indivisible(n, model_parallel),
            "tensor x context x pipeline parallel does not divide the accelerator count",
        ),
        (
            indivisible(shape.heads, tp),
            "tensor parallel degree does not divide the attention heads",
        ),
        (
            indivisible(shape.kv_heads, tp) & indivisible(tp, shape.kv_heads),
            "tensor parallel degree and key-value heads do not divide each other",
        ),
        (pp > shape.layers, "more pipeline stages than layers"),
        (
            _unless(v > 1, lambda: indivisible(stages.units, pp * v)),
            "pipeline parallel x interleave does not divide the layers",
        ),
        (
            indivisible(lay.global_batch, lay.dp * lay.micro_batch),
            "data parallel x micro batch does not divide the global batch",
        ),
        ((v > 1) & (pp == 1), "interleaved schedule needs pipeline parallelism"),
        (
            _unless(v > 1, lambda: indivisible(lay.micro_batches, pp)),
            "interleaved schedule needs micro-batches to be a multiple of the pipeline degree",
        ),
        (
            _unless(lay.sequence_parallel > 0, lambda: indivisible(seq_len, tp)),
            "sequence parallelism needs the tensor parallel degree to divide the sequence length",
        ),
        (
            _unless(cp > 1, lambda: indivisible(seq_len, 2 * cp)),
            "context parallelism needs 2 x its degree to divide the sequence length",
        ),
    ]
