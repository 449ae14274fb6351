"""The evaluator contract.

An evaluator is a pure, vectorised function of a table of candidates: it takes a
:class:`pandas.DataFrame` (one row per candidate, one column per input) and returns a
DataFrame with one row per candidate holding every declared metric plus ``feasible``
(bool) and ``reason`` (empty string when feasible). It declares its ``name``,
``version``, ``inputs`` and ``metrics`` (with units) so that studies can be checked before
anything runs. It must be picklable and keep no global state: dask ships it to workers.
"""

from __future__ import annotations

import unicodedata
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np
import pandas as pd
from pydantic import BaseModel

from dse.errors import StudyError, suggestion
from dse.study import finite_number

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

    def canonical(self, value: Any) -> Any:
        """``value`` as this input spells it: a text choice written in another case or with
        other spaces, hyphens or underscores (``a100-80gb`` for ``A100-80GB``) is that
        choice, when exactly one matches; a whole number written as a float (``8.0``) of an
        integer input is an int. Anything else is returned as it is (:meth:`check` judges it)."""
        if (
            self.kind == "str"
            and isinstance(value, str)
            and self.choices is not None
            and value not in self.choices
        ):
            matches = [c for c in self.choices if isinstance(c, str) and _loose(c) == _loose(value)]
            return matches[0] if len(matches) == 1 else value
        if (
            self.kind == "int"
            and isinstance(value, float)
            and value.is_integer()
            and abs(value) <= MAX_EXACT_INT
        ):
            return int(value)
        return value

    def check(self, value: Any, *, field: str) -> None:
        """Raise a :class:`StudyError` if ``value`` is not allowed for this input."""
        if self.kind == "str":
            if not isinstance(value, str):
                raise StudyError(
                    "expected a text value", field=field, value=value, allowed=self._allowed()
                )
            if self.choices is not None and value not in self.choices:
                raise StudyError(
                    f"unknown {self.name}",
                    field=field,
                    value=value,
                    allowed=self._allowed(),
                    hint=suggestion(value, self.choices),
                )
            return
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise StudyError("expected true or false", field=field, value=value)
            return
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise StudyError(
                "expected a number" + (f" in {self.unit}" if _shown_unit(self.unit) else ""),
                field=field,
                value=value,
                allowed=self._allowed(),
            )
        if not finite_number(value):  # also an integer too large for a float (10**400)
            raise StudyError(
                "expected a finite number", field=field, value=value, allowed=self._allowed()
            )
        if self.kind == "int" and not float(value).is_integer():
            raise StudyError(
                "expected an integer", field=field, value=value, allowed=self._allowed()
            )
        if self.kind == "int" and abs(value) > MAX_EXACT_INT:
            raise StudyError(
                "integer too large",
                field=field,
                value=value,
                allowed=f"{self._allowed()} (at most 2^53)",
            )
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            raise StudyError(
                "value out of range", field=field, value=value, allowed=self._allowed()
            )

    def _allowed(self) -> str:
        if self.choices is not None:
            return ", ".join(map(str, self.choices))
        kind = {"int": "an integer", "float": "a number"}.get(self.kind, self.kind)
        if self.minimum is not None and self.maximum is not None:
            text = f"{kind} from {self.minimum:g} to {self.maximum:g}"
        elif self.minimum is not None:
            text = f"{kind} >= {self.minimum:g}"
        elif self.maximum is not None:
            text = f"{kind} <= {self.maximum:g}"
        else:
            text = kind
        return f"{text} {self.unit}" if _shown_unit(self.unit) else text


#: the largest integer a float holds exactly (numeric columns are float64 in places)
MAX_EXACT_INT = 2**53

#: how a text cell says true or false (tables of measurements, a program's output), lower case
TRUTH = {
    "true": True,
    "false": False,
    "yes": True,
    "no": False,
    "1": True,
    "0": False,
    "1.0": True,
    "0.0": False,
}


def _loose(text: str) -> str:
    """``text`` without case, spaces, hyphens and underscores: how names are matched."""
    return "".join(ch for ch in text.lower() if ch.isalnum() or ch == ".")


def _shown_unit(unit: str) -> bool:
    """A unit worth printing after a number (not the dimensionless "1" or none)."""
    return bool(unit) and unit != "1"


@dataclass(frozen=True)
class Metric:
    """One output column: its unit and a human-readable name. ``mixed_fleet``: for an
    evaluator that splits one job over parts (the analytic model's mixed fleet of two
    accelerator types), how the job's value comes from the parts' (the evaluator names its
    rules); "" where the evaluator splits no job."""

    name: str
    unit: str
    long_name: str
    mixed_fleet: str = ""


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
    #: candidates ``dse validate`` may evaluate in its own process, as a preview: a space of
    #: at most this many is evaluated whole, and refused when none of it is feasible (as
    #: ``dse run`` would end); a larger one is sampled, with a warning when no sampled
    #: candidate is. 0 (the default): no preview (an evaluator that is slow, costly or has
    #: side effects)
    preview_size: ClassVar[int] = 0
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
    #: groups of inputs that are alternatives (one overrides the others, e.g. a clock in MHz
    #: or as a fraction of the maximum): a study may set at most one input of each group,
    #: since setting two would leave one without effect
    exclusive_inputs: ClassVar[tuple[tuple[str, ...], ...]] = ()
    #: metrics an earlier version reported and this one does not: ``{name: (the metric that
    #: replaces it, the unit the removed one was in)}``. A study naming one is refused with
    #: the replacement and how to keep that unit (``display_units``, a bound's unit)
    removed_metrics: ClassVar[dict[str, tuple[str, str]]] = {}

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

    def input_files(self, values: dict[str, tuple]) -> dict[str, str]:
        """The files the evaluator reads for these input values (``values``: each input's
        values in the study, searched or fixed), as ``{path: sha256 of its bytes}``: a run
        records them, and ``dse resume`` refuses to go on where one changed (its results
        would mix two models). Default: none (an evaluator that reads no user file)."""
        del values
        return {}

    def trajectory(self, candidates: pd.DataFrame, points: int) -> pd.DataFrame:
        """Optional: how each candidate's run gets to its result, at ``points`` (at least 2)
        moments from its start to its end (``dse evaluate --trajectory``): a table of
        ``points`` rows per candidate, in the candidates' order, with a ``candidate`` column
        (the row's position in ``candidates``, from 0) and numeric columns whose names carry
        their units (``tokens``, ``loss_nats``, ``time_s``, ``energy_j``). Default: the
        evaluator gives none (:func:`has_trajectory` is false) and this raises
        ``NotImplementedError``."""
        del candidates, points
        raise NotImplementedError(f"evaluator '{self.name}' gives no trajectory")

    def with_defaults(self, candidates: pd.DataFrame) -> pd.DataFrame:
        """``candidates`` with every missing input column filled by its default."""
        out = candidates.reset_index(drop=True).copy()
        for name, inp in self.inputs.items():
            if name not in out.columns:
                out[name] = np.nan if inp.default is None else inp.default
        return out


def has_trajectory(evaluator: Evaluator) -> bool:
    """Whether ``evaluator``'s class implements the optional :meth:`Evaluator.trajectory`."""
    return type(evaluator).trajectory is not Evaluator.trajectory


#: column names dse itself writes beside an evaluator's (the results' bookkeeping, the
#: datasets' dimension and constraint mask): no input or metric may take one
RESERVED_NAMES = (
    "feasible",
    "reason",
    "status",
    "error",
    "elapsed_s",
    "batch",
    "key",
    "kept",
    "meets_constraints",
    "candidate",
)
INPUT_KINDS = get_args(InputKind)
#: the longest column name the results' netCDF files can hold (NC_MAX_NAME, in UTF-8 bytes)
MAX_NAME_BYTES = 256


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a column of the results (an input or a metric: a variable of
    the netCDF files), or None. netCDF's rule: a letter, a digit or '_' first; no '/', no
    control character, no trailing space; at most :data:`MAX_NAME_BYTES` bytes."""
    if not isinstance(name, str) or not name:
        return "a name must be a non-empty text"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"a name may hold at most {MAX_NAME_BYTES} bytes (netCDF's limit)"
    if not (name[0].isalnum() or name[0] == "_"):
        return "a name starts with a letter, a digit or '_' (netCDF's rule)"
    if "/" in name or any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        return "a name holds no '/' and no control character (netCDF's rule)"
    if name != name.rstrip():
        return "a name does not end in a space (netCDF's rule)"
    return None


class ContractError(ValueError):
    """An evaluator's output breaks the contract (a table, a row per candidate, every
    metric a number, ``feasible`` true or false): a bug of the evaluator, the same for
    every part of the call, so the call's rows fail with this message and are not retried
    one by one. ``structural``: the table's form is wrong (not a table, a row count or a
    column wrong), as it would be for any candidates; otherwise a value is (text in a
    metric), which may hold for some candidates only."""

    def __init__(self, message: str, *, structural: bool = False) -> None:
        super().__init__(message)
        self.structural = structural


def check_declarations(evaluator: Evaluator) -> None:
    """Raise ``ValueError`` naming what is wrong unless the evaluator declares a name, a
    version, inputs of a known kind whose defaults they allow and metrics, none named as a
    column dse writes itself and no metric named as an input."""
    cls = type(evaluator).__name__
    for attr in ("name", "version"):
        value = getattr(evaluator, attr, None)
        if not isinstance(value, str) or not value:
            raise ValueError(
                f"evaluator class {cls} does not set `{attr}` (a text class attribute)"
            )
    inputs, metrics = evaluator.inputs, evaluator.metrics
    for what, table, kind in (("inputs", inputs, Input), ("metrics", metrics, Metric)):
        if not isinstance(table, dict) or not all(isinstance(v, kind) for v in table.values()):
            raise ValueError(
                f"`{what}` of evaluator '{evaluator.name}' is not a dict of {kind.__name__}"
            )
        for name, decl in table.items():
            problem = name_problem(name)
            if problem:
                raise ValueError(
                    f"evaluator '{evaluator.name}' declares {what[:-1]} {name!r}: {problem}"
                )
            if name in RESERVED_NAMES:
                raise ValueError(
                    f"evaluator '{evaluator.name}' declares {what[:-1]} '{name}', a name dse "
                    f"writes itself (reserved: {', '.join(RESERVED_NAMES)})"
                )
            if decl.name != name:
                raise ValueError(
                    f"evaluator '{evaluator.name}': {what} key '{name}' holds {kind.__name__} "
                    f"'{decl.name}'"
                )
            for text in ("unit", "description") if kind is Input else ("unit", "long_name"):
                if not isinstance(getattr(decl, text), str):  # the datasets' attributes are text
                    raise ValueError(
                        f"{what[:-1]} '{name}' of evaluator '{evaluator.name}' has {text} "
                        f"{getattr(decl, text)!r}; allowed: text ('1' for a pure number)"
                    )
    _check_class_settings(evaluator, inputs)
    both = sorted(set(inputs) & set(metrics))
    if both:
        raise ValueError(
            f"evaluator '{evaluator.name}' declares '{both[0]}' both as an input and as a metric"
        )
    for name, inp in inputs.items():
        if inp.kind not in INPUT_KINDS:
            raise ValueError(
                f"input '{name}' of evaluator '{evaluator.name}' has kind '{inp.kind}'; "
                f"allowed: {', '.join(INPUT_KINDS)}"
            )
        if inp.default is not None:
            try:
                inp.check(inp.default, field=name)
            except StudyError as exc:
                raise ValueError(
                    f"input '{name}' of evaluator '{evaluator.name}': its default {inp.default!r} "
                    f"breaks its own declaration: {exc.message}"
                    + (f" (allowed: {exc.allowed})" if exc.allowed else "")
                ) from None


def _check_class_settings(evaluator: Evaluator, inputs: dict[str, Input]) -> None:
    """The class attributes a run reads: ``chunk_size`` (None or a whole number of at
    least 1), ``preview_size`` (a whole number, 0 or more), ``fork_safe`` and
    ``enforces_timeout`` (true or false; an evaluator that enforces time-outs takes
    ``timeout_s``), ``exclusive_inputs`` (groups of its declared ``inputs``)."""
    import inspect

    def whole(value) -> bool:
        return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)

    chunk = evaluator.chunk_size
    if chunk is not None and not (whole(chunk) and chunk >= 1):
        raise ValueError(
            f"its class sets chunk_size = {chunk!r}; allowed: None or a whole number >= 1"
        )
    if not (whole(evaluator.preview_size) and evaluator.preview_size >= 0):
        raise ValueError(
            f"its class sets preview_size = {evaluator.preview_size!r}; allowed: a whole "
            "number >= 0"
        )
    for attr in ("fork_safe", "enforces_timeout"):
        if not isinstance(getattr(evaluator, attr), bool | np.bool_):
            raise ValueError(
                f"its class sets {attr} = {getattr(evaluator, attr)!r}; allowed: True or False"
            )
    if evaluator.enforces_timeout:
        params = inspect.signature(evaluator.evaluate).parameters
        takes = "timeout_s" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        if not takes:
            raise ValueError(
                "its class sets enforces_timeout = True, but its evaluate() takes no "
                "timeout_s argument"
            )
    for group in evaluator.exclusive_inputs:
        unknown = [g for g in group if g not in inputs]
        if unknown:
            raise ValueError(
                f"its class names '{unknown[0]}' in exclusive_inputs, which is not one "
                "of its inputs"
            )


def check_result(
    evaluator: Evaluator, candidates: pd.DataFrame, result: pd.DataFrame
) -> pd.DataFrame:
    """Enforce the contract on an evaluator's output (raising :class:`ContractError`):
    a DataFrame with one row per candidate, every metric, ``feasible`` and ``reason``;
    every metric a number (bool, integer or float; a missing value NaN), a flag (a metric
    of unit ``bool``) and ``feasible`` true or false (a bool column, or 0 and 1). Returns
    a new table (the evaluator's is left as it is; a caller may add columns to it) with only
    those columns, a clean index, flags and ``feasible`` as bool and every other metric as
    float64, so that a metric has one type in every call. Its columns may share the
    evaluator's arrays (pandas' copy-on-write): a caller that keeps them beyond the
    evaluator's next call copies them (an evaluator may reuse its output buffers)."""
    name = evaluator.name
    if not isinstance(result, pd.DataFrame):
        raise ContractError(
            f"evaluator '{name}' returned {type(result).__name__}, not a DataFrame", structural=True
        )
    if len(result) != len(candidates):
        raise ContractError(
            f"evaluator '{name}' returned {len(result)} rows for {len(candidates)} candidates",
            structural=True,
        )
    metrics = evaluator.metrics  # (a property may build it on every call)
    missing = [c for c in (*metrics, "feasible", "reason") if c not in result.columns]
    if missing:
        raise ContractError(f"evaluator '{name}' did not return {missing}", structural=True)
    if result.columns.duplicated().any():
        raise ContractError(
            f"evaluator '{name}' returned column '{result.columns[result.columns.duplicated()][0]}' "
            "twice",
            structural=True,
        )
    # only what the contract asks for: other columns (the inputs echoed back, notes) are
    # not stored, and one named as a column dse writes itself would clash with it
    result = result[[*metrics, "feasible", "reason"]].reset_index(drop=True)
    for metric, declared in metrics.items():
        col = result[metric]
        if not pd.api.types.is_numeric_dtype(col.dtype):
            raise ContractError(
                f"evaluator '{name}' returned metric '{metric}' as {col.dtype} "
                f"(e.g. {_example(col)}); a metric is a number (NaN where missing)"
            )
        if getattr(col.dtype, "kind", "") == "c":
            raise ContractError(
                f"evaluator '{name}' returned metric '{metric}' as {col.dtype}; a metric is a "
                "real number (NaN where missing)"
            )
        if declared.unit == "bool":  # a flag: true or false in every call
            if col.dtype != bool:
                values = col.to_numpy(dtype=float, na_value=np.nan)
                if not np.isin(values, (0.0, 1.0)).all():
                    raise ContractError(
                        f"evaluator '{name}' returned flag '{metric}' (unit bool) as {col.dtype} "
                        f"(e.g. {_example(col, truth=True)}); a flag is true or false in every "
                        "call (a bool column, or 0 and 1)"
                    )
                result[metric] = values.astype(bool)
        elif not isinstance(
            col.dtype, np.dtype
        ):  # a nullable extension column: numpy floats, NaN for NA
            result[metric] = col.to_numpy(dtype=np.float64, na_value=np.nan)
        elif col.dtype.kind in "biu" or (col.dtype.kind == "f" and col.dtype.itemsize != 8):
            # float64, whatever the call's values: every chunk of the log has one type per metric
            # (integers are floats in a call with a missing value, ``Series.where``; a bool
            # column is a number unless the metric is declared a flag)
            result[metric] = col.to_numpy(dtype=np.float64)
    reason = result["reason"]
    if isinstance(reason.dtype, np.dtype) and reason.dtype.kind in "iufcb":  # numbers, not text
        if reason.isna().all():  # no reason given anywhere (NaN): none
            result["reason"] = ""
        else:
            first = reason.dropna().iloc[0]
            raise ContractError(
                f"evaluator '{name}' returned 'reason' as {reason.dtype} (e.g. "
                f"{getattr(first, 'item', lambda: first)()!r}); it is text, empty where the "
                "candidate is feasible"
            )
    feasible = result["feasible"]
    if feasible.dtype != bool:
        try:  # 0/1 numbers, or Python bools in an object column
            values = feasible.to_numpy(dtype=float, na_value=np.nan)
        except (TypeError, ValueError):
            values = None
        if values is None or not np.isin(values, (0.0, 1.0)).all():
            raise ContractError(
                f"evaluator '{name}' returned 'feasible' as {feasible.dtype} (e.g. "
                f"{_example(feasible, truth=True)}); it is true or false (a bool column, or 0 and 1)"
            )
        result["feasible"] = values.astype(bool)
    return result


def _example(col: pd.Series, *, truth: bool = False) -> str:
    """The first value of ``col`` that is not a number (``truth``: not true, false, 0 or 1;
    a missing value counts), or its first value, shown briefly."""
    for value in col.head(1000):
        if np.ndim(value) == 0 and pd.isna(value):
            return repr(value)
        if truth and not (
            isinstance(value, bool | int | float | np.number | np.bool_) and value in (0, 1)
        ):
            return repr(value)[:40]
        if not truth and not isinstance(value, bool | int | float | np.number):
            return repr(value)[:40]
    return repr(col.iloc[0])[:40] if len(col) else "no rows"
