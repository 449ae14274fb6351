"""Accelerator power from clock and activity (DVFS).

Per phase, P = P_idle + a_phase * (P_TDP - P_idle) * s(f), with the dynamic scale
s(f) = (f / f_max) * (V(f) / V(f_max))^2, i.e. the C * V^2 * f of CMOS switching power
normalised to the maximum clock (seed 000: E_dynamic = C_eff V^2 f alpha). V(f) is a
piecewise-linear voltage-frequency curve per accelerator (``dse/analytic/data/power.yaml``).
A power cap is met by the highest clock whose busy-phase power stays under it.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import numpy as np
import yaml

from dse.analytic import profiles
from dse.analytic.columns import factorise
from dse.errors import DseError


@cache
def parameters() -> dict:
    """The parsed ``power.yaml`` (defaults, cooling types, per-accelerator entries)."""
    return yaml.safe_load(files("dse.analytic.data").joinpath("power.yaml").read_text())


def entry(name: str) -> dict:
    """The power entry of accelerator ``name``: the defaults updated by its catalog entry or
    by its profile's (:mod:`dse.analytic.profiles`); the defaults alone for an unknown name."""
    p = parameters()
    out = dict(p["defaults"])
    out["activity"] = dict(p["defaults"]["activity"])
    acc = (p.get("accelerators") or {}).get(name)
    if acc is None:
        try:
            prof = profiles.find(name)
        except (DseError, OSError):
            prof = None
        acc = {} if prof is None else prof.power
    for k, v in acc.items():
        if k == "activity":
            out["activity"].update(v)
        else:
            out[k] = v
    return out


def _row(name: str) -> tuple:
    if name in (parameters().get("accelerators") or {}):
        return _row_of(name, None)
    try:
        version = profiles.key(name)
    except OSError:
        version = None
    return _row_of(name, version)


@cache
def _row_of(name: str, version: tuple | None) -> tuple:
    """The parameters of :func:`entry` as a row, cached per profile file version."""
    del version  # part of the cache key only
    e = entry(name)
    curve = np.asarray(e["vf_curve"], dtype=float)
    r_air = np.nan if e["r_air_k_per_w"] is None else float(e["r_air_k_per_w"])
    r_liq = np.nan if e["r_liquid_k_per_w"] is None else float(e["r_liquid_k_per_w"])
    a = e["activity"]
    return (curve, a["compute"], a["memory"], a["waiting"], a["parked"],
            float(e["hbm_pj_per_byte"]), r_air, r_liq, float(e["slowdown_temp_c"]),
            float(e["leakage_share"]), float(e["leakage_per_k"]))


def lookup(names: np.ndarray) -> dict[str, np.ndarray]:
    """Per-candidate power/thermal parameters for accelerator ``names``.

    Unknown names get the ``defaults`` entry. ``vf_x``/``vf_v`` are (n, K) arrays of the
    V-f points, padded to a common K by repeating the last point.
    """
    inverse, keys = factorise(names)
    keys = [str(k) for k in keys]
    rows = [_row(k) for k in keys]
    k_max = max(len(r[0]) for r in rows)
    xs = np.array([np.vstack([r[0], np.repeat(r[0][-1:], k_max - len(r[0]), axis=0)])[:, 0] for r in rows])
    vs = np.array([np.vstack([r[0], np.repeat(r[0][-1:], k_max - len(r[0]), axis=0)])[:, 1] for r in rows])
    scal = np.array([r[1:] for r in rows], dtype=float)
    fields = ("a_compute", "a_memory", "a_waiting", "a_parked", "hbm_pj_per_byte", "r_air_k_per_w",
              "r_liquid_k_per_w", "slowdown_temp_c", "leakage_share", "leakage_per_k")
    out = {f: scal[inverse, i] for i, f in enumerate(fields)}
    # (n, K) in column-major order: each curve point's column is contiguous for the
    # per-segment passes of voltage_ratio
    out["vf_x"] = xs.T[:, inverse].T
    out["vf_v"] = vs.T[:, inverse].T
    return out


class VoltageCurve:
    """Row-wise piecewise-linear V(f)/V(f_max) with the clock-independent segment terms
    computed once (the clock search evaluates it many times); same arithmetic as
    :func:`voltage_ratio`."""

    def __init__(self, vf_x: np.ndarray, vf_v: np.ndarray) -> None:
        self.x_lo, self.x_hi, self.v_start = vf_x[:, 0], vf_x[:, -1], vf_v[:, 0]
        self.segments = []
        for k in range(vf_x.shape[1] - 1):  # fixed small loop over curve segments
            x0, x1, v0, v1 = vf_x[:, k], vf_x[:, k + 1], vf_v[:, k], vf_v[:, k + 1]
            self.segments.append((x0, x1 > x0, np.where(x1 > x0, x1 - x0, 1.0), v0, v1 - v0))

    def __call__(self, clock_ratio: np.ndarray) -> np.ndarray:
        x = np.clip(np.asarray(clock_ratio, dtype=float), self.x_lo, self.x_hi)
        v = self.v_start
        for x0, rising, width, v0, dv in self.segments:
            seg = (x > x0) & rising
            frac = np.clip((x - x0) / width, 0.0, 1.0)
            v = np.where(seg, v0 + dv * frac, v)
        return v


def voltage_ratio(clock_ratio: np.ndarray, vf_x: np.ndarray, vf_v: np.ndarray) -> np.ndarray:
    """V(f)/V(f_max) at ``clock_ratio`` = f/f_max, by row-wise linear interpolation."""
    return VoltageCurve(vf_x, vf_v)(clock_ratio)


def dynamic_scale(clock_ratio: np.ndarray, vf_x: np.ndarray, vf_v: np.ndarray) -> np.ndarray:
    """C V^2 f relative to its value at the maximum clock: (f/f_max) (V/V_max)^2."""
    return clock_ratio * voltage_ratio(clock_ratio, vf_x, vf_v) ** 2


def phase_power_w(activity, scale, idle_w, tdp_w) -> np.ndarray:
    """Power of one accelerator in a phase of the given activity at dynamic scale ``scale``."""
    return idle_w + (tdp_w - idle_w) * activity * scale


def parked_power_w(a_parked, idle_w, tdp_w, floor_w) -> np.ndarray:
    """Power of an accelerator that holds its CUDA context but runs no kernel (a synchronous
    checkpoint write): P_idle + a_parked (P_TDP - P_idle), independent of the clock, at
    least the power floor (``floor_w`` NaN: none)."""
    floor = np.nan_to_num(np.asarray(floor_w, dtype=float), nan=0.0)
    return np.maximum(idle_w + a_parked * (tdp_w - idle_w), floor)
