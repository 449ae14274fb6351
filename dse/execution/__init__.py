"""Where candidates are evaluated: in this process, or on dask workers.

:func:`plan_execution` checks a study's ``execution`` section; :func:`make_executor` builds
the executor it describes.
"""

from __future__ import annotations

from collections.abc import Callable

from dse.execution.base import (
    STATUS_FAILED,
    STATUS_OK,
    ClusterLost,
    Executor,
    WorkerMismatch,
    evaluate_chunk,
)
from dse.execution.candidates import GridCandidates
from dse.execution.plan import ExecutionPlan, plan_execution
from dse.study import EvaluatorSpec

__all__ = [
    "STATUS_FAILED",
    "STATUS_OK",
    "ClusterLost",
    "ExecutionPlan",
    "Executor",
    "GridCandidates",
    "WorkerMismatch",
    "evaluate_chunk",
    "make_executor",
    "plan_execution",
]


def make_executor(
    plan: ExecutionPlan,
    evaluator: EvaluatorSpec,
    *,
    preferred_chunk_size: int | None = None,
    notify: Callable[[str], None] | None = None,
) -> Executor:
    """The executor for a checked plan (a context manager: use it in a ``with`` block).

    Chunks are sized from the evaluator's measured cost unless the study fixes
    ``execution.chunk_size`` or the evaluator declares a preferred size. ``notify`` receives
    a line when there is something to tell (the dashboard's address, a lost cluster)."""
    chunk_size = plan.chunk_size or preferred_chunk_size
    if plan.kind == "in-process":
        from dse.execution.inprocess import InProcessExecutor

        return InProcessExecutor(evaluator, chunk_size=chunk_size, notify=notify)
    from dse.execution.dask_cluster import DaskExecutor

    return DaskExecutor(evaluator, plan, chunk_size=chunk_size, notify=notify)
