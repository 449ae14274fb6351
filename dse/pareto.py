"""From evaluations to the Pareto set: objectives, constraints, non-dominated sorting, datasets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from dse import __version__
from dse.evaluators.base import Evaluator
from dse.space import Space
from dse.store import FORMAT_VERSION
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
    """What ruled candidates out: ``(reason, count)`` pairs, most frequent first."""
    counts: dict[str, int] = {}
    if len(table) == 0:
        return []
    g = violation_matrix(table, study)
    reasons = table["reason"].astype(str).to_numpy() if "reason" in table else np.full(len(table), "")
    if "status" in table and "error" in table:
        failed = (table["status"] != "ok").to_numpy()
        reasons = np.where(failed, "evaluation failed: " + table["error"].astype(str).to_numpy(), reasons)
    for i in range(len(table)):
        if g[i, -1] > 0:
            r = reasons[i] or "infeasible"
            counts[f"evaluator: {r}"] = counts.get(f"evaluator: {r}", 0) + 1
            continue
        for j, con in enumerate(study.constraints):
            if g[i, j] > 0:
                counts[f"constraint {con}"] = counts.get(f"constraint {con}", 0) + 1
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


# -- datasets -------------------------------------------------------------------------------
def to_dataset(table: pd.DataFrame, study: Study, evaluator: Evaluator, space: Space,
               *, kind: str) -> xr.Dataset:
    """An xarray Dataset over ``candidate``: parameters, metrics, status; units everywhere."""
    inputs, metrics = evaluator.inputs, evaluator.metrics
    data_vars = {}
    for name in space.names:
        if name not in table:
            continue
        inp = inputs.get(name)
        values = _column_values(table[name])
        data_vars[name] = ("candidate", values, {
            "units": inp.unit if inp else "", "long_name": inp.description if inp else name,
            "role": "parameter"})
    for name, m in metrics.items():
        if name in table:
            data_vars[name] = ("candidate", _column_values(table[name]),
                               {"units": m.unit, "long_name": m.long_name, "role": "metric"})
    extra = {
        "feasible": ("1", "feasible according to the evaluator"),
        "reason": ("", "why the evaluator found the candidate infeasible"),
        "status": ("", "evaluation status (ok or failed)"),
        "error": ("", "error message of a failed evaluation"),
        "elapsed_s": ("s", "evaluation time per candidate"),
        "batch": ("1", "search batch in which the candidate was evaluated"),
        "key": ("", "canonical candidate key"),
    }
    for name, (unit, long_name) in extra.items():
        if name in table:
            data_vars[name] = ("candidate", _column_values(table[name]),
                               {"units": unit, "long_name": long_name, "role": "bookkeeping"})
    if "feasible" in table or "status" in table:
        data_vars["meets_constraints"] = ("candidate", feasible_mask(table, study),
                                          {"units": "1", "long_name": "feasible and meets every study constraint",
                                           "role": "bookkeeping"})
    ds = xr.Dataset(data_vars, coords={"candidate": np.arange(len(table))})
    ds["candidate"].attrs.update(units="1", long_name="candidate index")
    ds.attrs.update({
        "title": f"dse {kind}: {study.name}",
        "kind": kind,
        "study_name": study.name,
        "study": study.to_yaml(),
        "objectives": ", ".join(f"{o.direction} {o.metric}" for o in study.objectives),
        "constraints": "; ".join(str(c) for c in study.constraints),
        "fixed": ", ".join(f"{k}={v}" for k, v in study.fixed_values.items()),
        "evaluator": evaluator.name,
        "evaluator_version": evaluator.version,
        "format_version": FORMAT_VERSION,
        "dse_version": __version__,
    })
    return ds


def _column_values(col: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(col):
        return col.to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(col):
        return col.to_numpy()
    return col.astype(str).to_numpy(dtype=object)


def write_netcdf(ds: xr.Dataset, path) -> None:
    """Write a dataset atomically (temporary file, then rename)."""
    from dse.store import atomic_path

    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")
