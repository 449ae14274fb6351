"""Random sampling: uniform, independent draws from the space (seeded)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dse.search.base import Driver, rng_from_state, rng_state


class RandomDriver(Driver):
    name = "random"

    def __init__(self, space, **kwargs) -> None:
        super().__init__(space, **kwargs)
        self.rng = np.random.default_rng(self.seed)

    def ask(self) -> pd.DataFrame:
        n = min(self.batch_size, self.budget - self.asked)
        batch = self.space.sample(self.rng, n)
        self.asked += n
        return batch

    def tell(self, candidates, objectives, violations) -> None:
        self.told += len(candidates)

    def state(self) -> dict:
        return {**super().state(), "rng": rng_state(self.rng)}

    def restore(self, state: dict) -> None:
        super().restore(state)
        self.rng = rng_from_state(state["rng"])
