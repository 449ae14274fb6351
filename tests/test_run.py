"""End to end: `dse run` on a real local dask cluster, the Pareto set on disk, evaluate, export, status."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import xarray as xr
import yaml

from conftest import REPO, TOY, run_cli, run_cli_subprocess, toy_study, write_study
from dse.results import open_results


def test_run_writes_the_exact_toy_front_with_units_and_the_study(tmp_path):
    out = tmp_path / "out"
    study = write_study(tmp_path, toy_study(output=str(out)))
    proc = run_cli("run", str(study), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "Pareto front of toy" in proc.stdout
    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
        # The toy front is y = 0, shape a, every x: 11 points.
        assert ds.sizes["candidate"] == 11
        assert set(ds["y"].values) == {0} and set(ds["shape"].values.astype(str)) == {"a"}
        np.testing.assert_allclose(np.sort(ds["x"].values), np.round(np.arange(0, 1.01, 0.1), 10))
        np.testing.assert_allclose(ds["f2"].values, 1 - np.sqrt(ds["x"].values))
        for name, var in ds.variables.items():  # CF: units on numbers only, a name on all
            assert ("units" in var.attrs) == (var.dtype.kind in "iuf"), name
            assert "long_name" in var.attrs, name
        assert yaml.safe_load(ds.attrs["study"])["name"] == "toy"
        assert ds.attrs["evaluator"] == "toy" and ds.attrs["evaluator_version"] == "1.0.0"
        assert ds["shape"].dtype.kind in "OU"  # categorical parameters are strings
    with open_results(out).open_dataset(front=False) as ev:
        assert ev.sizes["candidate"] == 66
        infeasible = ev["feasible"].values == 0
        assert infeasible.sum() == 11  # shape b with y = 9
        assert set(ev["reason"].values[infeasible].astype(str)) == {
            "shape b with y > 8 is infeasible"
        }


def test_constraints_shrink_the_front(tmp_path):
    out = tmp_path / "out"
    study = write_study(tmp_path, toy_study(output=str(out), constraints=["f1 >= 0.45"]))
    proc = run_cli("run", str(study))
    assert proc.returncode == 0, proc.stderr
    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
        assert ds.sizes["candidate"] == 6 and float(ds["x"].min()) == pytest.approx(0.5)


def test_no_feasible_candidate_ends_with_the_ruling_constraints(tmp_path):
    """The preview refuses a small space with no feasible candidate before the run starts;
    without a preview the run ends with the same reasons, its evaluations kept."""
    previewed = write_study(
        tmp_path,
        toy_study(output=str(tmp_path / "out"), constraints=["f1 >= 2"]),
        name="previewed.yaml",
    )
    proc = run_cli("run", str(previewed))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        "none of the space's 66 candidates is feasible and within the constraints, so a run would find no "
        "front: constraint f1 >= 2 (55)" in proc.stderr
    ), proc.stderr
    assert not (tmp_path / "out").exists()
    study = write_study(
        tmp_path,
        toy_study(
            output=str(tmp_path / "out"),
            constraints=["f1 >= 2"],
            evaluator={"name": TOY, "options": {"preview": False}},
        ),
    )
    proc = run_cli("run", str(study))
    assert proc.returncode == 2
    assert "no feasible candidate among 66 evaluations" in proc.stderr
    assert "constraint f1 >= 2" in proc.stderr and "Traceback" not in proc.stderr
    # every command that needs a front says the same one line; every evaluation still exports
    out = tmp_path / "out"
    said = set()
    for args in (
        ("show", str(out)),
        ("plot", str(out)),
        ("report", str(out)),
        ("export", str(out)),
    ):
        refused = run_cli(*args)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, (args, refused.stderr)
        said.add(refused.stderr.strip())
    assert said == {
        f"error: {out} has no feasible candidate, so there is no Pareto front; `dse status {out}` "
        f"shows what ruled them out, and `dse export {out} --all` writes every evaluation"
    }
    assert not (out / "pareto.csv").exists()
    every = run_cli("export", str(out), "--all", "-o", str(tmp_path / "all.csv"))
    assert every.returncode == 0, every.stderr
    assert len(pd.read_csv(tmp_path / "all.csv")) == 66


def test_failing_evaluator_rows_are_recorded_not_lost(tmp_path):
    out = tmp_path / "out"
    study = toy_study(output=str(out))
    study["evaluator"]["options"] = {"fail_above_x": 0.85}
    proc = run_cli("run", str(write_study(tmp_path, study)))
    assert proc.returncode == 0, proc.stderr
    with open_results(out).open_dataset(front=False) as ev:
        status = ev["status"].values.astype(str)
        assert ev.sizes["candidate"] == 66 and (status == "failed").any() and (status == "ok").any()
        assert "toy failure" in " ".join(ev["error"].values.astype(str))


def test_second_run_into_the_same_folder_points_to_resume_or_overwrite(tmp_path):
    study = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    assert run_cli("run", str(study)).returncode == 0
    again = run_cli("run", str(study))
    assert again.returncode == 2 and "dse resume" in again.stderr and "--overwrite" in again.stderr
    out = tmp_path / "out"
    for name in (
        "report.html",
        "pareto.csv",
        "pareto.csv-metadata.json",
        "notes.txt",
    ):  # outputs of the old run (export writes FILE-metadata.json)
        (out / name).write_text("old run")
    (out / "evaluations.zarr").mkdir()
    (out / "evaluations.zarr" / "zarr.json").write_text("{}")
    (out / "pareto.zarr").mkdir()  # not a zarr store: someone else's folder
    mine = out / "evaluations.json"
    mine.write_text("the user's, from before the run")
    os.utime(mine, (0, 0))
    assert run_cli("run", str(study), "--overwrite").returncode == 0
    assert sorted(
        p.name
        for p in out.iterdir()
        if p.name.endswith((".html", ".csv", ".json", ".txt", ".zarr"))
    ) == [
        "evaluations.json",
        "meta.json",
        "notes.txt",
        "pareto.zarr",
        "progress.json",
        "state.json",
    ]


def test_quickstart_analytic_study_gives_a_real_energy_time_tradeoff(tmp_path):
    out = tmp_path / "quickstart"
    proc = run_cli("run", "studies/quickstart.yaml", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
        assert ds.sizes["candidate"] >= 5
        energy, time = ds["energy_to_train_j"].values, ds["time_to_train_s"].values
        order = np.argsort(energy)
        # along the front, spending more energy buys a shorter run
        assert np.all(np.diff(time[order]) <= 0) and time[order][0] > time[order][-1]
        assert ds["energy_to_train_j"].attrs["units"] == "J"
        assert (ds["peak_junction_temp_c"].values <= 85).all()


def test_evaluate_command_fills_fixed_values_and_writes_metrics(tmp_path):
    cands = tmp_path / "cands.csv"
    pd.DataFrame(
        {
            "accelerator": ["H100-SXM", "A100-80GB"],
            "num_accelerators": [16, 16],
            "global_batch_size": [256, 256],
            "clock_mhz": [1410, 1410],
            "tensor_parallel": [1, 3],
        }
    ).to_csv(cands, index=False)
    result = tmp_path / "metrics.csv"
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "--candidates", str(cands), "-o", str(result)
    )
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(result, keep_default_na=False)
    assert len(table) == 2
    assert (table["micro_batch_size"] == 4).all() and (table["model"] == "gpt-1.3b").all()
    assert bool(table.loc[0, "feasible"]) and not bool(table.loc[1, "feasible"])
    assert table.loc[1, "reason"] != ""
    assert float(table.loc[0, "energy_to_train_j"]) > 0
    # an id column names the rows: kept first, not an input, same results
    pd.read_csv(cands).assign(id=["007", "tp3"])[
        [
            "id",
            "accelerator",
            "num_accelerators",
            "global_batch_size",
            "clock_mhz",
            "tensor_parallel",
        ]
    ].to_csv(cands, index=False)
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "named.csv")
    )
    assert proc.returncode == 0, proc.stderr
    named = pd.read_csv(tmp_path / "named.csv", keep_default_na=False, dtype={"id": str})
    assert named.columns[0] == "id" and list(named["id"]) == ["007", "tp3"]
    pd.testing.assert_frame_equal(named.drop(columns="id"), table)


def test_evaluate_command_rejects_unknown_columns_and_bad_values(tmp_path):
    cands = tmp_path / "cands.csv"
    cands.write_text("acclerator\nH100-SXM\n")
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "o.csv")
    )
    assert proc.returncode == 2 and "acclerator" in proc.stderr and "Traceback" not in proc.stderr
    cands.write_text("accelerator,clock_mhz\nH100-SXM,fast\n")
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "o.csv")
    )
    assert proc.returncode == 2 and "clock_mhz" in proc.stderr and "'fast'" in proc.stderr
    cands.write_text("accelerator,num_accelerators\nH100-SXM,8\nH1000,8\n")
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "o.csv")
    )
    assert (
        proc.returncode == 2
        and "row 3, column accelerator: unknown accelerator (got 'H1000'" in proc.stderr
    )
    # a row longer than the header (read_csv made its first value an index, shifting the rest)
    cands.write_text(
        "accelerator,num_accelerators,global_batch_size\nA100-80GB,16,256,0.8\nH100-SXM,8,128\n"
    )
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "o.csv")
    )
    assert proc.returncode == 2 and "line 2: 4 fields under a header of 3" in proc.stderr, (
        proc.stderr
    )
    cands.write_text(
        "accelerator,num_accelerators,global_batch_size\nH100-SXM,16,256,\n"
    )  # a trailing comma
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "o.csv")
    )
    assert proc.returncode == 2 and "(a comma at the end of the line?)" in proc.stderr, proc.stderr
    cands.write_text("accelerator,num_accelerators,accelerator\nA100-80GB,16,H100-SXM\n")
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "o.csv")
    )
    assert (
        proc.returncode == 2 and "column 'accelerator' appears twice in the header" in proc.stderr
    ), proc.stderr
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(tmp_path), "-o", str(tmp_path / "o.csv")
    )
    assert proc.returncode == 2 and "is a folder; give the candidates CSV file" in proc.stderr, (
        proc.stderr
    )
    side = tmp_path / "z.csv-metadata.json"
    side.write_text("accelerator\nH100-SXM\n")
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(side), "-o", str(tmp_path / "z.csv")
    )
    assert (
        proc.returncode == 2
        and "its description file z.csv-metadata.json would overwrite" in proc.stderr
    )
    assert side.read_text() == "accelerator\nH100-SXM\n"
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(side), "-o", str(tmp_path / "o.parquet")
    )
    assert proc.returncode == 2 and "dse evaluate writes CSV, not .parquet" in proc.stderr, (
        proc.stderr
    )


def test_evaluate_says_a_candidates_file_is_separated_by_another_character(tmp_path):
    """A spreadsheet's export with ';' (or tabs) reads as one column named by all the names:
    the message says the separator, not a look-alike parameter."""
    for sep in (";", "\t"):
        cands = tmp_path / "c.csv"
        cands.write_text(f"accelerator{sep}num_accelerators\nH100-SXM{sep}8\n")
        proc = run_cli("evaluate", "studies/quickstart.yaml", "-c", cands, "-o", tmp_path / "o.csv")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"(its values are separated by {sep!r}: dse reads comma-separated values)" in (
            proc.stderr
        )
        assert not (tmp_path / "o.csv").exists()


def test_evaluate_refuses_every_file_type_but_csv_and_writes_csv_under_a_name_without_one(tmp_path):
    """.xlsx got CSV text with exit 0 while .parquet was refused: every suffix that names a file
    type other than .csv is refused alike; no suffix, or a dot inside a name, is CSV (as export)."""
    cands = tmp_path / "c.csv"
    cands.write_text("accelerator\nH100-SXM\n")
    for name in ("o.xlsx", "o.tsv", "o.parquet", "o.nc"):
        proc = run_cli(
            "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / name)
        )
        suffix = name[1:]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        # (a long value is shortened in the middle: the folder may not be there whole)
        assert f"--output: dse evaluate writes CSV, not {suffix} (got '" in proc.stderr, proc.stderr
        assert f"{name}'); allowed: a .csv file" in proc.stderr, proc.stderr
        assert not (tmp_path / name).exists()
    for name in ("O.CSV", "gpt-1.3b", "metrics"):
        proc = run_cli(
            "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / name)
        )
        assert proc.returncode == 0, proc.stderr
        assert list(pd.read_csv(tmp_path / name)["accelerator"]) == ["H100-SXM"]


def test_evaluate_skips_rows_of_empty_cells_and_writes_integers_as_integers(tmp_path):
    cands = tmp_path / "cands.csv"
    cands.write_text(
        "accelerator,num_accelerators,micro_batch_size\nH100-SXM,16.0,\n,,\nA100-80GB,8,2\n"
    )
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "o.csv")
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 candidates evaluated" in proc.stdout, proc.stdout
    lines = (tmp_path / "o.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]
    assert [r["num_accelerators"] for r in rows] == ["16", "8"]
    assert rows[1]["micro_batch_size"] == "2" and "." not in rows[0]["micro_batch_size"]
    # the study's searched parameters the file leaves out are written with the defaults used
    assert "global_batch_size" in header and "tensor_parallel" in header
    assert "has no column for the study's searched parameter(s)" in proc.stderr
    # micro_batch_size is fixed by the study (its empty cell takes the study's 4): no note for it
    assert "empty cells" not in proc.stderr


def test_evaluate_says_which_empty_cells_took_a_default(tmp_path):
    cands = tmp_path / "cands.csv"
    cands.write_text("accelerator,num_accelerators\nH100-SXM,\nA100-80GB,16\nH100-SXM,\n")
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(tmp_path / "o.csv")
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "empty cells in" in proc.stderr
        and "took the evaluator's defaults: num_accelerators (2 rows, 8)"
        in " ".join(proc.stderr.split())
    ), proc.stderr
    assert pd.read_csv(tmp_path / "o.csv")["num_accelerators"].tolist() == [8, 16, 8]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("finished")
    out = tmp / "out"
    proc = run_cli("run", str(write_study(tmp, toy_study(output=str(out)))))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("fmt", ["csv", "parquet", "netcdf", "zarr", "json"])
def test_export_front_in_every_format(finished_run, tmp_path, fmt):
    target = tmp_path / f"front.{fmt}"
    proc = run_cli("export", str(finished_run), "--format", fmt, "-o", str(target))
    assert proc.returncode == 0, proc.stderr
    if fmt == "csv":
        assert len(pd.read_csv(target)) == 11
    elif fmt == "parquet":
        assert len(pd.read_parquet(target)) == 11
    elif fmt == "netcdf":
        with xr.open_dataset(target, engine="h5netcdf") as ds:
            assert ds.sizes["candidate"] == 11
    elif fmt == "zarr":
        with xr.open_zarr(target) as ds:
            assert ds.sizes["candidate"] == 11 and ds["f1"].attrs["units"] == "1"
    else:
        doc = json.loads(target.read_text())
        fields = {f["name"]: f for f in doc["schema"]["fields"]}
        assert len(doc["data"]) == 11 and fields["f2"]["units"] == "1"
        assert fields["elapsed_s"]["units"] == "s" and doc["attributes"]["study_name"] == "toy"
        # pandas reads it back (JSON Table Schema), every value as stored
        table = pd.read_json(target, orient="table", precise_float=True)
        with xr.open_dataset(finished_run / "pareto.nc", engine="h5netcdf") as ds:
            for name in ("f1", "f2", "x"):  # every double as stored, not rounded to 10 digits
                assert [c[name] for c in doc["data"]] == ds[name].values.tolist()
                assert table[name].tolist() == ds[name].values.tolist()
            assert table["y"].dtype == np.int64 and table["feasible"].dtype == bool
            assert table["shape"].tolist() == ds["shape"].values.astype(str).tolist()


def test_export_takes_the_format_from_the_output_suffix_and_refuses_a_contradicting_one(
    finished_run, tmp_path
):
    target = tmp_path / "front.parquet"
    assert run_cli("export", str(finished_run), "-o", str(target)).returncode == 0
    assert len(pd.read_parquet(target)) == 11  # Parquet, not CSV under a .parquet name
    proc = run_cli("export", str(finished_run), "--format", "csv", "-o", str(tmp_path / "front.nc"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--format csv does not match the output's suffix .nc (netcdf)" in proc.stderr
    assert not (tmp_path / "front.nc").exists()
    proc = run_cli("export", str(finished_run), "-o", str(tmp_path / "front.xlsx"))
    assert (
        proc.returncode == 2
        and "cannot tell the format from the output's suffix .xlsx" in proc.stderr
    )
    assert not (tmp_path / "front.xlsx").exists()


def test_export_to_netcdf_by_default_says_the_runs_own_file_is_the_export_and_checks_it(tmp_path):
    """The default netCDF target is the run's own pareto.nc: export said `wrote` it while
    leaving it unchanged, and said so of a pareto.nc that was not there at all."""
    out = tmp_path / "out"
    assert (
        run_cli("run", str(write_study(tmp_path, toy_study(output=str(out)))), "--quiet").returncode
        == 0
    )
    before = (out / "pareto.nc").read_bytes()
    proc = run_cli("export", str(out), "-f", "netcdf")
    assert proc.returncode == 0, proc.stderr
    assert not proc.stdout.startswith("wrote"), proc.stdout
    assert (
        f"{out / 'pareto.nc'} already holds the Pareto set in netCDF, as the run wrote it: nothing to write"
        in " ".join(proc.stdout.split())
    ), proc.stdout
    assert (out / "pareto.nc").read_bytes() == before
    (out / "pareto.nc").unlink()
    proc = run_cli("export", str(out), "-f", "netcdf")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{out / 'pareto.nc'} does not exist yet" in proc.stderr, proc.stderr


def test_export_all_evaluations(finished_run, tmp_path):
    target = tmp_path / "all.csv"
    assert run_cli("export", str(finished_run), "--all", "-o", str(target)).returncode == 0
    assert len(pd.read_csv(target)) == 66


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
def test_every_evaluation_is_exported_slice_by_slice_as_one_table(
    finished_run, tmp_path, monkeypatch, fmt
):
    """An export of every evaluation is written a slice at a time (a run may not fit in
    memory): with slices of 7 rows the 66 evaluations come out whole, in order, exactly."""
    from dse.outputs import export

    monkeypatch.setattr(export, "EXPORT_ROWS", 7)
    target = export.export_results(finished_run, fmt, front=False, output=tmp_path / f"all.{fmt}")
    if fmt == "csv":
        table = pd.read_csv(target)
    elif fmt == "parquet":
        table = pd.read_parquet(target)
        assert pq.ParquetFile(target).metadata.num_row_groups == 10
    else:
        table = pd.read_json(target, orient="table", precise_float=True)
    with open_results(finished_run).open_dataset(front=False) as ds:
        assert len(table) == ds.sizes["candidate"] == 66
        for name in ("f1", "f2", "x", "key"):
            np.testing.assert_array_equal(table[name].to_numpy(), ds[name].values, err_msg=name)


def test_profile_on_the_command_line_replaces_the_studys_execution(tmp_path):
    """The same study on a laptop and on a cluster: --profile names where it runs, without
    editing the study (here a profile that evaluates in the dse process)."""
    (tmp_path / "here.yaml").write_text("workers: 0\n")
    study = write_study(
        tmp_path,
        {
            **toy_study(output=str(tmp_path / "out")),
            "execution": {"scheduler": "tcp://192.0.2.1:8786"},
        },
    )  # unreachable
    proc = run_cli("run", str(study), "--profile", str(tmp_path / "here.yaml"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "in this process" in proc.stderr and "192.0.2.1" not in proc.stderr
    proc = run_cli("validate", str(study), "--profile", "no-such-profile")
    assert proc.returncode == 2 and proc.stderr.startswith(
        "error: --profile: cluster profile 'no-such-profile' not found"
    ), proc.stderr


def test_an_output_onto_the_runs_own_files_or_into_nowhere_is_refused(finished_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    (tmp_path / "folder").mkdir()
    cases = [
        (
            ("export", str(run), "-o", str(run / "meta.json")),
            "is one of the run's own files (meta.json in",
        ),
        (
            ("report", str(run), "-o", str(run / "study.yaml")),
            "is one of the run's own files (study.yaml in",
        ),
        (
            ("export", str(run), "--all", "-o", str(run / "state.json")),
            "is one of the run's own files (state.json",
        ),
        (
            ("export", str(run), "-f", "csv", "-o", str(next((run / "evaluations").iterdir()))),
            "run's own files (evaluations in",
        ),
        (
            ("plot", str(run), "-o", str(tmp_path / "folder")),
            "--output: is a folder; give a file name",
        ),
        (
            ("report", str(run), "-o", str(tmp_path / "folder")),
            "--output: is a folder; give a file name",
        ),
        (
            ("export", str(run), "-o", str(run / "meta.json" / "x.csv")),
            "meta.json is a file, not a folder",
        ),
    ]
    for args, expected in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert expected in proc.stderr, (args, proc.stderr)
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before
    assert run_cli("status", str(run)).returncode == 0


def test_a_run_without_its_state_or_with_a_foreign_one_is_damaged_for_every_command(
    finished_run, tmp_path
):
    import shutil

    for name, change in (
        ("missing", lambda f: f.unlink()),
        ("foreign", lambda f: f.write_text('{"candidates": []}')),
    ):
        run = tmp_path / name
        shutil.copytree(finished_run, run)
        change(run / "state.json")
        for command in ("status", "plot", "export", "resume"):
            proc = run_cli(command, str(run))
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, (
                name,
                command,
                proc.stderr,
            )
            assert (
                "state.json is missing" in proc.stderr or "state.json is damaged" in proc.stderr
            ), proc.stderr


def test_outputs_of_a_run_still_going_say_so_not_to_resume_it(finished_run, tmp_path):
    """A run that has not written its datasets yet: while its process lives, export, plot
    and report say that it is going (resume would be refused), not to resume it."""
    import shutil
    import socket

    going = tmp_path / "going"
    shutil.copytree(finished_run, going)
    (going / "pareto.nc").unlink()
    (going / "lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    for command in ("plot", "report", "export"):
        proc = run_cli(command, str(going))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"the run is still going (process {os.getpid()} on" in proc.stderr, proc.stderr


def test_status_shows_evaluations_front_and_history(finished_run):
    proc = run_cli("status", str(finished_run))
    assert proc.returncode == 0, proc.stderr
    assert (
        "finished" in proc.stdout
        and "evaluations 66" in proc.stdout
        and "front size 11" in proc.stdout
    )
    assert "hypervolume" in proc.stdout
    # what export, plot and report send a user to status for: what ruled candidates out
    assert "ruled out: evaluator: shape b with y > 8 is infeasible (11)" in proc.stdout
    # the unit of the history's time column, under its name: at 80 columns no header is cut
    assert re.search(r"┃ seconds ┃\n┃.*┃ +\[s\] ┃", proc.stdout), proc.stdout
    narrow = run_cli("status", str(finished_run), env={"COLUMNS": "80"})
    assert "…" not in narrow.stdout and "┃ evaluations ┃" in narrow.stdout


def test_describe_lists_parameters_and_metrics_with_units():
    proc = run_cli("describe")
    assert proc.returncode == 0
    assert (
        "clock_mhz" in proc.stdout and "MHz" in proc.stdout and "energy_to_train_j" in proc.stdout
    )


def test_help_and_version():
    assert "Run a study" in run_cli("--help").stdout
    assert run_cli("--version").stdout.startswith("dse ")


def test_run_draws_the_front_and_plot_redraws_it(finished_run, tmp_path):
    png = finished_run / "pareto.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = tmp_path / "front.png"
    proc = run_cli("plot", str(finished_run), "-o", str(target))
    assert proc.returncode == 0, proc.stderr
    from matplotlib.image import imread

    image = imread(target)
    assert image.shape[0] > 300 and image.shape[1] > 400
    assert image[..., :3].std() > 0.05  # not a blank canvas


def test_a_run_where_every_evaluation_fails_says_why_and_keeps_the_datasets(tmp_path):
    out = tmp_path / "out"
    study = toy_study(output=str(out))
    study["evaluator"]["options"] = {"fail_above_x": -1.0}
    proc = run_cli("run", str(write_study(tmp_path, study)), "--quiet")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no feasible candidate among 66 evaluations" in proc.stderr
    assert "evaluation failed: RuntimeError: toy failure" in proc.stderr
    with open_results(out).open_dataset(front=False) as ev:
        assert ev.sizes["candidate"] == 66 and np.isnan(ev["f1"].values).all()


def test_evaluate_fills_empty_cells_with_the_study_value_then_the_default(tmp_path):
    cands = tmp_path / "cands.csv"
    cands.write_text(
        "accelerator,num_accelerators,global_batch_size,micro_batch_size,precision\n"
        "H100-SXM,16,256,4,bf16\nH100-SXM,16,256,,\n"
    )
    result = tmp_path / "metrics.csv"
    proc = run_cli("evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(result))
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(result)
    assert list(table["micro_batch_size"]) == [4, 4]  # the study fixes 4
    assert list(table["precision"]) == ["bf16", "bf16"]  # the evaluator's default
    assert table.loc[0, "step_time_s"] == pytest.approx(table.loc[1, "step_time_s"])


def test_unwritable_outputs_are_one_line_errors(finished_run, tmp_path):
    proc = run_cli("export", str(finished_run), "-f", "csv", "-o", str(tmp_path))  # a folder
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and str(tmp_path) in proc.stderr
    cands = tmp_path / "c.csv"
    cands.write_text("accelerator\nH100-SXM\n")
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", "/proc/nope/o.csv"
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = run_cli("run", "studies/quickstart.yaml", "-o", "/proc/nope", "--quiet")
    assert proc.returncode == 2 and "cannot write the results folder" in proc.stderr


def test_evaluate_takes_names_in_any_spelling_and_refuses_alternatives_in_one_row(tmp_path):
    study = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    study["fixed"]["accelerator"] = "a100-80gb"  # the study's spelling too
    del study["space"]["accelerator"]
    path = write_study(tmp_path, study)
    cands = tmp_path / "cands.csv"
    cands.write_text(
        "accelerator,num_accelerators,clock_mhz,clock_fraction\nh100 sxm,16,1410,\n,16,,0.5\n"
    )
    proc = run_cli("evaluate", str(path), "-c", str(cands), "-o", str(tmp_path / "out.csv"))
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(tmp_path / "out.csv")
    assert list(out["accelerator"]) == ["H100-SXM", "A100-80GB"] and out["feasible"].all()
    assert list(out["effective_clock_mhz"]) == [1410.0, 705.0]
    columns = {
        c["name"]: c
        for c in json.loads((tmp_path / "out.csv-metadata.json").read_text())["tableSchema"][
            "columns"
        ]
    }  # every column's unit, as export writes them
    assert list(columns) == list(out.columns)
    assert (
        columns["energy_to_train_j"]["schema:unitText"] == "J"
        and columns["clock_mhz"]["schema:unitText"] == "MHz"
    )
    assert (
        "schema:unitText" not in columns["accelerator"]
        and columns["status"]["datatype"] == "string"
    )
    cands.write_text(
        "accelerator,num_accelerators,clock_mhz,clock_fraction\nH100-SXM,16,1410,0.5\n"
    )
    proc = run_cli("evaluate", str(path), "-c", str(cands), "-o", str(tmp_path / "out.csv"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        f"{cands}: row 2 sets clock_mhz and clock_fraction, which are alternatives" in proc.stderr
    )


def test_an_output_onto_a_pipe_or_a_link_is_refused(finished_run, tmp_path):
    """A write goes to a temporary file renamed onto the output: a pipe (or device) there
    would be replaced by a regular file, so it is refused; so is a symbolic link, which dse
    never writes through (docs/security.md): the link and its target stay as they were."""
    import os
    import stat

    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    cands = tmp_path / "cands.csv"
    cands.write_text("accelerator,num_accelerators\nH100-SXM,16\n")
    for args in (
        ("export", str(finished_run), "-o", str(fifo)),
        ("plot", str(finished_run), "-o", str(fifo)),
        ("report", str(finished_run), "-o", str(fifo)),
        ("evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(fifo)),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert "--output: is a device, pipe or socket, not a file" in proc.stderr, (
            args,
            proc.stderr,
        )
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    # /dev/stdout, here a link to the pipe the output is read from (a program's: a subprocess),
    # and '-' (no file named '-')
    for output, said in (
        ("/dev/stdout", "is a device, pipe or socket"),
        ("-", "is '-', but dse writes files, not standard output"),
    ):
        for args in (
            ("export", str(finished_run)),
            ("evaluate", "studies/quickstart.yaml", "-c", str(cands)),
        ):
            call = run_cli_subprocess if output == "/dev/stdout" else run_cli
            proc = call(*args, "-o", output, cwd=tmp_path if args[0] == "export" else None)
            assert (
                proc.returncode == 2 and f"--output: {said}" in proc.stderr and proc.stdout == ""
            ), proc.stderr
    assert not (tmp_path / "-").exists() and not (REPO / "-").exists()
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    for args in (
        ("export", str(finished_run), "-f", "CSV"),
        ("evaluate", "studies/quickstart.yaml", "-c", str(cands)),
    ):
        proc = run_cli(*args, "-o", str(link))
        assert proc.returncode == 2 and "--output: is a symbolic link" in proc.stderr, proc.stderr
        assert link.is_symlink() and real.read_text() == "old"


def test_evaluate_makes_missing_output_folders_as_export_does(finished_run, tmp_path):
    """`dse export -o new/x.csv` makes new/; evaluate's outputs alike, while a file in the
    way, or a folder given as the file, is one line naming a file to give, before any work."""
    cands = tmp_path / "cands.csv"
    cands.write_text("accelerator,num_accelerators\nH100-SXM,16\n")
    out, path = tmp_path / "new" / "a" / "e.csv", tmp_path / "new" / "b" / "t.csv"
    proc = run_cli(
        "evaluate", "studies/quickstart.yaml", "-c", cands, "-o", out, "--trajectory", path
    )
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_csv(out)) == 1 and (out.parent / "e.csv-metadata.json").is_file()
    assert pd.read_csv(path)["candidate"].nunique() == 1
    exported = tmp_path / "new" / "c" / "front.csv"
    assert run_cli("export", str(finished_run), "-o", exported).returncode == 0
    # a link to nothing on the way: no folder can be made through it (it was found only
    # when the file was written, after the evaluation, as 'File exists')
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    lost = f"cannot write there: {tmp_path / 'dangling'} is a symbolic link to nothing"
    said = run_cli("export", str(finished_run), "-o", tmp_path / "dangling" / "f.csv")
    assert said.returncode == 2 and lost in said.stderr, said.stderr
    for args, expected in [
        (("-o", cands / "e.csv"), f"cannot write there: {cands} is a file, not a folder"),
        (("-o", tmp_path / "dangling" / "x" / "e.csv"), lost),
        (("-o", tmp_path), f"is a folder; give a file name (got '{tmp_path}'); allowed: a file"),
        (("-o", out, "--trajectory", tmp_path), f"e.g. {tmp_path / 'trajectory.csv'}"),
    ]:
        proc = run_cli("evaluate", "studies/quickstart.yaml", "-c", cands, *args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_output_that_would_replace_an_input_is_refused_before_any_work(finished_run, tmp_path):
    cands = tmp_path / "cands.csv"
    cands.write_text("accelerator,num_accelerators\nH100-SXM,16\n")
    proc = run_cli("evaluate", "studies/quickstart.yaml", "-c", str(cands), "-o", str(cands))
    assert proc.returncode == 2 and "would overwrite the candidates or the study" in proc.stderr
    assert cands.read_text() == "accelerator,num_accelerators\nH100-SXM,16\n"
    proc = run_cli(
        "plot", str(finished_run), "-o", str(tmp_path / "front.jpg")
    )  # drawn as PNG, named .jpg: no
    assert proc.returncode == 2 and "cannot draw a .jpg file" in proc.stderr
    proc = run_cli("plot", str(finished_run), "-o", str(tmp_path / "front.svg"))
    assert proc.returncode == 0 and (tmp_path / "front.svg").read_text().lstrip().startswith(
        "<?xml"
    )


def test_validate_refuses_a_space_with_no_feasible_candidate_as_run_would_end(tmp_path):
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    data["constraints"] = ["memory_per_accelerator_gib <= 1"]
    data["output"] = str(tmp_path / "out")
    study = write_study(tmp_path, data)
    for command in ("validate", "run"):
        proc = run_cli(
            command, str(study), *(["-q", "-w", "0"] if command == "run" else ["--overwrite"])
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "constraint memory_per_accelerator_gib <= 1" in proc.stderr
    assert (
        "none of the space's 400 candidates is feasible"
        in run_cli("validate", str(study), "--overwrite").stderr
    )
    # a continuous space is sampled: a warning, not a refusal (the search may still find one)
    data["space"]["clock_fraction"] = {"range": [0.6, 1.0]}
    data["output"] = str(tmp_path / "out2")
    proc = run_cli("validate", str(write_study(tmp_path, data)))
    assert (
        proc.returncode == 0
        and "warning: none of 4,096 candidates drawn from the space" in proc.stderr
    )
    data["constraints"] = []
    proc = run_cli("validate", str(write_study(tmp_path, data)))
    assert (
        proc.returncode == 0
        and "sampled candidates feasible and within the constraints" in proc.stdout
    )


def test_evaluate_takes_a_searched_parameter_of_one_value_as_fixed(tmp_path):
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    data["space"] = {"num_accelerators": 64, "accelerator": ["H100-SXM"]}  # one value each
    study = write_study(tmp_path, data)
    (tmp_path / "c.csv").write_text("tensor_parallel\n1\n2\n")
    proc = run_cli(
        "evaluate", str(study), "-c", str(tmp_path / "c.csv"), "-o", str(tmp_path / "o.csv")
    )
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / "o.csv")
    assert (table["num_accelerators"] == 64).all() and (table["accelerator"] == "H100-SXM").all()
    assert "defaults were used" not in proc.stderr and "2 candidates evaluated" in proc.stdout


def test_ctrl_c_while_the_front_is_drawn_says_the_run_is_complete(tmp_path, monkeypatch, capsys):
    """After the run and its datasets, only the picture was missing, yet a bare "interrupted"
    (exit 130) read as a lost run."""
    from dse.cli import main
    from dse.outputs import plot

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plot, "plot_results", stopped)
    out = tmp_path / "out"
    code = main(["run", str(write_study(tmp_path, toy_study(output=str(out)))), "-q"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 130
    assert (
        "interrupted: the run is complete (66 evaluations" in err
        and "but pareto.png was not drawn" in err
    ), err
    assert f"dse plot {out}" in err, err
    assert run_cli("show", str(out)).returncode == 0


def test_the_run_ends_saying_how_good_its_front_is(tmp_path):
    proc = run_cli("run", str(write_study(tmp_path, toy_study(output=str(tmp_path / "out")))))
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    with open_results(tmp_path / "out").open_dataset(front=False) as ev:
        feasible = int(ev["meets_constraints"].sum())
    assert f"66 evaluations ({feasible} feasible and within the constraints, 0 failed)" in said, (
        said
    )
    assert (
        "on the Pareto front, exact: every candidate of the space was evaluated; hypervolume"
        in said
    ), said
