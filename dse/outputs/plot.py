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
from dse.units import shown

SCATTER_LIMIT = 50_000  # feasible evaluations drawn point by point; above, as a density
#: the colours of a categorical parameter's values, in sorted order, in the PNG and the report
#: alike (no red nor orange first: the report marks infeasible points red and its choice orange)
COLOURS = [
    "#1f77b4",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#ff7f0e",
    "#d62728",
    "#7f7f7f",
]


def label(ds: xr.Dataset, name: str, unit: str | None = None) -> str:
    """``long name [unit]`` of a variable (no brackets when dimensionless or text); ``unit``:
    the unit it is shown in, when not its own (:func:`~dse.units.readable`)."""
    unit = display_unit(ds[name]) if unit is None else unit
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


def plot_front(
    evaluations: xr.Dataset,
    front: xr.Dataset,
    objectives: list[str],
    path: Path,
    *,
    formats: tuple[str, ...] = ("png",),
    counts: tuple[int, int] | None = None,
    wanted: dict[str, str] | None = None,
    summary=None,
) -> Path:
    """The front over every feasible evaluation, one panel per pair of objectives, written
    atomically (``path`` with each suffix of ``formats``); see :func:`front_figure`."""
    import matplotlib.pyplot as plt

    fig = front_figure(
        evaluations, front, objectives, counts=counts, wanted=wanted, summary=summary
    )
    save_figure(fig, Path(path), formats)
    plt.close(fig)
    return Path(path)


def save_figure(fig, path: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    written = []
    for fmt in formats:
        target = path.with_suffix(f".{fmt}")
        with atomic_path(target) as tmp:
            fig.savefig(
                tmp, dpi=110, format=fmt, bbox_inches="tight", pad_inches=0.1
            )  # a wide legend is not cut
        written.append(target)
    return written


def front_figure(
    evaluations: xr.Dataset,
    front: xr.Dataset,
    objectives: list[str],
    *,
    counts: tuple[int, int] | None = None,
    wanted: dict[str, str] | None = None,
    summary=None,
):
    """Feasible evaluations (grey, or coloured by a categorical parameter) with the front on
    top, one panel per pair of objectives. Up to :data:`SCATTER_LIMIT` feasible evaluations
    are drawn point by point; beyond, as a density (2-D histogram), read in slices so that
    time and memory stay bounded whatever the run's size. The front is always exact.
    ``counts``: (evaluations, feasible) of the whole run, when ``evaluations`` holds only the
    rows the study keeps (``output.keep``; :func:`dse.outputs.scan.log_tallies`).
    ``wanted``: the unit each objective is drawn in (the study's ``display_units``; an
    objective without one is drawn in a unit readable for its values). ``summary``: the
    scan and histograms already made of ``evaluations`` (a
    :class:`dse.outputs.summary.LogSummary`, by the run's workers; ``evaluations`` then only
    gives the variables' attributes, and may be the front)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wanted = wanted or {}
    colour_by = colour_parameter(front)
    if summary is not None:
        found = summary.found
    else:
        found = scan(
            evaluations,
            objectives,
            columns=[colour_by] if colour_by else [],
            sample_size=SCATTER_LIMIT,
            only_ok=True,
        )
    if (
        len(objectives) == 1
    ):  # no trade-off to draw: how the feasible values spread, the best marked
        return _one_objective_figure(evaluations, front, objectives[0], found, counts, wanted)
    dense = not found.sampled_all
    points = found.sample
    if summary is not None:
        hist = summary.hist
    else:
        hist = density(evaluations, found, objectives) if dense else {}
    pairs = list(combinations(objectives, 2)) or [(objectives[0], objectives[0])]
    ncols = min(len(pairs), 3)  # 4 objectives: 6 panels in 2 rows of 3, not one strip
    nrows = -(-len(pairs) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.4 * ncols, 4.8 * nrows), squeeze=False)
    if colour_by is None or dense:
        groups = ["all"]
        ev_group = np.full(len(points), "all")
        fr_group = np.full(front.sizes["candidate"], "all")
    else:
        ev_group = points[colour_by].astype(str).to_numpy()
        fr_group = front[colour_by].values.astype(str)
        groups = sorted(set(ev_group) | set(fr_group))
    colours = {g: COLOURS[i % len(COLOURS)] for i, g in enumerate(groups)}
    units = {
        name: readable_unit(display_unit(evaluations[name]), found, front, name, wanted.get(name))
        for name in objectives
    }
    for ax, (x, y) in zip(axes.flat, pairs, strict=False):
        (fx, _), (fy, _) = units[x], units[y]
        if (x, y) in hist:
            x_edges, y_edges, cells = hist[(x, y)]
            _draw_density(fig, ax, x_edges / fx, y_edges / fy, cells)
        for g in groups:
            if not dense:
                m = ev_group == g
                name = "feasible evaluations" if colour_by is None else f"{colour_by} = {g}"
                ax.scatter(
                    points[x].to_numpy()[m] / fx,
                    points[y].to_numpy()[m] / fy,
                    s=7,
                    c=colours[g],
                    alpha=0.25,
                    linewidths=0,
                    label=name,
                    zorder=1,
                )
            f = fr_group == g
            if f.any():
                ax.scatter(
                    front[x].values[f] / fx,
                    front[y].values[f] / fy,
                    s=30,
                    zorder=3,
                    c=colours[g] if not dense else "C3",
                    edgecolors="black",
                    linewidths=0.6,
                    label="Pareto front"
                    if colour_by is None or dense
                    else f"front: {colour_by} = {g}",
                )
        if len(objectives) == 2:
            order = np.argsort(front[x].values)
            ax.plot(
                front[x].values[order] / fx,
                front[y].values[order] / fy,
                c="black",
                lw=0.8,
                zorder=2,
            )
        _style_axes(ax, evaluations, found, x, y, units[x][1], units[y][1])
    for ax in list(axes.flat)[len(pairs) :]:
        ax.set_visible(False)
    n, n_ok = counts if counts is not None else (found.n, found.n_ok)
    kept = str(evaluations.attrs.get("log_keeps", "all"))
    how = f"{n_ok:,} feasible" + (", drawn as a density" if dense else "")
    if counts is not None and kept != "all":
        how += f"; only the {'feasible ones' if kept == 'feasible' else 'front'} kept and drawn (output.keep: {kept})"
    views = (
        (
            f"\neach panel is a 2-D view of the {len(objectives)}-objective front: a front point that looks "
            "dominated here is better in another objective"
        )
        if len(objectives) > 2
        else ""
    )
    fig.suptitle(
        f"{front.attrs.get('study_name', '')}: Pareto front ({front.sizes['candidate']:,} "
        f"of {n:,} evaluations; {how}){views}",
        fontsize=10,
    )
    # one legend for every panel, below them: inside a panel it hid front points
    handles, labels = axes[0][0].get_legend_handles_labels()
    ncol = min(len(labels), 4 * ncols) or 1
    rows = -(-len(labels) // ncol)
    legend = fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    for handle in legend.legend_handles:  # the faint evaluations' markers, visible in the legend
        handle.set_alpha(1)
    top = 1 - (0.035 if views else 0.0) / nrows  # room for the title's second line
    fig.tight_layout(rect=(0, min((0.05 * rows + 0.01) / nrows, 0.3), 1, top))
    return fig


def _one_objective_figure(
    evaluations: xr.Dataset, front: xr.Dataset, name: str, found, counts, wanted: dict[str, str]
):
    """A histogram of the feasible evaluations' objective (all of them, or the scan's uniform
    sample beyond :data:`SCATTER_LIMIT`) with the best value marked."""
    import matplotlib.pyplot as plt

    factor, unit = readable_unit(
        display_unit(evaluations[name]), found, front, name, wanted.get(name)
    )
    values = found.sample[name].to_numpy(float) / factor if name in found.sample else np.empty(0)
    values = values[np.isfinite(values)]
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    log = found.log_scale(name)
    bins = np.geomspace(values.min(), values.max(), 41) if log and len(values) else 40
    ax.hist(
        values,
        bins=bins,
        color=COLOURS[0],
        alpha=0.6,
        label="feasible evaluations"
        + ("" if found.sampled_all else f" (a uniform sample of {len(values):,})"),
    )
    for i, best in enumerate(np.unique(front[name].values.astype(float)) / factor):
        ax.axvline(
            best, color="#d62728", lw=1.5, label=None if i else f"best: {best:.4g} {unit}".rstrip()
        )
    if log:
        ax.set_xscale("log")
        _log_ticks(ax.xaxis, found.hi[name] / found.lo_positive[name])
    ax.set_xlabel(label(evaluations, name, unit))
    ax.set_ylabel("feasible evaluations")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    n, n_ok = counts if counts is not None else (found.n, found.n_ok)
    fig.suptitle(
        f"{front.attrs.get('study_name', '')}: one objective, best of {n_ok:,} feasible "
        f"({n:,} evaluations)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def _draw_density(fig, ax, x_edges, y_edges, counts) -> None:
    """The feasible evaluations of one panel as a 2-D histogram (log colour scale; empty
    cells left blank), with a margin so that front points on the edge show whole."""
    from matplotlib.colors import LinearSegmentedColormap, LogNorm

    greys = LinearSegmentedColormap.from_list("density", ["#d0d0d0", "#000000"])  # 1 is visible
    mesh = ax.pcolormesh(
        x_edges,
        y_edges,
        np.ma.masked_equal(counts.T, 0),
        cmap=greys,
        zorder=1,
        norm=LogNorm(vmin=1, vmax=max(counts.max(), 2)),
        rasterized=True,
    )
    fig.colorbar(mesh, ax=ax, label="feasible evaluations per cell", pad=0.01)
    ax.use_sticky_edges = False
    ax.margins(0.03)


def readable_unit(
    unit: str, found, front: xr.Dataset, name: str, wanted: str | None = None
) -> tuple[float, str]:
    """``(divisor, unit)`` to draw ``name`` (in ``unit``) in: ``wanted`` (the study's
    ``display_units``) when given, else readable for the largest absolute value drawn, the
    feasible evaluations' (``found``, a scan) and the front's; the PNG and the report alike
    (:func:`~dse.units.shown`)."""
    values = [abs(found.hi.get(name, np.nan)), abs(found.lo.get(name, np.nan))]
    if name in front and front.sizes["candidate"]:
        values.append(float(np.nanmax(np.abs(front[name].values.astype(float)))))
    values = [v for v in values if np.isfinite(v)]
    return shown(unit, max(values) if values else np.nan, wanted)


def _style_axes(
    ax, evaluations: xr.Dataset, found, x: str, y: str, x_unit: str, y_unit: str
) -> None:
    """Labels with the units shown, log scales where the scan chose them, and a grid."""
    ax.set_xlabel(label(evaluations, x, x_unit))
    ax.set_ylabel(label(evaluations, y, y_unit))
    for axis, name in (("x", x), ("y", y)):
        if found.log_scale(name):
            getattr(ax, f"set_{axis}scale")("log")
            _log_ticks(getattr(ax, f"{axis}axis"), found.hi[name] / found.lo_positive[name])
    ax.grid(True, alpha=0.3)


def _log_ticks(along, span: float) -> None:
    """A log axis's labels: under 2.5 decades (``span``: largest / smallest value), 1, 2 and
    5 x 10^k, each a whole value (0.05, never a bare mantissa 5); beyond, the decades;
    minor ticks unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if span < 300:
        along.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        along.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    along.set_minor_formatter(NullFormatter())


def plot_results(results: Path, output: Path | None = None, *, summary=None) -> Path:
    """Plot a results folder's front (reads ``pareto.nc`` and every evaluation from the log).
    ``summary``: what the figure reads of every evaluation, made by the run's workers
    (:func:`figure_summary`); the log is then not read here."""
    from dse.results import open_results

    run = open_results(results)
    objectives = [o.metric for o in run.study.objectives]
    front = run.feasible_front()
    colour_by = colour_parameter(front)
    keep = [*objectives, "meets_constraints", *filter(None, [colour_by])]
    path, fmt = figure_path(
        output_path(output, run.path / "pareto.png", run.path), run.path / "pareto.png"
    )
    if summary is not None and (
        not summary.found.sampled_all or colour_by is None or colour_by in summary.columns
    ):  # the front's attributes are the log's (its rows are log rows)
        return plot_front(
            front,
            front,
            objectives,
            path,
            formats=(fmt,),
            counts=summary.counts,
            wanted=run.study.display_units,
            summary=summary,
        )
    with run.open_dataset(front=False, keep=keep) as evaluations:  # read in slices, never whole
        return plot_front(
            evaluations,
            front,
            objectives,
            path,
            formats=(fmt,),
            counts=whole_run_counts(run, evaluations),
            wanted=run.study.display_units,
        )


def whole_run_counts(run, evaluations: xr.Dataset) -> tuple[int, int] | None:
    """(evaluations, feasible) of the whole run from its log, when the evaluations dataset
    holds only the rows the study keeps (``output.keep``); None when it holds every row."""
    if str(evaluations.attrs.get("log_keeps", "all")) == "all":
        return None
    from dse.outputs.scan import log_tallies

    n, n_ok, _, _ = log_tallies(run.store.log_files(), run.study)
    return n, n_ok


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
        return output.with_suffix(
            f".{suffix}"
        ), suffix  # front.PNG is written (and named) front.png
    if names_a_file_type(output.suffix):
        raise DseError(
            f"cannot draw a .{suffix} file",
            field="--output",
            value=str(output),
            allowed=", ".join(f".{f}" for f in FIGURE_FORMATS),
        )
    return output.with_name(output.name + ".png"), "png"  # a dot inside the name (front-0.5)


def figure_summary(results: Path, map_each) -> object | None:
    """What :func:`plot_results` reads of every evaluation of a run just finished in
    ``results`` (each candidate on its log once), made by ``map_each`` on the run's workers
    (:func:`dse.outputs.summary.log_summary`): the scan, and the histograms where the
    feasible evaluations are too many to draw one by one. None for one objective (its
    figure draws a sample of the feasible values)."""
    import pyarrow as pa

    from dse.outputs.summary import log_summary
    from dse.store import ResultStore, log_file_schema
    from dse.study import load_study

    store = ResultStore.open(results)
    study = load_study(store.study_file)
    files = store.log_files()
    if len(study.objectives) < 2 or not files:
        return None
    schema = log_file_schema(files[0])
    columns = [  # the parameters that may colour the front (colour_parameter): text and flags
        f.name
        for f in schema
        if f.name in study.space
        and (
            pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type)
            or pa.types.is_dictionary(f.type)
            or pa.types.is_boolean(f.type)
        )
    ]
    return log_summary(
        files,
        study,
        map_each,
        columns=columns,
        sample_size=SCATTER_LIMIT,
        groups=min(len(files), 16),
        keeps_all=study.output.keep == "all",
    )
