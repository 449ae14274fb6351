"""A search in phases: the study's driver, then the front polish, within a budget of
evaluations or of time, and a label for the front it leaves.

:func:`dse.search.plan_search` wraps every driver in :class:`PhasedSearch`, so the runner
drives one object whatever the algorithm. The phases:

1. **search**: the study's driver asks and is told, until it is done, or, when the polish is
   on, until it has spent ``search.polish.search_share`` of the budget and found a feasible
   point (checked at batch ends; a driver that enumerates the space is never cut short and
   never polished);
2. **polish** (discrete spaces): :class:`~dse.search.polish.FrontPolish` asks the
   unevaluated neighbours of the front found so far, until none is left (the front is a
   local optimum) or the budget is spent;
3. **done**.

The budget is evaluations (``asked`` never exceeds it) or seconds of run time (the sum of
the batches' wall times the runner reports through :meth:`observe_cost`; the batch that
crosses the limit is the last). The state is plain data: the driver's own state, the phase,
the counters and the polish's record (grid positions evaluated, the front), so a resumed run
asks what the uninterrupted one asks. A state saved before this layout (the driver's own)
resumes as it was started: without a polish.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dse.search.base import Problem, SearchDriver
from dse.search.polish import FrontPolish
from dse.study import PolishSpec

VERSION = 1
SEARCH, POLISH, DONE = "search", "polish", "done"
POLISH_SEED = 0x706F6C  # purpose tag of the polish's random draws


@dataclass(frozen=True)
class PhasesSummary:
    """What ``dse status`` shows of a saved :class:`PhasedSearch` state: what the search
    does, its phase, the polish's evaluations, the run time spent and the front's label."""

    explain: str
    phase: str
    polish_asked: int = 0
    spent_s: float = 0.0
    front: str = "?"  # exact, polished or approximate
    front_detail: str = ""  # why

    @classmethod
    def of(cls, state: dict[str, Any] | None) -> PhasesSummary | None:
        """The summary of a driver's saved state; None for a state not saved by
        :class:`PhasedSearch` (a run of an older dse) or one without these fields."""
        if not isinstance(state, dict) or not isinstance(state.get("explain"), str):
            return None
        labels = state.get("labels") if isinstance(state.get("labels"), dict) else {}
        try:
            return cls(
                explain=state["explain"],
                phase=str(state.get("phase")),
                polish_asked=int(state.get("polish_asked", 0)),
                spent_s=float(state.get("spent_s", 0.0)),
                front=str(labels.get("front", "?")),
                front_detail=str(labels.get("front_detail", "")),
            )
        except (TypeError, ValueError):
            return None


class AskedTooMany(ValueError):
    """A driver's batch is larger than what is left of the budget (the driver's bug, which
    dse's own check finds: the run names the driver, not the line of the check)."""


class PhasedSearch(SearchDriver):
    """The study's driver (``inner``), then the front polish when ``polish`` is given."""

    name = "phased"

    def __init__(self, problem: Problem, inner: SearchDriver, polish: PolishSpec | None) -> None:
        super().__init__(problem, inner.options)
        self.inner = inner
        self.owned_files = inner.owned_files
        self.settings = (
            polish if polish is not None and polish.enabled and problem.space.indexable else None
        )
        self.front = FrontPolish(problem.space, problem.n_objectives) if self.settings else None
        self.phase = SEARCH
        self.spent_s = 0.0  # run time so far (sum of the batches' wall times)
        self.evaluated = 0  # candidates evaluated (not looked up), as the runner reports them
        self.search_asked = 0
        self.polish_asked = 0
        self.converged = False  # the polish ran out of neighbours: a local optimum
        # the phase that asked each batch in flight (asked, not told) and its size, oldest first
        self._sources: deque[tuple[str, int]] = deque()
        # the sizes of batches a restored state names as asked and not told: asked again first
        self._replay: deque[int] = deque()
        self._polish_keys: np.ndarray | None = None  # the grid positions the polish asked
        self._proposal: np.ndarray | None = None  # the polish's next batch (derived, not state)

    # -- budget and phases -------------------------------------------------------------
    @property
    def polishing(self) -> bool:
        """The polish follows this search (on, a discrete space, a driver that samples)."""
        return self.settings is not None and not self.inner.enumerates

    def _exhausted(self) -> bool:
        """Every candidate of a discrete space is evaluated: nothing is left to ask (a driver
        that samples would go on asking repeats until its budget)."""
        return self.space.indexable and self.evaluated >= self.space.size

    def _out_of_budget(self) -> bool:
        p = self.problem
        if p.time_budget_s is not None:
            return self.spent_s >= p.time_budget_s
        return self.asked >= p.budget

    def _search_over(self) -> bool:
        if self.inner.done:
            return True
        if not self.polishing or len(self.front.front_keys) == 0:
            return False  # no polish, or nothing to polish yet (no feasible point found so far)
        share = self.settings.search_share
        p = self.problem
        if p.time_budget_s is not None:
            return self.spent_s >= share * p.time_budget_s
        return self.search_asked >= share * p.budget

    def _next_polish(self) -> np.ndarray:
        if self._proposal is None:
            n = self.settings.batch_size or max(1, self.batch_size // 4)
            if self.problem.time_budget_s is None:
                n = min(n, self.problem.budget - self.asked)
            rng = np.random.default_rng([self.seed, self.polish_asked, POLISH_SEED])
            self._proposal = self.front.propose(n, rng) if n > 0 else np.empty(0, np.int64)
        return self._proposal

    def _advance(self) -> None:
        """Move to the next phase when this one is over (a function of the state alone;
        not while a batch is asked and untold: what it finds decides)."""
        if self._sources or self._replay:
            return
        if self._exhausted():
            self.phase = DONE
            return
        if (
            self.phase == SEARCH and self._search_over()
        ):  # nothing feasible found: nothing to polish
            self.phase = POLISH if self.polishing and len(self.front.front_keys) else DONE
        if self.phase == POLISH and not self._out_of_budget() and len(self._next_polish()) == 0:
            self.converged = True
            self.phase = DONE

    @property
    def done(self) -> bool:
        self._advance()
        return not self._replay and (self.phase == DONE or self._out_of_budget())

    def may_ask_ahead(self) -> bool:
        """In the search, while it goes on and its driver allows it (the polish never asks
        ahead: it proposes neighbours of the front as told)."""
        return (
            self.phase == SEARCH
            and not self._replay
            and not self._out_of_budget()
            and not self._search_over()
            and self.inner.may_ask_ahead()
        )

    # -- ask / tell ------------------------------------------------------------------------
    def ask(self) -> pd.DataFrame:
        if self._replay:  # asked before the state was saved: the inner driver asks it again
            batch = self.inner.ask()
            self._replay_check(len(batch))
            return batch
        self._advance()
        if self._out_of_budget():
            return pd.DataFrame(columns=self.space.names)
        if self.phase == SEARCH:
            batch = self.inner.ask()
            left = self.problem.budget - self.asked
            if (
                self.problem.time_budget_s is None and len(batch) > left
            ):  # a plug-in's bug: the budget is a limit
                raise AskedTooMany(
                    f"asked {len(batch):,} candidates with {left:,} left of the budget of "
                    f"{self.problem.budget:,} evaluations (ask at most budget - asked)"
                )
            if len(batch):
                self._sources.append((SEARCH, len(batch)))
                self.search_asked += len(batch)
                self.asked += len(batch)
                return batch
            self.phase = POLISH if self.polishing else DONE  # the driver had nothing more
            if self._sources:  # asked ahead: the polish waits for the front of what is in flight
                return batch
            self._advance()
        if self.phase == POLISH:
            keys = self._next_polish()
            self._sources.append((POLISH, len(keys)))
            self._polish_keys = keys
            self.polish_asked += len(keys)
            self.asked += len(keys)
            return self.space.from_indices(self.space.indices_of(keys))
        return pd.DataFrame(columns=self.space.names)

    def _replay_check(self, asked: int) -> None:
        """The batch the inner driver asked again after a restore is the one the state names
        as asked and not told (its size); it is counted already."""
        n = self._replay.popleft()
        if asked != n:
            raise RuntimeError(
                f"the restored search asked {asked:,} candidates again, not the {n:,} "
                "its state names as asked and not told"
            )
        self._sources.append((SEARCH, n))

    def ask_keys(self) -> np.ndarray | None:
        """The search's next grid positions, where dse's own driver gives them and reads no
        values (an enumeration); None otherwise, and for the polish (:meth:`ask` asks it)."""
        keyed = not self.tells_values and type(self.inner).__module__.startswith("dse.")
        if self._replay and keyed:
            keys = self.inner.ask_keys()  # asked before the state was saved: asked again
            if keys is not None:
                self._replay_check(len(keys))
                return keys
        self._advance()
        if self.phase != SEARCH or self._out_of_budget() or not keyed:
            return None
        keys = self.inner.ask_keys()
        if keys is None:
            return None
        left = self.problem.budget - self.asked
        if self.problem.time_budget_s is None and len(keys) > left:
            raise AskedTooMany(
                f"asked {len(keys):,} candidates with {left:,} left of the budget of "
                f"{self.problem.budget:,} evaluations (ask at most budget - asked)"
            )
        if len(keys) == 0:  # the search is over: ask() goes on with what follows
            self.phase = POLISH if self.polishing else DONE
            self._advance()
            return None
        self._sources.append((SEARCH, len(keys)))
        self.search_asked += len(keys)
        self.asked += len(keys)
        return keys

    @property
    def tells_values(self) -> bool:  # type: ignore[override]
        """The study's driver reads them, or the polish follows its search (it keeps a front)."""
        return self.inner.tells_values or (self.front is not None and not self.inner.enumerates)

    def asked_keys(self) -> np.ndarray | None:
        source = self._sources[-1][0] if self._sources else None  # the batch just asked
        if source == POLISH:
            return self._polish_keys
        if source == SEARCH and type(self.inner).__module__.startswith("dse."):
            return self.inner.asked_keys()
        return None

    def tell(
        self, candidates: pd.DataFrame, objectives: np.ndarray, violations: np.ndarray
    ) -> None:
        if self._sources and self._sources.popleft()[0] == SEARCH:
            self.inner.tell(candidates, objectives, violations)
        self.told += len(candidates)
        if self.front is not None and not self.inner.enumerates:
            f = np.asarray(objectives, float).reshape(len(candidates), -1)
            g = np.asarray(violations, float).reshape(len(candidates), -1)
            feasible = (g <= 0).all(axis=1) & np.isfinite(f).all(axis=1)
            keys = self.space.flat_index(self.space.value_indices(candidates))
            self.front.record(keys, f, feasible)
        self._proposal = None

    def observe_cost(self, seconds: float, evaluated: int) -> None:
        self.spent_s += float(seconds)
        self.evaluated += int(evaluated)
        self.inner.observe_cost(seconds, evaluated)

    def _untold(self) -> list[int]:
        """The sizes of the batches asked and not told, oldest first."""
        return [n for _, n in self._sources] + list(self._replay)

    # -- what it says ------------------------------------------------------------------
    def explain(self) -> str:
        text = self.inner.explain()
        if self.polishing:
            text += (
                f", then the front polish (after {self.settings.search_share:.0%} of the budget)"
            )
        return text

    def attributes(self) -> dict[str, str | int | float]:
        """``search``, ``front`` (exact, polished or approximate) and why, ``polish_evaluations``."""
        budget = self.problem.budget_label
        if self.inner.enumerates and self.inner.done or self.evaluated >= self.space.size:
            front, why = "exact", "every candidate of the space was evaluated"
        elif self.converged:
            front = "polished"
            why = (
                "a local optimum: no candidate one or two moves (one index step along a parameter, "
                "or another category) from a front point is unevaluated"
            )
        elif (
            self.polishing
            and self.polish_asked == 0
            and (self.phase == DONE or self._out_of_budget())
        ):
            front = "approximate"
            why = f"the budget ({budget}) was spent in the search" + (
                ", before the polish began"
                if len(self.front.front_keys)
                else "; no feasible candidate was found, so there was nothing to polish"
            )
        elif self.phase == DONE or self._out_of_budget():
            why = f"the budget ({budget}) was spent"
            if self.polishing:
                why += " before the polish reached a local optimum"
            elif not self.settings:
                why += "; no polish"
            front = "approximate"
        else:
            front, why = (
                "approximate",
                "the run stopped before the search was over (dse resume goes on)",
            )
        return {
            "search": self.explain(),
            "front": front,
            "front_detail": why,
            "polish_evaluations": self.polish_asked,
        }

    # -- plain-data state ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The inner driver's state, the phase and counters, the polish's record; and, for
        ``dse status``, what the search does (``explain``) and the front's label so far."""
        self._advance()  # a phase that is over is saved as over
        return {
            **super().state(),
            "version": VERSION,
            "inner": self.inner.state(),
            "phase": self.phase,
            "spent_s": self.spent_s,
            "evaluated": self.evaluated,
            "search_asked": self.search_asked,
            "polish_asked": self.polish_asked,
            "converged": self.converged,
            # the sizes of the batches asked and not told (asked ahead), asked again on restore
            "untold": self._untold(),
            "polish": self.front.state()
            if self.front is not None and not self.inner.enumerates
            else None,
            "explain": self.explain(),
            "labels": self.attributes(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("driver") != self.name:  # saved by the driver alone: resume it as started
            self.inner.restore(state)
            self.asked, self.told = self.inner.asked, self.inner.told
            self.search_asked = self.asked
            self.settings = self.front = None
            return
        super().restore(state)
        self.inner.restore(state["inner"])
        self.phase = state["phase"]
        self.spent_s = float(state["spent_s"])
        self.evaluated = int(state["evaluated"])
        self.search_asked = int(state["search_asked"])
        self.polish_asked = int(state["polish_asked"])
        self.converged = bool(state["converged"])
        if self.front is not None and state.get("polish") is not None:
            self.front.restore(state["polish"])
        self._sources, self._proposal = deque(), None
        self._replay = deque(int(n) for n in state.get("untold", []))
