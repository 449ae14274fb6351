"""Power, energy and thermal model on top of the time model's breakdown.

``evaluate(cfg, perf)`` takes the inputs and the time model's output and returns the
power, energy and temperature metrics (see docs/model.md for every equation's source).
"""

from __future__ import annotations

import numpy as np

from dse.evaluators.base import Input, Metric
from dse.physics import energy, power, thermal

INPUTS: list[Input] = [
    Input("cooling", "str", "", "cooling type", "air", ("air", "liquid"), group="hardware"),
    Input("inlet_temp_c", "float", "degC", "coolant / air inlet temperature", 30.0, minimum=-20, maximum=80, group="hardware"),
    Input("host_power_w", "float", "W", "host (CPU, DRAM, NIC) power per accelerator", 100.0, minimum=0, group="hardware"),
    Input("pue", "float", "", "facility power usage effectiveness", 1.2, minimum=1.0, maximum=3.0, group="hardware"),
]

METRICS: list[Metric] = [
    Metric("energy_to_train_j", "J", "facility energy to train"),
    Metric("energy_to_train_mwh", "MWh", "facility energy to train"),
    Metric("avg_power_per_accelerator_w", "W", "average power per accelerator"),
    Metric("peak_power_per_accelerator_w", "W", "peak power per accelerator"),
    Metric("facility_peak_power_w", "W", "peak facility power"),
    Metric("peak_junction_temp_c", "degC", "peak junction temperature"),
    Metric("tokens_per_j", "tokens/J", "tokens per joule (facility)"),
    Metric("energy_time_product_js", "J*s", "energy-time product"),
]


def evaluate(cfg: dict[str, np.ndarray], perf: dict, retime=None) -> dict[str, np.ndarray]:
    """Energy, power and thermal metrics for every candidate.

    ``retime(clock_mhz)`` re-runs the time model at another clock; any time metric this
    function returns overrides the time model's value.
    """
    hw, clock, t, steps, n = perf["_hw"], perf["_clock_mhz"], perf["_breakdown"], perf["_steps"], perf["_n"]
    args = (clock, hw["clock_min_mhz"], hw["clock_max_mhz"], hw["idle_w"], hw["tdp_w"])
    p_compute = power.phase_power_w(power.ACTIVITY["compute"], *args)
    p_memory = power.phase_power_w(power.ACTIVITY["memory"], *args)
    p_comm = power.phase_power_w(power.ACTIVITY["communication"], *args)
    p_wait = power.phase_power_w(power.ACTIVITY["waiting"], *args)
    comm_s = t["tp_comm_s"] + t["pp_comm_s"] + t["dp_comm_s"]
    e_accel = (p_compute * t["compute_s"] + p_memory * (t["memory_s"] + t["optimizer_s"])
               + p_comm * comm_s + p_wait * t["bubble_s"])
    e_net = energy.network_energy_j(t["scaleup_bytes"], t["scaleout_bytes"])
    e_host = cfg["host_power_w"] * t["step_s"]
    e_it_step = (e_accel + e_net + e_host) * n
    energy_to_train_j = e_it_step * cfg["pue"] * steps
    time_to_train_s = steps * t["step_s"]
    peak_power_w = p_compute
    return {
        "energy_to_train_j": energy_to_train_j,
        "energy_to_train_mwh": energy_to_train_j / 3.6e9,
        "avg_power_per_accelerator_w": e_accel / t["step_s"],
        "peak_power_per_accelerator_w": peak_power_w,
        "facility_peak_power_w": (peak_power_w + cfg["host_power_w"]) * n * cfg["pue"],
        "peak_junction_temp_c": thermal.junction_temp_c(peak_power_w, cfg["inlet_temp_c"], cfg["cooling"]),
        "tokens_per_j": perf["tokens_to_train"] / energy_to_train_j,
        "energy_time_product_js": energy_to_train_j * time_to_train_s,
    }
