"""``dse report``: one self-contained HTML page of a run's trade-off.

The page embeds plotly.js (no network needed to open it: plotly.js's basic bundle kept in
``vendor/``, :func:`plotly_bundle`) and shows: the front for each
pair of objectives over the other candidates (dominated and infeasible ones faded, hover
details), the knee and the best candidate per objective, the best for η·energy +
(1 − η)·P_max·time with η on a slider, the energy and time breakdown of those candidates,
parallel coordinates of the front over parameters and objectives, hypervolume against
evaluations, which constraints removed how many candidates, and a tornado chart of the
elasticities of the objectives to each knob at the knee (:mod:`dse.outputs.sensitivity`;
where the evaluator is cheap enough to be run again for the page).

Bounded for any run size: every front point is drawn; the other candidates are a uniform
random sample of at most ``sample_size`` (the page says which), and counts and the
infeasibility tallies are read from the evaluations slice by slice (:mod:`dse.outputs.scan`).
The figures travel as one JSON document that the page's script draws, the drawn candidates
as one table for every front figure (:class:`PointTable`): a copy of each candidate's hover
text per figure made pages of several megabytes.
"""

from __future__ import annotations

import base64
import html
import json
import re
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from dse.datasets import to_table, unit_label
from dse.errors import DseError
from dse.files import atomic_path, names_a_file_type
from dse.outputs import selection as sel
from dse.outputs.plot import COLOURS, colour_parameter, readable_unit
from dse.outputs.scan import Scan, log_tallies, scan
from dse.outputs.sensitivity import Sensitivity, at_the_knee
from dse.outputs.show import format_cell
from dse.outputs.target import output_path
from dse.pareto import objective_matrix
from dse.results import Results, open_results
from dse.study import BundlesSpec
from dse.units import shown

SAMPLE_SIZE = 10_000  # dominated and infeasible candidates drawn at most (all of a smaller run)
#: the margin around the front in its figures' view, a share of the front's span per side
#: (the front then spans 1 / (1 + 2 · 0.2) = 71 % of each axis)
VIEW_MARGIN = 0.2
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
#: plotly.js's own basic partial bundle (scatter, bar and pie traces: all the page draws),
#: 1.2 MB against the 4.8 MB of the whole bundle plotly.py ships; kept unmodified with its
#: licence and where it comes from in ``vendor/README.md``
BASIC_BUNDLE = Path(__file__).resolve().parent / "vendor" / "plotly-basic.min.js"


def report_results(
    results: Path,
    output: Path | None = None,
    *,
    sample_size: int = SAMPLE_SIZE,
    static: bool = False,
) -> list[Path]:
    """Write ``report.html`` (and with ``static`` its figures as PNG and SVG beside it)."""
    run = open_results(results)
    page = Report(run, sample_size=sample_size)
    given, output = output, output_path(output, run.path / "report.html", run.path)
    if (
        given is not None
        and output.suffix.lower() not in (".html", ".htm")
        and names_a_file_type(output.suffix)
    ):
        raise DseError(
            f"the report is an HTML page, not a {output.suffix} file",
            field="--output",
            value=str(given),
            allowed="a name ending in .html (dse plot draws .png, .svg or .pdf)",
        )
    with atomic_path(output) as tmp:
        Path(tmp).write_text(page.html(), encoding="utf-8")
    written = [output]
    if static:
        from dse.outputs.figures import write_static

        written += write_static(page, output.with_suffix(""))
    return written


class Report:
    """What the page shows, computed once (the static figures reuse it)."""

    def __init__(self, run: Results, *, sample_size: int = SAMPLE_SIZE) -> None:
        self.run, self.study = run, run.study
        self.objectives = [o.metric for o in self.study.objectives]
        self.front_ds = run.feasible_front()
        self.front = to_table(self.front_ds)
        self.params = [n for n in self.front_ds.coords if n != "candidate"]
        self.colour_by = colour_parameter(self.front_ds)
        constraint_cols = [c.metric for c in self.study.constraints]
        with run.open_dataset(front=False) as ev:  # read in slices, never whole
            self.attrs = {n: dict(ev[n].attrs) for n in ev.variables}
            self.scan: Scan = scan(
                ev,
                self.objectives,
                study=self.study,
                sample_size=sample_size,
                columns=[*self.params, *constraint_cols, "key", "reason"],
            )
            self.kept = str(ev.attrs.get("log_keeps", "all"))
        self.kept_rows = self.scan.n
        if self.kept != "all":  # the dataset holds the kept rows; the log, every row's verdict
            self.scan.n, self.scan.n_ok, self.scan.n_failed, self.scan.infeasibility = log_tallies(
                run.store.log_files(), self.study
            )
        self.history = run.state().history
        f = objective_matrix(self.front, self.study)
        self.knee = sel.knee(f)
        self.best = sel.best_per_objective(self.front, self.study)
        self.weighting = sel.weighting(self.front, self.study)
        self.energy = sel.breakdown(self.front, sel.ENERGY_PARTS, sel.ENERGY_TOTAL)
        self.time = sel.breakdown(self.front, sel.TIME_PARTS, sel.TIME_TOTAL)
        keys = set(self.front["key"].astype(str)) if "key" in self.front else set()
        s = self.scan.sample
        ok = (
            s["meets_constraints"].to_numpy(bool)
            if "meets_constraints" in s
            else np.ones(len(s), bool)
        )
        on_front = (
            s["key"].astype(str).isin(keys).to_numpy() if "key" in s else np.zeros(len(s), bool)
        )
        self.dominated, self.infeasible = s[ok & ~on_front], s[~ok]
        #: the elasticities at the knee, or why the page has none
        self.sensitivity: Sensitivity | None
        self.sensitivity, self.no_sensitivity = at_the_knee(run)
        #: objective -> (divisor, unit) it is drawn in: the study's ``display_units``, else
        #: readable for its values (:func:`~dse.units.shown`)
        self.shown = {
            m: readable_unit(
                self.unit(m), self.scan, self.front_ds, m, self.study.display_units.get(m)
            )
            for m in self.objectives
        }

    def _axis(self, name: str) -> dict:
        """A front figure's axis: title in the unit shown, ranged to the front's
        neighbourhood (its span and :data:`VIEW_MARGIN` of it on each side), so that the front
        fills most of the plot; the dominated and infeasible candidates beyond stay drawn,
        outside the view, and the figure's "all candidates" button shows them."""
        factor, unit = self.shown[name]
        v = self.front[name].to_numpy(float) / factor if name in self.front else np.empty(0, float)
        v = v[np.isfinite(v)]
        log = self.scan.log_scale(name)
        axis = dict(title=f"{name} [{unit}]" if unit else name, type="log" if log else "linear")
        if log:  # 0.09, 0.08 between the decades, not the bare digits 9, 8
            axis["minorloglabels"] = "complete"
        if len(v) and (not log or v.min() > 0):
            lo, hi = float(v.min()), float(v.max())
            a, b = (np.log10(lo), np.log10(hi)) if log else (lo, hi)
            if b > a:
                pad = VIEW_MARGIN * (b - a)
            elif log:
                pad = 0.05  # a decade's twentieth either side of a single value
            else:
                pad = max(abs(a) * 0.05, 1e-12)
            axis["range"] = [float(a - pad), float(b + pad)]
        return axis

    # -- labels --------------------------------------------------------------------------------
    def unit(self, name: str) -> str:
        return unit_label(self.attrs.get(name, {}))

    def unit_cell(self, name: str) -> str:
        """A table's unit line, as ``dse show`` writes it: ``[unit]``, ``[1]`` for a
        dimensionless number, ``[-]`` for text and flags."""
        if self.unit(name):
            return f"[{self.unit(name)}]"
        col = self.front[name] if name in self.front else None
        return "[1]" if col is not None and col.dtype.kind in "iuf" else "[-]"

    def scale(self, name: str) -> tuple[float, str]:
        """``(divisor, unit)`` a column is shown in: an objective's as the figures draw it,
        another number's in the study's ``display_units`` or readable for the front's values."""
        if name in self.shown:
            return self.shown[name]
        col = self.front[name] if name in self.front else None
        numeric = col is not None and col.dtype.kind in "iuf" and len(col) > 0
        largest = float(np.nanmax(np.abs(col.to_numpy(float)))) if numeric else np.nan
        return shown(self.unit(name), largest, self.study.display_units.get(name))

    def label(self, name: str) -> str:
        u = self.scale(name)[1]
        return f"{name} [{u}]" if u else name

    def selected(self) -> dict[str, int]:
        """Named candidates of the front: the knee, then the best per objective."""
        out = {"knee": self.knee}
        out.update({f"best {m}": i for m, i in self.best.items()})
        return out

    def sampling_note(self) -> str:
        n, k = self.scan.n, len(self.scan.sample)
        if self.kept != "all":
            which = (
                "feasible evaluations" if self.kept == "feasible" else "evaluations on the front"
            )
            drawn = (
                "all drawn" if self.scan.sampled_all else f"a uniform random sample of {k:,} drawn"
            )
            return (
                f"The study keeps only its {which} in full ({self.kept_rows:,} of {n:,}): {drawn}; the "
                "counts and tallies below are of every evaluation."
            )
        if self.scan.sampled_all:
            return f"All {n:,} evaluations are drawn; every point of the front is drawn."
        return (
            f"Every point of the front is drawn; the other candidates are a uniform random "
            f"sample of {k:,} of the {n:,} evaluations (the counts and tallies below are exact)."
        )

    # -- figures -------------------------------------------------------------------------------
    def _hover(self, df: pd.DataFrame) -> list[str]:
        cols = [c for c in [*self.params, *self.objectives] if c in df]
        parts = []
        for c in cols:
            v = df[c].to_numpy()
            factor, u = self.shown.get(c, (1.0, self.unit(c)))
            txt = [f"{x / factor:.4g}" for x in v] if v.dtype.kind == "f" else [str(x) for x in v]
            parts.append([f"{c}: {t}{' ' + u if u else ''}" for t in txt])
        return ["<br>".join(row) for row in zip(*parts, strict=True)] if parts else []

    def front_figures(self):
        import plotly.graph_objects as go

        pairs = list(combinations(self.objectives, 2)) or [(self.objectives[0], self.objectives[0])]
        groups = (
            sorted(set(self.front[self.colour_by].astype(str))) if self.colour_by else ["front"]
        )
        # each value's colour as in pareto.png: its place among the values of the feasible candidates
        every = (
            sorted(set(groups) | set(self.dominated[self.colour_by].astype(str)))
            if self.colour_by and self.colour_by in self.dominated
            else groups
        )
        fhover = self._hover(self.front)
        figs = []
        for x, y in pairs:
            (fx, _), (fy, _) = self.shown[x], self.shown[y]
            fig = go.Figure()
            for df, name, style in (
                (
                    self.infeasible,
                    "infeasible (sample)" if not self.scan.sampled_all else "infeasible",
                    dict(color="#d62728", symbol="x", size=5, opacity=0.25),
                ),
                (
                    self.dominated,
                    "dominated (sample)" if not self.scan.sampled_all else "dominated",
                    dict(color="#7f7f7f", size=5, opacity=0.3),
                ),
            ):
                d = df[np.isfinite(df[x].to_numpy(float)) & np.isfinite(df[y].to_numpy(float))]
                fig.add_trace(
                    go.Scatter(
                        x=d[x] / fx,
                        y=d[y] / fy,
                        mode="markers",
                        name=f"{name}: {len(d):,}",
                        marker=style,
                        text=self._hover(d),
                        hovertemplate="%{text}<extra>" + name + "</extra>",
                    )
                )
            for g in groups:
                m = (
                    (self.front[self.colour_by].astype(str) == g).to_numpy()
                    if self.colour_by
                    else np.ones(len(self.front), bool)
                )
                fig.add_trace(
                    go.Scatter(
                        x=self.front[x][m] / fx,
                        y=self.front[y][m] / fy,
                        mode="markers",
                        name=f"front: {self.colour_by} = {g}" if self.colour_by else "Pareto front",
                        marker=dict(
                            size=9,
                            color=COLOURS[every.index(g) % len(COLOURS)],
                            line=dict(width=1, color="black"),
                        ),
                        text=[t for t, keep in zip(fhover, m, strict=True) if keep],
                        hovertemplate="%{text}<extra>front</extra>",
                    )
                )
            for name, idx, symbol in [
                ("knee", self.knee, "star"),
                *[
                    (f"best {m}", i, BEST_SYMBOLS[k % len(BEST_SYMBOLS)])
                    for k, (m, i) in enumerate(self.best.items())
                ],
            ]:
                fig.add_trace(
                    go.Scatter(
                        x=[self.front[x].iloc[idx] / fx],
                        y=[self.front[y].iloc[idx] / fy],
                        mode="markers",
                        name=name,
                        marker=dict(
                            size=16,
                            symbol=symbol,
                            color="rgba(0,0,0,0)",
                            line=dict(width=2, color="black"),
                        ),
                        text=[fhover[idx]],
                        hovertemplate="%{text}<extra>" + name + "</extra>",
                    )
                )
            i = self.weighting.best(0.5)
            fig.add_trace(
                go.Scatter(
                    x=[self.front[x].iloc[i] / fx],
                    y=[self.front[y].iloc[i] / fy],
                    mode="markers",
                    name="best for η",
                    marker=dict(size=22, symbol="circle-open", color="#ff7f0e", line=dict(width=3)),
                    text=[fhover[i]],
                    hovertemplate="%{text}<extra>best for η</extra>",
                )
            )
            xaxis, yaxis = self._axis(x), self._axis(y)
            view = {
                f"{k}.range": a["range"]
                for k, a in (("xaxis", xaxis), ("yaxis", yaxis))
                if "range" in a
            }
            fig.update_layout(
                template="plotly_white",
                height=480,
                margin=dict(l=60, r=20, t=70, b=50),
                title=f"{x} against {y}",
                legend=dict(font=dict(size=10)),
                xaxis=xaxis,
                yaxis=yaxis,
                updatemenus=[
                    dict(
                        type="buttons",
                        direction="right",
                        x=1,
                        xanchor="right",
                        y=1.02,
                        yanchor="bottom",
                        showactive=True,
                        active=0,
                        pad=dict(r=0, t=0),
                        font=dict(size=11),
                        buttons=[
                            dict(label="front in view", method="relayout", args=[view]),
                            dict(
                                label="all candidates",
                                method="relayout",
                                args=[{"xaxis.autorange": True, "yaxis.autorange": True}],
                            ),
                        ],
                    )
                ],
            )
            figs.append(fig)
        return figs

    def _point_table(self) -> PointTable:
        """The candidates the front figures draw (the front, then the infeasible and dominated
        ones drawn), each once for all figures: a figure of each pair of objectives names
        its points by row (:meth:`PointTable.strip`), the page's script fills them in."""
        parts = [
            ("front", self.front),
            ("infeasible", self.infeasible),
            ("dominated", self.dominated),
        ]
        rows = pd.concat([df for _, df in parts], ignore_index=True)
        part = np.concatenate([np.full(len(df), name, object) for name, df in parts])
        columns = []
        for c in [*self.params, *self.objectives]:
            if c not in rows:
                continue
            v = rows[c].to_numpy()
            factor, u = self.shown.get(c, (1.0, self.unit(c)))
            if c in self.shown:  # an objective: its values in the unit shown, as float32
                columns.append({"name": c, "unit": u, "values": _packed(v.astype(float) / factor)})
                continue
            text = [f"{x / factor:.4g}" for x in v] if v.dtype.kind == "f" else [str(x) for x in v]
            labels, codes = np.unique(np.asarray(text, dtype=object), return_inverse=True)
            columns.append(
                {"name": c, "unit": u, "labels": labels.tolist(), "codes": _packed(codes)}
            )
        return PointTable(rows, part, columns, self.colour_by)

    def breakdown_figure(self):
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        parts = self.breakdowns()
        if not parts:
            return None
        names = [*self.selected(), "best for η"]
        rows = [*self.selected().values(), self.weighting.best(0.5)]
        fig = make_subplots(rows=1, cols=len(parts), subplot_titles=[t for t, *_ in parts])
        for col, (title, table, factor, unit) in enumerate(parts, start=1):
            for k, comp in enumerate(table.columns):
                fig.add_trace(
                    go.Bar(
                        x=names,
                        y=table[comp].to_numpy()[rows] / factor,
                        name=f"{comp}",
                        legendgroup=title,
                        legendgrouptitle_text=title,
                        marker_color=COLOURS[k % len(COLOURS)],
                        hovertemplate="%{x}: %{y:.4g}<extra>" + comp + "</extra>",
                    ),
                    row=1,
                    col=col,
                )
            fig.update_yaxes(title_text=f"{title} [{unit}]", row=1, col=col)
        fig.update_layout(
            template="plotly_white",
            barmode="stack",
            height=460,
            margin=dict(l=60, r=20, t=60, b=90),
            legend=dict(font=dict(size=10)),
        )
        return fig

    def breakdowns(self) -> list[tuple[str, pd.DataFrame, float, str]]:
        """``(title, components, divisor, unit)`` of the energy and time breakdowns the
        evaluator reports, in units readable for the largest total on the front."""
        out = []
        for title, table, unit, total in (
            ("energy to train", self.energy, "J", sel.ENERGY_TOTAL),
            ("time per iteration", self.time, "s", sel.TIME_TOTAL),
        ):
            if table is not None:
                largest = float(np.nanmax(table.to_numpy().sum(axis=1))) if len(table) else np.nan
                factor, name = shown(unit, largest, self.study.display_units.get(total))
                out.append((title, table, factor, name))
        return out

    def tornado_figure(self):
        """The elasticities of the objectives to each numeric knob at the knee, largest at
        the top (a tornado chart); None without them."""
        import plotly.graph_objects as go

        sens = self.sensitivity
        if sens is None or not len(sens.elasticity):
            return None
        knobs = sens.ranking()[::-1]  # plotly draws the first category at the bottom
        methods = {k.name: k.method for k in sens.knobs}
        fig = go.Figure()
        for k, metric in enumerate(sens.objectives):
            values = sens.elasticity.loc[knobs, metric].to_numpy(float)
            fig.add_trace(
                go.Bar(
                    y=knobs,
                    x=values,
                    orientation="h",
                    name=f"d ln {metric} / d ln knob",
                    marker_color=COLOURS[k % len(COLOURS)],
                    customdata=[methods[n] for n in knobs],
                    hovertemplate="%{y}: %{x:+.3f} (%{customdata})<extra>" + metric + "</extra>",
                )
            )
        fig.update_layout(
            template="plotly_white",
            barmode="group",
            height=160 + 48 * len(knobs),
            margin=dict(l=160, r=20, t=40, b=60),
            xaxis_title="elasticity [1]: % change of the objective per +1 % of the knob",
            legend=dict(orientation="h", y=1.02, yanchor="bottom"),
        )
        fig.add_vline(x=0, line_width=1, line_color="#444")
        return fig

    def _sensitivity_note(self) -> str:
        sens = self.sensitivity
        if sens is None:
            return f"<p>{html.escape(self.no_sensitivity)}</p>"
        text = (
            f"The knee (candidate key {sens.key}) evaluated again by the study's evaluator with "
            "each knob moved, the others held: a real-valued knob by a central difference of "
            f"±{100 * sens.step:.3g} % (on ln x), a whole-number one between the study's "
            "neighbouring values (an arc elasticity), ranked by the largest over the "
            f"objectives. `dse sensitivity {self.run.path}` prints them with the breakdown "
            "that explains them, the text knobs' alternatives and variance-based indices over "
            "the whole space."
        )
        notes = "".join(f"<p><small>{html.escape(n)}</small></p>" for n in sens.notes)
        return f"<p>{html.escape(text)}</p>{notes}"

    def parallel_figure(self):
        """Parallel coordinates of the front, drawn with scatter lines (the page's plotly.js
        bundle has no ``parcoords``): an evenly spaced vertical axis per parameter and
        objective, each design a polyline through its values scaled to [0, 1] on each axis,
        the axis's own ticks written beside it in the unit the tables use; the designs coloured
        by the first objective, the knee and the best per objective on top (in the symbols of
        the front figures); a point's hover gives its design's values with units."""
        import plotly.graph_objects as go
        from plotly.colors import sample_colorscale, unlabel_rgb

        axes = [self._parallel_axis(n) for n in [*self.params, *self.objectives]]
        n, d = len(self.front), len(axes)
        x = list(range(d))
        y = np.column_stack([a.scaled for a in axes]) if axes else np.empty((n, 0))
        hover = self._hover(self.front)
        first = self.objectives[0]
        factor, _ = self.scale(first)
        colour = self.front[first].to_numpy(float) / factor
        ok = np.isfinite(colour)
        lo, hi = (float(colour[ok].min()), float(colour[ok].max())) if ok.any() else (0.0, 1.0)
        t = np.where(ok, (colour - lo) / (hi - lo) if hi > lo else 0.5, 0.0)
        colours = [  # as #rrggbb: shorter than rgb(r, g, b)
            "#{:02x}{:02x}{:02x}".format(*(round(v) for v in unlabel_rgb(c)))
            for c in (sample_colorscale("Viridis", t.tolist()) if n else [])
        ]
        fig = go.Figure()
        for i in range(n):  # one trace a design: its hover text is written once, not per point
            fig.add_trace(
                go.Scatter(  # x: 0, 1, ... (plotly's x0 = 0, dx = 1), written once per figure
                    y=_json_floats(np.round(y[i], 5)),
                    mode="lines",
                    line=dict(color=colours[i], width=1.2),
                    opacity=0.7,
                    name=f"front #{i + 1}",
                    showlegend=False,
                    text=f"front #{i + 1}<br>{hover[i]}",
                    hovertemplate="%{text}<extra></extra>",
                )
            )
        named = [
            ("knee", self.knee, "star", "#000000"),
            *[
                (
                    f"best {m}",
                    i,
                    BEST_SYMBOLS[k % len(BEST_SYMBOLS)],
                    HIGHLIGHT_COLOURS[k % len(HIGHLIGHT_COLOURS)],
                )
                for k, (m, i) in enumerate(self.best.items())
            ],
        ]
        for name, i, symbol, col in named:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=_json_floats(np.round(y[i], 5)),
                    mode="lines+markers",
                    line=dict(color=col, width=3.5),
                    marker=dict(
                        size=11, symbol=symbol, color=col, line=dict(width=1, color="white")
                    ),
                    name=name,
                    legendgroup="highlighted",
                    text=f"{name}: front #{i + 1}<br>{hover[i]}",
                    hovertemplate="%{text}<extra></extra>",
                )
            )
        # the colour scale of the first objective (an invisible point carries its colour bar)
        fig.add_trace(
            go.Scatter(
                x=[0],
                y=[0],
                mode="markers",
                marker=dict(
                    size=0.1,
                    opacity=0,
                    color=[lo],
                    cmin=lo,
                    cmax=hi,
                    colorscale="Viridis",
                    showscale=True,
                    colorbar=dict(title=dict(text=self.label(first), side="right"), len=0.8),
                ),
                hoverinfo="skip",
                showlegend=False,
                name="colour scale",
            )
        )
        shapes, notes = [], []
        for k, a in enumerate(axes):
            shapes.append(
                dict(
                    type="line",
                    name="axis",
                    xref="x",
                    yref="y",
                    x0=k,
                    x1=k,
                    y0=0,
                    y1=1,
                    layer="below",
                    line=dict(color="#444", width=1),
                )
            )
            notes.append(
                dict(
                    x=k,
                    y=1.04,
                    xref="x",
                    yref="y",
                    text=html.escape(a.title),
                    showarrow=False,
                    textangle=-25,
                    xanchor="left",
                    yanchor="bottom",
                    font=dict(size=12),
                )
            )
            for pos, label in a.ticks:
                notes.append(
                    dict(
                        x=k,
                        y=pos,
                        xref="x",
                        yref="y",
                        text=html.escape(label),
                        showarrow=False,
                        xanchor="right",
                        xshift=-9,
                        bgcolor="rgba(255,255,255,0.75)",  # over the lines that pass
                        font=dict(size=10, color="#444"),
                    )
                )
        fig.update_layout(
            template="plotly_white",
            height=520,
            margin=dict(l=80, r=40, t=130, b=40),
            xaxis=dict(visible=False, range=[-0.6, max(d - 1, 0) + 0.3], fixedrange=True),
            yaxis=dict(visible=False, range=[-0.05, 1.04], fixedrange=True),
            shapes=shapes,
            annotations=notes,
            hovermode="closest",
            legend=dict(orientation="h", y=-0.02, yanchor="top", font=dict(size=11)),
        )
        return fig

    def _parallel_axis(self, name: str) -> ParallelAxis:
        """One axis of the parallel coordinates: the front's values of ``name`` scaled to
        [0, 1] (text in sorted order, evenly spaced), and its ticks as ``(place, label)``
        in the unit the tables use (the values themselves where there are few)."""
        v = self.front[name]
        if v.dtype.kind in "OUSb":
            cats = sorted(set(v.astype(str)))
            span = max(len(cats) - 1, 1)
            place = {c: (i / span if len(cats) > 1 else 0.5) for i, c in enumerate(cats)}
            return ParallelAxis(
                name, np.array([place[c] for c in v.astype(str)]), [(place[c], c) for c in cats]
            )
        factor, unit = self.scale(name)
        values = v.to_numpy(float) / factor
        title = f"{name} [{unit}]" if unit else name
        finite = values[np.isfinite(values)]
        if not len(finite):
            return ParallelAxis(title, np.full(len(values), np.nan), [])
        lo, hi = float(finite.min()), float(finite.max())
        if hi <= lo:
            return ParallelAxis(
                title, np.where(np.isfinite(values), 0.5, np.nan), [(0.5, _tick(lo))]
            )
        distinct = np.unique(finite)
        if len(distinct) <= 6:
            ticks = distinct
        else:
            from matplotlib.ticker import MaxNLocator

            ticks = MaxNLocator(nbins=5).tick_values(lo, hi)
            ticks = ticks[(ticks >= lo - 1e-9 * (hi - lo)) & (ticks <= hi + 1e-9 * (hi - lo))]
        scaled = (values - lo) / (hi - lo)
        return ParallelAxis(title, scaled, [(float((t - lo) / (hi - lo)), _tick(t)) for t in ticks])

    def hypervolume_figure(self):
        import plotly.graph_objects as go

        if not self.history:
            return None
        h = self.history[:: max(1, len(self.history) // 2000)] + self.history[-1:]
        fig = go.Figure(
            go.Scatter(
                x=[r.evaluations for r in h],
                y=[r.hypervolume for r in h],
                mode="lines+markers",
                name="hypervolume",
                hovertemplate="%{x:,} evaluations: %{y:.4f}<extra></extra>",
            )
        )
        fig.update_layout(
            template="plotly_white",
            height=360,
            margin=dict(l=60, r=20, t=40, b=50),
            xaxis_title="evaluations",
            yaxis_title="hypervolume [1] (normalised to this run's first front)",
            title="hypervolume of the front against evaluations"
            + (
                " (one batch: the run evaluated everything at once)"
                if len(self.history) == 1
                else ""
            ),
        )
        fig.update_xaxes(
            rangemode="tozero"
        )  # one batch: its point at its evaluations, not alone on 399-401
        return fig

    def constraints_figure(self):
        import plotly.graph_objects as go

        reasons = self.scan.infeasibility
        if not reasons:
            return None
        fig = go.Figure(
            go.Bar(
                y=[r for r, _ in reasons][::-1],
                x=[n for _, n in reasons][::-1],
                orientation="h",
                hovertemplate="%{y}: %{x:,} candidates<extra></extra>",
            )
        )
        fig.update_layout(
            template="plotly_white",
            height=120 + 40 * len(reasons),
            margin=dict(l=20, r=20, t=40, b=50),
            xaxis_title="candidates removed",
            yaxis=dict(automargin=True),
            title="what removed candidates",
        )
        return fig

    # -- the page ------------------------------------------------------------------------------
    def html(self) -> str:
        pairs = list(combinations(self.objectives, 2)) or [(self.objectives[0],) * 2]
        figures = [("front", f) for f in self.front_figures()]
        for key, fig in (
            ("breakdown", self.breakdown_figure()),
            ("tornado", self.tornado_figure()),
            ("parallel", self.parallel_figure()),
            ("hypervolume", self.hypervolume_figure()),
            ("constraints", self.constraints_figure()),
        ):
            if fig is not None:
                figures.append((key, fig))
        from plotly.io.json import to_json_plotly

        points, drawn, parallel = self._point_table(), [], None
        divs: dict[str, list[str]] = {}
        specs = []
        for n, (key, fig) in enumerate(figures):
            div = f"{key}-{n}"
            if key == "front":  # the points' values and hover texts come from the page's table
                fig, traces = points.strip(fig, *pairs[n])
                drawn.append({"div": div, "traces": traces})
            elif key == "parallel":  # a design's hover text: its row of the table (the front first)
                fig, traces = points.strip_parallel(fig)
                parallel = {"div": div, "traces": traces}
            fig.layout.template = {}  # the page's one template, set by its script
            specs.append(f'{{"div": "{div}", "figure": {fig.to_json(validate=False)}}}')
            divs.setdefault(key, []).append(
                f'<div id="{div}" class="plotly-graph-div" '
                f'style="height:{fig.layout.height}px; width:100%;"></div>'
            )
        # plotly's JSON writes <, > and / as \u escapes: safe inside a <script> element
        figures_json = (
            f'{{"config": {to_json_plotly(PLOTLY_CONFIG)}, '
            f'"template": {to_json_plotly(_template().to_plotly_json())}, '
            f'"figures": [{", ".join(specs)}]}}'
        )
        data = self._page_data(
            [f"front-{n}" for n, (k, _) in enumerate(figures) if k == "front"],
            next((f"breakdown-{n}" for n, (k, _) in enumerate(figures) if k == "breakdown"), None),
        )
        data.update(points=points.columns, drawn=drawn, parallel=parallel)
        plotly_js, bundle_note = plotly_bundle()
        return PAGE.format(
            title=html.escape(f"dse report: {self.study.name}"),
            plotly=plotly_js,
            bundle_note=html.escape(bundle_note),
            summary=self._summary(),
            sampling=html.escape(self.sampling_note()),
            fronts="\n".join(divs["front"]),
            formula=html.escape(self.weighting.formula),
            choice=html.escape(self._choice_text(0.5)),
            choice_row=self.weighting.best(0.5),
            against=html.escape(self._against_knee(self.weighting.best(0.5))),
            selected=self._selected_table(),
            knee=html.escape(sel.KNEE_SENTENCE),
            tradeoffs=self._tradeoff_table(),
            front_table=self._front_table(),
            breakdown="\n".join(divs.get("breakdown", [])) or self._no_breakdown(),
            sensitivity=self._sensitivity_note() + "\n".join(divs.get("tornado", [])),
            parallel="\n".join(divs["parallel"]),
            hypervolume="\n".join(divs.get("hypervolume", []))
            or "<p>No progress history in state.json.</p>",
            constraints=self._constraints_table() + "\n".join(divs.get("constraints", [])),
            data=json.dumps(data).replace("</", "<\\/"),
            figures=figures_json,
            script=SCRIPT,
        )

    def _summary(self) -> str:
        s, a = self.scan, self.front_ds.attrs
        front = str(a.get("front", ""))
        items = [
            (
                "study",
                self.study.name + (f": {self.study.description}" if self.study.description else ""),
            ),
            (
                "software",
                str(
                    a.get("source", f"evaluator {a.get('evaluator')} {a.get('evaluator_version')}")
                ),
            ),
            ("fixed", str(a.get("fixed", "")) or "none"),
            ("search space", "; ".join(f"{n}: {_values(v)}" for n, v in self.study.space.items())),
            ("search", str(a.get("search", self.run.state().algorithm))),
            (
                "front",
                f"{front}: {a.get('front_detail')}"
                if front and a.get("front_detail")
                else front or "?",
            ),
            ("evaluations", f"{s.n:,}"),
            ("feasible and within constraints", f"{s.n_ok:,}"),
            ("failed", f"{s.n_failed:,}"),
            ("on the front", f"{len(self.front):,}"),
            ("objectives", ", ".join(f"{o.direction} {o.metric}" for o in self.study.objectives)),
            ("constraints", "; ".join(str(c) for c in self.study.constraints) or "none"),
        ]
        listed = (
            "<dl>"
            + "".join(f"<dt>{k}</dt><dd>{html.escape(str(v))}</dd>" for k, v in items)
            + "</dl>"
        )
        return listed + "".join(f'<p class="caveat">{html.escape(c)}</p>' for c in self.caveats())

    def caveats(self) -> list[str]:
        """What a reader must know before trusting the front: that it is approximate, and
        which of its values the evaluator marks as estimated (an attribute ``*_estimated``
        listing values, e.g. the analytic evaluator's accelerators without measured runs)."""
        a, out = self.front_ds.attrs, []
        if a.get("front") == "approximate":
            out.append(
                f"The front is approximate: {a.get('front_detail', 'the search did not prove it')}. "
                "A larger budget, or `dse resume` with one, may still change it."
            )
        for key, listed in a.items():
            if not key.endswith("_estimated") or not isinstance(listed, str):
                continue
            estimated = {v.strip() for v in listed.split(",") if v.strip()}
            for name in self.params:
                found = sorted(estimated & set(self.front[name].astype(str)))
                if found:
                    share = self.front[name].astype(str).isin(found).mean()
                    note = a.get(key.removesuffix("_estimated") + "_note", "")
                    out.append(
                        f"{share:.0%} of the front runs on {name} {', '.join(found)}, whose model numbers "
                        f"are estimated, not fitted to measured runs"
                        + (f" ({note})" if note else "")
                        + "."
                    )
        return out

    def _row_text(self, i: int) -> str:
        r = self.front.iloc[i]
        p = ", ".join(f"{n}={format_cell(r[n])}" for n in self.params)
        o = ", ".join(
            f"{n} {format_cell(r[n] / self.shown[n][0])} {self.shown[n][1]}".rstrip()
            for n in self.objectives
        )
        return f"front #{i + 1}: {p}; {o}"  # numbered as `dse show` numbers the front (by the first objective)

    def _against_knee(self, i: int) -> str:
        """The best for η against the knee, per objective, in percent (as the page's script
        says it when η moves)."""
        if i == self.knee:
            return "against the knee: the knee itself"
        k = self.knee
        parts = []
        for m in self.objectives:
            a, b = float(self.front[m].iloc[i]), float(self.front[m].iloc[k])
            parts.append(f"{m} {_percent(100 * (a - b) / abs(b) if b else np.nan)}")
        return "against the knee: " + ", ".join(parts)

    def _choice_text(self, eta: float) -> str:
        return f"η = {eta:.2f}: {self._row_text(self.weighting.best(eta))}"

    def _table(self, table_id: str, rows: list[tuple[list[str], int]], first: list[str]) -> str:
        """A table of front points: ``first`` columns of text given per row, then the
        objectives (in the units the figures use; a wide table scrolls, so they come first)
        and the parameters."""
        cols = [*self.objectives, *self.params]

        def unit(c):
            return (
                f"[{self.shown[c][1]}]"
                if c in self.shown and self.shown[c][1]
                else self.unit_cell(c)
            )

        def cell(c, v):
            return format_cell(v / self.shown[c][0] if c in self.shown else v)

        head = "".join(f"<th>{html.escape(c)}</th>" for c in first) + "".join(
            f"<th>{html.escape(c)}<br><small>{html.escape(unit(c))}</small></th>" for c in cols
        )
        body = "".join(
            "<tr>"
            + "".join(f"<td>{html.escape(t)}</td>" for t in texts)
            + "".join(f"<td>{html.escape(cell(c, self.front[c].iloc[i]))}</td>" for c in cols)
            + "</tr>"
            for texts, i in rows
        )
        return f'<div class="wide"><table id="{table_id}"><tr>{head}</tr>{body}</table></div>'

    def _selected_table(self) -> str:
        return self._table(
            "selected",
            [([name, str(i + 1)], i) for name, i in self.selected().items()],
            ["candidate", "front #"],
        )

    def tradeoffs(self) -> dict[tuple[str, str], dict[str, float]]:
        """Each named design against each other one, per objective, in percent."""
        return sel.tradeoffs(self.front, self.selected(), self.objectives)

    def _tradeoff_table(self) -> str:
        """Rows: a named design; columns: another; a cell: what the row's design gives and
        takes against the column's, per objective, in percent (+: more of it)."""
        names = list(self.selected())
        t = self.tradeoffs()

        def cell(a: str, b: str) -> str:
            if a == b or self.selected()[a] == self.selected()[b]:
                return "same design" if a != b else "–"
            return "<br>".join(html.escape(f"{m} {_percent(v)}") for m, v in t[(a, b)].items())

        head = "<th>against →</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in names)
        body = "".join(
            f"<tr><td>{html.escape(a)}</td>"
            + "".join(f"<td>{cell(a, b)}</td>" for b in names)
            + "</tr>"
            for a in names
        )
        return (
            f'<div class="wide"><table id="tradeoffs"><tr>{head}</tr>{body}</table></div>'
            "<p><small>Each cell: the row's design against the column's, per objective, as "
            "100 · (row − column) / |column| [%]; + is more of the objective, − less (for an objective minimised, − is the gain).</small></p>"
        )

    def _front_table(self) -> str:
        """Every front point, numbered as `dse show` numbers them."""
        return self._table(
            "front", [([str(i + 1)], i) for i in range(len(self.front))], ["front #"]
        )

    def _no_breakdown(self) -> str:
        metrics = [m for ms in (*sel.ENERGY_PARTS.values(), *sel.TIME_PARTS.values()) for m in ms]
        return (
            f"<p>The evaluator '{html.escape(str(self.front_ds.attrs.get('evaluator')))}' reports "
            f"no energy or time components ({html.escape(', '.join(metrics))}).</p>"
        )

    def _constraints_table(self) -> str:
        s = self.scan
        if not s.infeasibility:
            return f"<p>No candidate was removed: all {s.n:,} evaluations are feasible.</p>"
        rows = "".join(
            f"<tr><td>{html.escape(r)}</td><td>{n:,}</td><td>{100 * n / s.n:.1f} %</td></tr>"
            for r, n in s.infeasibility
        )
        return (
            '<table id="constraints"><tr><th>removed by</th><th>candidates</th><th>of all</th></tr>'
            f"{rows}</table><p><small>A candidate the evaluator rejected counts once, under its "
            "reason; any other counts under every constraint it violates.</small></p>"
        )

    def _page_data(self, front_divs: list[str], breakdown_div: str | None) -> dict:
        pairs = list(combinations(self.objectives, 2)) or [(self.objectives[0], self.objectives[0])]
        rows = list(self.selected().values())
        comps = [
            [
                [
                    _json_floats(table[c].to_numpy()[rows] / factor, 8),
                    _json_floats(table[c] / factor, 8),
                ]
                for c in table.columns
            ]
            for _, table, factor, _ in self.breakdowns()
        ]
        return {
            "a": _json_floats(self.weighting.a),
            "b": _json_floats(self.weighting.b),
            "text": [self._row_text(i) for i in range(len(self.front))],
            "knee": self.knee,
            "objectives": [
                {"name": m, "values": _json_floats(self.front[m], 8)} for m in self.objectives
            ],
            "fronts": [
                {
                    "div": d,
                    "x": _json_floats(self.front[x] / self.shown[x][0], 8),
                    "y": _json_floats(self.front[y] / self.shown[y][0], 8),
                }
                for d, (x, y) in zip(front_divs, pairs, strict=True)
            ],
            "breakdown": {"div": breakdown_div, "components": comps},
        }


class PointTable(NamedTuple):
    """The front figures' candidates once for all figures (:meth:`Report._point_table`):
    ``columns`` as the page's data holds them (an objective by its values in the unit shown,
    any other column by its distinct labels and each row's code)."""

    rows: pd.DataFrame
    part: np.ndarray  # "front", "infeasible" or "dominated", per row
    columns: list[dict]
    colour_by: str | None

    def strip(self, fig, x: str, y: str) -> tuple[object, list[dict]]:
        """A front figure without the values and hover texts of its candidates' traces, and
        for each such trace what the page's script fills it with: the objectives ``x``
        and ``y`` at its rows (``[start, stop)`` ranges of the table)."""
        import plotly.graph_objects as go

        fig = go.Figure(fig)
        names = [c["name"] for c in self.columns]
        traces = []
        for i, t in enumerate(fig.data):
            kind = t.name.split(" ")[0].split(":")[0]
            if kind in ("infeasible", "dominated"):
                mask = self.part == kind
            elif t.name == "Pareto front" or t.name.startswith("front: "):
                mask = self.part == "front"
                if t.name.startswith("front: ") and self.colour_by:
                    g = t.name.split(" = ", 1)[1]
                    mask = mask & (self.rows[self.colour_by].astype(str) == g).to_numpy()
            else:
                continue
            if kind in ("infeasible", "dominated"):  # drawn where both objectives are numbers
                for c in (x, y):
                    mask = mask & np.isfinite(self.rows[c].to_numpy(float))
            traces.append(
                {"trace": i, "x": names.index(x), "y": names.index(y), "rows": _ranges(mask)}
            )
            t.update(x=[], y=[], text=None)
        return fig, traces

    def strip_parallel(self, fig) -> tuple[object, list[list[int]]]:
        """The parallel coordinates without their designs' hover texts, and for each such
        trace its row of the table (a front design's row is its place on the front)."""
        import plotly.graph_objects as go

        fig, traces = go.Figure(fig), []
        for i, t in enumerate(fig.data):
            if t.name.startswith("front #"):
                traces.append([i, int(t.name.removeprefix("front #")) - 1])
                t.text = None
        return fig, traces


def _ranges(mask: np.ndarray) -> list[list[int]]:
    """The ``[start, stop)`` runs where ``mask`` holds."""
    idx = np.flatnonzero(mask)
    if not len(idx):
        return []
    breaks = np.flatnonzero(np.diff(idx) > 1)
    starts = np.concatenate([[idx[0]], idx[breaks + 1]])
    stops = np.concatenate([idx[breaks], [idx[-1]]]) + 1
    return [[int(a), int(b)] for a, b in zip(starts, stops, strict=True)]


def _packed(values: np.ndarray) -> dict:
    """A column of the page's table, little-endian and base64-encoded (a third to a half of
    its size as JSON numbers): real numbers as float32 (seven significant digits: the
    figures and their four-digit hover texts, rounded again from these, read as the tables
    in all but rare ties; NaN for none), codes as the smallest unsigned integers that hold them."""
    v = np.asarray(values)
    if v.dtype.kind == "f":
        dtype = "<f4"
    else:
        top = int(v.max()) if len(v) else 0
        dtype = next(f"<u{n}" for n in (1, 2, 4) if top < 2 ** (8 * n) or n == 4)
    return {"dtype": dtype[1:], "b64": base64.b64encode(v.astype(dtype).tobytes()).decode("ascii")}


def _template():
    """The page's figures' template: plotly_white's layout and its scatter, bar and pie
    defaults (its defaults for the other trace types are bytes each figure carried for
    nothing)."""
    import plotly.graph_objects as go
    import plotly.io as pio

    white = pio.templates["plotly_white"]
    return go.layout.Template(
        layout=white.layout, data={k: getattr(white.data, k) for k in ("scatter", "bar", "pie")}
    )


class ParallelAxis(NamedTuple):
    """An axis of the parallel coordinates: its title, the front's values scaled to [0, 1]
    on it, and its ticks as ``(place in [0, 1], label)``."""

    title: str
    scaled: np.ndarray
    ticks: list[tuple[float, str]]


def _tick(value: float) -> str:
    """A tick label: four significant digits, no exponent for everyday sizes."""
    return f"{float(value):.4g}"


def plotly_bundle() -> tuple[str, str]:
    """``(plotly.js, a note for the page's footer)``: the basic bundle kept with dse where
    it is the plotly.js version plotly.py draws for, else the whole bundle plotly.py ships
    (so that a plotly upgrade makes the page larger, never broken)."""
    import plotly
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    wanted = get_plotlyjs_version()
    try:
        basic = BASIC_BUNDLE.read_text(encoding="utf-8")
    except OSError:
        basic = ""
    found = re.search(r"plotly\.js \(basic - minified\) v(\S+)", basic[:400])
    if found and found[1] == wanted:
        return (
            basic,
            f"Drawn with plotly.js {wanted} (its basic bundle: scatter, bar and pie), embedded in this page.",
        )
    have = f"is plotly.js {found[1]}" if found else "is missing"
    return get_plotlyjs(), (
        f"Drawn with the whole plotly.js {wanted} bundle (about 4.8 MB) embedded in this page: the "
        f"basic bundle kept with dse (dse/outputs/vendor) {have}, not the {wanted} that plotly "
        f"{plotly.__version__} draws for; refresh it as dse/outputs/vendor/README.md says."
    )


def _values(spec) -> str:
    """A search-space entry in a few words: a list of values, its range, or its bundles
    with the inputs each sets."""
    if isinstance(spec, BundlesSpec):
        return " | ".join(
            f"{name} ({', '.join(f'{k} {v}' for k, v in inputs.items())})"
            for name, inputs in spec.bundles.items()
        )
    if isinstance(spec, list):
        return (
            ", ".join(map(str, spec))
            if len(spec) <= 8
            else f"{len(spec)} values, {spec[0]} to {spec[-1]}"
        )
    if hasattr(spec, "model_dump"):
        return ", ".join(f"{k} {v}" for k, v in spec.model_dump(exclude_none=True).items())
    return str(spec)


def _percent(v: float) -> str:
    """A signed percentage, ``+12.3 %``, ``−4.0 %``; ``n/a`` where it has no value."""
    if not np.isfinite(v):
        return "n/a"
    return f"{'+' if v >= 0 else '−'}{abs(v):.1f} %"


def _json_floats(values, digits: int | None = None) -> list:
    """Numbers for the page's JSON, None where there is none; with ``digits``, to that many
    significant digits (what a figure or a percentage needs, and fewer bytes)."""
    v = np.asarray(values, float)
    if digits is None:
        return [None if not np.isfinite(x) else float(x) for x in v]
    return [None if not np.isfinite(x) else float(f"{x:.{digits}g}") for x in v]


#: the colours of the best per objective in the parallel coordinates (the knee is black)
HIGHLIGHT_COLOURS = ["#d62728", "#ff7f0e", "#e377c2", "#8c564b", "#17becf"]

#: the "best per objective" markers, one shape each (open, over the front's filled points)
BEST_SYMBOLS = [
    "diamond",
    "square",
    "triangle-up",
    "triangle-down",
    "pentagon",
    "hexagon",
    "cross",
    "x",
]

# The η slider: the best candidate for the weighting is recomputed in the page and the
# "best for η" marker (the last trace of each front figure) and breakdown bar move to it.
# Each breakdown trace is [values of the named candidates, that component on the whole front].
SCRIPT = """
(function () {
  const data = JSON.parse(document.getElementById("dse-data").textContent);
  const slider = document.getElementById("eta"), out = document.getElementById("eta-value"),
        choice = document.getElementById("eta-choice");
  function best(eta) {
    let k = 0, lo = Infinity;
    for (let i = 0; i < data.a.length; i++) {
      const s = eta * data.a[i] + (1 - eta) * data.b[i];
      if (s < lo) { lo = s; k = i; }
    }
    return k;
  }
  // a move: one update of each figure it changes, as an animation without transition or
  // redraw (plotly recomputes and draws only the traces given: about a third of the time a
  // restyle takes, which redraws the whole figure); the first drawing, a restyle.
  // slider.pending resolves once the figures are drawn.
  const QUICK = {transition: {duration: 0}, frame: {duration: 0, redraw: false}, mode: "immediate"};
  function redraw(div, traces, updates, first) {
    if (!first) return Plotly.animate(div, {data: updates, traces: traces}, QUICK);
    const r = {};
    for (const key of Object.keys(updates[0])) r[key] = updates.map(function (u) { return u[key]; });
    return Plotly.restyle(div, r, traces);
  }
  function update(first) {
    const eta = Number(slider.value), k = best(eta);
    out.textContent = eta.toFixed(2);
    choice.textContent = "\\u03b7 = " + eta.toFixed(2) + ": " + data.text[k];
    slider.pending = Promise.resolve();
    if (String(k) === choice.dataset.row && !first) return;  // the same design: nothing to redraw
    choice.dataset.row = String(k);
    const against = document.getElementById("eta-against");
    if (k === data.knee) {
      against.textContent = "against the knee: the knee itself";
    } else {
      against.textContent = "against the knee: " + data.objectives.map(function (o) {
        const a = o.values[k], b = o.values[data.knee];
        if (a === null || b === null || b === 0) return o.name + " n/a";
        const p = 100 * (a - b) / Math.abs(b);
        return o.name + " " + (p >= 0 ? "+" : "\u2212") + Math.abs(p).toFixed(1) + " %";
      }).join(", ");
    }
    const drawn = [];
    for (const f of data.fronts) {  // the "best for \\u03b7" marker: each figure's last trace
      const div = document.getElementById(f.div);
      drawn.push(redraw(div, [div.data.length - 1],
                        [{x: [f.x[k]], y: [f.y[k]], text: [data.text[k]]}], first));
    }
    const b = data.breakdown;
    if (b.div) {  // every bar trace in one update: one redraw per move, not one per trace
      const ys = [], traces = [];
      for (const part of b.components) {
        for (const [fixed, values] of part) {
          ys.push({y: fixed.concat([values[k]])}); traces.push(traces.length);
        }
      }
      drawn.push(redraw(document.getElementById(b.div), traces, ys, first));
    }
    slider.pending = Promise.all(drawn);
  }
  // the front figures' candidates: one table for all figures (objectives in the unit
  // shown, other columns as labels), each figure's traces naming their rows
  function g4(v) {  // Python's format(v, ".4g")
    if (v === null) return "nan";
    if (v === 0) return "0";
    const e = Math.floor(Math.log10(Math.abs(Number(v.toPrecision(4)))));
    if (e < -4 || e >= 4) {
      const [m, x] = v.toExponential(3).split("e"), n = Number(x);
      return m.replace(/\\.?0+$/, "") + "e" + (n < 0 ? "-" : "+") + String(Math.abs(n)).padStart(2, "0");
    }
    return String(Number(v.toPrecision(4)));
  }
  function unpack(p) {  // a packed column: little-endian float32 or unsigned integers
    const s = atob(p.b64), bytes = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
    const v = new DataView(bytes.buffer), size = Number(p.dtype.slice(1));
    const get = {f4: (i) => v.getFloat32(i, true), u1: (i) => v.getUint8(i),
                 u2: (i) => v.getUint16(i, true), u4: (i) => v.getUint32(i, true)}[p.dtype];
    const out = new Array(bytes.length / size);
    for (let i = 0; i < out.length; i++) {
      const x = get(i * size);
      out[i] = Number.isNaN(x) ? null : x;
    }
    return out;
  }
  const cols = data.points.map(function (c) {
    return c.values ? {name: c.name, unit: c.unit, values: unpack(c.values)}
                    : {name: c.name, unit: c.unit, labels: c.labels, codes: unpack(c.codes)};
  });
  function hover(i) { return cols.map(function (c) { return cell(c, i); }).join("<br>"); }
  function cell(c, i) {
    const t = c.values ? g4(c.values[i]) : c.labels[c.codes[i]];
    return c.name + ": " + t + (c.unit ? " " + c.unit : "");
  }
  // every figure: drawn here, after its candidates are filled in from the table
  const figs = JSON.parse(document.getElementById("dse-figures").textContent), byDiv = {};
  for (const f of figs.figures) byDiv[f.div] = f.figure;
  for (const f of data.drawn) {
    const traces = byDiv[f.div].data;
    for (const t of f.traces) {
      const x = [], y = [], text = [], cx = cols[t.x].values, cy = cols[t.y].values;
      for (const [a, b] of t.rows) {
        for (let i = a; i < b; i++) { x.push(cx[i]); y.push(cy[i]); text.push(hover(i)); }
      }
      Object.assign(traces[t.trace], {x: x, y: y, text: text});
    }
  }
  if (data.parallel) {  // each design's line of the parallel coordinates: its row on the front
    const traces = byDiv[data.parallel.div].data;
    for (const [t, i] of data.parallel.traces) traces[t].text = "front #" + (i + 1) + "<br>" + hover(i);
  }
  for (const f of figs.figures) {
    f.figure.layout.template = figs.template;
    Plotly.newPlot(f.div, f.figure.data, f.figure.layout, figs.config);
  }
  slider.addEventListener("input", function () { update(false); });
  update(true);
})();
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }}
dl {{ display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }} dt {{ font-weight: 600; }}
table {{ border-collapse: collapse; font-size: .9em; margin: .5em 0; }}
td, th {{ border: 1px solid #ddd; padding: .25em .5em; text-align: right; }}
th {{ background: #f5f5f5; }} td:first-child {{ text-align: left; }}
#eta-box {{ background: #fff7ec; border: 1px solid #fdd49e; padding: .6em 1em; margin: 1em 0; }}
#eta {{ width: 20em; vertical-align: middle; }}
.wide {{ overflow-x: auto; max-height: 32em; overflow-y: auto; }}
.caveat {{ background: #fdecea; border-left: 4px solid #d62728; padding: .4em .8em; }}
</style>
<script>{plotly}</script>
</head><body>
<h1>{title}</h1>
{summary}
<p id="sampling">{sampling}</p>
<h2>Pareto front</h2>
<div id="eta-box">
<label for="eta">η (weight on energy) = <span id="eta-value">0.50</span></label>
<input type="range" id="eta" min="0" max="1" step="0.01" value="0.5">
<div><small>best for {formula}</small></div>
<div id="eta-choice" data-row="{choice_row}">{choice}</div>
<div id="eta-against"><small>{against}</small></div>
</div>
{fronts}
<h2>Selected candidates</h2>
<p id="knee-note">{knee}</p>
{selected}
<h3>What each one gives and takes against the others</h3>
{tradeoffs}
<h2>Every point of the front</h2>
{front_table}
<h2>Where the energy and time go</h2>
{breakdown}
<h2>What moves the knee: elasticities of the objectives</h2>
{sensitivity}
<h2>Parallel coordinates of the front</h2>
{parallel}
<h2>Progress</h2>
{hypervolume}
<h2>Constraints</h2>
{constraints}
<footer><p id="plotly-bundle"><small>{bundle_note}</small></p></footer>
<script type="application/json" id="dse-data">{data}</script>
<script type="application/json" id="dse-figures">{figures}</script>
<script>{script}</script>
</body></html>
"""
