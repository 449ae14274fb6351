"""Results native to their tools: CF conventions in the datasets, units in every export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from conftest import REPO, run_cli, write_study
from dse.results import open_results


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("cf")
    study = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    study.update(execution={"workers": 0}, output=str(tmp / "out"))
    proc = run_cli("run", str(write_study(tmp, study)), "-q")
    assert proc.returncode == 0, proc.stderr
    return tmp / "out"


@pytest.mark.parametrize("name", ["pareto.nc", "evaluations.nc"])
def test_datasets_follow_cf(quickstart, name, tmp_path):
    """pareto.nc as the run wrote it; every evaluation as `dse export --all --format netcdf`
    writes it from the log (the only copy at rest)."""
    cf_units = pytest.importorskip(
        "cf_units", reason='cf-units is not installed: pip install ".[test]"'
    )
    path = quickstart / name
    if name == "evaluations.nc":
        path = tmp_path / name
        proc = run_cli("export", str(quickstart), "--all", "--format", "netcdf", "-o", str(path))
        assert proc.returncode == 0, proc.stderr
    with xr.open_dataset(path) as ds:
        assert ds.attrs["Conventions"] == "CF-1.11"
        # the file's attributes describe the run, none of a variable's (they leaked once)
        assert not {"units", "long_name", "role", "description"} & set(ds.attrs), sorted(ds.attrs)
        assert ds.attrs["title"].startswith("dse ") and "front" in ds.attrs
        for n, var in ds.variables.items():
            assert 0 < len(var.attrs["long_name"]) <= 60, n  # short; long text in description
            if var.dtype.kind in "iuf":
                cf_units.Unit(var.attrs["units"])  # a valid UDUNITS-2 unit (raises otherwise)
            else:  # text and flags carry no units
                assert "units" not in var.attrs, n
        assert ds["clock_fraction"].attrs["units"] == "1"
        assert ds["energy_to_train_j"].attrs["units"] == "J"  # SI, once (no _mwh copy)
        assert "energy_to_train_mwh" not in ds and "time_to_train_days" not in ds
        assert ds["memory_per_accelerator_gib"].attrs["units"] == "1073741824 byte"
        assert ds["memory_per_accelerator_gib"].attrs["display_units"] == "GiB"
        assert ds["tokens_per_s"].attrs["units"] == "s-1"
        assert "description" in ds["clock_fraction"].attrs
        assert ds["power_capped"].attrs["flag_meanings"] == "false true"


def test_parameters_are_coordinates_that_unstack_to_a_grid(quickstart):
    with open_results(quickstart).open_dataset(front=False) as ds:
        params = [
            "accelerator",
            "num_accelerators",
            "global_batch_size",
            "clock_fraction",
            "tensor_parallel",
        ]
        assert set(params) <= set(ds.coords)
        grid = ds.set_index(candidate=params).unstack("candidate")
        assert grid["energy_to_train_j"].shape == (2, 4, 5, 5, 2)  # the whole enumerated space
        one = grid["energy_to_train_j"].sel(
            accelerator="H100-SXM",
            num_accelerators=8,
            global_batch_size=64,
            clock_fraction=0.7,
            tensor_parallel=1,
        )
        row = ds["energy_to_train_j"].where(
            (ds.accelerator == "H100-SXM")
            & (ds.num_accelerators == 8)
            & (ds.global_batch_size == 64)
            & (ds.clock_fraction == 0.7)
            & (ds.tensor_parallel == 1),
            drop=True,
        )
        assert float(one) == float(row.item())


def test_parquet_fields_carry_units_and_names(quickstart, tmp_path):
    import pyarrow.parquet as pq

    target = tmp_path / "front.parquet"
    assert run_cli("export", str(quickstart), "-f", "parquet", "-o", str(target)).returncode == 0
    schema = pq.read_schema(target)
    meta = schema.field("energy_to_train_j").metadata
    assert meta[b"units"] == b"J" and meta[b"long_name"] == b"facility energy to train"
    meta = schema.field("memory_per_accelerator_gib").metadata
    assert meta[b"units"] == b"1073741824 byte" and meta[b"display_units"] == b"GiB"
    assert b"units" not in schema.field("accelerator").metadata
    assert json.loads(schema.metadata[b"dse"])["attributes"]["study_name"] == "quickstart"
    with xr.open_dataset(quickstart / "pareto.nc") as front:
        assert len(pd.read_parquet(target)) == front.sizes["candidate"]


@pytest.mark.parametrize("units_row", [False, True])
def test_csv_has_a_units_sidecar_and_optionally_a_units_row(quickstart, tmp_path, units_row):
    target = tmp_path / "front.csv"
    args = ["--units-row"] if units_row else []
    assert run_cli("export", str(quickstart), "-f", "csv", "-o", str(target), *args).returncode == 0
    sidecar = json.loads((tmp_path / "front.csv-metadata.json").read_text())
    cols = {c["name"]: c for c in sidecar["tableSchema"]["columns"]}
    assert cols["time_to_train_s"]["schema:unitText"] == "s"
    assert cols["global_batch_size"]["schema:unitText"] == "sequences"
    assert "schema:unitText" not in cols["accelerator"]
    assert sidecar["dialect"]["headerRowCount"] == (2 if units_row else 1)
    df = pd.read_csv(target, header=[0, 1] if units_row else 0)
    with xr.open_dataset(quickstart / "pareto.nc") as front:
        assert len(df) == front.sizes["candidate"]
    assert list(cols) == [c[0] if units_row else c for c in df.columns]
    if units_row:
        units = dict(df.columns)
        assert units["energy_to_train_j"] == "J" and units["tokens_per_s"] == "tokens/s"


def test_zarr_export_prints_no_warning_and_reads_back(quickstart, tmp_path):
    target = tmp_path / "all.zarr"
    proc = run_cli("export", str(quickstart), "--all", "-f", "zarr", "-o", str(target))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xr.open_zarr(target) as ds:
            assert ds.sizes["candidate"] == 400 and ds.attrs["Conventions"] == "CF-1.11"
            assert ds["accelerator"].values[0] in ("A100-80GB", "H100-SXM")
            np.testing.assert_array_equal(ds["meets_constraints"].values.sum(), 360)


def test_a_long_name_drops_bracketed_asides_not_the_words_after_them():
    from dse.datasets import short_name

    assert short_name("peak (busy-phase) power per accelerator") == (
        "peak power per accelerator",
        "peak (busy-phase) power per accelerator",
    )
    assert (
        short_name("accelerator static (idle) energy over the run")[0]
        == "accelerator static energy over the run"
    )
    assert short_name("sharding stage: 1 optimizer state, 2 + gradients")[0] == "sharding stage"
    assert short_name("time to train") == ("time to train", "")


def test_a_zarr_export_replaces_a_zarr_store_only_and_never_a_half_written_one(
    quickstart, tmp_path
):
    """A zarr store is a folder: exporting onto a folder that is not one (the user's, or the
    results folder itself) would have deleted what it held."""
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "thesis.txt").write_text("precious")
    for target in (keep, quickstart, tmp_path):
        proc = run_cli("export", str(quickstart), "-f", "zarr", "-o", str(target))
        assert proc.returncode == 2 and "is a folder that is not a zarr store" in proc.stderr, (
            proc.stderr
        )
    assert (keep / "thesis.txt").read_text() == "precious" and (quickstart / "state.json").is_file()
    store = tmp_path / "front.zarr"
    for _ in range(2):  # the second export replaces the first
        assert run_cli("export", str(quickstart), "-f", "zarr", "-o", str(store)).returncode == 0
    with xr.open_zarr(store) as ds, xr.open_dataset(quickstart / "pareto.nc") as front:
        assert ds.sizes["candidate"] == front.sizes["candidate"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "front.zarr",
        "mine",
    ]  # no temporary folder left


def test_a_zarr_store_behind_a_link_is_refused_and_one_failing_midway_stays_whole(
    tmp_path, monkeypatch
):
    """A link at the store's name is refused, never written through (its target unchanged);
    a failure between moving the old store aside and putting the new one in place puts the
    old one back, and nothing is left beside it."""
    import os

    from dse.files import atomic_folder, is_zarr_store

    store = tmp_path / "real.zarr"
    with atomic_folder(store) as tmp:
        tmp.mkdir()
        (tmp / ".zgroup").write_text("{}")
        (tmp / "first").write_text("1")
    link = tmp_path / "link.zarr"
    link.symlink_to(store)
    with pytest.raises(OSError, match="symbolic link"):
        with atomic_folder(link) as tmp:
            tmp.mkdir()
            (tmp / "second").write_text("2")
    assert link.is_symlink() and (store / "first").is_file() and not (store / "second").exists()
    with atomic_folder(store) as tmp:
        tmp.mkdir()
        (tmp / ".zgroup").write_text("{}")
        (tmp / "second").write_text("2")
    real_replace = os.replace

    def second_rename_fails(src, dst):
        if (
            Path(dst) == store and Path(src).name == store.name
        ):  # the new store, not the old one going back
            raise KeyboardInterrupt
        real_replace(src, dst)

    with pytest.raises(KeyboardInterrupt):
        with atomic_folder(store) as tmp:
            tmp.mkdir()
            (tmp / "third").write_text("3")
            monkeypatch.setattr(os, "replace", second_rename_fails)
    monkeypatch.undo()
    assert is_zarr_store(store) and (store / "second").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "link.zarr",
        "real.zarr",
    ]  # nothing left beside


def test_a_zarr_export_onto_a_file_is_refused(quickstart, tmp_path):
    mine = tmp_path / "notes.zarr"
    mine.write_text("mine")
    proc = run_cli("export", str(quickstart), "-f", "zarr", "-o", str(mine))
    assert proc.returncode == 2 and "is a file, but a zarr store is a folder" in proc.stderr, (
        proc.stderr
    )
    assert mine.read_text() == "mine"


def test_a_metric_or_input_name_says_the_unit_it_holds():
    """GiB is ``_gib`` (``memory_per_accelerator_gb`` held GiB), a ``_gb`` name holds GB, a
    ``_j`` name J, a ``_s`` name s, a ``_w`` name W: a name's unit suffix matches its unit."""
    from dse.analytic.evaluator import AnalyticEvaluator

    suffixes = {"_gib": "GiB", "_gb": "GB", "_j": "J", "_w": "W", "_mwh": "MWh", "_c": "degC"}
    evaluator = AnalyticEvaluator()
    wrong = []
    items = [*evaluator.metrics.values(), *evaluator.inputs.values()]
    assert len(items) > 150
    for item in items:
        for suffix, expected in suffixes.items():
            per = item.name.endswith(f"_per{suffix}")  # tokens_per_j: a rate, not a J
            if item.name.endswith(suffix) and not per and item.unit != expected:
                wrong.append(f"{item.name} [{item.unit}]")
        if item.unit == "GiB" and not item.name.endswith("_gib"):
            wrong.append(f"{item.name} [{item.unit}]")
    assert not wrong, wrong
