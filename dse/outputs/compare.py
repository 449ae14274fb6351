"""Runs side by side (``dse compare``): their fronts in one frame, the hypervolume of each
in a common reference frame, which run's front points dominate which, evaluations spent.

A run's own hypervolume (``dse run``'s summary, ``dse status``, the report) is measured in
the frame of its first batch's front, so two runs' numbers are not comparable. Here every
front is normalised over the union of the fronts compared: each objective (minimised;
maximised ones negated) is mapped so that the best value of any run is 0 and the worst
value plus 10 % of the range is 1, and the hypervolume is the share of the unit box
dominated (0 to 1, dimensionless), reference point (1, ..., 1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dse.datasets import unit_label
from dse.errors import DseError
from dse.units import shown

#: the colours of the runs in the figure, one per run, in the order given
RUN_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"]


@dataclass(frozen=True)
class ComparedRun:
    """One run in a comparison: ``f``: its feasible front's objective vectors (minimised,
    one row per distinct point), ``hypervolume``: in the common frame (share of the box)."""

    path: Path
    name: str
    evaluations: int
    f: np.ndarray
    hypervolume: float

    @property
    def front_size(self) -> int:
        return len(self.f)


@dataclass(frozen=True)
class Comparison:
    """Runs compared in one frame. ``objectives``: ``(metric, direction)`` in the first
    run's order; ``ideal``/``nadir``: the common frame (minimised objective values, in each
    metric's stored unit, ``units``); ``dominated[i][j]``: points of run i's front
    dominated by run j's front; ``display_units``: the first run's study's (metric -> the
    unit it is shown in)."""

    objectives: list[tuple[str, str]]
    units: list[str]
    runs: list[ComparedRun]
    ideal: np.ndarray
    nadir: np.ndarray
    dominated: list[list[int]]
    display_units: dict[str, str] = field(default_factory=dict)
    #: how a run's workload, fixed inputs or evaluator differ from the first run's, one line
    #: each (runs of different models share objectives; their fronts are compared as they are)
    differences: list[str] = field(default_factory=list)

    def frame(self) -> str:
        """The common frame in words, with each objective's range."""
        parts = []
        for (metric, direction), unit, lo, hi in zip(
            self.objectives, self.units, self.ideal, self.nadir, strict=True
        ):
            sign = -1.0 if direction == "maximize" else 1.0
            best, ref = sorted((sign * lo, sign * hi), reverse=direction == "maximize")
            # each end in a unit readable for its own size (a study's display unit: both)
            ends = [shown(unit, abs(v), self.display_units.get(metric)) for v in (best, ref)]
            text = [
                f"{v / f:.4g}" + (f" {u}" if u not in ("", "1") else "")
                for v, (f, u) in zip((best, ref), ends, strict=True)
            ]
            if ends[0][1] == ends[1][1]:  # one unit: written once, after the range
                text[0] = f"{best / ends[0][0]:.4g}"
            parts.append(f"{metric} {text[0]} → {text[1]}")
        return (
            "common frame: each objective normalised over the union of the fronts compared, "
            "best value 0, worst + 10 % of the range 1 (reference point); hypervolume = share "
            "of that box dominated [1]: " + "; ".join(parts)
        )


def dominated_by(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which rows of ``a`` (minimised objectives) some row of ``b`` dominates (no worse in
    every objective, better in one)."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(len(a), bool)
    le = (b[None, :, :] <= a[:, None, :]).all(axis=2)
    lt = (b[None, :, :] < a[:, None, :]).any(axis=2)
    return (le & lt).any(axis=1)


def compare_runs(paths: list[Path | str]) -> Comparison:
    """Open each results folder and compare their fronts (one-line error when the runs do
    not share their objectives, or one has no front)."""
    from dse.pareto import HypervolumeTracker, objective_matrix
    from dse.results import open_results

    if len(paths) < 2:
        raise DseError(
            f"needs two runs or more to compare, got {len(paths)}",
            field="RUN",
            allowed="two or more results folders, e.g. dse compare results/a results/b",
        )
    seen: dict[str, Path | str] = {}
    for p in paths:  # one folder twice would compare a run with itself, and say nothing of it
        key = os.path.realpath(p)  # (a loop of links is refused by open_results)
        if key in seen:
            again = seen[key]
            raise DseError(
                f"{p} is given twice" + (f" (as {again})" if str(again) != str(p) else ""),
                field="RUN",
                allowed="two or more different results folders",
            )
        seen[key] = p
    opened = [open_results(p) for p in paths]
    first = opened[0]
    objectives = [(o.metric, o.direction) for o in first.study.objectives]
    for run in opened[1:]:
        theirs = [(o.metric, o.direction) for o in run.study.objectives]
        if sorted(theirs) != sorted(objectives):
            raise DseError(
                f"{run.path} and {first.path} do not share their objectives "
                f"({_words(theirs)} against {_words(objectives)}): their fronts cannot be compared"
            )
    fronts, units, names = [], [], []
    for run in opened:
        ds = run.feasible_front()
        metrics = [m for m, _ in objectives]
        table = ds[metrics].to_dataframe().reset_index(drop=True)
        f = objective_matrix(table, run.study)
        order = [[o.metric for o in run.study.objectives].index(m) for m in metrics]
        f = f[:, order]
        f = np.unique(f[np.isfinite(f).all(axis=1)], axis=0)
        fronts.append(f)
        if not units:
            units = [unit_label(ds[m].attrs) for m in metrics]
        names.append(run.study.name)
    union = np.vstack(fronts)
    ideal = union.min(axis=0)
    span = union.max(axis=0) - ideal
    span = np.where(span > 0, span, np.maximum(np.abs(ideal), 1.0))
    nadir = ideal + 1.1 * span
    runs = []
    for run, name, f in zip(opened, names, fronts, strict=True):
        hv = HypervolumeTracker(ideal.tolist(), nadir.tolist()).update(f)
        runs.append(ComparedRun(run.path, name, run.state_when_opened.evaluations, f, hv))
    dominated = [[int(dominated_by(a.f, b.f).sum()) for b in runs] for a in runs]
    return Comparison(
        objectives,
        units,
        runs,
        ideal,
        nadir,
        dominated,
        dict(first.study.display_units),
        [d for run in opened[1:] if (d := _differs(run, first))],
    )


def _value(study, key: str) -> str:
    """A study's input as the study writes it (3e+11, not 300000000000.0): its workload's or
    fixed value, "searched" where its space varies it, "(default)" where it leaves it."""
    if key in study.space:
        return "searched"
    given = {**study.workload, **study.fixed}
    if key not in given:
        return "(default)"
    v = given[key]
    return f"{v:g}" if isinstance(v, float) else str(v)


def _differs(run, first) -> str:
    """How ``run``'s inputs outside both spaces (its workload and fixed values) and its
    evaluator differ from ``first``'s, in one line ("" when they do not): an input one sets
    and the other searches or leaves at its default, or both set to different values."""
    mine, theirs = run.study, first.study
    keys = set(mine.workload) | set(mine.fixed) | set(theirs.workload) | set(theirs.fixed)
    values = ((k, _value(mine, k), _value(theirs, k)) for k in sorted(keys))
    fields = [f"{k} {a} against {b}" for k, a, b in values if a != b]
    if mine.evaluator.name != theirs.evaluator.name:
        fields.append(f"evaluator {mine.evaluator.name} against {theirs.evaluator.name}")
    if not fields:
        return ""
    return f"{run.path} sets other inputs than {first.path}: " + "; ".join(fields)


def _words(objectives: list[tuple[str, str]]) -> str:
    return ", ".join(f"{d} {m}" for m, d in objectives) or "none"


def labels(comparison: Comparison) -> list[str]:
    """A short distinct label per run: its folder's name (its path where two share one)."""
    names = [r.path.name for r in comparison.runs]
    return [
        str(r.path) if names.count(n) > 1 else n
        for r, n in zip(comparison.runs, names, strict=True)
    ]


def compare_figure(comparison: Comparison):
    """Every run's front in one frame, one panel per pair of objectives, in the display
    unit the first run's study names (``display_units``) or one readable for the largest value
    shown (:func:`~dse.units.shown`)."""
    from itertools import combinations

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = len(comparison.objectives)
    signs = np.array([-1.0 if d == "maximize" else 1.0 for _, d in comparison.objectives])
    values = [r.f * signs for r in comparison.runs]  # back to the metrics' own sign
    union = np.vstack(values)
    scales = [
        shown(
            unit,
            float(np.nanmax(np.abs(union[:, j]))),
            comparison.display_units.get(comparison.objectives[j][0]),
        )
        for j, unit in enumerate(comparison.units)
    ]
    pairs = list(combinations(range(m), 2)) or [(0, 0)]
    ncols = min(len(pairs), 3)
    nrows = -(-len(pairs) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.4 * ncols, 4.8 * nrows), squeeze=False)
    names = labels(comparison)
    for ax, (i, j) in zip(axes.flat, pairs, strict=False):
        for k, (run, v) in enumerate(zip(comparison.runs, values, strict=True)):
            colour = RUN_COLOURS[k % len(RUN_COLOURS)]
            x = v[:, i] / scales[i][0]
            y = v[:, j] / scales[j][0] if m > 1 else np.zeros(len(v)) + k
            ax.scatter(
                x,
                y,
                s=30,
                c=colour,
                edgecolors="black",
                linewidths=0.5,
                zorder=3,
                label=f"{names[k]} ({run.front_size} points, {run.evaluations:,} evaluations, "
                f"hypervolume {run.hypervolume:.3f})",
            )
            if m == 2:
                order = np.argsort(x)
                ax.plot(x[order], y[order], c=colour, lw=0.8, zorder=2)
        ax.set_xlabel(_axis(comparison, i, scales[i][1]))
        ax.set_ylabel(_axis(comparison, j, scales[j][1]) if m > 1 else "run")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(pairs) :]:
        ax.set_visible(False)
    fig.suptitle(
        "Pareto fronts in one frame; hypervolume in the common frame (normalised over the "
        "union of the fronts)",
        fontsize=10,
    )
    handles, texts = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, texts, loc="lower center", ncol=1, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, min((0.04 * len(texts) + 0.02) / nrows, 0.4), 1, 1))
    return fig


def _axis(comparison: Comparison, j: int, unit: str) -> str:
    metric = comparison.objectives[j][0]
    return f"{metric} [{unit}]" if unit else metric


def write_compare_figure(comparison: Comparison, path: Path) -> Path:
    """The figure written atomically at ``path`` (its suffix: png, svg or pdf)."""
    import matplotlib.pyplot as plt

    from dse.outputs.plot import figure_path, save_figure

    target, fmt = figure_path(Path(path), Path(path))
    fig = compare_figure(comparison)
    try:
        save_figure(fig, target, (fmt,))
    finally:
        plt.close(fig)
    return target
