"""Every evaluation of a run, summarised in bounded memory for plots and reports.

The evaluations dataset may be far larger than memory (10^7 candidates and more), so it is
read slice by slice, a few variables at a time, and only summaries are kept: counts, what
ruled candidates out, objective ranges, a uniform random sample of bounded size and 2-D
histograms. Works the same on an in-memory, lazily opened or dask-backed dataset.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import pandas as pd
import xarray as xr

from dse.pareto import infeasibility_summary
from dse.study import Study

CHUNK = 1 << 19  # candidates read at a time: a few variables of these are a few MB
OK = "meets_constraints"  # feasible, within every constraint, finite objectives (datasets.py)


@dataclass
class Scan:
    """What one pass over the evaluations keeps."""

    n: int = 0
    n_ok: int = 0  # feasible and within the constraints
    n_failed: int = 0
    lo: dict[str, float] = field(default_factory=dict)  # over the ok rows
    hi: dict[str, float] = field(default_factory=dict)
    lo_positive: dict[str, float] = field(default_factory=dict)
    sample: pd.DataFrame = field(default_factory=pd.DataFrame)  # uniform, without replacement
    sampled_from: int = 0  # rows the sample was drawn from
    infeasibility: list[tuple[str, int]] = field(default_factory=list)

    @property
    def sampled_all(self) -> bool:
        return len(self.sample) == self.sampled_from

    def take_range(self, name: str, values: np.ndarray) -> None:
        """Widen ``name``'s range (and its smallest positive value) to hold the finite
        ``values``."""
        v = values[np.isfinite(values)]
        if len(v):
            pos = v[v > 0]
            self.widen(name, float(v.min()), float(v.max()), float(pos.min()) if len(pos) else None)

    def widen(self, name: str, lo: float, hi: float, lo_positive: float | None = None) -> None:
        """Widen ``name``'s range to hold ``[lo, hi]`` (and ``lo_positive``, where given)."""
        self.lo[name] = min(self.lo.get(name, np.inf), lo)
        self.hi[name] = max(self.hi.get(name, -np.inf), hi)
        if lo_positive is not None:
            self.lo_positive[name] = min(self.lo_positive.get(name, np.inf), lo_positive)

    def log_scale(self, name: str) -> bool:
        """A positive quantity spanning more than a factor 30 is drawn on a log axis."""
        lo = self.lo_positive.get(name, np.nan)
        return bool(np.isfinite(lo) and self.lo.get(name, 0) > 0 and self.hi[name] / lo > 30)


def read(ds: xr.Dataset, names: list[str], sl: slice) -> pd.DataFrame:
    """Rows ``sl`` of the variables and coordinates ``names`` (only those are read)."""
    return pd.DataFrame(
        {n: np.asarray(ds.variables[n][sl].values) for n in names if n in ds.variables}
    )


def slices(n: int, chunk: int = CHUNK):
    for start in range(0, n, chunk):
        yield slice(start, min(start + chunk, n))


def scan(
    ds: xr.Dataset,
    objectives: list[str],
    *,
    columns: list[str],
    sample_size: int,
    only_ok: bool = False,
    study: Study | None = None,
    seed: int = 0,
    chunk: int = CHUNK,
) -> Scan:
    """One pass: counts, objective ranges over the ok rows, a uniform sample of
    ``sample_size`` rows (of the ok rows with ``only_ok``) holding ``columns``, and, given
    the ``study``, what ruled candidates out (:func:`dse.pareto.infeasibility_summary`)."""
    out = Scan(n=int(ds.sizes["candidate"]))
    need = list(dict.fromkeys([*objectives, *columns, OK, "status"]))
    if study is not None:
        need += [c.metric for c in study.constraints] + ["feasible", "reason", "error"]
        need = list(dict.fromkeys(need))
    need = [n for n in need if n in ds.variables]
    rng = np.random.default_rng(seed)
    kept, kept_priority = [], np.empty(0)
    reasons: Counter = Counter()
    for sl in slices(out.n, chunk):
        df = read(ds, need, sl)
        ok = df[OK].to_numpy(bool) if OK in df else np.ones(len(df), bool)
        out.n_ok += int(ok.sum())
        if "status" in df:
            out.n_failed += int((df["status"].astype(str) != "ok").sum())
        for name in objectives:
            out.take_range(name, df[name].to_numpy(float)[ok] if name in df else np.empty(0))
        if study is not None:
            reasons.update(dict(infeasibility_summary(df, study)))
        eligible = ok if only_ok else np.ones(len(df), bool)
        out.sampled_from += int(eligible.sum())
        priority = rng.random(len(df))[eligible]  # keep the smallest: a uniform sample
        rows = df.loc[eligible, [c for c in dict.fromkeys([*objectives, *columns, OK]) if c in df]]
        kept.append(rows.assign(_row=np.flatnonzero(eligible) + sl.start))
        kept_priority = np.concatenate([kept_priority, priority])
        if len(kept_priority) > sample_size:
            pick = np.sort(np.argpartition(kept_priority, sample_size)[:sample_size])
            merged = pd.concat(kept, ignore_index=True)
            kept, kept_priority = [merged.iloc[pick]], kept_priority[pick]
    sample = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame()
    out.sample = sample.sort_values("_row").reset_index(drop=True) if len(sample) else sample
    out.infeasibility = sorted(reasons.items(), key=lambda kv: -kv[1])
    return out


def density(
    ds: xr.Dataset, found: Scan, objectives: list[str], *, bins: int = 160, chunk: int = CHUNK
) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """2-D histograms of the ok rows for every pair of objectives (a second pass over two
    columns at a time); edges are logarithmic on log-scaled axes. ``{(x, y): (xe, ye, counts)}``."""
    edges = density_edges(found, objectives, bins)
    pairs = [p for p in combinations(objectives, 2) if p[0] in edges and p[1] in edges]
    counts = {p: np.zeros((bins, bins)) for p in pairs}
    names = [n for n in [*edges, OK] if n in ds.variables]
    for sl in slices(found.n, chunk):
        df = read(ds, names, sl)
        ok = df[OK].to_numpy(bool) if OK in df else np.ones(len(df), bool)
        for x, y in pairs:
            h, _, _ = np.histogram2d(
                df[x].to_numpy(float)[ok], df[y].to_numpy(float)[ok], bins=[edges[x], edges[y]]
            )
            counts[(x, y)] += h
    return {p: (edges[p[0]], edges[p[1]], counts[p]) for p in pairs}


def density_edges(found: Scan, objectives: list[str], bins: int = 160) -> dict[str, np.ndarray]:
    """The histograms' edges of each objective with a range: logarithmic on a log-scaled axis."""
    edges = {}
    for name in objectives:
        if name not in found.hi:
            continue
        if found.log_scale(name):
            edges[name] = np.geomspace(found.lo_positive[name], found.hi[name], bins + 1)
        else:
            lo, hi = found.lo[name], found.hi[name]
            edges[name] = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    return edges


def log_tallies(files, study: Study) -> tuple[int, int, int, list[tuple[str, int]]]:
    """``(evaluations, feasible and within the constraints, failed, what ruled candidates
    out)`` from the log files' narrow columns, which a study that keeps only feasible or
    front rows still stores for every evaluation (the evaluations dataset then has only the
    kept rows). One file at a time, only those columns read."""
    from dse.pareto import tallies
    from dse.store import read_log_file

    columns = list(
        dict.fromkeys(
            [
                *(o.metric for o in study.objectives),
                *(c.metric for c in study.constraints),
                "feasible",
                "status",
                "reason",
                "error",
            ]
        )
    )
    n = n_ok = n_failed = 0
    reasons: Counter = Counter()
    for f in files:
        df = read_log_file(f, columns).to_pandas()
        ok, failed, counts = tallies(df, study)
        n, n_ok, n_failed = n + len(df), n_ok + int(np.sum(ok)), n_failed + failed
        reasons.update(counts)
    return n, n_ok, n_failed, sorted(reasons.items(), key=lambda kv: -kv[1])
