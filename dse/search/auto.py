"""``auto``: enumerate the space when it fits the budget (the exact front), NSGA-II otherwise.

A delegating driver: it picks the driver, validates ``search.options`` with that driver's
model, and forwards every call to it. With a budget of evaluations the choice is made
before the run: exhaustive when the space is discrete with at most ``budget`` candidates.
With a budget in time it is made after the first two batches, NSGA-II's first two
generations (useful either way): the second batch's wall time per evaluated candidate
(reported by the runner through :meth:`observe_cost`; the first batch also pays for
imports and start-up, so it is not used; per-batch overheads are included, so the estimate
errs on the slow side) times the candidates not yet evaluated is the time enumeration would
take. When that fits in what is left of the budget the rest of the space is enumerated
(what NSGA-II asked is looked up, not evaluated again), otherwise NSGA-II goes on (and the
front polish follows it). The choice and its reason are part of the state, shown by
``dse status``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import BaseModel

from dse.search.base import Problem, SearchDriver
from dse.search.exhaustive import ExhaustiveDriver, ExhaustiveOptions
from dse.search.nsga2 import NSGA2Driver

PROBES = 2  # with a budget in time: batches run before choosing (the last one is measured)


class AutoDriver(SearchDriver):
    """Exhaustive when the space is discrete and fits the budget, else NSGA-II."""

    name = "auto"
    polish_default = True

    @staticmethod
    def chosen(problem: Problem) -> type[SearchDriver] | None:
        """The driver, or None when it is chosen at run time (a budget in time)."""
        space = problem.space
        if not space.is_discrete:
            return NSGA2Driver
        if problem.time_budget_s is not None:
            return None
        return ExhaustiveDriver if space.size <= problem.budget else NSGA2Driver

    @classmethod
    def options_model(cls, problem: Problem) -> type[BaseModel]:
        return (cls.chosen(problem) or NSGA2Driver).Options

    @classmethod
    def check(cls, problem: Problem, options: BaseModel) -> None:
        (cls.chosen(problem) or NSGA2Driver).check(problem, options)

    @classmethod
    def total(cls, problem: Problem, options: BaseModel) -> int | None:
        inner = cls.chosen(problem)
        return None if inner is None else inner.total(problem, options)

    @classmethod
    def describe(cls, problem: Problem, options: BaseModel) -> str:
        inner = cls.chosen(problem)
        if inner is None:
            return (f"auto → exhaustive if the space ({int(problem.space.size):,} candidates) fits "
                    f"{_duration(problem.time_budget_s)} at the cost measured on NSGA-II's batch {PROBES}, "
                    "else nsga2")
        why = ("the space fits the budget" if inner is ExhaustiveDriver
               else "the space is continuous" if not problem.space.is_discrete
               else "the space exceeds the budget")
        return f"auto → {inner.describe(problem, options)} ({why})"

    def __init__(self, problem: Problem, options: BaseModel) -> None:
        super().__init__(problem, options)
        chosen = self.chosen(problem)
        self.inner: SearchDriver = (chosen or NSGA2Driver)(problem, options)
        self.owned_files = self.inner.owned_files
        self.decided = chosen is not None
        self.why = ""  # the reason for a choice made at run time
        self.offset = 0  # candidates asked before the current inner driver took over
        self.spent_s = 0.0
        self.probes = 0  # batches measured before the choice

    @property
    def enumerates(self) -> bool:  # type: ignore[override]
        return self.inner.enumerates

    def ask(self) -> pd.DataFrame:
        batch = self.inner.ask()
        self.asked = self.offset + self.inner.asked
        return batch

    def tell(self, candidates, objectives, violations) -> None:
        self.inner.tell(candidates, objectives, violations)
        self.told = self.offset + self.inner.told

    def observe_cost(self, seconds: float, evaluated: int) -> None:
        self.spent_s += float(seconds)
        self.inner.observe_cost(seconds, evaluated)
        if not self.decided and evaluated > 0:
            self.probes += 1
            if self.probes == PROBES:
                self._decide(seconds / evaluated)

    def _decide(self, seconds_per_candidate: float) -> None:
        """Enumerate the rest of the space if it fits the time left, else go on with NSGA-II."""
        left_s = self.problem.time_budget_s - self.spent_s
        need_s = (self.problem.space.size - self.told) * seconds_per_candidate
        fits = need_s <= left_s
        self.why = (f"{int(self.problem.space.size):,} candidates at {seconds_per_candidate * 1e3:.3g} ms each "
                    f"(measured on batch {PROBES}) take about {_duration(need_s)}, "
                    f"{'within' if fits else 'more than'} the {_duration(max(left_s, 0.0))} left of the budget")
        if fits:
            self.offset = self.asked
            self.inner = ExhaustiveDriver(self.problem, ExhaustiveOptions())
        self.decided = True

    @property
    def done(self) -> bool:
        return self.inner.done

    def explain(self) -> str:
        if not self.decided:
            return type(self).describe(self.problem, self.options)
        if not self.why:
            return type(self).describe(self.problem, self.options)
        return f"auto → {self.inner.name} ({self.why})"

    def state(self) -> dict[str, Any]:
        return {**self.inner.state(), "auto": {"choice": self.inner.name if self.decided else None,
                                               "why": self.why, "offset": self.offset, "spent_s": self.spent_s,
                                               "probes": self.probes}}

    def restore(self, state: dict[str, Any]) -> None:
        auto = state.get("auto")  # absent in states saved before budgets in time
        if auto is not None:
            self.decided = auto["choice"] is not None
            self.why, self.offset, self.spent_s = auto["why"], int(auto["offset"]), float(auto["spent_s"])
            self.probes = int(auto["probes"])
            if auto["choice"] == ExhaustiveDriver.name and not isinstance(self.inner, ExhaustiveDriver):
                self.inner = ExhaustiveDriver(self.problem, ExhaustiveOptions())
        self.inner.restore(state)
        self.asked, self.told = self.offset + self.inner.asked, self.offset + self.inner.told


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
