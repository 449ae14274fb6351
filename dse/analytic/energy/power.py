"""Accelerator power from clock and activity (DVFS).

Per phase, P = P_idle + a_phase * (P_TDP - P_idle) * s(f), with the dynamic scale
s(f) = (f / f_max) * (V(f) / V(f_max))^2, i.e. the C * V^2 * f of CMOS switching power
normalised to the maximum clock (seed 000: E_dynamic = C_eff V^2 f alpha). V(f) is a
piecewise-linear voltage-frequency curve per accelerator (``dse/analytic/data/power.yaml``).
A power cap is met by the highest clock whose busy-phase power stays under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import numpy as np

from dse.analytic import profiles
from dse.analytic.columns import factorise, take_fields
from dse.analytic.rows import nan_to_num, where
from dse.errors import DseError
from dse.yamlfile import load_packaged


@cache
def parameters() -> dict:
    """The parsed ``power.yaml`` (defaults, cooling types, per-accelerator entries)."""
    return load_packaged(files("dse.analytic.data").joinpath("power.yaml").read_text())


@dataclass(frozen=True, slots=True)
class CoolingPath:
    """The two-term Foster network of one cooling type's junction-to-inlet path
    (``power.yaml``'s ``cooling`` section gives the estimates)."""

    fast_fraction: float  # the fast term's (die, interface, lid or plate base) share of R
    tau_fast_s: float  # its time constant R_i C_i, s
    tau_slow_s: float  # the heat sink's or cold plate's, s


@cache
def cooling_path(kind: str) -> CoolingPath:
    """The :class:`CoolingPath` of cooling type ``kind`` (air, liquid)."""
    c = parameters()["cooling"][kind]
    return CoolingPath(
        fast_fraction=float(c["fast_fraction"]),
        tau_fast_s=float(c["tau_fast_s"]),
        tau_slow_s=float(c["tau_slow_s"]),
    )


@cache
def link_vf_curve() -> tuple[np.ndarray, np.ndarray]:
    """The network links' V-f curve (``power.yaml``'s ``links``): the clock points
    f / f_nominal and the supply V / V(f_nominal) there."""
    curve = np.asarray(parameters()["links"]["vf_curve"], dtype=float)
    return curve[:, 0], curve[:, 1]


def link_energy_scale(clock_fraction: np.ndarray) -> np.ndarray:
    """Energy per bit of a link at ``clock_fraction`` of its nominal clock over its energy
    per bit at the nominal clock: (V(f) / V(f_nominal))^2 on :func:`link_vf_curve`
    (docs/model-energy.md, "Network links"); exactly 1 at the nominal clock."""
    x, v = link_vf_curve()
    ratio = np.interp(np.asarray(clock_fraction, dtype=float), x, v) / np.interp(1.0, x, v)
    return ratio * ratio


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


@dataclass(frozen=True, slots=True)
class PowerParameters:
    """Power and thermal parameters of the candidates' accelerators (``data/power.yaml``'s
    entry of each, or its profile's; :func:`entry`): one value per candidate, the V-f curve
    one row of points per candidate."""

    vf_x: np.ndarray  # (n, K) clock of the V-f points, f / f_max
    vf_v: np.ndarray  # (n, K) voltage at those points, V / V_max
    a_compute: np.ndarray  # 1, dynamic power of compute-bound kernels at f_max over (TDP - idle)
    a_memory: np.ndarray  # 1, same for memory-bound kernels
    a_waiting: np.ndarray  # 1, same for a rank blocked in a collective or a bubble
    a_parked: np.ndarray  # 1, same for a context held with no kernel (checkpoint write)
    hbm_pj_per_byte: np.ndarray  # pJ/B, HBM traffic energy
    r_air_k_per_w: np.ndarray  # K/W, junction to inlet, air-cooled (NaN: not in the catalog)
    r_liquid_k_per_w: np.ndarray  # K/W, junction to inlet, liquid-cooled (NaN: not in the catalog)
    slowdown_temp_c: np.ndarray  # degC, junction temperature at which the part throttles
    leakage_share: np.ndarray  # 1, share of the TDP that is leakage at the reference cooling
    leakage_per_k: np.ndarray  # 1/K, leakage growth per kelvin of junction temperature

    @classmethod
    def of_entry(cls, e: dict, n: int) -> PowerParameters:
        """One power entry (:func:`entry`'s form, or a profile's ``power``) for ``n`` candidates;
        an absent thermal field is NaN."""
        curve = np.asarray(e["vf_curve"], dtype=float)
        a = e["activity"]

        def column(value) -> np.ndarray:
            return np.full(n, np.nan if value is None else float(value))

        return cls(
            vf_x=np.broadcast_to(curve[:, 0], (n, len(curve))),
            vf_v=np.broadcast_to(curve[:, 1], (n, len(curve))),
            a_compute=column(a["compute"]),
            a_memory=column(a["memory"]),
            a_waiting=column(a["waiting"]),
            a_parked=column(a["parked"]),
            hbm_pj_per_byte=column(e["hbm_pj_per_byte"]),
            r_air_k_per_w=column(e.get("r_air_k_per_w")),
            r_liquid_k_per_w=column(e.get("r_liquid_k_per_w")),
            slowdown_temp_c=column(e.get("slowdown_temp_c")),
            leakage_share=column(e.get("leakage_share")),
            leakage_per_k=column(e.get("leakage_per_k")),
        )


#: the fields of :class:`PowerParameters` with one number per candidate
_SCALAR_FIELDS = (
    "a_compute",
    "a_memory",
    "a_waiting",
    "a_parked",
    "hbm_pj_per_byte",
    "r_air_k_per_w",
    "r_liquid_k_per_w",
    "slowdown_temp_c",
    "leakage_share",
    "leakage_per_k",
)


def _row(name: str) -> PowerParameters:
    if name in (parameters().get("accelerators") or {}):
        return _row_of(name, None)
    try:
        version = profiles.key(name)
    except OSError:
        version = None
    return _row_of(name, version)


@cache
def _row_of(name: str, version: tuple | None) -> PowerParameters:
    """The parameters of :func:`entry` for one candidate, cached per profile file version."""
    del version  # part of the cache key only
    return PowerParameters.of_entry(entry(name), 1)


def lookup(names: np.ndarray) -> PowerParameters:
    """Per-candidate power/thermal parameters for accelerator ``names``.

    Unknown names get the ``defaults`` entry. ``vf_x``/``vf_v`` are (n, K) arrays of the
    V-f points, padded to a common K by repeating the last point.
    """
    inverse, keys = factorise(names)
    rows = [_row(str(k)) for k in keys]
    k_max = max(r.vf_x.shape[1] for r in rows)

    def padded(curve: np.ndarray) -> np.ndarray:
        return np.concatenate([curve[0], np.repeat(curve[0, -1:], k_max - curve.shape[1])])

    xs = np.array([padded(r.vf_x) for r in rows])
    vs = np.array([padded(r.vf_v) for r in rows])
    table = np.array([[getattr(r, f)[0] for r in rows] for f in _SCALAR_FIELDS], dtype=float)
    scalars = dict(zip(_SCALAR_FIELDS, take_fields(table, inverse), strict=True))
    n = len(inverse)
    if (xs == xs[:1]).all() and (vs == vs[:1]).all():  # one curve: a read-only broadcast
        return PowerParameters(
            vf_x=np.broadcast_to(xs[0], (n, k_max)),
            vf_v=np.broadcast_to(vs[0], (n, k_max)),
            **scalars,
        )
    # (n, K) in column-major order: each curve point's column is contiguous for the
    # per-segment passes of VoltageCurve
    return PowerParameters(vf_x=xs.T[:, inverse].T, vf_v=vs.T[:, inverse].T, **scalars)


class VoltageCurve:
    """Row-wise piecewise-linear V(f)/V(f_max) with the clock-independent segment terms
    computed once (the clock search evaluates it many times); same arithmetic as
    :func:`voltage_ratio`.

    Where every row's points are in increasing clock order (every curve of power.yaml),
    two steps are left out that cannot change a bit: the clip of the segment's fraction to
    [0, 1] (the last segment a clock is past, which sets V, holds it: ``x0 < x <= x1``, so
    the rounded ``(x - x0) / (x1 - x0)`` is in [0, 1]) and a first segment that is flat in
    every row (``v0 + 0 * frac`` is its start, which V is below the segment anyway)."""

    def __init__(self, vf_x: np.ndarray, vf_v: np.ndarray) -> None:
        self.knee = _knee(vf_x, vf_v)
        self.rows = vf_x.shape[:1]  # (the result's shape for one clock: one value a row)
        if self.knee is not None:
            return  # every row's curve the same flat-then-rising one: its numbers
        self.x_lo, self.x_hi, self.v_start = vf_x[:, 0], vf_x[:, -1], vf_v[:, 0]
        self.segments = []
        ordered = bool(np.all(vf_x[:, 1:] >= vf_x[:, :-1]))
        self.clip_fraction = not ordered
        for k in range(vf_x.shape[1] - 1):  # fixed small loop over curve segments
            x0, x1, v0, v1 = vf_x[:, k], vf_x[:, k + 1], vf_v[:, k], vf_v[:, k + 1]
            rising = x1 > x0
            dv = v1 - v0
            if k == 0 and ordered and not np.any(dv) and np.all(v0 > 0):
                continue  # flat from the start: V stays v_start there
            # None: every row's segment rises (no mask to apply)
            self.segments.append(
                (x0, None if rising.all() else rising, where(rising, x1 - x0, 1.0), v0, dv)
            )

    def __call__(self, clock_ratio: np.ndarray) -> np.ndarray:
        if self.knee is not None:
            # v0 + dv * max(frac, 0) is the segment's value above the knee and v0 = the
            # start's at or below it (fmax: a NaN clock, which selects neither, the start's);
            # the lower clip cannot change that value, only the upper one is needed
            x_hi, x0, width, v0, dv = self.knee
            x = np.asarray(clock_ratio, dtype=float)
            v = np.minimum(x, x_hi, out=np.empty(np.broadcast_shapes(x.shape, self.rows)))
            v -= x0
            v /= width
            np.fmax(v, 0.0, out=v)
            v *= dv
            v += v0
            return v
        x = np.clip(np.asarray(clock_ratio, dtype=float), self.x_lo, self.x_hi)
        v = self.v_start
        for x0, rising, width, v0, dv in self.segments:
            seg = x > x0 if rising is None else (x > x0) & rising
            frac = (x - x0) / width
            if self.clip_fraction:
                frac = np.clip(frac, 0.0, 1.0)
            v = where(seg, v0 + dv * frac, v)
        return v


def _knee(vf_x: np.ndarray, vf_v: np.ndarray) -> tuple | None:
    """(x_hi, x0, x1 - x0, v0, v1 - v0) where every row holds the same three-point curve
    (bit for bit), flat from its first point to its knee ``x0`` (``v0 > 0``) and rising
    from there to its last, ``x1 = x_hi`` (every curve of power.yaml); else None."""
    if vf_x.ndim != 2 or vf_x.shape[1] != 3 or not len(vf_x):
        return None
    first_x, first_v = vf_x[0], vf_v[0]
    for k in range(3):  # one column at a time (the columns are contiguous); none: a broadcast
        if vf_x.strides[0] == 0 and vf_v.strides[0] == 0:
            break
        if not ((vf_x[:, k] == first_x[k]).all() and (vf_v[:, k] == first_v[k]).all()):
            return None
    x_lo, x0, x1 = (float(x) for x in first_x)
    v_lo, v0, v1 = (float(v) for v in first_v)
    if not (x_lo <= x0 < x1 and v_lo == v0 and v0 > 0 and np.isfinite(v1)):
        return None
    return x1, x0, x1 - x0, v0, v1 - v0


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
    floor = nan_to_num(np.asarray(floor_w, dtype=float))  # NaN (no floor) -> 0
    return np.maximum(idle_w + a_parked * (tdp_w - idle_w), floor)
