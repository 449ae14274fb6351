"""Pictures of a run: the Pareto front against every feasible evaluation."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import xarray as xr

from dse.files import atomic_path


def _label(ds: xr.Dataset, name: str) -> str:
    unit = ds[name].attrs.get("units", "")
    return f"{ds[name].attrs.get('long_name', name)} [{unit}]" if unit and unit != "1" else ds[name].attrs.get("long_name", name)


def _colour_parameter(front: xr.Dataset) -> str | None:
    """The categorical parameter that best explains the front (most distinct values, <= 8)."""
    best, best_n = None, 1
    for name, var in front.data_vars.items():
        if var.attrs.get("role") == "parameter" and var.dtype.kind in "OUSb":
            n = len(np.unique(var.values.astype(str)))
            if best_n < n <= 8:
                best, best_n = name, n
    return best


def plot_front(evaluations: xr.Dataset, front: xr.Dataset, objectives: list[str], path: Path) -> Path:
    """Scatter of every feasible evaluation (grey) with the front on top, one panel per
    pair of objectives, coloured by a categorical parameter; written atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    pairs = list(combinations(objectives, 2)) or [(objectives[0], objectives[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(6.4 * len(pairs), 4.8), squeeze=False)
    ok = evaluations["meets_constraints"].values.astype(bool) if "meets_constraints" in evaluations else \
        np.ones(evaluations.sizes["candidate"], bool)
    colour_by = _colour_parameter(evaluations)
    if colour_by is None:
        groups = ["all"]
        ev_group = np.full(evaluations.sizes["candidate"], "all")
        fr_group = np.full(front.sizes["candidate"], "all")
    else:
        ev_group = evaluations[colour_by].values.astype(str)
        fr_group = front[colour_by].values.astype(str)
        groups = list(np.unique(ev_group))
    colours = {g: f"C{i}" for i, g in enumerate(groups)}
    for ax, (x, y) in zip(axes[0], pairs, strict=True):
        for g in groups:
            m = ok & (ev_group == g)
            name = "feasible evaluations" if colour_by is None else f"{colour_by} = {g}"
            ax.scatter(evaluations[x].values[m], evaluations[y].values[m], s=7, c=colours[g], alpha=0.25,
                       linewidths=0, label=name, zorder=1)
            f = fr_group == g
            if f.any():
                ax.scatter(front[x].values[f], front[y].values[f], s=30, c=colours[g], zorder=3,
                           edgecolors="black", linewidths=0.6,
                           label="Pareto front" if colour_by is None else f"front: {g}")
        if len(objectives) == 2:
            order = np.argsort(front[x].values)
            ax.plot(front[x].values[order], front[y].values[order], c="black", lw=0.8, zorder=2)
        ax.set_xlabel(_label(evaluations, x))
        ax.set_ylabel(_label(evaluations, y))
        for axis, name in (("x", x), ("y", y)):
            v = evaluations[name].values[ok] if ok is not None and ok.any() else front[name].values
            v = v[np.isfinite(v) & (v > 0)] if v.dtype.kind == "f" else v
            if len(v) and v.dtype.kind == "f" and v.max() / max(v.min(), 1e-300) > 30:
                getattr(ax, f"set_{axis}scale")("log")
                getattr(ax, f"{axis}axis").set_minor_formatter(NullFormatter())
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{front.attrs.get('study_name', '')}: Pareto front "
                 f"({front.sizes['candidate']} points of {evaluations.sizes['candidate']} evaluations)")
    fig.tight_layout()
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return Path(path)


def plot_results(results: Path, output: Path | None = None) -> Path:
    """Plot a results folder's front (reads ``pareto.nc`` and ``evaluations.nc``)."""
    from dse.results import open_results

    run = open_results(results)
    front, evaluations = run.front, run.evaluations
    objectives = [o.metric for o in run.study.objectives]
    return plot_front(evaluations, front, objectives, output or run.path / "pareto.png")
