"""``auto``: enumerate the space when it fits the budget (the exact front), NSGA-II otherwise.

A delegating driver: it picks the driver, validates ``search.options`` with that driver's
model, and forwards every call to it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import BaseModel

from dse.search.base import Problem, SearchDriver
from dse.search.exhaustive import ExhaustiveDriver
from dse.search.nsga2 import NSGA2Driver


class AutoDriver(SearchDriver):
    """Exhaustive when the space is discrete with at most ``budget`` candidates, else NSGA-II."""

    name = "auto"

    @staticmethod
    def chosen(problem: Problem) -> type[SearchDriver]:
        space = problem.space
        return ExhaustiveDriver if space.is_discrete and space.size <= problem.budget else NSGA2Driver

    @classmethod
    def options_model(cls, problem: Problem) -> type[BaseModel]:
        return cls.chosen(problem).Options

    @classmethod
    def check(cls, problem: Problem, options: BaseModel) -> None:
        cls.chosen(problem).check(problem, options)

    @classmethod
    def total(cls, problem: Problem, options: BaseModel) -> int | None:
        return cls.chosen(problem).total(problem, options)

    @classmethod
    def describe(cls, problem: Problem, options: BaseModel) -> str:
        inner = cls.chosen(problem)
        why = ("the space fits the budget" if inner is ExhaustiveDriver
               else "the space is continuous" if not problem.space.is_discrete
               else "the space exceeds the budget")
        return f"auto → {inner.describe(problem, options)} ({why})"

    def __init__(self, problem: Problem, options: BaseModel) -> None:
        super().__init__(problem, options)
        self.inner = self.chosen(problem)(problem, options)
        self.owned_files = self.inner.owned_files

    def ask(self) -> pd.DataFrame:
        batch = self.inner.ask()
        self.asked = self.inner.asked
        return batch

    def tell(self, candidates, objectives, violations) -> None:
        self.inner.tell(candidates, objectives, violations)
        self.told = self.inner.told

    @property
    def done(self) -> bool:
        return self.inner.done

    def state(self) -> dict[str, Any]:
        return self.inner.state()

    def restore(self, state: dict[str, Any]) -> None:
        self.inner.restore(state)
        self.asked, self.told = self.inner.asked, self.inner.told
