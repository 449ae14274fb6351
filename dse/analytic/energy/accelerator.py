"""Accelerator energy per iteration by phase (DVFS power model) and its junction temperature.

Compute-bound kernels draw P_idle + a_c D s(f), memory-bound ones P_idle + a_m D s(f)
plus the HBM traffic energy, a blocked rank P_idle + a_w D s(f) (at least the power
floor), with D = TDP - P_idle and s(f) = (f/f_max) (V/V_max)^2 (:mod:`.power`;
docs/model-energy.md). Another cooling or inlet than the one the powers were measured
with (air at :data:`REFERENCE_INLET_C`) changes the static power with the junction
temperature (:func:`leakage_change_w`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dse.analytic.energy import power, thermal, transfer
from dse.analytic.energy.phases import PhaseTimes, phase_times
from dse.analytic.energy.power import PowerParameters
from dse.analytic.rows import nan_to_num, where

#: the inlet temperature (air cooling) at which the catalog's powers hold: the declared
#: default of ``inlet_temp_c``
REFERENCE_INLET_C = 30.0


@dataclass(frozen=True, slots=True)
class Foster:
    """The junction's two Foster terms per candidate (:func:`.thermal.foster_terms`)."""

    r_fast_k_per_w: np.ndarray  # K/W
    tau_fast_s: np.ndarray  # s
    r_slow_k_per_w: np.ndarray  # K/W
    tau_slow_s: np.ndarray  # s


@dataclass(frozen=True, slots=True)
class Leakage:
    """:func:`leakage_change_w`'s parameters per candidate."""

    inlet_excess_k: np.ndarray  # K, inlet above the reference
    r_excess_k_per_w: np.ndarray  # K/W, resistance above the part's air-cooled one
    leak_w: np.ndarray  # W, leakage at the reference
    per_k: np.ndarray  # 1/K, its growth


@dataclass(frozen=True, slots=True)
class Accelerators:
    """Per-candidate power and thermal parameters of the accelerators.

    ``terms`` and ``leak``: the Foster terms and the leakage parameters computed once
    (:meth:`derived`; picked with the rows like every other field), else derived on each use."""

    clock_max_mhz: np.ndarray  # MHz
    clock_min_mhz: np.ndarray  # MHz
    idle_w: np.ndarray  # W, static power
    tdp_w: np.ndarray  # W
    pw: PowerParameters  # power.lookup(): activities, V-f curve, HBM pJ/B, slowdown temperature
    floor_w: np.ndarray  # W, power floor while blocked (NaN: none)
    inlet_c: np.ndarray  # degC, coolant / air inlet
    liquid: np.ndarray  # bool, liquid cooling
    r_total_k_per_w: np.ndarray  # K/W, junction to inlet
    cap_w: np.ndarray  # W, power limit (at most the TDP)
    r_air_k_per_w: np.ndarray | None = None  # K/W, the part's air-cooled resistance (the reference)
    tau_fast_s: np.ndarray | None = None  # s, the fast Foster term's (NaN or None: the cooling's)
    tau_slow_s: np.ndarray | None = None  # s, the slow term's (NaN or None: the cooling's)
    terms: Foster | None = None  # the Foster terms, once computed
    leak: Leakage | None = None  # the leakage parameters, once computed (None: not, or none)

    def derived(self) -> Accelerators:
        """This with its Foster terms and leakage parameters computed once (the energy model
        and the clock search use them many times)."""
        (r_fast, tau_fast), (r_slow, tau_slow) = self.foster
        leak = self._leakage()
        return replace(
            self,
            terms=Foster(r_fast, tau_fast, r_slow, tau_slow),
            leak=None if leak is None else Leakage(*leak),
        )

    @property
    def foster(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The junction's two Foster terms (:func:`.thermal.foster_terms`)."""
        t = self.terms
        if t is not None:
            return [(t.r_fast_k_per_w, t.tau_fast_s), (t.r_slow_k_per_w, t.tau_slow_s)]
        return thermal.foster_terms(
            self.liquid, self.r_total_k_per_w, self.tau_fast_s, self.tau_slow_s
        )

    @property
    def leakage(self) -> tuple | None:
        """:func:`leakage_change_w`'s parameters, None where every candidate is cooled as the
        reference (air at the reference inlet: no change)."""
        lk = self.leak
        if lk is None:
            return None if self.terms is not None else self._leakage()
        if not (lk.inlet_excess_k.any() or lk.r_excess_k_per_w.any()):  # rows picked: none left
            return None
        return lk.inlet_excess_k, lk.r_excess_k_per_w, lk.leak_w, lk.per_k

    def _leakage(self) -> tuple | None:
        if self.r_air_k_per_w is None:
            return None
        inlet = np.asarray(self.inlet_c, dtype=float) - REFERENCE_INLET_C
        r_excess = self.r_total_k_per_w - self.r_air_k_per_w
        if not (inlet.any() or r_excess.any()):
            return None
        return inlet, r_excess, self.pw.leakage_share * self.tdp_w, self.pw.leakage_per_k


def leakage_change_w(mean_w, inlet_excess_k, r_excess_k_per_w, leak_w, per_k) -> np.ndarray:
    """Change of the static power from the reference cooling's at the same mean power
    ``mean_w``: the junction runs ``dT = inlet_excess + r_excess * mean_w`` warmer (negative:
    cooler), and leakage, ``leak_w`` at the reference, grows as ``exp(per_k * dT)``
    (data/power.yaml gives the sources). One fixed-point step: the change's own effect on
    the temperature (a few tenths of a kelvin) is left out."""
    return leak_w * np.expm1(per_k * (inlet_excess_k + r_excess_k_per_w * mean_w))


def step_leakage_w(total_j, step_s, leakage) -> np.ndarray:
    """:func:`leakage_change_w` at an iteration's mean power ``total_j / step_s`` (0 for an
    empty step); ``leakage``: :attr:`Accelerators.leakage`."""
    timed = step_s > 0
    if timed.all():  # the usual case: no selection to make
        return leakage_change_w(total_j / step_s, *leakage)
    d_w = leakage_change_w(total_j / where(timed, step_s, np.nan), *leakage)
    return where(timed, d_w, 0.0)


@dataclass(frozen=True, slots=True)
class AcceleratorEnergy:
    """Energy per accelerator per iteration (J) by component, and the phase powers (W)."""

    compute_j: np.ndarray  # compute-bound kernels, dynamic
    memory_j: np.ndarray  # memory-bound kernels and the optimizer, dynamic, and the HBM traffic
    idle_j: np.ndarray  # static power over the iteration (with the leakage change)
    waiting_j: np.ndarray  # above static while blocked or waiting (and any power-floor lift)
    total_j: np.ndarray
    busy_w: np.ndarray  # mean power of the busy phase
    wait_w: np.ndarray  # power while blocked
    times: PhaseTimes
    static_w: np.ndarray  # static power in the iteration: idle, plus the leakage change


class StepEnergy:
    """The accelerator energy model of one step breakdown ``b``: the energy per accelerator
    per iteration by component and the phase powers at any clock, with the clock-independent
    terms (HBM traffic energy, power span, V-f segments, floor) computed once. The energy half
    evaluates it at the clock the step was timed at, the clock search
    (:mod:`.clock_search`) at many clocks on the phases estimated there
    (:class:`~.phases.ClockScaling`).

    ``pw``: the candidates' :class:`~.power.PowerParameters`; ``idle_w``/``tdp_w`` (W);
    ``floor_w`` (W, NaN: no floor); ``leakage``: :attr:`Accelerators.leakage` (None: the
    reference cooling), whose change of the static power is in the idle energy and every
    phase power.
    """

    def __init__(self, b, pw: PowerParameters, idle_w, tdp_w, floor_w, leakage=None) -> None:
        self.b = b
        self.pw = pw
        self.idle_w = idle_w
        self.span_w = tdp_w - idle_w
        self.floor_w = nan_to_num(np.asarray(floor_w, dtype=float))  # 0 where there is none (NaN)
        self.leakage = leakage
        self.hbm_j = transfer.hbm_energy_j(b.hbm_traffic_bytes, pw.hbm_pj_per_byte)
        self.voltage = power.VoltageCurve(pw.vf_x, pw.vf_v)

    def at(self, clock_ratio, times: PhaseTimes | None = None) -> AcceleratorEnergy:
        """Energy and phase powers at ``clock_ratio`` = f/f_max, for the phase durations
        ``times`` (default: the breakdown's own, :func:`~.phases.phase_times`)."""
        t = phase_times(self.b) if times is None else times
        p_wait, e_compute, e_memory, e_idle, e_wait, p_busy, total = self._before_leakage(
            clock_ratio, t
        )
        idle_w = self.idle_w
        if self.leakage is not None:
            d_w = step_leakage_w(total, t.step, self.leakage)
            d_j = d_w * t.step
            e_idle = e_idle + d_j
            total = total + d_j
            p_busy, p_wait = p_busy + d_w, p_wait + d_w
            static_w = idle_w + d_w
        else:
            static_w = np.broadcast_to(np.asarray(idle_w, dtype=float), np.shape(total))
        return AcceleratorEnergy(
            compute_j=e_compute,
            memory_j=e_memory,
            idle_j=e_idle,
            waiting_j=e_wait,
            total_j=total,
            busy_w=p_busy,
            wait_w=p_wait,
            times=t,
            static_w=static_w,
        )

    def powers(self, clock_ratio, times: PhaseTimes) -> tuple[np.ndarray, np.ndarray]:
        """(busy-phase, blocked) power of :meth:`at`, the same arithmetic, without the terms
        the clock search's limit tests do not read (the energies' leakage share)."""
        p_wait, _, _, _, _, p_busy, total = self._before_leakage(clock_ratio, times)
        if self.leakage is not None:
            d_w = step_leakage_w(total, times.step, self.leakage)
            return p_busy + d_w, p_wait + d_w
        return p_busy, p_wait

    def _before_leakage(self, clock_ratio, t: PhaseTimes) -> tuple:
        """(blocked power, compute, memory, idle and waiting energy, busy power, total
        energy) before the leakage change."""
        pw, idle_w = self.pw, self.idle_w
        dyn = self.span_w * (clock_ratio * self.voltage(clock_ratio) ** 2)  # power.dynamic_scale
        floor = self.floor_w
        p_wait = np.maximum(idle_w + pw.a_waiting * dyn, floor)
        e_compute = pw.a_compute * dyn * t.compute
        e_memory = pw.a_memory * dyn * t.memory + self.hbm_j
        e_idle = idle_w * t.step
        above_idle_w = p_wait - idle_w
        e_wait_fine = above_idle_w * t.fine_wait
        e_wait = e_wait_fine + above_idle_w * t.blocked
        has_busy = t.busy > 0
        every = bool(has_busy.all())  # the usual case: no selection to make
        busy = t.busy if every else where(has_busy, t.busy, np.nan)
        p_busy = idle_w + (e_compute + e_memory + e_wait_fine) / busy
        if not every:
            p_busy = where(has_busy, p_busy, p_wait)
        # the floor holds in every phase: a busy phase below it burns the difference too (waiting energy)
        lift = np.maximum(floor - p_busy, 0.0)
        p_busy = p_busy + lift
        e_wait = e_wait + lift * t.busy
        total = e_compute + e_memory + e_idle + e_wait
        return p_wait, e_compute, e_memory, e_idle, e_wait, p_busy, total


def accelerator_energy(
    b, clock_ratio, pw: PowerParameters, idle_w, tdp_w, floor_w, leakage=None
) -> AcceleratorEnergy:
    """Energy per accelerator per iteration by component, and the phase powers, for the
    step breakdown ``b`` at ``clock_ratio`` = f/f_max (:class:`StepEnergy` at one clock)."""
    return StepEnergy(b, pw, idle_w, tdp_w, floor_w, leakage).at(clock_ratio)


def step_energy(b, acc: Accelerators) -> StepEnergy:
    """:class:`StepEnergy` of the breakdown ``b`` on the accelerators ``acc``."""
    return StepEnergy(b, acc.pw, acc.idle_w, acc.tdp_w, acc.floor_w, acc.leakage)


def static_power_w(acc: Accelerators, phase_w) -> tuple[np.ndarray, np.ndarray]:
    """(static power, its leakage change) of a phase outside the iteration that draws
    ``phase_w`` (a checkpoint write parked, a restart idle): the idle power plus
    :func:`leakage_change_w` at that phase's power (zero for the reference cooling)."""
    leak = acc.leakage
    d_w = (
        np.zeros(np.shape(phase_w))
        if leak is None
        else leakage_change_w(np.asarray(phase_w, dtype=float), *leak)
    )
    return acc.idle_w + d_w, d_w


def energy_and_thermal(
    b, clock_mhz, acc: Accelerators
) -> tuple[AcceleratorEnergy, thermal.ThermalResponse]:
    """Accelerator energy and the junction temperature response (peak, trough, largest
    rate; :func:`.thermal.periodic_response`) of the breakdown ``b`` at ``clock_mhz``."""
    e = step_energy(b, acc).at(clock_mhz / acc.clock_max_mhz)
    t = e.times
    th = thermal.periodic_response(
        e.busy_w,
        t.busy,
        e.wait_w,
        t.blocked,
        acc.inlet_c,
        acc.foster,
    )
    return e, th
