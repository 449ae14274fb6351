"""Executors: in this process and on real dask clusters (a local one, a separately started
scheduler); cluster profiles and scheduler addresses checked before anything runs."""

from __future__ import annotations

import pandas as pd
import pytest
import xarray as xr
from dask.distributed import LocalCluster

from conftest import REPO, run_cli, toy_study, write_study
from dse.errors import StudyError
from dse.execution import ExecutionPlan, make_executor, plan_execution
from dse.execution.plan import find_profile, load_profile
from dse.study import EvaluatorSpec, ExecutionSpec

TOY = EvaluatorSpec(name="dse.evaluators.toy:ToyEvaluator", options={"fail_above_x": 0.5})


def test_shipped_profiles_load():
    local = load_profile(find_profile("local", REPO / "studies" / "quickstart.yaml"))
    assert local.workers == 2
    assert load_profile(REPO / "workers" / "cluster.yaml").scheduler.startswith("tcp://")


def test_unknown_profile_and_bad_keys_are_clear_errors(tmp_path):
    study_file = tmp_path / "study.yaml"
    with pytest.raises(StudyError, match="cluster profile 'nope' not found"):
        plan_execution(ExecutionSpec(profile="nope"), study_path=study_file)
    (tmp_path / "odd.yaml").write_text("workerz: 3\n")
    with pytest.raises(StudyError, match="unknown key 'workerz' in cluster profile; allowed: description, scheduler"):
        plan_execution(ExecutionSpec(profile="odd"), study_path=study_file)


@pytest.mark.parametrize("workers", [0, 1], ids=["in-process", "dask"])
def test_evaluator_errors_become_failed_rows_in_input_order(workers):
    cands = pd.DataFrame({"x": [0.1, 0.2, 0.9, 0.3], "y": 0, "shape": "a"})
    plan = ExecutionPlan(workers=workers, scheduler=None, chunk_size=2)
    with make_executor(plan, TOY) as ex:
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


@pytest.mark.parametrize("address", ["garbage", "tcp://host", "tcp://host:port", "http//x:1", "host: 8786"])
def test_a_malformed_scheduler_address_is_refused(address):
    with pytest.raises(StudyError, match="execution.scheduler: not a dask scheduler address"):
        plan_execution(ExecutionSpec(scheduler=address))


@pytest.mark.parametrize("address", ["tcp://10.0.0.1:8786", "node-3.cluster:8786", "tls://[::1]:8786"])
def test_well_formed_scheduler_addresses_pass(address):
    assert plan_execution(ExecutionSpec(scheduler=address)).scheduler == address


def test_validate_and_run_refuse_a_malformed_address_alike_and_run_leaves_no_folder(tmp_path):
    study = write_study(tmp_path, toy_study(output=str(tmp_path / "out"), execution={"scheduler": "garbage"}))
    for command in ("validate", "run"):
        proc = run_cli(command, str(study))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "execution.scheduler: not a dask scheduler address (got 'garbage')" in proc.stderr
    assert not (tmp_path / "out").exists()
