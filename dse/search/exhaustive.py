"""Exhaustive enumeration of a discrete space in grid order: yields the exact front."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dse.search.base import Driver


class ExhaustiveDriver(Driver):
    """Every candidate once, ``chunk`` at a time (option ``chunk``, default max(batch_size, 10000)).

    The whole space is evaluated whatever ``search.budget`` says: that is what asking
    for enumeration means (``auto`` only enumerates spaces that fit the budget).
    """

    name = "exhaustive"

    def __init__(self, space, **kwargs) -> None:
        super().__init__(space, **kwargs)
        self.chunk = int(self.options.get("chunk", max(self.batch_size, 10_000)))
        self.total = int(space.size)

    @property
    def done(self) -> bool:
        return self.asked >= self.total

    def ask(self) -> pd.DataFrame:
        hi = min(self.asked + self.chunk, self.total)
        batch = self.space.from_indices(self.space.indices_of(np.arange(self.asked, hi)))
        self.asked = hi
        return batch

    def tell(self, candidates, objectives, violations) -> None:
        self.told += len(candidates)
