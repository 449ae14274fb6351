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


#: The suite's schedule (pyproject: -n auto --dist loadscope, with the scopes of
#: :func:`pytest_xdist_make_scheduler`). Most of the slow tests wait: on a run they stop or
#: kill mid-batch, a grace period, a program's start. So there are two workers per core
#: (:func:`pytest_xdist_auto_num_workers`), and tests go out one at a time, the longest first,
#: so that no worker is left with a long tail while the others are idle (pytest-xdist hands
#: out work in the order collected: --no-loadscope-reorder). The tests of a file in
#: MODULE_FIXTURE_FILES go out together (its module-scoped fixtures computed once), except
#: those LONGEST_FIRST names alone. LONGEST_FIRST lists, longest first (on 2 busy cores),
#: tests (``file::name``, every parameter) and files (their other tests); the rest follow in
#: the order collected.
LONGEST_FIRST = (
    "test_report.py",
    "test_calibration.py",
    "test_polish.py::test_the_polish_finds_the_exact_front_of_a_small_three_objective_space",
    "test_resume.py::test_kill_9_at_several_points_then_resume_equals_an_uninterrupted_run",
    "test_evaluators.py::test_a_candidate_that_kills_its_dask_workers_fails_alone_in_one_line",
    "test_cluster.py",
    "test_run.py",
    "test_search.py::test_state_is_json_and_a_restored_driver_asks_the_same_next_batches",
    "test_cluster.py::test_a_worker_killed_mid_run_loses_and_repeats_nothing",
    "test_executor.py::test_a_fork_safe_evaluator_gets_forked_workers_unless_the_study_says_spawn",
    "test_progress.py::test_output_to_a_closed_stream_a_closed_pipe_or_an_ascii_terminal_is_no_traceback",
    "test_search.py::test_search_drivers_find_the_known_front_without_repeats",
    "test_fuzz.py::test_fuzz_studies",
    "test_search.py::test_same_candidates_and_front_whatever_the_worker_count",
    "test_store.py::test_ctrl_c_while_a_dataset_is_written_stops_at_once_and_the_next_write_works",
    "test_resume.py",
    "test_plugins.py",
    "test_resume.py::test_a_batch_stopped_half_written_counts_on_resume",
    "test_resume.py::test_kill_9_in_the_polish_then_resume_equals_an_uninterrupted_run",
    "test_sensitivity.py",
    "test_case_study.py",
    "test_executor.py::test_a_plugin_evaluator_past_its_time_out_fails_that_row_only",
    "test_cluster.py::test_a_study_runs_on_workers_started_over_ssh",
    "test_resume.py::test_a_write_the_file_system_refuses_is_one_line_with_the_resume_hint",
    "test_command_evaluator.py::test_the_program_runs_on_dask_workers_too",
    "test_search.py::test_a_new_run_refuses_an_optuna_study_name_its_database_holds_before_touching_the_folder",
    "test_progress.py::test_dse_status_shows_a_run_in_progress_from_another_terminal",
    "test_command_evaluator.py::test_a_failing_candidate_fails_alone_with_the_programs_stderr",
    "test_search.py::test_optuna_asks_every_candidate_once_and_stops_when_the_budget_exceeds_the_space",
    "test_cluster.py::test_every_worker_gone_stops_after_the_grace_period_and_resume_goes_on",
    "test_cluster.py::test_a_lost_scheduler_stops_the_run_and_resume_goes_on_with_a_new_one",
    "test_store.py",
    "test_fuzz.py::test_fuzz_results_folders",
    "test_fuzz.py::test_fuzz_profiles",
    "test_executor.py::test_importing_a_cluster_class_leaves_ctrl_c_to_dse",
    "test_search.py::test_mixed_continuous_space_with_infeasible_and_failed_rows",
    "test_cf.py",
    "test_compare.py",
    "test_validate_model.py",
    "test_signals.py",
    "test_command_evaluator.py",
    "test_executor.py",
)

#: tests that run last and alone (a worker of their own, at the end, when the other workers are
#: finishing): the report's browser test asserts that a redraw takes about 100 ms, which a
#: browser sharing 2 cores with 3 busy workers (two per core) did not meet (200-330 ms)
LAST = ("test_report.py::test_report_in_a_real_browser",)

#: the files with fixtures of module scope (a test that uses one and is not in such a file
#: fails the collection: its fixture would be computed on every worker)
MODULE_FIXTURE_FILES = frozenset(
    {
        "test_calibration.py",
        "test_case_study.py",
        "test_cf.py",
        "test_cluster.py",
        "test_compare.py",
        "test_plugins.py",
        "test_records.py",
        "test_report.py",
        "test_resume.py",
        "test_run.py",
        "test_sensitivity.py",
        "test_store.py",
        "test_trajectory.py",
        "test_units.py",
        "test_validate_energy.py",
        "test_validate_model.py",
    }
)


def _uses_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return any(
        defs and defs[-1].scope in ("module", "package")
        for defs in (info.name2fixturedefs.values() if info else ())
    )


def _name(nodeid: str) -> tuple[str, str]:
    """``tests/test_x.py::test_y[p]`` -> (``test_x.py``, ``test_x.py::test_y``)."""
    path, _, test = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    return file, f"{file}::{test.split('[')[0]}"


def pytest_collection_modifyitems(config, items) -> None:
    rest = len(LONGEST_FIRST)  # then the rest, in the order collected, then LAST
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)} | {name: rest + 1 for name in LAST}
    for item in items:
        file, name = _name(item.nodeid)
        if file not in MODULE_FIXTURE_FILES and _uses_a_module_fixture(item):
            raise pytest.UsageError(
                f"{item.nodeid} uses a module fixture: add {file} to MODULE_FIXTURE_FILES"
            )
    items.sort(
        key=lambda item: rank.get(_name(item.nodeid)[1], rank.get(_name(item.nodeid)[0], rest))
    )


def pytest_xdist_make_scheduler(config, log):
    """Scopes: a test alone, or the tests of a MODULE_FIXTURE_FILES file together (but for
    those LONGEST_FIRST and LAST name alone)."""
    from xdist.scheduler import LoadScopeScheduling

    alone = {*LONGEST_FIRST, *LAST}

    class OneAtATime(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file, name = _name(nodeid)
            if file in MODULE_FIXTURE_FILES and name not in alone:
                return nodeid.partition("::")[0]
            return nodeid

    return OneAtATime(config, log)


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: two workers per core (most slow tests wait rather than compute)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 2 * (cores or 1)


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
