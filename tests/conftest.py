"""Shared test helpers: write studies into temporary folders and run the real CLI (in this
process: :func:`run_cli`; as a program where a test is about signals, kills, process
lifetimes or the installed script: :func:`run_cli_subprocess`)."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# pytest-xdist's workers set COLUMNS=80 and LINES=24; the tests read output as a piped program
# writes it (dse.cli.app: 160 columns, or COLUMNS where a test sets it), as a run without workers does
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
TOY = "dse.evaluators.toy:ToyEvaluator"

# The local dask clusters the tests start in this process take their worker processes from a
# fork server: this process runs threads (pytest's, dask's), so dse's start_method "auto"
# would spawn every worker as a fresh interpreter importing dse, dask and pandas again (about
# 2.5 CPU-s for a cluster of two, most of a small test's time); the fork server imports them
# once and forks each worker from that clean, single-threaded copy (a user's dask setting
# other than spawn wins over "auto", as docs/cluster.md says). The programs the tests start
# (`dse run` as a subprocess) keep dse's own choice, and test_executor's fork probe tests
# fork and spawn in a fresh process.
FORKSERVER_PRELOAD = [
    "distributed",
    "dse.execution.base",
    "dse.execution.worker_plugin",
    "dse.evaluators.toy",
    "dse.evaluators.command",
    # the `dse` programs the kill and signal tests start (tests/programs.py) fork from it too
    "dse.cli.app",
    "dse.runner",
    "dse.checks",
    "dse.datasets",
    "programs",
]


def _use_a_fork_server() -> None:
    import dask

    multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)
    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})


_use_a_fork_server()


#: the files whose tests take longest (summed, on 2 cores), longest first. pytest-xdist hands
#: out whole files (pyproject: --dist loadfile) in the order collected (--no-loadscope-reorder;
#: its default order, most tests first, left these files with few but slow tests to the end,
#: where one worker ran them while the other had finished): slow files first, and the short
#: ones at the end let both workers finish together
SLOW_FILES = (
    "test_resume.py",
    "test_cluster.py",
    "test_signals.py",
    "test_search.py",
    "test_executor.py",
    "test_command_evaluator.py",
    "test_evaluators.py",
    "test_fuzz.py",
    "test_progress.py",
    "test_store.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))  # stable


@pytest.fixture(scope="session", autouse=True)
def _fork_server_started_clean():
    """The fork server started (in the background) before any test changes the environment:
    its children, the workers, inherit the environment it started with, not the test's."""
    from multiprocessing import forkserver

    forkserver.ensure_running()
    yield


def toy_study(**overrides) -> dict:
    """A small study on the toy evaluator: 11 x-values x 3 y-values x 2 shapes = 66 candidates,
    evaluated in the test's process (tests of the dask path set ``execution.workers``)."""
    study = {
        "name": "toy",
        "space": {"x": {"range": [0.0, 1.0], "step": 0.1}, "y": [0, 4, 9], "shape": ["a", "b"]},
        "objectives": [
            {"metric": "f1", "direction": "minimize"},
            {"metric": "f2", "direction": "minimize"},
        ],
        "evaluator": {"name": TOY},
        "search": {"algorithm": "exhaustive", "budget": 100, "seed": 3, "batch_size": 20},
        "execution": {"workers": 0, "chunk_size": 10},  # in this process: no cluster to start
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(study.get(key), dict):
            study[key] = {**study[key], **value}
        else:
            study[key] = value
    return study


def write_study(folder: Path, study: dict, name: str = "study.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


#: variables that change the interpreter itself (its imports, its encoding): a command that
#: needs them runs as a program (:func:`run_cli_subprocess`)
INTERPRETER_ENV = ("PYTHON", "LC_", "LANG")


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``dse ARGS`` in this process (:func:`dse.cli.main`) in the folder ``cwd`` (default:
    the repository), with ``env`` added to the environment for the call (``COLUMNS=200``
    unless given) and its standard output and error captured, as :func:`run_cli_subprocess`
    returns them (``timeout`` is that function's; a call here is not timed). An exception
    that escapes ``main`` is a traceback on stderr and exit code 1, as the program shows it.
    A call that leaves a child process or a non-daemon thread running fails the test."""
    from dse.cli import main

    env = {"COLUMNS": "200", **(env or {})}
    wrong = [k for k in env if k.startswith(INTERPRETER_ENV)]
    if wrong:
        raise ValueError(f"{wrong} change the interpreter: use run_cli_subprocess")
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cwd = os.getcwd()
    children = set(multiprocessing.active_children())
    threads = set(threading.enumerate())
    stdout, stderr = io.StringIO(), io.StringIO()
    os.environ.update(env)
    os.chdir(cwd or REPO)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main([str(a) for a in args])
            except Exception:  # noqa: BLE001 - what the program would print and exit 1 with
                traceback.print_exc(file=sys.stderr)
                code = 1
    finally:
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    left = [p for p in multiprocessing.active_children() if p not in children]
    assert not left, f"dse {' '.join(map(str, args))} left child processes running: {left}"
    running = [
        t for t in threading.enumerate() if t not in threads and t.is_alive() and not t.daemon
    ]
    assert not running, f"dse {' '.join(map(str, args))} left threads running: {running}"
    return subprocess.CompletedProcess(
        ["dse", *map(str, args)], code, stdout.getvalue(), stderr.getvalue()
    )


def run_cli_subprocess(
    *args: str, cwd: Path | None = None, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m dse ARGS`` as a program (``env`` adds variables); returns the completed
    process. For tests about signals, kills, process lifetimes, the interpreter's
    environment or the installed program; every other test calls :func:`run_cli`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dse", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def rows_on_disk(out: Path) -> int:
    """Evaluations in a results folder's log (written files only; temporary ones skipped)."""
    from dse.store import log_file_footer

    folder = out / "evaluations"
    files = sorted(folder.glob("*.arrow")) if folder.is_dir() else []
    return sum(log_file_footer(f)[1] for f in files)


def log_rows(out: Path) -> pd.DataFrame:
    """Every row of a results folder's log, as written (a candidate written twice shows twice)."""
    return pd.concat(
        [pd.read_feather(f) for f in sorted((out / "evaluations").glob("*.arrow"))],
        ignore_index=True,
    )


def front_of(out: Path, columns: tuple[str, ...] = ("x", "y", "shape", "f1", "f2")) -> pd.DataFrame:
    """The Pareto set of a run (``pareto.nc``), sorted by its parameters."""
    import xarray as xr

    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
        df = ds[list(columns)].to_dataframe().reset_index(drop=True)
    if "shape" in df:
        df["shape"] = df["shape"].astype(str)
    params = [c for c in ("x", "y", "shape") if c in df]
    return df.sort_values(params).reset_index(drop=True)


@pytest.fixture
def toy_study_file(tmp_path: Path) -> Path:
    return write_study(tmp_path, toy_study(output=str(tmp_path / "out")))


#: GPT-3 175B on 1,024 A100s, TP 8 x PP 8 with sequence parallelism: 16 replicas, so 16
#: sequences (32k tokens) are one micro-batch each, at its 1,536-sequence batch (Brown et al.
#: 2020; Narayanan et al. 2021's layout) - the schedule, trajectory and clock-plan tests' run
GPT3_A100 = dict(
    model="gpt3-175b",
    accelerator="A100-80GB",
    num_accelerators=1024,
    tensor_parallel=8,
    pipeline_parallel=8,
    sequence_parallel=True,
    micro_batch_size=1,
    global_batch_size=1536,
)


def run_quickstart(tmp: Path) -> Path:
    """The quickstart study (analytic evaluator, 400 candidates) run in this process into
    ``tmp/out``."""
    study = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    study["execution"] = {"workers": 0}
    out = tmp / "out"
    proc = run_cli("run", str(write_study(tmp, {**study, "output": str(out)})), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return out
