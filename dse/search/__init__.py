"""Search-driver registry: the entry-point group ``dse.search`` or ``package.module:Class``.

:func:`plan_search` resolves a study's ``search`` section into a :class:`SearchPlan`: the
driver class, its validated options, the :class:`~dse.search.base.Problem` and the number
of candidates it will ask, refused when that exceeds the budget. ``dse validate`` and
``dse run`` both go through it, so they accept and refuse the same studies.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel

from dse.errors import StudyError
from dse.plugins import load_class, registered
from dse.search.base import DriverOptions, NoOptions, Problem, SearchDriver
from dse.search.phases import PhasedSearch
from dse.space import Space
from dse.study import PolishSpec, Study, validate_options

__all__ = [
    "GROUP",
    "DriverOptions",
    "NoOptions",
    "Problem",
    "SearchDriver",
    "SearchPlan",
    "available_drivers",
    "driver_class",
    "parse_options",
    "plan_search",
    "problem_of",
]

GROUP = "dse.search"
EVALUATOR_VERDICT = "evaluator_feasible"  # name of the last violation column


def available_drivers() -> dict[str, str]:
    """Registered driver names and the class each entry point refers to."""
    return registered(GROUP)


def driver_class(name: str) -> type[SearchDriver]:
    """A driver class by registered name or ``package.module:Class``; it sets ``name`` and
    implements ``ask`` and ``tell``."""
    cls = load_class(GROUP, name, SearchDriver, field="search.algorithm", kind="search algorithm")
    if not isinstance(getattr(cls, "name", None), str) or not cls.name:
        raise StudyError(
            f"search driver class {cls.__name__} does not set `name` (a text class attribute; a bug "
            "of the driver's package)",
            field="search.algorithm",
            value=name,
        )
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise StudyError(
            f"search driver class {cls.__name__} does not implement {missing} (a bug of the driver's "
            "package)",
            field="search.algorithm",
            value=name,
        )
    return cls


def parse_options(cls: type[SearchDriver], problem: Problem, raw: dict) -> BaseModel:
    """``search.options`` validated by the driver's own model (one clear error otherwise)."""
    return validate_options(cls.options_model(problem), raw, prefix=("search", "options"))


UNBOUNDED = 2**62  # the evaluation cap of a budget in time over a space too large to count


def problem_of(study: Study, space: Space, work_dir: Path | None = None) -> Problem:
    """The :class:`Problem` a study describes (objectives all minimised; the evaluator's
    verdict as the last constraint column). With a budget in time, ``budget`` is unbounded:
    the time ends the search, or, over a discrete space, having evaluated every candidate
    (:class:`~dse.search.phases.PhasedSearch`; a sampling driver asks repeats, so a cap of
    the space's size would end it early)."""
    s = study.search
    budget = s.budget_evaluations
    if budget is None:
        budget = UNBOUNDED
    return Problem(
        space=space,
        objectives=tuple(o.metric for o in study.objectives),
        constraints=(*(str(c) for c in study.constraints), EVALUATOR_VERDICT),
        budget=budget,
        batch_size=s.batch_size,
        seed=s.seed,
        work_dir=work_dir,
        name=study.name,
        time_budget_s=s.budget_s,
    )


@dataclass(frozen=True)
class SearchPlan:
    """A checked search: what ``dse validate`` approved and ``dse run`` builds."""

    driver_cls: type[SearchDriver]
    options: BaseModel
    problem: Problem
    total: int | None
    description: str
    polish: PolishSpec | None = None  # the front polish, where it follows the search

    def check_fresh(self) -> None:
        """What a new run needs of the driver beyond :func:`plan_search`'s checks (its
        :meth:`~dse.search.base.SearchDriver.check_fresh`)."""
        self.driver_cls.check_fresh(self.problem, self.options)

    def build(self, work_dir: Path | None) -> PhasedSearch:
        """The driver inside its phases (search, polish), with ``work_dir`` (the results
        folder) for its own files."""
        problem = replace(self.problem, work_dir=work_dir)
        return PhasedSearch(problem, self.driver_cls(problem, self.options), self.polish)


def plan_search(study: Study, space: Space) -> SearchPlan:
    """Resolve and check ``study.search``; raises :class:`StudyError` naming the field."""
    cls = driver_class(study.search.algorithm)
    problem = problem_of(study, space)
    options = parse_options(cls, problem, study.search.options)
    cls.check(problem, options)
    total = cls.total(problem, options)
    if problem.time_budget_s is None and total is not None and total > problem.budget:
        raise StudyError(
            f"search '{study.search.algorithm}' would evaluate {_count(total)} candidates, more than "
            f"the budget of {problem.budget:,} (the space has {_count(space.size)} candidates)",
            field="search.budget",
            allowed=f"a budget of at least {total:,}, a smaller space, or a search that samples "
            "within the budget (auto, nsga2, optuna-tpe, random)",
        )
    polish = _polish(study, cls, space, total)
    description = cls.describe(problem, options)
    if polish is not None:
        description += f" + polish (after {polish.search_share:.0%} of the budget)"
    elif (
        study.search.polish is not None and study.search.polish.enabled
    ):  # asked for, and nothing to do
        description += " (no polish: the search evaluates every candidate of the space)"
    return SearchPlan(cls, options, problem, total, description, polish)


def _polish(
    study: Study, cls: type[SearchDriver], space: Space, total: int | None
) -> PolishSpec | None:
    """The polish settings where the polish follows the search: on (by the study or the
    driver's default), a discrete space, and a search that does not ask every candidate."""
    spec = study.search.polish
    if spec is not None and spec.enabled and not space.indexable:
        raise StudyError(
            "the front polish needs a discrete space (every parameter a list or a "
            "range with a step)",
            field="search.polish",
            value=True,
            allowed="false, or steps for the continuous ranges",
        )
    if spec is None:
        spec = PolishSpec(enabled=cls.polish_default)
    whole = space.indexable and total is not None and total >= space.size
    return spec if spec.enabled and space.indexable and not whole else None


def _count(n: float) -> str:
    if math.isinf(n):
        return "infinitely many"
    return f"{int(n):,}"
