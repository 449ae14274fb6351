"""From evaluations to the Pareto set: objective and constraint matrices, feasibility,
non-dominated sorting and hypervolume (moocore). Pure functions of tables; no I/O."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dse.study import Study

FAILED_VIOLATION = 1e30  # constraint value given to rows whose metrics are missing


def objective_matrix(table: pd.DataFrame, study: Study) -> np.ndarray:
    """``(n, m)`` objectives, every column to be minimised (maximised metrics negated)."""
    cols = []
    for obj in study.objectives:
        v = pd.to_numeric(table[obj.metric], errors="coerce").to_numpy(dtype=float) if obj.metric in table else np.full(len(table), np.nan)
        cols.append(-v if obj.direction == "maximize" else v)
    return np.column_stack(cols) if cols else np.empty((len(table), 0))


def violation_matrix(table: pd.DataFrame, study: Study) -> np.ndarray:
    """``(n, k+1)`` constraint values, G <= 0 feasible: one column per study constraint and
    a last one that is 1 where the evaluator found the candidate infeasible or it failed."""
    n = len(table)
    cols = []
    for con in study.constraints:
        v = pd.to_numeric(table[con.metric], errors="coerce").to_numpy(dtype=float) if con.metric in table else np.full(n, np.nan)
        g = v - con.bound if con.op in ("<=", "<") else con.bound - v
        if con.op in ("<", ">"):
            g = np.where(g == 0, 1e-12, g)
        cols.append(np.where(np.isfinite(g), g, FAILED_VIOLATION))
    ok = table["feasible"].fillna(False).to_numpy(dtype=bool, copy=True) if "feasible" in table else np.zeros(n, bool)
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


def front_mask(table: pd.DataFrame, study: Study) -> np.ndarray:
    """Rows of the Pareto set: feasible and not dominated by another feasible row.

    Candidates with identical objective vectors are all kept (weakly non-dominated), so
    a user sees every layout that reaches a point of the front.
    """
    import moocore

    mask = feasible_mask(table, study)
    out = np.zeros(len(table), bool)
    if mask.any():
        f = objective_matrix(table, study)[mask]
        out[np.flatnonzero(mask)] = moocore.is_nondominated(f, keep_weakly=True)
    return out


def infeasibility_summary(table: pd.DataFrame, study: Study) -> list[tuple[str, int]]:
    """What ruled candidates out: ``(reason, count)`` pairs, most frequent first.

    A candidate the evaluator rejected (or whose evaluation failed) counts once, under the
    evaluator's reason; any other counts once under every study constraint it violates.
    Vectorised, so that it can be summed over the chunks of a large run.
    """
    if len(table) == 0:
        return []
    g = violation_matrix(table, study)
    rejected = g[:, -1] > 0
    reasons = table["reason"].astype(str).to_numpy() if "reason" in table else np.full(len(table), "")
    if "status" in table and "error" in table:
        failed = (table["status"] != "ok").to_numpy()
        reasons = np.where(failed, "evaluation failed: " + table["error"].astype(str).to_numpy(), reasons)
    reasons = np.where(reasons[rejected] == "", "infeasible", reasons[rejected]) if rejected.any() else []
    counts = {f"evaluator: {r}": int(n) for r, n in pd.Series(reasons, dtype=object).value_counts().items()}
    for j, con in enumerate(study.constraints):
        n = int((~rejected & (g[:, j] > 0)).sum())
        if n:
            counts[f"constraint {con}"] = counts.get(f"constraint {con}", 0) + n
    return sorted(counts.items(), key=lambda kv: -kv[1])


class HypervolumeTracker:
    """Hypervolume of the front in a fixed normalised frame, comparable across batches.

    The frame is set by the first batch that has feasible points: objectives are scaled so
    that their ideal maps to 0 and 1.1 x their nadir range maps to 1; the reference point
    is (1, ..., 1). Points outside the reference box do not count.
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
        return float(moocore.hypervolume(z, ref=np.ones(z.shape[1])))

    def state(self) -> dict:
        return {"ideal": None if self.ideal is None else self.ideal.tolist(),
                "nadir": None if self.nadir is None else self.nadir.tolist()}
