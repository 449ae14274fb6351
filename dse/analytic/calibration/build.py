"""The accelerator profile a fit makes, its error summary, and where each number came from.

:func:`profile` turns a :class:`~.fit.FitResult` into the profile file's content
(:mod:`dse.analytic.profiles` reads it back): the base part's datasheet, power and
calibration entries with the fitted numbers in place, ``sources`` naming for every number
the file it was fitted to or the base entry it was inherited from, and ``fit`` recording
the command, the files, the parameters with their uncertainties and the error summary.
:func:`provenance` lists any accelerator's numbers with their sources (``dse describe
--accelerator``).
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dse.analytic import profiles
from dse.analytic.calibration.fit import FitResult, base_accelerator
from dse.analytic.energy import thermal
from dse.analytic.time import hardware


def _plain(value):
    """``value`` with numpy scalars as Python numbers and NaN as None (for YAML)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summary(rows: pd.DataFrame) -> dict:
    """Per set (fit, holdout) and quantity: rows, median and largest absolute error (%)."""
    out = {}
    for name, part in rows.groupby("set", sort=False):
        out[name] = {}
        for q in ("time_s", "energy_j", "power_w"):
            err = part[f"{q}_err_pct"].to_numpy(dtype=float)
            err = np.abs(err[np.isfinite(err)])
            if len(err):
                out[name][q.rsplit("_", 1)[0]] = {
                    "rows": len(err),
                    "median_abs_pct": round(float(np.median(err)), 3),
                    "max_abs_pct": round(float(err.max()), 3),
                }
    return out


def profile(result: FitResult, name: str, command: str = "") -> dict:
    """The profile file's content for ``result`` under ``name``."""
    acc = result.accelerator
    files = ", ".join(result.files)
    hardware = dict(acc["hardware"])
    hardware["source"] = (
        f"{result.base}: {hardware.get('source', '')}; refitted numbers: see sources".strip()
    )
    power = dict(acc["power"])
    power["source"] = f"dse calibrate on {files}, the rest from {result.base} (see sources)"
    params = {
        r["name"]: {
            "value": r["value"],
            "stderr": r["stderr"] if r["fitted"] else None,
            "unit": r["unit"],
            "base": r["base"],
            "fitted": bool(r["fitted"]),
            "note": r["note"],
        }
        for r in result.parameters.to_dict("records")
    }
    fit = {
        "command": command,
        "base": result.base,
        "files": result.files,
        "parameters": params,
        "workloads": result.workloads.to_dict("records"),
        "thermal": result.thermal,
        "errors": summary(result.rows),
        "notes": result.notes,
    }
    return _plain(
        {
            "format": profiles.FORMAT,
            "version": profiles.VERSION,
            "name": name,
            "base": root_part(result.base),
            "created": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "hardware": hardware,
            "power": power,
            "calibration": dict(acc["calibration"]),
            "sources": dict(sorted(result.sources.items())),
            "fit": fit,
        }
    )


def root_part(base: str) -> str:
    """The catalog part a profile derives from: ``base`` itself, or, when ``base`` is a
    profile (a refit of a refit, or of a profile onto its own file), that profile's root, so
    that a profile's base never names a file that may move or be the profile itself."""
    seen = set()
    while base not in hardware.catalog() and base not in seen:
        seen.add(base)
        prof = profiles.find(base)
        if prof is None:
            return hardware.canonical_accelerator(base) or base
        if not prof.base:
            return base
        base = prof.base
    return base


HEADER = (
    "# dse accelerator profile (docs/calibration.md): a complete accelerator, usable in a study\n"
    "# as accelerator: <this file's path>, or by name from ./accelerators/<name>.yaml.\n"
    "# 'sources' says where each number came from; 'fit' records how it was fitted.\n"
)


def write(result: FitResult, path, name: str | None = None, command: str = ""):
    """Write the profile of ``result`` to ``path`` (its name: the file's stem unless given)."""
    path = Path(path)
    return profiles.dump(profile(result, name or path.stem, command), path, header=HEADER)


def _flat(prefix: str, d: dict) -> list[tuple[str, object]]:
    out = []
    for k, v in d.items():
        if k == "source":
            continue
        key = f"{prefix}.{k}"
        if isinstance(v, dict) and k != "peak_tflops" and k != "mamf_tflops":
            out += _flat(key, v)
        else:
            out.append((key, v))
    return out


def provenance(name: str) -> tuple[str, list[tuple[str, object, str]]]:
    """(title, rows of (field, value, source)) for a catalog part or an accelerator profile."""
    prof = None if name in hardware.catalog() else profiles.find(name)
    if prof is None and name not in hardware.catalog():
        name = hardware.canonical_accelerator(name) or name  # a100-80gb: A100-80GB
    if prof is not None:
        power = {
            "r_air_k_per_w": None,
            "r_liquid_k_per_w": None,
            **prof.power,
        }  # shown even when left out
        # the fields the profile leaves out as the model takes them: its base part's
        merged = hardware.entry(name)[0]
        shown = {k: merged.get(k) for k in profiles.HardwareEntry.model_fields}
        acc = {"hardware": shown, "power": power, "calibration": prof.calibration}
        sources = {
            **{
                f"hardware.{k}": f"left out: {prof.base}'s"
                for k in shown
                if k not in prof.hardware and shown[k] is not None
            },
            **prof.sources,
        }
        title = f"accelerator profile {name} ({prof.path}; base {prof.base or 'none'})"
    else:
        acc, sources = base_accelerator(name)
        title = f"accelerator {name} (hardware catalog)"
    rows = []
    for section in ("hardware", "power", "calibration"):
        for key, value in _flat(section, acc[section]):
            src = sources.get(key) or sources.get(key.rsplit(".", 1)[0], "")
            rise = {
                "power.r_air_k_per_w": thermal.AIR_RISE_AT_TDP_K,
                "power.r_liquid_k_per_w": thermal.LIQUID_RISE_AT_TDP_K,
            }.get(key)
            tdp = acc["hardware"].get("tdp_w")
            if value is None and rise is not None and tdp:  # what the model uses instead
                value, src = round(rise / tdp, 5), f"not given: {rise:g} K at the TDP ({tdp:g} W)"
            rows.append((key, value, src))
    return title, rows
