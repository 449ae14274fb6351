"""Early software on a new architecture (``software_release``; dse.analytic.time.software):
kernels below their mature efficiency soon after the architecture first shipped."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, write_study
from dse.analytic import validation
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import hardware, software
from dse.api import load_study, plan
from dse.errors import DseError, StudyError

REF = REPO / "dse" / "analytic" / "data" / "reference"


def _shares(parts, releases):
    hw = hardware.lookup(
        np.array(parts, dtype=object), np.array(["bf16"] * len(parts), dtype=object)
    )
    return software.efficiency(hw, np.array(releases, dtype=object))


def test_the_shortfall_falls_with_the_months_since_the_architecture_shipped():
    shared = hardware.calibration()["shared"]
    deficit, months = shared["maturity_deficit"], shared["maturity_months"]
    assert 0 < deficit < 0.5 and months > 0
    # B200's architecture (Blackwell) first shipped 2024-12 (the catalog)
    assert hardware.catalog()["B200"]["architecture_shipped"] == "2024-12"
    share = _shares(["B200"] * 4, ["2024-06", "2024-12", "2025-06", "2030-01"])
    assert (
        share[0] == share[1] == pytest.approx(1 - deficit)
    )  # before it shipped: the full shortfall
    assert share[1] < share[2] < share[3] <= 1.0
    assert share[2] == pytest.approx(1 - deficit * np.exp(-6 / months))
    assert share[3] == pytest.approx(1.0, abs=1e-4)


def test_mature_software_and_a_part_without_a_date_leave_the_efficiencies_as_fitted():
    assert _shares(["B200", "H100-SXM"], ["mature", "mature"]) is None
    hw = hardware.lookup(np.array(["B200"], dtype=object), np.array(["fp8"], dtype=object))
    assert software.early(hw, np.array(["mature"], dtype=object)) is hw
    share = _shares(["B200", "B200"], ["mature", "2025-02"])
    assert share[0] == 1.0 and share[1] < 1.0
    # the same month on an older architecture (Hopper, 2022-10) costs less than on Blackwell
    old, new = _shares(["H100-SXM", "B200"], ["2025-02", "2025-02"])
    assert new < old < 1.0


def test_an_early_release_slows_the_step_and_mature_is_the_default():
    base = {
        "model": "llama3-8b",
        "accelerator": "B200",
        "precision": "fp8",
        "num_accelerators": 8,
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "global_batch_size": 128,
        "micro_batch_size": 2,
        "framework": "megatron-bridge",
    }
    rows = pd.DataFrame(
        [base, {**base, "software_release": "mature"}, {**base, "software_release": "2025-02"}]
    )
    out = AnalyticEvaluator().evaluate(rows)
    assert out["feasible"].all()
    step = out["step_time_s"].to_numpy()
    assert step[0] == step[1]  # unset is mature
    assert step[2] > step[1] * 1.01  # two months after Blackwell shipped: slower
    assert out["energy_to_train_j"].iloc[2] > out["energy_to_train_j"].iloc[1]


@pytest.mark.parametrize("value", ["2025-13", "Feb 2025", "2025", 2025, "2205-02", "0000-01"])
def test_a_study_with_a_release_that_is_not_a_month_is_refused(tmp_path, value):
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    data["fixed"]["software_release"] = value
    path = write_study(tmp_path, data)
    with pytest.raises(StudyError) as info:
        load_study(path)
    message = str(info.value)
    assert "fixed.software_release" in message
    assert "mature, or a month written YYYY-MM (2025-02) from 1990-01 to 2099-12" in message


def test_a_study_takes_a_month_a_date_or_mature_in_any_case(tmp_path):
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    data["space"]["software_release"] = ["2025-02", "Mature"]
    path = write_study(tmp_path, data)
    assert _values(path) == ("2025-02", "mature")
    text = path.read_text()
    assert text.count("- 2025-02\n") == 1  # unquoted: YAML reads it as text
    path.write_text(text.replace("- 2025-02\n", "- 2025-02-15\n"))  # and this as a date
    assert _values(path) == ("2025-02", "mature")


def _values(path) -> tuple:
    return {p.name: p.values for p in plan(path).space.parameters}["software_release"]


def test_a_table_with_a_release_that_is_not_a_month_is_refused_naming_the_cell(tmp_path):
    df = (
        validation.read_table(REF / "nemo_megatron_bridge.csv")
        .head(3)
        .drop(columns=["_file", "_line"])
    )
    df.loc[1, "software_release"] = "25.02"
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DseError) as info:
        validation.predict(validation.read_table(path))
    text = str(info.value)
    assert "line 3, column software_release" in text and "25.02" in text
    assert "YYYY-MM" in text


def test_every_catalog_part_says_when_its_architecture_shipped():
    for name, part in hardware.catalog().items():
        assert np.isfinite(software.month_number(part.get("architecture_shipped"))), name


_B200 = {
    "model": "llama3-8b",
    "accelerator": "B200",
    "precision": "fp8",
    "num_accelerators": 16,
    "tensor_parallel": 1,
    "pipeline_parallel": 1,
    "global_batch_size": 128,
    "micro_batch_size": 2,
    "framework": "megatron-bridge",
}


@pytest.mark.parametrize(
    "extra",
    [
        {},  # the plain path
        {"power_cap_w": 500},  # the energy half re-times at a lower clock
        {"clock_mhz": 1200},  # a set clock
        {"clock_plan": "per_stage", "pipeline_parallel": 4, "power_cap_w": 600},
        {"batch_schedule": "linear", "batch_ramp_start_size": 32},  # a batch schedule's phases
        {"pipeline_parallel": 4, "second_accelerator": "H100-SXM", "second_pipeline_stages": 2},
    ],
    ids=["plain", "power-cap", "clock", "per-stage", "schedule", "mixed-fleet"],
)
def test_an_early_release_is_slower_on_every_path_even_beside_a_refused_candidate(extra):
    # a block with a candidate the time model refuses (3-way tensor parallelism of 32 heads
    # on 16 accelerators) times its accepted ones apart: their hardware is looked up again,
    # and must still carry the early release's shortfall
    rows = [{**_B200, **extra, "software_release": r} for r in ("mature", "2025-02")]
    refused = {**rows[1], "tensor_parallel": 3}
    for block in (rows, [*rows, refused]):
        out = AnalyticEvaluator().evaluate(pd.DataFrame(block))
        assert out["feasible"].iloc[:2].all(), out["reason"].tolist()
        time_s = out["time_to_train_s"].to_numpy()
        assert time_s[1] > time_s[0] * 1.005, (extra, len(block))
        assert out["energy_to_train_j"].iloc[1] > out["energy_to_train_j"].iloc[0]
    assert not out["feasible"].iloc[2]


def test_a_mixed_fleet_splits_its_layers_by_each_parts_speed_at_its_release(monkeypatch):
    from dse.analytic import fleet

    seen = []
    real = fleet.split_layers

    def spy(layers, pp, pp_b, speed_a, speed_b, alpha):
        seen.append((np.asarray(speed_a).copy(), np.asarray(speed_b).copy()))
        return real(layers, pp, pp_b, speed_a, speed_b, alpha)

    monkeypatch.setattr(fleet, "split_layers", spy)
    mixed = {**_B200, "pipeline_parallel": 4, "second_accelerator": "H100-SXM"}
    rows = [
        {**mixed, "second_pipeline_stages": 2, "software_release": r} for r in ("mature", "2025-02")
    ]
    AnalyticEvaluator().evaluate(pd.DataFrame(rows))
    ((speed_a, speed_b),) = seen
    share_a = _shares(["B200"], ["2025-02"])[0]
    share_b = _shares(["H100-SXM"], ["2025-02"])[0]
    assert speed_a[1] == pytest.approx(speed_a[0] * share_a)
    assert speed_b[1] == pytest.approx(speed_b[0] * share_b)


def _profile(folder, name, edit):
    from dse.analytic import profiles
    from dse.analytic.calibration import fit

    acc, _ = fit.base_accelerator("B200")
    doc = {"format": profiles.FORMAT, "version": 1, "name": name, "base": "B200", **acc}
    if edit == "left out":  # as a profile written before the field existed
        del doc["hardware"]["architecture_shipped"]
    elif edit != "copied":
        doc["hardware"]["architecture_shipped"] = edit
    profiles.dump(doc, folder / f"{name}.yaml")
    return f"{name}.yaml"


def test_a_profile_takes_its_base_parts_shipping_date_unless_it_sets_its_own(tmp_path, monkeypatch):
    from dse.analytic.calibration import build

    monkeypatch.chdir(tmp_path)
    names = [
        _profile(tmp_path, name, edit)
        for name, edit in (
            ("copied", "copied"),  # dse calibrate copies the base part's
            ("old", "left out"),
            ("own", "2025-06"),
            ("none", None),  # written null: none, its kernels mature
        )
    ]
    assert [hardware.entry(n)[0].get("architecture_shipped") for n in names] == [
        "2024-12",
        "2024-12",
        "2025-06",
        None,
    ]
    shares = _shares(["B200", *names], ["2025-02"] * 5)
    assert shares[1] == shares[2] == shares[0] < 1.0
    assert shares[3] < shares[0]  # 2025-02 is before its own 2025-06: the whole shortfall
    assert shares[4] == 1.0
    # dse describe -a shows the inherited date and where it came from
    (row,) = [r for r in build.provenance(names[1])[1] if r[0] == "hardware.architecture_shipped"]
    assert row[1] == "2024-12" and "B200" in row[2]


@pytest.mark.parametrize("written", ["2205-02", "2024-13", " 2024-12"])
def test_a_profile_whose_shipping_month_is_not_a_release_month_is_refused(
    tmp_path, monkeypatch, written
):
    """One rule for a month, a profile's as a study's: a year outside 1990-2099 (which the
    model would take as no date: mature) is refused, as is any other form."""
    monkeypatch.chdir(tmp_path)
    name = _profile(tmp_path, "typo", "copied")  # (dump refuses it: written by hand here)
    path = tmp_path / name
    text = path.read_text()
    line = next(x for x in text.splitlines() if "architecture_shipped:" in x)
    path.write_text(text.replace(line, line.split(":")[0] + f": '{written}'"))
    with pytest.raises(DseError) as info:
        hardware.entry(name)
    text = str(info.value)
    assert "architecture_shipped" in text and "from 1990-01 to 2099-12" in text


@pytest.mark.parametrize(
    "written,shown",
    [("2025-02-31", "2025-02-31"), ("2025-13-01", "2025-13-01")],
)
def test_a_date_that_is_not_a_day_is_refused_as_written(tmp_path, written, shown):
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    path = write_study(tmp_path, data)
    path.write_text(
        path.read_text().replace("fixed:\n", f"fixed:\n  software_release: {written}\n")
    )
    with pytest.raises(StudyError) as info:
        load_study(path)
    assert f"(got '{shown}')" in str(info.value)


def test_a_month_with_spaces_around_it_is_the_month(tmp_path):
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    data["space"]["software_release"] = [" 2025-02 ", "mature"]
    assert _values(write_study(tmp_path, data)) == ("2025-02", "mature")


def test_the_first_blackwell_releases_are_predicted_with_their_release_and_faster_as_mature():
    """The NeMo 25.02 B200 rows state their release (2025-02): with it they are within the
    documented in-sample figure (docs/model.md section 7: 2.4% median), every row faster
    than measured without it (read as mature), as the fit found before the term."""
    table = validation.read_table(REF / "nemo_megatron_bridge.csv")
    rows = table[table["source"] == "nemo-25.02"]
    assert set(rows["software_release"]) == {"2025-02"}
    dated = validation.predict(rows)
    mature = validation.predict(rows.assign(software_release="mature"))
    assert dated["error"].abs().median() <= 0.05
    assert (mature["error"] < dated["error"]).all()  # mature: a shorter predicted time
    assert (mature["error"] < 0).sum() >= 5
