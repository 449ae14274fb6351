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
    g = violation_matrix(table, study)
    f = objective_matrix(table, study)
    return (g <= 0).all(axis=1) & np.isfinite(f).all(axis=1)


def ruled_out(table: pd.DataFrame, study: Study) -> dict[str, int]:
    """What ruled candidates out: ``{reason: count}``. An evaluator-infeasible (or failed)
    candidate counts under its reason; an evaluator-feasible one under every study
    constraint it breaks; one that meets them all under each objective it has no finite
    value of (NaN or infinite: an evaluator that could not compute it)."""
    counts: dict[str, int] = {}
    if len(table) == 0:
        return counts
    g = violation_matrix(table, study)
    bad = g[:, -1] > 0
    if bad.any():
        reasons = (
            table["reason"].astype(str).to_numpy() if "reason" in table else np.full(len(table), "")
        ).astype(object)
        if "status" in table and "error" in table:
            failed = (table["status"] != "ok").to_numpy()
            reasons = np.where(
                failed, "evaluation failed: " + table["error"].astype(str).to_numpy(), reasons
            )
        reasons = np.where(reasons == "", "infeasible", reasons)
        for r, n in pd.Series(reasons[bad]).value_counts(sort=False).items():
            counts[f"evaluator: {r}"] = int(n)
    for j, con in enumerate(study.constraints):
        n = int(((g[:, j] > 0) & ~bad).sum())
        if n:
            counts[f"constraint {con}"] = n
    meets = (g <= 0).all(axis=1)
    if meets.any():
        f = objective_matrix(table, study)
        for j, obj in enumerate(study.objectives):
            n = int((meets & ~np.isfinite(f[:, j])).sum())
            if n:
                counts[f"objective {obj.metric}: no finite value"] = n
    return counts


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
    ok = feasible_mask(table, study)
    failed = int((table["status"] != "ok").sum()) if "status" in table else 0
    return ok, failed, ruled_out(table[~ok], study) if not ok.all() else {}


def summarize(table: pd.DataFrame, study: Study) -> ChunkSummary:
    """The :class:`ChunkSummary` of a table with the objective and constraint metrics,
    ``feasible``, ``status``, ``reason`` and ``error``."""
    import moocore

    ok, failed, counts = tallies(table, study)
    rows = np.flatnonzero(ok)
    f = objective_matrix(table, study)[ok]
    if len(rows):
        keep = moocore.is_nondominated(f, keep_weakly=True)
        rows, f = rows[keep], f[keep]
    return ChunkSummary(len(table), int(ok.sum()), failed, counts, ok, rows, f)


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
