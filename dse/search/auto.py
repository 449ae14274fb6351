"""``auto``: enumerate the space when it fits the budget (the exact front), NSGA-II otherwise.

A delegating driver: it picks the driver, validates ``search.options`` with that driver's
model, and forwards every call to it. With a budget of evaluations the choice is made
before the run: exhaustive when the space is discrete with at most ``budget`` candidates.

With a budget in time (and a discrete space) it is made while running: the enumeration
starts with a chunk of ``batch_size`` candidates, and after every chunk the runner's
measured wall time per evaluated candidate (:meth:`observe_cost`: evaluation, storage and
per-batch overheads, so the estimate errs on the slow side) times the candidates not yet
asked is the time the rest would take. When that fits in what is left of the budget, the
enumeration goes on to the end (chunks of max(``batch_size``, 10,000)) and the front is
exact. When it does not, the next chunk is four times larger (a larger chunk spreads the
per-batch overheads, so it measures the evaluator better), as long as that chunk fits in
the probing allowance (10% of the budget, the first chunk not counted: it pays the first
evaluator call and write); once it does not, NSGA-II takes over (the chunks
already evaluated are looked up if it asks them) and the front polish follows it. The
choice and its reason are part of the state, shown by ``dse status``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from dse.search.base import Problem, SearchDriver
from dse.search.exhaustive import ExhaustiveDriver, ExhaustiveOptions, default_chunk
from dse.search.nsga2 import NSGA2Driver

#: with a budget in time: at most this share of it measures the evaluator, after the first
#: chunk (a warm-up: it pays the first evaluator call and write, and over a short budget its
#: cost per candidate alone chose NSGA-II for a space that enumerates in a twentieth of it)
PROBE_SHARE = 0.10
GROWTH = 4  # each measuring chunk is this many times the last


class AutoDriver(SearchDriver):
    """Exhaustive when the space is discrete and fits the budget, else NSGA-II."""

    name = "auto"
    polish_default = True

    @staticmethod
    def chosen(problem: Problem) -> type[SearchDriver] | None:
        """The driver, or None when it is chosen while running (a budget in time)."""
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
            return (
                f"auto → exhaustive if the space ({int(problem.space.size):,} candidates) fits "
                f"{_duration(problem.time_budget_s)} at the cost measured on its first chunks, "
                "else nsga2"
            )
        if inner is ExhaustiveDriver:
            why = "the space fits the budget"
        elif not problem.space.is_discrete:
            why = "the space is continuous"
        else:
            why = "the space exceeds the budget"
        return f"auto → {inner.describe(problem, options)} ({why})"

    def __init__(self, problem: Problem, options: BaseModel) -> None:
        super().__init__(problem, options)
        chosen = self.chosen(problem)
        self.decided = chosen is not None
        self.chunk = problem.batch_size  # the measuring chunk (a budget in time)
        self.inner: SearchDriver = chosen(problem, options) if chosen else self._enumeration()
        # undecided, it may turn to NSGA-II while running: its files are declared from the start
        self.owned_files = (
            self.inner.owned_files
            if chosen
            else tuple(dict.fromkeys((*self.inner.owned_files, *NSGA2Driver.owned_files)))
        )
        self.why = ""  # the reason for a choice made while running
        self.offset = 0  # candidates asked before the current inner driver took over
        self.spent_s = 0.0
        self.warm_up_s: float | None = None  # the first measuring chunk's time (not probing)

    def _enumeration(self) -> ExhaustiveDriver:
        driver = ExhaustiveDriver(self.problem, ExhaustiveOptions())
        if not self.decided:
            driver.chunk = self.chunk
        return driver

    @property
    def enumerates(self) -> bool:  # type: ignore[override]
        return self.inner.enumerates

    @property
    def tells_values(self) -> bool:  # type: ignore[override]
        return self.inner.tells_values

    def asked_keys(self) -> np.ndarray | None:
        return self.inner.asked_keys()

    def may_ask_ahead(self) -> bool:
        """The chosen driver's, once chosen (an enumeration asks ahead, NSGA-II where its
        ``ask_ahead`` is on); never while still measuring (each chunk decides the next)."""
        return self.decided and self.inner.may_ask_ahead()

    def ask(self) -> pd.DataFrame:
        batch = self.inner.ask()
        self.asked = self.offset + self.inner.asked
        return batch

    def ask_keys(self) -> np.ndarray | None:
        keys = self.inner.ask_keys()
        self.asked = self.offset + self.inner.asked
        return keys

    def tell(self, candidates, objectives, violations) -> None:
        self.inner.tell(candidates, objectives, violations)
        self.told = self.offset + self.inner.told

    def observe_cost(self, seconds: float, evaluated: int) -> None:
        self.spent_s += float(seconds)
        self.inner.observe_cost(seconds, evaluated)
        if (
            not self.decided and evaluated > 0 and seconds > 0
        ):  # 0 s: rows evaluated before a resume
            self._measured(seconds / evaluated, evaluated)

    def _measured(self, seconds_per_candidate: float, n: int) -> None:
        """After a measuring chunk: enumerate the rest, measure on a larger chunk, or search."""
        left_s = self.problem.time_budget_s - self.spent_s
        need_s = (self.problem.space.size - self.inner.asked) * seconds_per_candidate
        fits = need_s <= left_s
        grown = min(self.chunk * GROWTH, default_chunk(self.problem))
        if self.warm_up_s is None:
            self.warm_up_s = self.spent_s
        probe_left_s = PROBE_SHARE * self.problem.time_budget_s - (self.spent_s - self.warm_up_s)
        if not fits and grown > self.chunk and grown * seconds_per_candidate <= probe_left_s:
            self.chunk = self.inner.chunk = grown  # measure again on a larger chunk
            return
        self.why = (
            f"{int(self.problem.space.size):,} candidates at {seconds_per_candidate * 1e3:.3g} ms each "
            f"(measured on a chunk of {n:,}) take about {_duration(need_s)}, "
            f"{'within' if fits else 'more than'} the {_duration(max(left_s, 0.0))} left of the budget"
        )
        self.decided = True
        if fits:
            self.inner.chunk = default_chunk(self.problem)
        else:
            self.offset = self.asked
            self.inner = NSGA2Driver(self.problem, self.options)

    @property
    def done(self) -> bool:
        return self.inner.done

    def explain(self) -> str:
        if not self.why:
            return type(self).describe(self.problem, self.options)
        return f"auto → {self.inner.name} ({self.why})"

    def state(self) -> dict[str, Any]:
        return {
            **self.inner.state(),
            "auto": {
                "choice": self.inner.name if self.decided else None,
                "why": self.why,
                "offset": self.offset,
                "spent_s": self.spent_s,
                "chunk": self.chunk,
                "warm_up_s": self.warm_up_s,
            },
        }

    def restore(self, state: dict[str, Any]) -> None:
        auto = state.get("auto")  # absent in states saved before budgets in time
        if auto is not None:
            self.decided = auto["choice"] is not None
            self.why, self.offset, self.spent_s = (
                auto["why"],
                int(auto["offset"]),
                float(auto["spent_s"]),
            )
            self.chunk = int(auto["chunk"])
            self.warm_up_s = auto.get("warm_up_s")  # absent in states saved before it was kept
            if auto["choice"] == NSGA2Driver.name:
                self.inner = NSGA2Driver(self.problem, self.options)
            elif self.chosen(self.problem) is ExhaustiveDriver:  # chosen before the run: with
                # the study's options (its chunk: a batch asked ahead is asked again alike)
                self.inner = ExhaustiveDriver(self.problem, self.options)
            else:
                self.inner = self._enumeration()
        self.inner.restore(state)
        self.asked, self.told = self.offset + self.inner.asked, self.offset + self.inner.told


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
