"""Evaluate on dask workers: an embedded ``LocalCluster`` or a running scheduler.

Lost workers are retried by dask (``retries``); a chunk lost beyond that becomes failed
rows with the message. Results come back as chunks finish, in any order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pandas as pd

from dse.errors import DseError
from dse.execution.base import Executor, Finish, evaluate_chunk
from dse.study import EvaluatorSpec


class DaskExecutor(Executor):
    """A dask client on a local cluster (``scheduler`` None) or a remote scheduler."""

    def __init__(self, evaluator: EvaluatorSpec, *, chunk_size: int | None = None, workers: int = 2,
                 scheduler: str | None = None, threads_per_worker: int = 1,
                 memory_limit: str | float | int = "auto") -> None:
        super().__init__(evaluator, chunk_size=chunk_size, workers=workers * threads_per_worker)
        self.scheduler = scheduler
        self.n_workers = workers
        self.threads_per_worker = threads_per_worker
        self.memory_limit = memory_limit
        self.client = None
        self.cluster = None

    def __enter__(self) -> DaskExecutor:
        from dask.distributed import Client, LocalCluster

        if self.scheduler:
            try:
                self.client = Client(self.scheduler, timeout="10s")
            except (OSError, ValueError, TypeError) as exc:
                raise DseError(f"cannot reach dask scheduler at {self.scheduler}: {exc}") from None
        else:
            self.cluster = LocalCluster(
                n_workers=self.n_workers, threads_per_worker=self.threads_per_worker, processes=True,
                memory_limit=self.memory_limit, dashboard_address=None, silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster)
        if self.scheduler:  # size the chunks for the cluster there is
            self.sizer.workers = max(sum(self.client.nthreads().values()), 1)
        return self

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def results(self, candidates: pd.DataFrame, *, finish: Finish | None = None) -> Iterator[tuple[int, Any]]:
        """Keeps two tasks per worker in flight; each finished task frees a slot for the next
        chunk, sized by the latest cost measured."""
        from dask.distributed import as_completed

        offset, n = 0, len(candidates)
        pending: dict = {}
        done = as_completed()

        def submit() -> None:
            nonlocal offset
            size = self.sizer.next(n - offset)
            chunk = candidates.iloc[offset:offset + size]
            fut = self.client.submit(evaluate_chunk, self.evaluator.name, self.options_yaml, chunk, finish,
                                     pure=False, retries=2)
            pending[fut] = (offset, chunk)
            done.add(fut)
            offset += size

        while offset < n and len(pending) < 2 * self.sizer.workers:
            submit()
        for fut in done:
            lo, chunk = pending.pop(fut)
            try:
                result, seconds = fut.result()
                self.sizer.observe(len(chunk), seconds)
            except Exception as exc:  # worker lost beyond retries, or cancelled
                result = self._failed(chunk, exc, finish)
            if offset < n:
                submit()
            yield lo, result
