"""Random sampling: uniform, independent draws from the space (seeded)."""

from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd

from dse.search.base import NoOptions, Problem, SearchDriver, rng_from_state, rng_state


class RandomDriver(SearchDriver):
    """Independent uniform draws of every parameter; ``budget`` of them in batches. The
    draws do not depend on what is told, so the runner asks the next batch while the last
    is evaluated (:meth:`may_ask_ahead`): the state keeps the generator as it was before
    the batches asked and not told, and a restored driver draws them again."""

    name = "random"

    def __init__(self, problem: Problem, options: NoOptions) -> None:
        super().__init__(problem, options)
        self.rng = np.random.default_rng(problem.seed)
        # the generator's state before each batch asked and not told, oldest first
        self._untold: deque[dict] = deque()

    def may_ask_ahead(self) -> bool:
        return not self.done

    def ask(self) -> pd.DataFrame:
        n = min(self.problem.batch_size, self.problem.budget - self.asked)
        self._untold.append(rng_state(self.rng))
        batch = self.problem.space.sample(self.rng, n)
        self.asked += n
        return batch

    def tell(self, candidates, objectives, violations) -> None:
        self.told += len(candidates)
        if self._untold:
            self._untold.popleft()

    def state(self) -> dict:
        """The generator before the oldest batch asked and not told (a restored driver asks
        it again), else as it is."""
        rng = self._untold[0] if self._untold else rng_state(self.rng)
        return {**super().state(), "rng": rng}

    def restore(self, state: dict) -> None:
        super().restore(state)
        self.asked = self.told  # a batch asked and not told is drawn again
        self.rng = rng_from_state(state["rng"])
        self._untold.clear()
