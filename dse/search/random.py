"""Random sampling: uniform, independent draws from the space (seeded)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dse.search.base import NoOptions, Problem, SearchDriver, rng_from_state, rng_state


class RandomDriver(SearchDriver):
    """Independent uniform draws of every parameter; ``budget`` of them in batches."""

    name = "random"

    def __init__(self, problem: Problem, options: NoOptions) -> None:
        super().__init__(problem, options)
        self.rng = np.random.default_rng(problem.seed)

    def ask(self) -> pd.DataFrame:
        n = min(self.problem.batch_size, self.problem.budget - self.asked)
        batch = self.problem.space.sample(self.rng, n)
        self.asked += n
        return batch

    def tell(self, candidates, objectives, violations) -> None:
        self.told += len(candidates)

    def state(self) -> dict:
        return {**super().state(), "rng": rng_state(self.rng)}

    def restore(self, state: dict) -> None:
        super().restore(state)
        self.rng = rng_from_state(state["rng"])
