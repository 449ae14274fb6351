"""Power, energy and thermal model on top of the time model's :class:`TimeResult`.

``evaluate(cfg, perf, retime)`` takes the inputs and the time half's result and returns
the power, energy and temperature metrics (docs/model-energy.md gives every equation and
its source). When a power cap or the junction temperature forces a lower clock, it
re-times those candidates through ``retime(clock_mhz, rows)`` and hands back the time
result at the clock the accelerators actually run. Its ``time_to_train_s``/``_days`` add
the checkpoint phases (:mod:`.checkpoint`) and the work and restarts interruptions cost
(:mod:`.goodput`; both unchanged when ``failures_per_accelerator_hour`` and
``checkpoint_interval_s`` are 0).
``cfg`` holds every declared input (missing values filled with the declared defaults).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import numpy as np

from dse.analytic import rows as _rows
from dse.analytic.columns import Factorised, choice_codes, factorise, one_value
from dse.analytic.energy import (
    checkpoint,
    clock_search,
    economics,
    facility,
    goodput,
    power,
    stage_plan,
    thermal,
    transfer,
)
from dse.analytic.energy.accelerator import Accelerators, accelerator_energy, static_power_w
from dse.analytic.rows import once, where, where_shared
from dse.analytic.time.data_parallel import BACKWARD_SHARE
from dse.analytic.time.result import TimeResult
from dse.analytic.time.step import StepBreakdown

#: ``retime(clock_mhz, rows)``: the time model for the candidates ``rows`` (an index array)
#: only, at ``clock_mhz`` (one clock per row in ``rows``)
Retime = Callable[[np.ndarray, np.ndarray], TimeResult]

CAP_REASON = "power cap below the accelerator's draw at its lowest clock"
HOT_REASON = "junction above the slowdown temperature even at the lowest clock"
FAIL_REASON = "interruptions outpace the run (no checkpoints: each restarts it from the start)"
WAIT_REASON = "waiting_power_w below the accelerator's idle power"
IDLE_REASON = "idle power at or above the accelerator's TDP"
#: the energy half's reasons by the integer code it marks rows with (0: none)
REASONS = ("", HOT_REASON, CAP_REASON, WAIT_REASON, IDLE_REASON, FAIL_REASON)
REASON_TEXT = np.array(REASONS, dtype=object)
_HOT, _CAP, _WAIT, _IDLE, _FAIL = range(1, len(REASONS))


@dataclass(frozen=True, slots=True)
class EnergyResult:
    """The energy half's answer: its metric columns (with ``time_to_train_s``/``_days``
    including checkpoints), its infeasibility reasons as codes (``reason_code``: their index
    into :data:`REASONS`, 0 where none; :attr:`reason`: as text, "" where none) and the time
    result at the operating clock (``perf`` re-timed where the clock fell)."""

    metrics: dict[str, np.ndarray]
    timing: TimeResult
    reason_code: np.ndarray

    @property
    def reason(self) -> np.ndarray:
        """The reasons as text ("" where none), made when asked (the evaluator reads the codes)."""
        return REASON_TEXT[self.reason_code]


@dataclass(frozen=True, slots=True)
class EnergyInputs:
    """The energy half's inputs (:mod:`dse.analytic.declarations`, every default filled in),
    read once from the input table: the accelerator names and cooling types as given, the
    numbers as float arrays."""

    accelerator: np.ndarray  # accelerator names (or a Factorised column of them)
    cooling: np.ndarray  # cooling type names (air, liquid)
    clock_plan: np.ndarray  # one, per_stage (stage_plan.CLOCK_PLANS)
    power_cap_w: np.ndarray  # W, accelerator power limit (NaN: its TDP)
    power_floor_w: np.ndarray  # W, least power while blocked (NaN: none)
    inlet_temp_c: np.ndarray  # degC, coolant / air inlet
    power_transition_s: np.ndarray  # s, time to step between phase powers
    host_power_w: np.ndarray  # W per node
    accelerators_per_node: np.ndarray  # accelerators sharing a host
    fan_power_fraction: np.ndarray  # server fans, fraction of the node's other DC power
    psu_efficiency: np.ndarray  # power supplies, AC at the wall to DC
    nic_power_w: np.ndarray  # W per accelerator, scale-out NIC static
    scaleup_switch_power_w: np.ndarray  # W per accelerator
    scaleout_switch_power_w: np.ndarray  # W per accelerator (jobs beyond one scale-up domain)
    scaleup_pj_per_bit: np.ndarray  # pJ/bit
    scaleout_pj_per_bit: np.ndarray  # pJ/bit
    pue: np.ndarray  # facility power usage effectiveness
    cooling_cop: np.ndarray  # cooling plant COP (NaN: use pue)
    energy_price_per_kwh: np.ndarray  # USD/kWh
    accelerator_hour_price: np.ndarray  # USD/h
    grid_carbon_kg_per_kwh: np.ndarray  # kg CO2e/kWh
    checkpoint_interval_s: np.ndarray  # s (NaN: the Young/Daly optimum)
    failures_per_accelerator_hour: np.ndarray  # 1/h
    restart_time_s: np.ndarray  # s
    checkpoint_write_gbs: np.ndarray  # GB/s per accelerator
    checkpoint_duration_s: np.ndarray  # s (NaN: bytes / checkpoint_write_gbs)
    data_entropy_bits_per_token: np.ndarray  # bit/token
    scaleup_clock_fraction: np.ndarray  # 1, scale-up link clock over nominal
    scaleout_clock_fraction: np.ndarray  # 1, scale-out link clock over nominal
    idle_power_w: np.ndarray  # W, accelerator static power (NaN: the catalog's)
    waiting_power_w: np.ndarray  # W, blocked at the maximum clock (NaN: the catalog's activity)
    thermal_resistance_k_per_w: np.ndarray  # K/W, junction to inlet (NaN: catalog or rule)
    thermal_tau_fast_s: np.ndarray  # s, die and interface term (NaN: the cooling path's)
    thermal_tau_slow_s: np.ndarray  # s, heat sink or cold plate term (NaN: the cooling path's)
    heat_capacity_j_per_k: np.ndarray  # J/K, heat sink or cold plate (NaN: from the time constant)
    pipeline_parallel: np.ndarray  # pipeline stages (a per-stage clock plan emulates them)
    interleave: np.ndarray  # virtual stages per accelerator (a plan needs plain 1F1B: 1)

    @classmethod
    def of(cls, cfg: dict[str, np.ndarray]) -> EnergyInputs:
        """The inputs of the table ``cfg`` (input name -> array)."""
        numbers = {f.name: np.asarray(cfg[f.name], dtype=float) for f in fields(cls)[3:]}
        return cls(
            accelerator=cfg["accelerator"],
            cooling=cfg["cooling"],
            clock_plan=cfg["clock_plan"],
            **numbers,
        )


def evaluate(cfg: dict[str, np.ndarray], perf: TimeResult, retime: Retime) -> EnergyResult:
    """Energy, power and thermal metrics for every candidate, and the re-timed time result.

    Only the rows whose clock changed are re-timed; ``perf`` is not modified.
    """
    x = EnergyInputs.of(cfg)
    acc = _accelerators(x, perf)
    # the clock that meets the cap and the slowdown temperature, checked on the re-timed
    # step (clock_search.settle); only rows whose clock falls are re-timed
    op = clock_search.settle(perf, acc, retime)
    perf, clock, e, th = op.perf, op.clock_mhz, op.energy, op.thermal
    e = _stage_plans(x, perf, acc, e, clock)
    capped, throttled = op.capped, op.throttled
    # A limit the lowest clock still breaks cannot be met: mark the candidate (the caller
    # merges these after the time model's reasons, which win). settle() leaves a row above
    # a limit only at its lowest clock, so each reason is true of the row it marks.
    cap_ok, hot_ok = op.cap_ok, op.hot_ok  # (the stage plans change energy, not power)
    codes = np.zeros(len(clock), dtype=np.int8)  # integer codes: no string compares per row
    codes[~hot_ok & op.at_min] = _HOT
    codes[~cap_ok & op.at_min] = _CAP
    stated = _power_reasons(x, acc)  # inputs that cannot hold win over the limits
    if stated is not None:
        codes = np.where(stated != 0, stated, codes)
    metrics, wall_s = _metrics(x, perf, acc, e, th, clock, capped, throttled)
    endless = (codes == 0) & ~np.isfinite(wall_s) & np.isfinite(perf.time_to_train_s)
    codes[endless] = _FAIL
    return EnergyResult(metrics=metrics, timing=perf, reason_code=codes)


def _stage_plans(x: EnergyInputs, perf: TimeResult, acc: Accelerators, e, clock):
    """``e`` with the energy a per-stage clock plan (``clock_plan: per_stage``) saves at the
    same iteration time taken off the candidates that plan (a whole plain 1F1B pipeline of
    2 or more stages, feasible); :func:`.stage_plan.pass_plan_saving_j` plans each
    candidate's pipeline from its stages' micro-batch times, a clock per pass (Perseus's
    plan, the backward :data:`BACKWARD_SHARE` of a micro-batch as the time model has it). The saving is dynamic energy
    (the static power over the same iteration is unchanged): taken off the compute energy."""
    b = perf.breakdown
    if b.first_slot_s is None:
        return e
    planned = choice_codes(x.clock_plan, stage_plan.CLOCK_PLANS) == 1
    if not planned.any():
        return e
    pp = x.pipeline_parallel
    ok = planned & (pp >= 2) & (x.interleave <= 1)
    ok &= (perf.reason_code == 0) & np.isfinite(b.step_s)
    saving = np.zeros(len(pp))
    for p in np.unique(pp[ok]).astype(int):
        rows = np.flatnonzero(ok & (pp == p))
        slots = np.column_stack(
            [b.first_slot_s[rows]] + [b.middle_slot_s[rows]] * (p - 2) + [b.last_slot_s[rows]]
        )
        slot = b.compute_s[rows] + b.memory_s[rows] + b.layer_comm_s[rows]
        share = where(slot > 0, b.compute_s[rows] / where(slot > 0, slot, 1.0), 0.0)
        saving[rows] = stage_plan.pass_plan_saving_j(
            slots,
            perf.micro_batches[rows],
            _pass_curve(acc, rows, clock[rows], share),
            BACKWARD_SHARE,
        )
    saving = np.minimum(saving, e.compute_j)
    return replace(e, compute_j=e.compute_j - saving, total_j=e.total_j - saving)


def _pass_curve(acc: Accelerators, rows, clock_mhz, share):
    """``curve_of()`` for :func:`.stage_plan.pass_plan_saving_j`: a pass (clock-bound
    share ``share`` at ``clock_mhz``) at :data:`.stage_plan.PLAN_CLOCKS` clocks from its own
    down to :data:`.stage_plan.PLAN_LOWEST` of the maximum (at least the accelerator's
    lowest): its time factor, its energy per second of work at its clock (the energy
    model's accelerator power, static power included) and the blocked power."""
    g = stage_plan.PLAN_CLOCKS

    def curve_of():
        at = rows
        f0, c = clock_mhz, share
        low = np.maximum(acc.clock_min_mhz[at], stage_plan.PLAN_LOWEST * acc.clock_max_mhz[at])
        low = np.minimum(low, f0)
        grid = f0[:, None] - (f0 - low)[:, None] * np.linspace(0.0, 1.0, g)[None, :]
        tf = c[:, None] * f0[:, None] / grid + (1.0 - c[:, None])
        flat = np.repeat(at, g)
        sub = _rows.take(acc, flat)
        b = StepBreakdown.one_accelerator(
            (c[:, None] * f0[:, None] / grid).ravel(),
            np.repeat(1.0 - c, g),
            np.zeros(len(flat)),
        )
        en = accelerator_energy(
            b,
            grid.ravel() / sub.clock_max_mhz,
            sub.pw,
            sub.idle_w,
            sub.tdp_w,
            sub.floor_w,
            sub.leakage,
        )
        return tf, en.total_j.reshape(-1, g), en.wait_w.reshape(-1, g)

    return curve_of


def _accelerators(x: EnergyInputs, perf: TimeResult) -> Accelerators:
    """The candidates' power and thermal parameters: catalog (``power.yaml``), cooling,
    inlet, power floor, and the cap (the input, at most the board's power limit: the TDP
    unless the catalog gives a lower ``power_limit_w``); the idle and waiting powers, the thermal resistance and time constants where the inputs give them
    (:func:`_power_inputs`, :func:`_thermal_inputs`)."""
    hw = perf.hw
    cooling = x.cooling
    liquid = Factorised(*factorise(cooling)).map(lambda c: c == "liquid", dtype=bool)
    idle_w, pw = _power_inputs(x, hw.idle_w, hw.tdp_w, power.lookup(x.accelerator))
    cap_in = x.power_cap_w
    # the board's default limit (below the die's full-clock draw on a part sold at a lower
    # limit, e.g. torchtitan's 500 W H100s) caps every run; an input cap can only lower it
    cap_w = np.minimum(where(np.isfinite(cap_in), cap_in, np.inf), hw.power_limit_w)
    # cooling is sized for the board's limit
    r_air, r_total = thermal.air_and_total_k_per_w(liquid, pw, hw.power_limit_w)
    if np.isfinite(x.thermal_resistance_k_per_w).any():
        r_total = where(
            np.isfinite(x.thermal_resistance_k_per_w), x.thermal_resistance_k_per_w, r_total
        )
    tau_fast, tau_slow = _thermal_inputs(x, liquid, r_total)
    return Accelerators(
        clock_max_mhz=hw.clock_max_mhz,
        clock_min_mhz=hw.clock_min_mhz,
        idle_w=idle_w,
        tdp_w=hw.tdp_w,
        # the floor holds below the power limit: a board cannot be made to draw more than its cap
        pw=pw,
        floor_w=_floor_w(x.power_floor_w, cap_w),
        inlet_c=x.inlet_temp_c,
        liquid=liquid,
        r_total_k_per_w=r_total,
        cap_w=cap_w,
        r_air_k_per_w=r_air,
        tau_fast_s=tau_fast,
        tau_slow_s=tau_slow,
    ).derived()


def _floor_w(floor_in: np.ndarray, cap_w: np.ndarray) -> np.ndarray:
    """The power floor, at most the cap; the input itself, a read-only broadcast, where it
    is one NaN for every row (no floor: the default), which the minimum keeps in every row."""
    f = floor_in
    if one_value(f) and f.shape == np.shape(cap_w) and np.isnan(f[0]):
        return f
    return np.minimum(floor_in, cap_w)


def _power_inputs(
    x: EnergyInputs, catalog_idle_w, tdp_w, pw: power.PowerParameters
) -> tuple[np.ndarray, power.PowerParameters]:
    """The idle power (``idle_power_w``, else the catalog's) and the power parameters with the
    waiting activity that gives ``waiting_power_w`` at the maximum clock,
    a_w = (P_wait - P_idle) / (TDP - P_idle) (else the catalog's activity, on the idle power
    used). A waiting power below the idle power is held at it (the candidate is marked by
    :func:`_power_reasons`). The catalog's arrays, unchanged, where neither input is given."""
    idle_in, wait_in = x.idle_power_w, x.waiting_power_w
    given_idle, given_wait = np.isfinite(idle_in), np.isfinite(wait_in)
    idle_w = where(given_idle, idle_in, catalog_idle_w) if given_idle.any() else catalog_idle_w
    if not given_wait.any():
        return idle_w, pw
    span_w = tdp_w - idle_w
    a_wait = np.maximum(wait_in - idle_w, 0.0) / where(span_w > 0, span_w, np.inf)
    return idle_w, replace(pw, a_waiting=where(given_wait, a_wait, pw.a_waiting))


def _power_reasons(x: EnergyInputs, acc: Accelerators) -> np.ndarray | None:
    """Why the idle and waiting power inputs cannot hold for a candidate, as codes into
    :data:`REASONS` (0 where they do; None where no candidate gives either)."""
    given_wait, given_idle = np.isfinite(x.waiting_power_w), np.isfinite(x.idle_power_w)
    if not (given_wait.any() or given_idle.any()):
        return None
    out = np.zeros(len(acc.idle_w), dtype=np.int8)
    out[given_wait & (x.waiting_power_w < acc.idle_w)] = _WAIT
    out[given_idle & (acc.idle_w >= acc.tdp_w)] = _IDLE
    return out


def _thermal_inputs(x: EnergyInputs, liquid, r_total) -> tuple:
    """The Foster terms' time constants from the inputs (``thermal_tau_fast_s``,
    ``thermal_tau_slow_s``, or ``heat_capacity_j_per_k`` times the slow term's resistance),
    NaN where the cooling path's (``power.yaml``) hold; ``(None, None)`` where no row gives one."""
    tau_fast, tau_slow, cap = x.thermal_tau_fast_s, x.thermal_tau_slow_s, x.heat_capacity_j_per_k
    if not (np.isfinite(tau_fast).any() or np.isfinite(tau_slow).any() or np.isfinite(cap).any()):
        return None, None
    fast_fraction = thermal.foster_terms(liquid, np.ones(len(liquid)))[0][0]
    from_capacity = cap * r_total * (1.0 - fast_fraction)  # tau = R_slow C
    return tau_fast, where(np.isfinite(tau_slow), tau_slow, from_capacity)


def _metrics(
    x: EnergyInputs, perf: TimeResult, acc: Accelerators, e, th, clock, capped, throttled
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Energy per component over the run, facility power, checkpoints, temperatures and
    economics from the per-iteration accelerator energy ``e`` and thermal response ``th``
    (metric name -> array), and the wall time to train (s)."""
    steps, n = perf.steps_to_train, perf.num_accelerators
    t = e.times
    step_s = t.step
    links = _links(x, perf)
    p_host, p_net_static = _outside_accelerator(x, perf)
    e_links = links.total_j
    e_net = e_links + p_net_static * step_s
    e_host = p_host * step_s
    e_step_acc = e.total_j + e_net + e_host  # per accelerator, one iteration
    overhead = once(facility.facility_overhead_factor, x.pue, x.cooling_cop)
    total_steps_n = steps * n
    ck, ck_e, gp, p_parked, step_ck = _checkpoints_and_interruptions(
        x, perf, acc, step_s, p_host, p_net_static, links.scaleout_pj_per_bit
    )
    redo = gp.rework_s / (steps * step_ck)  # share of the run done twice
    # idle accelerators (at their own temperature's leakage), host, network static
    restart_w = (n * static_power_w(acc, acc.idle_w)[0], n * p_host, n * p_net_static)
    it_j = (e_step_acc + once(_sum, ck_e.idle_j, ck_e.waiting_j, ck_e.network_j, ck_e.host_j)) * (
        total_steps_n
    )
    restart_all_w = _sum(*restart_w)
    once_more = 1.0 + redo  # each iteration, and its share redone
    dc_j = it_j * once_more + gp.restart_s * restart_all_w  # DC side of the nodes
    # at the wall: the server fans (with the host) and the power supplies' conversion loss
    wall = once(facility.wall_factor, x.fan_power_fraction, x.psu_efficiency)
    fans_j = dc_j * x.fan_power_fraction
    it_j = dc_j * wall
    psu_j = it_j - dc_j - fans_j
    with_overhead = once(np.add, 1.0, overhead)
    facility_j = it_j * with_overhead
    time_to_train_s = gp.wall_s
    fac = _facility_power(
        x,
        e,
        ck,
        p_parked,
        facility_j,
        time_to_train_s,
        n,
        p_host + p_net_static + e_links / where_shared(step_s > 0, step_s, np.nan),
        overhead,
    )
    nodes = n / once(np.maximum, x.accelerators_per_node, 1.0)  # a job's share of nodes
    step_ck_or_nan = where_shared(step_ck > 0, step_ck, np.nan)
    mean_p = (e.total_j + once(np.add, ck_e.idle_j, ck_e.waiting_j)) / step_ck_or_nan
    runs = total_steps_n * once_more  # iterations run, the redone ones included
    out = {
        "energy_to_train_j": facility_j,
        "it_energy_to_train_j": it_j,
        "energy_per_step_j": e_step_acc * n * wall * with_overhead,
        "energy_compute_j": e.compute_j * runs,
        "energy_memory_j": e.memory_j * runs,
        "energy_network_j": (e_net + ck_e.network_j) * runs + gp.restart_s * restart_w[2],
        "energy_scaleup_links_j": links.scaleup_j * runs,
        "energy_scaleout_links_j": (links.scaleout_j + ck_e.links_j) * runs,
        "energy_idle_j": (e.idle_j + ck_e.idle_j) * runs + gp.restart_s * restart_w[0],
        "energy_waiting_j": (e.waiting_j + ck_e.waiting_j) * runs,
        "energy_host_j": (e_host + ck_e.host_j) * runs + gp.restart_s * restart_w[1] + fans_j,
        "energy_power_supply_j": psu_j,
        "energy_facility_overhead_j": it_j * overhead,
        "avg_power_per_accelerator_w": mean_p,
        "peak_power_per_accelerator_w": e.busy_w,
        "facility_avg_power_w": fac.avg_w,
        "facility_peak_power_w": fac.peak_w,
        # one node at the wall: the facility's IT power over its nodes (no facility overhead)
        "node_avg_power_w": it_j
        / where_shared(time_to_train_s > 0, time_to_train_s, np.nan)
        / nodes,
        "node_peak_power_w": fac.peak_w / with_overhead / nodes,
        "facility_power_swing_w": fac.swing_w,
        "facility_power_ramp_w_per_s": fac.ramp_w_per_s,
        "checkpoint_time_s": where_shared(ck.on, steps * ck.per_step_s, 0.0),
        "checkpoint_overhead": where_shared(ck.on, ck.per_step_s / step_ck_or_nan, 0.0),
        "checkpoint_period_s": ck.interval_s,
        "goodput": gp.goodput,
        "interruptions": gp.interruptions,
        "lost_time_s": gp.restart_s + gp.rework_s,
        "time_to_train_s": time_to_train_s,
        "effective_clock_mhz": clock,
        "power_capped": np.asarray(capped, dtype=bool),
        "throttled": np.asarray(throttled, dtype=bool),
        "peak_junction_temp_c": th.peak_c,
        "mean_junction_temp_c": thermal.steady_junction_temp_c(
            mean_p, acc.inlet_c, acc.r_total_k_per_w
        ),
        "junction_temp_swing_c": th.peak_c - th.min_c,
        "max_junction_temp_rate_c_per_s": th.max_rate_c_per_s,
    }
    out.update(_economics(x, perf, acc, e, facility_j, time_to_train_s, runs))
    return out, time_to_train_s


def _sum(*terms) -> np.ndarray:
    """The terms added from the first (as ``a + b + c``)."""
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


def _checkpoints_and_interruptions(
    x: EnergyInputs, perf: TimeResult, acc: Accelerators, step_s, p_host, p_net_static, out_pj
):
    """The checkpoint phases (interval from the input or the job's failure rate), their
    energy per iteration and accelerator (the bytes over the scale-out fabric at ``out_pj``
    pJ/bit), the expected run with interruptions (:func:`.goodput.expected_run`), the
    parked power of a checkpoint write and the iteration plus its share of checkpoint time."""
    steps, n = perf.steps_to_train, perf.num_accelerators
    mtbf_s = goodput.job_mtbf_s(x.failures_per_accelerator_hour, n)
    _, ck_write_s = checkpoint.write_time_s(
        perf.memory, x.checkpoint_write_gbs, x.checkpoint_duration_s
    )
    interval = goodput.checkpoint_interval_s(x.checkpoint_interval_s, ck_write_s, mtbf_s, step_s)
    ck = checkpoint.checkpoint_phases(
        perf.memory, step_s, interval, x.checkpoint_write_gbs, x.checkpoint_duration_s
    )
    # a checkpoint write parks the accelerators (context held, no kernel): P_parked, not P_blocked
    p_parked = power.parked_power_w(acc.pw.a_parked, acc.idle_w, acc.tdp_w, acc.floor_w)
    static_w, d_w = static_power_w(acc, p_parked)  # the leakage change at the parked power
    p_parked = p_parked + d_w
    ck_e = checkpoint.checkpoint_energy(
        ck, step_s, static_w, p_parked, p_net_static, p_host, out_pj
    )
    # interruptions: lost work redone at the run's power, restarts with the accelerators idle
    step_ck = step_s + ck.per_step_s  # iteration plus its share of checkpoint time
    gp = goodput.expected_run(
        steps * step_s,
        steps * step_ck,
        ck.interval_s,
        ck.duration_s,
        ck.on,
        mtbf_s,
        x.restart_time_s,
    )
    return ck, ck_e, gp, p_parked, step_ck


def _facility_power(
    x: EnergyInputs, e, ck, p_parked, facility_j, time_s, n, p_other, overhead
) -> facility.FacilityPower:
    """The facility's mean, peak, swing and ramp of power (:func:`.facility.facility_power_w`),
    the nodes' powers taken at the wall (:func:`.facility.wall_factor`)."""
    wall = once(facility.wall_factor, x.fan_power_fraction, x.psu_efficiency)
    t = e.times
    # a checkpoint is one more low phase: the step from busy power down to the lowest of the
    # blocked (bubble, exposed communication) and the parked (checkpoint) power
    blocked = t.blocked > 0
    if ck.on.any():
        has_ck = ck.on & (ck.duration_s > 0)
        p_low = where_shared(
            has_ck, where(blocked, np.minimum(e.wait_w, p_parked), p_parked), e.wait_w
        )
        low_phase = blocked | has_ck
    else:  # no checkpoints (the default): the blocked power, the blocked phase
        p_low, low_phase = e.wait_w, blocked
    return facility.facility_power_w(
        facility_j=facility_j,
        time_s=time_s,
        n=n,
        p_busy=e.busy_w * wall,  # at the wall: server fans and power-supply loss
        p_wait=p_low * wall,
        p_other=p_other * wall,
        overhead=overhead,
        low_phase=low_phase,
        transition_s=x.power_transition_s,
    )


def _outside_accelerator(x: EnergyInputs, perf: TimeResult) -> tuple[np.ndarray, np.ndarray]:
    """Per accelerator: the host's share of a node's power (W) and the NIC and switch static
    power (W)."""
    p_host = once(facility.host_power_w, x.host_power_w, x.accelerators_per_node)
    p_net_static = facility.network_static_power_w(
        x.nic_power_w,
        x.scaleup_switch_power_w,
        x.scaleout_switch_power_w,
        perf.num_accelerators,
        perf.scaleup_size,
    )
    return p_host, p_net_static


@dataclass(frozen=True, slots=True)
class Links:
    """The fabrics' energy per bit at their link clocks and the link energy of one
    iteration's traffic, per accelerator."""

    scaleup_pj_per_bit: np.ndarray  # pJ/bit, at scaleup_clock_fraction
    scaleout_pj_per_bit: np.ndarray  # pJ/bit, at scaleout_clock_fraction
    scaleup_j: np.ndarray  # J, one iteration's scale-up bytes
    scaleout_j: np.ndarray  # J, one iteration's scale-out bytes
    total_j: np.ndarray  # J, both (summed before the unit conversion, as transfer computes it)


def _links(x: EnergyInputs, perf: TimeResult) -> Links:
    """Each fabric's energy per bit at its link clock, the input's times (V(f)/V(f_nom))^2
    (:func:`.power.link_energy_scale`; the bandwidth the time model used followed the same
    clock), and the energy of the iteration's bytes over it."""
    b = perf.breakdown
    up_pj = once(_link_pj_per_bit, x.scaleup_pj_per_bit, x.scaleup_clock_fraction)
    out_pj = once(_link_pj_per_bit, x.scaleout_pj_per_bit, x.scaleout_clock_fraction)
    return Links(
        scaleup_pj_per_bit=up_pj,
        scaleout_pj_per_bit=out_pj,
        scaleup_j=transfer.network_energy_j(b.scaleup_bytes, 0.0, up_pj, 0.0),
        scaleout_j=transfer.network_energy_j(0.0, b.scaleout_bytes, 0.0, out_pj),
        total_j=transfer.network_energy_j(b.scaleup_bytes, b.scaleout_bytes, up_pj, out_pj),
    )


def _link_pj_per_bit(pj_per_bit, clock_fraction) -> np.ndarray:
    """A fabric's energy per bit at its link clock (:func:`_links`)."""
    return pj_per_bit * power.link_energy_scale(clock_fraction)


def _economics(
    x: EnergyInputs, perf: TimeResult, acc, e, facility_j, time_s, total_steps_n
) -> dict[str, np.ndarray]:
    """Efficiency ratios, cost, carbon and the Landauer bound (``total_steps_n``: iterations
    run times accelerators, redone ones included)."""
    tokens = np.asarray(perf.tokens_to_train, dtype=float)
    min_tokens = np.asarray(perf.min_tokens_to_train, dtype=float)
    # the information the target needs (E_min tokens), not the tokens this batch consumes
    landauer = economics.landauer_bound_j(
        np.asarray(perf.parameters, dtype=float),
        min_tokens,
        x.data_entropy_bits_per_token,
        acc.inlet_c + thermal.KELVIN,
    )
    useful = economics.useful_utilisation(
        np.asarray(perf.mfu, dtype=float), min_tokens, tokens, perf.time_to_train_s, time_s
    )
    cost = economics.cost_usd(
        perf.num_accelerators, time_s, facility_j, x.accelerator_hour_price, x.energy_price_per_kwh
    )
    busy_work = (e.compute_j + e.memory_j + e.static_w * e.times.busy) * total_steps_n
    return {
        "tokens_per_j": tokens / facility_j,
        "energy_time_product_js": facility_j * time_s,
        "energy_utilisation_factor": busy_work / facility_j,
        "energy_efficiency_index": economics.efficiency_index(useful, landauer, facility_j),
        "cost_usd": cost.total_usd,
        "energy_cost_usd": cost.energy_usd,
        "carbon_kg": economics.carbon_kg(facility_j, x.grid_carbon_kg_per_kwh),
        "landauer_bound_j": landauer,
        "landauer_ratio": facility_j / landauer,
    }
