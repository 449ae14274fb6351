"""``dse report --static``: the report's figures as PNG and SVG files for papers (matplotlib)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.outputs.plot import front_figure, save_figure

FORMATS = ("png", "svg")


def write_static(report, stem: Path) -> list[Path]:
    """``<stem>-front``, ``-breakdown``, ``-parallel`` and ``-hypervolume`` as PNG and SVG
    (a figure without data, e.g. the breakdown of an evaluator that reports none, is left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    with report.run.open_dataset(front=False) as ev:
        # the whole run's counts, which the report read from the log when the study keeps less
        counts = (report.scan.n, report.scan.n_ok) if report.kept != "all" else None
        figures = {
            "front": front_figure(
                ev,
                report.front_ds,
                report.objectives,
                counts=counts,
                wanted=report.study.display_units,
            )
        }
    figures.update(
        {
            "breakdown": _breakdown(report, plt),
            "parallel": _parallel(report, plt),
            "hypervolume": _hypervolume(report, plt),
        }
    )
    for name, fig in figures.items():
        if fig is not None:
            written += save_figure(fig, Path(f"{stem}-{name}.png"), FORMATS)
            plt.close(fig)
    return written


def _breakdown(report, plt):
    parts = report.breakdowns()  # in the units the page uses
    if not parts:
        return None
    named = {**report.selected(), "best for η = 0.5": report.weighting.best(0.5)}
    fig, axes = plt.subplots(1, len(parts), figsize=(5.5 * len(parts) + 2.5, 4.2), squeeze=False)
    for ax, (title, table, factor, shown) in zip(axes[0], parts, strict=True):
        rows = list(named.values())
        bottom = np.zeros(len(named))
        for k, comp in enumerate(table.columns):
            v = table[comp].to_numpy()[rows] / factor
            ax.bar(range(len(named)), v, bottom=bottom, label=comp, color=f"C{k}")
            bottom += v
        ax.set_xticks(range(len(named)), list(named), rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(f"{title} [{shown}]")
        ax.legend(
            fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False
        )  # beside: on top it hid bars
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(
        f"{report.study.name}: where the energy and time of selected front points go", fontsize=10
    )
    fig.tight_layout()
    return fig


def _parallel(report, plt):
    names = [*report.params, *report.objectives]
    front = report.front
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 1, 4.2))
    colour = front[report.objectives[0]].to_numpy(float)
    span = np.ptp(colour) or 1.0
    scaled, ticks = [], []
    for name in names:
        v = front[name]
        if v.dtype.kind in "OUSb":
            cats = sorted(set(v.astype(str)))
            z = np.array([cats.index(c) for c in v.astype(str)], float) / max(len(cats) - 1, 1)
            ticks.append((cats[0], cats[-1]))
        else:
            x = v.to_numpy(float) / report.scale(name)[0]  # in the unit its label names
            z = (x - x.min()) / (np.ptp(x) or 1.0)
            ticks.append((f"{x.min():.3g}", f"{x.max():.3g}"))
        scaled.append(z)
    z = np.column_stack(scaled)
    cmap = plt.get_cmap("viridis")
    for i in range(len(front)):
        ax.plot(
            range(len(names)), z[i], color=cmap((colour[i] - colour.min()) / span), lw=1, alpha=0.8
        )
    for j, (lo, hi) in enumerate(ticks):
        ax.axvline(j, color="black", lw=0.6)
        ax.annotate(lo, (j, -0.04), ha="center", va="top", fontsize=7)
        ax.annotate(hi, (j, 1.04), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(
        range(len(names)), [report.label(n) for n in names], rotation=20, ha="right", fontsize=8
    )
    ax.set_yticks([])
    ax.set_ylim(-0.12, 1.12)
    ax.set_title(f"{report.study.name}: the front, coloured by {report.objectives[0]}", fontsize=9)
    fig.tight_layout()
    return fig


def _hypervolume(report, plt):
    if not report.history:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot(
        [r.evaluations for r in report.history],
        [r.hypervolume for r in report.history],
        marker="o",
        ms=3,
    )
    ax.set_xlabel("evaluations")
    ax.set_ylabel("hypervolume [1] (normalised to this run's first front)")
    ax.set_title(f"{report.study.name}: hypervolume against evaluations", fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
