"""The executor contract: evaluate a table of candidates in chunks, never lose a chunk.

An executor maps the evaluator over chunks of a candidate table and yields each chunk's
result as it finishes. The evaluator is built where it runs from its name and options
(once per process), after checking that the process runs the client's dse and evaluator
versions. An evaluator exception (or a call over ``evaluator.timeout_s`` per candidate)
fails only the rows it comes from: the chunk is split in halves until the failing rows are
alone, and each of those becomes a failed row carrying the message.
"""

from __future__ import annotations

import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pandas as pd
import yaml

from dse.errors import DseError
from dse.evaluators import ContractError, check_result, load_evaluator
from dse.execution.candidates import Candidates, count, frame, part
from dse.execution.child import EvaluatorFailed, child_evaluator
from dse.study import EvaluatorSpec

STATUS_OK = "ok"
STATUS_FAILED = "failed"

#: ``finish(candidates, metrics) -> payload``, applied to a chunk where it was evaluated
Finish = Callable[[pd.DataFrame, pd.DataFrame], Any]

#: the most candidates of one evaluator call and of one finished payload (a piece of a
#: task): bounds a worker's memory (the analytic evaluator's block, ~140 MB of working
#: arrays, and its result columns)
PIECE_ROWS = 131_072
#: the most candidates of one task: a task of several pieces is evaluated and finished piece
#: by piece where it runs, so that what each task costs the main process (a local cluster's
#: scheduler runs there, and receives every result) is paid once for up to 4 pieces
TASK_ROWS = 4 * PIECE_ROWS


@dataclass(frozen=True)
class Pieces:
    """What a task of more than :data:`PIECE_ROWS` candidates gives back with a ``finish``:
    ``(offset in the task, payload)`` of each piece, in order."""

    parts: list[tuple[int, Any]]


def pieces(result: Any) -> list[tuple[int, Any]]:
    """``(offset in the task, payload)`` of a task's result: its pieces, or the one."""
    return result.parts if isinstance(result, Pieces) else [(0, result)]


class ClusterLost(DseError):
    """The scheduler, or every worker, has been gone for longer than the grace period."""


class WorkerMismatch(DseError):
    """A worker runs another dse or evaluator version than the client, or cannot build the
    evaluator at all: the run stops rather than mix two models in one front."""


@dataclass(frozen=True)
class EvaluatorRef:
    """What travels to a worker with every chunk: the evaluator's name and options (it is
    built there), the time-out per candidate, and the versions the client runs."""

    name: str
    options_yaml: str
    timeout_s: float | None = None
    dse_version: str = ""
    evaluator_version: str = ""

    @classmethod
    def of(cls, spec: EvaluatorSpec) -> EvaluatorRef:
        import dse

        # in the study's order: an evaluator may read its options' order (the command evaluator's inputs)
        options_yaml = yaml.safe_dump(dict(spec.options), sort_keys=False)
        version = _evaluator(spec.name, options_yaml).version
        return cls(spec.name, options_yaml, spec.timeout_s, dse.__version__, version)

    @property
    def fork_safe(self) -> bool:
        """The evaluator class's declaration (:attr:`Evaluator.fork_safe`)."""
        return type(_evaluator(self.name, self.options_yaml)).fork_safe


@cache
def _evaluator(name: str, options_yaml: str):
    return load_evaluator(EvaluatorSpec(name=name, options=yaml.safe_load(options_yaml) or {}))


def worker_versions(ref: EvaluatorRef) -> dict[str, str]:
    """The dse and evaluator versions of this process, where it runs, for ``ref``."""
    import dse

    try:
        version = _evaluator(ref.name, ref.options_yaml).version
    except Exception as exc:  # the plug-in is missing here, or refuses its options
        version = f"not buildable ({type(exc).__name__}: {exc})"
    return {"host": socket.gethostname(), "dse": dse.__version__, "evaluator": version}


def check_versions(ref: EvaluatorRef, where: str = "") -> None:
    """Raise :class:`WorkerMismatch` unless this process runs ``ref``'s versions."""
    mine = worker_versions(ref)
    if (mine["dse"], mine["evaluator"]) != (ref.dse_version, ref.evaluator_version):
        raise WorkerMismatch(
            f"dask worker {where or mine['host']} runs dse {mine['dse']} with evaluator {ref.name} "
            f"{mine['evaluator']}, but this client runs dse {ref.dse_version} with {ref.evaluator_version}: "
            "install the same versions on every worker (pip install the same dse and evaluator package)"
        )


def evaluate_chunk(
    ref: EvaluatorRef, candidates: Candidates, finish: Finish | None = None
) -> tuple[Any, float]:
    """Run the evaluator on one chunk (its input table built here, where grid positions
    were sent): metrics plus ``status``, ``error``, ``elapsed_s`` (seconds per candidate),
    turned by ``finish(candidates, result)`` (run here, on the worker) into what is sent
    back; and the chunk's evaluation time in seconds. A chunk of more than
    :data:`PIECE_ROWS` candidates is evaluated and finished piece by piece: with a
    ``finish``, its :class:`Pieces`; without, the pieces' tables in one."""
    check_versions(ref)
    seconds = 0.0

    def evaluate_piece(piece: Candidates) -> Any:
        nonlocal seconds
        piece = frame(piece)
        start = time.perf_counter()
        result = evaluate_rows(ref, piece)
        piece_s = time.perf_counter() - start
        seconds += piece_s
        result["elapsed_s"] = piece_s / max(len(piece), 1)
        return result if finish is None else finish(piece, result)

    return _piecewise(candidates, finish, evaluate_piece), seconds


def _piecewise(candidates: Candidates, finish: Finish | None, each: Callable[[Candidates], Any]):
    """``each(piece)`` of every piece of at most :data:`PIECE_ROWS` of ``candidates``, in
    order, as a task gives them back: the one result of a task of one piece; else, with a
    ``finish``, their :class:`Pieces`, and without, their tables in one."""
    n = count(candidates)
    if n <= PIECE_ROWS:
        return each(candidates)
    parts = [(lo, each(part(candidates, lo, lo + PIECE_ROWS))) for lo in range(0, n, PIECE_ROWS)]
    if finish is None:
        return pd.concat([table for _, table in parts], ignore_index=True)
    return Pieces(parts)


def evaluate_rows(ref: EvaluatorRef, candidates: pd.DataFrame) -> pd.DataFrame:
    """Every row's metrics, ``status`` and ``error``: a failing call is split in halves until
    each failing row is alone (about 2 log2(n) extra calls for one bad row in n)."""
    ev = _evaluator(ref.name, ref.options_yaml)
    try:
        # no deep copy here (~70 float columns: 0.1-1 us per candidate, page faults included):
        # the result may share the evaluator's arrays, and what outlives the next evaluator
        # call is copied where it is kept (the log rows, encoded; the told columns; a split's
        # first half below)
        result = check_result(ev, candidates, _call(ref, ev, candidates))
    except ContractError as exc:  # a malformed table: the evaluator's bug, not these rows'
        return failed_rows(len(candidates), str(exc), ref)
    except (
        Exception,
        SystemExit,
    ) as exc:  # an evaluator bug, a time-out or its sys.exit() must not lose the rest
        if len(candidates) <= 1:
            message = (
                str(exc) if isinstance(exc, EvaluatorFailed) else f"{type(exc).__name__}: {exc}"
            )
            return failed_rows(len(candidates), message, ref)
        half = len(candidates) // 2
        first = evaluate_rows(
            ref, candidates.iloc[:half]
        ).copy()  # its own arrays before the evaluator runs again
        return pd.concat([first, evaluate_rows(ref, candidates.iloc[half:])], ignore_index=True)
    return result.assign(status=STATUS_OK, error="")


#: the longest time limit of one evaluator call (s), however many candidates it has
MAX_CALL_S = 20 * 86400.0


def _call(ref: EvaluatorRef, ev, candidates: pd.DataFrame) -> pd.DataFrame:
    """``ev.evaluate``, within ``ref.timeout_s`` per candidate when one is set: by the
    evaluator itself where it can (``enforces_timeout``), else in a child process that is
    killed when time is up."""
    if ref.timeout_s is None:
        return ev.evaluate(candidates)
    # at most 20 days: the operating system's wait takes milliseconds in a 32-bit integer
    limit_s = min(ref.timeout_s * max(len(candidates), 1), MAX_CALL_S)
    if ev.enforces_timeout:
        return ev.evaluate(candidates, timeout_s=limit_s)
    return child_evaluator(ref.name, ref.options_yaml).evaluate(candidates, limit_s)


def failed_rows(n: int, message: str, ref: EvaluatorRef) -> pd.DataFrame:
    """``n`` rows marking a failed evaluation: every declared metric NaN, the message kept."""
    try:
        metrics = list(_evaluator(ref.name, ref.options_yaml).metrics)
    except Exception:
        metrics = []
    table = pd.DataFrame({m: np.full(n, np.nan) for m in metrics}, index=range(n))
    return table.assign(
        feasible=False, reason="evaluation failed", status=STATUS_FAILED, error=message
    )


class ChunkSizer:
    """Chunk sizes that follow the evaluator's measured cost per candidate.

    A task should carry about ``target_s`` of work, so that a task's fixed overhead (a
    dask round trip is a few milliseconds) stays under a few per cent, and at most
    ``max_rows`` (evaluated in pieces of :data:`PIECE_ROWS`: bounded memory). A batch is cut into equal tasks, as many as that needs
    rounded up to a multiple of the workers, so that the workers finish a batch together:
    100,000 candidates on 2 workers with tasks of at most 65,536 are 2 tasks of 50,000, not
    65,536 and 34,464 (one worker idle for a third of the batch).
    Until a cost is measured the tasks are small (``probe`` rows), which is cheap for a
    fast evaluator and right for a slow one (a run whose evaluator allows a preview starts
    with the cost the preview measured, :attr:`dse.preview.Preview.seconds`); then a task grows at most ``GROWTH``-fold over
    the largest measured one (a cut in progress keeps its task size while the cost it was
    made for holds within 2x), so that each step measures the cost again before the next
    (the cost per candidate of a small task includes the call's fixed overhead and
    overstates what a large task costs). A fixed ``chunk_size`` (the study's, or the
    evaluator's declared preference) overrides all this.
    """

    #: how much larger than the largest measured task the next one may be
    GROWTH = 16

    def __init__(
        self,
        *,
        fixed: int | None = None,
        workers: int = 1,
        target_s: float = 0.5,
        probe: int = 8,
        max_rows: int = TASK_ROWS,
    ) -> None:
        self.fixed = fixed
        self.workers = max(workers, 1)
        self.target_s = target_s
        self.probe = probe
        self.max_rows = max_rows
        self.cost_s: float | None = None  # seconds per candidate at the largest size measured
        self.measured = 0  # the largest task measured so far
        self._plan: tuple[int, int, int] | None = (
            None  # (remaining, task size, tasks) of the cut in use
        )

    def observe(self, rows: int, seconds: float) -> None:
        """A task of ``rows`` candidates took ``seconds``. A task larger than any before sets
        the cost; one of at least half that size, or half the size the cost calls for (the
        equal tasks of a batch cut to that cost), is averaged in, so that a cost measured too
        high once (a worker's first large task, paying page faults for fresh memory, or a
        busy machine) does not keep every later task small; smaller ones are left out (their
        fixed overhead per call overstates the cost)."""
        if rows <= 0 or not np.isfinite(seconds):
            return
        if self.cost_s is not None and 2 * rows < min(
            self.measured, self.target_s / max(self.cost_s, 1e-9)
        ):
            return
        cost = seconds / rows
        if self.cost_s is None or rows > self.measured:
            self.cost_s, self.measured = cost, rows
        else:
            self.cost_s = 0.5 * (self.cost_s + cost)

    def next(self, remaining: int) -> int:
        """The size of the next task of a batch with ``remaining`` candidates left."""
        if remaining <= 0:
            return 0
        if self.fixed:
            return min(self.fixed, remaining)
        if self.cost_s is None:
            return min(self.probe, remaining)
        size = max(
            1,
            min(
                int(self.target_s / max(self.cost_s, 1e-9)),
                self.GROWTH * self.measured,
                self.max_rows,
            ),
        )
        plan = self._plan
        # the cut in use goes on while the remainder is the one it left and the task size
        # it was made for still holds (within 2x: the measured cost varies a little)
        if plan is None or plan[0] != remaining or not plan[1] // 2 <= size <= 2 * plan[1]:
            w = self.workers
            plan = (remaining, size, w * -(-remaining // (w * size)))
        left, planned, tasks = plan
        chunk = -(-left // tasks)
        self._plan = (left - chunk, planned, tasks - 1) if tasks > 1 else None
        return chunk


@dataclass(frozen=True)
class _Submitted:
    """A batch :meth:`Executor.submit` took and an executor that does not pipeline
    evaluates when it is drained."""

    candidates: Candidates
    finish: Finish | None


class Executor(ABC):
    """Evaluates candidate tables in chunks sized by :class:`ChunkSizer`; a context manager
    around its resources (a cluster, a client)."""

    #: seconds of work per task the sizer aims at
    target_s = 0.5

    def __init__(
        self,
        evaluator: EvaluatorSpec,
        *,
        chunk_size: int | None = None,
        workers: int = 1,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.evaluator = evaluator
        #: receives one line when something is worth telling (the dashboard, a lost cluster)
        self.notify: Callable[[str], None] = notify or (lambda text: None)
        self.ref = EvaluatorRef.of(evaluator)
        self.workers = workers
        self.sizer = ChunkSizer(fixed=chunk_size, workers=workers, target_s=self.target_s)

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        return None

    @abstractmethod
    def results(
        self, candidates: Candidates, *, finish: Finish | None = None
    ) -> Iterator[tuple[int, Any]]:
        """``(offset, result)`` for consecutive chunks of ``candidates`` (full evaluator
        inputs, or grid positions: :mod:`dse.execution.candidates`), as each finishes, in any order; every row is covered exactly once. The
        result is the chunk's metrics table, or what ``finish(chunk, metrics)`` made of it
        where the chunk was evaluated (a picklable callable: it runs on the workers)."""

    def submit(self, candidates: Candidates, *, finish: Finish | None = None) -> Any:
        """Hand ``candidates`` over for evaluation and return a handle for :meth:`drain`. An
        executor that pipelines (a cluster's: :class:`dse.execution.dask_cluster.DaskExecutor`)
        starts on a batch handed over while an earlier one is drained, as soon as that one has
        no chunk left to start, so that its workers do not wait between the two; this one
        evaluates at :meth:`drain`. Batches are drained in the order they were submitted, each
        once."""
        return _Submitted(candidates, finish)

    def drain(self, job: Any) -> Iterator[tuple[int, Any]]:
        """:meth:`results` of a batch :meth:`submit` took (the oldest not yet drained)."""
        return self.results(job.candidates, finish=job.finish)

    def map_each(self, fn: Callable[[Any], Any], items: list) -> list:
        """``[fn(item) for item in items]``, computed where this executor evaluates (a
        cluster's workers, in parallel; ``fn`` and the items picklable)."""
        return [fn(item) for item in items]

    def _failed(self, chunk: Candidates, exc: BaseException, finish: Finish | None) -> Any:
        """A chunk lost beyond the executor's retries: failed rows, finished as usual (piece
        by piece, as :func:`evaluate_chunk` would have)."""
        message = f"{type(exc).__name__}: {exc}"

        def failed(piece: Candidates) -> Any:
            piece = frame(piece)
            rows = failed_rows(count(piece), message, self.ref).assign(elapsed_s=0.0)
            return rows if finish is None else finish(piece, rows)

        return _piecewise(chunk, finish, failed)

    def evaluate(self, candidates: pd.DataFrame) -> pd.DataFrame:
        """Every row's metrics, in input order."""
        if len(candidates) == 0:
            return pd.DataFrame()
        parts = sorted(self.results(candidates.reset_index(drop=True)), key=lambda p: p[0])
        return pd.concat([r for _, r in parts], ignore_index=True)
