"""GPU telemetry for ``dse calibrate``: ``nvidia-smi`` CSV logs and DCGM / Prometheus text,
matched to a training run's steps by timestamp.

``nvidia-smi --query-gpu=timestamp,index,power.draw,clocks.sm,temperature.gpu --format=csv
-lms 100`` writes a header with units (``power.draw [W]``) and values with or without them
(``nounits``); its timestamps (``2024/05/01 12:00:00.123``) carry no zone. DCGM exporter
text (``DCGM_FI_DEV_POWER_USAGE{gpu="0",...} 251.3 1714564800123``) must carry each
sample's timestamp (the exposition format's optional third field, ms since the epoch).
Timestamps without a zone are read as UTC, as are epoch seconds; write the steps' stamps
the way the telemetry does. Every GPU's samples must be in time order.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from dse.errors import DseError

#: nvidia-smi query fields read, in order of preference, and their units
SMI_FIELDS = {
    "power_w": (("power.draw.average", "power.draw", "power.draw.instant"), "W"),
    "clock_mhz": (("clocks.sm", "clocks.current.sm"), "MHz"),
    "temp_c": (("temperature.gpu",), "C"),
}
SMI_GPU = ("index", "pci.bus_id", "uuid")
#: DCGM exporter metrics read (energy: mJ since the driver loaded)
DCGM_METRICS = {
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_SM_CLOCK": "clock_mhz",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
}
COLUMNS = ("time_s", "gpu", "power_w", "clock_mhz", "temp_c", "energy_mj", "line")
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%]*)\s*$")
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def read(path: Path) -> pd.DataFrame:
    """Samples of ``path`` (nvidia-smi CSV or Prometheus text) with :data:`COLUMNS`."""
    text = Path(path).read_text(errors="replace")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    samples = _prometheus(text, str(path)) if first.startswith(("#", "DCGM_FI_")) else _smi(path)
    _check_order(samples, str(path))
    # GPU numbers repeat on every node: a GPU is its file's (one log per node)
    return samples.assign(gpu=Path(path).name + ":" + samples["gpu"].astype(str))


def parse_times(values, file: str, column: str) -> np.ndarray:
    """Seconds since the epoch from epoch numbers or date-times (no zone: UTC)."""
    text = pd.Series(values).astype(str).str.strip()
    nums = pd.to_numeric(text, errors="coerce")
    if nums.notna().all():
        return nums.to_numpy(dtype=float)
    try:
        stamps = pd.to_datetime(text.str.replace("/", "-", regex=False), utc=True, format="ISO8601")
    except (ValueError, TypeError):
        bad = next(
            v
            for v in text
            if pd.isna(pd.to_datetime(v.replace("/", "-"), errors="coerce", utc=True))
        )
        raise DseError(
            "expected a date-time or seconds since the epoch",
            file=file,
            field=f"column {column}",
            value=bad,
            allowed="e.g. 2024-05-01T12:00:00.250, 2024/05/01 12:00:00.250, 1714564800.25",
        ) from None
    return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=float)


def _smi(path: Path) -> pd.DataFrame:
    file = str(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DseError(
            f"cannot read the nvidia-smi CSV: {str(exc).splitlines()[0]}", file=file
        ) from None
    names, units = {}, {}
    for col in df.columns:
        m = re.fullmatch(r"\s*([^\[]+?)\s*(?:\[(.*)\])?\s*", str(col))
        names[m.group(1).lower()] = col
        units[m.group(1).lower()] = (m.group(2) or "").strip()
    out = {
        "time_s": parse_times(df[names["timestamp"]], file, "timestamp"),
        "line": np.arange(2, len(df) + 2),
    }
    gpu = next((names[g] for g in SMI_GPU if g in names), None)
    out["gpu"] = (
        df[gpu].astype(str).str.strip().to_numpy(dtype=object)
        if gpu
        else np.full(len(df), "0", dtype=object)
    )
    for target, (fields, unit) in SMI_FIELDS.items():
        field = next((f for f in fields if f in names), None)
        if field is None:
            out[target] = np.full(len(df), np.nan)
            continue
        if units[field] and units[field] != unit:
            raise DseError(
                f"unit [{units[field]}] where [{unit}] was expected",
                file=file,
                field=f"column {field}",
                allowed=f"nvidia-smi's own [{unit}]",
            )
        out[target] = _smi_numbers(df[names[field]], file, field, unit)
    if not np.isfinite(out["power_w"]).any():
        raise DseError(
            "no power readings",
            file=file,
            allowed="a power.draw column (nvidia-smi --query-gpu=timestamp,"
            "index,power.draw,clocks.sm,temperature.gpu --format=csv)",
        )
    out["energy_mj"] = np.full(len(df), np.nan)
    return pd.DataFrame(out)[list(COLUMNS)]


def _smi_numbers(col: pd.Series, file: str, field: str, unit: str) -> np.ndarray:
    vals = np.full(len(col), np.nan)
    for i, v in enumerate(col.astype(str)):
        if v.strip().startswith("[") or not v.strip():  # [N/A], [Not Supported]
            continue
        m = _NUMBER.match(v)
        if m is None or (m.group(2) and m.group(2) != unit):
            raise DseError(
                f"expected a number in {unit}",
                file=file,
                field=f"line {i + 2}, column {field}",
                value=v.strip(),
            )
        vals[i] = float(m.group(1))
    return vals


def _prometheus(text: str, file: str) -> pd.DataFrame:
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise DseError(
                "not a Prometheus sample line", file=file, field=f"line {n}", value=line[:80]
            )
        name, labels, value, stamp = m.groups()
        target = DCGM_METRICS.get(name)
        if target is None:
            continue
        if stamp is None:
            raise DseError(
                "a sample without a timestamp: telemetry is matched to steps by time",
                file=file,
                field=f"line {n}",
                value=line[:80],
                allowed="samples with the exposition format's timestamp (ms since the epoch)",
            )
        lab = dict(_LABEL.findall(labels or ""))
        try:
            v = float(value)
        except ValueError:
            raise DseError("expected a number", file=file, field=f"line {n}", value=value) from None
        rows.append(
            (
                int(stamp) / 1000.0,
                lab.get("gpu", lab.get("device", lab.get("UUID", "0"))),
                target,
                v,
                n,
            )
        )
    if not rows:
        raise DseError("no DCGM samples", file=file, allowed=", ".join(DCGM_METRICS))
    long = pd.DataFrame(rows, columns=["time_s", "gpu", "metric", "value", "line"])
    _check_order(
        long.rename(columns={"gpu": "_g"}).assign(gpu=long["gpu"] + "/" + long["metric"]), file
    )
    wide = long.pivot_table(
        index=["time_s", "gpu"], columns="metric", values="value", aggfunc="last"
    ).reset_index()
    lines = long.groupby(["time_s", "gpu"])["line"].min().reset_index()
    wide = wide.merge(lines, on=["time_s", "gpu"])
    for col in ("power_w", "clock_mhz", "temp_c", "energy_mj"):
        if col not in wide.columns:
            wide[col] = np.nan
    if not (np.isfinite(wide["power_w"]).any() or np.isfinite(wide["energy_mj"]).any()):
        raise DseError(
            "no power or energy samples",
            file=file,
            allowed="DCGM_FI_DEV_POWER_USAGE or DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        )
    return wide.sort_values(["gpu", "time_s"], kind="stable")[list(COLUMNS)].reset_index(drop=True)


def _check_order(samples: pd.DataFrame, file: str) -> None:
    for gpu, g in samples.groupby("gpu", sort=False):
        t = g["time_s"].to_numpy()
        back = np.flatnonzero(np.diff(t) < 0)
        if len(back):
            which = str(gpu).split("/")[
                0
            ]  # the GPU's index or PCI bus id (the file is named apart)
            raise DseError(
                f"timestamps out of order for GPU {which}: each GPU's samples must be in time order",
                file=file,
                field=f"line {int(g['line'].iloc[back[0] + 1])}",
            )


def check_steps(start: np.ndarray, end: np.ndarray, file: str, lines: np.ndarray) -> None:
    """Every step ends after it starts, and steps are in time order (``lines``: each step's
    line in the file)."""
    bad = np.flatnonzero(~(end > start))
    if len(bad):
        raise DseError(
            "a step ends before it starts",
            file=file,
            field=f"line {lines[bad[0]]}",
            value=f"{_when(start[bad[0]])} .. {_when(end[bad[0]])}",
        )
    back = np.flatnonzero(np.diff(start) < 0)
    if len(back):
        raise DseError(
            "steps out of time order (start_time falls)",
            file=file,
            field=f"line {lines[back[0] + 1]}",
        )


def _cumulative(t: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The integral of ``v`` over ``t`` from the first sample (trapezoids; NaN samples skipped)."""
    ok = np.isfinite(v)
    t, v = t[ok], v[ok]
    return t, np.concatenate([[0.0], np.cumsum(np.diff(t) * (v[1:] + v[:-1]) / 2)])


#: a pause between two telemetry samples longer than this many times the usual period is a
#: gap: the samples around it say nothing of a step inside it (one or two lost samples are not)
GAP_PERIODS = 5.0


def _gpu(key) -> str:
    """A GPU's samples as a message names them: ``GPU 0 in smi.csv`` (the key is the file's
    name and the GPU's index)."""
    name, _, index = str(key).partition(":")  # the index may be a PCI bus id, 00000000:3B:00.0
    return f"GPU {index} in {name}" if index else f"GPU {name}"


def _when(t: float) -> str:
    """A time as the files give it: a time stamp (seconds since 1970, shown as ISO 8601) or
    plain seconds."""
    if t > 1e9:
        return pd.Timestamp(round(t * 1000.0), unit="ms").isoformat(timespec="milliseconds")
    return f"{t:.3f} s"


def _check_gaps(
    t: np.ndarray, start: np.ndarray, end: np.ndarray, gpu, file: str, lines: np.ndarray
) -> None:
    """Refuse a step that overlaps a gap in one GPU's telemetry (times ``t``, sorted): its
    power, clock and temperature would be interpolated over seconds nobody measured."""
    if len(t) < 3:
        return
    dt = np.diff(t)
    if not (dt > 0).any():
        return
    limit = GAP_PERIODS * float(np.median(dt[dt > 0]))  # repeated time stamps are no period
    gaps = np.flatnonzero(dt > limit)
    if not len(gaps):
        return
    lo, hi = t[gaps], t[gaps + 1]
    hit = (start[:, None] < hi[None, :]) & (end[:, None] > lo[None, :])
    steps = np.flatnonzero(hit.any(axis=1))
    if len(steps):
        i = steps[0]
        j = int(np.argmax(hit[i]))
        raise DseError(
            f"step at line {lines[i]} ({_when(start[i])}..{_when(end[i])}) falls in a gap of the "
            f"telemetry of {_gpu(gpu)}: no sample from {_when(lo[j])} to {_when(hi[j])} ({hi[j] - lo[j]:.1f} s; samples "
            f"come every {limit / GAP_PERIODS:.3g} s elsewhere); measure again or leave such steps out",
            file=file,
        )


def match(
    samples: pd.DataFrame, start: np.ndarray, end: np.ndarray, file: str, lines: np.ndarray
) -> dict[str, np.ndarray]:
    """Per step: average power per GPU (W; from the energy counter where DCGM gives it, else
    the power samples integrated over the step), and the time-averaged SM clock and
    temperature, averaged over the GPUs."""
    per_gpu = {c: [] for c in ("power_w", "clock_mhz", "temp_c")}
    for gpu, g in samples.groupby("gpu", sort=False):
        t = g["time_s"].to_numpy(dtype=float)
        lo, hi = t.min(), t.max()
        out = np.flatnonzero((start < lo - 1e-9) | (end > hi + 1e-9))
        if len(out):
            i = out[0]
            raise DseError(
                f"step at line {lines[i]} ({_when(start[i])}..{_when(end[i])}) lies outside the telemetry of "
                f"{_gpu(gpu)} ({_when(lo)}..{_when(hi)}): are both in the same time zone?",
                file=file,
            )
        _check_gaps(t, start, end, gpu, file, lines)
        dt = end - start
        energy = g["energy_mj"].to_numpy(dtype=float)
        if np.isfinite(energy).sum() >= 2:
            te, e = t[np.isfinite(energy)], energy[np.isfinite(energy)] / 1000.0
            per_gpu["power_w"].append((np.interp(end, te, e) - np.interp(start, te, e)) / dt)
        else:
            tp, c = _cumulative(t, g["power_w"].to_numpy(dtype=float))
            per_gpu["power_w"].append((np.interp(end, tp, c) - np.interp(start, tp, c)) / dt)
        for col in ("clock_mhz", "temp_c"):
            v = g[col].to_numpy(dtype=float)
            if np.isfinite(v).sum() >= 2:
                tv, c = _cumulative(t, v)
                per_gpu[col].append((np.interp(end, tv, c) - np.interp(start, tv, c)) / dt)
            else:
                per_gpu[col].append(np.full(len(start), np.nan))
    with warnings.catch_warnings():  # a quantity no GPU reports stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return {
            c: np.nanmean(np.vstack(v), axis=0) if v else np.full(len(start), np.nan)
            for c, v in per_gpu.items()
        }
