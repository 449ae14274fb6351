"""Power, energy and thermal model on top of the time model's breakdown.

``evaluate(cfg, perf, retime)`` takes the inputs and the time model's output and returns
the power, energy and temperature metrics (docs/model-energy.md gives every equation and
its source). When a power cap or the junction temperature forces a lower clock, it
re-times those candidates through ``retime(clock_mhz, rows=idx)`` and returns the time
metrics at the clock the accelerators actually run, which override the time model's.
It also returns ``time_to_train_s``/``_days`` with the checkpoint phases added
(:func:`checkpoint_phases`; unchanged when ``checkpoint_interval_s`` is 0).
"""

from __future__ import annotations

import inspect

import numpy as np

from dse.evaluators.base import Input, Metric
from dse.physics import energy, power, thermal
from dse.physics.workload import Factorised, factorise

_NAN = float("nan")
BISECTION_STEPS = 18  # clock resolution (f_max - f_min) / 2^18: well under 0.01 MHz
#: Default checkpoint write bandwidth per accelerator (GB/s): the Llama 3 405B run's
#: storage (Tectonic, 7,500 SSD servers) sustains 2 TB/s for up to 16,384 H100s
#: (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.1): 2000 / 16384 GB/s.
CHECKPOINT_WRITE_GBS = 2000.0 / 16384

INPUTS: list[Input] = [
    Input("cooling", "str", "", "cooling type", "air", ("air", "liquid"), group="hardware"),
    Input("inlet_temp_c", "float", "degC", "coolant / air inlet temperature", 30.0, minimum=-20, maximum=80, group="hardware"),
    Input("power_cap_w", "float", "W", "accelerator power limit (default: its TDP); the clock falls to meet it", None, minimum=1, group="power"),
    Input("power_floor_w", "float", "W", "minimum accelerator power while blocked (power smoothing; default none)", None, minimum=0, group="power"),
    Input("power_transition_s", "float", "s", "time the accelerators take to step between phase powers", 0.01, minimum=1e-6, group="power"),
    Input("host_power_w", "float", "W", "host power per node (CPUs, DRAM, storage, fans)", 800.0, minimum=0, group="power"),
    Input("accelerators_per_node", "int", "", "accelerators per node (shares the host power)", 8, minimum=1, group="power"),
    Input("nic_power_w", "float", "W", "scale-out NIC static power per accelerator", 25.0, minimum=0, group="network"),
    Input("scaleup_switch_power_w", "float", "W", "scale-up switch static power per accelerator", 25.0, minimum=0, group="network"),
    Input("scaleout_switch_power_w", "float", "W", "scale-out switch static power per accelerator (jobs beyond one scale-up domain)", 30.0, minimum=0, group="network"),
    Input("scaleup_pj_per_bit", "float", "pJ/bit", "scale-up fabric energy per bit", energy.SCALEUP_PJ_PER_BIT, minimum=0, group="network"),
    Input("scaleout_pj_per_bit", "float", "pJ/bit", "scale-out fabric energy per bit", energy.SCALEOUT_PJ_PER_BIT, minimum=0, group="network"),
    Input("pue", "float", "", "facility power usage effectiveness (used when cooling_cop is not set)", 1.2, minimum=1.0, maximum=3.0, group="facility"),
    Input("cooling_cop", "float", "", "cooling plant coefficient of performance (overrides pue)", None, minimum=0.1, group="facility"),
    Input("energy_price_per_kwh", "float", "USD/kWh", "electricity price", 0.10, minimum=0, group="economics"),
    Input("accelerator_hour_price", "float", "USD/h", "price of one accelerator-hour", 2.0, minimum=0, group="economics"),
    Input("grid_carbon_kg_per_kwh", "float", "kg/kWh", "grid carbon intensity (CO2e)", 0.385, minimum=0, group="economics"),
    Input("checkpoint_interval_s", "float", "s", "wall-clock training time between checkpoints (0: no checkpointing)", 0.0, minimum=0, group="checkpoint"),
    Input("checkpoint_write_gbs", "float", "GB/s", "checkpoint write bandwidth to storage per accelerator (default: Llama 3's 2 TB/s over 16,384 GPUs)", CHECKPOINT_WRITE_GBS, minimum=1e-9, group="checkpoint"),
    Input("checkpoint_duration_s", "float", "s", "time one checkpoint blocks the job (overrides bytes / checkpoint_write_gbs)", None, minimum=0, group="checkpoint"),
    Input("data_entropy_bits_per_token", "float", "bit/token", "entropy of the training data per token (Landauer bound)", 3.0, minimum=0, group="workload"),
]

METRICS: list[Metric] = [
    Metric("energy_to_train_j", "J", "facility energy to train"),
    Metric("energy_to_train_mwh", "MWh", "facility energy to train"),
    Metric("it_energy_to_train_j", "J", "IT energy to train"),
    Metric("it_energy_to_train_mwh", "MWh", "IT energy to train"),
    Metric("energy_per_step_j", "J", "facility energy per iteration"),
    Metric("energy_compute_j", "J", "energy of compute-bound work (accelerator core, dynamic)"),
    Metric("energy_memory_j", "J", "energy of memory-bound work and HBM traffic"),
    Metric("energy_network_j", "J", "network energy (per-bit links, NICs, switches)"),
    Metric("energy_idle_j", "J", "accelerator static (idle) energy"),
    Metric("energy_waiting_j", "J", "accelerator energy above idle while blocked (bubble, exposed communication, checkpoints)"),
    Metric("energy_host_j", "J", "host energy (CPU, DRAM per node)"),
    Metric("energy_facility_overhead_j", "J", "facility overhead energy (cooling, power delivery)"),
    Metric("avg_power_per_accelerator_w", "W", "average power per accelerator"),
    Metric("peak_power_per_accelerator_w", "W", "peak (busy-phase) power per accelerator"),
    Metric("facility_avg_power_w", "W", "average facility power"),
    Metric("facility_peak_power_w", "W", "peak facility power"),
    Metric("facility_power_swing_w", "W", "facility power step between busy and blocked (bubble, communication, checkpoint) phases"),
    Metric("facility_power_ramp_w_per_s", "W/s", "largest facility power ramp rate"),
    Metric("checkpoint_time_s", "s", "time spent writing checkpoints over the run (accelerators blocked)"),
    Metric("checkpoint_overhead", "1", "share of the time to train spent writing checkpoints"),
    Metric("effective_clock_mhz", "MHz", "clock the accelerators run at (after cap and throttling)"),
    Metric("power_capped", "bool", "clock lowered to meet the power cap"),
    Metric("throttled", "bool", "clock lowered to hold the slowdown temperature"),
    Metric("peak_junction_temp_c", "degC", "peak junction temperature"),
    Metric("mean_junction_temp_c", "degC", "time-averaged junction temperature"),
    Metric("junction_temp_swing_c", "degC", "junction temperature swing within an iteration"),
    Metric("max_junction_temp_rate_c_per_s", "degC/s", "largest junction temperature rate of change"),
    Metric("tokens_per_j", "tokens/J", "tokens per joule (facility; = performance per watt)"),
    Metric("energy_time_product_js", "J*s", "energy-time product"),
    Metric("energy_utilisation_factor", "1", "share of facility energy spent on busy accelerator work"),
    Metric("energy_efficiency_index", "1", "MFU x Landauer bound / facility energy"),
    Metric("cost_usd", "USD", "training cost (accelerator-hours and energy)"),
    Metric("energy_cost_usd", "USD", "electricity cost"),
    Metric("carbon_kg", "kg", "operational emissions (CO2e)"),
    Metric("landauer_bound_j", "J", "Landauer bound k_B T ln2 N_params H_data"),
    Metric("landauer_ratio", "1", "facility energy / Landauer bound"),
]


def _get(b: dict, key: str, like: np.ndarray) -> np.ndarray:
    v = b.get(key)
    return np.zeros_like(like, dtype=float) if v is None else np.asarray(v, dtype=float)


def phase_times(b: dict) -> dict[str, np.ndarray]:
    """Per-iteration phase durations from the time model's breakdown.

    compute: clock-scaled work; memory: memory-bound work and the optimizer step;
    fine_wait: exposed tensor- and pipeline-parallel communication (interleaved with the
    busy phase at sub-millisecond grain); blocked: pipeline bubble and exposed
    data-parallel communication (one contiguous low-power phase per iteration).
    """
    step = np.asarray(b["step_s"], dtype=float)
    t_c = _get(b, "compute_s", step)
    t_m = _get(b, "memory_s", step) + _get(b, "optimizer_s", step)
    fine = _get(b, "tp_comm_s", step) + _get(b, "pp_comm_s", step)
    blocked = _get(b, "bubble_s", step) + _get(b, "dp_comm_s", step)
    busy = np.maximum(step - blocked, 0.0)
    return {"step": step, "compute": t_c, "memory": t_m, "fine_wait": fine, "blocked": blocked, "busy": busy}


def scaled_breakdown(b: dict, clock_from: np.ndarray, clock_to: np.ndarray) -> dict[str, np.ndarray]:
    """The breakdown estimated at another clock without the time model.

    Compute time scales with 1/f; the bubble (pipeline slots of compute, memory and
    tensor-parallel time) scales with the share of compute in a slot; the rest is
    clock-independent. Used for the cap/throttle search; the final times come from the
    time model (``retime``).
    """
    step = np.asarray(b["step_s"], dtype=float)
    ratio = clock_from / clock_to
    t_c = _get(b, "compute_s", step)
    slot = t_c + _get(b, "memory_s", step) + _get(b, "tp_comm_s", step)
    new_c = t_c * ratio
    new_slot = slot + new_c - t_c
    bubble = _get(b, "bubble_s", step)
    new_bubble = bubble * np.where(slot > 0, new_slot / np.where(slot > 0, slot, 1.0), 1.0)
    out = dict(b)
    out["compute_s"] = new_c
    out["bubble_s"] = new_bubble
    out["step_s"] = step + (new_c - t_c) + (new_bubble - bubble)
    return out


def accelerator_energy(b: dict, clock_ratio, pw: dict, idle_w, tdp_w, floor_w) -> dict[str, np.ndarray]:
    """Energy per accelerator per iteration by component, and the phase powers.

    Compute-bound kernels draw P_idle + a_c D s(f), memory-bound ones P_idle + a_m D s(f)
    plus the HBM traffic energy, a blocked rank P_idle + a_w D s(f) (at least the power
    floor), with D = TDP - P_idle and s(f) = (f/f_max) (V/V_max)^2.
    """
    t = phase_times(b)
    s = power.dynamic_scale(clock_ratio, pw["vf_x"], pw["vf_v"])
    dyn = (tdp_w - idle_w) * s
    floor = np.nan_to_num(np.asarray(floor_w, dtype=float), nan=0.0)
    p_wait = np.maximum(idle_w + pw["a_waiting"] * dyn, floor)
    e_compute = pw["a_compute"] * dyn * t["compute"]
    e_memory = pw["a_memory"] * dyn * t["memory"] + energy.hbm_energy_j(_get(b, "hbm_bytes", t["step"]), pw["hbm_pj_per_byte"])
    e_idle = idle_w * t["step"]
    e_wait_fine = (p_wait - idle_w) * t["fine_wait"]
    e_wait = e_wait_fine + (p_wait - idle_w) * t["blocked"]
    busy = np.where(t["busy"] > 0, t["busy"], np.nan)
    p_busy = idle_w + (e_compute + e_memory + e_wait_fine) / busy
    p_busy = np.where(t["busy"] > 0, p_busy, p_wait)
    return {"compute": e_compute, "memory": e_memory, "idle": e_idle, "waiting": e_wait,
            "total": e_compute + e_memory + e_idle + e_wait, "p_busy": p_busy, "p_wait": p_wait,
            "p_compute": idle_w + pw["a_compute"] * dyn, "times": t}


def _thermal(acc: dict, inlet_c, liquid, r_total) -> dict[str, np.ndarray]:
    t = acc["times"]
    return thermal.periodic_response(acc["p_busy"], t["busy"], acc["p_wait"], t["blocked"], inlet_c,
                                     thermal.foster_terms(liquid, r_total))


_LIMIT_PW = ("a_waiting", "a_compute", "a_memory", "vf_x", "vf_v", "hbm_pj_per_byte", "slowdown_temp_c")


class LimitCheck:
    """``check(clock) -> (cap_ok, hot_ok)`` for fixed candidates: :func:`scaled_breakdown`,
    :func:`accelerator_energy` and the thermal peak with every clock-independent term
    computed once (the bisection calls it 18 times). Same arithmetic in the same order
    as those functions, so the clocks found are the same to the last bit."""

    def __init__(self, b, hw, pw, cfg, cap_w, r_total, clock_from):
        step = np.asarray(b["step_s"], dtype=float)
        t_c = _get(b, "compute_s", step)
        slot = t_c + _get(b, "memory_s", step) + _get(b, "tp_comm_s", step)
        self.a = {  # per-candidate arrays
            "step": step, "t_c": t_c, "slot": slot, "slot_pos": slot > 0,
            "slot_div": np.where(slot > 0, slot, 1.0), "bubble": _get(b, "bubble_s", step),
            "dp_comm": _get(b, "dp_comm_s", step),
            "t_m": _get(b, "memory_s", step) + _get(b, "optimizer_s", step),
            "fine": _get(b, "tp_comm_s", step) + _get(b, "pp_comm_s", step),
            "idle_w": hw["idle_w"], "f_max": hw["clock_max_mhz"], "span_w": hw["tdp_w"] - hw["idle_w"],
            "floor": np.nan_to_num(np.asarray(cfg["power_floor_w"], dtype=float), nan=0.0),
            "e_hbm": energy.hbm_energy_j(_get(b, "hbm_bytes", step), pw["hbm_pj_per_byte"]),
            "cap_lim": cap_w * (1 + 1e-9), "hot_lim": pw["slowdown_temp_c"] + 1e-9,
            "inlet": np.asarray(cfg["inlet_temp_c"], dtype=float), "clock_from": clock_from,
            **{k: pw[k] for k in ("a_waiting", "a_compute", "a_memory")},
        }
        self.voltage = power.VoltageCurve(pw["vf_x"], pw["vf_v"])
        self.terms = thermal.foster_terms(cfg["cooling"], r_total)

    def __call__(self, clock, *, hot: bool = True):
        """(cap_ok, hot_ok) at ``clock``; ``hot=False`` skips the thermal part (hot_ok None)."""
        a = self.a
        t_c, bubble = a["t_c"], a["bubble"]
        new_c = t_c * (a["clock_from"] / clock)
        new_bubble = bubble * np.where(a["slot_pos"], (a["slot"] + new_c - t_c) / a["slot_div"], 1.0)
        new_step = a["step"] + (new_c - t_c) + (new_bubble - bubble)
        blocked = new_bubble + a["dp_comm"]
        busy = np.maximum(new_step - blocked, 0.0)
        idle_w = a["idle_w"]
        ratio = clock / a["f_max"]
        dyn = a["span_w"] * (ratio * self.voltage(ratio) ** 2)  # power.dynamic_scale
        p_wait = np.maximum(idle_w + a["a_waiting"] * dyn, a["floor"])
        e_compute = a["a_compute"] * dyn * new_c
        e_memory = a["a_memory"] * dyn * a["t_m"] + a["e_hbm"]
        e_wait_fine = (p_wait - idle_w) * a["fine"]
        has_busy = busy > 0
        p_busy = idle_w + (e_compute + e_memory + e_wait_fine) / np.where(has_busy, busy, np.nan)
        p_busy = np.where(has_busy, p_busy, p_wait)
        cap_ok = ~(p_busy > a["cap_lim"])
        if not hot:
            return cap_ok, None
        # fmax(x, 0): NaN -> 0 as periodic_response's nan_to_num; an infinite busy time
        # (kept here, the largest float there) gives the same peak (e^-inf = e^-huge = 0)
        t_hi = np.fmax(busy, 0.0)
        t_lo = np.fmax(blocked, 0.0)
        hot_ok = ~(thermal.peak_junction_c(p_busy, t_hi, p_wait, t_lo, a["inlet"], self.terms) > a["hot_lim"])
        return cap_ok, hot_ok


def _rows(d: dict, idx: np.ndarray, n_rows: int) -> dict:
    """The per-candidate (length ``n_rows``) arrays of ``d`` at rows ``idx``."""
    return {k: np.asarray(v)[idx] for k, v in d.items() if np.ndim(v) >= 1 and len(v) == n_rows}


def operating_clock(b, clock, hw, pw, cfg, cap_w, r_total, ok=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Highest clock <= the set clock meeting the cap and the slowdown temperature.

    Returns (clock, power_capped, throttled). Both limits grow with the clock, so a
    bisection per limit finds the clock that meets it (seed 000's
    f_opt = min(f_max, sqrt(P_max / (k V^2))) generalised to a V-f curve and phases).
    Each bisection runs over the rows that break its limit only; the cap's skips the
    thermal model. ``ok``: (cap_ok, hot_ok) at the set clock when the caller has them.
    """
    cap_ok, hot_ok = LimitCheck(b, hw, pw, cfg, cap_w, r_total, clock)(clock) if ok is None else ok
    finite = np.isfinite(clock)
    n_rows = len(clock)
    need_b = ("step_s", "compute_s", "memory_s", "tp_comm_s", "bubble_s", "dp_comm_s", "optimizer_s",
              "pp_comm_s", "hbm_bytes")
    limits = []
    for hot, ok0 in ((False, cap_ok), (True, hot_ok)):
        f = clock.copy()
        idx = np.flatnonzero(~ok0 & finite)
        if len(idx):
            check = LimitCheck(  # built for the bisected rows only
                _rows({k: b[k] for k in need_b if k in b}, idx, n_rows),
                _rows({k: hw[k] for k in ("idle_w", "clock_max_mhz", "tdp_w")}, idx, n_rows),
                _rows({k: pw[k] for k in _LIMIT_PW}, idx, n_rows),
                _rows({k: cfg[k] for k in ("power_floor_w", "inlet_temp_c", "cooling")}, idx, n_rows),
                cap_w[idx], r_total[idx], clock[idx])
            lo, hi = hw["clock_min_mhz"][idx], clock[idx]
            for _ in range(BISECTION_STEPS):
                mid = 0.5 * (lo + hi)
                ok = check(mid, hot=hot)[hot]
                lo = np.where(ok, mid, lo)
                hi = np.where(ok, hi, mid)
            f[idx] = lo
        limits.append(f)
    f_cap, f_hot = limits
    new = np.minimum(np.minimum(f_cap, f_hot), clock)
    return new, f_cap < clock, f_hot < np.minimum(f_cap, clock)


def _scatter_tree(base: dict, rows: np.ndarray, values: dict) -> dict:
    """:func:`_scatter` over a dict of arrays (and nested dicts)."""
    return {k: _scatter_tree(v, rows, values[k]) if isinstance(v, dict) else _scatter(v, rows, values[k])
            for k, v in base.items()}


def _accepts_rows(retime) -> bool:
    try:
        params = inspect.signature(retime).parameters
    except (TypeError, ValueError):
        return False
    return "rows" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _retimed_rows(retime, clock_mhz: np.ndarray, rows: np.ndarray) -> dict:
    """The time model's output for ``rows`` only, at ``clock_mhz[rows]``.

    ``retime(clock, rows=rows)`` times just those rows; a one-argument ``retime(clock)``
    times every row (the rows outside ``rows`` at their unchanged clock) and is sliced.
    """
    if _accepts_rows(retime):
        return retime(clock_mhz[rows], rows=rows)
    full = retime(clock_mhz)
    n_rows = len(clock_mhz)
    out = _rows(full, rows, n_rows)
    out["_breakdown"] = _rows(full["_breakdown"], rows, n_rows)
    return out


def _scatter(base: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A copy of ``base`` with ``values`` at ``rows``."""
    out = np.array(base, dtype=np.result_type(base, values))
    out[rows] = values
    return out


def checkpoint_phases(cfg: dict, perf: dict, step_s: np.ndarray, n_rows: int) -> dict[str, np.ndarray]:
    """Checkpoint phases: the job stops while each accelerator writes its state.

    Bytes per accelerator per checkpoint: weights + optimizer state on that accelerator
    (the time model's memory breakdown: mixed-precision Adam, 2 + 12 B per parameter,
    sharded as its ZeRO stage says). One checkpoint blocks the job for
    ``duration_s = bytes / checkpoint_write_gbs`` (or ``checkpoint_duration_s``); one is
    taken every ``checkpoint_interval_s`` of training, so the run takes
    ``time_to_train / interval`` of them (a continuous count) and each iteration carries
    ``per_step_s = step_s * duration_s / interval`` of checkpoint time. ``on``: rows with
    a positive, finite interval; ``per_step_s`` is exactly 0 elsewhere.
    """
    def inp(name, default):
        v = cfg.get(name)
        return np.full(n_rows, default, dtype=float) if v is None else np.asarray(v, dtype=float)

    interval = inp("checkpoint_interval_s", 0.0)
    on = np.isfinite(interval) & (interval > 0)
    mem = perf.get("_memory")
    if mem is not None:
        state_b = np.asarray(mem["weights"], dtype=float) + np.asarray(mem["optimizer"], dtype=float)
    else:  # the public metrics (GB)
        state_b = (np.asarray(perf["weights_memory_gb"], dtype=float)
                   + np.asarray(perf["optimizer_memory_gb"], dtype=float)) * 1e9
    write_bps = inp("checkpoint_write_gbs", CHECKPOINT_WRITE_GBS) * 1e9
    given = inp("checkpoint_duration_s", _NAN)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        duration = np.where(np.isfinite(given), given, state_b / np.where(write_bps > 0, write_bps, np.nan))
        per_step = np.where(on, step_s * duration / np.where(on, interval, 1.0), 0.0)
    return {"on": on, "interval_s": interval, "bytes": state_b, "duration_s": duration, "per_step_s": per_step}


def evaluate(cfg: dict[str, np.ndarray], perf: dict, retime=None) -> dict[str, np.ndarray]:
    """Energy, power and thermal metrics for every candidate (and re-timed time metrics).

    ``retime(clock_mhz, rows=idx)`` re-runs the time model for the candidates ``idx``
    (index array) at ``clock_mhz`` (one clock per row in ``idx``); a one-argument
    ``retime(clock_mhz)`` taking a clock for every candidate also works. Only the rows
    whose clock changed are re-timed. Any time metric this function returns overrides the
    time model's value. ``reason`` holds the energy side's infeasibility reasons ("" where
    none); ``perf`` is not modified.
    """
    n_rows = len(perf["_clock_mhz"])

    def inp(name, default=_NAN):
        v = cfg.get(name)
        return np.full(n_rows, default, dtype=float) if v is None else np.asarray(v, dtype=float)

    cooling = cfg.get("cooling")
    liquid = (np.zeros(n_rows, dtype=bool) if cooling is None
              else Factorised(*factorise(cooling)).map(lambda c: c == "liquid", dtype=bool))
    cfg = dict(cfg)
    cfg["cooling"] = liquid
    for name, default in (("inlet_temp_c", 30.0), ("power_floor_w", _NAN)):
        cfg[name] = inp(name, default)

    hw, clock, b = perf["_hw"], np.asarray(perf["_clock_mhz"], dtype=float), perf["_breakdown"]
    pw = power.lookup(cfg["accelerator"]) if "accelerator" in cfg else power.lookup(np.full(n_rows, "?"))
    r_total = thermal.resistance_k_per_w(liquid, pw, hw["tdp_w"])
    cap_in = inp("power_cap_w")
    cap_w = np.minimum(np.where(np.isfinite(cap_in), cap_in, np.inf), hw["tdp_w"])

    def energy_and_thermal(b, clock, rows=None):
        """Accelerator energy and junction temperatures (for ``rows`` only if given)."""
        n = len(clock)
        pick = ("clock_max_mhz", "idle_w", "tdp_w", "power_floor_w", "inlet_temp_c")
        h, p, c = (hw, pw, cfg) if rows is None else (
            _rows({k: hw[k] for k in pick[:3]}, rows, n), _rows(pw, rows, n),
            _rows({k: cfg[k] for k in pick[3:]}, rows, n))
        c_liquid, c_r = (liquid, r_total) if rows is None else (liquid[rows], r_total[rows])
        clock = clock if rows is None else clock[rows]
        acc = accelerator_energy(b, clock / h["clock_max_mhz"], p, h["idle_w"], h["tdp_w"], c["power_floor_w"])
        return acc, _thermal(acc, c["inlet_temp_c"], c_liquid, c_r)

    # at the set clock: the final answer for every row whose clock stays, and the test of
    # which rows break a limit
    acc, th = energy_and_thermal(b, clock)
    set_ok = (~(acc["p_busy"] > cap_w * (1 + 1e-9)), ~(th["peak_c"] > pw["slowdown_temp_c"] + 1e-9))
    new_clock, capped, throttled = operating_clock(b, clock, hw, pw, cfg, cap_w, r_total, ok=set_ok)
    out: dict[str, np.ndarray] = {}
    changed = np.isfinite(new_clock) & (new_clock < clock * (1 - 1e-9))
    if changed.any():
        rows = np.flatnonzero(changed)
        clock = np.where(changed, new_clock, clock)
        if retime is not None:
            sub = _retimed_rows(retime, clock, rows)
            perf = dict(perf)
            for k, v in sub.items():
                if k != "reason" and isinstance(v, np.ndarray) and k in perf:
                    perf[k] = _scatter(perf[k], rows, v)
                    if not k.startswith("_"):
                        out[k] = perf[k]
            b = {k: _scatter(v, rows, sub["_breakdown"][k]) if k in sub["_breakdown"] else v
                 for k, v in b.items()}
            # re-derive energy and temperatures for the re-timed rows only
            acc_rows, th_rows = energy_and_thermal(sub["_breakdown"], clock, rows)
            acc, th = _scatter_tree(acc, rows, acc_rows), _scatter_tree(th, rows, th_rows)
        else:
            b = scaled_breakdown(b, perf["_clock_mhz"], clock)
            acc, th = energy_and_thermal(b, clock)
    # A cap below what the slowest clock draws cannot be met: mark the candidate (the
    # caller merges these after the time model's reasons, which win).
    reasons = np.full(n_rows, "", dtype=object)
    reasons[th["peak_c"] > pw["slowdown_temp_c"] + 0.5] = "junction above the slowdown temperature even at the lowest clock"
    reasons[acc["p_busy"] > cap_w * 1.001] = "power cap below the accelerator's draw at its lowest clock"

    steps, n = perf["_steps"], perf["_n"]
    t = acc["times"]
    step_s = t["step"]
    per_node = np.maximum(inp("accelerators_per_node", 8.0), 1.0)
    p_host = inp("host_power_w", 800.0) / per_node
    scaleup_size = inp("scaleup_size", 8.0)
    p_net_static = (inp("nic_power_w", 25.0) + inp("scaleup_switch_power_w", 25.0)
                    + np.where(n > scaleup_size, inp("scaleout_switch_power_w", 30.0), 0.0))
    e_links = energy.network_energy_j(_get(b, "scaleup_bytes", step_s), _get(b, "scaleout_bytes", step_s),
                                      inp("scaleup_pj_per_bit", energy.SCALEUP_PJ_PER_BIT),
                                      inp("scaleout_pj_per_bit", energy.SCALEOUT_PJ_PER_BIT))
    e_net = e_links + p_net_static * step_s
    e_host = p_host * step_s
    e_it_acc = acc["total"] + e_net + e_host            # per accelerator per iteration
    overhead = energy.facility_overhead_factor(inp("pue", 1.2), inp("cooling_cop"))
    total_steps_n = steps * n
    ck = checkpoint_phases(cfg, perf, step_s, n_rows)
    # checkpoint phases, per accelerator and iteration (amortised: ck["per_step_s"]): the
    # accelerator blocked at P_blocked, host and network static power on, the bytes over
    # the scale-out fabric. Zero (not 0 x NaN) where checkpointing is off, so every other
    # output is unchanged to the last bit.
    on, t_ck = ck["on"], ck["per_step_s"]
    ck_links = np.where(on, energy.network_energy_j(0.0, ck["bytes"], 0.0, inp("scaleout_pj_per_bit", energy.SCALEOUT_PJ_PER_BIT))
                        * step_s / np.where(on, ck["interval_s"], 1.0), 0.0)
    ck_idle = np.where(on, hw["idle_w"] * t_ck, 0.0)
    ck_wait = np.where(on, (acc["p_wait"] - hw["idle_w"]) * t_ck, 0.0)
    ck_net = np.where(on, p_net_static * t_ck, 0.0) + ck_links
    ck_host = np.where(on, p_host * t_ck, 0.0)
    e_step_acc = e_it_acc                                 # one iteration, checkpoints aside
    e_it_acc = e_it_acc + (ck_idle + ck_wait + ck_net + ck_host)
    it_j = e_it_acc * total_steps_n
    facility_j = it_j * (1.0 + overhead)
    time_to_train_s = steps * (step_s + t_ck)

    # Facility power: IT power scaled by the overhead; the swing is the IT step between
    # the busy and the blocked phase, synchronised over all accelerators (the cooling
    # plant does not follow sub-second swings, so no overhead on it).
    p_other = p_host + p_net_static + e_links / np.where(step_s > 0, step_s, np.nan)
    facility_avg_w = facility_j / np.where(time_to_train_s > 0, time_to_train_s, np.nan)
    facility_peak_w = n * (acc["p_busy"] + p_other) * (1.0 + overhead)
    # a checkpoint is one more low (blocked) phase: the same step, busy -> blocked power
    low_phase = (t["blocked"] > 0) | (on & (ck["duration_s"] > 0))
    swing_w = np.where(low_phase, n * np.maximum(acc["p_busy"] - acc["p_wait"], 0.0), 0.0)
    ramp = swing_w / inp("power_transition_s", 0.01)

    tokens = np.asarray(perf.get("tokens_to_train", np.full(n_rows, np.nan)), dtype=float)
    params = np.asarray(perf.get("parameters", np.full(n_rows, np.nan)), dtype=float)
    landauer = energy.landauer_bound_j(params, tokens, inp("data_entropy_bits_per_token", 3.0),
                                       cfg["inlet_temp_c"] + thermal.KELVIN)
    mfu = np.asarray(out.get("mfu", perf.get("mfu", np.full(n_rows, np.nan))), dtype=float)
    cost = energy.cost_usd(n, time_to_train_s, facility_j, inp("accelerator_hour_price", 2.0),
                           inp("energy_price_per_kwh", 0.10))
    busy_work = (acc["compute"] + acc["memory"] + hw["idle_w"] * t["busy"]) * total_steps_n
    step_ck = step_s + t_ck  # iteration plus its share of checkpoint time
    mean_p = (acc["total"] + (ck_idle + ck_wait)) / np.where(step_ck > 0, step_ck, np.nan)
    out.update({
        "energy_to_train_j": facility_j,
        "energy_to_train_mwh": facility_j / energy.J_PER_MWH,
        "it_energy_to_train_j": it_j,
        "it_energy_to_train_mwh": it_j / energy.J_PER_MWH,
        "energy_per_step_j": e_step_acc * n * (1.0 + overhead),
        "energy_compute_j": acc["compute"] * total_steps_n,
        "energy_memory_j": acc["memory"] * total_steps_n,
        "energy_network_j": (e_net + ck_net) * total_steps_n,
        "energy_idle_j": (acc["idle"] + ck_idle) * total_steps_n,
        "energy_waiting_j": (acc["waiting"] + ck_wait) * total_steps_n,
        "energy_host_j": (e_host + ck_host) * total_steps_n,
        "energy_facility_overhead_j": it_j * overhead,
        "avg_power_per_accelerator_w": mean_p,
        "peak_power_per_accelerator_w": acc["p_busy"],
        "facility_avg_power_w": facility_avg_w,
        "facility_peak_power_w": facility_peak_w,
        "facility_power_swing_w": swing_w,
        "facility_power_ramp_w_per_s": ramp,
        "checkpoint_time_s": np.where(on, steps * t_ck, 0.0),
        "checkpoint_overhead": np.where(on, t_ck / np.where(step_ck > 0, step_ck, np.nan), 0.0),
        "time_to_train_s": time_to_train_s,
        "time_to_train_days": time_to_train_s / 86400.0,
        "effective_clock_mhz": clock,
        "power_capped": np.asarray(capped, dtype=bool),
        "throttled": np.asarray(throttled, dtype=bool),
        "peak_junction_temp_c": th["peak_c"],
        "mean_junction_temp_c": thermal.steady_junction_temp_c(mean_p, cfg["inlet_temp_c"], r_total),
        "junction_temp_swing_c": th["peak_c"] - th["min_c"],
        "max_junction_temp_rate_c_per_s": th["max_rate_c_per_s"],
        "tokens_per_j": tokens / facility_j,
        "energy_time_product_js": facility_j * time_to_train_s,
        "energy_utilisation_factor": busy_work / facility_j,
        "energy_efficiency_index": mfu * landauer / facility_j,
        "cost_usd": cost["total"],
        "energy_cost_usd": cost["energy"],
        "carbon_kg": energy.carbon_kg(facility_j, inp("grid_carbon_kg_per_kwh", 0.385)),
        "landauer_bound_j": landauer,
        "landauer_ratio": facility_j / landauer,
        "reason": reasons,
    })
    return out
