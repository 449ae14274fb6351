"""Energy versus SM clock against Perseus (A100, GPT-3 175B stage)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.analytic import validate_energy

REPO = Path(__file__).resolve().parents[1]


def _perseus() -> Path:
    pkg = REPO / "dse" / "analytic" / "data" / "reference" / validate_energy.PERSEUS_FILE
    return (
        pkg if pkg.exists() else REPO.parent / "shared" / "reference" / validate_energy.PERSEUS_FILE
    )


@pytest.fixture(scope="module")
def report():
    path = _perseus()
    if not path.exists():
        pytest.skip("Perseus reference table not available")
    return validate_energy.perseus_report(path)


def test_every_row_within_five_percent(report):
    assert len(report["rows"]) == 10
    assert report["max_abs_error_energy"] < 0.05
    assert report["max_abs_error_time"] < 0.05
    assert report["median_abs_error_energy"] <= report["max_abs_error_energy"]


def test_energy_is_u_shaped_with_its_minimum_well_below_the_maximum_clock(report):
    f = np.array([r["sm_clock_mhz"] for r in report["rows"]])
    e = np.array([r["energy_predicted"] for r in report["rows"]])
    t = np.array([r["time_predicted"] for r in report["rows"]])
    i = int(np.argmin(e))
    assert 0 < i < len(f) - 1  # interior minimum: U shape
    assert f[i] <= 0.85 * f.max()
    assert e[i] == pytest.approx(0.73, abs=0.03)  # measured 0.73x at 1080 MHz ...
    assert t[list(f).index(1080.0)] == pytest.approx(1.22, abs=0.03)  # ... for 1.22x the time
    assert np.all(np.diff(t) > 0)  # rows go down in clock: time rises
    assert (
        abs(
            report["energy_optimal_clock_predicted_mhz"]
            - report["energy_optimal_clock_measured_mhz"]
        )
        <= 60
    )


def test_memory_bound_work_barely_slows_and_compute_bound_work_scales():
    f = np.array([1410.0, 1080.0, 855.0])
    t_mem, e_mem = validate_energy.stage_energy(f, compute_fraction=0.05)
    t_cmp, _ = validate_energy.stage_energy(f, compute_fraction=1.0)
    assert t_mem[-1] / t_mem[0] < 1.05
    assert t_cmp[-1] / t_cmp[0] == pytest.approx(1410 / 855)
    assert e_mem[-1] < e_mem[0]  # lower clock still saves core power


def test_default_path_finds_the_table():
    assert validate_energy.perseus_path().name == validate_energy.PERSEUS_FILE
