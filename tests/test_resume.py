"""Durability: kill -9 of real `dse run` processes, then `dse resume` (Ctrl-C and other
signals: test_signals.py).

Nothing already written is lost, nothing is evaluated twice, and with the same seed the
final front equals the front of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import xarray as xr
import yaml

from background import background_study, start_resume, start_run, wait_for_rows
from conftest import REPO, front_of, log_rows, rows_on_disk, run_cli, toy_study, write_study
from dse.errors import StoreError
from dse.search import available_drivers
from dse.store import ResultStore

ALGORITHMS = [
    a
    for a in ("random", "exhaustive", "nsga2", "optuna-nsga2", "optuna-tpe")
    if a in available_drivers()
]


def _asking_ahead(study: Path) -> Path:
    """The study with its driver's ask_ahead on (NSGA-II, optuna-tpe)."""
    data = yaml.safe_load(study.read_text())
    data["search"]["options"] = {"ask_ahead": True}
    study.write_text(yaml.safe_dump(data))
    return study


@pytest.mark.parametrize(
    "algorithm,workers,ahead",
    [(a, 0, False) for a in ALGORITHMS]
    + [("nsga2", 1, False), ("nsga2", 2, True)]
    + [("optuna-tpe", 0, True)] * ("optuna-tpe" in ALGORITHMS),
    ids=[
        *ALGORITHMS,
        "nsga2-on-dask",
        "nsga2-asking-ahead-on-dask",
        *["optuna-tpe-asking-ahead"] * ("optuna-tpe" in ALGORITHMS),
    ],
)
def test_kill_9_at_several_points_then_resume_equals_an_uninterrupted_run(
    tmp_path, algorithm, workers, ahead
):
    """Every driver in this process; one also on a dask cluster (worker processes in the
    group), and NSGA-II asking ahead there, optuna-tpe in process (killed with a batch asked
    and untold in flight: its state names it, and the resumed run asks it again)."""
    adapt = _asking_ahead if ahead else (lambda path: path)
    reference = tmp_path / "reference"
    study = adapt(background_study(tmp_path, algorithm, reference, 0.0))
    proc = run_cli("run", str(study), "--quiet")
    assert proc.returncode == 0, proc.stderr
    expected = front_of(reference)
    expected_keys = set(log_rows(reference)["key"])

    out = tmp_path / "interrupted"
    study = adapt(
        background_study(tmp_path, algorithm, out, 0.3, workers)
    )  # a group is written mid-batch (1 s)
    for rows in (1, 30):  # kill early, then again in a later batch
        run = start_run(study) if rows == 1 else start_resume(out)
        if ahead and rows == 1:
            # killed once the first batch is told and saved, the second asked ahead and still
            # untold (the search phase ends after it: later there is no batch asked ahead)
            _wait_for_state(out, run, lambda s: s["driver"]["untold"] == [20])
            rows = 20
        else:
            wait_for_rows(out, rows, run)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        assert len(log_rows(out)) >= rows
        ResultStore.open(out).load_evaluations()  # what was written is readable, not corrupt
        if ahead and rows == 20:  # its state names the batch asked and untold
            assert _state(out)["driver"]["untold"] == [20]

    dead = (
        out / "evaluations" / ".b000009-c00000.arrow.999999999.tmp"
    )  # as a killed writer leaves one
    dead.write_bytes(b"half a file")
    done = run_cli("resume", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert not dead.exists()  # the folder's writer removes what dead writers left
    rows = log_rows(out)
    assert rows["key"].is_unique, "a candidate was evaluated twice"
    assert set(rows["key"]) == expected_keys
    pd.testing.assert_frame_equal(front_of(out), expected)


def _wait_for_state(out: Path, run, condition, timeout_s: float = 60) -> None:
    """Until ``state.json`` satisfies ``condition`` (a state it cannot be read from: not yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition(_state(out)):
                return
        except (KeyError, TypeError):
            pass
        assert run.poll() is None and time.monotonic() < deadline, "the state never got there"
        time.sleep(0.02)


def _state(out: Path) -> dict:
    try:
        return json.loads((out / "state.json").read_text())
    except (OSError, ValueError):  # not written yet
        return {}


def test_kill_9_in_the_polish_then_resume_equals_an_uninterrupted_run(tmp_path):
    """The front polish resumes from state.json: killed twice while it polishes (after a
    polish batch was saved, and again later), the resumed run asks what an uninterrupted one
    asks and ends on the same front, with the same label."""

    def study(out: Path, delay_s: float) -> Path:
        path = background_study(tmp_path, "nsga2", out, delay_s)
        data = yaml.safe_load(path.read_text())
        data["search"].update(budget=120, polish={"search_share": 0.3, "batch_size": 5})
        return write_study(tmp_path, data, name=f"{out.name}.yaml")

    reference = tmp_path / "reference"
    assert run_cli("run", str(study(reference, 0.0)), "--quiet").returncode == 0
    out = tmp_path / "interrupted"
    for polished in (5, 25):
        run = start_run(study(out, 0.15)) if polished == 5 else start_resume(out)
        deadline = time.monotonic() + 60
        while _state(out).get("driver", {}).get("polish_asked", 0) < polished:
            assert run.poll() is None and time.monotonic() < deadline, "the polish never started"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        assert _state(out)["driver"]["phase"] == "polish"
    assert run_cli("resume", str(out), "--quiet").returncode == 0
    rows = log_rows(out)
    assert rows["key"].is_unique and set(rows["key"]) == set(log_rows(reference)["key"])
    pd.testing.assert_frame_equal(front_of(out), front_of(reference))
    with (
        xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as a,
        xr.open_dataset(reference / "pareto.nc", engine="h5netcdf") as b,
    ):
        assert (
            a.attrs["front"] == b.attrs["front"]
            and a.attrs["polish_evaluations"] == b.attrs["polish_evaluations"]
        )


def test_auto_enumerating_with_a_chunk_resumes_its_batch_asked_ahead(tmp_path):
    """``auto`` that enumerates (the space fits the budget) with ``search.options.chunk``
    asks its chunks ahead: killed with one asked and untold, the resumed run asks the same
    chunk again (not the default chunk), then the rest, each candidate once."""

    def study(out: Path, delay_s: float) -> Path:
        path = background_study(tmp_path, "exhaustive", out, delay_s)  # 88 candidates
        data = yaml.safe_load(path.read_text())
        data["search"].update(algorithm="auto", options={"chunk": 20})
        return write_study(tmp_path, data, name=f"{out.name}.yaml")

    reference = tmp_path / "reference"
    assert run_cli("run", str(study(reference, 0.0)), "--quiet").returncode == 0
    out = tmp_path / "interrupted"
    run = start_run(study(out, 0.05))  # a chunk of 20 takes 1 s
    _wait_for_state(out, run, lambda s: s["driver"]["untold"] == [20] and s["history"])
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    done = run_cli("resume", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    rows = log_rows(out)
    assert rows["key"].is_unique and set(rows["key"]) == set(log_rows(reference)["key"])
    pd.testing.assert_frame_equal(front_of(out), front_of(reference))


def test_a_batch_stopped_half_written_counts_on_resume(tmp_path):
    """Rows a stopped batch wrote are in the log but not in the driver's saved count: on
    resume they are looked up, and were never counted, so the driver never saw the space
    used up and spent its whole budget asking for more, calling the front approximate."""

    def study(out: Path, delay_s: float) -> Path:
        path = background_study(tmp_path, "nsga2", out, delay_s)
        data = yaml.safe_load(path.read_text())
        data["space"]["x"] = {
            "range": [0.0, 1.0],
            "step": 0.1,
        }  # 88 candidates: all asked, then done
        data["search"].update(
            budget=400, batch_size=40
        )  # 8 chunks a batch: a group is written midway
        return write_study(tmp_path, data, name=f"{out.name}.yaml")

    reference = tmp_path / "reference"
    assert run_cli("run", str(study(reference, 0.0)), "--quiet").returncode == 0
    out = tmp_path / "interrupted"
    run = start_run(
        study(out, 0.3)
    )  # a batch of 40 takes 2.4 s; a group is written after 1 s of it
    deadline = time.monotonic() + 60
    while not (
        _state(out).get("history") and rows_on_disk(out) > _state(out)["history"][-1]["evaluations"]
    ):
        assert run.poll() is None and time.monotonic() < deadline, (
            "no batch was caught half-written"
        )
        time.sleep(0.02)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    status = run_cli(
        "status", str(out), env={"COLUMNS": "400"}
    )  # the counts say the log holds more
    later = rows_on_disk(out) - _state(out)["history"][-1]["evaluations"]
    assert (
        f"as of the last batch told ({later} later evaluations are in the log: `dse resume` counts them)"
        in status.stdout
    ), status.stdout
    assert run_cli("resume", str(out), "--quiet").returncode == 0
    with (
        xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as a,
        xr.open_dataset(reference / "pareto.nc", engine="h5netcdf") as b,
    ):
        assert b.attrs["front"] == "exact" and a.attrs["front"] == "exact", a.attrs["front_detail"]
    assert _state(out)["driver"]["asked"] == _state(reference)["driver"]["asked"] == 88


def test_the_resume_hint_names_a_scheduler_given_on_the_command_line():
    """A scheduler given with --scheduler is not in the study: without it in the hint,
    `dse resume` would run on a local cluster."""
    from dse.execution.plan import ExecutionPlan
    from dse.runner import resume_command

    assert resume_command("results/x", ExecutionPlan(workers=2)) == "dse resume results/x"
    assert (
        resume_command("results/x", ExecutionPlan(workers=0, scheduler="tcp://head:8786"))
        == "dse resume results/x --scheduler tcp://head:8786"
    )


def test_resume_finds_the_cluster_profile_the_run_found_beside_its_study(tmp_path):
    """A project keeps studies/ and workers/ side by side and names a profile by name; the
    results folder's copy of the study is elsewhere, so resume uses the file the run found."""
    project = tmp_path / "project"
    (project / "workers").mkdir(parents=True)
    (project / "workers" / "mysched.yaml").write_text("workers: 0\n")
    (project / "studies").mkdir()
    out = tmp_path / "out"
    study = background_study(project / "studies", "random", out, 0.0)
    data = yaml.safe_load(study.read_text())
    data["execution"] = {"profile": "mysched", "chunk_size": 5}
    study.write_text(yaml.safe_dump(data))
    assert run_cli("run", str(study), "--quiet").returncode == 0
    done = run_cli("resume", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "meta.json").read_text())["profile_path"] == str(
        project / "workers" / "mysched.yaml"
    )


def test_a_live_lock_blocks_a_second_writer_and_a_stale_one_is_recovered(tmp_path):
    out = tmp_path / "out"
    study = background_study(tmp_path, "random", out, 0.0)
    assert run_cli("run", str(study), "--quiet").returncode == 0
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / "lock").write_text(
            json.dumps({"pid": sleeper.pid, "host": socket.gethostname(), "started": "earlier"})
        )
        proc = run_cli("resume", str(out))
        assert proc.returncode == 2 and f"process {sleeper.pid}" in proc.stderr
        assert "resuming" not in proc.stderr and "had finished" not in proc.stderr  # it does not
    finally:
        sleeper.kill()
        sleeper.wait()
    proc = run_cli("resume", str(out), "--quiet")  # the lock's process is dead now: stale
    assert proc.returncode == 0, proc.stderr
    assert not (out / "lock").exists()
    # a run killed with -9 left its lock, and a process started later took its number: stale too
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / "lock").write_text(
            json.dumps(
                {
                    "pid": sleeper.pid,
                    "host": socket.gethostname(),
                    "started": "2026-01-01T00:00:00+00:00",
                }
            )
        )  # before the sleeper
        proc = run_cli("resume", str(out), "--quiet")
        assert proc.returncode == 0, proc.stderr
        assert not (out / "lock").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("finished")
    out = tmp / "out"
    proc = run_cli("run", str(background_study(tmp, "random", out, 0.0)), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Path:
    """Another run of :func:`finished`'s study, with as many evaluations."""
    tmp = tmp_path_factory.mktemp("other")
    proc = run_cli("run", str(background_study(tmp, "random", tmp / "out", 0.0)), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return tmp / "out"


def test_datasets_copied_in_from_another_run_are_refused(finished, other, tmp_path):
    """Another run of the same study with the same number of evaluations: its datasets
    match the log's row count, but not this run's identifier."""
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    for name in ("pareto.nc",):  # every evaluation is read from the log, served with the front
        shutil.copy(other / name, out / name)
    proc = run_cli("status", str(out))
    assert proc.returncode == 0 and "was written by another run" in proc.stdout, proc.stdout
    for command in ("show", "export", "plot"):
        proc = run_cli(command, str(out))
        assert proc.returncode == 2 and "was written by another run" in proc.stderr, (
            command,
            proc.stderr,
        )
    assert run_cli("resume", str(out), "--quiet").returncode == 0
    assert run_cli("show", str(out)).returncode == 0


def test_a_log_file_copied_in_from_another_run_of_the_study_is_refused_by_every_command(
    finished, other, tmp_path
):
    """Same study, same columns: only the run stamp in its name tells the file apart; its
    rows would have joined this run's datasets (and resume would have taken them as done)."""
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    stranger = sorted((other / "evaluations").glob("*.arrow"))[0]
    every = ("status", "show", "export", "plot", "report", "resume")
    for name, commands in (
        (stranger.name.replace("b000000-", "b999999-"), every),  # another stamp
        ("b999999-c00000.arrow", ("status", "resume")),
    ):  # or none (the same check)
        copied = out / "evaluations" / name
        shutil.copy(stranger, copied)
        said = set()
        for command in commands:
            proc = run_cli(command, str(out))
            assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
            said.add(proc.stderr.strip())
        assert len(said) == 1 and "was written by another run" in said.pop()
        copied.unlink()


def _copy(finished: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    return out


def test_leftover_temporary_files_are_ignored(finished, tmp_path):
    out = _copy(finished, tmp_path)
    n = len(ResultStore.open(out).load_evaluations())
    (out / "evaluations" / ".b000009-c00000.arrow.123.tmp").write_bytes(b"ARROW1 torn")
    assert len(ResultStore.open(out).load_evaluations()) == n


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda p: (p / "meta.json").unlink(), "not a dse results folder"),
        (lambda p: (p / "meta.json").write_text('{"format": "dse-res'), "unreadable or truncated"),
        (lambda p: (p / "meta.json").write_text('{"format": "other"}'), "not written by dse"),
        (
            lambda p: (p / "meta.json").write_text(
                '{"format": "dse-results", "format_version": 99}'
            ),
            "newer than this dse",
        ),
        (
            lambda p: (p / "meta.json").write_text(
                '{"format": "dse-results", "format_version": "1"}'
            ),
            "unknown results format",
        ),
        (lambda p: (p / "study.yaml").unlink(), "study.yaml is missing"),
        (
            lambda p: (p / "study.yaml").write_text(
                (p / "study.yaml").read_text().replace("budget:", "budget: 9000 #")
            ),
            "study.yaml was changed after the run started",
        ),
    ],
)
def test_damaged_or_foreign_folders_get_a_clear_error(finished, tmp_path, damage, message):
    out = _copy(finished, tmp_path)
    damage(out)
    with pytest.raises(StoreError, match=message):
        ResultStore.open(out)
    proc = run_cli("resume", str(out))
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_damaged_datasets_evaluations_state_and_lock_are_clear_errors(finished, tmp_path):
    out = _copy(finished, tmp_path)
    (out / "pareto.nc").write_text("junk")
    for args in (("export", str(out), "-o", str(tmp_path / "x.csv")), ("plot", str(out))):
        proc = run_cli(*args)
        assert (
            proc.returncode == 2 and "is damaged" in proc.stderr and "Traceback" not in proc.stderr
        )

    out = _copy(finished, tmp_path / "lock")
    (out / "lock").write_text(json.dumps({"pid": "abc", "host": socket.gethostname()}))
    assert run_cli("status", str(out)).returncode == 0  # an unreadable lock is stale

    out = _copy(finished, tmp_path / "state")
    (out / "state.json").write_text('{"history": [{"x": 1}]}')
    proc = run_cli("status", str(out))
    assert proc.returncode == 2 and "state.json is damaged" in proc.stderr

    out = _copy(finished, tmp_path / "old")
    first = sorted((out / "evaluations").glob("*.arrow"))[0]
    pd.read_feather(first).drop(columns=["key"]).to_feather(first)
    proc = run_cli("resume", str(out))
    assert proc.returncode == 2 and "without the columns ['key']" in proc.stderr


def test_a_log_file_of_another_study_is_refused_by_every_command(finished, tmp_path):
    """A log file copied in from another study would put its rows into this run's datasets."""
    out = _copy(finished, tmp_path / "other-study")
    files = sorted((out / "evaluations").glob("*.arrow"))
    name = files[0].name.replace(
        "b000000-", "b999999-"
    )  # with this run's stamp: only the columns tell
    pd.read_feather(files[0]).rename(columns={"x": "z"}).to_feather(out / "evaluations" / name)
    said = {run_cli(c, str(out)).stderr.strip() for c in ("status", "show", "export", "resume")}
    assert len(said) == 1
    assert (
        f"{name} has no column for the study's parameters ['x']: it belongs to another study"
        in said.pop()
    )


def test_log_files_of_one_run_may_differ_in_other_columns(finished, tmp_path):
    """A plug-in may return columns it does not declare, and the rows of a chunk that failed
    whole have only the declared ones: both are files of the run's log."""
    out = _copy(finished, tmp_path)
    files = sorted((out / "evaluations").glob("*.arrow"))
    assert len(files) > 1
    pd.read_feather(files[0]).assign(note="ok").to_feather(files[0])
    proc = run_cli("status", str(out))
    assert proc.returncode == 0, proc.stderr
    assert run_cli("export", str(out), "--all", "-o", str(tmp_path / "all.csv")).returncode == 0


def test_a_damaged_log_file_says_what_can_be_done(finished, tmp_path):
    out = _copy(finished, tmp_path)
    first = sorted((out / "evaluations").glob("*.arrow"))[0]
    first.write_bytes(first.read_bytes()[:200])
    proc = run_cli("resume", str(out))
    assert proc.returncode == 2 and "is unreadable" in proc.stderr
    assert "restore the file from a copy, or start again with `dse run --overwrite`" in proc.stderr


def test_a_run_that_never_started_leaves_a_folder_the_next_run_may_reuse(tmp_path):
    out = tmp_path / "out"
    study = background_study(tmp_path, "random", out, 0.0)
    text = study.read_text().replace("chunk_size: 5", "chunk_size: 5\n  grace_s: 1")
    study.write_text(text)
    proc = run_cli("run", str(study), "--scheduler", "tcp://127.0.0.1:9", "--quiet")
    assert (
        proc.returncode == 2
        and "cannot reach tcp://127.0.0.1:9 within 1 s (execution.grace_s)" in proc.stderr
    )
    assert "Traceback" not in proc.stderr
    (out / "report.html").write_text("the user's own page")  # dse wrote nothing from that run
    proc = run_cli("run", str(study), "--quiet")  # no --overwrite needed: nothing was evaluated
    assert proc.returncode == 0, proc.stderr
    assert (out / "report.html").read_text() == "the user's own page"


def test_a_results_folder_of_format_2_with_parquet_log_files_is_still_read(finished, tmp_path):
    """Format 3 writes the log as Arrow IPC files; a folder of format 2 (Parquet log files)
    reads the same, through every command."""
    import json

    import pyarrow.parquet as pq

    from dse.store import read_log_file

    out = _copy(finished, tmp_path)
    expected = ResultStore.open(out).load_evaluations()
    for f in sorted((out / "evaluations").glob("*.arrow")):
        pq.write_table(read_log_file(f), f.with_suffix(".parquet"))
        f.unlink()
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps({**meta, "format_version": 2}))
    store = ResultStore.open(out)
    assert all(f.suffix == ".parquet" for f in store.log_files())
    pd.testing.assert_frame_equal(store.load_evaluations(), expected)
    proc = run_cli("status", str(out))
    assert proc.returncode == 0 and f"evaluations {len(expected)}" in proc.stdout, proc.stderr
    proc = run_cli("export", str(out), "-o", str(tmp_path / "front.csv"))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(
    not hasattr(signal, "SIGXFSZ"), reason="needs POSIX file-size limits (RLIMIT_FSIZE)"
)
@pytest.mark.parametrize(
    "limit_bytes", [8_000, 20_000], ids=["log-write-fails", "dataset-write-fails"]
)
def test_a_write_the_file_system_refuses_is_one_line_with_the_resume_hint(tmp_path, limit_bytes):
    """A file-size limit (as a full disk does: the write fails) in the middle of a run: one
    line naming the file, what is stored and how to go on, exit 2 (before: the netCDF
    library's RuntimeError as a traceback, or the bare 'No space left on device'); resume
    then ends the run with every candidate and its datasets."""
    import resource

    out = tmp_path / "out"
    study = write_study(tmp_path, toy_study(output=str(out)))

    def limited():
        signal.signal(
            signal.SIGXFSZ, signal.SIG_IGN
        )  # the write fails (EFBIG) instead of the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    proc = subprocess.run(
        [sys.executable, "-m", "dse", "run", str(study), "--quiet"],
        cwd=REPO,
        text=True,
        capture_output=True,
        preexec_fn=limited,
        timeout=180,
        env={
            **os.environ,
            "PYTHONDONTWRITEBYTECODE": "1",  # no half-written .pyc
            "MPLCONFIGDIR": str(tmp_path / "mpl"),
        },
    )  # nor a font cache
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {out}") or line.startswith(
        f"error: the run is over, but writing its datasets failed: {out}"
    ), line
    assert f"evaluations are stored in {out}: continue with `dse resume {out}`" in line, line
    done = run_cli("resume", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert (out / "pareto.nc").exists() and len(log_rows(out).drop_duplicates("key")) == 66
