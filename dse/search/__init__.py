"""Search drivers behind one ask/tell interface, chosen by ``search.algorithm``."""

from __future__ import annotations

import importlib

from dse.errors import StudyError
from dse.search.base import Driver
from dse.space import Space
from dse.study import Study

# algorithm name -> "module:Class" (imported lazily: optuna and pymoo load slowly)
DRIVERS = {
    "random": "dse.search.random:RandomDriver",
    "exhaustive": "dse.search.exhaustive:ExhaustiveDriver",
    "nsga2": "dse.search.nsga2:NSGA2Driver",
    "optuna-nsga2": "dse.search.optuna_driver:OptunaNSGA2Driver",
    "optuna-tpe": "dse.search.optuna_driver:OptunaTPEDriver",
    "optuna-gp": "dse.search.optuna_driver:OptunaGPDriver",
}

__all__ = ["DRIVERS", "Driver", "make_driver", "resolve_algorithm"]


def resolve_algorithm(study: Study, space: Space) -> str:
    """The concrete algorithm: ``auto`` enumerates when the space fits the budget."""
    algo = study.search.algorithm
    if algo == "auto":
        fits = space.is_discrete and space.size <= study.search.budget
        algo = "exhaustive" if fits else "nsga2"
    return algo


def make_driver(study: Study, space: Space, output_dir: str | None = None) -> Driver:
    algo = resolve_algorithm(study, space)
    if algo not in DRIVERS:
        raise StudyError(
            f"search algorithm '{algo}' is not available in this installation",
            field="search.algorithm", allowed=", ".join(DRIVERS),
        )
    module, _, cls = DRIVERS[algo].partition(":")
    driver_cls = getattr(importlib.import_module(module), cls)
    s = study.search
    return driver_cls(
        space, budget=s.budget, seed=s.seed, batch_size=s.batch_size,
        n_objectives=len(study.objectives), n_constraints=len(study.constraints) + 1,
        options=s.options, output_dir=output_dir,
    )
