"""Evaluator registry: entry-point group ``dse.evaluators`` or ``module:attribute``."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from dse.errors import StudyError
from dse.evaluators.base import Evaluator, Input, Metric, check_result

__all__ = ["Evaluator", "Input", "Metric", "available_evaluators", "check_result", "load_evaluator"]

GROUP = "dse.evaluators"


def available_evaluators() -> dict[str, str]:
    """Registered evaluator names and the object each entry point refers to."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def evaluator_class(name: str) -> type[Evaluator]:
    """Resolve an evaluator by registered name or by ``package.module:Attribute``."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise StudyError(f"cannot import evaluator '{name}': {exc}", field="evaluator.name") from None
    else:
        eps = {ep.name: ep for ep in entry_points(group=GROUP)}
        if name not in eps:
            raise StudyError(
                f"unknown evaluator '{name}'", field="evaluator.name",
                allowed=", ".join(sorted(eps)) + " (registered), or module:attribute",
            )
        obj = eps[name].load()
    if not (isinstance(obj, type) and issubclass(obj, Evaluator)):
        raise StudyError(f"'{name}' is not a dse Evaluator subclass", field="evaluator.name")
    return obj


def load_evaluator(spec: Any) -> Evaluator:
    """An evaluator instance from an :class:`~dse.study.EvaluatorSpec` (name + options)."""
    cls = evaluator_class(spec.name)
    try:
        return cls(**spec.options)
    except (TypeError, ValueError) as exc:
        raise StudyError(f"bad evaluator options: {exc}", field="evaluator.options") from None
