"""The executor contract: evaluate a table of candidates in chunks, never lose a chunk.

An executor maps the evaluator over chunks of a candidate table and yields each chunk's
result as it finishes. The evaluator is built where it runs from its name and options
(once per process). An evaluator exception turns the rows of its chunk into failed rows
carrying the message; it never loses the batch.
"""

from __future__ import annotations

import logging
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from functools import cache

import numpy as np
import pandas as pd
import yaml

from dse.evaluators import check_result, load_evaluator
from dse.study import EvaluatorSpec

STATUS_OK = "ok"
STATUS_FAILED = "failed"

ChunkCallback = Callable[[int, pd.DataFrame, pd.DataFrame], None]


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


class Executor(ABC):
    """Evaluates candidate tables chunk by chunk; a context manager around its resources."""

    def __init__(self, evaluator: EvaluatorSpec, chunk_size: int) -> None:
        self.evaluator = evaluator
        self.options_yaml = yaml.safe_dump(dict(evaluator.options), sort_keys=True)
        self.chunk_size = chunk_size

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        return None

    @abstractmethod
    def map_chunks(self, chunks: list[pd.DataFrame]) -> Iterator[tuple[int, pd.DataFrame]]:
        """``(i, result)`` for every chunk, as each finishes (in any order)."""

    def evaluate(self, candidates: pd.DataFrame, on_chunk: ChunkCallback | None = None) -> pd.DataFrame:
        """Evaluate ``candidates`` (full evaluator inputs) and return the results in input
        order; ``on_chunk(i, inputs, result)`` is called as each chunk finishes."""
        if len(candidates) == 0:
            return pd.DataFrame()
        candidates = candidates.reset_index(drop=True)
        size = self.chunk_size
        chunks = [candidates.iloc[i:i + size].reset_index(drop=True) for i in range(0, len(candidates), size)]
        results: list[pd.DataFrame | None] = [None] * len(chunks)
        for i, res in self.map_chunks(chunks):
            results[i] = res
            if on_chunk is not None:
                on_chunk(i, chunks[i], res)
        return pd.concat(results, ignore_index=True)
