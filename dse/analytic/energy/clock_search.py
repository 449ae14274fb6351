"""The clock the accelerators actually run at: the highest clock at or below the set clock
that meets the power cap and keeps the junction under its slowdown temperature.

Both the busy-phase power and the peak junction temperature grow with the clock, so a
bisection on [f_min, f_set] finds each limit's clock (docs/model-energy.md, "Power cap
and thermal throttling"). The bisection runs on an estimate of the step at another clock
(:func:`.phases.scaled_breakdown`); :func:`settle` checks every clock it finds against the
time model itself (``retime``) and searches again from there until the re-timed step
meets both limits or runs at the lowest clock, so a limit holds whenever any clock meets it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dse.analytic import rows as _rows
from dse.analytic.energy import power, thermal, transfer
from dse.analytic.energy.accelerator import (
    AcceleratorEnergy,
    Accelerators,
    energy_and_thermal,
    step_leakage_w,
)

BISECTION_STEPS = 18  # clock resolution (f_max - f_min) / 2^18: well under 0.01 MHz
#: relative slack of the bisection's own test (the estimate) and of the check on the
#: re-timed step: a limit is met when the re-timed value is at most limit x (1 + LIMIT_RTOL)
BISECTION_RTOL = 1e-9
LIMIT_RTOL = 1e-6
#: searches from the last re-timed clock before the fallback (a bisection on the time model)
MAX_PASSES = 4


class LimitCheck:
    """``check(clock) -> (cap_ok, hot_ok)`` for fixed candidates: the step breakdown at
    another clock (:func:`.phases.scaled_breakdown`), :func:`.accelerator.accelerator_energy`
    and the thermal peak with every clock-independent term computed once (the bisection
    calls it 18 times). Same arithmetic in the same order as those functions, so the
    clocks found are the same to the last bit.

    ``b``: the time model's breakdown at ``clock_from``; ``acc``: the candidates'
    :class:`~dse.analytic.energy.accelerator.Accelerators`.
    """

    def __init__(self, b, acc, clock_from):
        step = np.asarray(b.step_s, dtype=float)
        t_c = b.compute_s
        slot = t_c + b.memory_s + b.tp_comm_s
        pw = acc.pw
        self.a = {  # per-candidate arrays
            "step": step, "t_c": t_c, "slot": slot, "slot_pos": slot > 0,
            "idle": np.zeros_like(step) if b.host_idle_s is None else b.host_idle_s,
            "slot_div": np.where(slot > 0, slot, 1.0), "bubble": b.bubble_s, "dp_comm": b.dp_comm_s,
            "mem": b.memory_s, "opt": b.optimizer_s, "fine": b.tp_comm_s + b.pp_comm_s,
            "idle_w": acc.idle_w, "f_max": acc.clock_max_mhz, "span_w": acc.tdp_w - acc.idle_w,
            "floor": np.nan_to_num(np.asarray(acc.floor_w, dtype=float), nan=0.0),
            "e_hbm": transfer.hbm_energy_j(b.hbm_bytes, pw["hbm_pj_per_byte"]),
            "cap_lim": acc.cap_w * (1 + BISECTION_RTOL), "hot_lim": pw["slowdown_temp_c"] + BISECTION_RTOL,
            "inlet": np.asarray(acc.inlet_c, dtype=float), "clock_from": clock_from,
            **{k: pw[k] for k in ("a_waiting", "a_compute", "a_memory")},
        }
        self.voltage = power.VoltageCurve(pw["vf_x"], pw["vf_v"])
        self.terms = thermal.foster_terms(acc.liquid, acc.r_total)
        self.leakage = acc.leakage

    def __call__(self, clock, *, hot: bool = True):
        """(cap_ok, hot_ok) at ``clock``; ``hot=False`` skips the thermal part (hot_ok None)."""
        a = self.a
        t_c, bubble = a["t_c"], a["bubble"]
        new_c = t_c * (a["clock_from"] / clock)
        # longer compute first fills the time the GPU waited for its host (phases.scaled_breakdown)
        filled = np.minimum(a["idle"], np.maximum(new_c - t_c, 0.0))
        grown = new_c - t_c - filled
        new_bubble = bubble * np.where(a["slot_pos"], (a["slot"] + grown) / a["slot_div"], 1.0)
        new_step = a["step"] + grown + (new_bubble - bubble)
        blocked = new_bubble + a["dp_comm"]
        busy = np.maximum(new_step - blocked, 0.0)
        idle_w = a["idle_w"]
        ratio = clock / a["f_max"]
        dyn = a["span_w"] * (ratio * self.voltage(ratio) ** 2)  # power.dynamic_scale
        p_wait = np.maximum(idle_w + a["a_waiting"] * dyn, a["floor"])
        e_compute = a["a_compute"] * dyn * new_c
        host = a["idle"] - filled  # phases.scaled_breakdown's host_idle_s, as phases.phase_times takes it
        e_memory = a["a_memory"] * dyn * ((a["mem"] - filled) + a["opt"] - host) + a["e_hbm"]
        e_wait_fine = (p_wait - idle_w) * (a["fine"] + host)
        has_busy = busy > 0
        p_busy = idle_w + (e_compute + e_memory + e_wait_fine) / np.where(has_busy, busy, np.nan)
        p_busy = np.where(has_busy, p_busy, p_wait)
        lift = np.maximum(a["floor"] - p_busy, 0.0)  # the floor in the busy phase too
        p_busy = p_busy + lift
        if self.leakage is not None:  # accelerator_energy's change of the static power, same order
            total = e_compute + e_memory + idle_w * new_step + (e_wait_fine + (p_wait - idle_w) * blocked
                                                                 + lift * busy)
            d_w = step_leakage_w(total, new_step, self.leakage)
            p_busy, p_wait = p_busy + d_w, p_wait + d_w
        cap_ok = ~(p_busy > a["cap_lim"])
        if not hot:
            return cap_ok, None
        # fmax(x, 0): NaN -> 0 as periodic_response's nan_to_num; an infinite busy time
        # (kept here, the largest float there) gives the same peak (e^-inf = e^-huge = 0)
        t_hi = np.fmax(busy, 0.0)
        t_lo = np.fmax(blocked, 0.0)
        hot_ok = ~(thermal.peak_junction_c(p_busy, t_hi, p_wait, t_lo, a["inlet"], self.terms) > a["hot_lim"])
        return cap_ok, hot_ok


def operating_clock(b, clock, acc, ok=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Highest clock <= the set clock meeting the cap and the slowdown temperature.

    Returns (clock, power_capped, throttled). Both limits grow with the clock, so a
    bisection per limit finds the clock that meets it (seed 000's
    f_opt = min(f_max, sqrt(P_max / (k V^2))) generalised to a V-f curve and phases).
    The bisection runs over the rows that break a limit only, both limits' rows in one
    set of array operations (a row that breaks both is there twice); the thermal model
    runs only when some row breaks the slowdown temperature. ``ok``: (cap_ok, hot_ok) at
    the set clock when the caller has them.
    """
    cap_ok, hot_ok = LimitCheck(b, acc, clock)(clock) if ok is None else ok
    finite = np.isfinite(clock)
    f_cap, f_hot = clock.copy(), clock.copy()
    cap_idx, hot_idx = np.flatnonzero(~cap_ok & finite), np.flatnonzero(~hot_ok & finite)
    idx = np.concatenate([cap_idx, hot_idx])
    if len(idx):
        found = _bisect(LimitCheck(_rows.take(b, idx), _rows.take(acc, idx), clock[idx]),
                        acc.clock_min_mhz[idx], clock[idx], np.arange(len(idx)) >= len(cap_idx))
        f_cap[cap_idx], f_hot[hot_idx] = found[:len(cap_idx)], found[len(cap_idx):]
    new = np.minimum(np.minimum(f_cap, f_hot), clock)
    return new, f_cap < clock, f_hot < np.minimum(f_cap, clock)


def _bisect(check: LimitCheck, lo: np.ndarray, hi: np.ndarray, hot: np.ndarray) -> np.ndarray:
    """The highest clock in [lo, hi] passing ``check``'s cap part, or where ``hot`` (a
    bool per row) its thermal part, to (hi - lo) / 2^BISECTION_STEPS; ``lo`` where none does."""
    any_hot, all_hot = bool(hot.any()), bool(hot.all())
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        cap_ok, hot_ok = check(mid, hot=any_hot)
        if all_hot:
            ok = hot_ok
        elif any_hot:
            ok = np.where(hot, hot_ok, cap_ok)
        else:
            ok = cap_ok
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return lo


@dataclass(frozen=True, slots=True)
class Operating:
    """The operating point :func:`settle` found: the step re-timed at the clock the
    accelerators run at, that clock, the energy and thermal response there, whether the
    cap or the slowdown temperature lowered it, and whether it is the lowest clock."""

    perf: object            # TimeResult at ``clock_mhz``
    clock_mhz: np.ndarray
    energy: AcceleratorEnergy
    thermal: dict
    capped: np.ndarray      # bool: the cap lowered the clock
    throttled: np.ndarray   # bool: the slowdown temperature lowered it below the cap's clock
    at_min: np.ndarray      # bool: the clock is the accelerator's lowest


def limits_ok(e: AcceleratorEnergy, th: dict, acc: Accelerators) -> tuple[np.ndarray, np.ndarray]:
    """(cap met, slowdown temperature held) of a re-timed step, to :data:`LIMIT_RTOL`."""
    return (~(e.p_busy > acc.cap_w * (1 + LIMIT_RTOL)),
            ~(th["peak_c"] > acc.pw["slowdown_temp_c"] * (1 + LIMIT_RTOL)))


def settle(perf, acc: Accelerators, retime: Callable) -> Operating:
    """The highest clock at or below each candidate's set clock at which the *time model's*
    step meets the power cap and the slowdown temperature, or the lowest clock.

    Each pass bisects the estimate anchored at the current clock (where it is exact) for the
    rows that break a limit, re-times them there and checks again: the estimate keeps every
    kernel in its roofline regime, but a memory-bound GEMM turns compute-bound at a lower
    clock and overlapped communication hides behind longer compute, both of which draw more
    than the estimate says. After :data:`MAX_PASSES` a search on the time model itself
    settles what is left (:func:`_bisect_on_time_model`). ``retime(clock_mhz, rows)`` is the
    time model for ``rows``. The first pass runs on every row that breaks a limit at its set
    clock; the later ones on the few the re-timed step still puts above one, whose results
    join the others' once, at the end.
    """
    clock = np.asarray(perf.clock_mhz, dtype=float).copy()
    e, th = energy_and_thermal(perf.breakdown, clock, acc)
    n = len(clock)
    capped, throttled = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    lowest = np.asarray(acc.clock_min_mhz, dtype=float)
    finite = np.isfinite(clock)
    cap_ok, hot_ok = limits_ok(e, th, acc)
    rows = np.flatnonzero(~(cap_ok & hot_ok) & finite & (clock > lowest * (1 + 1e-12)))
    owned = False  # perf, e and th are copies this function made (and may change in place)
    if len(rows):  # the first pass, on every row that breaks a limit at its set clock
        new, c, t = operating_clock(_rows.take(perf.breakdown, rows), clock[rows], _rows.take(acc, rows),
                                    ok=(cap_ok[rows], hot_ok[rows]))
        capped[rows], throttled[rows] = c, t
        lower = new < clock[rows] * (1 - 1e-12)
        rows, new = rows[lower], new[lower]
        if len(rows):
            clock[rows] = new
            sub = retime(new, rows)
            perf = perf.with_rows(rows, sub)
            e_rows, th_rows = energy_and_thermal(sub.breakdown, new, _rows.take(acc, rows))
            e, th = _rows.put(e, rows, e_rows), _rows.put(th, rows, th_rows)
            owned = True
    # the rows the re-timed step still puts above a limit: more passes, on those rows only
    cap_ok, hot_ok = limits_ok(e, th, acc)
    rows = np.flatnonzero(~(cap_ok & hot_ok) & finite & (clock > lowest * (1 + 1e-12)))
    if len(rows):
        sub = _search(_rows.take(perf, rows), _rows.take(acc, rows), lambda f, local: retime(f, rows[local]),
                      _rows.take(e, rows), _rows.take(th, rows))
        moved = sub.clock_mhz < clock[rows]
        if moved.any():
            at = rows[moved]
            perf = perf.with_rows(at, _rows.take(sub.perf, moved), inplace=owned)
            e = _rows.put(e, at, _rows.take(sub.energy, moved), inplace=owned)
            th = _rows.put(th, at, _rows.take(sub.thermal, moved), inplace=owned)
            clock[at] = sub.clock_mhz[moved]
        capped[rows] |= sub.capped
        throttled[rows] |= sub.throttled
    return Operating(perf=perf, clock_mhz=clock, energy=e, thermal=th, capped=capped, throttled=throttled,
                     at_min=clock <= lowest * (1 + 1e-12))


def _search(perf, acc: Accelerators, retime: Callable, e, th) -> Operating:
    """:func:`settle`'s passes over candidates that all break a limit at their set clock."""
    clock = np.asarray(perf.clock_mhz, dtype=float).copy()
    n = len(clock)
    capped, throttled = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    finite = np.isfinite(clock)
    lowest = np.asarray(acc.clock_min_mhz, dtype=float)

    def redo(rows, new_clock):
        nonlocal perf, e, th
        clock[rows] = new_clock
        sub = retime(new_clock, rows)
        perf = perf.with_rows(rows, sub)
        e_rows, th_rows = energy_and_thermal(sub.breakdown, new_clock, _rows.take(acc, rows))
        e, th = _rows.put(e, rows, e_rows), _rows.put(th, rows, th_rows)

    for _ in range(MAX_PASSES):
        cap_ok, hot_ok = limits_ok(e, th, acc)
        rows = np.flatnonzero(~(cap_ok & hot_ok) & finite & (clock > lowest * (1 + 1e-12)))
        if not len(rows):
            break
        every = len(rows) == n
        new, c, t = operating_clock(perf.breakdown if every else _rows.take(perf.breakdown, rows),
                                    clock[rows], acc if every else _rows.take(acc, rows),
                                    ok=(cap_ok[rows], hot_ok[rows]))
        capped[rows] |= c
        throttled[rows] |= t
        lower = new < clock[rows] * (1 - 1e-12)
        if not lower.any():
            break
        redo(rows[lower], new[lower])
    else:
        _bisect_on_time_model(clock, lowest, finite, acc, retime, lambda: (perf, e, th), redo, capped, throttled)
    return Operating(perf=perf, clock_mhz=clock, energy=e, thermal=th, capped=capped, throttled=throttled,
                     at_min=clock <= lowest * (1 + 1e-12))


def _bisect_on_time_model(clock, lowest, finite, acc, retime, current, redo, capped, throttled) -> None:
    """The rows :func:`settle`'s passes left above a limit (a kernel changing its roofline
    regime just below the clock makes the passes creep): step down from the current clock
    in growing steps (0.1%, 0.4%, 1.6%, ... of it, at most to the lowest clock) on the
    re-timed step until a clock meets both limits, then bisect between that clock and the
    last one that did not. A row whose lowest clock breaks a limit stays there."""
    _, e, th = current()
    cap_ok, hot_ok = limits_ok(e, th, acc)
    rows = np.flatnonzero(~(cap_ok & hot_ok) & finite & (clock > lowest * (1 + 1e-12)))
    if not len(rows):
        return
    capped[rows] |= ~cap_ok[rows]
    throttled[rows] |= cap_ok[rows] & ~hot_ok[rows]

    def passing(rs, f):
        redo(rs, f)
        _, e, th = current()
        c, h = limits_ok(e, th, acc)
        return c[rs] & h[rs]

    hi = clock[rows].copy()
    lo = np.full(len(rows), np.nan)
    open_ = np.ones(len(rows), dtype=bool)  # no passing clock found yet
    step = 1e-3
    while open_.any():
        idx = np.flatnonzero(open_)
        f = np.maximum(hi[idx] * (1 - step), lowest[rows[idx]])
        ok = passing(rows[idx], f)
        lo[idx[ok]] = f[ok]
        at_bottom = f <= lowest[rows[idx]] * (1 + 1e-12)
        hi[idx[~ok]] = f[~ok]
        open_[idx[ok | at_bottom]] = False
        step = min(4 * step, 1.0)
    found = np.isfinite(lo)
    rows, lo, hi = rows[found], lo[found], hi[found]
    for _ in range(BISECTION_STEPS):
        if not len(rows):
            return
        mid = 0.5 * (lo + hi)
        ok = passing(rows, mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    redo(rows, lo)
