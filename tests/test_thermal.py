"""Junction temperature: steady state, transient under the busy/blocked wave, throttling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.analytic.energy import thermal
from dse.analytic.evaluator import AnalyticEvaluator


def _terms(cooling: str, r: float = 0.1):
    return thermal.foster_terms(np.array([cooling], dtype=object), np.array([r]))


def test_no_blocked_phase_gives_the_steady_state():
    out = thermal.periodic_response(
        np.array([500.0]),
        np.array([1.0]),
        np.array([100.0]),
        np.array([0.0]),
        np.array([30.0]),
        _terms("air"),
    )
    assert out.peak_c[0] == pytest.approx(30.0 + 0.1 * 500.0)
    assert out.max_rate_c_per_s[0] == 0.0


@pytest.mark.parametrize("cooling", ["air", "liquid"])
def test_transient_lies_between_the_two_steady_states(cooling):
    p_hi, p_lo = np.array([600.0]), np.array([120.0])
    for t_hi, t_lo in ((0.5, 0.5), (5.0, 1.0), (100.0, 50.0)):
        out = thermal.periodic_response(
            p_hi, np.array([t_hi]), p_lo, np.array([t_lo]), np.array([30.0]), _terms(cooling)
        )
        mean_p = (p_hi * t_hi + p_lo * t_lo) / (t_hi + t_lo)
        assert (
            30 + 0.1 * p_lo[0]
            <= out.min_c[0]
            <= 30 + 0.1 * mean_p[0]
            <= out.peak_c[0]
            <= 30 + 0.1 * p_hi[0] + 1e-9
        )
        assert out.max_rate_c_per_s[0] > 0
    # long phases approach the steady state of each phase
    out = thermal.periodic_response(
        p_hi, np.array([1e4]), p_lo, np.array([1e4]), np.array([30.0]), _terms(cooling)
    )
    assert out.peak_c[0] == pytest.approx(90.0, abs=0.01)
    assert out.min_c[0] == pytest.approx(42.0, abs=0.01)


def test_slow_heat_sink_smooths_short_swings_more_than_a_cold_plate():
    args = (
        np.array([600.0]),
        np.array([2.0]),
        np.array([120.0]),
        np.array([2.0]),
        np.array([30.0]),
    )
    air = thermal.periodic_response(*args, _terms("air"))
    liquid = thermal.periodic_response(*args, _terms("liquid"))
    assert air.peak_c[0] - air.min_c[0] < liquid.peak_c[0] - liquid.min_c[0]


def _evaluate(**cols) -> pd.DataFrame:
    n = max(len(v) for v in cols.values() if isinstance(v, list))
    df = pd.DataFrame({k: v if isinstance(v, list) else [v] * n for k, v in cols.items()})
    return AnalyticEvaluator().evaluate(df)


def test_liquid_runs_cooler_than_air():
    r = _evaluate(accelerator="H100-SXM", num_accelerators=8, cooling=["air", "liquid"])
    assert r["peak_junction_temp_c"][1] < r["peak_junction_temp_c"][0]


def test_hot_inlet_throttles_the_clock_and_time_and_energy_follow():
    # micro-batches of 8: the GPUs, not their hosts, set the pace (a host-bound step does not slow)
    cool = _evaluate(
        accelerator="H100-SXM",
        num_accelerators=64,
        cooling="air",
        inlet_temp_c=[25.0],
        micro_batch_size=8,
    )
    margin = 87.0 - float(cool["peak_junction_temp_c"][0])
    assert margin > 0
    inlet = [25.0, 25.0 + margin + 3.0, 25.0 + margin + 10.0]
    r = _evaluate(
        accelerator="H100-SXM",
        num_accelerators=64,
        cooling="air",
        inlet_temp_c=inlet,
        micro_batch_size=8,
    )
    assert not r["throttled"][0] and r["throttled"][1:].all()
    assert np.all(np.diff(r["effective_clock_mhz"]) < 0)
    assert np.all(np.diff(r["time_to_train_s"]) > 0)
    assert np.all(r["peak_junction_temp_c"][1:] <= 87.0 + 0.2)  # held at the slowdown temperature
    assert r["feasible"].all()


def test_uncoolable_candidate_is_flagged_not_raised():
    r = _evaluate(accelerator="H100-SXM", num_accelerators=8, cooling="air", inlet_temp_c=[80.0])
    assert r["throttled"][0]
    assert not r["feasible"][0] and "slowdown" in r["reason"][0]


def test_static_power_follows_the_junction_temperature_from_the_reference_cooling():
    from dse.analytic.energy import power
    from dse.analytic.time import hardware

    kw = dict(accelerator="H100-SXM", num_accelerators=64, micro_batch_size=8)
    r = _evaluate(
        **kw, cooling=["air", "air", "air", "liquid"], inlet_temp_c=[30.0, 40.0, 20.0, 30.0]
    )
    assert not r["throttled"].any()
    pw = power.entry("H100-SXM")
    leak_w = pw["leakage_share"] * hardware.catalog()["H100-SXM"]["tdp_w"]
    # same clock, same work: the busy power differs by the leakage law alone, exp(k dT) - 1
    # of the reference's leakage, with dT the inlet's difference for the same cooling
    for row, d_t in ((1, 10.0), (2, -10.0)):
        d_w = r["peak_power_per_accelerator_w"][row] - r["peak_power_per_accelerator_w"][0]
        assert d_w == pytest.approx(leak_w * np.expm1(pw["leakage_per_k"] * d_t), rel=1e-9)
    # a cold plate runs the junction cooler at the same power: less static power and energy
    assert r["peak_junction_temp_c"][3] < r["peak_junction_temp_c"][0] - 10
    assert (
        r["energy_idle_j"][3] < r["energy_idle_j"][0]
        and r["energy_to_train_j"][3] < r["energy_to_train_j"][0]
    )
    # warmer inlet, more energy; the compute energy and the time are those of the same clock
    assert r["energy_to_train_j"][2] < r["energy_to_train_j"][0] < r["energy_to_train_j"][1]
    assert r["energy_compute_j"].nunique() == 1 and r["time_to_train_s"].nunique() == 1


def test_a_power_cap_holds_with_the_leakage_of_a_hot_inlet():
    r = _evaluate(
        accelerator="H100-SXM",
        num_accelerators=64,
        micro_batch_size=8,
        cooling="air",
        inlet_temp_c=[30.0, 45.0],
        power_cap_w=500.0,
    )
    assert r["power_capped"].all()
    assert (r["peak_power_per_accelerator_w"] <= 500.0 * (1 + 1e-6)).all()
    assert r["effective_clock_mhz"][1] < r["effective_clock_mhz"][0]  # leakage took some of the cap


def test_the_reference_inlet_is_the_declared_default():
    from dse.analytic import declarations
    from dse.analytic.energy.accelerator import REFERENCE_INLET_C

    assert declarations.INPUTS["inlet_temp_c"].default == REFERENCE_INLET_C
    assert declarations.INPUTS["cooling"].default == "air"


def test_the_leakage_change_holds_in_checkpoint_phases_and_restarts_too():
    kw = dict(
        model="llama3-8b",
        accelerator="H100-SXM",
        num_accelerators=64,
        global_batch_size=256,
        micro_batch_size=1,
        target_tokens=1e11,
        checkpoint_interval_s=1800.0,
        checkpoint_duration_s=600.0,
    )
    r = _evaluate(**kw, cooling=["air", "liquid"])
    d_step_w = r["peak_power_per_accelerator_w"][1] - r["peak_power_per_accelerator_w"][0]
    assert d_step_w < 0
    in_steps = d_step_w * 64 * r["steps_to_train"][0] * r["step_time_s"][0]
    # the cold plate also cools the parked (checkpoint) and idle (restart) phases: more saved
    d_idle = r["energy_idle_j"][1] - r["energy_idle_j"][0]
    assert d_idle < in_steps < 0
    # the parked power is lower than the training power: its leakage change is smaller
    assert d_idle - in_steps > 0.5 * d_step_w * 64 * (
        r["time_to_train_s"][0] - r["steps_to_train"][0] * r["step_time_s"][0]
    )
