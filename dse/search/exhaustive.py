"""Exhaustive enumeration of a discrete space in grid order: yields the exact front."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import Field

from dse.errors import StudyError
from dse.search.base import DriverOptions, Problem, SearchDriver

#: candidates per batch at least: each batch and each task cost the main process (a local
#: cluster's scheduler runs there), and every batch is another state saved: 2^20 is 2 of the
#: executor's largest tasks (dse.execution.base.TASK_ROWS). 2 workers, 10^7 candidates,
#: against batches of 250,000 (tasks of 125,000), two pairs alternating: the main process's
#: event loop 0.9 and 1.1 against 1.7 and 1.8 s of CPU, its main thread 0.6 against 0.8 s;
#: its peak memory 0.45 against 0.39 GB (2^21: 0.51 GB). (The workers no longer wait at a
#: batch's end while the loop stores and tells it: the next batch is asked ahead.)
MIN_BATCH = 1_048_576


def default_chunk(problem: Problem) -> int:
    """Candidates per batch unless ``chunk`` says otherwise."""
    return max(problem.batch_size, MIN_BATCH)


class ExhaustiveOptions(DriverOptions):
    chunk: int | None = Field(
        default=None, ge=1, description="candidates per batch (default: max(batch_size, 1048576))"
    )


class ExhaustiveDriver(SearchDriver):
    """Every candidate once, in grid order, ``chunk`` at a time. The whole space must fit
    the budget (``auto`` enumerates exactly the spaces that do)."""

    name = "exhaustive"
    Options = ExhaustiveOptions
    enumerates = True
    tells_values = False  # every candidate is asked whatever the results

    @classmethod
    def check(cls, problem: Problem, options: ExhaustiveOptions) -> None:
        if not problem.space.is_discrete:
            raise StudyError(
                "exhaustive search needs a discrete space; give continuous ranges a 'step'",
                field="search.algorithm",
                value="exhaustive",
                allowed="a search that samples: auto, nsga2, optuna-nsga2, optuna-tpe, optuna-gp, random",
            )

    @classmethod
    def total(cls, problem: Problem, options: ExhaustiveOptions) -> int:
        return int(problem.space.size)

    def __init__(self, problem: Problem, options: ExhaustiveOptions) -> None:
        super().__init__(problem, options)
        self.chunk = options.chunk or default_chunk(problem)
        self.size = int(problem.space.size)
        self._keys: np.ndarray | None = None  # the grid positions of the batch just asked

    def ask(self) -> pd.DataFrame:
        space = self.problem.space
        keys = self.ask_keys()
        return space.from_indices(space.indices_of(keys))

    def ask_keys(self) -> np.ndarray:
        """The next grid positions (the runner asks no values: the workers build them)."""
        hi = min(self.asked + self.chunk, self.size)
        self._keys = np.arange(self.asked, hi, dtype=np.int64)
        self.asked = hi
        return self._keys

    def asked_keys(self) -> np.ndarray | None:
        return self._keys

    def may_ask_ahead(self) -> bool:
        """Always, while grid positions are left: the batches are the grid in order whatever
        is told, so the workers start on the next while the last is stored and told."""
        return not self.done

    def tell(self, candidates, objectives, violations) -> None:
        self.told += len(candidates)

    def restore(self, state: dict) -> None:
        """Resume after the last batch told: a batch asked ahead and not told is asked again
        (the same positions: the grid from there, ``chunk`` at a time)."""
        super().restore(state)
        self.asked = self.told
