"""What the figure of a run reads of every evaluation, computed from the log files by the
workers that evaluated them, at the run's end, while the run writes ``pareto.nc``.

:func:`dse.outputs.plot.front_figure` reads every feasible evaluation twice (a scan: counts,
ranges, a sample; then 2-D histograms on the scan's ranges). At 10^7 evaluations that was
about 1 us of the run's own CPU per evaluation after the search, more than the rest of
its work per evaluation together (issue 37). :func:`log_summary` makes the same two
passes as tasks on the run's local workers (``map_each``), groups of log files each, and
merges what they give back: counts, ranges and histograms add up exactly, so the figure
is the one the scan would draw. Only where every evaluation is on the log once (a run
started and finished in one go, see :meth:`dse.runner.Runner`): the scan's view of the
log drops a candidate written twice, which the workers, each with its own files, cannot.
The functions sent to the workers read nothing but the log's files (no xarray).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from dse.pareto import feasible_mask
from dse.study import Study

#: ``map_each(fn, items) -> [fn(item) for item in items]``, on the workers
MapEach = Callable[[Callable, list], list]


@dataclass(frozen=True)
class LogSummary:
    """The scan (:class:`dse.outputs.scan.Scan`) and 2-D histograms of a log's shown rows
    (kept by the study's ``output.keep``) and, where the study keeps less than every row,
    ``counts``: (evaluations, feasible) of every row (:func:`dse.outputs.plot.whole_run_counts`)."""

    found: object
    hist: dict
    counts: tuple[int, int] | None
    columns: tuple[str, ...]  # besides the objectives, what the scan's sample holds


def _read(path: Path, study: Study, names: list[str]) -> tuple[pd.DataFrame, np.ndarray, int, int]:
    """A log file's kept rows of ``names``, which of them are feasible and within the
    constraints (:func:`dse.pareto.feasible_mask`), and (rows, feasible rows) of the file."""
    from dse.store import read_log_file

    need = [
        *names,
        *(c.metric for c in study.constraints),
        "feasible",
        "status",
        "kept",
    ]
    df = read_log_file(Path(path), list(dict.fromkeys(need))).to_pandas()
    ok_all = feasible_mask(df, study)
    kept = df["kept"].to_numpy(dtype=bool) if "kept" in df else np.ones(len(df), bool)
    if kept.all():
        return df, ok_all, len(df), int(ok_all.sum())
    return df[kept].reset_index(drop=True), ok_all[kept], len(df), int(ok_all.sum())


def group_scan(
    paths: list[str], study: Study, objectives: list[str], columns: list[str], sample_size: int
) -> dict:
    """One group of log files (on a worker): rows, feasible rows, failed rows, each
    objective's range over the feasible rows, the feasible rows themselves (objectives and
    ``columns``) where at most ``sample_size``, and the counts of every row."""
    from dse.outputs.scan import Scan

    ranges = Scan()
    out = {"n": 0, "n_ok": 0, "n_failed": 0, "all": 0, "all_ok": 0}
    rows = []
    for path in paths:
        df, ok, n_all, ok_all = _read(path, study, [*objectives, *columns])
        if "status" in df:
            out["n_failed"] += int((df["status"].astype(str) != "ok").sum())
        for name in objectives:
            ranges.take_range(name, df[name].to_numpy(float)[ok] if name in df else np.empty(0))
        if out["n_ok"] + int(ok.sum()) <= sample_size:
            picked = [c for c in dict.fromkeys([*objectives, *columns]) if c in df]
            rows.append(df.loc[ok, picked].assign(_row=np.flatnonzero(ok) + out["n"]))
        out["n"] += len(df)
        out["n_ok"] += int(ok.sum())
        out["all"] += n_all
        out["all_ok"] += ok_all
    out["lo"], out["hi"], out["pos"] = ranges.lo, ranges.hi, ranges.lo_positive
    out["rows"] = (
        pd.concat(rows, ignore_index=True) if rows and out["n_ok"] <= sample_size else None
    )
    return out


def group_density(paths: list[str], study: Study, edges: dict, pairs: list) -> list[np.ndarray]:
    """One group of log files (on a worker): the 2-D histogram of its feasible kept rows for
    each pair of objectives, on ``edges``."""
    counts = [np.zeros((len(edges[x]) - 1, len(edges[y]) - 1)) for x, y in pairs]
    for path in paths:
        df, ok, _, _ = _read(path, study, list(edges))
        for i, (x, y) in enumerate(pairs):
            h, _, _ = np.histogram2d(
                df[x].to_numpy(float)[ok], df[y].to_numpy(float)[ok], bins=[edges[x], edges[y]]
            )
            counts[i] += h
    return counts


def log_summary(
    files: list[Path],
    study: Study,
    map_each: MapEach,
    *,
    columns: list[str],
    sample_size: int,
    groups: int,
    keeps_all: bool,
) -> LogSummary:
    """The :class:`LogSummary` of ``files`` (a log whose candidates are each on it once), in
    ``groups`` groups of consecutive files mapped over the workers, twice: the scan, then
    the histograms on its ranges (:func:`dse.outputs.scan.density_edges`)."""
    from dse.outputs.scan import Scan, density_edges

    objectives = [o.metric for o in study.objectives]
    parts = [
        [str(f) for f in part] for part in np.array_split(np.array(files, dtype=object), groups)
    ]
    parts = [p for p in parts if p]
    scans = map_each(
        partial(
            group_scan, study=study, objectives=objectives, columns=columns, sample_size=sample_size
        ),
        parts,
    )
    found = Scan()
    samples, at = [], 0
    for s in scans:
        found.n += s["n"]
        found.n_ok += s["n_ok"]
        found.n_failed += s["n_failed"]
        for name, v in s["lo"].items():
            found.widen(name, v, s["hi"][name], s["pos"].get(name))
        if s["rows"] is not None:
            samples.append(s["rows"].assign(_row=s["rows"]["_row"] + at))
        at += s["n"]
    found.sampled_from = found.n_ok
    if found.n_ok <= sample_size:  # every group gave its feasible rows: all of them
        sample = pd.concat(samples, ignore_index=True) if samples else pd.DataFrame()
        found.sample = sample.assign(meets_constraints=True) if len(sample) else sample
        hist = {}
    else:  # drawn as a density: the scan's sample is not drawn
        edges = density_edges(found, objectives)
        pairs = [p for p in combinations(objectives, 2) if p[0] in edges and p[1] in edges]
        counts = map_each(partial(group_density, study=study, edges=edges, pairs=pairs), parts)
        hist = {
            p: (edges[p[0]], edges[p[1]], sum(c[i] for c in counts)) for i, p in enumerate(pairs)
        }
    whole = None if keeps_all else (sum(s["all"] for s in scans), sum(s["all_ok"] for s in scans))
    return LogSummary(found, hist, whole, tuple(columns))
