"""The results as xarray Datasets over a ``candidate`` dimension, with units everywhere.

Parameters and metrics are variables carrying ``units`` and ``long_name``; the study, the
evaluator's name and version and the results format version are attributes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from dse import __version__
from dse.evaluators.base import Evaluator
from dse.files import FORMAT_VERSION, atomic_path
from dse.pareto import feasible_mask
from dse.space import Space
from dse.study import Study


def to_dataset(table: pd.DataFrame, study: Study, evaluator: Evaluator, space: Space,
               *, kind: str, attrs: dict | None = None) -> xr.Dataset:
    """An xarray Dataset over ``candidate``: parameters, metrics, status; units everywhere.
    ``attrs`` (the search's labels: how exact the front is, evaluations spent) are added."""
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
    ds.attrs.update(attrs or {})
    return ds


def _column_values(col: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(col):
        return col.to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(col):
        return col.to_numpy()
    return col.astype(str).to_numpy(dtype=object)


def write_netcdf(ds: xr.Dataset, path) -> None:
    """Write a dataset atomically (temporary file, then rename)."""
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")
