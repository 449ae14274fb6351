"""Evaluate in this process, one chunk after the other: no cluster, no pickling.

For library use, tests and evaluators so fast that shipping chunks to other processes
costs more than evaluating them (``execution: {workers: 0}``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dse.execution.base import Executor, Finish, evaluate_chunk, pieces
from dse.execution.candidates import Candidates, count, part


class InProcessExecutor(Executor):
    target_s = 0.25  # no round trip to amortise: only keeps memory per chunk bounded

    def results(
        self, candidates: Candidates, *, finish: Finish | None = None
    ) -> Iterator[tuple[int, Any]]:
        offset, n = 0, count(candidates)
        while offset < n:
            size = self.sizer.next(n - offset)
            chunk = part(candidates, offset, offset + size)
            result, seconds = evaluate_chunk(self.ref, chunk, finish)
            self.sizer.observe(size, seconds)
            for at, payload in pieces(result):
                yield offset + at, payload
            offset += size
