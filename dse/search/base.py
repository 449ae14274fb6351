"""The search-driver plug-in contract: a :class:`Problem` to search and a :class:`SearchDriver`.

A driver never evaluates anything itself (pymoo's ask/tell pattern): the runner evaluates
what :meth:`SearchDriver.ask` returned and hands the results back through
:meth:`SearchDriver.tell`. Drivers are seeded, so the same study and seed give the same
candidates wherever and in whatever order the evaluations ran.

Call order (the runner's, documented so a driver can rely on it)::

    Options.model_validate(study.search.options)    # dse validate and dse run
    check(problem, options)                         # dse validate and dse run: refuse early
    total(problem, options)                         # candidates it will ask, for the budget check
    driver = Driver(problem, options)               # dse run / dse resume (writes no file)
    driver.restore(state)                           # dse resume only, before the first ask
    while not driver.done:
        batch = driver.ask()                        # an empty batch also ends the run
        driver.tell(batch, objectives, violations)  # every row of the batch, in ask order
        driver.observe_cost(seconds, evaluated)     # the batch's wall time, candidates evaluated
        state = driver.state()                      # saved after every batch (plain JSON data)
    driver.attributes()                             # what it says about its front, for the datasets

Asking ahead (a driver opts in through :meth:`SearchDriver.may_ask_ahead`; default off): a
fast evaluator's workers would wait while the runner stores a batch, tells it and asks the
next one, so where the driver allows it the runner asks the next batch while the last one is
still evaluated, and the executor starts on it as soon as that one's chunks are all started.
At most one batch is asked ahead, and always at the same point of the sequence (whatever
finishes first), so the same seed gives the same candidates::

    batch_0 = driver.ask()
    if driver.may_ask_ahead():  # asked once a batch is asked and untold
        batch_1 = driver.ask()  # bred from what was told so far (a generation's lag)
    driver.tell(batch_0, ...)   # tells come in ask order
    driver.observe_cost(...); state = driver.state()    # batch_1 is asked and untold
    batch_2 = driver.ask()      # if driver.may_ask_ahead() again
    driver.tell(batch_1, ...)

:meth:`SearchDriver.state` then holds the batch asked and not told, and after
:meth:`SearchDriver.restore` the driver's next :meth:`SearchDriver.ask` gives that batch again,
without counting it twice (:attr:`SearchDriver.done` is false until it has): a resumed run
asks and is told what the uninterrupted one was.

The runner drives the driver :func:`dse.search.plan_search` builds: the study's driver
inside :class:`dse.search.phases.PhasedSearch`, which applies a budget in time, follows the
search with the front polish where it is on, and labels the front (exact, polished or
approximate). A driver needs none of that itself.

A driver is registered under the entry-point group ``dse.search`` (the built-in drivers
are registered exactly so) or named in a study as ``package.module:Class``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from dse.space import Space
from dse.study import _Strict


@dataclass(frozen=True)
class Problem:
    """What a driver searches, in one object (after pymoo's ``Problem``).

    ``objectives`` are the metric names, every one to be *minimised* (the runner negates
    maximised metrics before :meth:`SearchDriver.tell`). ``constraints`` names the columns
    of the violation matrix in the G <= 0 convention: one per study constraint, then the
    evaluator's own verdict (1 where a candidate is infeasible or failed). ``work_dir`` is a
    folder the driver may keep files in (the results folder; ``None`` when there is none,
    e.g. in library use): a driver declares the files it writes there in
    :attr:`SearchDriver.owned_files`.
    """

    space: Space
    objectives: tuple[str, ...]
    constraints: tuple[str, ...]
    budget: int
    batch_size: int
    seed: int
    work_dir: Path | None = None
    name: str = "dse"  # the study's name, for drivers that label what they store
    #: the budget in seconds of run time when the study gives a duration (``budget`` is then
    #: only a cap: the space's size, or unbounded for a continuous space)
    time_budget_s: float | None = None

    @property
    def budget_label(self) -> str:
        return (
            f"{self.time_budget_s:g} s"
            if self.time_budget_s is not None
            else f"{self.budget:,} evaluations"
        )

    @property
    def n_objectives(self) -> int:
        return len(self.objectives)

    @property
    def n_constraints(self) -> int:
        return len(self.constraints)


class NoOptions(BaseModel):
    """The options model of a driver that takes none."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DriverOptions(_Strict):
    """Base for a driver's options: unknown keys are refused, values are typed (true and
    false are not numbers), as everywhere in a study."""


class SearchDriver(ABC):
    """Base class of search drivers; see the module docstring for the call order."""

    #: the name the study uses (``search.algorithm``)
    name: ClassVar[str]
    #: the pydantic model of ``search.options``
    Options: ClassVar[type[BaseModel]] = NoOptions
    #: files the driver writes in ``problem.work_dir`` (removed with the run by ``--overwrite``)
    owned_files: ClassVar[tuple[str, ...]] = ()
    #: the driver evaluates every candidate of the space (its front is exact; no polish)
    enumerates: ClassVar[bool] = False
    #: whether the front polish follows this driver's search unless the study says otherwise
    polish_default: ClassVar[bool] = False
    #: whether :meth:`tell` reads the objectives and violations; a driver that does not (an
    #: enumeration) is told read-only NaN arrays of their shape, and the runner gathers no values
    tells_values: ClassVar[bool] = True

    def __init__(self, problem: Problem, options: BaseModel) -> None:
        """Set up; write nothing yet (the results folder may still be cleared after this)."""
        self.problem = problem
        self.options = options
        self.asked = 0  # candidates handed out so far
        self.told = 0  # candidates whose results came back

    # shorthands for the problem's fields
    space = property(lambda self: self.problem.space)
    budget = property(lambda self: self.problem.budget)
    seed = property(lambda self: self.problem.seed)
    batch_size = property(lambda self: self.problem.batch_size)
    n_objectives = property(lambda self: self.problem.n_objectives)
    n_constraints = property(lambda self: self.problem.n_constraints)

    # -- class-level hooks (no instance: dse validate builds no driver) --------------------
    @classmethod
    def options_model(cls, problem: Problem) -> type[BaseModel]:
        """The model ``search.options`` is validated with (a delegating driver may choose)."""
        return cls.Options

    @classmethod
    def check(cls, problem: Problem, options: BaseModel) -> None:
        """Raise :class:`~dse.errors.StudyError` when this driver cannot search ``problem``
        (a missing optional dependency, a space it cannot handle). Default: accept."""
        return None

    @classmethod
    def check_fresh(cls, problem: Problem, options: BaseModel) -> None:
        """Raise :class:`~dse.errors.StudyError` when a new run (not a resume) could not start:
        ``dse validate`` and ``dse run`` call it before the results folder is created or
        overwritten (an optuna study name its database already holds). Default: accept."""
        return None

    @classmethod
    def total(cls, problem: Problem, options: BaseModel) -> int | None:
        """How many candidates the driver will ask in all, when it knows (default: the budget,
        unknown for a budget in time). A total above a budget of evaluations is refused before
        anything runs."""
        return None if problem.time_budget_s is not None else problem.budget

    @classmethod
    def describe(cls, problem: Problem, options: BaseModel) -> str:
        """What will run, in a few words, for ``dse validate``, progress and ``dse status``."""
        return cls.name

    # -- ask / tell ------------------------------------------------------------------------
    @abstractmethod
    def ask(self) -> pd.DataFrame:
        """The next batch of candidates (columns = the space's parameter names)."""

    @abstractmethod
    def tell(
        self, candidates: pd.DataFrame, objectives: np.ndarray, violations: np.ndarray
    ) -> None:
        """Results of the last batch, in ask order.

        ``objectives`` is ``(n, problem.n_objectives)``, every column minimised; rows that
        failed or are infeasible may hold NaN. ``violations`` is ``(n, problem.n_constraints)``
        with the G <= 0 convention: a row is feasible when all are <= 0.
        """

    def asked_keys(self) -> np.ndarray | None:
        """The grid positions (:meth:`dse.space.Space.keys`) of the batch just asked, when the
        driver made the batch from them: the runner then computes no keys. Default None.
        Taken from dse's own drivers only (a wrong key files results under another
        candidate)."""
        return None

    def ask_keys(self) -> np.ndarray | None:
        """The next batch as grid positions only (:meth:`dse.space.Space.keys`), for a driver
        that makes its batches from them and reads no values (:attr:`tells_values` False):
        the runner then builds no table of the batch's values, and :meth:`tell` gets a table
        of the batch's length without columns. None (the default, or a driver with nothing
        to ask this way now): the runner calls :meth:`ask`. Taken from dse's own drivers only,
        on a space whose keys are grid positions."""
        return None

    def may_ask_ahead(self) -> bool:
        """Whether the runner may ask the next batch now, while the one asked last is not yet
        told (see the module docstring: the state then holds that batch, and a restored
        driver asks it again first). Called with exactly one batch asked and untold. Default
        False: every batch is told before the next is asked."""
        return False

    def observe_cost(self, seconds: float, evaluated: int) -> None:
        """The wall time of the batch just told (asking, looking up, evaluating, storing) and
        how many of its candidates were evaluated (the rest were looked up). Called after
        :meth:`tell`, before :meth:`state`; a driver with a budget in time or one that
        chooses by cost uses it. On resume, a call with 0 seconds may follow :meth:`restore`:
        rows a stopped batch evaluated, which the saved state does not count (a cost per
        candidate is not to be taken from it). Default: ignore."""
        return None

    def explain(self) -> str:
        """What the driver does and, where it chose, why: for ``dse status`` (default:
        :meth:`describe`)."""
        return type(self).describe(self.problem, self.options)

    def attributes(self) -> dict[str, str | int | float]:
        """What the driver says about the search, for the datasets' attributes (default: none)."""
        return {}

    @property
    def done(self) -> bool:
        """No more candidates to ask (default: the total is reached)."""
        total = type(self).total(self.problem, self.options)
        return total is not None and self.asked >= total

    # -- plain-data state ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """JSON-serialisable state; subclasses extend it."""
        return {"driver": self.name, "asked": self.asked, "told": self.told}

    def restore(self, state: dict[str, Any]) -> None:
        """Rebuild the driver from :meth:`state`'s output (called before the first ask)."""
        self.asked = int(state["asked"])
        self.told = int(state["told"])


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's state as JSON-able data."""
    return rng.bit_generator.state


def rng_from_state(state: dict[str, Any]) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng
