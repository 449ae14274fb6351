"""Evaluate on dask workers: an embedded ``LocalCluster`` or a running scheduler.

Lost workers are retried by dask (``retries``); a chunk lost beyond that becomes failed
rows with the message. Results come back as chunks finish, in any order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pandas as pd

from dse.errors import DseError
from dse.execution.base import Executor, evaluate_chunk, failed_rows
from dse.study import EvaluatorSpec


class DaskExecutor(Executor):
    """A dask client on a local cluster (``scheduler`` None) or a remote scheduler."""

    def __init__(self, evaluator: EvaluatorSpec, chunk_size: int, *, workers: int = 2,
                 scheduler: str | None = None, threads_per_worker: int = 1,
                 memory_limit: str | float | int = "auto") -> None:
        super().__init__(evaluator, chunk_size)
        self.scheduler = scheduler
        self.workers = workers
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
                n_workers=self.workers, threads_per_worker=self.threads_per_worker, processes=True,
                memory_limit=self.memory_limit, dashboard_address=None, silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster)
        return self

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def map_chunks(self, chunks: list[pd.DataFrame]) -> Iterator[tuple[int, pd.DataFrame]]:
        from dask.distributed import as_completed

        futures = {
            self.client.submit(evaluate_chunk, self.evaluator.name, self.options_yaml, chunk,
                               pure=False, retries=2): i
            for i, chunk in enumerate(chunks)
        }
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:  # worker lost beyond retries, or cancelled
                res = failed_rows(len(chunks[i]), f"{type(exc).__name__}: {exc}", self.evaluator.name,
                                  self.options_yaml).assign(elapsed_s=0.0)
            yield i, res
