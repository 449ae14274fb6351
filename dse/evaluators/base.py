"""The evaluator contract.

An evaluator is a pure, vectorised function of a table of candidates: it takes a
:class:`pandas.DataFrame` (one row per candidate, one column per input) and returns a
DataFrame with one row per candidate holding every declared metric plus ``feasible``
(bool) and ``reason`` (empty string when feasible). It declares its ``name``,
``version``, ``inputs`` and ``metrics`` (with units) so that studies can be checked before
anything runs. It must be picklable and keep no global state: dask ships it to workers.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel

from dse.errors import StudyError

InputKind = Literal["int", "float", "str", "bool"]


@dataclass(frozen=True)
class Input:
    """One input column an evaluator understands."""

    name: str
    kind: InputKind
    unit: str
    description: str
    default: Any = None
    choices: tuple | None = None
    minimum: float | None = None
    maximum: float | None = None
    group: str = "other"

    def check(self, value: Any, *, field: str) -> None:
        """Raise a :class:`StudyError` if ``value`` is not allowed for this input."""
        if self.kind == "str":
            if not isinstance(value, str):
                raise StudyError("expected a text value", field=field, value=value,
                                 allowed=self._allowed())
            if self.choices is not None and value not in self.choices:
                raise StudyError(f"unknown {self.name}", field=field, value=value, allowed=self._allowed())
            return
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise StudyError("expected true or false", field=field, value=value)
            return
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise StudyError(f"expected a number ({self.unit})", field=field, value=value,
                             allowed=self._allowed())
        if self.kind == "int" and not float(value).is_integer():
            raise StudyError("expected an integer", field=field, value=value, allowed=self._allowed())
        if not math.isfinite(value):
            raise StudyError("expected a finite number", field=field, value=value)
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            raise StudyError("value out of range", field=field, value=value, allowed=self._allowed())

    def _allowed(self) -> str:
        if self.choices is not None:
            return ", ".join(map(str, self.choices))
        lo = "-inf" if self.minimum is None else f"{self.minimum:g}"
        hi = "inf" if self.maximum is None else f"{self.maximum:g}"
        return f"{self.kind} in [{lo}, {hi}] {self.unit}".strip()


@dataclass(frozen=True)
class Metric:
    """One output column: its unit and a human-readable name."""

    name: str
    unit: str
    long_name: str


class Evaluator(ABC):
    """Base class for evaluators; subclasses set the class attributes and ``evaluate``."""

    name: ClassVar[str]
    version: ClassVar[str]
    description: ClassVar[str] = ""
    #: optional pydantic model of ``evaluator.options``; ``dse validate`` checks the study's
    #: options against it and the validated values become the constructor's keyword arguments
    Options: ClassVar[type[BaseModel] | None] = None
    #: candidates per call the evaluator prefers (None: the executor sizes chunks from the
    #: measured cost per candidate); a study's ``execution.chunk_size`` overrides it
    chunk_size: ClassVar[int | None] = None
    #: True when ``evaluate(candidates, timeout_s=...)`` enforces a time limit itself (it
    #: runs something it can stop, as the command evaluator's program); otherwise a study's
    #: ``evaluator.timeout_s`` runs the evaluator in a child process that is killed when time is up
    enforces_timeout: ClassVar[bool] = False
    #: True when worker processes may be copies of the process that built the evaluator
    #: (``fork``): building it starts no threads, opens no connections or files it keeps and
    #: touches no GPU. A local dask cluster started from a process with no other thread then
    #: forks its first workers (they inherit the imports and the built evaluator instead of
    #: starting Python anew: about 1.5 CPU-s each) unless ``execution.start_method`` says
    #: otherwise; otherwise it spawns them. A forked
    #: worker keeps this process's BLAS thread count (dask limits it to one only in spawned
    #: workers): an evaluator that calls BLAS should limit its threads itself
    fork_safe: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        self.options = options

    @property
    @abstractmethod
    def inputs(self) -> dict[str, Input]: ...

    @property
    @abstractmethod
    def metrics(self) -> dict[str, Metric]: ...

    @abstractmethod
    def evaluate(self, candidates: pd.DataFrame) -> pd.DataFrame:
        """Metrics, ``feasible`` and ``reason`` for every row of ``candidates``."""

    def attributes(self) -> dict[str, str]:
        """Text attributes for the result datasets and ``dse describe`` (e.g. which of its
        numbers are measured and which estimated). Default: none."""
        return {}

    def with_defaults(self, candidates: pd.DataFrame) -> pd.DataFrame:
        """``candidates`` with every missing input column filled by its default."""
        out = candidates.reset_index(drop=True).copy()
        for name, inp in self.inputs.items():
            if name not in out.columns:
                out[name] = np.nan if inp.default is None else inp.default
        return out


def check_result(evaluator: Evaluator, candidates: pd.DataFrame, result: pd.DataFrame) -> pd.DataFrame:
    """Enforce the contract on an evaluator's output; returns it with a clean index."""
    if not isinstance(result, pd.DataFrame):
        raise TypeError(f"evaluator '{evaluator.name}' returned {type(result).__name__}, not a DataFrame")
    if len(result) != len(candidates):
        raise ValueError(
            f"evaluator '{evaluator.name}' returned {len(result)} rows for {len(candidates)} candidates"
        )
    missing = [c for c in (*evaluator.metrics, "feasible", "reason") if c not in result.columns]
    if missing:
        raise ValueError(f"evaluator '{evaluator.name}' did not return {missing}")
    return result.reset_index(drop=True)
