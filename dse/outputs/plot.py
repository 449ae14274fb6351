"""Pictures of a run: the Pareto front against every feasible evaluation (or their density)."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import xarray as xr

from dse.datasets import display_unit
from dse.errors import DseError
from dse.files import atomic_path, names_a_file_type
from dse.outputs.scan import density, scan
from dse.outputs.target import output_path

SCATTER_LIMIT = 50_000  # feasible evaluations drawn point by point; above, as a density


def label(ds: xr.Dataset, name: str) -> str:
    """``long name [unit]`` of a variable (no brackets when dimensionless or text)."""
    unit = display_unit(ds[name])
    long_name = ds[name].attrs.get("long_name", name)
    return f"{long_name} [{unit}]" if unit else long_name


def colour_parameter(front: xr.Dataset) -> str | None:
    """The categorical parameter that best explains the front (most distinct values, <= 8)."""
    best, best_n = None, 1
    for name, var in front.variables.items():
        if var.attrs.get("role") == "parameter" and var.dtype.kind in "OUSb":
            n = len(np.unique(var.values.astype(str)))
            if best_n < n <= 8:
                best, best_n = name, n
    return best


def plot_front(evaluations: xr.Dataset, front: xr.Dataset, objectives: list[str], path: Path,
               *, formats: tuple[str, ...] = ("png",)) -> Path:
    """The front over every feasible evaluation, one panel per pair of objectives, written
    atomically (``path`` with each suffix of ``formats``); see :func:`front_figure`."""
    import matplotlib.pyplot as plt

    fig = front_figure(evaluations, front, objectives)
    save_figure(fig, Path(path), formats)
    plt.close(fig)
    return Path(path)


def save_figure(fig, path: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    written = []
    for fmt in formats:
        target = path.with_suffix(f".{fmt}")
        with atomic_path(target) as tmp:
            fig.savefig(tmp, dpi=110, format=fmt, bbox_inches="tight", pad_inches=0.1)  # a wide legend is not cut
        written.append(target)
    return written


def front_figure(evaluations: xr.Dataset, front: xr.Dataset, objectives: list[str]):
    """Feasible evaluations (grey, or coloured by a categorical parameter) with the front on
    top, one panel per pair of objectives. Up to :data:`SCATTER_LIMIT` feasible evaluations
    are drawn point by point; beyond, as a density (2-D histogram), read in slices so that
    time and memory stay bounded whatever the run's size. The front is always exact."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colour_by = colour_parameter(front)
    found = scan(evaluations, objectives, columns=[colour_by] if colour_by else [],
                 sample_size=SCATTER_LIMIT, only_ok=True)
    dense = not found.sampled_all
    points = found.sample
    hist = density(evaluations, found, objectives) if dense else {}
    pairs = list(combinations(objectives, 2)) or [(objectives[0], objectives[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(6.4 * len(pairs), 4.8), squeeze=False)
    if colour_by is None or dense:
        groups = ["all"]
        ev_group = np.full(len(points), "all")
        fr_group = np.full(front.sizes["candidate"], "all")
    else:
        ev_group = points[colour_by].astype(str).to_numpy()
        fr_group = front[colour_by].values.astype(str)
        groups = sorted(set(ev_group) | set(fr_group))
    colours = {g: f"C{i}" for i, g in enumerate(groups)}
    for ax, (x, y) in zip(axes[0], pairs, strict=True):
        if (x, y) in hist:
            _draw_density(fig, ax, *hist[(x, y)])
        for g in groups:
            if not dense:
                m = ev_group == g
                name = "feasible evaluations" if colour_by is None else f"{colour_by} = {g}"
                ax.scatter(points[x].to_numpy()[m], points[y].to_numpy()[m], s=7, c=colours[g],
                           alpha=0.25, linewidths=0, label=name, zorder=1)
            f = fr_group == g
            if f.any():
                ax.scatter(front[x].values[f], front[y].values[f], s=30, zorder=3,
                           c=colours[g] if not dense else "C3", edgecolors="black", linewidths=0.6,
                           label="Pareto front" if colour_by is None or dense else f"front: {g}")
        if len(objectives) == 2:
            order = np.argsort(front[x].values)
            ax.plot(front[x].values[order], front[y].values[order], c="black", lw=0.8, zorder=2)
        _style_axes(ax, evaluations, found, x, y)
    how = f"{found.n_ok:,} feasible" + (", drawn as a density" if dense else "")
    fig.suptitle(f"{front.attrs.get('study_name', '')}: Pareto front ({front.sizes['candidate']:,} "
                 f"of {found.n:,} evaluations; {how})", fontsize=10)
    # one legend for every panel, below them: inside a panel it hid front points
    handles, labels = axes[0][0].get_legend_handles_labels()
    ncol = min(len(labels), 4 * len(pairs)) or 1
    rows = -(-len(labels) // ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, min(0.05 * rows + 0.01, 0.3), 1, 1))
    return fig


def _draw_density(fig, ax, x_edges, y_edges, counts) -> None:
    """The feasible evaluations of one panel as a 2-D histogram (log colour scale; empty
    cells left blank), with a margin so that front points on the edge show whole."""
    from matplotlib.colors import LinearSegmentedColormap, LogNorm

    greys = LinearSegmentedColormap.from_list("density", ["#d0d0d0", "#000000"])  # 1 is visible
    mesh = ax.pcolormesh(x_edges, y_edges, np.ma.masked_equal(counts.T, 0), cmap=greys, zorder=1,
                         norm=LogNorm(vmin=1, vmax=max(counts.max(), 2)), rasterized=True)
    fig.colorbar(mesh, ax=ax, label="feasible evaluations per cell", pad=0.01)
    ax.use_sticky_edges = False
    ax.margins(0.03)


def _style_axes(ax, evaluations: xr.Dataset, found, x: str, y: str) -> None:
    """Labels with units, log scales where the scan chose them, and a grid."""
    from matplotlib.ticker import NullFormatter

    ax.set_xlabel(label(evaluations, x))
    ax.set_ylabel(label(evaluations, y))
    for axis, name in (("x", x), ("y", y)):
        if found.log_scale(name):
            getattr(ax, f"set_{axis}scale")("log")
            getattr(ax, f"{axis}axis").set_minor_formatter(NullFormatter())
    ax.grid(True, alpha=0.3)


def plot_results(results: Path, output: Path | None = None) -> Path:
    """Plot a results folder's front (reads ``pareto.nc`` and ``evaluations.nc``)."""
    from dse.results import open_results

    run = open_results(results)
    objectives = [o.metric for o in run.study.objectives]
    front = run.feasible_front()
    keep = [*objectives, "meets_constraints", *filter(None, [colour_parameter(front)])]
    path, fmt = figure_path(output_path(output, run.path / "pareto.png", run.path), run.path / "pareto.png")
    with run.open_dataset(front=False, keep=keep) as evaluations:  # read in slices, never whole
        return plot_front(evaluations, front, objectives, path, formats=(fmt,))


FIGURE_FORMATS = ("png", "svg", "pdf")


def figure_path(output: Path | None, default: Path) -> tuple[Path, str]:
    """Where a figure goes and in which format: the output's suffix (.png, .svg, .pdf), PNG
    when it has none; a suffix naming another file type is refused (it was written as PNG
    under another name)."""
    if output is None:
        return default, "png"
    output = Path(output)
    suffix = output.suffix.lower().lstrip(".")
    if suffix in FIGURE_FORMATS:
        return output.with_suffix(f".{suffix}"), suffix  # front.PNG is written (and named) front.png
    if names_a_file_type(output.suffix):
        raise DseError(f"cannot draw a .{suffix} file", field="--output", value=str(output),
                       allowed=", ".join(f".{f}" for f in FIGURE_FORMATS))
    return output.with_name(output.name + ".png"), "png"  # a dot inside the name (front-0.5)
