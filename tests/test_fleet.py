"""Mixed fleets: one job's pipeline split over two accelerator types (dse/analytic/fleet.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.analytic import fleet
from dse.analytic.evaluator import AnalyticEvaluator

BASE = dict(
    model="llama3-70b",
    num_accelerators=256,
    tensor_parallel=8,
    pipeline_parallel=4,
    global_batch_size=1024,
    framework="megatron-core",
    sequence_parallel=True,
    target_tokens=1e12,
)


def run(*rows: dict) -> pd.DataFrame:
    return AnalyticEvaluator().evaluate(pd.DataFrame([{**BASE, **r} for r in rows]))


def test_layers_are_split_by_speed_to_the_power_alpha():
    a, b, empty = fleet.split_layers(
        np.array([80.0, 80.0, 80.0]),
        np.array([4.0, 4.0, 4.0]),
        np.array([2.0, 2.0, 2.0]),
        np.array([1.0, 1.0, 1.0]),
        np.array([3.0, 3.0, 3.0]),
        np.array([1.0, 0.0, 2.0]),
    )
    # W_i ~ P_i^alpha: alpha 1 gives the 3x faster part 3x the layers per stage, alpha 0 an even split
    np.testing.assert_array_equal(a.first, [10.0, 20.0, 4.0])
    np.testing.assert_array_equal(b.first, [30.0, 20.0, 36.0])
    assert (2 * a.first + b.first + b.last == 80).all() and not empty.any()


def test_the_same_type_twice_is_the_one_type_pipeline():
    one, two = run(
        {"accelerator": "H100-SXM"},
        {"accelerator": "H100-SXM", "second_accelerator": "H100-SXM", "second_pipeline_stages": 2},
    ).iloc
    assert two["feasible"] and two["second_accelerators"] == 128 and one["second_accelerators"] == 0
    for k in ("step_time_s", "time_to_train_s", "mfu"):
        assert two[k] == pytest.approx(one[k], rel=0.01), k
    for k in ("energy_to_train_j", "facility_peak_power_w", "cost_usd"):
        assert two[k] == pytest.approx(one[k], rel=0.02), k
    assert two["compute_time_s"] == pytest.approx(one["compute_time_s"], rel=1e-9)


def test_a_mixed_fleet_sits_between_its_parts_and_the_slowest_sets_the_pace():
    h100, b200, mixed, even = run(
        {"accelerator": "H100-SXM"},
        {"accelerator": "B200"},
        {"accelerator": "H100-SXM", "second_accelerator": "B200", "second_pipeline_stages": 2},
        {
            "accelerator": "H100-SXM",
            "second_accelerator": "B200",
            "second_pipeline_stages": 2,
            "split_alpha": 0.0,
        },
    ).iloc
    assert b200["step_time_s"] < mixed["step_time_s"] < h100["step_time_s"]
    # an even split leaves the H100 half pacing the pipeline: nearly the all-H100 iteration
    assert mixed["step_time_s"] < even["step_time_s"] < h100["step_time_s"]
    # (20 layers per H100 stage either way; the output layer now sits on a B200 stage)
    assert 0.94 * h100["compute_time_s"] < even["compute_time_s"] < h100["compute_time_s"]
    # energy and power are each part's, summed: between the all-H100 and all-B200 jobs
    for k in ("energy_to_train_j", "facility_peak_power_w"):
        assert min(h100[k], b200[k]) < mixed[k] < max(h100[k], b200[k]), k
    assert mixed["peak_power_per_accelerator_w"] == pytest.approx(
        b200["peak_power_per_accelerator_w"], rel=0.05
    )


def test_mixed_and_single_rows_in_one_table_and_bad_splits_are_infeasible():
    r = run(
        {"accelerator": "H100-SXM"},
        {"accelerator": "H100-SXM", "second_accelerator": "B200", "second_pipeline_stages": 4},
        {"accelerator": "H100-SXM", "second_accelerator": "B200", "second_pipeline_stages": 0},
        {
            "accelerator": "H100-SXM",
            "second_accelerator": "B200",
            "second_pipeline_stages": 2,
            "interleave": 2,
        },
        {"accelerator": "A100-80GB", "second_accelerator": "H100-SXM", "second_pipeline_stages": 1},
    )
    assert list(r["feasible"]) == [True, False, False, False, True]
    assert r["reason"][1] == r["reason"][2] == fleet.SPLIT_REASON
    assert r["reason"][3] == fleet.INTERLEAVE_REASON
    alone = run(
        {"accelerator": "A100-80GB", "second_accelerator": "H100-SXM", "second_pipeline_stages": 1}
    )
    for k in ("step_time_s", "energy_to_train_j"):
        assert r[k][4] == pytest.approx(alone[k][0], rel=1e-12), k


def test_every_metric_declares_how_a_mixed_fleet_combines_it():
    from dse.analytic import declarations

    for name, metric in declarations.METRICS.items():
        assert metric.mixed_fleet in declarations.MIXED_FLEET_RULES, name
    # one part's value only where the rule says so, and its description says which part
    firsts = [m for m in declarations.METRICS.values() if m.mixed_fleet == declarations.FIRST_TYPE]
    assert all("the first type's" in m.long_name for m in firsts)


def test_metrics_declared_the_same_on_both_parts_are(monkeypatch):
    from dse.analytic import declarations

    parts = []
    combine = fleet._combine

    def keep(ea, eb, n_a, n_b):
        parts.append(({**ea.timing.metrics(), **ea.metrics}, {**eb.timing.metrics(), **eb.metrics}))
        return combine(ea, eb, n_a, n_b)

    monkeypatch.setattr(fleet, "_combine", keep)
    r = run(
        *(
            {
                "accelerator": a,
                "second_accelerator": b,
                "second_pipeline_stages": 2,
                "power_cap_w": cap,
            }
            for a, b in (("H100-SXM", "B200"), ("A100-80GB", "H200"))
            for cap in (np.nan, 450.0)
        )
    )
    assert r["feasible"].all()
    ((ma, mb),) = parts
    same = [n for n, m in declarations.METRICS.items() if m.mixed_fleet == declarations.SAME]
    assert len(same) >= 5
    for name in same:
        np.testing.assert_allclose(mb[name], ma[name], rtol=1e-12, err_msg=name)
        np.testing.assert_array_equal(r[name], ma[name])
    # the clocks differ (the first type's is the metric), as the accelerators do
    assert (ma["effective_clock_mhz"] != mb["effective_clock_mhz"]).any()
    np.testing.assert_array_equal(r["effective_clock_mhz"], ma["effective_clock_mhz"])
