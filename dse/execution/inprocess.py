"""Evaluate in this process, one chunk after the other: no cluster, no pickling.

For library use, tests and evaluators so fast that shipping chunks to other processes
costs more than evaluating them (``execution: {workers: 0}``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from dse.execution.base import Executor, evaluate_chunk


class InProcessExecutor(Executor):
    def map_chunks(self, chunks: list[pd.DataFrame]) -> Iterator[tuple[int, pd.DataFrame]]:
        for i, chunk in enumerate(chunks):
            yield i, evaluate_chunk(self.evaluator.name, self.options_yaml, chunk)
