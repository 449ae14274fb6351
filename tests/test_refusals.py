"""Inputs that once ended in a traceback, a hang or a silent acceptance (issue 33): each is
refused in one line (exit code 2) naming the file, the field or the value and what is allowed."""

from __future__ import annotations

import shutil
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, run_cli, toy_study, write_study
from dse.execution.base import ClusterLost, WorkerMismatch
from dse.execution.dask_cluster import DaskExecutor
from dse.pareto import EXACT_HYPERVOLUME_OBJECTIVES, HypervolumeTracker

REFERENCE = REPO / "dse" / "analytic" / "data" / "reference" / "published_throughput.csv"


def _refused(proc, *texts: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for text in texts:
        assert text in proc.stderr, (text, proc.stderr)


def test_yaml_nested_a_thousand_levels_deep_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("name: " + "[" * 1000 + "]" * 1000 + "\n")
    _refused(run_cli("validate", path), "deep.yaml", "nested deeper than 64 levels")
    path.write_text("name:\n" + "".join("  " * i + "- \n" for i in range(1, 1000)))
    _refused(run_cli("validate", path), "deep.yaml", "nested deeper")


def test_a_cluster_profile_larger_than_a_profile_may_be_is_refused(tmp_path):
    (tmp_path / "workers").mkdir()
    with open(tmp_path / "workers" / "w.yaml", "wb") as f:
        f.write(b"workers: 2\n")
        f.truncate(2_000_000)  # sparse: no disk used
    s = toy_study(output=str(tmp_path / "out"))
    s["execution"] = {"profile": str(tmp_path / "workers" / "w.yaml")}
    _refused(
        run_cli("validate", write_study(tmp_path, s)),
        "execution.profile",
        "is larger than the 1,000,000 bytes",
    )


def test_a_key_written_twice_is_refused_in_a_study_and_a_cluster_profile(tmp_path):
    study = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    twice = tmp_path / "twice.yaml"
    twice.write_text(study.read_text() + "name: again\n")
    _refused(run_cli("validate", twice), "twice.yaml", "key 'name' appears twice")
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "w.yaml").write_text("workers: 2\nworkers: 3\n")
    s = toy_study(output=str(tmp_path / "out2"))
    s["execution"] = {"profile": str(tmp_path / "workers" / "w.yaml")}
    _refused(
        run_cli("validate", write_study(tmp_path, s, "p.yaml")),
        "execution.profile",
        "key 'workers' appears twice",
    )


@pytest.fixture
def good_profile(tmp_path):
    from synthetic import truth_profile

    return truth_profile(tmp_path / "mine.yaml")


def test_an_accelerator_profile_not_utf8_or_with_a_key_twice_is_refused(tmp_path, good_profile):
    shutil.copy(REPO / "tests" / "data" / "perseus_a100_stage.csv", tmp_path / "sweep.csv")
    text = good_profile.read_text()
    (tmp_path / "bin.yaml").write_bytes(text.encode() + b"\nnotes: \xff\xfe\n")
    name_line = next(line for line in text.splitlines() if line.startswith("name:"))
    (tmp_path / "dup.yaml").write_text(text + name_line + "\n")
    with open(tmp_path / "big.yaml", "wb") as f:  # read whole before: 300 MB took 7 s
        f.write(text.encode())
        f.truncate(2_000_000)  # sparse: no disk used
    for profile, expected in (
        ("bin.yaml", "is not UTF-8"),
        ("dup.yaml", "key 'name' appears twice"),
        ("big.yaml", "larger than the 1,000,000 bytes"),
    ):
        proc = run_cli("calibrate", "sweep.csv", "-a", profile, "-o", "out.yaml", cwd=tmp_path)
        _refused(proc, profile, expected)
        assert not (tmp_path / "out.yaml").exists()


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("grace_s", float("inf"), "expected a finite number"),
        ("grace_s", float("nan"), "expected a finite number"),
        ("start_timeout_s", 1e300, "<= 10000000"),
        ("grace_s", 1e300, "<= 10000000"),
    ],
)
def test_a_wait_that_no_timer_can_hold_is_refused_at_validate(tmp_path, field, value, expected):
    s = toy_study(output=str(tmp_path / "out"))
    s["execution"][field] = value
    _refused(run_cli("validate", write_study(tmp_path, s)), f"execution.{field}", expected)


def test_a_timeout_that_no_timer_can_hold_is_refused_at_validate(tmp_path):
    s = toy_study(output=str(tmp_path / "out"))
    s["evaluator"]["timeout_s"] = float("inf")
    _refused(run_cli("validate", write_study(tmp_path, s)), "evaluator.timeout_s", "finite")


def test_a_meta_json_with_input_files_of_the_wrong_type_is_refused(tmp_path):
    import json

    study = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    assert run_cli("run", study).returncode == 0
    meta = tmp_path / "out" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "input_files": "x"}))
    for command in ("resume", "status", "show"):
        _refused(run_cli(command, tmp_path / "out"), "meta.json", "input_files", "'x'")


def test_the_hypervolume_of_twelve_objectives_is_approximated_in_well_under_a_second():
    rng = np.random.default_rng(0)
    points = rng.random((4000, 12))
    points /= np.linalg.norm(points, axis=1, keepdims=True)  # a sphere: mostly non-dominated
    tracker = HypervolumeTracker()
    start = time.monotonic()
    first = tracker.update(points)
    again = HypervolumeTracker(**tracker.state()).update(points)
    assert time.monotonic() - start < 10  # exact: hours, and Ctrl-C could not stop it
    assert first == again > 0  # deterministic: a resumed run gets the same values
    exact = points[:, : EXACT_HYPERVOLUME_OBJECTIVES + 1][:200]
    tracker = HypervolumeTracker()
    approx = tracker.update(exact)
    import moocore

    z = (exact - tracker.ideal) / (tracker.nadir - tracker.ideal)
    truth = moocore.hypervolume(z, ref=np.ones(z.shape[1]))
    assert approx == pytest.approx(truth, rel=0.02)


def test_a_validation_table_missing_the_setup_it_measured_is_refused(tmp_path):
    df = pd.read_csv(REFERENCE, dtype=str, keep_default_na=False)
    for column in ("framework", "accelerator", "precision", "model"):
        df.drop(columns=[column]).to_csv(tmp_path / "t.csv", index=False)
        _refused(run_cli("validate-model", tmp_path / "t.csv"), "t.csv", f"column {column}")


def test_a_validation_table_with_an_unknown_accelerator_or_a_negative_clock_is_refused(tmp_path):
    df = pd.read_csv(REFERENCE, dtype=str, keep_default_na=False)
    bad = df.copy()
    bad.loc[bad.index[::2], "accelerator"] = "FOO-9000"
    bad.to_csv(tmp_path / "acc.csv", index=False)
    _refused(run_cli("validate-model", tmp_path / "acc.csv"), "unknown accelerator", "FOO-9000")
    bad = df.copy()
    bad.loc[0, "clock_mhz"] = "-1410"
    bad.to_csv(tmp_path / "clock.csv", index=False)
    _refused(run_cli("validate-model", tmp_path / "clock.csv"), "clock_mhz", "-1410")


class _Client:
    """Answers dse's version check as a scheduler would, one answer per call."""

    status = "running"
    _run = None

    def __init__(self, *answers):
        self.answers = list(answers)
        self.workers = 1

    def sync(self, *args, **kwargs):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def scheduler_info(self, n_workers=0):
        return {"n_workers": self.workers}


def _executor(client, grace_s=5.0):
    from distributed.comm.core import CommClosedError

    ex = DaskExecutor.__new__(DaskExecutor)
    ex.client = client
    ex.plan = SimpleNamespace(grace_s=grace_s, scheduler="tcp://127.0.0.1:1", kind="remote")
    ex.ref = SimpleNamespace(dse_version="1", evaluator_version="2", name="toy")
    ex.told = []
    ex.notify = ex.told.append
    return ex, CommClosedError("in <TCP (closed) ConnectionPool.run local=... remote=...>")


def test_a_worker_that_dies_during_the_version_check_does_not_stop_the_run():
    good = {"dse": "1", "evaluator": "2", "host": "h"}
    ex, closed = _executor(None)
    ex.client = _Client({"tcp://a:1": closed, "tcp://b:1": good})
    ex.check_versions()  # the live worker answered: the run goes on
    assert "going on without it" in ex.told[-1]
    ex.told.clear()
    ex.client = _Client({"tcp://a:1": closed}, {"tcp://c:1": good})
    ex.check_versions()  # every worker gone: it waits for one to join and checks again
    assert "waiting for another" in ex.told[0]
    ex.client = _Client({"tcp://a:1": closed})
    ex.plan.grace_s = 0.3
    with pytest.raises(ClusterLost, match="left during dse's version check"):
        ex.check_versions()
    ex.client = _Client({"tcp://a:1": ImportError("No module named 'dse'"), "tcp://b:1": good})
    with pytest.raises(WorkerMismatch, match="cannot run dse"):
        ex.check_versions()  # a worker that answers that it cannot run dse still stops it


def test_a_pipe_a_device_or_an_oversized_file_as_a_study_or_a_table_is_refused_not_read(tmp_path):
    """A named pipe nobody writes to held `dse validate`, `dse evaluate -c` and `dse
    validate-model` forever, /dev/zero read on without end, and a study of any size was read
    whole: each is refused in one line before anything is read."""
    import contextlib
    import os
    import threading

    from dse.study import STUDY_LIMIT_BYTES

    def unblock(fifo):  # were one opened to be read, a writer's open and close end the wait
        def run():
            time.sleep(10)
            with contextlib.suppress(OSError):  # ENXIO: no reader, as it should be
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

        threading.Thread(target=run, daemon=True).start()

    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)
    unblock(pipe)
    for study in (pipe, "/dev/zero"):
        _refused(run_cli("validate", study), str(study), "is a device, pipe or socket, not a file")
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.write(b"name: big\n")
        f.truncate(STUDY_LIMIT_BYTES + 1)  # sparse: no disk used
    _refused(run_cli("validate", big), "big.yaml", f"larger than the {STUDY_LIMIT_BYTES:,} bytes")
    study = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    table = tmp_path / "table.csv"
    os.mkfifo(table)
    unblock(table)
    for args in (
        ("evaluate", study, "-c", table, "-o", tmp_path / "o.csv"),
        ("validate-model", table),
    ):
        _refused(run_cli(*args), "table.csv", "is a device, pipe or socket, not a file")
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "out").exists()
