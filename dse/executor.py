"""Executor: evaluates candidate tables on dask workers, in chunks.

The evaluator runs on the workers (built once per worker process from its name and
options). An evaluator exception turns the rows of its chunk into failed rows carrying
the message; it never loses the batch. Lost workers are retried by dask (``retries``).
Results come back in input order whatever order the chunks finished in.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from dse.errors import DseError
from dse.evaluators import check_result, load_evaluator
from dse.study import EvaluatorSpec, ExecutionSpec

STATUS_OK = "ok"
STATUS_FAILED = "failed"


@cache
def _evaluator(name: str, options_yaml: str):
    return load_evaluator(EvaluatorSpec(name=name, options=yaml.safe_load(options_yaml) or {}))


def evaluate_chunk(name: str, options_yaml: str, candidates: pd.DataFrame) -> pd.DataFrame:
    """Run the evaluator on one chunk; return metrics plus ``status``, ``error``, ``elapsed_s``."""
    start = time.perf_counter()
    try:
        ev = _evaluator(name, options_yaml)
        result = check_result(ev, candidates, ev.evaluate(candidates))
        result = result.copy()
        result["status"] = STATUS_OK
        result["error"] = ""
    except Exception as exc:  # an evaluator bug must not lose the batch
        logging.getLogger("dse").debug("evaluator failed: %s", traceback.format_exc())
        result = failed_rows(len(candidates), f"{type(exc).__name__}: {exc}", name, options_yaml)
    result["elapsed_s"] = (time.perf_counter() - start) / max(len(candidates), 1)
    return result


def failed_rows(n: int, message: str, name: str, options_yaml: str) -> pd.DataFrame:
    """``n`` rows marking a failed evaluation: every declared metric NaN, the message kept."""
    try:
        metrics = list(_evaluator(name, options_yaml).metrics)
    except Exception:
        metrics = []
    table = pd.DataFrame({m: np.full(n, np.nan) for m in metrics}, index=range(n))
    return table.assign(feasible=False, reason="evaluation failed", status=STATUS_FAILED, error=message)


def load_profile(name: str, search_dirs: list[Path] | None = None) -> dict[str, Any]:
    """A cluster profile ``workers/<name>.yaml`` (or a path): scheduler address or local settings."""
    candidates = [Path(name)] + [d / f"{name}.yaml" for d in (search_dirs or [Path("workers")])]
    for p in candidates:
        if p.is_file():
            try:
                data = yaml.safe_load(p.read_text()) or {}
            except yaml.YAMLError as exc:
                raise DseError(f"cluster profile is not valid YAML: {exc}", file=str(p)) from None
            if not isinstance(data, dict):
                raise DseError("cluster profile must be a mapping", file=str(p))
            unknown = set(data) - {"scheduler", "workers", "threads_per_worker", "memory_limit", "description"}
            if unknown:
                raise DseError(f"unknown keys {sorted(unknown)} in cluster profile", file=str(p),
                               allowed="scheduler, workers, threads_per_worker, memory_limit, description")
            return data
    raise DseError(f"cluster profile '{name}' not found", allowed="a file under workers/ or a path")


class Executor:
    """A dask client (local cluster or remote scheduler) that evaluates candidate tables."""

    def __init__(self, evaluator: EvaluatorSpec, execution: ExecutionSpec, *,
                 workers: int | None = None, scheduler: str | None = None,
                 profile_dirs: list[Path] | None = None) -> None:
        self.evaluator = evaluator
        self.options_yaml = yaml.safe_dump(evaluator.options, sort_keys=True)
        self.chunk_size = execution.chunk_size
        profile = load_profile(execution.profile, profile_dirs) if execution.profile else {}
        self.scheduler = scheduler or execution.scheduler or profile.get("scheduler")
        self.workers = workers or profile.get("workers") or execution.workers
        self.threads_per_worker = profile.get("threads_per_worker", 1)
        self.memory_limit = profile.get("memory_limit", "auto")
        self.client = None
        self.cluster = None

    def __enter__(self) -> Executor:
        from dask.distributed import Client, LocalCluster

        logging.getLogger("distributed").setLevel(logging.ERROR)
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

    def evaluate(self, candidates: pd.DataFrame,
                 on_chunk: Callable[[int, pd.DataFrame, pd.DataFrame], None] | None = None) -> pd.DataFrame:
        """Evaluate ``candidates`` (full evaluator inputs); ``on_chunk(i, inputs, result)`` as each finishes."""
        from dask.distributed import as_completed

        if len(candidates) == 0:
            return pd.DataFrame()
        candidates = candidates.reset_index(drop=True)
        size = self.chunk_size
        chunks = [candidates.iloc[i:i + size].reset_index(drop=True) for i in range(0, len(candidates), size)]
        futures = {
            self.client.submit(evaluate_chunk, self.evaluator.name, self.options_yaml, chunk,
                               pure=False, retries=2): i
            for i, chunk in enumerate(chunks)
        }
        results: list[pd.DataFrame | None] = [None] * len(chunks)
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:  # worker lost beyond retries, or cancelled
                res = failed_rows(len(chunks[i]), f"{type(exc).__name__}: {exc}", self.evaluator.name,
                                  self.options_yaml).assign(elapsed_s=0.0)
            results[i] = res
            if on_chunk is not None:
                on_chunk(i, chunks[i], res)
        return pd.concat(results, ignore_index=True)
