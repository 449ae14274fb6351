"""The executor on real dask clusters: a cluster profile, and a separately started scheduler."""

from __future__ import annotations

import pandas as pd
import pytest
import xarray as xr
from dask.distributed import LocalCluster

from conftest import REPO, run_cli, toy_study, write_study
from dse.errors import DseError
from dse.executor import Executor, load_profile
from dse.study import EvaluatorSpec, ExecutionSpec


def test_shipped_profiles_load():
    local = load_profile("local", [REPO / "workers"])
    assert local["workers"] == 2
    assert load_profile("cluster", [REPO / "workers"])["scheduler"].startswith("tcp://")


def test_unknown_profile_and_bad_keys_are_clear_errors(tmp_path):
    with pytest.raises(DseError, match="cluster profile 'nope' not found"):
        load_profile("nope", [tmp_path])
    (tmp_path / "odd.yaml").write_text("workerz: 3\n")
    with pytest.raises(DseError, match="unknown keys"):
        load_profile("odd", [tmp_path])


def test_evaluator_errors_become_failed_rows_in_input_order():
    spec = EvaluatorSpec(name="dse.evaluators.toy:ToyEvaluator", options={"fail_above_x": 0.5})
    cands = pd.DataFrame({"x": [0.1, 0.2, 0.9, 0.3], "y": 0, "shape": "a"})
    with Executor(spec, ExecutionSpec(workers=1, chunk_size=2)) as ex:
        out = ex.evaluate(cands)
    assert list(out["status"]) == ["ok", "ok", "failed", "failed"]
    assert out.loc[0, "f1"] == pytest.approx(0.1) and out.loc[1, "f1"] == pytest.approx(0.2)
    assert "toy failure" in out.loc[2, "error"]


def test_run_on_a_separately_started_scheduler(tmp_path):
    out = tmp_path / "out"
    study = write_study(tmp_path, toy_study(output=str(out)))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        proc = run_cli("run", str(study), "--scheduler", cluster.scheduler_address, "--quiet")
    assert proc.returncode == 0, proc.stderr
    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
        assert ds.sizes["candidate"] == 11


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    study = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    proc = run_cli("run", str(study), "--scheduler", "tcp://127.0.0.1:9", "--quiet")
    assert proc.returncode == 2 and "cannot reach dask scheduler" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_cli("run", str(study), "--scheduler", "garbage", "--quiet")
    assert proc.returncode == 2 and "missing port" in proc.stderr and "Traceback" not in proc.stderr
