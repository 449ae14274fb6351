"""DVFS power: V-f curve, phase powers, the power.yaml catalog and the power cap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.analytic.energy import power
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import hardware

CATALOG = (
    "V100-SXM2",
    "A100-40GB",
    "A100-80GB",
    "H100-SXM",
    "H200",
    "B200",
    "MI250X",
    "MI300X",
    "GB200",
    "MI325X",
    "MI355X",
    "TPU-v5e",
    "TPU-v5p",
    "TPU-v6e",
    "H800",
)


def test_power_yaml_is_keyed_by_the_catalog_names_and_cites_sources():
    entries = power.parameters()["accelerators"]
    assert set(entries) == set(hardware.accelerator_names())  # one power entry per catalog part
    assert set(CATALOG) <= set(entries)
    for name, entry in entries.items():
        assert entry.get("source"), name
    for cooling in ("air", "liquid"):
        assert set(power.parameters()["cooling"][cooling]) == {
            "fast_fraction",
            "tau_fast_s",
            "tau_slow_s",
        }


def test_voltage_curve_is_flat_below_the_knee_and_reaches_one_at_f_max():
    pw = power.lookup(np.array(["A100-80GB"] * 5, dtype=object))
    x = np.array([0.1, 0.5, 0.74, 0.9, 1.0])
    v = power.voltage_ratio(x, pw.vf_x, pw.vf_v)
    assert v[0] == pytest.approx(v[1]) == pytest.approx(v[2])
    assert v[-1] == pytest.approx(1.0)
    assert np.all(np.diff(v) >= 0)
    s = power.dynamic_scale(x, pw.vf_x, pw.vf_v)
    assert np.all(np.diff(s) > 0) and s[-1] == pytest.approx(1.0)


def test_unknown_accelerator_gets_the_defaults():
    pw = power.lookup(np.array(["A100-80GB", "my-chip"], dtype=object))
    assert np.isfinite(pw.hbm_pj_per_byte).all()
    assert pw.slowdown_temp_c[1] == power.parameters()["defaults"]["slowdown_temp_c"]


def test_compute_draws_more_than_memory_more_than_waiting_and_tdp_at_f_max():
    pw = power.lookup(np.array(["H100-SXM"], dtype=object))
    for ratio in (0.5, 0.8, 1.0):
        s = power.dynamic_scale(np.array([ratio]), pw.vf_x, pw.vf_v)
        pc, pm, pwt = (
            power.phase_power_w(getattr(pw, f"a_{p}"), s, 80.0, 700.0)[0]
            for p in ("compute", "memory", "waiting")
        )
        assert pc > pm > pwt > 80.0
        assert pwt < 80.0 + 0.15 * 620.0  # blocking power near idle
    s1 = power.dynamic_scale(np.array([1.0]), pw.vf_x, pw.vf_v)
    assert power.phase_power_w(pw.a_compute, s1, 80.0, 700.0)[0] == pytest.approx(700.0)


def _evaluate(**cols) -> pd.DataFrame:
    n = max(len(v) for v in cols.values() if isinstance(v, list))
    df = pd.DataFrame({k: v if isinstance(v, list) else [v] * n for k, v in cols.items()})
    return AnalyticEvaluator().evaluate(df)


def test_power_cap_lowers_the_clock_to_meet_it_and_slows_training():
    # micro-batches of 8: the GPUs, not their hosts, set the pace (docs/model.md, section 6)
    free = _evaluate(
        accelerator="H100-SXM",
        num_accelerators=8,
        model="gpt-1.3b",
        micro_batch_size=8,
        power_cap_w=[np.nan],
    )
    p0 = float(free["peak_power_per_accelerator_w"][0])
    caps = [np.nan, 0.95 * p0, 0.85 * p0, 0.75 * p0]
    r = _evaluate(
        accelerator="H100-SXM",
        num_accelerators=8,
        power_cap_w=caps,
        model="gpt-1.3b",
        micro_batch_size=8,
    )
    assert not r["power_capped"][0] and r["power_capped"][1:].all()
    assert np.all(np.diff(r["effective_clock_mhz"]) < 0)
    assert np.all(r["peak_power_per_accelerator_w"][1:] <= np.array(caps[1:]) * 1.001)
    assert np.all(np.diff(r["time_to_train_s"]) > 0)
    assert np.all(np.diff(r["step_time_s"]) > 0)


def test_a_cap_below_the_lowest_clock_draw_is_flagged_not_raised():
    r = _evaluate(accelerator="A100-80GB", num_accelerators=8, power_cap_w=[30.0], model="gpt-1.3b")
    assert not r["feasible"][0]
    assert "power cap" in r["reason"][0]


def test_a_parked_accelerator_draws_the_measured_idle_with_context_power():
    """A checkpoint write parks the accelerators (CUDA context held, no kernel): measured
    121.7 W on H100 80GB HBM3 and 80.0 W on A100 80GB (Vadari 2026, arXiv:2605.23918),
    below the 142 W of an H100 blocked in a collective (a_waiting)."""
    names = np.array(["H100-SXM", "A100-80GB"], dtype=object)
    pw = power.lookup(names)
    hw = hardware.lookup(names, np.array(["bf16", "bf16"], dtype=object))
    parked = power.parked_power_w(pw.a_parked, hw.idle_w, hw.tdp_w, np.full(2, np.nan))
    assert parked[0] == pytest.approx(121.7, abs=0.1)
    assert parked[1] == pytest.approx(80.0, rel=0.05)
    blocked = power.phase_power_w(pw.a_waiting, 1.0, hw.idle_w, hw.tdp_w)
    assert (parked < blocked).all()
    assert power.parked_power_w(pw.a_parked, hw.idle_w, hw.tdp_w, np.full(2, 300.0)).tolist() == [
        300.0,
        300.0,
    ]
