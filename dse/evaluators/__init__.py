"""Evaluator registry: the entry-point group ``dse.evaluators`` or ``package.module:Class``."""

from __future__ import annotations

from typing import Any

from dse.allocator import keep_freed_memory
from dse.errors import StudyError
from dse.evaluators.base import (
    ContractError,
    Evaluator,
    Input,
    Metric,
    check_declarations,
    check_result,
    has_trajectory,
)
from dse.plugins import load_class, registered

__all__ = [
    "GROUP",
    "ContractError",
    "Evaluator",
    "Input",
    "Metric",
    "available_evaluators",
    "check_result",
    "evaluator_class",
    "has_trajectory",
    "load_evaluator",
]

GROUP = "dse.evaluators"


def available_evaluators() -> dict[str, str]:
    """Registered evaluator names and the object each entry point refers to."""
    return registered(GROUP)


def evaluator_class(name: str) -> type[Evaluator]:
    """Resolve an evaluator by registered name or by ``package.module:Class``."""
    return load_class(GROUP, name, Evaluator, field="evaluator.name", kind="evaluator")


def load_evaluator(spec: Any) -> Evaluator:
    """An evaluator instance from an :class:`~dse.study.EvaluatorSpec` (name + options).

    An evaluator that declares an ``Options`` pydantic model has its options checked by it
    (an unknown or mistyped option names ``evaluator.options.<key>``); the validated values
    are passed to its constructor as keyword arguments. The process that builds an
    evaluator keeps the memory its chunks free (:func:`dse.allocator.keep_freed_memory`).
    """
    keep_freed_memory()
    cls = evaluator_class(spec.name)
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:  # the class, not its options: Python would say "Can't instantiate abstract class"
        raise StudyError(
            f"evaluator '{spec.name}' ({cls.__module__}.{cls.__qualname__}) does not define "
            f"{', '.join(missing)} (a bug of the evaluator's package)",
            field="evaluator.name",
        )
    options = dict(spec.options)
    if cls.Options is not None:
        from dse.study import validate_options

        options = validate_options(
            cls.Options, options, prefix=("evaluator", "options")
        ).model_dump()
    try:
        evaluator = cls(**options)
    except (TypeError, ValueError) as exc:
        raise StudyError(f"bad evaluator options: {exc}", field="evaluator.options") from None
    except StudyError:
        raise
    except Exception as exc:  # noqa: BLE001 - the constructor failed on these options (a file it reads...)
        what = getattr(exc, "strerror", None) and getattr(exc, "filename", None)
        text = f"{exc.filename}: {exc.strerror}" if what else f"{type(exc).__name__}: {exc}"
        raise StudyError(
            f"evaluator '{spec.name}' could not be built from its options: {text}",
            field="evaluator.options",
        ) from None
    try:
        check_declarations(evaluator)
    except ValueError as exc:
        raise StudyError(
            f"evaluator '{spec.name}': {exc} (a bug of the evaluator's package)",
            field="evaluator.name",
        ) from None
    except Exception as exc:  # noqa: BLE001 - e.g. its `inputs` property raised
        raise StudyError(
            f"evaluator '{spec.name}': reading its declarations raised {type(exc).__name__}: {exc} "
            "(a bug of the evaluator's package)",
            field="evaluator.name",
        ) from None
    return evaluator
