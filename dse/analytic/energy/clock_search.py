"""The clock the accelerators actually run at: the highest clock at or below the set clock
that meets the power cap and keeps the junction under its slowdown temperature.

Both the busy-phase power and the peak junction temperature grow with the clock, so a
bisection on [f_min, f_set] finds each limit's clock (docs/model-energy.md, "Power cap
and thermal throttling"). The bisection runs the energy model
(:class:`.accelerator.StepEnergy`) on an estimate of the step's phases at another clock
(:class:`.phases.ClockScaling`); :func:`settle` checks every clock it finds against the
time model itself (``retime``) and searches again from there until the re-timed step
meets both limits or runs at the lowest clock, so a limit holds whenever any clock meets it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass, replace

import numpy as np

from dse.analytic import rows as _rows
from dse.analytic.energy import thermal
from dse.analytic.energy.accelerator import (
    AcceleratorEnergy,
    Accelerators,
    energy_and_thermal,
    step_energy,
)
from dse.analytic.energy.phases import ClockScaling
from dse.analytic.rows import Choice, where

BISECTION_STEPS = 18  # clock resolution (f_max - f_min) / 2^18: well under 0.01 MHz
#: relative slack of the bisection's own test (the estimate) and of the check on the
#: re-timed step: a limit is met when the re-timed value is at most limit x (1 + LIMIT_RTOL)
BISECTION_RTOL = 1e-9
LIMIT_RTOL = 1e-6
#: searches from the last re-timed clock before the fallback (a bisection on the time model)
MAX_PASSES = 4


class LimitCheck:
    """``check(clock) -> (cap_ok, hot_ok)`` for fixed candidates: the accelerator energy model
    (:class:`~.accelerator.StepEnergy`, built once) on the phases estimated at that clock
    (:class:`~.phases.ClockScaling`), and the thermal peak there (the bisection calls it 18
    times).

    ``b``: the time model's breakdown at ``clock_from``; ``acc``: the candidates'
    :class:`~dse.analytic.energy.accelerator.Accelerators`.
    """

    def __init__(self, b, acc: Accelerators, clock_from) -> None:
        self.scaling = ClockScaling(b, clock_from)
        self.energy = step_energy(b, acc)
        self.clock_max_mhz = acc.clock_max_mhz
        self.cap_limit_w = acc.cap_w * (1 + BISECTION_RTOL)
        self.hot_limit_c = acc.pw.slowdown_temp_c + BISECTION_RTOL
        self.inlet_c = np.asarray(acc.inlet_c, dtype=float)
        self.terms = acc.foster
        self._picked: tuple | None = None  # (rows, their inlet, terms, limit): _thermal_at

    def __call__(self, clock, *, hot: bool = True, rows: np.ndarray | None = None):
        """(cap_ok, hot_ok) at ``clock``; ``hot=False`` skips the thermal part (hot_ok None);
        ``rows`` (an index array): the thermal part of those rows only (hot_ok for them)."""
        t = self.scaling.times(clock)
        busy_w, wait_w = self.energy.powers(clock / self.clock_max_mhz, t)
        cap_ok = ~(busy_w > self.cap_limit_w)
        if not hot:
            return cap_ok, None
        # fmax(x, 0): NaN -> 0 as periodic_response's nan_to_num; an infinite busy time
        # (kept here, the largest float there) gives the same peak (e^-inf = e^-huge = 0)
        t_hi, t_lo, p_hi, p_lo = t.busy, t.blocked, busy_w, wait_w
        inlet_c, terms, limit_c = self.inlet_c, self.terms, self.hot_limit_c
        if rows is not None:  # the same arithmetic, row by row, on the rows asked for
            inlet_c, terms, limit_c = self._thermal_at(rows)
            t_hi, t_lo, p_hi, p_lo = t_hi[rows], t_lo[rows], p_hi[rows], p_lo[rows]
        peak_c = thermal.peak_junction_c(
            p_hi, np.fmax(t_hi, 0.0), p_lo, np.fmax(t_lo, 0.0), inlet_c, terms
        )
        return cap_ok, ~(peak_c > limit_c)

    def _thermal_at(self, rows: np.ndarray) -> tuple:
        """(inlet, Foster terms, slowdown limit) of ``rows``, picked once per index array."""
        cached = self._picked
        if cached is None or cached[0] is not rows:

            def at(x):
                return x[rows] if np.ndim(x) else x

            picked = (at(self.inlet_c), [(at(r), at(tau)) for r, tau in self.terms])
            cached = (rows, *picked, at(self.hot_limit_c))
            self._picked = cached
        return cached[1:]


def operating_clock(
    b, clock, acc, ok, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Highest clock <= the set clock meeting the cap and the slowdown temperature.

    Returns (clock, power_capped, throttled). Both limits grow with the clock, so a
    bisection per limit finds the clock that meets it (seed 000's
    f_opt = min(f_max, sqrt(P_max / (k V^2))) generalised to a V-f curve and phases).
    The bisection runs over the rows that break a limit only, both limits' rows in one
    set of array operations (a row that breaks both is there twice); the thermal model
    runs only when some row breaks the slowdown temperature. ``ok``: (cap_ok, hot_ok) at
    the set clock. ``rows`` (an index array): the candidates of
    ``b`` and ``acc`` that ``clock`` and ``ok`` are for (None: every one), picked once.
    """
    cap_ok, hot_ok = ok
    finite = np.isfinite(clock)
    f_cap, f_hot = clock.copy(), clock.copy()
    cap_idx, hot_idx = np.flatnonzero(~cap_ok & finite), np.flatnonzero(~hot_ok & finite)
    idx = np.concatenate([cap_idx, hot_idx])
    if len(idx):
        at = idx if rows is None else rows[idx]
        lo, hi, hot = acc.clock_min_mhz[at], clock[idx], np.arange(len(idx)) >= len(cap_idx)
        levels = _tree_levels(len(idx))  # few rows: several steps' clocks a call
        tiled = np.tile(np.arange(len(idx)), 2**levels - 1)  # the rows, 2^levels - 1 times
        check = LimitCheck(_rows.take(b, at[tiled]), _rows.take(acc, at[tiled]), hi[tiled])
        found = _bisect(check, lo, hi, hot, levels)
        f_cap[cap_idx], f_hot[hot_idx] = found[: len(cap_idx)], found[len(cap_idx) :]
    new = np.minimum(np.minimum(f_cap, f_hot), clock)
    return new, f_cap < clock, f_hot < np.minimum(f_cap, clock)


#: a bisection over few rows tests the clocks of several steps in one call of the check:
#: (rows, steps) where rows x (2^steps - 1) <= TREE_POINTS, steps dividing BISECTION_STEPS
TREE_POINTS = 1200
_TREE_STEPS = (9, 6, 3, 2)


def _tree_levels(n: int) -> int:
    """The steps of :func:`_bisect` a call of its check tests for ``n`` rows."""
    for levels in _TREE_STEPS:
        if n * (2**levels - 1) <= TREE_POINTS and BISECTION_STEPS % levels == 0:
            return levels
    return 1


def _ok(check: LimitCheck, clock, any_hot: bool, all_hot: bool, hot_rows) -> np.ndarray:
    """Whether each row passes ``check``'s cap part at ``clock``, or on the rows
    ``hot_rows`` (all where ``all_hot``) its thermal part."""
    cap_ok, hot_ok = check(clock, hot=any_hot, rows=hot_rows)
    if all_hot:
        return hot_ok
    if any_hot:
        cap_ok[hot_rows] = hot_ok  # (a new array of the check's)
    return cap_ok


def _bisect(check: LimitCheck, lo, hi, hot, levels: int = 1) -> np.ndarray:
    """The highest clock in [lo, hi] passing ``check``'s cap part, or where ``hot`` (a
    bool per row) its thermal part, to (hi - lo) / 2^BISECTION_STEPS; ``lo`` where none does.

    Each call of ``check`` (built on the rows repeated 2^levels - 1 times) tests ``levels``
    steps: every clock those steps could test, level by level (node 2k the lower half of
    node k's bracket, 2k+1 the upper, each midpoint ``0.5 * (lo + hi)`` of the same two
    numbers as the step that tests it), then the path each row's results take through them;
    the same clocks, the same bits, whatever ``levels``. One level (many rows) is the plain
    bisection: no tree is built."""
    n, points = len(lo), 2**levels - 1
    hot_all = np.tile(hot, points)
    any_hot, all_hot = bool(hot.any()), bool(hot.all())
    # the thermal part only on the rows that search the temperature's clock
    hot_rows = np.flatnonzero(hot_all) if any_hot and not all_hot else None
    cols = np.arange(n)
    for _ in range(BISECTION_STEPS // levels):
        los, his, mids = lo[None, :], hi[None, :], []
        for depth in range(levels):
            mid = 0.5 * (los + his)
            mids.append(mid)
            if depth + 1 < levels:  # the next level's brackets: (lo, mid), (mid, hi)
                los = np.stack([los, mid], axis=1).reshape(-1, n)
                his = np.stack([mid, his], axis=1).reshape(-1, n)
        mid = np.concatenate(mids) if levels > 1 else mids[0]  # (points, n): level d's nodes
        ok = _ok(check, mid.reshape(-1), any_hot, all_hot, hot_rows).reshape(points, n)
        node = 0  # each row's node in the level, from row 2^depth - 1 (the root: row 0)
        for depth in range(levels):
            if depth:
                at = (2**depth - 1) + node
                passed, tested = ok[at, cols], mid[at, cols]
            else:
                passed, tested = ok[0], mid[0]
            choose = Choice(passed)  # (its integer form once)
            lo = choose(tested, lo)
            hi = choose(hi, tested)
            if depth + 1 < levels:
                node = 2 * node + passed
    return lo


@dataclass(frozen=True, slots=True)
class Operating:
    """The operating point :func:`settle` found: the step re-timed at the clock the
    accelerators run at, that clock, the energy and thermal response there, whether the
    cap or the slowdown temperature lowered it, whether it is the lowest clock, and whether
    the step there meets each limit (:func:`limits_ok`)."""

    perf: object  # TimeResult at ``clock_mhz``
    clock_mhz: np.ndarray
    energy: AcceleratorEnergy
    thermal: thermal.ThermalResponse
    capped: np.ndarray  # bool: the cap lowered the clock
    throttled: np.ndarray  # bool: the slowdown temperature lowered it below the cap's clock
    at_min: np.ndarray  # bool: the clock is the accelerator's lowest
    cap_ok: np.ndarray  # bool: the step at the clock meets the cap (to LIMIT_RTOL)
    hot_ok: np.ndarray  # bool: and stays under the slowdown temperature

    @classmethod
    def found(cls, perf, clock_mhz, energy, thermal_response, capped, throttled, lowest_mhz, ok):
        """The point a search ended at; ``at_min`` from its clock and the lowest one; ``ok``:
        (cap_ok, hot_ok) there."""
        return cls(
            cap_ok=ok[0],
            hot_ok=ok[1],
            perf=perf,
            clock_mhz=clock_mhz,
            energy=energy,
            thermal=thermal_response,
            capped=capped,
            throttled=throttled,
            at_min=clock_mhz <= lowest_mhz * (1 + 1e-12),
        )


def limits_ok(
    e: AcceleratorEnergy, th: thermal.ThermalResponse, acc: Accelerators, limits=None
) -> tuple[np.ndarray, np.ndarray]:
    """(cap met, slowdown temperature held) of a re-timed step, to :data:`LIMIT_RTOL`;
    ``limits``: :func:`limit_values` of ``acc`` where the caller has them."""
    cap_w, hot_c = limit_values(acc) if limits is None else limits
    return ~(e.busy_w > cap_w), ~(th.peak_c > hot_c)


def limit_values(acc: Accelerators) -> tuple[np.ndarray, np.ndarray]:
    """The cap (W) and the slowdown temperature (degC) with :data:`LIMIT_RTOL`'s slack."""
    return acc.cap_w * (1 + LIMIT_RTOL), acc.pw.slowdown_temp_c * (1 + LIMIT_RTOL)


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
    join the others' once, at the end. Rows are picked from :func:`searched` copies (the
    fields the search reads only); the energy and thermal arrays are this function's own
    (:func:`_own`), so re-timed rows are written into them in place.
    """
    clock = np.asarray(perf.clock_mhz, dtype=float).copy()
    e, th = energy_and_thermal(perf.breakdown, clock, acc)
    e, th = _own(e, perf.breakdown), _own(th, perf.breakdown)
    n = len(clock)
    capped, throttled = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    lowest = np.asarray(acc.clock_min_mhz, dtype=float)
    finite = np.isfinite(clock)
    limits = limit_values(acc)
    cap_ok, hot_ok = limits_ok(e, th, acc, limits)
    rows = np.flatnonzero(~(cap_ok & hot_ok) & finite & (clock > lowest * (1 + 1e-12)))
    owned = False  # perf's clock-dependent arrays are copies this function made
    picked = searched(acc)
    if len(rows):  # the first pass, on every row that breaks a limit at its set clock
        acc_rows = _rows.take(picked, rows)  # (picked once from the block: a cache-cold copy)
        new, c, t = operating_clock(
            _rows.take(searched_step(perf.breakdown), rows),
            clock[rows],
            acc_rows,
            ok=(cap_ok[rows], hot_ok[rows]),
        )
        capped[rows], throttled[rows] = c, t
        lower = new < clock[rows] * (1 - 1e-12)
        rows, new = rows[lower], new[lower]
        if len(rows):
            clock[rows] = new
            sub = retime(new, rows)
            perf = perf.with_rows(rows, sub)
            e_rows, th_rows = energy_and_thermal(
                sub.breakdown, new, _rows.take(acc_rows, np.flatnonzero(lower))
            )
            e = _rows.put(e, rows, e_rows, inplace=True)
            th = _rows.put(th, rows, th_rows, inplace=True)
            owned = True
    # the rows the re-timed step still puts above a limit: more passes, on those rows only
    cap_ok, hot_ok = limits_ok(e, th, acc, limits)
    rows = np.flatnonzero(~(cap_ok & hot_ok) & finite & (clock > lowest * (1 + 1e-12)))
    if len(rows):
        acc_rows = _rows.take(picked, rows)
        sub = _search(
            _rows.take(searched_step(perf.breakdown), rows),
            clock[rows],
            acc_rows,
            lambda f, local: retime(f, rows[local]),
            _rows.take(e, rows),
            _rows.take(th, rows),
        )
        for local, timed in sub.retimed:  # in order: a row's last re-timing wins
            perf = perf.with_rows(rows[local], timed, inplace=owned)
            owned = True
        moved = sub.clock_mhz < clock[rows]
        if moved.any():
            at = rows[moved]
            e = _rows.put(e, at, _rows.take(sub.energy, moved), inplace=True)
            th = _rows.put(th, at, _rows.take(sub.thermal, moved), inplace=True)
            clock[at] = sub.clock_mhz[moved]
        capped[rows] |= sub.capped
        throttled[rows] |= sub.throttled
        cap_ok[rows], hot_ok[rows] = limits_ok(sub.energy, sub.thermal, acc_rows)
    return Operating.found(perf, clock, e, th, capped, throttled, lowest, (cap_ok, hot_ok))


#: the step breakdown's fields the search reads (:class:`~.phases.ClockScaling`,
#: :class:`~.accelerator.StepEnergy`'s HBM traffic)
SEARCHED_STEP_FIELDS = frozenset(
    (
        "step_s",
        "compute_s",
        "memory_s",
        "layer_comm_s",
        "pp_comm_s",
        "dp_comm_s",
        "bubble_s",
        "optimizer_s",
        "host_idle_s",
        "offload_s",
        "hbm_traffic_bytes",
    )
)


def searched_step(b):
    """The step breakdown ``b`` with only :data:`SEARCHED_STEP_FIELDS` (the others None), so
    that picking its rows copies what the search reads only."""
    return replace(b, **{f.name: None for f in fields(b) if f.name not in SEARCHED_STEP_FIELDS})


def searched(acc: Accelerators) -> Accelerators:
    """``acc`` with only the fields the search reads (the energy model, the limits, the
    Foster terms and leakage parameters computed once; the others None), so that picking its
    rows copies what the search reads only; ``acc`` itself where its terms are not computed
    (:meth:`~.accelerator.Accelerators.derived`: they come from the cooling fields)."""
    if acc.terms is None:
        return acc
    pw = replace(
        acc.pw,
        a_parked=None,
        r_air_k_per_w=None,
        r_liquid_k_per_w=None,
        leakage_share=None,
        leakage_per_k=None,
    )
    return replace(
        acc,
        pw=pw,
        liquid=None,
        r_total_k_per_w=None,
        r_air_k_per_w=None,
        tau_fast_s=None,
        tau_slow_s=None,
    )


def _own(obj, b):
    """``obj`` (an energy or thermal result, nested dataclasses of arrays) with a copy of
    every writeable array that is one of the breakdown ``b``'s (:func:`~.phases.phase_times`
    passes the step and compute times on), a view, or in two fields: then a put in place
    writes only arrays made for ``obj``."""
    theirs = {id(getattr(b, f.name)) for f in fields(b)}
    seen: set[int] = set()

    def own(x):
        if is_dataclass(x):
            return replace(x, **{f.name: own(getattr(x, f.name)) for f in fields(x)})
        if isinstance(x, np.ndarray) and x.flags.writeable:
            if id(x) in theirs or id(x) in seen or x.base is not None:
                x = x.copy()
            seen.add(id(x))
        return x

    return own(obj)


@dataclass(frozen=True, slots=True)
class Passes:
    """What :func:`_search` found for its rows: the clock, the energy and thermal response
    there, whether the cap or the slowdown temperature lowered it, and each re-timing in
    order ((its rows, the time result for them))."""

    clock_mhz: np.ndarray
    energy: AcceleratorEnergy
    thermal: thermal.ThermalResponse
    capped: np.ndarray
    throttled: np.ndarray
    retimed: list


def _search(b, clock, acc: Accelerators, retime: Callable, e, th) -> Passes:
    """:func:`settle`'s passes over candidates that all break a limit at ``clock``, their
    clock (``b``: their step breakdown, :func:`searched_step`; ``e``, ``th``: their energy
    and thermal response, which this function may change in place)."""
    clock = np.asarray(clock, dtype=float).copy()
    n = len(clock)
    capped, throttled = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    finite = np.isfinite(clock)
    lowest = np.asarray(acc.clock_min_mhz, dtype=float)
    retimed: list = []

    def redo(rows, new_clock):
        nonlocal b, e, th
        clock[rows] = new_clock
        sub = retime(new_clock, rows)
        retimed.append((rows, sub))
        b = _rows.put(b, rows, sub.breakdown, inplace=True)
        e_rows, th_rows = energy_and_thermal(sub.breakdown, new_clock, _rows.take(acc, rows))
        e = _rows.put(e, rows, e_rows, inplace=True)
        th = _rows.put(th, rows, th_rows, inplace=True)

    for _ in range(MAX_PASSES):
        cap_ok, hot_ok = limits_ok(e, th, acc)
        rows = np.flatnonzero(~(cap_ok & hot_ok) & finite & (clock > lowest * (1 + 1e-12)))
        if not len(rows):
            break
        new, c, t = operating_clock(
            b,
            clock[rows],
            acc,
            ok=(cap_ok[rows], hot_ok[rows]),
            rows=None if len(rows) == n else rows,
        )
        capped[rows] |= c
        throttled[rows] |= t
        lower = new < clock[rows] * (1 - 1e-12)
        if not lower.any():
            break
        redo(rows[lower], new[lower])
    else:
        _bisect_on_time_model(
            clock, lowest, finite, acc, retime, lambda: (e, th), redo, capped, throttled
        )
    return Passes(clock, e, th, capped, throttled, retimed)


def _bisect_on_time_model(
    clock, lowest, finite, acc, retime, current, redo, capped, throttled
) -> None:
    """The rows :func:`settle`'s passes left above a limit (a kernel changing its roofline
    regime just below the clock makes the passes creep): step down from the current clock
    in growing steps (0.1%, 0.4%, 1.6%, ... of it, at most to the lowest clock) on the
    re-timed step until a clock meets both limits, then bisect between that clock and the
    last one that did not. A row whose lowest clock breaks a limit stays there."""
    e, th = current()
    cap_ok, hot_ok = limits_ok(e, th, acc)
    rows = np.flatnonzero(~(cap_ok & hot_ok) & finite & (clock > lowest * (1 + 1e-12)))
    if not len(rows):
        return
    capped[rows] |= ~cap_ok[rows]
    throttled[rows] |= cap_ok[rows] & ~hot_ok[rows]

    def passing(rs, f):
        redo(rs, f)
        e, th = current()
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
        lo, hi = where(ok, mid, lo), where(ok, hi, mid)
    redo(rows, lo)
