"""The design space: named parameters, their values, and candidate tables.

A candidate is one row of a :class:`pandas.DataFrame` whose columns are the space's
parameter names. Discrete parameters have an ordered list of values; a search may work
on their integer indices. Continuous parameters are real intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from dse.errors import StudyError
from dse.study import BundlesSpec, ChoicesSpec, LogSpec, RangeSpec, Study

Kind = Literal["categorical", "integer", "real"]
MAX_VALUES = 1_000_000  # values of one parameter; a finer grid is a typo, or should be continuous


def _check_count(name: str, count: float) -> None:
    if not count <= MAX_VALUES:  # also inf and NaN (a step of 1e-320)
        raise StudyError(
            f"this grid has {count:.3g} values; at most {MAX_VALUES:,} per parameter",
            field=f"space.{name}",
            allowed="a coarser step or base, a list, or for a real-valued parameter a "
            "continuous range (no step)",
        )


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _round(x: float) -> float:
    return float(f"{x:.12g}")


@dataclass(frozen=True)
class Parameter:
    """One design parameter: a discrete ordered list of ``values`` or a real interval."""

    name: str
    kind: Kind
    values: tuple | None = None
    low: float | None = None
    high: float | None = None

    @property
    def size(self) -> float:
        return len(self.values) if self.values is not None else math.inf

    @property
    def ordered(self) -> bool:
        """Numeric values have an order a search can exploit; categories do not."""
        return self.kind != "categorical"


def expand(name: str, spec: Any) -> Parameter:
    """Turn one study entry of ``space`` into a :class:`Parameter`."""
    if isinstance(spec, BundlesSpec):  # its values are the bundles' names
        return Parameter(name, "categorical", tuple(spec.names))
    if isinstance(spec, ChoicesSpec):
        spec = spec.choices
    if isinstance(spec, RangeSpec):
        low, high = spec.range
        step = spec.step
        if step is None and _is_int(low) and _is_int(high):
            step = 1
        if step is None:
            return Parameter(name, "real", None, float(low), float(high))
        count = (high - low) / step + 1
        _check_count(name, count)
        count = int(math.floor((high - low) / step + 1e-9)) + 1
        if _is_int(low) and _is_int(high) and _is_int(step):
            return Parameter(name, "integer", tuple(range(int(low), int(high) + 1, int(step))))
        return Parameter(name, "real", tuple(_round(low + k * step) for k in range(count)))
    if isinstance(spec, LogSpec):
        low, high = spec.log
        _check_count(
            name, math.log(high / low) / math.log(spec.base) + 1 if spec.base else spec.num
        )
        if spec.base is not None:
            vals, v = [], float(low)
            while v <= high * (1 + 1e-9):
                vals.append(v)
                v *= spec.base
        else:
            vals = list(np.geomspace(low, high, spec.num))
        if _is_int(low) and _is_int(high) and (spec.base is None or _is_int(spec.base)):
            ints = list(dict.fromkeys(int(round(v)) for v in vals))
            return Parameter(name, "integer", tuple(ints))
        return Parameter(name, "real", tuple(_round(v) for v in vals))
    values = spec if isinstance(spec, list) else [spec]
    values = list({(type(v) is bool, v): v for v in values}.values())  # true is not 1 here
    if not values:
        raise StudyError("empty list of choices", field=f"space.{name}")
    if all(_is_int(v) for v in values):
        return Parameter(name, "integer", tuple(int(v) for v in values))
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return Parameter(name, "real", tuple(float(v) for v in values))
    return Parameter(name, "categorical", tuple(values))


def short_of_its_end(spec: Any, parameter: Parameter) -> str | None:
    """What a grid's last value is when its steps (``range`` and ``step``) or powers (``log``
    and ``base``) do not reach the end the study wrote (None when they do, or for other
    entries): ``dse validate`` says so, as the end is left out."""
    if isinstance(spec, RangeSpec) and spec.step is not None:
        end, how = spec.range[1], f"in steps of {spec.step:g} from {spec.range[0]:g}"
    elif isinstance(spec, LogSpec) and spec.base is not None:
        end, how = spec.log[1], f"in powers of {spec.base:g} from {spec.log[0]:g}"
    else:
        return None
    last = parameter.values[-1] if parameter.values else None
    if last is None or math.isclose(float(last), float(end), rel_tol=1e-9, abs_tol=1e-12):
        return None
    return f"the grid {how} ends at {last:g}, short of {end:g}"


@dataclass
class Space:
    """The searchable parameters plus the fixed values every candidate shares.

    ``bundles``: for each bundle parameter (a categorical parameter whose values name
    bundles of inputs, :class:`~dse.study.BundlesSpec`), each bundle's inputs; the
    evaluator's table (:meth:`with_fixed`) has them beside the bundle's name."""

    parameters: list[Parameter]
    fixed: dict[str, Any] = field(default_factory=dict)
    bundles: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def from_study(cls, study: Study) -> Space:
        return cls(
            [expand(n, s) for n, s in study.space.items()],
            dict(study.fixed_values),
            {n: dict(s.bundles) for n, s in study.bundles.items()},
        )

    # -- shape ---------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    @property
    def is_discrete(self) -> bool:
        return all(p.values is not None for p in self.parameters)

    @property
    def size(self) -> float:
        """Number of distinct candidates (``inf`` when a parameter is continuous)."""
        return math.prod(p.size for p in self.parameters)

    @property
    def radices(self) -> list[int]:
        return [len(p.values) for p in self.parameters]  # type: ignore[arg-type]

    # -- building candidate tables -----------------------------------------------------
    def from_indices(self, idx: np.ndarray) -> pd.DataFrame:
        """Candidates from an ``(n, p)`` array of value indices (discrete parameters only)."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1, len(self.parameters))
        # each column is a new array (``take``): the table holds them as they are, not
        # copied again into one block per type
        return pd.DataFrame(
            {p.name: self._values(p).take(idx[:, j]) for j, p in enumerate(self.parameters)},
            copy=False,
        )

    def indices_of(self, flat: np.ndarray) -> np.ndarray:
        """Mixed-radix decode of flat grid positions ``0 .. size-1`` into value indices, an
        ``(n, p)`` array stored column by column (each parameter's indices contiguous: a
        candidate column is picked with them, and writing them is 4x faster than into rows)."""
        flat = np.asarray(flat, dtype=np.int64).ravel()
        out = np.empty((len(self.parameters), flat.size), dtype=np.int64)
        rest = flat.copy()
        for j, r in reversed(list(enumerate(self.radices))):
            quotient = rest // r
            np.subtract(rest, quotient * r, out=out[j])  # rest % r, without a second division
            rest = quotient
        return out.T

    @property
    def strides(self) -> np.ndarray:
        """Weight of each parameter's value index in a grid position (the last varies fastest)."""
        r = self.radices
        return np.array([math.prod(r[j + 1 :]) for j in range(len(r))], dtype=np.int64)

    @property
    def indexable(self) -> bool:
        """Discrete, with grid positions that fit a 64-bit integer (keys, neighbourhoods)."""
        return self.is_discrete and self.size < 2**62

    def flat_index(self, idx: np.ndarray) -> np.ndarray:
        """Grid positions of rows of value indices: the inverse of :meth:`indices_of`."""
        return np.asarray(idx, dtype=np.int64).reshape(-1, len(self.parameters)) @ self.strides

    def moves(self, order: int) -> np.ndarray:
        """Neighbourhood moves as ``(m, p)`` offsets of value indices: ``order`` 1 changes one
        parameter (one step along an ordered one, any other value of a categorical one),
        ``order`` 2 two parameters at once (every pair of such single moves)."""
        singles = []
        for j, p in enumerate(self.parameters):
            steps = range(1, len(p.values)) if not p.ordered else (-1, 1)
            for d in steps:
                if len(p.values) > 1:
                    move = np.zeros(len(self.parameters), np.int64)
                    move[j] = d
                    singles.append(move)
        if order == 1:
            return np.array(singles, np.int64).reshape(-1, len(self.parameters))
        pairs = [
            a + b
            for i, a in enumerate(singles)
            for b in singles[i + 1 :]
            if not (np.flatnonzero(a) == np.flatnonzero(b)).all()
        ]
        return np.array(pairs, np.int64).reshape(-1, len(self.parameters))

    def neighbours(self, idx: np.ndarray, moves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grid positions ``(n, m)`` of ``moves`` applied to each row of value indices, and
        whether each stays in the space (categorical indices wrap around; ordered ones do not)."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1, len(self.parameters))
        radices = np.array(self.radices, np.int64)
        wrap = np.array([not p.ordered for p in self.parameters])
        moved = idx[:, None, :] + moves[None, :, :]
        moved[..., wrap] %= radices[wrap]
        valid = ((moved >= 0) & (moved < radices)).all(axis=2)
        return np.where(valid, moved @ self.strides, -1), valid

    def enumerate(self, chunk_size: int = 10_000, start: int = 0) -> Iterator[pd.DataFrame]:
        """Every candidate of a discrete space, in grid order, ``chunk_size`` at a time."""
        if not self.is_discrete:
            raise StudyError("only a discrete space can be enumerated")
        total = int(self.size)
        for lo in range(start, total, chunk_size):
            yield self.from_indices(self.indices_of(np.arange(lo, min(lo + chunk_size, total))))

    def sample(self, rng: np.random.Generator, n: int) -> pd.DataFrame:
        """``n`` candidates drawn uniformly (independently per parameter)."""
        cols = {}
        for p in self.parameters:
            if p.values is None:
                cols[p.name] = rng.uniform(p.low, p.high, n)
            else:
                cols[p.name] = self._values(p).take(rng.integers(0, len(p.values), n))
        return pd.DataFrame(cols)

    # -- candidate keys --------------------------------------------------------------------
    def value_indices(self, candidates: pd.DataFrame) -> np.ndarray:
        """``(n, p)`` value index of every discrete parameter (-1 for a continuous one, and
        where a value is not one of the parameter's)."""
        out = np.full(
            (len(self.parameters), len(candidates)), -1, dtype=np.int64
        )  # column by column
        for j, p in enumerate(self.parameters):
            if (
                p.values is not None
            ):  # each distinct value looked up once (hashing text per row: 3x slower)
                codes, uniques = pd.factorize(
                    candidates[p.name], use_na_sentinel=False
                )  # NaN may be a value
                self._index(p).get_indexer(pd.Index(uniques)).take(codes, out=out[j])
        return out.T

    def keys(self, candidates: pd.DataFrame) -> np.ndarray:
        """One ``int64`` key per row, equal for equal candidates, computed column by column.

        In a discrete space of fewer than 2**62 candidates the key is the candidate's flat
        position in the grid (mixed radix over the value indices): exact, and the order of
        enumeration. With a continuous parameter (or a larger grid) it is a 64-bit hash of
        the value indices and the real values' bits (splitmix64 mixing): distinct candidates
        collide with probability about n**2 / 2**65 (1e-9 at 10**5 evaluations).
        """
        idx = self.value_indices(candidates)
        discrete = np.array([p.values is not None for p in self.parameters])
        unknown = (idx < 0) & discrete  # a value that is not one of a discrete parameter's
        if unknown.any():
            j = int(np.flatnonzero(unknown.any(axis=0))[0])
            p, row = self.parameters[j], int(np.flatnonzero(unknown[:, j])[0])
            shown = ", ".join(map(str, p.values[:10])) + (", ..." if len(p.values) > 10 else "")
            raise ValueError(
                f"{p.name} = {candidates[p.name].iloc[[row]].tolist()[0]!r}, not one of the space's "
                f"values ({shown})"
            )
        if self.indexable:
            return self.flat_index(idx)
        h = np.full(len(candidates), 0x9E3779B97F4A7C15, dtype=np.uint64)
        for j, p in enumerate(self.parameters):
            col = (
                idx[:, j].astype(np.uint64)
                if p.values is not None
                else np.ascontiguousarray(candidates[p.name].to_numpy(dtype=np.float64)).view(
                    np.uint64
                )
            )
            h = _mix64(h ^ col)
        return h.view(np.int64)

    def __getstate__(self) -> dict:
        """Pickled (to the workers, with every chunk of grid positions) without the lookup
        caches: a worker rebuilds what it uses, and a large parameter would grow each chunk."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_indexes", "_value_columns")}

    def _values(self, p: Parameter) -> np.ndarray | pd.api.extensions.ExtensionArray:
        """A discrete parameter's values as one column, converted once: a candidate column
        is picked from it (``take``). Text is in the column type pandas gives text (Arrow
        strings in pandas 3), so picking rows copies no Python object."""
        cache = self.__dict__.setdefault("_value_columns", {})
        if p.name not in cache:
            col = _column(p, np.asarray(p.values, dtype=object))
            cache[p.name] = col if col.dtype != object else pd.Series(col).array
        return cache[p.name]

    def _index(self, p: Parameter) -> pd.Index:
        cache = self.__dict__.setdefault("_indexes", {})
        if p.name not in cache:
            cache[p.name] = pd.Index(self._values(p))
        return cache[p.name]

    def with_fixed(self, candidates: pd.DataFrame, *, copy: bool = True) -> pd.DataFrame:
        """The full evaluator input: candidate columns, the inputs of each row's bundles
        (beside the bundle's name, a column the evaluator does not read) and the fixed
        values. ``copy=False``: the columns are added to ``candidates`` itself (a table the
        caller made for this and holds no other reference to)."""
        out = candidates.copy() if copy else candidates
        for name, table in self.bundles.items():
            if name in out.columns:
                for key, column in bundle_columns(table, out[name]).items():
                    out[key] = column
        for k, v in self.fixed.items():
            if k not in out.columns:
                out[k] = v
        return out

    def input_values(self) -> dict[str, tuple]:
        """Each evaluator input's values in this space: a discrete parameter's, a bundle's
        inputs' and the fixed ones (what an evaluator's ``input_files`` is asked about)."""
        values = {
            p.name: tuple(p.values)
            for p in self.parameters
            if p.values is not None and p.name not in self.bundles
        }
        for table in self.bundles.values():
            for bundle in table.values():
                for key, value in bundle.items():
                    values[key] = (*values.get(key, ()), value)
        values.update({name: (value,) for name, value in self.fixed.items()})
        return values


def bundle_columns(table: dict[str, dict[str, Any]], names: pd.Series) -> dict[str, np.ndarray]:
    """The input columns of rows whose bundle is ``names`` (bundle names of ``table``), each
    of one type (integers, floats, booleans or texts, as the bundles' values are)."""
    codes = pd.Index(list(table)).get_indexer(pd.Index(names))
    if (codes < 0).any():
        bad = names.iloc[int(np.flatnonzero(codes < 0)[0])]
        raise ValueError(f"{bad!r} is not one of the bundles {', '.join(table)}")
    keys = next(iter(table.values()))
    columns = {}
    for key in keys:
        values = [bundle[key] for bundle in table.values()]
        kind = Parameter(key, "categorical", tuple(values))
        if all(_is_int(v) for v in values):
            kind = Parameter(key, "integer", tuple(values))
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            kind = Parameter(key, "real", tuple(values))
        columns[key] = _column(kind, np.asarray(values, dtype=object)).take(codes)
    return columns


def _column(p: Parameter, values: np.ndarray) -> np.ndarray:
    if p.kind == "integer":
        return values.astype(np.int64)
    if p.kind == "real":
        return values.astype(np.float64)
    if all(isinstance(v, bool) for v in p.values):  # type: ignore[union-attr]
        return values.astype(bool)
    return values.astype(str).astype(object)


def candidate_keys(candidates: pd.DataFrame, names: list[str]) -> list[str]:
    """A readable text label per row (``0.3|0|a``), identical for equal candidates.

    For people and tests; the store identifies candidates by :meth:`Space.keys` (integers)."""
    cols = [candidates[n].tolist() for n in names]
    return ["|".join(_key_part(v) for v in row) for row in zip(*cols, strict=True)]


def _key_part(v: Any) -> str:
    if isinstance(v, bool | np.bool_):
        return "T" if v else "F"
    if isinstance(v, float | np.floating):
        f = float(v)
        return str(int(f)) if f.is_integer() else repr(f)
    return str(v)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (Steele, Lea and Flood 2014): a bijective 64-bit mix."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
