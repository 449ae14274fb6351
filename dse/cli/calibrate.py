"""``dse calibrate`` and ``dse describe --accelerator``: the fit's tables in the terminal."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dse.analytic import profiles
from dse.analytic.calibration import build, fit, readers
from dse.analytic.time import hardware
from dse.errors import DseError
from dse.outputs.show import print_split
from dse.outputs.target import refuse_blocked_folder
from dse.tables import check_size

#: the largest measurement file read (MB): telemetry sampled for hours is large, but a file
#: of 200 MB took more than 9 GB of memory before it was read
MEASUREMENTS_LIMIT_MB = 100.0


def _num(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v:.{digits}g}"


def _pct(v) -> str:
    """A signed error in percent, under a column headed [%]."""
    return "" if not np.isfinite(v) else f"{v:+.1f}"


def calibrate(
    files: list[Path],
    accelerator: str,
    output: Path,
    *,
    holdout: list[str],
    only: list[str] | None,
    fix: list[str],
    cooling: str,
    name: str | None,
    command: str,
    console: Console,
) -> fit.FitResult:
    """Read, fit, print the tables and write the profile."""
    if not profiles.is_path(output):  # a study names a profile by its .yaml path
        raise DseError(
            "an accelerator profile is a YAML file",
            field="--output",
            value=str(output),
            allowed=f"a path ending in {' or '.join(profiles.SUFFIXES)}",
        )
    _check_writable(output)  # before the fit, not after it
    label = name if name is not None else Path(output).stem
    if not label.strip() or any(c in label for c in "/\\"):
        raise DseError(
            "a profile's name is a word (no slashes), as a study names it",
            field="--name",
            value=label,
        )
    if label in hardware.catalog() or hardware.canonical_accelerator(label) is not None:
        raise DseError(
            f"is the catalog's {hardware.canonical_accelerator(label) or label}: a study naming it would "
            "get the catalog part, not this profile",
            field="--name" if name is not None else "--output",
            value=label if name is not None else str(output),
            allowed="another name, e.g. my-" + label.lower(),
        )
    for path in files:
        check_size(
            path,
            "measurement file",
            limit_mb=MEASUREMENTS_LIMIT_MB,
            instead="thin it (every Nth step or sample) or split it by run",
        )
    rows = readers.read(files)
    result = fit.fit(rows, accelerator, holdout=holdout, only=only, fix=fix, cooling=cooling)
    kinds = ", ".join(f"{k} {n}" for k, n in rows["kind"].value_counts().items())
    console.print(
        f"{len(rows)} measurements ({kinds}) from {len(files)} file(s); "
        f"base accelerator {accelerator}"
    )
    _parameters(result, console)
    if len(result.workloads):
        t = Table(
            title="the measured workloads (fitted with the parameters; not written to the profile)"
        )
        for col in (
            "workload",
            "time at f_max [s]",
            "clock-bound share",
            "energy counter scope [GPUs]",
        ):
            t.add_column(escape(col), justify="left" if col == "workload" else "right")
        for w in result.workloads.to_dict("records"):
            t.add_row(
                w["workload"], _num(w["t_max_s"]), _num(w["compute_share"], 3), _num(w["scope"], 3)
            )
        console.print(t)
    if result.thermal is not None:
        th = result.thermal
        inlet = "given" if th["inlet_c"] is None else f"{th['inlet_c']:.1f} C fitted"
        console.print(
            f"thermal ({th['cooling']}): R = {th['r_k_per_w']:.4g} +/- {th['r_stderr']:.2g} K/W "
            f"junction to inlet (inlet {inlet}), {th['rows']} rows, rms {th['rms_c']:.2f} C"
        )
    _errors(result, console)
    for note in result.notes:
        console.print(f"[yellow]note[/yellow]: {note}")
    path = build.write(result, output, name=name, command=command)
    # by name only where the lookup by name finds it: ./accelerators/NAME.yaml named NAME
    use = (
        path.stem
        if path.parent.name == "accelerators" and (name or path.stem) == path.stem
        else str(path)
    )
    console.print(f"wrote {path}: use it in a study as [bold]accelerator: {use}[/bold]")
    return result


def _check_writable(output: Path) -> None:
    """Refuse an output the profile cannot be written to, before the fit: a path with a file
    where a folder should be, or a folder that cannot be written (missing folders are
    created, as ``accelerators/`` is for ``-o accelerators/NAME.yaml``). The path itself (a
    folder, a device or pipe, a planted link, a results folder's own file) is refused by the
    command line's output check (``dse.cli.app._check_output_file``) before this."""
    folder = refuse_blocked_folder(Path(output))
    try:  # a file created and removed there: what the write will do (root passes os.access)
        with tempfile.NamedTemporaryFile(
            dir=folder, prefix=f".{Path(output).name}.", suffix=".probe"
        ):
            pass
    except OSError as exc:
        raise DseError(
            f"cannot write in {folder} ({exc.strerror or exc})", field="--output", value=str(output)
        ) from None


def _parameters(result: fit.FitResult, console: Console) -> None:
    t = Table(title=f"parameters of {result.base} (fitted: value +/- standard error)")
    for col in ("parameter", "unit", f"{result.base}", "fitted", "+/-", "note"):
        t.add_column(col, justify="right" if col in (result.base, "fitted", "+/-") else "left")
    for p in result.parameters.to_dict("records"):
        fitted = p["fitted"]
        t.add_row(
            p["name"],
            p["unit"],
            _num(p["base"]),
            _num(p["value"]) if fitted else "",
            _num(p["stderr"], 2) if fitted else "",
            _note(p["note"], fitted),
        )
    console.print(t)


def _note(note: str, fitted: bool) -> str:
    """A parameter's note; one the fit did not move and that has none is "inherited"."""
    if note:
        return note
    return "" if fitted else "inherited"


def _errors(result: fit.FitResult, console: Console) -> None:
    r = result.rows
    energy = np.isfinite(r["energy_j"]).any()
    capped = np.isfinite(r["power_cap_w"]).any()  # the cap column only where a row sets a power cap
    cols = [
        "workload",
        "kind",
        "clock [MHz]",
        *(["cap [W]"] if capped else []),
        "set",
        "time [s]",
        "predicted [s]",
        "error [%]",
    ]
    cols += ["energy [J]", "predicted [J]", "error [%]"] if energy else []
    cols += ["power [W]", "predicted [W]", "error [%]"] if np.isfinite(r["power_w"]).any() else []
    keys = 4 + capped  # workload, kind, clock, cap, set: repeated where the table is split
    left = ("workload", "kind", "set")
    specs = [
        {"header": escape(c), "justify": "left" if c in left else "right", "no_wrap": True}
        for c in cols
    ]
    rows = []
    order = r.sort_values(
        ["workload", "clock_mhz", "power_cap_w"], ascending=[True, False, False], kind="stable"
    )
    for _, row in order.iterrows():
        cells = [
            str(row["workload"]),
            row["kind"],
            _num(
                row["clock_mhz_pred"] if not np.isfinite(row["clock_mhz"]) else row["clock_mhz"], 5
            ),
            *([_num(row["power_cap_w"], 4)] if capped else []),
            row["set"],
        ]
        timed = row["kind"] in ("compute", "memory", "stage", "training")
        cells += (
            [_num(row["time_s"]), _num(row["time_s_pred"]), _pct(row["time_s_err_pct"])]
            if timed
            else ["", "", ""]
        )
        if energy:
            cells += [
                _num(row["energy_j"]),
                _num(row["energy_j_pred"]),
                _pct(row["energy_j_err_pct"]),
            ]
        if "power [W]" in cols:
            cells += [_num(row["power_w"]), _num(row["power_w_pred"]), _pct(row["power_w_err_pct"])]
        rows.append(cells)
    print_split(
        console,
        "error per measurement: predicted / measured - 1 (held-out rows were not fitted)",
        specs[:keys],
        specs[keys:],
        rows,
        block=3,  # a quantity measured, predicted and their error together
    )
    s = build.summary(r)
    for name in ("fit", "holdout"):
        if name in s:
            parts = [
                f"{q} median {v['median_abs_pct']:.1f}% max {v['max_abs_pct']:.1f}% ({v['rows']} rows)"
                for q, v in s[name].items()
            ]
            label = "fitted rows" if name == "fit" else "held-out rows"
            console.print(f"{label}: " + "; ".join(parts))


def describe_accelerator(name: str, console: Console) -> None:
    """Every number of a catalog part or a profile with where it came from."""
    title, rows = build.provenance(name)
    t = Table(title=title)
    for col in ("field", "value", "source"):
        t.add_column(col, overflow="fold")  # a value, a source never cut
    for field, value, source in rows:
        t.add_row(field, escape(_shown(value)), escape(source))
    console.print(t)


def _shown(value) -> str:
    """A catalog or profile value as a person reads it: numbers to 4 significant digits,
    mappings as ``key value`` pairs (``-`` for none), lists of points as ``(x, y)``."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_shown(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, list | tuple) for v in value):
            return " ".join("(" + ", ".join(_shown(x) for x in v) + ")" for v in value)
        return ", ".join(_shown(v) for v in value)
    return str(value)
