"""Network link voltage-frequency scaling (scaleup/scaleout_clock_fraction) and the idle,
waiting and thermal inputs (issue 34): the physics each input changes, checked against the
catalog and the documented laws, not against stored results."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_cli, write_study
from dse.analytic import declarations
from dse.analytic.evaluator import AnalyticEvaluator
from dse.errors import StudyError

POWER_YAML = REPO / "dse" / "analytic" / "data" / "power.yaml"
#: two nodes of 8 (data parallel over the scale-out fabric, tensor parallel inside the node):
#: both fabrics carry traffic; no interruptions or checkpoints (the iterations run are the same
#: for every clock, so run energies compare as per-iteration ones)
BASE = dict(
    model="gpt-1.3b",
    accelerator="H100-SXM",
    num_accelerators=16,
    tensor_parallel=2,
    global_batch_size=256,
    micro_batch_size=4,
    scaleup_bw_gbs=400.0,
    scaleout_bw_gbs=50.0,
    failures_per_accelerator_hour=0.0,
    checkpoint_interval_s=0.0,
)
TIMES = ("step_time_s", "tp_comm_time_s", "dp_comm_time_s", "pp_comm_time_s", "time_to_train_s")


def _evaluate(*rows: dict) -> pd.DataFrame:
    return AnalyticEvaluator().evaluate(pd.DataFrame([{**BASE, **r} for r in rows]))


def _link_energy_scale(fraction: float) -> float:
    """(V(f) / V(f_nominal))^2 on the links' V-f curve, read from power.yaml here."""
    curve = np.asarray(yaml.safe_load(POWER_YAML.read_text())["links"]["vf_curve"], dtype=float)
    v = np.interp(fraction, curve[:, 0], curve[:, 1]) / np.interp(1.0, curve[:, 0], curve[:, 1])
    return float(v * v)


@pytest.mark.parametrize("fabric", ["scaleup", "scaleout"])
def test_half_the_link_clock_is_half_the_bandwidth(fabric):
    """The time model sees a link at half its clock as a link of half its bandwidth."""
    bw = f"{fabric}_bw_gbs"
    out = _evaluate({f"{fabric}_clock_fraction": 0.5}, {bw: BASE[bw] / 2}, {})
    for t in TIMES:
        assert out[t][0] == pytest.approx(out[t][1], rel=1e-12), t
    comm = "dp_comm_time_s" if fabric == "scaleout" else "tp_comm_time_s"
    assert out[comm][0] > out[comm][2]  # and a slower link is exposed longer


@pytest.mark.parametrize("fabric", ["scaleup", "scaleout"])
@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.8])
def test_energy_per_bit_follows_the_square_of_the_link_voltage(fabric, fraction):
    out = _evaluate({f"{fabric}_clock_fraction": fraction}, {})
    assert out["feasible"].all()
    links = f"energy_{fabric}_links_j"
    other = "energy_scaleout_links_j" if fabric == "scaleup" else "energy_scaleup_links_j"
    # the same bytes at (V/V_nom)^2 of the energy per bit; the other fabric is untouched
    assert out[links][0] / out[links][1] == pytest.approx(_link_energy_scale(fraction), rel=1e-9)
    assert out[other][0] == pytest.approx(out[other][1], rel=1e-12)
    assert _link_energy_scale(fraction) < 1.0


def test_the_link_energy_is_part_of_the_network_energy():
    out = _evaluate({}, {"scaleout_clock_fraction": 0.5, "nic_power_w": 0.0})
    links = out["energy_scaleup_links_j"] + out["energy_scaleout_links_j"]
    assert (links > 0).all() and (links < out["energy_network_j"]).all()
    # with no static network power only the links are left (host and switches off too)
    bare = _evaluate(dict(nic_power_w=0.0, scaleup_switch_power_w=0.0, scaleout_switch_power_w=0.0))
    assert bare["energy_network_j"][0] == pytest.approx(
        bare["energy_scaleup_links_j"][0] + bare["energy_scaleout_links_j"][0], rel=1e-12
    )


def test_the_nominal_link_clock_and_absent_inputs_change_no_metric():
    """1.0 (the default) and NaN (catalog) for every new input: every metric as without them."""
    given = dict(
        scaleup_clock_fraction=1.0,
        scaleout_clock_fraction=1.0,
        idle_power_w=np.nan,
        waiting_power_w=np.nan,
        thermal_resistance_k_per_w=np.nan,
        thermal_tau_fast_s=np.nan,
        thermal_tau_slow_s=np.nan,
        heat_capacity_j_per_k=np.nan,
    )
    rows = [{}, {"power_cap_w": 350.0}, {"cooling": "liquid", "clock_fraction": 0.7}]
    plain = _evaluate(*rows)
    explicit = _evaluate(*({**r, **given} for r in rows))
    pd.testing.assert_frame_equal(plain, explicit, check_exact=True)


@pytest.mark.parametrize("name", ["scaleup_clock_fraction", "scaleout_clock_fraction"])
@pytest.mark.parametrize("value", [0.0, 0.2, 1.01, 2.0])
def test_a_link_clock_out_of_range_is_refused(name, value):
    with pytest.raises(StudyError, match=name):
        declarations.INPUTS[name].check(value, field=name)


def test_dse_validate_refuses_a_link_clock_above_nominal(tmp_path):
    study = {
        "name": "links",
        "space": {"scaleout_clock_fraction": [0.5, 1.5]},
        "fixed": {"model": "gpt-1.3b", "num_accelerators": 16},
        "objectives": [{"metric": "energy_to_train_j", "direction": "minimize"}],
    }
    proc = run_cli("validate", write_study(tmp_path, study))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "scaleout_clock_fraction" in proc.stderr and "1.5" in proc.stderr


def test_the_idle_power_input_sets_the_idle_energy():
    """Air at the reference inlet (no leakage change): idle energy = P_idle x time."""
    out = _evaluate({}, {"idle_power_w": 100.0}, {"idle_power_w": 40.0})
    assert out["feasible"].all()
    catalog_idle_w = 80.0  # H100-SXM in hardware.yaml (the case study's)
    for i, idle_w in enumerate((catalog_idle_w, 100.0, 40.0)):
        assert out["energy_idle_j"][i] / out["energy_idle_j"][0] == pytest.approx(
            idle_w / catalog_idle_w, rel=1e-12
        )
    assert out["step_time_s"].nunique() == 1  # the time does not depend on it


def test_waiting_at_idle_power_leaves_no_waiting_energy_and_the_catalog_value_changes_nothing():
    tdp_w, idle_w, a_wait = 700.0, 80.0, 0.10  # H100-SXM: hardware.yaml; power.yaml activity
    out = _evaluate(
        {}, {"waiting_power_w": idle_w + a_wait * (tdp_w - idle_w)}, {"waiting_power_w": idle_w}
    )
    assert out["energy_waiting_j"][0] > 0
    assert out["energy_waiting_j"][1] == pytest.approx(out["energy_waiting_j"][0], rel=1e-9)
    assert out["energy_waiting_j"][2] == 0.0
    assert out["energy_to_train_j"][2] < out["energy_to_train_j"][0]


def test_waiting_below_idle_or_idle_at_the_tdp_is_infeasible_with_a_reason():
    out = _evaluate({"idle_power_w": 90.0, "waiting_power_w": 80.0}, {"idle_power_w": 700.0})
    assert not out["feasible"].any()
    assert "waiting_power_w below" in out["reason"][0]
    assert "idle power at or above" in out["reason"][1]


def test_thermal_inputs_set_the_resistance_and_the_time_constants():
    cooling = yaml.safe_load(POWER_YAML.read_text())["cooling"]["air"]
    rows = [
        {},
        {"thermal_tau_slow_s": cooling["tau_slow_s"], "thermal_tau_fast_s": cooling["tau_fast_s"]},
        {"thermal_resistance_k_per_w": 0.05},
        {"thermal_tau_slow_s": 2.0},
        {"thermal_resistance_k_per_w": 0.05, "heat_capacity_j_per_k": 50.0},
        {"thermal_resistance_k_per_w": 0.05, "thermal_tau_slow_s": 50.0 * 0.05 * 0.65},
    ]
    out = _evaluate(*rows)
    # the cooling path's own time constants given: nothing changes
    assert out["peak_junction_temp_c"][1] == out["peak_junction_temp_c"][0]
    # steady state: T = T_inlet + R P at the mean power
    assert out["mean_junction_temp_c"][2] == pytest.approx(
        30.0 + 0.05 * out["avg_power_per_accelerator_w"][2], rel=1e-9
    )
    # a faster heat sink follows the iteration's swing more closely
    assert out["junction_temp_swing_c"][3] > out["junction_temp_swing_c"][0]
    # a capacity C is the time constant R_slow C (the slow term's share: 1 - 0.35 for air)
    assert 1.0 - cooling["fast_fraction"] == pytest.approx(0.65)
    assert out["junction_temp_swing_c"][4] == pytest.approx(
        out["junction_temp_swing_c"][5], rel=1e-12
    )
