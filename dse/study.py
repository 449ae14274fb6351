"""The study file: one YAML document is the whole experiment.

This module is the schema alone (it imports nothing else of dse's pipeline): the form of
every section. The check of a study against its evaluator, search driver and execution
settings is :mod:`dse.checks`. Every problem becomes a :class:`~dse.errors.StudyError`
that names the file, the field path, the offending value and what is allowed.
"""

from __future__ import annotations

import math
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dse.errors import DseError, StudyError, did_you_mean, pydantic_message
from dse.units import UNITS, canonical, unit_problem
from dse.yamlfile import load_yaml, read_bounded, read_inside

_NAME_RE = re.compile(r"^(?!\.)[A-Za-z0-9_.-]{1,200}$")  # a folder name: not '.', '..' or hidden
_CONSTRAINT_RE = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*(°?[A-Za-z]+)?\s*$"
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_truth_for_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        """YAML's true and false are not numbers (pydantic would read ``batch_size: true`` as 1),
        also as the ends of a range; and a switch is true or false only (pydantic would read
        ``tls: 1`` or ``enabled: "no"`` as a truth value)."""
        annotation = cls.model_fields[info.field_name].annotation
        if _numbers_only(annotation):
            for x in v if isinstance(v, list | tuple) else (v,):
                if isinstance(x, bool):
                    raise ValueError("expected a number, not true or false")
        elif _switch(annotation) and v is not None and not isinstance(v, bool):
            raise ValueError("expected true or false")
        if isinstance(v, str) and "\x00" in v:  # no file name holds one: os calls raise ValueError
            raise ValueError("expected a text without a NUL character (\\x00)")
        return v


def _plain(value: Any) -> Any:
    """``value`` as YAML writes it safely: tuples as lists, numpy numbers as Python's."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)  # a numpy scalar
    return item() if callable(item) and not isinstance(value, str | bytes) else value


def _low_high(v: Any) -> Any:
    if not isinstance(v, list | tuple) or len(v) != 2:
        raise ValueError("expected [low, high]: a list of two numbers")
    return v


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def finite_number(x: Any) -> bool:
    """A number a float can hold (not inf or NaN, not an integer beyond ~1.8e308)."""
    try:
        return math.isfinite(float(x))
    except (OverflowError, TypeError, ValueError):
        return False


def _finite(*values: Any) -> None:
    for x in values:
        if x is not None and not finite_number(x):
            raise ValueError("expected finite numbers")


def _switch(annotation: Any) -> bool:
    """A field that holds true or false (or None) alone."""
    args = get_args(annotation)
    if args:  # (``bool | None``: its None is no switch of its own, but the field's default)
        return bool in args and all(a in (bool, type(None)) for a in args)
    return annotation is bool


def _numbers_only(annotation: Any) -> bool:
    """A field that holds numbers alone (int, float, or None)."""
    args = get_args(annotation)
    if args:
        return all(_numbers_only(a) for a in args)
    return annotation in (int, float, type(None))


Scalar = bool | int | float | str

#: the longest wait a study may set, in seconds (~115 days: a wait of 1e300 s overflows a timer)
MAX_WAIT_S = 1e7


class RangeSpec(_Strict):
    """A linear range ``[low, high]``; with ``step`` a grid, without it a continuous interval."""

    # (its ends are checked as finite with a message of its own)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=True)

    range: tuple[int | float, int | float]
    step: int | float | None = Field(default=None, gt=0)

    @field_validator("range", mode="before")
    @classmethod
    def _two(cls, v: Any) -> Any:
        return _low_high(v)

    @model_validator(mode="after")
    def _ordered(self) -> RangeSpec:
        low, high = self.range
        _finite(low, high, self.step)
        if not low <= high:
            raise ValueError("range must be [low, high] with low <= high")
        return self


class LogSpec(_Strict):
    """A logarithmic grid from ``low`` to ``high``: powers of ``base`` times low, or ``num`` points."""

    # (its ends are checked as finite with a message of its own)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=True)

    log: tuple[int | float, int | float]
    base: int | float | None = Field(default=None, gt=1)
    num: int | None = Field(default=None, ge=2)

    @field_validator("log", mode="before")
    @classmethod
    def _two(cls, v: Any) -> Any:
        return _low_high(v)

    @model_validator(mode="after")
    def _valid(self) -> LogSpec:
        low, high = self.log
        _finite(low, high, self.base)
        if not 0 < low <= high:
            raise ValueError("log range must be [low, high] with 0 < low <= high")
        if (self.base is None) == (self.num is None):
            raise ValueError(
                "a log range needs exactly one of 'base' (e.g. 2) or 'num' (point count)"
            )
        return self


class ChoicesSpec(_Strict):
    choices: list[Scalar] = Field(min_length=1)


#: a bundle's name: a value of its parameter in the results (a letter or digit first)
_BUNDLE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
#: the most bytes a catalog of bundles may hold, and the most bundles one parameter may have
CATALOG_LIMIT_BYTES = 1_000_000
MAX_BUNDLES = 10_000
#: the most bytes a study file may hold (the largest example study is under 20 kB)
STUDY_LIMIT_BYTES = 10_000_000


class BundlesSpec(_Strict):
    """A parameter whose values are the names of bundles of inputs: choosing one sets each
    input its bundle names (a fabric: bandwidth, latency and energy per bit together).
    Written ``{bundles: {name: {input: value, ...}, ...}}`` or ``{bundles: CATALOG.yaml}``
    (a file beside the study holding that mapping), optionally with ``choices``: the
    names to search, in that order; :func:`_parse_bundles` reads and checks both forms."""

    bundles: dict[str, dict[str, Scalar]]
    #: the catalog file the bundles were read from ("" when written in the study), for
    #: messages; not part of the study (its copy in a results folder holds the bundles)
    catalog: str = Field(default="", exclude=True, repr=False)

    @property
    def names(self) -> list[str]:
        return list(self.bundles)

    @property
    def keys(self) -> list[str]:
        """The inputs every bundle sets."""
        return list(next(iter(self.bundles.values())))

    def where(self, parameter: str, bundle: str, key: str | None = None) -> tuple[str | None, str]:
        """(file, field) that names ``bundle`` (its input ``key``) in a message: the catalog
        file and ``bundle.key``, or None (the study) and ``space.PARAMETER.bundles.bundle.key``."""
        tail = bundle + (f".{key}" if key else "")
        if self.catalog:
            return self.catalog, tail
        return None, f"space.{parameter}.bundles.{tail}"


class Objective(_Strict):
    metric: str
    direction: Literal["minimize", "maximize"] = "minimize"


class Constraint(_Strict):
    """An inequality on a metric, written ``"metric <= value"`` in the study, the value in
    the metric's own unit or followed by a unit of its kind (``energy_to_train_j <= 50 MWh``;
    :mod:`dse.units`): :attr:`limit` is the bound in the unit the metric is stored in."""

    metric: str
    op: Literal["<=", ">=", "<", ">"]
    bound: float = Field(allow_inf_nan=False)
    unit: str | None = Field(
        default=None, description="the unit the bound is written in (default: the metric's)"
    )

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, v: Any) -> Any:
        if isinstance(v, str):
            m = _CONSTRAINT_RE.match(v)
            bound = _number(m[3]) if m else None
            if bound is None:
                raise ValueError(
                    "a constraint is written 'metric <= number', optionally with a unit "
                    "('energy_to_train_j <= 50 MWh'; operators: <=, >=, <, >)"
                )
            return {"metric": m[1], "op": m[2], "bound": bound, "unit": m[4]}
        if not isinstance(v, dict):
            raise ValueError(
                "a constraint is written 'metric <= number' (operators: <=, >=, <, >), "
                "or as a mapping {metric, op, bound, unit}"
            )
        return v

    @field_validator("unit")
    @classmethod
    def _known_unit(cls, v: str | None) -> str | None:
        why = None if v is None else unit_problem(v)
        if why:
            raise ValueError(why)
        return None if v is None else canonical(v)

    @property
    def limit(self) -> float:
        """The bound in the unit the metric is stored in (the SI unit of the bound's kind;
        ``dse.checks`` refuses a unit of another kind than the metric's)."""
        return self.bound if self.unit is None else self.bound * UNITS[self.unit][1]

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}{' ' + self.unit if self.unit else ''}"


class EvaluatorSpec(_Strict):
    name: str = "analytic"
    options: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WAIT_S,
        allow_inf_nan=False,
        description="seconds one candidate may take at most (a call on n candidates "
        "gets n times as long); a candidate over it fails, the run goes on",
    )


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$")
_BUDGET_FORMS = "a number of evaluations (e.g. 2000) or a duration (e.g. '90 s', '10 min', '2 h')"


def _known_display_unit(unit: str) -> str:
    """A ``display_units`` value: a unit :mod:`dse.units` knows (checked one at a time, so a
    refusal names ``display_units.METRIC`` and that unit, not the whole mapping)."""
    why = unit_problem(unit)
    if why:
        raise ValueError(why)
    return unit


def duration_s(text: str) -> float | None:
    """Seconds in a duration such as ``90 s``, ``10 min``, ``1.5 h`` or ``2 days`` (the time
    units of :mod:`dse.units`, with their other spellings); None if it is not one."""
    m = _DURATION_RE.match(text.lower())
    unit = UNITS.get(canonical(m[2])) if m else None  # the units a time bound may name
    if unit is None or unit[0] != "s":
        return None
    return float(m[1]) * unit[1]


#: the most candidates one batch may ask (a population, a polish batch): a batch is held in
#: memory whole, and pymoo draws a population of 10^12 as a 36 TiB array (a population of
#: 2^20 on the quickstart takes 12 s)
MAX_BATCH = 1_048_576


class PolishSpec(_Strict):
    """The front polish after the search: the unevaluated neighbours of the front are evaluated
    until it stops changing or the budget is spent (discrete spaces; docs/search.md)."""

    enabled: bool = Field(default=True, description="polish the front after the search")
    search_share: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="share of the budget the search spends before the polish starts",
    )
    batch_size: int | None = Field(
        default=None,
        ge=1,
        description="candidates per polish batch (default: search.batch_size / 4)",
    )


class SearchSpec(_Strict):
    """The search driver: a name registered under the entry-point group ``dse.search`` (or
    ``package.module:Class``) and its options, which the driver itself declares and checks."""

    algorithm: str = "auto"
    budget: int | str = Field(
        default=1000, description="evaluations at most, or a duration ('10 min')"
    )
    seed: int = Field(default=0, ge=0, description="seed of the search's random numbers")
    batch_size: int = Field(
        default=100,
        ge=1,
        le=MAX_BATCH,
        description="candidates asked per batch / population size",
    )
    polish: PolishSpec | None = Field(
        default=None, description="the front polish (default: the algorithm's)"
    )
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("budget", mode="before")
    @classmethod
    def _budget(cls, v: Any) -> int | str:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            if v < 1:
                raise ValueError(
                    f"a budget of evaluations must be at least 1; give {_BUDGET_FORMS}"
                )
            return v
        if isinstance(v, str) and duration_s(v) is not None:
            if duration_s(v) <= 0:
                raise ValueError(f"a duration must be longer than 0 s; give {_BUDGET_FORMS}")
            return v.strip()
        raise ValueError(f"expected {_BUDGET_FORMS}")

    @field_validator("polish", mode="before")
    @classmethod
    def _polish_switch(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else v

    @property
    def budget_evaluations(self) -> int | None:
        """The budget in evaluations; None when it is a duration."""
        return self.budget if isinstance(self.budget, int) else None

    @property
    def budget_s(self) -> float | None:
        """The budget in seconds; None when it counts evaluations."""
        return None if isinstance(self.budget, int) else duration_s(self.budget)


class ExecutionSpec(_Strict):
    workers: int | None = Field(
        default=None,
        ge=0,
        description="local dask worker processes (0: evaluate "
        "in this process; default: one per core)",
    )
    scheduler: str | None = Field(default=None, description="address of a running dask scheduler")
    profile: str | None = Field(default=None, description="a cluster profile under workers/")
    chunk_size: int | None = Field(
        default=None,
        ge=1,
        description="candidates per task (default: sized from the evaluator's measured cost)",
    )
    dashboard: bool = Field(
        default=True,
        description="the dask dashboard (needs bokeh: dse[dashboard]); left unset, off for a "
        "local run whose evaluations should take under 10 s",
    )
    start_method: Literal["auto", "fork", "spawn", "forkserver"] = Field(
        default="auto",
        description="how a local dask cluster starts its worker processes (auto: fork on "
        "Linux when the evaluator declares itself fork-safe and dse runs no "
        "other thread yet, else spawn)",
    )
    tls: bool = Field(
        default=True,
        description="the local dask cluster's connections use TLS with credentials made for "
        "the run alone, so that no other user of the machine can join it (false: plain TCP; "
        "docs/security.md)",
    )
    grace_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WAIT_S,
        description="how long a run waits for an unreachable scheduler or, once it "
        "had workers, for a worker before it stops (default 60)",
    )
    start_timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WAIT_S,
        description="how long a run waits for its first worker (default 300; "
        "a batch queue may need longer)",
    )


class OutputSpec(_Strict):
    """Where the results go and what the evaluation log keeps."""

    path: str | None = Field(default=None, description="results folder (default: results/<name>)")

    @field_validator("path")
    @classmethod
    def _printable_path(cls, v: str | None) -> str | None:
        """A folder whose name holds a control character (an escape sequence, a line end)
        is a typo or a trap: its name, printed in the run's first line, would drive the
        terminal."""
        if v is not None and not v.isprintable():
            raise ValueError("expected a folder path without control characters")
        return v

    keep: Literal["all", "feasible", "front"] = Field(
        default="all",
        description="rows the log keeps in full: every evaluation, the feasible "
        "ones, or those non-dominated within the chunk they were evaluated in (the only "
        "rows that can be on the front)",
    )


class Study(_Strict):
    """A validated study."""

    name: str
    description: str = ""
    workload: dict[str, Scalar] = Field(default_factory=dict)
    space: dict[str, list[Scalar] | RangeSpec | LogSpec | ChoicesSpec | BundlesSpec | Scalar]
    fixed: dict[str, Scalar] = Field(default_factory=dict)
    objectives: list[Objective] = Field(min_length=1)
    constraints: list[Constraint] = Field(default_factory=list)
    display_units: dict[str, Annotated[str, AfterValidator(_known_display_unit)]] = Field(
        default_factory=dict,
        description="metric -> the unit it is shown in (report, figures, show, progress); "
        "its values are stored and exported in their own unit (dse.units)",
    )
    evaluator: EvaluatorSpec = Field(default_factory=EvaluatorSpec)
    search: SearchSpec = Field(default_factory=SearchSpec)
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec)
    output: OutputSpec = Field(default_factory=OutputSpec)
    source_text: str = Field(default="", exclude=True, repr=False)
    source_path: str = Field(default="", exclude=True, repr=False)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not _NAME_RE.fullmatch(v):  # not match: '$' also matches before a final newline
            raise ValueError(
                "name must be 1 to 200 letters, digits, '_', '-' and '.', not starting with '.' "
                "(it names the results folder)"
            )
        return v

    @field_validator("output", mode="before")
    @classmethod
    def _output_path(cls, v: Any) -> Any:
        return {"path": v} if isinstance(v, str) else v

    @field_validator("display_units")
    @classmethod
    def _known_units(cls, v: dict[str, str]) -> dict[str, str]:
        return {metric: canonical(unit) for metric, unit in v.items()}

    @field_validator("space")
    @classmethod
    def _non_empty_space(cls, v: dict) -> dict:
        if not v:
            raise ValueError("the design space needs at least one parameter")
        for key, spec in v.items():
            if isinstance(spec, list) and not spec:
                raise ValueError(f"parameter '{key}' has an empty list of choices")
        return v

    # -- derived views -------------------------------------------------------------------
    @property
    def fixed_values(self) -> dict[str, Scalar]:
        """Workload and fixed parameters merged: the constant columns of every candidate."""
        return {**self.workload, **self.fixed}

    @property
    def bundles(self) -> dict[str, BundlesSpec]:
        """The bundle parameters of the space, by name."""
        return {n: s for n, s in self.space.items() if isinstance(s, BundlesSpec)}

    @property
    def output_dir(self) -> Path:
        """The results folder: ``output.path`` (``~`` is the home folder, as in a profile's
        path; it was a folder named ``~`` here, whose datasets xarray then wrote under the
        home folder), else ``results/NAME``."""
        if self.output.path:
            return Path(self.output.path).expanduser()
        return Path("results") / self.name

    def with_execution(self, **changes: Any) -> Study:
        """This study with ``changes`` to its execution section (the command line's
        ``--profile``, the profile file a run recorded)."""
        return self.model_copy(update={"execution": self.execution.model_copy(update=changes)})

    def to_yaml(self) -> str:
        """The study as it was written (the source text), or a canonical dump; one whose
        bundles come from a catalog file is dumped with them written in (a results folder's
        ``study.yaml`` then stands alone: resume, show and export need no catalog)."""
        catalogs = sorted({s.catalog for s in self.bundles.values() if s.catalog})
        if self.source_text and not catalogs:
            return self.source_text
        text = yaml.safe_dump(
            _plain(self.model_dump(exclude_none=True, warnings=False)), sort_keys=False
        )
        if catalogs:
            text = f"# written by dse with the bundles of {', '.join(catalogs)} copied in\n" + text
        return text

    def without_stale_source(self) -> Study:
        """This study, without its source text where that no longer says what the study is
        (a copy changed in Python: ``model_copy(update=...)``), so that :meth:`to_yaml` and the
        results folder's ``study.yaml`` hold the study that runs, not the file it came from.
        A changed ``execution`` section (how to run: ``--profile``, workers) keeps the text."""
        if not self.source_text:
            return self
        try:
            read = parse_study(
                load_yaml(self.source_text),
                file=self.source_path or "<study>",
                text=self.source_text,
            )
        except (yaml.YAMLError, DseError):
            read = None
        keep = {
            "exclude": {"execution"},
            "warnings": False,
        }  # (numpy numbers: no serialiser warning)
        if read is not None and read.model_dump(**keep) == self.model_dump(**keep):
            return self  # (numpy numbers a program put in compare equal to the file's)
        return self.model_copy(update={"source_text": ""})


# ---------------------------------------------------------------------------------------
#: how pydantic tags the scalar branches of a union in an error's location
_BRANCH_TAGS = ("bool", "int", "float", "str")


def _field_path(loc: tuple) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif isinstance(p, str) and (
            p in (*_BRANCH_TAGS, "RangeSpec", "LogSpec", "ChoicesSpec", "BundlesSpec")
            or p.startswith(("list[", "function-", "union["))
        ):
            continue  # pydantic's union-branch tags carry no meaning for the user
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts)


def _is_union_branch(loc: tuple) -> bool:
    return any(isinstance(p, str) and (p in _BRANCH_TAGS or p.startswith("list[")) for p in loc)


def _pick_error(errors: list[dict]) -> dict:
    """Among pydantic's errors choose the one most useful to a user (unions report one per branch)."""
    for wanted in ("extra_forbidden", "value_error", "missing"):
        for e in errors:
            if e["type"] == wanted:
                return e
    return errors[0]


def _describe_allowed(err: dict) -> str | None:
    typ = err["type"]
    if typ == "extra_forbidden":
        return None
    if typ == "literal_error":
        return err.get("ctx", {}).get("expected")
    if typ.endswith("_type") or typ.endswith("_parsing"):
        return typ.split("_")[0]
    bounds = {
        "greater_than_equal": ">= {ge}",
        "greater_than": "> {gt}",
        "less_than_equal": "<= {le}",
        "less_than": "< {lt}",
    }
    if typ in bounds:
        return bounds[typ].format(**err.get("ctx", {}))
    return None


_SPEC_BY_KEY = {"range": RangeSpec, "log": LogSpec, "choices": ChoicesSpec}
_MAPPING_TYPES = ("model_type", "model_attributes_type", "dict_type")
_EXPECTED = {
    "list_type": "a list",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a text",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "finite_number": "a finite number",
}


def _branches(errors: list[dict], loc: tuple) -> set[str]:
    """The types of the union whose branch errors pydantic reported at ``loc``: scalar
    tags (``int``, ``str``, ...) and ``list`` for a ``list[...]`` branch."""

    def tag(p):
        if isinstance(p, str) and p.startswith("list["):
            return "list"
        if p in _BRANCH_TAGS:
            return p
        return None

    def base(lc):
        return tuple(p for p in lc if tag(p) is None)

    return {
        tag(p)
        for e in errors
        if base(e["loc"]) == base(loc)
        for p in e["loc"]
        if tag(p) is not None
    }


def raise_validation_error(
    exc: ValidationError,
    *,
    file: str | None,
    prefix: tuple = (),
    model: Any = None,
    root: str = "study",
) -> None:
    """Turn a pydantic error into one :class:`StudyError` naming the field, the value and what
    is allowed. ``prefix`` is the field path of ``model`` inside the study (e.g. the options
    model of a plug-in validated at ``("search", "options")``); ``root`` names the document
    (a study, a cluster profile) in messages about its top-level keys."""
    err = _pick_error(exc.errors())
    loc = prefix + tuple(err["loc"])
    path = _field_path(loc)
    if err["type"] == "extra_forbidden":
        parent = path.rsplit(".", 1)[0] if "." in path else root
        keys = _allowed_keys(model or Study, tuple(err["loc"]))
        raise StudyError(
            f"unknown key '{loc[-1]}' in {parent}{did_you_mean(loc[-1], keys.split(', '))}",
            file=file,
            field=path,
            allowed=keys,
        ) from None
    if err["type"] == "missing":
        raise StudyError("required field is missing", file=file, field=path) from None
    msg = pydantic_message(err["msg"])
    allowed = None if err["type"] == "literal_error" else _describe_allowed(err)
    branches = _branches(exc.errors(), err["loc"])
    if err["type"] in _EXPECTED:
        msg, allowed = f"expected {_EXPECTED[err['type']]}", None
    if err["type"] in _MAPPING_TYPES:
        keys = _allowed_keys(model or Study, (*err["loc"], ""))
        msg = "expected a mapping of settings" + (" (or true/false)" if "bool" in branches else "")
        allowed = f"keys {keys}" if keys else None
        if path == "output":
            msg = "expected a folder path, or a mapping of settings"
        elif path == "search.polish":
            msg = "expected true, false or a mapping of settings"
    if path == "objectives" and err["type"] == "too_short":
        msg = "at least one objective is needed"
    if (
        path.startswith("space.")
        and path.count(".") == 1
        and (_is_union_branch(err["loc"]) or err["type"].endswith("_type"))
    ):
        msg = (
            "expected a list of single values, a single value, or a mapping with 'range', "
            "'log', 'choices' or 'bundles'"
        )
        allowed = None
    elif _is_union_branch(err["loc"]):  # pydantic names one arbitrary branch of a union
        if branches and branches <= {"int", "float"}:
            msg, allowed = "expected a number", None
        elif branches == {"list", "str"}:
            msg, allowed = "expected a text or a list of texts", None
        elif branches == {"list"} and err["type"] in _EXPECTED:
            pass  # an item of the list branch: its own type's message
        else:
            msg, allowed = "expected a single value", "a number, a text, or true/false"
    raise StudyError(
        msg, file=file, field=path or None, value=err.get("input"), has_value=True, allowed=allowed
    ) from None


def validate_options(model: type[BaseModel], raw: Any, *, prefix: tuple) -> BaseModel:
    """A plug-in's options (``evaluator.options``, ``search.options``) validated by its own
    pydantic model; a key the model does not declare is refused whatever the model's
    ``extra`` setting (pydantic ignores one by default: a typo would silently do nothing),
    unless the model says ``extra="allow"``."""
    if isinstance(raw, dict) and model.model_config.get("extra") != "allow":
        known = {key for name, f in model.model_fields.items() for key in (name, f.alias) if key}
        unknown = [k for k in raw if k not in known]
        if unknown:
            path = ".".join(map(str, (*prefix, unknown[0])))
            raise StudyError(
                f"unknown key '{unknown[0]}' in {'.'.join(map(str, prefix))}"
                f"{did_you_mean(unknown[0], known)}",
                field=path,
                allowed=", ".join(model.model_fields) or "no options",
            )
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise_validation_error(exc, file=None, prefix=prefix, model=model)
        raise  # unreachable


def _parse_space(space: Any, file: str) -> Any:
    """Validate each ``space`` entry by its form, so errors name the entry and the right form."""
    if not isinstance(space, dict):
        return space
    parsed = {}
    for name, spec in space.items():
        field = f"space.{name}"
        if isinstance(spec, dict) and "bundles" in spec:
            parsed[name] = _parse_bundles(name, spec, file)
            continue
        if isinstance(spec, list) and not spec:
            raise StudyError("empty list of choices", file=file, field=field, value=spec)
        if isinstance(spec, dict):
            forms = [k for k in _SPEC_BY_KEY if k in spec]
            if len(forms) != 1:
                raise StudyError(
                    "a parameter is a list of choices, a single value, or a mapping with exactly "
                    "one of 'range' (with optional 'step'), 'log' (with 'base' or 'num'), "
                    "'choices' or 'bundles'",
                    file=file,
                    field=field,
                    value=spec,
                )
            cls = _SPEC_BY_KEY[forms[0]]
            try:
                spec = cls.model_validate(spec)
            except ValidationError as exc:
                raise_validation_error(exc, file=file, prefix=("space", name), model=cls)
        if isinstance(spec, list):
            values = spec
        elif isinstance(spec, ChoicesSpec):
            values = spec.choices
        else:
            values = [spec]
        for x in values:
            if isinstance(x, int | float) and not isinstance(x, bool) and not finite_number(x):
                raise StudyError("expected finite numbers", file=file, field=field, value=x)
        parsed[name] = spec
    return parsed


def _parse_bundles(name: str, spec: dict, file: str) -> BundlesSpec:
    """A bundle parameter's entry, ``{bundles: MAPPING or CATALOG, choices: [...]}``, read
    (the catalog from beside the study) and checked as far as the schema goes: named
    bundles, each a mapping of input names to single values, all setting the same inputs.
    Whether those are the evaluator's inputs, and their values allowed, :mod:`dse.checks`
    decides."""
    field = f"space.{name}"
    unknown = [k for k in spec if k not in ("bundles", "choices")]
    if unknown:
        raise StudyError(
            f"unknown key '{unknown[0]}' in {field}",
            file=file,
            field=f"{field}.{unknown[0]}",
            allowed="bundles, choices",
        )
    raw, catalog = spec["bundles"], ""
    if isinstance(raw, str):
        catalog, raw = _read_catalog(raw, file, field)
    where = catalog or file

    def at(bundle: str = "", key: str = "") -> str | None:
        tail = ".".join(p for p in (bundle, key) if p)
        if catalog:
            return tail or None
        return f"{field}.bundles" + (f".{tail}" if tail else "")

    if not isinstance(raw, dict):
        raise StudyError(
            "a catalog of bundles is a mapping of named bundles ({name: {input: value, ...}})"
            if catalog
            else "expected a mapping of named bundles ({name: {input: value, ...}}) or the "
            "path of a catalog file beside the study that holds one",
            file=where,
            field=at(),
            value=raw,
        )
    if not raw:
        raise StudyError("no bundles: at least one is needed", file=where, field=at(), value=raw)
    if len(raw) > MAX_BUNDLES:
        raise StudyError(f"{len(raw):,} bundles; at most {MAX_BUNDLES:,}", file=where, field=at())
    bundles: dict[str, dict[str, Scalar]] = {}
    first = None
    for bundle, inputs in raw.items():
        if not isinstance(bundle, str) or not _BUNDLE_NAME_RE.fullmatch(bundle):
            raise StudyError(
                "a bundle's name is a text of 1 to 64 letters, digits, '_', '-', '.' and '+', "
                "beginning with a letter or digit",
                file=where,
                field=at(),
                value=bundle,
            )
        if not isinstance(inputs, dict) or not inputs:
            raise StudyError(
                "a bundle is a mapping of at least one input to its value",
                file=where,
                field=at(bundle),
                value=inputs,
            )
        for key, value in inputs.items():
            if not isinstance(key, str):
                raise StudyError(
                    "an input's name is a text", file=where, field=at(bundle), value=key
                )
            if not isinstance(value, bool | int | float | str) or (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and not finite_number(value)
            ):
                raise StudyError(
                    "expected a single value",
                    file=where,
                    field=at(bundle, key),
                    value=value,
                    allowed="a finite number, a text, or true/false",
                )
        if first is None:
            first = (bundle, list(inputs))
        elif set(inputs) != set(first[1]):
            extra = sorted(set(inputs) - set(first[1]))
            lacking = sorted(set(first[1]) - set(inputs))
            said = (
                f"sets {', '.join(extra)}, which bundle '{first[0]}' does not"
                if extra
                else f"does not set {', '.join(lacking)}, which bundle '{first[0]}' sets"
            )
            raise StudyError(
                f"bundle '{bundle}' {said}: every bundle sets the same inputs (write the "
                "evaluator's default where a bundle keeps it)",
                file=where,
                field=at(bundle),
                allowed=", ".join(first[1]),
            )
        bundles[bundle] = {k: inputs[k] for k in first[1]}  # one order of inputs
    chosen = spec.get("choices")
    if chosen is not None:
        if not isinstance(chosen, list) or not chosen:
            raise StudyError(
                "expected a list of bundle names (at least one)",
                file=file,
                field=f"{field}.choices",
                value=chosen,
            )
        for i, pick in enumerate(chosen):
            if not isinstance(pick, str) or pick not in bundles:
                raise StudyError(
                    f"no bundle of that name{did_you_mean(pick, bundles)}",
                    file=file,
                    field=f"{field}.choices[{i}]",
                    value=pick,
                    allowed=", ".join(bundles),
                )
            if chosen.index(pick) != i:
                raise StudyError(
                    f"items {chosen.index(pick)} and {i} name the same bundle",
                    file=file,
                    field=f"{field}.choices",
                    value=pick,
                    allowed="each bundle once",
                )
        bundles = {pick: bundles[pick] for pick in chosen}
    return BundlesSpec(bundles=bundles, catalog=catalog)


def _read_catalog(path: str, file: str, field: str) -> tuple[str, Any]:
    """(the catalog's path as messages name it, its document): a YAML file of bundles
    beside the study (relative to the study's folder; the working folder for a study given
    as a mapping), read as every file a study names is (dse.files.read_inside)."""
    real = not (file.startswith("<") and file.endswith(">"))
    folder = Path(file).parent if real else Path.cwd()
    shown = str(folder / path) if real else path
    try:
        data = read_inside(folder, path, limit_bytes=CATALOG_LIMIT_BYTES)
    except (ValueError, OSError) as exc:
        said = (
            f"catalog of bundles {path!r} {exc}"
            if isinstance(exc, ValueError)
            else f"cannot read the catalog of bundles: {exc.strerror or exc}"
        )
        raise StudyError(
            said,
            file=file,
            field=f"{field}.bundles",
            value=path,
            allowed="a YAML file in the study's folder or below it, named relative to it",
        ) from None
    try:
        return shown, load_yaml(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise StudyError("catalog of bundles is not UTF-8 text", file=shown) from None
    except yaml.YAMLError as exc:
        raise StudyError(f"not valid YAML{yaml_problem(exc)}", file=shown) from None


def parse_study(data: Any, *, file: str = "<study>", text: str = "") -> Study:
    """Validate a parsed YAML document into a Study (schema only; see :func:`check_study`)."""
    if not isinstance(data, dict):
        raise StudyError("a study must be a YAML mapping of sections", file=file)
    data = {**data, "space": _parse_space(data["space"], file)} if "space" in data else data
    try:
        return Study.model_validate({**data, "source_text": text, "source_path": file})
    except ValidationError as exc:
        raise_validation_error(exc, file=file)
        raise  # unreachable


def _allowed_keys(model: Any, loc: tuple) -> str:
    """The keys allowed in the mapping at ``loc[:-1]`` below ``model``."""
    for p in loc[:-1]:
        if isinstance(p, int):
            continue  # an item of a list: the model stays the list's item type
        fields = getattr(model, "model_fields", {})
        ann = fields[p].annotation if p in fields else None
        if typing.get_origin(ann) is list:
            ann = typing.get_args(ann)[0]
        if typing.get_origin(ann) in (typing.Union, types.UnionType):  # an optional section
            ann = next(
                (
                    a
                    for a in typing.get_args(ann)
                    if isinstance(a, type) and issubclass(a, BaseModel)
                ),
                None,
            )
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if model is None:
            return ""
    return ", ".join(k for k in model.model_fields if k not in ("source_text", "source_path"))


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what a YAML syntax error is, in one line: `` at line 3, column 5: ...``."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}: {problem}"


def load_study(path: str | Path) -> Study:
    """Read, parse and validate a study file against the schema.

    The cross-check against the evaluator, the search driver and the execution settings is
    :func:`dse.checks.plan` (``dse.load_study`` does both)."""
    p = Path(path)
    file = str(path)
    try:
        text = read_bounded(p, limit_bytes=STUDY_LIMIT_BYTES)
    except FileNotFoundError:
        raise StudyError("study file not found", file=file) from None
    except UnicodeDecodeError as exc:
        raise StudyError(f"cannot read study file: {exc}", file=file) from None
    except ValueError as exc:  # too large
        raise StudyError(f"study file {exc}", file=file) from None
    except OSError as exc:
        raise StudyError(f"cannot read study file: {exc.strerror or exc}", file=file) from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise StudyError(f"not valid YAML{yaml_problem(exc)}", file=file) from None
    return parse_study(data, file=file, text=text)
