"""The search-driver interface: ask for a batch, tell its results, save state as plain data.

A driver never evaluates anything itself (pymoo's ask/tell pattern): the runner evaluates
what :meth:`Driver.ask` returned and hands it back through :meth:`Driver.tell`. Drivers
are seeded, so the same study and seed give the same candidates wherever and in whatever
order the evaluations ran. :meth:`Driver.state` is JSON-serialisable data (no pickles of
live objects), and :meth:`Driver.restore` rebuilds the driver from it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from dse.space import Space


class Driver(ABC):
    """Base class of the search drivers."""

    name: ClassVar[str]

    def __init__(
        self,
        space: Space,
        *,
        budget: int,
        seed: int,
        batch_size: int,
        n_objectives: int,
        n_constraints: int,
        options: dict[str, Any] | None = None,
        output_dir: str | None = None,
    ) -> None:
        self.space = space
        self.budget = budget
        self.seed = seed
        self.batch_size = batch_size
        self.n_objectives = n_objectives
        self.n_constraints = n_constraints
        self.options = dict(options or {})
        self.output_dir = output_dir
        self.asked = 0  # candidates handed out so far
        self.told = 0  # candidates whose results came back

    @abstractmethod
    def ask(self) -> pd.DataFrame:
        """The next batch of candidates (columns = the space's parameter names)."""

    @abstractmethod
    def tell(self, candidates: pd.DataFrame, objectives: np.ndarray, violations: np.ndarray) -> None:
        """Results of the last batch.

        ``objectives`` is ``(n, m)``, every column to be minimised (maximised metrics are
        negated); rows that failed or are infeasible may hold NaN. ``violations`` is
        ``(n, k)`` with the G <= 0 convention: a row is feasible when all are <= 0.
        """

    @property
    def done(self) -> bool:
        return self.asked >= self.budget

    def state(self) -> dict[str, Any]:
        """Plain-data state; subclasses extend it."""
        return {"driver": self.name, "asked": self.asked, "told": self.told}

    def restore(self, state: dict[str, Any]) -> None:
        self.asked = int(state["asked"])
        self.told = int(state["told"])


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's state as JSON-able data."""
    return rng.bit_generator.state


def rng_from_state(state: dict[str, Any]) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng
