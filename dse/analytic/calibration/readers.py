"""Measurement files for ``dse calibrate``, read into one table of rows (docs/calibration.md).

Kinds of file, told apart by their columns or first lines:

* **sweep CSV** (``dse profile`` writes it): one row per workload and clock or power cap,
  with time and energy or average power; columns :data:`SWEEP_COLUMNS`, quantities with
  their unit in the name (``time_s`` or ``time_ms``, ``energy_j`` or ``energy_kwh``...);
* **validate-model table** (docs/model.md, section 9), e.g. the packaged Perseus sweep:
  ``stage_time_s``/``stage_energy_j`` rows become a stage workload, ``iteration_time_s``
  rows training runs;
* **training steps CSV**: a run's configuration in the evaluator's input names (as in a
  validate-model table) with ``step_time_s``, or ``start_time``/``end_time`` stamps that
  GPU telemetry files are matched to (:mod:`.telemetry`);
* **telemetry**: ``nvidia-smi --query-gpu=... --format=csv`` logs and DCGM exporter /
  Prometheus text.

Every row of the result has a ``kind``: ``compute`` (clock-bound kernel, e.g. a large
GEMM), ``memory`` (memory-bound kernel), ``stage`` (a workload mixing both, its split
fitted), ``idle`` (no process on the GPU), ``parked`` (a process holds the GPU but runs no
kernel), ``blocked`` (waiting inside a collective) or ``training`` (a run the whole model
predicts). A bad file raises :class:`~dse.errors.DseError` naming the file, the line and
column, the value and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from dse.analytic import declarations, validation
from dse.analytic.calibration import telemetry
from dse.errors import DseError
from dse.tables import check_shape

KINDS = ("compute", "memory", "stage", "idle", "parked", "blocked", "training")
#: quantities and the units each may be given in (factor to the canonical unit)
UNITS = {
    "time": ("s", {"s": 1.0, "ms": 1e-3, "us": 1e-6}),
    "energy": ("j", {"j": 1.0, "kj": 1e3, "wh": 3600.0, "kwh": 3.6e6}),
    "avg_power": ("w", {"w": 1.0, "kw": 1e3}),
    "clock": ("mhz", {"mhz": 1.0, "ghz": 1e3}),
    "power_cap": ("w", {"w": 1.0, "kw": 1e3}),
    "temp": ("c", {"c": 1.0}),
    "inlet": ("c", {"c": 1.0}),
}
#: canonical measurement columns (the table :func:`read` returns has these)
NUMERIC = (
    "clock_mhz",
    "power_cap_w",
    "time_s",
    "energy_j",
    "power_w",
    "gpus",
    "flops",
    "bytes",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "temp_c",
    "inlet_c",
)
TEXT = ("file", "line", "workload", "kind", "precision")
#: columns of the sweep format besides the quantities of :data:`UNITS`
SWEEP_COLUMNS = (
    "workload",
    "kind",
    "accelerator",
    "gpus",
    "flops",
    "bytes",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "precision",
    "source",
    "citation",
    "notes",
    "id",
)
PER_ROW = ("time_s", "energy_j", "power_w")


def read(paths: list[Path | str]) -> pd.DataFrame:
    """Every measurement in ``paths`` as one table (:data:`TEXT`, :data:`NUMERIC` and, for
    training rows, ``config``: the run's model inputs). Telemetry files are matched to the
    steps files among ``paths`` by timestamp."""
    tables, steps, samples = [], [], []
    for p in map(Path, paths):
        if p.is_dir():
            raise DseError(
                "is a folder; give the measurement files in it (e.g. FOLDER/*.csv)", file=str(p)
            )
        if not p.is_file():
            raise DseError("no such file", file=str(p))
        kind = _detect(p)
        if kind == "telemetry":
            samples.append(telemetry.read(p))
        elif kind == "steps":
            steps.append(p)
        elif kind == "validate-model":
            tables.append(_from_validate_model(p))
        else:
            tables.append(_from_sweep(p))
    if samples and not any(_has_stamps(p) for p in steps):
        raise DseError(
            "telemetry needs a steps file with start_time and end_time to be matched to",
            file=str(paths[-1]),
        )
    merged = pd.concat(samples, ignore_index=True) if samples else None
    for p in steps:
        tables.append(_from_steps(p, merged))
    out = pd.concat(tables, ignore_index=True)
    if out.empty:
        raise DseError("no measurements in the files", file=", ".join(map(str, paths)))
    return out


def _detect(path: Path) -> str:
    head = path.read_text(errors="replace")[:4000]
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if not lines:
        raise DseError("empty file", file=str(path))
    if any(ln.startswith(("# HELP", "# TYPE", "DCGM_FI_")) for ln in lines[:20]):
        return "telemetry"
    csv_lines = [ln for ln in lines if not ln.lstrip().startswith("#")]
    header = [c.strip().lower() for c in (csv_lines or [""])[0].split(",")]
    if "timestamp" in header and any(c.startswith("power.draw") for c in header):
        return "telemetry"
    if "measured_quantity" in header:
        return "validate-model"
    if {"start_time", "end_time", "step_time_s"} & set(header):
        return "steps"
    return "sweep"


def _csv(path: Path) -> pd.DataFrame:
    check_shape(path, comment="#")  # a row longer than the header, named by its line
    try:
        raw = pd.read_csv(
            path,
            dtype=str,
            keep_default_na=False,
            comment="#",
            skipinitialspace=True,
            header=None,
            encoding="utf-8-sig",
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DseError(f"cannot read CSV: {str(exc).splitlines()[0]}", file=str(path)) from None
    names = [str(c).strip().lower().replace(" ", "_") for c in raw.iloc[0]]
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise DseError(
            f"column '{twice[0]}' appears twice in the header", file=str(path), field=twice[0]
        )
    df = raw.iloc[1:].reset_index(drop=True)
    df.columns = names
    return df


def _unit_column(col: str) -> tuple[str, float] | None:
    """(canonical column, factor) of a quantity column such as ``time_ms``; None if ``col`` is
    not a quantity; raises for a quantity without a unit or with an unknown one."""
    for qty, (_, units) in UNITS.items():
        m = re.fullmatch(rf"{qty}(?:_([a-z]+))?", col)
        if m is None:
            continue
        unit = m.group(1)
        allowed = ", ".join(f"{qty}_{u}" for u in units)
        if unit is None:
            raise DseError(f"column '{col}' has no unit in its name", field=col, allowed=allowed)
        if unit not in units:
            raise DseError(f"unknown unit '{unit}' in column '{col}'", field=col, allowed=allowed)
        target = {
            "time": "time_s",
            "energy": "energy_j",
            "avg_power": "power_w",
            "clock": "clock_mhz",
            "power_cap": "power_cap_w",
            "temp": "temp_c",
            "inlet": "inlet_c",
        }[qty]
        return target, units[unit]
    return None


def _text(df: pd.DataFrame, col: str) -> np.ndarray:
    """Column ``col`` as stripped text (empty where the table has no such column)."""
    if col not in df.columns:
        return np.full(len(df), "", dtype=object)
    return df[col].astype(str).str.strip().to_numpy(dtype=object)


def _empty(n: int, file: str) -> dict:
    out: dict = {c: np.full(n, np.nan) for c in NUMERIC}
    out.update(
        file=np.full(n, file, dtype=object),
        line=np.arange(2, n + 2),
        workload=np.full(n, "", dtype=object),
        kind=np.full(n, "stage", dtype=object),
        precision=np.full(n, "bf16", dtype=object),
        config=np.full(n, None, dtype=object),
        accelerator=np.full(n, "", dtype=object),
    )
    return out


def _data_lines(path: Path, n: int) -> np.ndarray:
    """The file's line number of each of the ``n`` rows pandas read (comment and blank lines
    skipped, the first other line the header), so messages cite the line a user sees."""
    numbers = [
        i
        for i, ln in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if ln.strip("\ufeff \t") and not ln.lstrip("\ufeff \t").startswith("#")
    ][1:]  # a BOM is no text
    return np.array(numbers[:n]) if len(numbers) >= n else np.arange(2, n + 2)


def _from_sweep(path: Path) -> pd.DataFrame:
    file = str(path)
    df = _csv(path)
    n = len(df)
    out = _empty(n, file)
    out["line"] = _data_lines(path, n)
    df["_line"] = out["line"]  # every message of this file cites the same line numbers
    for col in df.columns:
        if col == "_line":
            continue
        try:
            unit = _unit_column(col)
        except DseError as exc:
            raise exc.with_file(file) from None
        if unit is not None:
            target, factor = unit
            out[target] = validation.numbers(df, col, file, col.rsplit("_", 1)[-1]) * factor
        elif col in ("gpus", "flops", "bytes", "gemm_m", "gemm_n", "gemm_k"):
            out[col] = validation.numbers(df, col, file)
        elif (
            col == "accelerator"
        ):  # which part the rows were measured on (checked against --accelerator)
            out[col] = _text(df, col)
        elif col in ("workload", "kind", "precision"):
            vals = _text(df, col)
            if col == "precision":
                vals = np.where(vals == "", "bf16", np.char.lower(vals.astype(str))).astype(object)
                known = declarations.INPUTS[
                    "precision"
                ].choices  # as a study and validate-model take them
                bad = [i for i, v in enumerate(vals) if v not in known]
                if bad:
                    raise DseError(
                        f"unknown precision '{vals[bad[0]]}'",
                        file=file,
                        field=f"line {out['line'][bad[0]]}, column precision",
                        allowed=", ".join(known),
                    )
            if col == "kind":
                vals = np.where(vals == "", "stage", np.char.lower(vals.astype(str))).astype(object)
            out[col] = vals
        elif col not in SWEEP_COLUMNS:
            quantities = ", ".join(f"{q}_{next(iter(u[1]))}" for q, u in UNITS.items())
            raise DseError(
                f"unknown column '{col}'",
                file=file,
                allowed=f"{', '.join(SWEEP_COLUMNS)}, and quantities with units ({quantities}, ...)",
            )
    out["workload"] = np.where(out["workload"] == "", path.stem, out["workload"]).astype(object)
    if "gpus" not in df.columns:  # no column: one GPU's readings; an empty cell: scope unknown
        out["gpus"] = np.ones(n)
    return _checked(pd.DataFrame(out), file)


#: temperatures (degC) a measurement can hold: a chilled inlet to a throttling junction (the
#: parts' slowdown temperatures are 80-110 degC), with room for a hot spot
TEMP_RANGE_C = (-40.0, 150.0)


def _checked(t: pd.DataFrame, file: str) -> pd.DataFrame:
    """Kinds known, values in range, and every row measuring something at a known setting."""
    for _, row in t.iterrows():
        where = f"line {row['line']}"
        if row["kind"] not in KINDS:
            raise DseError(
                f"unknown kind '{row['kind']}'",
                file=file,
                field=f"{where}, column kind",
                allowed=", ".join(KINDS),
            )
        for col, positive in (
            ("time_s", True),
            ("energy_j", True),
            ("power_w", True),
            ("clock_mhz", True),
            ("power_cap_w", True),
            ("gpus", True),
            ("flops", True),
            ("bytes", True),
        ):
            v = row[col]
            if np.isfinite(v) and (v < 0 or (positive and v == 0)):
                raise DseError(
                    f"{'negative' if v < 0 else 'zero'} {col.rsplit('_', 1)[0].replace('_', ' ')}",
                    file=file,
                    field=f"{where}, column {col}",
                    value=float(v),
                    allowed="a positive number",
                )
        if not any(np.isfinite(row[c]) for c in PER_ROW):
            raise DseError(
                "the row measures nothing",
                file=file,
                field=where,
                allowed="time_s, energy_j or avg_power_w (any unit)",
            )
        if row["kind"] not in ("idle", "parked", "training") and not (
            np.isfinite(row["clock_mhz"]) or np.isfinite(row["power_cap_w"])
        ):
            raise DseError(
                "the row has neither a clock nor a power cap",
                file=file,
                field=where,
                allowed="a clock_mhz or power_cap_w value (idle and parked rows need neither)",
            )
        if row["kind"] in ("compute", "memory", "stage") and not np.isfinite(row["time_s"]):
            raise DseError(
                f"a {row['kind']} row needs its time",
                file=file,
                field=where,
                allowed="time_s (any unit)",
            )
        for col in (
            "temp_c",
            "inlet_c",
        ):  # a GPU runs between about 0 and 110 degC; Kelvin reads as 273+
            v = row[col]
            if np.isfinite(v) and not TEMP_RANGE_C[0] <= v <= TEMP_RANGE_C[1]:
                raise DseError(
                    "a temperature no GPU or inlet has (Kelvin or Fahrenheit? the values are degC)",
                    file=file,
                    field=f"{where}, column {col}",
                    value=float(v),
                    allowed=f"{TEMP_RANGE_C[0]:g} to {TEMP_RANGE_C[1]:g} degC",
                )
        if np.isfinite(row["gpus"]) and not float(row["gpus"]).is_integer():
            raise DseError(
                "expected a whole number of GPUs",
                file=file,
                field=f"{where}, column gpus",
                value=row["gpus"],
            )
    # energy from average power where only the power is given with the time
    both = ~np.isfinite(t["energy_j"]) & np.isfinite(t["power_w"]) & np.isfinite(t["time_s"])
    t.loc[both, "energy_j"] = t.loc[both, "power_w"] * t.loc[both, "time_s"]
    t.loc[both, "power_w"] = np.nan
    return t


def _from_validate_model(path: Path) -> pd.DataFrame:
    """Stage rows (``stage_time_s``/``stage_energy_j`` at ``clock_mhz``; the energy counter's
    scope is unknown unless ``num_accelerators`` says it) and ``iteration_time_s`` rows."""
    file = str(path)
    df = validation.read_table(path)
    parts = []
    stage = df[df["measured_quantity"].isin(validation.STAGE_QUANTITIES)]
    if len(stage):
        if "clock_mhz" not in stage.columns:
            raise DseError("stage rows need a clock_mhz column", file=file)
        lines = stage.index.to_numpy() + 2
        clock = validation.numbers(stage, "clock_mhz", file)
        value = validation.numbers(stage, "measured_value", file)
        gpus = (
            validation.numbers(stage, "num_accelerators", file)
            if "num_accelerators" in stage.columns
            else np.full(len(stage), np.nan)
        )
        labels = _text(stage, "accelerator")
        key = pd.DataFrame({"source": stage["source"].to_numpy(), "clock": clock})
        rows = []
        for (src, f), idx in key.groupby(["source", "clock"], sort=False).groups.items():
            i = np.asarray(idx)
            q = stage["measured_quantity"].to_numpy()[i]
            rows.append(
                {
                    "file": file,
                    "line": int(lines[i[0]]),
                    "workload": str(src),
                    "kind": "stage",
                    "clock_mhz": float(f),
                    "time_s": _pick(value[i], q, "stage_time_s"),
                    "energy_j": _pick(value[i], q, "stage_energy_j"),
                    "gpus": float(np.nanmax(gpus[i])) if np.isfinite(gpus[i]).any() else np.nan,
                    "accelerator": labels[i[0]],
                }
            )
        t = pd.DataFrame(_empty(len(rows), file))
        for k in rows[0]:
            t[k] = [r[k] for r in rows]
        parts.append(_checked(t, file))
    runs = df[df["measured_quantity"] == "iteration_time_s"]
    if len(runs):
        cfg = validation.table_to_config(
            runs.assign(_line=runs.index + 2).reset_index(drop=True), file=file
        )
        t = pd.DataFrame(_empty(len(runs), file))
        t["line"] = runs.index.to_numpy() + 2
        t["kind"] = "training"
        t["workload"] = runs["source"].to_numpy(dtype=object)
        t["time_s"] = validation.numbers(runs, "measured_value", file)
        t["clock_mhz"] = cfg["clock_mhz"]
        t["config"] = _config_rows(cfg, len(runs))
        t["accelerator"] = _text(runs, "accelerator")
        parts.append(_checked(t, file))
    if not parts:
        raise DseError(
            "no stage_time_s, stage_energy_j or iteration_time_s rows",
            file=file,
            field="measured_quantity",
        )
    return pd.concat(parts, ignore_index=True)


def _pick(values: np.ndarray, quantities: np.ndarray, name: str) -> float:
    hit = values[quantities == name]
    return float(hit[0]) if len(hit) else np.nan


def _config_rows(cfg: dict, n: int) -> list[dict]:
    """One dict of model inputs per row (text inputs as plain strings)."""
    rows = []
    for i in range(n):
        row = {}
        for k, v in cfg.items():
            if hasattr(v, "codes"):  # a factorised text column
                row[k] = v.uniques[int(v.codes[i])]
            else:
                a = np.asarray(v)
                x = a[i] if a.ndim else a
                row[k] = x.item() if hasattr(x, "item") else x
        rows.append(row)
    return rows


#: columns of a steps file besides the run's configuration
STEP_COLUMNS = (
    "step",
    "start_time",
    "end_time",
    "step_time_s",
    "avg_power_w",
    "temp_c",
    "source",
    "notes",
    "id",
    "workload",
)


def _has_stamps(path: Path) -> bool:
    return {"start_time", "end_time"} <= set(_csv(path).columns)


def _from_steps(path: Path, samples: pd.DataFrame | None) -> pd.DataFrame:
    """A training run's steps: configuration columns (validate-model names) and per step
    ``step_time_s`` or ``start_time``/``end_time``; telemetry gives each step's average
    power per GPU, mean SM clock and temperature. Steps of one configuration and clock are
    pooled (median step time, mean power)."""
    file = str(path)
    df = _csv(path)
    stamps = {"start_time", "end_time"} <= set(df.columns)
    if not stamps and "step_time_s" not in df.columns:
        raise DseError("a steps file needs step_time_s, or start_time and end_time", file=file)
    config_cols = [c for c in df.columns if c not in STEP_COLUMNS]
    known = set(declarations.INPUTS) | set(validation.SHAPE)
    unknown = [c for c in config_cols if c not in known]
    if unknown:
        raise DseError(
            f"unknown column '{unknown[0]}'",
            file=file,
            allowed=f"{', '.join(STEP_COLUMNS)}, and the run's configuration in the evaluator's input names",
        )
    cfg_df = df[config_cols].assign(
        source=path.stem, measured_quantity="iteration_time_s", measured_value="1"
    )
    try:
        cfg = validation.table_to_config(cfg_df, file=file)
    except DseError as exc:
        raise exc.with_file(file) from None
    n = len(df)
    t = pd.DataFrame(_empty(n, file))
    t["kind"] = "training"
    t["workload"] = df["workload"].to_numpy(dtype=object) if "workload" in df.columns else path.stem
    lines = _data_lines(path, n)  # the lines a user sees (comment lines counted)
    t["line"] = lines
    if stamps:
        start, end = (
            telemetry.parse_times(df["start_time"], file, "start_time"),
            telemetry.parse_times(df["end_time"], file, "end_time"),
        )
        telemetry.check_steps(start, end, file, lines)
        t["time_s"] = end - start
        if samples is not None:
            m = telemetry.match(samples, start, end, file, lines)
            for col in ("power_w", "clock_mhz", "temp_c"):
                t[col] = m[col]
    else:
        t["time_s"] = validation.numbers(df, "step_time_s", file, "s")
    for col, target in (("avg_power_w", "power_w"), ("temp_c", "temp_c")):
        if col in df.columns:
            given = validation.numbers(df, col, file)
            t[target] = np.where(np.isfinite(given), given, t[target])
    set_clock = np.asarray(cfg["clock_mhz"], dtype=float)
    t["clock_mhz"] = np.where(np.isfinite(set_clock), set_clock, t["clock_mhz"])
    t["power_cap_w"] = np.asarray(cfg["power_cap_w"], dtype=float)
    t["config"] = _config_rows(cfg, n)
    t["accelerator"] = _text(df, "accelerator")
    return _checked(_pool(t, set_clock), file)


#: relative change of the measured clock that starts a new run among steps of one configuration
POOL_CLOCK_RTOL = 0.02


def _pool(t: pd.DataFrame, set_clock: np.ndarray) -> pd.DataFrame:
    """Steps of one configuration and set clock/cap as one row: median step time, mean power,
    clock and temperature (over the steps but the first and the last where there are three
    or more: sampled telemetry blurs the switch between runs), the first step's line. The
    clock the telemetry measured jitters from step to step: consecutive steps of a run stay
    together while it stays within :data:`POOL_CLOCK_RTOL` of the step before (a clock set
    outside the run, e.g. with nvidia-smi, still splits it)."""
    fixed = t["config"].map(
        lambda c: tuple(sorted((k, str(v)) for k, v in c.items() if k != "clock_mhz"))
    )
    fixed = (
        fixed
        + pd.Series(set_clock, index=t.index).astype(str).map(lambda s: (s,))
        + t["power_cap_w"].astype(str).map(lambda s: (s,))
    )
    # under a power cap without a set clock the clock is the cap's doing and varies with it
    free = np.isfinite(t["power_cap_w"].to_numpy(dtype=float)) & ~np.isfinite(
        np.asarray(set_clock, dtype=float)
    )
    measured = np.where(free, np.nan, t["clock_mhz"].to_numpy(dtype=float))
    group, key, prev_key, prev_clock = (
        -1,
        [],
        None,
        np.nan,
    )  # prev_clock: the run's last measured clock
    for k, c in zip(fixed, measured, strict=True):
        if (
            k != prev_key or abs(c - prev_clock) > POOL_CLOCK_RTOL * prev_clock
        ):  # NaN compares False
            group, prev_clock = group + 1, np.nan
        prev_key, prev_clock = k, c if np.isfinite(c) else prev_clock
        key.append(group)
    key = pd.Series(key, index=t.index)
    out = []
    for _, g in t.groupby(key, sort=False):
        row = g.iloc[0].copy()
        row["time_s"] = float(np.median(g["time_s"]))
        inner = g.iloc[1:-1] if len(g) >= 3 else g
        for col in ("power_w", "clock_mhz", "temp_c"):
            vals = inner[col].to_numpy(dtype=float)
            row[col] = (
                float(np.mean(vals[np.isfinite(vals)])) if np.isfinite(vals).any() else np.nan
            )
        out.append(row)
    return pd.DataFrame(out).reset_index(drop=True)
