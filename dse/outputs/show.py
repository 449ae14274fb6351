"""``dse show``: the Pareto front as a table in the terminal, and a small plot of it.

Every column carries its unit under its name. Column names are never cut: when the
columns do not fit the terminal's width, the table is split into several tables of whole
columns, each repeating the row number, so that at 80 columns every name and unit shows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dse.datasets import columns, to_table
from dse.errors import DseError, did_you_mean, printable
from dse.results import open_results
from dse.units import shown as shown_in


def show_front(
    results: Path,
    console: Console,
    *,
    sort: str | None = None,
    descending: bool | None = None,
    limit: int = 50,
    plot: bool | None = None,
) -> None:
    run = open_results(results)
    ds = run.feasible_front()
    study = run.study
    front = to_table(ds)
    shown = [o.metric for o in study.objectives]
    shown += [c.metric for c in study.constraints if c.metric not in shown]
    shown += [n for n in ds.coords if n != "candidate"]
    if sort is not None:
        if sort not in front:
            same = [c for c in front.columns if str(c).lower() == sort.lower()]
            if len(same) == 1:  # MFU for mfu
                sort = same[0]
            else:
                raise DseError(
                    f"{run.path}: cannot sort by '{sort}': no such column in the Pareto set"
                    f"{did_you_mean(sort, columns(ds))}",
                    allowed=", ".join(columns(ds)),
                )
        shown = [sort, *[c for c in shown if c != sort]] if sort not in shown else shown
    key = sort or shown[0]
    if descending is None:  # an objective's best first: the largest of one maximised
        descending = any(o.metric == key and o.direction == "maximize" for o in study.objectives)
    front = front.sort_values(key, ascending=not descending, kind="stable", na_position="last")
    front, units = in_display_units(
        front, shown, {c: stored_unit(ds[c]) for c in shown}, study.display_units
    )
    title = (
        f"Pareto front of {study.name}: {len(front)} points, sorted by {key}"
        f"{' (descending)' if descending else ''}"
        + (f", first {limit} shown" if len(front) > limit else "")
    )
    print_tables(console, title, front.head(limit), shown, units, key)
    if plot or (plot is None and console.is_terminal and console.width >= 60):
        _plot(front, [o.metric for o in study.objectives], units, console)


def stored_unit(var) -> str | None:
    """The unit a variable's values are in (``"1"`` when dimensionless), None for text and
    flags."""
    if var.dtype.kind not in "iuf":
        return None
    return var.attrs.get("display_units") or var.attrs.get("units") or "1"


def in_display_units(
    rows: pd.DataFrame,
    names: list[str],
    stored: dict[str, str | None],
    wanted: dict[str, str],
) -> tuple[pd.DataFrame, dict[str, str]]:
    """``rows`` with each numeric column of ``names`` in the unit it is shown in (``wanted``:
    the study's ``display_units``; else readable for its largest value, :func:`dse.units.shown`)
    and the unit line under each name: ``[unit]``, ``[1]`` when dimensionless, ``[-]`` for
    text and flags (``stored``: the unit of each column, None for text and flags)."""
    rows, cells = rows.copy(), {}
    for name in names:
        unit = stored.get(name)
        if unit is None or name not in rows or rows[name].dtype.kind not in "iuf":
            cells[name] = "[-]"
            continue
        values = rows[name].to_numpy(float)
        finite = np.abs(values[np.isfinite(values)])
        factor, shown = shown_in(
            unit, float(finite.max()) if len(finite) else np.nan, wanted.get(name)
        )
        if factor != 1.0:
            rows[name] = values / factor
        cells[name] = f"[{shown or '1'}]"
    return rows, cells


def print_tables(
    console: Console,
    title: str,
    rows: pd.DataFrame,
    names: list[str],
    units: dict[str, str],
    key: str | None = None,
) -> None:
    """``rows`` as one table, or as several of whole columns when they do not fit the width."""
    cells = {c: [format_cell(v) for v in rows[c]] for c in names}
    index = [str(i + 1) for i in range(len(rows))]
    groups = split_columns(names, units, cells, index, console.width)
    for n, group in enumerate(groups):
        # first, where a title wrapped in a narrow table does not split it
        part = f"(columns {n + 1} of {len(groups)}) " if len(groups) > 1 else ""
        console.print(_table(part + title, group, units, cells, index, key))


def format_cell(v) -> str:
    """A value as a table cell: floats to 4 significant digits."""
    if isinstance(v, float | np.floating):
        return f"{v:.4g}"
    return printable(v)  # a reason text an evaluator wrote: no terminal control codes


def _width(name: str, unit: str, values: list[str]) -> int:
    return max([len(name), len(unit), *map(len, values)])


def split_columns(
    names: list[str],
    units: dict[str, str],
    cells: dict[str, list[str]],
    index: list[str],
    width: int,
) -> list[list[str]]:
    """Whole columns per table so that each table fits ``width`` (a rich table with
    borders takes the cell widths plus 3 per column plus 1)."""
    first = _width("#", "", index) + 3 + 1
    groups, current, used = [], [], first
    for name in names:
        need = _width(name, units[name], cells[name]) + 3
        if current and used + need > width:
            groups.append(current)
            current, used = [], first
        current.append(name)
        used += need
    if current:
        groups.append(current)
    return groups


def _table(
    title: str,
    names: list[str],
    units: dict[str, str],
    cells: dict[str, list[str]],
    index: list[str],
    key: str | None,
) -> Table:
    t = Table(title=Text(printable(title)), title_justify="left")
    t.add_column("#\n", justify="right", no_wrap=True, style="dim")
    for n in names:  # Text, not markup: "[s]" is a unit here, not a style
        t.add_column(
            Text(f"{printable(n)}\n{printable(units[n])}", justify="right"),
            justify="right",
            no_wrap=True,
            min_width=_width(n, units[n], cells[n]),
            style="cyan" if n == key else None,
        )
    for i, label in enumerate(index):
        t.add_row(label, *[Text(cells[n][i]) for n in names])
    return t


def _plot(
    front: pd.DataFrame, objectives: list[str], units: dict[str, str], console: Console
) -> None:
    """A small scatter of the front over its first two objectives (plotext)."""
    import plotext as plt

    if len(objectives) < 2 or len(front) == 0:
        return
    x, y = (front[o].to_numpy(float) for o in objectives[:2])
    plt.clf()
    plt.plotsize(min(console.width, 100), 18)
    plt.theme("clear")
    for axis, v in (("x", x), ("y", y)):
        if (v > 0).all() and v.max() / v.min() > 30:
            getattr(plt, f"{axis}scale")("log")
    plt.scatter(x, y, marker="dot")
    plt.xlabel(f"{objectives[0]} {units[objectives[0]]}")
    plt.ylabel(f"{objectives[1]} {units[objectives[1]]}")
    plt.title("Pareto front")
    console.print(Text.from_ansi(plt.build()))


def print_split(
    console, title: str, keys: list[dict], values: list[dict], rows: list, *, block: int = 1
) -> None:
    """One table of the ``keys`` columns then the ``values`` columns (each a dict of
    ``Table.add_column``'s arguments, ``header`` the first), or, where it is wider than
    ``console``, several: each with the key columns and as many whole value columns as fit
    (at least one; ``block``: value columns that go together, a measured value, its
    prediction and their error), titled "(columns i of n)" (``dse sensitivity``, ``dse
    calibrate``)."""
    from rich.cells import cell_len
    from rich.measure import Measurement

    def widest(k: int) -> int:  # of column k's cells (a cell's longest line)
        cells = [row[k] for row in rows]
        return max([0, *(cell_len(line) for c in cells for line in str(c).split("\n"))])

    specs = [*keys, *values]
    for k, spec in enumerate(specs):  # never narrower than a value (a wrapped text: 20 wide)
        least = widest(k) if spec.get("no_wrap") else min(widest(k), 20)
        if spec.get("no_wrap"):  # nor than its name (a line of it)
            least = max([least, *map(cell_len, str(spec["header"]).split("\n"))])
        specs[k] = {**spec, "min_width": max(spec.get("min_width") or 0, least)}
    keys, values = specs[: len(keys)], specs[len(keys) :]

    def build(title: str, chosen: list[int]) -> Table:
        t = Table(title=Text(printable(title)), title_justify="left")
        for spec in [*keys, *(values[i] for i in chosen)]:
            t.add_column(**spec)
        for row in rows:
            t.add_row(*row[: len(keys)], *(row[len(keys) + i] for i in chosen))
        return t

    def width(chosen: list[int]) -> int:
        wide = console.options.update_width(100_000)  # unclamped: the table's own least width
        return Measurement.get(console, wide, build("", chosen)).minimum

    groups: list[list[int]] = [[]]
    for first in range(0, len(values), block):
        together = list(range(first, min(first + block, len(values))))
        # a block too wide for a table of its own goes a column at a time
        parts = [together] if width(together) <= console.width else [[i] for i in together]
        for part in parts:
            if groups[-1] and width([*groups[-1], *part]) > console.width:
                groups.append([])
            groups[-1].extend(part)
    for n, chosen in enumerate(groups, start=1):
        part = f"(columns {n} of {len(groups)}) " if len(groups) > 1 else ""
        console.print(build(part + title, chosen))
