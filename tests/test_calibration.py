"""``dse calibrate``: the fit recovers what the model generated, reproduces the Perseus sweep
with held-out clocks, reads every input format, refuses bad files in one line, and writes a
profile a study can use by path or by name."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_cli, write_study
from dse.analytic import profiles
from dse.analytic.calibration import build, fit, readers
from dse.analytic.energy import power
from dse.analytic.evaluator import AnalyticEvaluator
from dse.cli import main
from dse.errors import DseError
from dse.results import open_results
from synthetic import (
    TRUTH,
    kernel_sweep,
    telemetry,
    training_runs,
    truth_profile,
    write_dcgm,
    write_nvidia_smi,
    write_steps,
)

DATA = REPO / "tests" / "data"


@pytest.fixture(scope="module")
def truth(tmp_path_factory) -> Path:
    return truth_profile(tmp_path_factory.mktemp("truth") / "truth.yaml")


def _write(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=False)
    return path


def test_a_fit_recovers_the_parameters_the_model_generated_within_2_percent(truth, tmp_path):
    rows = readers.read([_write(kernel_sweep(truth), tmp_path / "kernels.csv")])
    result = fit.fit(rows, "A100-80GB")
    p = result.parameters.set_index("name")
    assert p["fitted"].all(), p[~p["fitted"]]
    for name, value in TRUTH.items():
        assert p.loc[name, "value"] == pytest.approx(value, rel=0.02), name
        assert p.loc[name, "base"] != pytest.approx(value, rel=0.02), (
            f"{name}: the truth must differ from the base"
        )
    assert result.rows["time_s_err_pct"].abs().max() < 0.1
    assert result.rows["energy_j_err_pct"].abs().max() < 0.1


def test_power_cap_rows_are_predicted_at_the_clock_that_meets_the_cap(truth, tmp_path):
    """GEMMs under power caps with no clock given: the fit finds the clock the cap allows and
    reports them per cap; held out, they are predicted from the clocked rows alone."""
    sweep = kernel_sweep(truth, caps=(150.0, 200.0, 250.0, 300.0))
    rows = readers.read([_write(sweep, tmp_path / "caps.csv")])
    result = fit.fit(rows, "A100-80GB", holdout=["150W", "250W"])
    r = result.rows
    capped = r[np.isfinite(r["power_cap_w"])]
    assert len(capped) == 4 and set(capped.loc[capped["set"] == "holdout", "power_cap_w"]) == {
        150.0,
        250.0,
    }
    assert (
        capped["time_s_err_pct"].abs().max() < 0.1 and capped["energy_j_err_pct"].abs().max() < 0.1
    )
    assert (capped["clock_mhz_pred"] < 1410).all()
    assert (
        capped["energy_j_pred"] / capped["time_s_pred"] <= capped["power_cap_w"] * (1 + 1e-6)
    ).all()


def test_training_runs_through_the_whole_model_recover_its_parameters(truth, tmp_path):
    """Step times and average power of GPT-1.3B runs that AnalyticEvaluator predicted for
    the truth profile: what they determine well comes back within 2%, the rest within three
    of its reported standard errors."""
    rows = readers.read([_write(training_runs(truth), tmp_path / "runs.csv")])
    assert set(rows["kind"]) == {"training"}
    result = fit.fit(rows, "A100-80GB")
    p = result.parameters.set_index("name")
    for name in ("matmul_eff_max", "memory_eff", "idle_w", "a_compute", "v_floor", "knee"):
        assert p.loc[name, "value"] == pytest.approx(TRUTH[name], rel=0.02), name
    for name in ("a_memory", "a_waiting"):
        assert p.loc[name, "fitted"]
        assert abs(p.loc[name, "value"] - TRUTH[name]) < 3 * p.loc[name, "stderr"], name
    assert not p.loc["a_parked", "fitted"] and "parked rows" in p.loc["a_parked", "note"]
    assert result.rows["time_s_err_pct"].abs().max() < 0.5


def test_the_perseus_sweep_is_reproduced_within_5_percent_with_held_out_clocks():
    rows = readers.read([DATA / "perseus_a100_stage.csv"])
    result = fit.fit(rows, "A100-80GB", holdout=["1290", "1080", "900"])
    r = result.rows
    held = r[r["set"] == "holdout"]
    assert sorted(held["clock_mhz"]) == [900.0, 1080.0, 1290.0]
    for part in (r[r["set"] == "fit"], held):
        assert part["time_s_err_pct"].abs().max() < 5.0
        assert part["energy_j_err_pct"].abs().max() < 5.0
    p = result.parameters.set_index("name")
    assert set(p.index[p["fitted"]]) == {
        "a_memory",
        "v_floor",
        "knee",
    }  # relative energy: no absolute power
    assert 0.6 < result.workloads["compute_share"].iloc[0] < 0.95
    s = build.summary(r)
    assert s["holdout"]["energy"]["rows"] == 3 and s["fit"]["time"]["rows"] == 7
    # the validate-model table of the same sweep reads into the same rows
    same = readers.read([REPO / "dse/analytic/data/reference/perseus_a100_gpt3_stage.csv"])
    np.testing.assert_allclose(
        same.sort_values("clock_mhz")["energy_j"], rows.sort_values("clock_mhz")["energy_j"]
    )


def test_held_out_workloads_and_clocks_are_checked():
    rows = readers.read([DATA / "perseus_a100_stage.csv", DATA / "synthetic_kernels.csv"])
    with pytest.raises(Exception, match="workload 'gpt3-175b-stage' has no rows left to fit"):
        fit.fit(rows, "A100-80GB", holdout=["gpt3-175b-stage"])
    kernels = fit.fit(
        rows, "A100-80GB", holdout=["copy"]
    )  # known bytes: predicted from the efficiencies
    assert (kernels.rows.loc[kernels.rows["set"] == "holdout", "workload"] == "copy").all()
    rows = readers.read([DATA / "perseus_a100_stage.csv"])
    with pytest.raises(Exception, match="every row is held out"):
        fit.fit(rows, "A100-80GB", holdout=["gpt3-175b-stage"])
    with pytest.raises(Exception, match="no row to hold out matches '1234'"):
        fit.fit(rows, "A100-80GB", holdout=["1234"])
    # a measured clock (dse profile writes the mean clock it saw) is held out by its set value
    rows.loc[rows["clock_mhz"] == 1290.0, "clock_mhz"] = 1288.6
    rows.loc[rows["clock_mhz"] == 1350.0, "clock_mhz"] = (
        1289.3  # a second run at the same set clock
    )
    held = fit.fit(rows, "A100-80GB", holdout=["1290"]).rows
    assert sorted(held.loc[held["set"] == "holdout", "clock_mhz"]) == [1288.6, 1289.3]


def test_telemetry_is_matched_to_steps_by_timestamp(truth, tmp_path):
    runs = training_runs(truth, clocks=(1410.0, 900.0))
    steps, samples = telemetry(runs)
    step_file = write_steps(steps, tmp_path / "steps.csv")
    for tele in (
        write_nvidia_smi(samples, tmp_path / "smi.csv"),
        write_dcgm(samples, tmp_path / "dcgm.prom"),
    ):
        rows = readers.read([step_file, tele])
        assert len(rows) == len(runs)
        power = rows["energy_j"] / rows["time_s"]
        np.testing.assert_allclose(power, runs["avg_power_w"], rtol=1e-4)
        np.testing.assert_allclose(rows["time_s"], runs["step_time_s"], rtol=1e-3)
    # one log per node: GPU 0 of each is its own GPU (the second node here reads 10% more)
    node2 = samples.assign(power_w=samples["power_w"] * 1.1)
    rows = readers.read(
        [step_file, tmp_path / "smi.csv", write_nvidia_smi(node2, tmp_path / "smi-node2.csv")]
    )
    np.testing.assert_allclose(
        rows["energy_j"] / rows["time_s"], runs["avg_power_w"] * 1.05, rtol=1e-4
    )
    # nvidia-smi's temperatures (30 C + 0.1 K/W x power, whole degrees) give the thermal resistance
    rows = readers.read([step_file, tmp_path / "smi.csv"])
    result = fit.fit(rows, "A100-80GB", only=["matmul_eff_max"])
    assert result.thermal["r_k_per_w"] == pytest.approx(0.1, rel=0.05)
    assert result.thermal["inlet_c"] == pytest.approx(30.0, abs=1.5)
    assert result.accelerator["power"]["r_air_k_per_w"] == result.thermal["r_k_per_w"]


def test_steps_without_a_set_clock_are_pooled_per_run_whatever_the_clock_jitter(truth, tmp_path):
    """The docs' PyTorch snippet logs steps without a clock (set with nvidia-smi outside the
    run): each run's steps are still one measurement while the clock the telemetry reads
    jitters by a few MHz, and runs at other clocks stay apart."""
    runs = training_runs(truth, clocks=(1410.0, 900.0))
    steps, samples = telemetry(runs, period_s=0.05)
    cap_w = np.where(
        steps["clock_mhz"] > 1000, 300.0, 250.0
    )  # another cap for each run of a layout
    steps = steps.drop(columns="clock_mhz")
    jitter = np.random.default_rng(0).uniform(-5.0, 5.0, len(samples))
    samples = samples.assign(clock_mhz=samples["clock_mhz"] + jitter)
    rows = readers.read(
        [
            write_steps(steps, tmp_path / "steps.csv"),
            write_nvidia_smi(samples, tmp_path / "smi.csv"),
        ]
    )
    assert len(rows) == len(runs)
    np.testing.assert_allclose(rows["clock_mhz"], runs["clock_mhz"], atol=5.0)
    # under a power cap the clock is the cap's doing: steps of one capped run stay one row
    # even where their mean clocks differ by several percent
    capped = steps.assign(power_cap_w=cap_w)
    wild = samples.assign(
        clock_mhz=samples["clock_mhz"] * np.random.default_rng(1).uniform(0.9, 1.1, len(samples))
    )
    rows = readers.read(
        [
            write_steps(capped, tmp_path / "capped.csv"),
            write_nvidia_smi(wild, tmp_path / "wild.csv"),
        ]
    )
    assert len(rows) == len(runs)


def test_the_example_files_read(tmp_path):
    for names, kinds in (
        (["synthetic_kernels.csv"], {"compute", "memory", "blocked", "idle", "parked"}),
        (["synthetic_training.csv"], {"training"}),
        (["synthetic_steps.csv", "synthetic_nvidia_smi.csv"], {"training"}),
        (["synthetic_steps.csv", "synthetic_dcgm.prom"], {"training"}),
        (["perseus_a100_stage.csv"], {"stage"}),
    ):
        rows = readers.read([DATA / n for n in names])
        assert set(rows["kind"]) == kinds, names


def _cli(capsys, monkeypatch, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


SWEEP = "workload,kind,clock_mhz,time_s,energy_j\nm,compute,1410,0.1,40\nm,compute,1000,0.14,35\n"
BAD_FILES = {
    "missing_columns.csv": ("workload,kind,clock_mhz\nm,compute,1410\n", "measures nothing"),
    "no_setting.csv": (
        "workload,kind,time_s,energy_j\nm,compute,0.1,40\n",
        "neither a clock nor a power cap",
    ),
    "no_unit.csv": (
        "workload,kind,clock_mhz,time,energy_j\nm,compute,1410,0.1,40\n",
        "column 'time' has no unit",
    ),
    "bad_unit.csv": (
        "workload,kind,clock_mhz,time_min,energy_j\nm,compute,1410,0.1,40\n",
        "unknown unit 'min'",
    ),
    "unit_in_cell.csv": (
        "workload,kind,clock_mhz,time_s,energy_j\nm,compute,1410,0.1,40 J\n",
        "expected a number",
    ),
    "negative_time.csv": (
        "workload,kind,clock_mhz,time_s,energy_j\nm,compute,1410,-0.1,40\n",
        "negative time",
    ),
    "unknown_kind.csv": (
        "workload,kind,clock_mhz,time_s,energy_j\nm,gemm,1410,0.1,40\n",
        "unknown kind 'gemm'",
    ),
    "unknown_column.csv": (
        "workload,kind,clock_mhz,time_s,joules\nm,compute,1410,0.1,40\n",
        "unknown column 'joules'",
    ),
    "unknown_energy_unit.csv": (
        "workload,kind,clock_mhz,time_s,energy_joules\nm,compute,1410,0.1,40\n",
        "unknown unit 'joules' in column 'energy_joules'",
    ),
    "steps_missing_layout.csv": ("start_time,end_time,model\n1,2,gpt-1.3b\n", "missing columns"),
    "steps_unsorted.csv": (
        "start_time,end_time,model,num_accelerators,global_batch_size,micro_batch_size,"
        "tensor_parallel,pipeline_parallel\n10,12,gpt-1.3b,8,64,1,1,1\n5,7,gpt-1.3b,8,64,1,1,1\n",
        "out of time order",
    ),
    "ragged_row.csv": (
        "workload,kind,clock_mhz,time_s,energy_j\nm,compute,1410,0.005,1.8,99\n",
        "line 2: 6 fields under a header of 5",
    ),
    "repeated_column.csv": (
        "workload,kind,clock_mhz,time_s,time_s\nm,compute,1410,0.005,0.05\n",
        "column 'time_s' appears twice",
    ),
    # measurements that cannot be of the part being calibrated (a unit or scope gone wrong)
    "clock_in_ghz.csv": (
        "workload,kind,clock_mhz,time_s,energy_j\nm,compute,1.41,0.1,40\nm,compute,1.0,0.14,35\n",
        "clock far outside A100-80GB's range",
    ),
    "power_in_mw.csv": (
        "workload,kind,clock_mhz,time_s,avg_power_w\nm,compute,1410,0.1,380000\n",
        "more than 1.5 x A100-80GB's TDP",
    ),
    "cap_in_mw.csv": (
        "workload,kind,power_cap_w,time_s,energy_j\nm,compute,300000,0.1,30\n",
        "power cap more than 1.5 x A100-80GB's TDP",
    ),
    "cap_in_kw.csv": (
        "workload,kind,power_cap_w,time_s,energy_j\nm,compute,0.3,0.1,30\n",
        "power cap below A100-80GB's idle power",
    ),
    "another_part.csv": (
        "model,accelerator,num_accelerators,global_batch_size,micro_batch_size,tensor_parallel,"
        "pipeline_parallel,step_time_s\ngpt-1.3b,H100-SXM,8,64,1,1,1,1.5\n",
        "measured on another accelerator than the one calibrated (A100-80GB) (got 'H100-SXM')",
    ),
    "layout_does_not_divide.csv": (
        "model,num_accelerators,global_batch_size,micro_batch_size,tensor_parallel,"
        "pipeline_parallel,step_time_s\ngpt-1.3b,7,64,1,1,1,1.5\n",
        "the model cannot run this training run",
    ),
    "energy_inf.csv": (
        "workload,kind,clock_mhz,time_s,energy_j\nm,compute,1410,0.1,40\nm,compute,1000,0.14,inf\n",
        "line 3, column energy_j: expected a finite number (got 'inf')",
    ),
    "inlet_below_zero.csv": (
        "workload,kind,clock_mhz,time_s,avg_power_w,temp_c\nm,compute,1410,0.1,380,85\n"
        "m,compute,1000,0.14,250,50\nm,compute,800,0.18,200,36\n",
        "imply an inlet of",
    ),
    "temperature_in_kelvin.csv": (
        "workload,kind,clock_mhz,time_s,avg_power_w,temp_c\nm,compute,1410,0.1,380,340\n",
        "line 2, column temp_c: a temperature no GPU or inlet has (Kelvin",
    ),
    "temperature_falls.csv": (
        "workload,kind,clock_mhz,time_s,avg_power_w,temp_c\nm,compute,1410,0.1,380,40\n"
        "m,compute,1000,0.14,250,60\nm,compute,800,0.18,200,70\n",
        "the temperatures fall as the power rises",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_measurement_file_gives_one_line_and_exit_2(name, tmp_path, capsys, monkeypatch):
    text, message = BAD_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    code, out, err = _cli(
        capsys,
        monkeypatch,
        "calibrate",
        path,
        "--accelerator",
        "A100-80GB",
        "-o",
        tmp_path / "p.yaml",
    )
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error:") and message in err and name in err, err
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("case", ["unsorted", "no_timestamp", "watts"])
def test_bad_telemetry_gives_one_line_and_exit_2(case, tmp_path, capsys, monkeypatch):
    steps = tmp_path / "steps.csv"
    steps.write_text(
        "start_time,end_time,model,num_accelerators,global_batch_size,micro_batch_size,tensor_parallel,"
        "pipeline_parallel\n2024-05-01T12:00:01,2024-05-01T12:00:02,gpt-1.3b,8,64,1,1,1\n"
    )
    if case == "unsorted":
        tele = tmp_path / "smi.csv"
        tele.write_text(
            "timestamp, index, power.draw [W]\n2024/05/01 12:00:03.000, 0, 300 W\n"
            "2024/05/01 12:00:00.000, 0, 300 W\n"
        )
        message = "timestamps out of order for GPU 0"
    elif case == "no_timestamp":
        tele = tmp_path / "dcgm.prom"
        tele.write_text(
            '# TYPE DCGM_FI_DEV_POWER_USAGE gauge\nDCGM_FI_DEV_POWER_USAGE{gpu="0"} 300.5\n'
        )
        message = "without a timestamp"
    else:
        tele = tmp_path / "smi.csv"
        tele.write_text("timestamp, index, power.draw [kW]\n2024/05/01 12:00:00.000, 0, 0.3\n")
        message = "unit [kW] where [W] was expected"
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "calibrate",
        steps,
        tele,
        "--accelerator",
        "A100-80GB",
        "-o",
        tmp_path / "p.yaml",
    )
    assert code == 2 and err.count("\n") == 1 and message in err and tele.name in err, err


def test_an_output_that_cannot_be_written_is_refused_before_the_fit(tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("")
    for out, message in (
        (tmp_path / "file" / "p.yaml", "is a file, not a folder"),
        (tmp_path, "is a folder"),
        (Path("/proc/p.yaml"), "cannot write in /proc"),
    ):
        code, stdout, err = _cli(
            capsys,
            monkeypatch,
            "calibrate",
            DATA / "perseus_a100_stage.csv",
            "--accelerator",
            "A100-80GB",
            "-o",
            out,
        )
        assert code == 2 and err.startswith("error: --output: ") and message in err, err
        assert "parameters of" not in stdout  # refused before the fit printed anything


def test_a_profile_is_not_named_like_a_catalog_part_and_its_base_is_the_catalog_part(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    shutil.copy(DATA / "perseus_a100_stage.csv", tmp_path / "sweep.csv")
    proc = run_cli(
        "calibrate",
        "sweep.csv",
        "-a",
        "A100-80GB",
        "-o",
        "accelerators/H100-SXM.yaml",
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "is the catalog's H100-SXM" in proc.stderr, proc.stderr
    proc = run_cli(
        "calibrate",
        "sweep.csv",
        "-a",
        "A100-80GB",
        "-o",
        "accelerators/foo.yaml",
        "--name",
        "bar",
        cwd=tmp_path,
    )  # found by path only: by name, foo.yaml would have to be named foo
    assert proc.returncode == 0 and "accelerator: accelerators/foo.yaml" in proc.stdout, proc.stdout
    assert (
        run_cli(
            "calibrate", "sweep.csv", "-a", "A100-80GB", "-o", "mine.yaml", cwd=tmp_path
        ).returncode
        == 0
    )
    # a refit of the profile onto its own file keeps the catalog part as its base
    proc = run_cli("calibrate", "sweep.csv", "-a", "mine.yaml", "-o", "mine.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert profiles.load(tmp_path / "mine.yaml").base == "A100-80GB"
    proc = run_cli("calibrate", "sweep.csv", "-a", "mine.yaml", "-o", "again.yaml", cwd=tmp_path)
    assert proc.returncode == 0 and profiles.load(tmp_path / "again.yaml").base == "A100-80GB", (
        proc.stderr
    )


def test_a_step_inside_a_gap_of_the_telemetry_is_refused(tmp_path, capsys, monkeypatch):
    """34 s of nvidia-smi samples lost (a hung logger): the steps in that gap would get the
    power interpolated between its ends; calibrate names the step and the gap instead."""
    lines = (DATA / "synthetic_nvidia_smi.csv").read_text().splitlines(keepends=True)
    kept = [
        ln
        for ln in lines[1:]
        if not ("12:00:04.000" < ln.split(",")[0].split()[1] < "12:00:38.000")
    ]
    assert len(kept) < len(lines) - 1
    tele = tmp_path / "smi_gap.csv"
    tele.write_text(lines[0] + "".join(kept))
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "calibrate",
        DATA / "synthetic_steps.csv",
        tele,
        "--accelerator",
        "A100-80GB",
        "-o",
        tmp_path / "p.yaml",
    )
    assert code == 2 and err.count("\n") == 1 and "smi_gap.csv" in err, err
    assert (
        "step at line 3 (2024-05-01T12:00:03.530..2024-05-01T12:00:07.061) falls in a gap of the telemetry "
        "of GPU 0 in smi_gap.csv: no sample from 2024-05-01T12:00:04.000 to 2024-05-01T12:00:38.000 (34.0 s;"
        in err
    ), err
    # a comment line above the steps: the lines cited are the file's
    steps = tmp_path / "steps.csv"
    steps.write_text("# measured on node 7\n" + (DATA / "synthetic_steps.csv").read_text())
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "calibrate",
        steps,
        tele,
        "--accelerator",
        "A100-80GB",
        "-o",
        tmp_path / "p.yaml",
    )
    assert code == 2 and "step at line 4 (2024-05-01T12:00:03.530" in err, err
    assert not (tmp_path / "p.yaml").exists()


def test_the_cli_prints_the_tables_and_writes_a_profile(tmp_path, capsys, monkeypatch):
    out_file = tmp_path / "my-a100.yaml"
    code, out, err = _cli(
        capsys,
        monkeypatch,
        "calibrate",
        DATA / "perseus_a100_stage.csv",
        "--accelerator",
        "A100-80GB",
        "-o",
        out_file,
        "--holdout",
        "1290,900",
    )
    assert code in (0, None), err
    assert "v_floor" in out and "held-out rows: time median" in out and "holdout" in out
    # every column of the error table says its unit, the predictions' too
    head = next(line for line in out.splitlines() if "clock [MHz]" in line)
    assert head.count("predicted [s]") == 1 and head.count("predicted [J]") == 1
    assert head.count("error [%]") == 2 and "predicted │" not in head
    prof = profiles.load(out_file)
    assert prof.base == "A100-80GB" and prof.name == "my-a100"
    assert prof.sources["power.vf_curve"].startswith("fitted by dse calibrate to")
    assert "hardware catalog" in prof.sources["hardware.tdp_w"]
    assert prof.fit["errors"]["holdout"]["time"]["rows"] == 2
    code, out, _ = _cli(capsys, monkeypatch, "describe", "--accelerator", out_file)
    assert "fitted by dse calibrate to" in out and "power.activity.memory" in out
    # the thermal resistances the profile leaves out are shown with what the model uses
    assert "power.r_air_k_per_w" in out and "not given: 52 K at the TDP (400 W)" in out


def test_the_error_table_is_split_on_a_narrow_terminal_not_cut(tmp_path):
    """At 80 columns the table of errors was cropped (0.14… for 0.1431, headers cut);
    now it is split into tables of whole columns, each repeating workload, kind, clock, set."""
    args = ("calibrate", DATA / "perseus_a100_stage.csv", "-a", "A100-80GB", "-o")
    wide = run_cli(*args, tmp_path / "w.yaml", env={"COLUMNS": "200"})
    narrow = run_cli(*args, tmp_path / "n.yaml", env={"COLUMNS": "80"})
    assert wide.returncode == 0 and narrow.returncode == 0, narrow.stderr
    assert max(map(len, narrow.stdout.splitlines())) <= 80 and "…" not in narrow.stdout
    assert "(columns 1 of" in narrow.stdout and "(columns" not in wide.stdout
    cells = re.compile(r"│ *([^│\n]*?) *(?=│)")
    wide_errors, narrow_errors = (
        p.stdout.split("error per measurement", 1)[1] for p in (wide, narrow)
    )
    assert set(cells.findall(wide_errors)) == set(cells.findall(narrow_errors))
    # each part repeats the key columns (the first part's title is before the split)
    assert narrow_errors.count("┃ workload ") == 1 + narrow_errors.count("(columns ") >= 2


def test_a_profile_is_an_accelerator_a_study_uses_by_path_and_by_name(tmp_path):
    shutil.copy(DATA / "perseus_a100_stage.csv", tmp_path / "sweep.csv")
    proc = run_cli(
        "calibrate", "sweep.csv", "--accelerator", "A100-80GB", "-o", "my-a100.yaml", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "accelerators").mkdir()
    shutil.copy(tmp_path / "my-a100.yaml", tmp_path / "accelerators" / "my-a100.yaml")
    study = yaml.safe_load((DATA / "calibrated-study.yaml").read_text())
    study["space"]["accelerator"] = ["A100-80GB", "my-a100.yaml", "my-a100"]
    path = write_study(tmp_path, study)
    proc = run_cli("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("run", str(path), "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr

    ds = open_results(tmp_path / "results" / study["name"]).open_dataset(front=False)
    df = ds.to_dataframe().reset_index()
    by = df.groupby("accelerator")["energy_to_train_j"].median()
    assert set(by.index) == {"A100-80GB", "my-a100.yaml", "my-a100"}
    assert by["my-a100.yaml"] == by["my-a100"] != by["A100-80GB"]
    assert df["feasible"].all()


def test_a_broken_or_missing_profile_is_refused_by_validate(tmp_path):
    study = yaml.safe_load((DATA / "calibrated-study.yaml").read_text())
    study["space"]["accelerator"] = ["A100-80GB", "nope.yaml"]
    proc = run_cli("validate", str(write_study(tmp_path, study)), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "accelerator profile nope.yaml not found (a relative path is from the folder dse " in (
        proc.stderr
    )
    # a profile's name misspelt: the one in ./accelerators is suggested, as a part would be
    (tmp_path / "accelerators").mkdir()
    profiles.dump(
        {
            "format": profiles.FORMAT,
            "version": 1,
            "name": "my-a100",
            **fit.base_accelerator("A100-80GB")[0],
        },
        tmp_path / "accelerators" / "my-a100.yaml",
    )
    study["space"]["accelerator"] = ["A100-80GB", "my-a10"]
    proc = run_cli("validate", str(write_study(tmp_path, study)), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "unknown accelerator (got 'my-a10'; did you mean 'my-a100'?)" in proc.stderr
    # dse describe and calibrate --accelerator alike (they suggested catalog parts only)
    proc = run_cli("describe", "--accelerator", "my-a10", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown accelerator 'my-a10' (did you mean 'my-a100'?)" in (
        proc.stderr
    )
    acc, _ = fit.base_accelerator("A100-80GB")
    acc["power"]["activity"]["compute"] = "lots"
    (tmp_path / "bad.yaml").write_text(
        yaml.safe_dump({"format": profiles.FORMAT, "version": 1, "name": "bad", **acc})
    )
    study["space"]["accelerator"] = ["bad.yaml"]
    proc = run_cli("validate", str(write_study(tmp_path, study)), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert (
        "bad.yaml" in proc.stderr
        and "power.activity.compute" in proc.stderr
        and "lots" in proc.stderr
    )


def test_a_changed_profile_file_is_read_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    acc, _ = fit.base_accelerator("A100-80GB")
    doc = {"format": profiles.FORMAT, "version": 1, "name": "p", **acc}
    profiles.dump(doc, tmp_path / "p.yaml")
    row = pd.DataFrame([{"accelerator": "p.yaml", "model": "gpt-1.3b", "num_accelerators": 8}])
    base = AnalyticEvaluator().evaluate(row.assign(accelerator="A100-80GB"))
    first = AnalyticEvaluator().evaluate(row)
    assert first["energy_to_train_j"][0] == pytest.approx(base["energy_to_train_j"][0], rel=1e-12)
    doc["hardware"]["idle_w"] = 90.0
    doc["hardware"]["hbm_gb"] = 80.5  # a different size as well as a different time stamp
    profiles.dump(doc, tmp_path / "p.yaml")
    second = AnalyticEvaluator().evaluate(row)
    assert second["energy_to_train_j"][0] > first["energy_to_train_j"][0]


def test_a_profiles_leakage_is_its_own_and_calibrate_carries_it_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    acc, sources = fit.base_accelerator("A100-80GB")
    assert acc["power"]["leakage_share"] == power.entry("A100-80GB")["leakage_share"]
    assert "power.leakage_per_k" in sources
    for name, share in (("plain", None), ("leaky", 0.3)):
        doc = {"format": profiles.FORMAT, "version": 1, "name": name, **copy.deepcopy(acc)}
        if share is None:  # as a profile written before the leakage fields existed
            del doc["power"]["leakage_share"], doc["power"]["leakage_per_k"]
        else:
            doc["power"]["leakage_share"] = share
        profiles.dump(doc, tmp_path / f"{name}.yaml")
    assert power.entry("plain.yaml")["leakage_share"] == power.entry("A100-80GB")["leakage_share"]
    assert fit.base_accelerator("leaky.yaml")[0]["power"]["leakage_share"] == 0.3
    row = pd.DataFrame(
        {
            "accelerator": ["A100-80GB", "plain.yaml", "leaky.yaml"],
            "model": "gpt-1.3b",
            "num_accelerators": 8,
            "cooling": "liquid",
        }
    )
    r = AnalyticEvaluator().evaluate(row)
    assert r["energy_to_train_j"][1] == pytest.approx(r["energy_to_train_j"][0], rel=1e-12)
    assert (
        r["energy_to_train_j"][2] < r["energy_to_train_j"][1]
    )  # more leakage saved by the cold plate


@pytest.mark.parametrize(
    "edit,field,expected",
    [
        (
            lambda a: a["hardware"].update(bogus=1),
            "hardware.bogus",
            "Extra inputs are not permitted",
        ),
        (
            lambda a: a["hardware"].update(scaleup_domain=0),
            "hardware.scaleup_domain",
            "greater than or equal to 1",
        ),
        (lambda a: a["hardware"].update(hbm_bw_gbs=float("inf")), "hardware.hbm_bw_gbs", "finite"),
        (
            lambda a: a["hardware"]["mamf_tflops"].update(bf16=9999.0),
            "hardware",
            "cannot beat the peak",
        ),
        (
            lambda a: a["hardware"].update(memory_reserved_gb=100.0),
            "hardware",
            "must be below hbm_gb",
        ),
        (
            lambda a: a["power"].update(vf_curve=[[0.0, 1.2], [1.0, 0.5]]),
            "power.vf_curve",
            "must not fall",
        ),
        # numbers no part has: a sign or a unit slipped
        (
            lambda a: a["hardware"]["peak_tflops"].update(bf16=-312.0),
            "hardware.peak_tflops.bf16",
            "greater than 0",
        ),
        (
            lambda a: a["power"].update(vf_curve=[[0.0, 0.8], [0.7, 0.8], [1.0, 3.0]]),
            "power.vf_curve",
            "the last point's voltage must be 1.0",
        ),
        (
            lambda a: a["power"].update(hbm_pj_per_byte=28000.0),
            "power.hbm_pj_per_byte",
            "less than or equal to 200",
        ),
        (
            lambda a: a["power"].update(slowdown_temp_c=-500.0),
            "power.slowdown_temp_c",
            "greater than or equal to 30",
        ),
        (
            lambda a: a["hardware"].update(clock_max_mhz=1.41, clock_min_mhz=0.21),
            "hardware.clock_max_mhz",
            "greater than or equal to 100",
        ),
        (
            lambda a: a["hardware"].update(clock_min_mhz=1500.0),
            "hardware.clock_min_mhz",
            "is above the highest",
        ),
        # not a number: every number of a profile is finite, the scale-up domain is given
        (
            lambda a: a["power"].update(
                vf_curve=[[0.0, float("nan")], [0.77, float("nan")], [1.0, 1.0]]
            ),
            "power.vf_curve",
            "finite",
        ),
        (
            lambda a: a["power"].update(vf_curve=[[0.0, 0.7], [float("nan"), 0.8], [1.0, 1.0]]),
            "power.vf_curve",
            "finite",
        ),
        (lambda a: a["power"].update(r_air_k_per_w=float("inf")), "power.r_air_k_per_w", "finite"),
        (
            lambda a: a["power"]["activity"].update(memory=float("nan")),
            "power.activity.memory",
            "finite",
        ),
        (
            lambda a: a["calibration"].update(memory_eff=float("nan")),
            "calibration.memory_eff",
            "finite",
        ),
        (lambda a: a["hardware"].update(scaleup_domain=None), "hardware.scaleup_domain", "integer"),
    ],
)
def test_a_hand_edited_profile_that_cannot_be_right_is_refused(tmp_path, edit, field, expected):
    acc, _ = fit.base_accelerator("A100-80GB")
    acc["power"]["vf_curve"] = [list(p) for p in acc["power"]["vf_curve"]]
    edit(acc)
    path = tmp_path / "edited.yaml"
    path.write_text(
        yaml.safe_dump({"format": profiles.FORMAT, "version": 1, "name": "edited", **acc})
    )
    with pytest.raises(DseError) as info:
        profiles.load(path)
    assert f"{path}: {field}" in str(info.value) and expected in str(info.value), str(info.value)


def test_a_measurement_with_an_unknown_precision_or_a_parameter_fitted_and_fixed_is_refused(
    tmp_path,
):
    text = (
        (DATA / "synthetic_kernels.csv").read_text().replace(",compute,bf16,", ",compute,fp3,", 1)
    )
    (tmp_path / "k.csv").write_text(text)
    with pytest.raises(DseError, match=r"column precision: unknown precision 'fp3'; allowed: bf16"):
        readers.read([tmp_path / "k.csv"])
    rows = readers.read([DATA / "synthetic_kernels.csv"])
    with pytest.raises(DseError, match="'knee' is both fitted"):
        fit.fit(rows, "A100-80GB", only=["knee"], fix=["knee"])


def test_a_parameter_held_by_fix_or_left_out_by_fit_says_so():
    rows = readers.read(
        [DATA / "perseus_a100_stage.csv"]
    )  # ten clocks: the V-f curve is determined
    notes = fit.fit(rows, "A100-80GB", fix=["v_floor", "knee"]).parameters.set_index("name")["note"]
    assert notes["v_floor"] == notes["knee"] == "held at the base value (--fix)"
    notes = fit.fit(rows, "A100-80GB", only=["matmul_eff_max"]).parameters.set_index("name")["note"]
    assert notes["knee"] == "not asked for (--fit)"


def test_a_profile_written_to_a_non_yaml_path_is_refused_before_the_fit(
    tmp_path, capsys, monkeypatch
):
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "calibrate",
        DATA / "synthetic_kernels.csv",
        "--accelerator",
        "A100-80GB",
        "-o",
        tmp_path / "profile.txt",
    )
    assert (
        code == 2
        and "--output: an accelerator profile is a YAML file" in err
        and err.count("\n") == 1
    ), err
    assert not (tmp_path / "profile.txt").exists()


def test_parameters_the_measurements_say_nothing_about_are_not_reported_as_fitted(tmp_path):
    """Matrix-multiply rows alone carry no parked, memory-bound or bytes measurement: asked
    to fit those parameters, the fit keeps them at the base part's values with a note (the
    priors alone used to make them look determined), and one run per parameter gets no
    standard errors but a note that says why."""
    kernels = pd.read_csv(DATA / "synthetic_kernels.csv", comment="#")
    compute = _write(kernels[kernels["kind"] == "compute"], tmp_path / "gemm.csv")
    result = fit.fit(
        readers.read([compute]), "A100-80GB", only=["a_parked", "a_memory", "memory_eff"]
    )
    p = result.parameters.set_index("name")
    for name in ("a_parked", "a_memory", "memory_eff"):
        assert not p.loc[name, "fitted"], name
        assert p.loc[name, "value"] == p.loc[name, "base"], name
        assert any(
            note.startswith(f"{name}: the measurements cannot tell it apart")
            for note in result.notes
        )
    one = _write(kernels[kernels["kind"] == "compute"].head(1), tmp_path / "one.csv")
    result = fit.fit(readers.read([one]), "A100-80GB", only=["matmul_eff_max", "a_compute"])
    assert any("no standard errors" in note for note in result.notes), result.notes


def test_a_profile_of_a_part_without_clock_control_reads_back(tmp_path):
    """A TPU runs at one clock (lowest = highest): a profile based on it is written and read."""
    acc, _ = fit.base_accelerator("TPU-v5e")
    assert acc["hardware"]["clock_min_mhz"] == acc["hardware"]["clock_max_mhz"]
    acc["power"]["vf_curve"] = [list(p) for p in acc["power"]["vf_curve"]]
    path = tmp_path / "my-tpu.yaml"
    profiles.dump({"format": profiles.FORMAT, "version": 1, "name": "my-tpu", **acc}, path)
    assert profiles.load(path).hardware["clock_max_mhz"] == acc["hardware"]["clock_max_mhz"]


def test_a_counter_over_several_gpus_of_unknown_scope_is_fitted_not_refused():
    """An empty gpus cell means the counter's scope is unknown and fitted: the Perseus stage
    sweep with its energy read over four GPUs (about 1.9 kW) is taken, and its scope found."""
    rows = readers.read([DATA / "perseus_a100_stage.csv"])
    assert not np.isfinite(rows["gpus"]).any()
    one = fit.fit(rows, "A100-80GB").workloads["scope"].iloc[0]
    four = (
        fit.fit(rows.assign(energy_j=rows["energy_j"] * 4), "A100-80GB").workloads["scope"].iloc[0]
    )
    assert four == pytest.approx(4 * one, rel=0.05)


def _with_profile(tmp_path, study_head: str) -> None:
    """A profile ``mine.yaml`` fitted to the Perseus sweep, and ``s.yaml``: ``study_head``
    (name, space, fixed) with two objectives and an exhaustive search, in ``tmp_path``."""
    shutil.copy(DATA / "perseus_a100_stage.csv", tmp_path / "sweep.csv")
    assert (
        run_cli(
            "calibrate", "sweep.csv", "-a", "A100-80GB", "-o", "mine.yaml", cwd=tmp_path
        ).returncode
        == 0
    )
    (tmp_path / "s.yaml").write_text(
        study_head + "objectives: [{metric: energy_to_train_j}, {metric: time_to_train_s}]\n"
        "search: {algorithm: exhaustive}\nexecution: {workers: 0}\noutput: out\n"
    )


def test_a_profile_is_a_second_accelerator_of_a_mixed_fleet_too(tmp_path):
    _with_profile(
        tmp_path,
        "name: fleet\nspace: {second_accelerator: [none, mine.yaml]}\n"
        "fixed: {accelerator: A100-80GB, model: gpt-1.3b, num_accelerators: 16, pipeline_parallel: 2,"
        " second_pipeline_stages: 1}\n",
    )
    proc = run_cli("validate", "s.yaml", cwd=tmp_path)
    assert proc.returncode == 0 and "2 of 2 candidates feasible" in proc.stdout, (
        proc.stderr + proc.stdout
    )


def test_resume_refuses_a_run_whose_accelerator_profile_changed(tmp_path):
    """A run records the profiles its study names, with their checksums: resuming after the
    file changed would mix two models in one front."""
    _with_profile(
        tmp_path,
        "name: mine\nspace: {accelerator: [A100-80GB, mine.yaml], num_accelerators: [8, 16]}\n"
        "fixed: {model: gpt-1.3b}\n",
    )
    proc = run_cli("run", "s.yaml", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert list(meta["input_files"]) == [str((tmp_path / "mine.yaml").resolve())]
    original = (tmp_path / "mine.yaml").read_text()
    (tmp_path / "mine.yaml").write_text(original.replace("idle_w: 60", "idle_w: 70"))
    proc = run_cli("resume", "out", cwd=tmp_path)
    assert (
        proc.returncode == 2
        and "was evaluated with another version of" in proc.stderr
        and "mine.yaml (the file changed since the run started)" in proc.stderr
    ), proc.stderr
    (tmp_path / "mine.yaml").write_text(original)
    assert run_cli("resume", "out", "--quiet", cwd=tmp_path).returncode == 0


def test_a_profile_and_a_sweep_are_never_written_through_a_planted_link(tmp_path):
    """``profiles.dump`` wrote through a predictable ``.NAME.tmp`` opened by name, and the
    sweep writer appended through whatever was at its path: a link planted there sent the
    write elsewhere. Both write through dse.files now: a link is refused, its target untouched."""
    from dse.analytic.calibration.measure import write_rows

    acc, _ = fit.base_accelerator("A100-80GB")
    doc = {"format": profiles.FORMAT, "version": 1, "name": "p", **acc}
    outside = tmp_path / "outside"
    outside.write_text("secret\n")
    profile, sweep = tmp_path / "p.yaml", tmp_path / "sweep.csv"
    for target in (profile, sweep, tmp_path / ".p.yaml.tmp"):
        target.symlink_to(outside)
    with pytest.raises(OSError, match="link"):
        profiles.dump(doc, profile)
    with pytest.raises(OSError, match="link"):
        write_rows([], sweep)
    assert outside.read_text() == "secret\n" and profile.is_symlink() and sweep.is_symlink()
    profile.unlink()
    profiles.dump(doc, profile)  # the planted .p.yaml.tmp no longer matters
    assert outside.read_text() == "secret\n" and not profile.is_symlink()


def test_a_profile_keeps_its_parts_one_training_stack_and_refuses_an_unknown_one(tmp_path):
    """A profile based on a TPU keeps the catalog's ``training_stack`` (maxtext); a stack
    name the catalog does not have is refused with the field and what is allowed."""
    acc, _ = fit.base_accelerator("TPU-v5e")
    acc["power"]["vf_curve"] = [list(p) for p in acc["power"]["vf_curve"]]
    path = tmp_path / "my-tpu.yaml"
    profiles.dump({"format": profiles.FORMAT, "version": 1, "name": "my-tpu", **acc}, path)
    assert profiles.load(path).hardware["training_stack"] == "maxtext"
    path.write_text(
        path.read_text().replace("training_stack: maxtext", "training_stack: jax-magic")
    )
    with pytest.raises(DseError, match="training_stack") as err:
        profiles.load(path)
    assert "maxtext" in str(err.value)
