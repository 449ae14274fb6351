"""From evaluations to the Pareto set: objective and constraint matrices, feasibility,
non-dominated sorting and hypervolume (moocore). Pure functions of tables; no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dse.study import Study

FAILED_VIOLATION = 1e30  # constraint value given to rows whose metrics are missing


def objective_matrix(table: pd.DataFrame, study: Study) -> np.ndarray:
    """``(n, m)`` objectives, every column to be minimised (maximised metrics negated)."""
    cols = []
    for obj in study.objectives:
        v = (
            pd.to_numeric(table[obj.metric], errors="coerce").to_numpy(dtype=float)
            if obj.metric in table
            else np.full(len(table), np.nan)
        )
        cols.append(-v if obj.direction == "maximize" else v)
    return np.column_stack(cols) if cols else np.empty((len(table), 0))


def violation_matrix(table: pd.DataFrame, study: Study) -> np.ndarray:
    """``(n, k+1)`` constraint values, G <= 0 feasible: one column per study constraint and
    a last one that is 1 where the evaluator found the candidate infeasible or it failed."""
    n = len(table)
    cols = []
    for con in study.constraints:
        v = (
            pd.to_numeric(table[con.metric], errors="coerce").to_numpy(dtype=float)
            if con.metric in table
            else np.full(n, np.nan)
        )
        g = v - con.limit if con.op in ("<=", "<") else con.limit - v
        if con.op in ("<", ">"):
            g = np.where(g == 0, 1e-12, g)
        cols.append(np.where(np.isfinite(g), g, FAILED_VIOLATION))
    ok = (
        table["feasible"].fillna(False).to_numpy(dtype=bool, copy=True)
        if "feasible" in table
        else np.zeros(n, bool)
    )
    if "status" in table:
        ok = ok & (table["status"] == "ok").to_numpy(dtype=bool)
    cols.append(np.where(ok, 0.0, 1.0))
    return np.column_stack(cols)


def feasible_mask(table: pd.DataFrame, study: Study) -> np.ndarray:
    """Rows that the evaluator found feasible, that meet every constraint, with finite objectives."""
    if len(table) == 0:
        return np.zeros(0, bool)
    return _feasible(violation_matrix(table, study), objective_matrix(table, study))[1]


def _feasible(g: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the rows of the violation matrix ``g`` within every constraint, those of them whose
    objectives ``f`` are all finite: the feasible ones)."""
    within = _each_row(g <= 0)
    return within, within & _each_row(np.isfinite(f))


def ruled_out(table: pd.DataFrame, study: Study) -> dict[str, int]:
    """What ruled candidates out: ``{reason: count}``. An evaluator-infeasible (or failed)
    candidate counts under its reason; an evaluator-feasible one under every study
    constraint it breaks; one that meets them all under each objective it has no finite
    value of (NaN or infinite: an evaluator that could not compute it)."""
    if len(table) == 0:
        return {}
    return _ruled_out(table, study, violation_matrix(table, study))


def _ruled_out(
    table: pd.DataFrame,
    study: Study,
    g: np.ndarray,
    f: np.ndarray | None = None,
    among: np.ndarray | None = None,
    within: np.ndarray | None = None,
) -> dict[str, int]:
    """:func:`ruled_out` of the rows ``among`` (a mask; None: every row) of ``table``, from
    its :func:`violation_matrix` ``g``, (when given) :func:`objective_matrix` ``f`` and the
    rows of ``g`` within every constraint (``within``): the
    same counts in the same order as ``ruled_out(table[among])``, without copying the table
    (a chunk's summary on a worker: its rows not feasible, of 131,072)."""
    counts: dict[str, int] = {}
    evaluator_bad = g[:, -1] > 0
    bad = evaluator_bad if among is None else evaluator_bad & among
    if bad.any():
        rows = np.flatnonzero(bad)  # only these rows' texts are read, in the table's order
        for label, n in _reason_counts(table, rows):
            counts[f"evaluator: {label}"] = n
    rest = ~evaluator_bad if among is None else ~evaluator_bad & among
    for j, con in enumerate(study.constraints):
        n = int(np.count_nonzero((g[:, j] > 0) & rest))
        if n:
            counts[f"constraint {con}"] = n
    meets = _each_row(g <= 0) if within is None else within.copy()
    if among is not None:
        meets &= among
    if meets.any():
        f = objective_matrix(table, study) if f is None else f
        for j, obj in enumerate(study.objectives):
            n = int(np.count_nonzero(meets & ~np.isfinite(f[:, j])))
            if n:
                counts[f"objective {obj.metric}: no finite value"] = n
    return counts


def _reason_counts(table: pd.DataFrame, rows: np.ndarray) -> list[tuple[str, int]]:
    """How many of ``rows`` have each evaluator verdict, in the order each first appears:
    a failed evaluation (``status`` not ``ok``) by its message (``evaluation failed: ...``),
    else its ``reason`` as text (``infeasible`` where it is empty); a missing reason is not
    counted (as ``value_counts`` leaves it out). Each distinct text is handled once, not each
    row's (a chunk's 15,000 rows not feasible: 7 against 2 ms)."""
    n = len(rows)
    if "reason" in table:
        codes, uniques = pd.factorize(table["reason"].iloc[rows], use_na_sentinel=False)
        texts = list(pd.Series(uniques, dtype=uniques.dtype).astype(str).to_numpy())
    else:
        codes, texts = np.zeros(n, np.intp), [""]
    labels = ["infeasible" if isinstance(t, str) and t == "" else t for t in texts]
    if "status" in table and "error" in table:
        failed = (table["status"].iloc[rows] != "ok").to_numpy()
        if failed.any():
            errors, messages = pd.factorize(table["error"].iloc[rows], use_na_sentinel=False)
            messages = pd.Series(messages, dtype=messages.dtype).astype(str).to_numpy()
            codes = np.where(failed, len(labels) + errors, codes)
            labels += [f"evaluation failed: {m}" for m in messages]
    seen, first = np.unique(codes, return_index=True)
    tally = np.bincount(codes, minlength=len(labels))
    out: dict[str, int] = {}
    for code in seen[np.argsort(first, kind="stable")]:
        label = labels[code]
        if not isinstance(label, str) and pd.isna(label):
            continue
        out[label] = out.get(label, 0) + int(tally[code])
    return list(out.items())


def infeasibility_summary(table: pd.DataFrame, study: Study) -> list[tuple[str, int]]:
    """:func:`ruled_out` as ``(reason, count)`` pairs, most frequent first."""
    return sorted(ruled_out(table, study).items(), key=lambda kv: -kv[1])


@dataclass(frozen=True)
class ChunkSummary:
    """What the running front needs of a chunk of evaluations (computed where the chunk was
    evaluated): its tallies, what ruled its candidates out, which rows are feasible (``ok``),
    and its contenders, the rows non-dominated within the chunk (no other row can be on the
    front of all evaluations), with their objective vectors ``f`` (minimised)."""

    evaluations: int
    feasible: int
    failed: int
    ruled_out: dict[str, int]
    ok: np.ndarray  # (a chunk's summary as a worker sends it back: empty, not needed)
    contenders: np.ndarray  # row positions in the chunk
    f: np.ndarray


def tallies(table: pd.DataFrame, study: Study) -> tuple[np.ndarray, int, dict[str, int]]:
    """``(ok, failed, ruled out)`` of a table with the objective and constraint metrics,
    ``feasible``, ``status``, ``reason`` and ``error``: which rows are feasible and within
    the constraints, how many failed, and what ruled the others out (:func:`ruled_out`)."""
    return _tallies(table, study)[:3]


def _tallies(
    table: pd.DataFrame, study: Study
) -> tuple[np.ndarray, int, dict[str, int], np.ndarray]:
    """:func:`tallies` and the table's :func:`objective_matrix`, each matrix made once."""
    failed = int((table["status"] != "ok").sum()) if "status" in table else 0
    f = objective_matrix(table, study)
    if len(table) == 0:
        return np.zeros(0, bool), failed, {}, f
    g = violation_matrix(table, study)
    within, ok = _feasible(g, f)
    return ok, failed, _ruled_out(table, study, g, f, ~ok, within) if not ok.all() else {}, f


def _each_row(flags: np.ndarray) -> np.ndarray:
    """``flags.all(axis=1)`` of an ``(n, k)`` array of a few columns, a column at a time
    (numpy's reduction along rows of 2 to 4 values: 5-10x slower)."""
    out = np.ones(len(flags), bool)
    for j in range(flags.shape[1]):
        out &= flags[:, j]
    return out


def summarize(table: pd.DataFrame, study: Study) -> ChunkSummary:
    """The :class:`ChunkSummary` of a table with the objective and constraint metrics,
    ``feasible``, ``status``, ``reason`` and ``error``."""
    ok, failed, counts, f = _tallies(table, study)
    rows = np.flatnonzero(ok)
    f = f[ok]
    if len(rows):
        keep = nondominated(f)
        rows, f = rows[keep], f[keep]
    return ChunkSummary(len(table), int(ok.sum()), failed, counts, ok, rows, f)


#: the fewest points :func:`nondominated` screens with pivots before moocore's test
SCREENED = 512


def nondominated(f: np.ndarray) -> np.ndarray:
    """``moocore.is_nondominated(f, keep_weakly=True)`` of finite points ``f`` (rows,
    minimised), faster on many points: a few non-dominated pivots (the best point of each
    objective and of a few weighted sums of the objectives scaled to [0, 1]) first remove,
    in vectorised passes, the points they dominate (nearly all of a chunk's: of 116,122
    feasible points of two objectives, 50 are left; 1.8 ms in all against 9.8 ms in moocore
    alone), and moocore tests the rest. The same mask: a point a pivot dominates is dominated, and whatever dominated a
    removed point dominates the points it dominated, so the removed points change no other
    point's verdict; equal points (weakly non-dominated) are kept alike."""
    import moocore

    n, m = f.shape
    if n < SCREENED or m < 2:
        return moocore.is_nondominated(f, keep_weakly=True)
    # a column at a time: numpy's reductions and comparisons along rows of 2 to 4 values
    # are 5-10x slower than along a contiguous column
    cols = [np.ascontiguousarray(f[:, j]) for j in range(m)]
    scaled = []
    for c in cols:
        low, high = c.min(), c.max()
        scaled.append((c - low) / (high - low if high > low else 1.0))
    pivots = {int(np.argmin(c)) for c in cols}
    total = sum(scaled)
    pivots.add(int(np.argmin(total)))  # equal weights
    for j in range(m):  # leaning towards each objective
        pivots.add(int(np.argmin(total + m * scaled[j])))
    alive = np.arange(n)
    for p in sorted(pivots):
        rest = cols if len(alive) == n else [c[alive] for c in cols]
        no_worse = np.ones(len(alive), bool)
        better = np.zeros(len(alive), bool)
        for c, r in zip(cols, rest, strict=True):
            no_worse &= r >= c[p]
            better |= r > c[p]
        alive = alive[~(no_worse & better)]
    keep = np.zeros(n, bool)
    keep[alive[moocore.is_nondominated(f[alive], keep_weakly=True)]] = True
    return keep


class RunningFront:
    """The Pareto set of everything evaluated so far, updated chunk by chunk, with the tallies.

    Weak non-dominance is kept incrementally: a point leaves the set only when a point
    that strictly dominates it arrives, and whatever dominated a discarded point also
    dominates the points it discarded, so the set after the last chunk is exactly the front
    of all evaluations (their feasible, weakly non-dominated rows: candidates with identical
    objective vectors are all kept, so a user sees every layout that reaches a point of the
    front), without holding them. For the same reason a chunk needs to offer only its own
    non-dominated rows (:func:`summarize`).

    A fold touches objective vectors only: the full rows that join are kept as they came
    (Arrow tables from the workers, or DataFrames) with a flag per joined row that a later
    fold clears, and :attr:`rows` is made from them when it is read (the end of a run), not
    by a pandas conversion and concatenation per chunk.
    """

    def __init__(self, study: Study) -> None:
        self.study = study
        self.f = np.empty((0, len(study.objectives)))
        self.evaluations = self.feasible = self.failed = 0
        self.ruled_out: dict[str, int] = {}
        self._parts: list = []  # the full rows that joined, in order (Arrow tables or DataFrames)
        self._alive = np.zeros(0, bool)  # per joined row: still on the front (rows of self.f)
        self._rows: pd.DataFrame | None = pd.DataFrame()  # the alive rows, made on reading

    @property
    def rows(self) -> pd.DataFrame:
        """The front's full rows, in the order they joined."""
        if self._rows is None:
            self._rows = _alive_rows(self._parts, self._alive)
            self._parts, self._alive = [self._rows], np.ones(len(self._rows), bool)
        return self._rows

    @rows.setter
    def rows(self, table: pd.DataFrame) -> None:
        """Replace the front's rows (one per row of :attr:`f`, in that order)."""
        self._rows = table
        self._parts, self._alive = [table], np.ones(len(table), bool)

    def fold(self, chunk: ChunkSummary, rows: Callable[[np.ndarray], object]) -> np.ndarray:
        """Fold a chunk in; returns which of its contenders joined the front. ``rows(mask)``
        gives the full rows of the masked contenders (an Arrow table or a DataFrame; the
        front keeps them as they are)."""
        import moocore

        self.evaluations += chunk.evaluations
        self.feasible += chunk.feasible
        self.failed += chunk.failed
        for reason, count in chunk.ruled_out.items():
            self.ruled_out[reason] = self.ruled_out.get(reason, 0) + count
        if len(chunk.contenders) == 0:
            return np.zeros(0, bool)
        nd = moocore.is_nondominated(np.vstack([self.f, chunk.f]), keep_weakly=True)
        old, new = nd[: len(self.f)], nd[len(self.f) :]
        if not old.all():
            self._alive[np.flatnonzero(self._alive)[~old]] = False
            self.f = self.f[old]
            self._rows = None
        if new.any():
            joining = rows(new)
            self._parts.append(joining)
            self._alive = np.concatenate([self._alive, np.ones(len(joining), bool)])
            self.f = np.vstack([self.f, chunk.f[new]])
            self._rows = None
        if self._rows is None and len(self._parts) > 64:  # bounded: what left is let go
            self.rows  # noqa: B018 - made now
        return new

    def update(
        self, table: pd.DataFrame, rows: Callable[[np.ndarray], object] | None = None
    ) -> np.ndarray:
        """Fold ``table``'s rows in (see :func:`summarize` for its columns); returns the mask
        of its rows on the front now. The front keeps the rows, or ``rows(mask)``."""
        chunk = summarize(table, self.study)

        def full(joined: np.ndarray) -> pd.DataFrame:
            mask = np.zeros(len(table), bool)
            mask[chunk.contenders[joined]] = True
            return table[mask] if rows is None else rows(mask)

        on_front = np.zeros(len(table), bool)
        on_front[chunk.contenders[self.fold(chunk, full)]] = True
        return on_front

    def summary(self) -> list[tuple[str, int]]:
        """What ruled candidates out so far, most frequent first."""
        return sorted(self.ruled_out.items(), key=lambda kv: -kv[1])

    def sorted_rows(self) -> pd.DataFrame:
        """The front, by the first objective (ties in the order evaluated)."""
        first = self.study.objectives[0].metric
        rows = self.rows
        if len(rows) == 0 or first not in rows:
            return rows
        return rows.sort_values(first, kind="stable").reset_index(drop=True)


def _alive_rows(parts: list, alive: np.ndarray) -> pd.DataFrame:
    """The rows of ``parts`` (Arrow tables or DataFrames, one after the other) that are
    ``alive``, as one DataFrame: Arrow parts are filtered and converted together (one pandas
    conversion), each DataFrame part filtered as it is."""
    import pyarrow as pa

    frames, tables, at = [], [], 0
    for part in parts:
        n = part.num_rows if isinstance(part, pa.Table) else len(part)
        keep = alive[at : at + n]
        at += n
        if not keep.any():
            continue
        if isinstance(part, pa.Table):
            tables.append(part if keep.all() else part.filter(pa.array(keep)))
            continue
        if tables:  # in joined order: the Arrow rows before this frame
            frames.append(pa.concat_tables(tables, promote_options="permissive").to_pandas())
            tables = []
        frames.append(part if keep.all() else part[keep])
    if tables:
        frames.append(pa.concat_tables(tables, promote_options="permissive").to_pandas())
    frames = [f for f in frames if len(f.columns)]
    if not frames:
        return pd.DataFrame()
    return (frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)).reset_index(
        drop=True
    )


#: up to this many objectives the hypervolume is exact; beyond, a deterministic approximation
EXACT_HYPERVOLUME_OBJECTIVES = 5
#: directions the approximation samples (its error: ~1 % of the value or less)
HYPERVOLUME_SAMPLES = 2**15


class HypervolumeTracker:
    """Hypervolume of the front in a fixed normalised frame, comparable across batches.

    The frame is set by the first batch that has feasible points: objectives are scaled so
    that their ideal maps to 0 and 1.1 x their nadir range maps to 1; the reference point
    is (1, ..., 1). Points outside the reference box do not count. Beyond
    :data:`EXACT_HYPERVOLUME_OBJECTIVES` objectives the value is approximated.
    """

    def __init__(self, ideal: list[float] | None = None, nadir: list[float] | None = None) -> None:
        self.ideal = None if ideal is None else np.asarray(ideal, float)
        self.nadir = None if nadir is None else np.asarray(nadir, float)

    def update(self, front: np.ndarray) -> float:
        import moocore

        if len(front) == 0:
            return 0.0
        if self.ideal is None:
            self.ideal = front.min(axis=0)
            span = front.max(axis=0) - self.ideal
            span = np.where(span > 0, span, np.maximum(np.abs(self.ideal), 1.0))
            self.nadir = self.ideal + 1.1 * span
        z = (front - self.ideal) / (self.nadir - self.ideal)
        ref = np.ones(z.shape[1])
        if z.shape[1] <= EXACT_HYPERVOLUME_OBJECTIVES:
            return float(moocore.hypervolume(z, ref=ref))
        # exact hypervolume grows exponentially with the objectives (12: hours, uninterruptible);
        # a deterministic approximation (moocore's Rphi-FWE+, no random numbers: a resumed run
        # gets the same values) takes well under a second for thousands of points
        z = z[(z < 1).all(axis=1)]  # (outside the box: no volume)
        if len(z) == 0:
            return 0.0
        return float(moocore.hv_approx(z, ref=ref, nsamples=HYPERVOLUME_SAMPLES))

    def state(self) -> dict:
        return {
            "ideal": None if self.ideal is None else self.ideal.tolist(),
            "nadir": None if self.nadir is None else self.nadir.tolist(),
        }
