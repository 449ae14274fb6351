"""The command evaluator: a real external program (tests/programs/front_sim.py) evaluates
chunks of candidates; its front is known (every x with y = 0). One failing candidate fails
alone with the program's stderr in its message; a hanging one is stopped by the time-out."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from conftest import REPO, run_cli, write_study
from dse.evaluators import load_evaluator
from dse.execution import ExecutionPlan, make_executor
from dse.study import EvaluatorSpec
from programs import start_program

PROGRAM = str(REPO / "tests" / "programs" / "front_sim.py")
XS = np.round(np.arange(0, 1.0001, 0.1), 10)


def _options(fmt: str = "csv", files: bool = False) -> dict:
    command = ["{python}", PROGRAM, fmt] + (["{input}", "{output}"] if files else [])
    return {
        "command": command,
        "format": fmt,
        "input": "file" if files else "stdin",
        "output": "file" if files else "stdout",
        "inputs": {"x": {"minimum": 0, "maximum": 1}, "y": {"kind": "int", "minimum": 0}},
        "metrics": {"f1": "1", "f2": {"unit": "1", "long_name": "second objective"}},
    }


def _study(tmp_path, ys, *, fmt="csv", files=False, timeout_s=None, workers=0) -> dict:
    evaluator = {"name": "command", "options": _options(fmt, files)}
    if timeout_s:
        evaluator["timeout_s"] = timeout_s
    return {
        "name": "sim",
        "space": {"x": {"range": [0.0, 1.0], "step": 0.1}, "y": ys},
        "objectives": [{"metric": "f1"}, {"metric": "f2"}],
        "evaluator": evaluator,
        "search": {"algorithm": "exhaustive", "budget": 100, "batch_size": 50},
        "execution": {"workers": workers, "chunk_size": 8},
        "output": str(tmp_path / "out"),
    }


def _front(out) -> pd.DataFrame:
    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
        return ds[["x", "y", "f1", "f2"]].to_dataframe().sort_values("x").reset_index(drop=True)


def _log(out) -> pd.DataFrame:
    return pd.concat(
        [pd.read_feather(f) for f in sorted((out / "evaluations").glob("*.arrow"))],
        ignore_index=True,
    )


@pytest.mark.parametrize(
    "fmt,files", [("csv", False), ("json", True)], ids=["csv-stdin", "json-files"]
)
def test_a_study_on_an_external_program_finds_its_known_front(tmp_path, fmt, files):
    study = write_study(tmp_path, _study(tmp_path, [0, 4, 9], fmt=fmt, files=files))
    proc = run_cli("run", str(study), "--quiet")
    assert proc.returncode == 0, proc.stderr
    front = _front(tmp_path / "out")
    assert list(front["y"]) == [0] * len(XS)
    np.testing.assert_allclose(front["x"], XS)
    np.testing.assert_allclose(front["f2"], 1 - np.sqrt(XS))
    log = _log(tmp_path / "out")
    assert len(log) == 33 and (log["status"] == "ok").all()
    hot = log[(log["y"] == 4) & (log["x"] > 0.5)]
    assert len(hot) == 5 and not hot["feasible"].any() and (hot["reason"] == "too hot").all()


def test_a_failing_candidate_fails_alone_with_the_programs_stderr(tmp_path):
    study = write_study(tmp_path, _study(tmp_path, [0, 13]))
    proc = run_cli("run", str(study), "--quiet")
    assert proc.returncode == 0, proc.stderr
    log = _log(tmp_path / "out")
    failed = log[log["status"] == "failed"]
    assert sorted(failed["y"].unique()) == [13] and len(failed) == len(
        XS
    )  # every y = 13, nothing else
    assert (log.loc[log["y"] == 0, "status"] == "ok").all()
    message = failed["error"].iloc[0]
    assert (
        "front_sim.py exited with code 3" in message
        and "front_sim: cannot simulate y=13" in message
    )
    assert list(_front(tmp_path / "out")["y"]) == [0] * len(XS)


def test_a_hanging_candidate_is_stopped_by_the_time_out(tmp_path):
    spec = EvaluatorSpec(name="command", options=_options(), timeout_s=0.5)
    cands = pd.DataFrame({"x": [0.1, 0.2, 0.3, 0.4], "y": [0, 99, 0, 0]})
    with make_executor(ExecutionPlan(workers=0, chunk_size=4), spec) as ex:
        out = ex.evaluate(cands)
    assert list(out["status"]) == ["ok", "failed", "ok", "ok"]
    assert "gave no result within 0.5 s (evaluator.timeout_s)" in out.loc[1, "error"]
    assert "front_sim: 1 candidates" in out.loc[1, "error"]  # what it wrote to stderr is kept
    np.testing.assert_allclose(out.loc[[0, 2, 3], "f1"], [0.1, 0.3, 0.4])


def test_the_program_gets_the_inputs_in_the_order_the_study_declares_them():
    """A program may read its columns by position: the order the study declares, also where
    the evaluator is rebuilt from what travels to a worker (it was alphabetical)."""
    from dse.execution.base import EvaluatorRef, _evaluator

    options = _options()
    options["inputs"] = {"y": options["inputs"]["y"], "x": options["inputs"]["x"]}
    ref = EvaluatorRef.of(EvaluatorSpec(name="command", options=options))
    assert list(_evaluator(ref.name, ref.options_yaml).inputs) == ["y", "x"]


@pytest.mark.parametrize("workers", [0, 1], ids=["in-process", "dask-worker"])
def test_stopping_a_run_stops_the_program_it_is_waiting_for(tmp_path, workers):
    """The program runs in its own session (a time-out kills its whole group), so the
    signal that stops dse does not reach it: dse kills it, in its own process or on a
    worker that closes."""
    pids = tmp_path / "pids"
    study = write_study(tmp_path, _study(tmp_path, [77], workers=workers))
    proc = start_program(
        "run", str(study), "--quiet", "--no-dashboard", env={"FRONT_SIM_PIDS": str(pids)}
    )
    deadline = time.monotonic() + 60
    while not (pids.is_file() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids.is_file(), proc.communicate(timeout=30)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err, err
    running = _still_running(pids, within_s=1.0)
    for pid in running:  # do not leave them behind whatever the outcome
        os.kill(pid, signal.SIGKILL)
    assert not running, f"programs still running after the run stopped: {running}"


def test_programs_stopped_for_a_closing_worker_do_not_stop_later_calls_in_the_process():
    """A notebook that ran on a thread-based cluster, closed it, and evaluates again."""
    from dse.evaluators.command import stop_programs

    stop_programs()  # what a closing worker of this process does
    spec = EvaluatorSpec(name="command", options=_options())
    with make_executor(ExecutionPlan(workers=0, chunk_size=4), spec) as ex:
        out = ex.evaluate(pd.DataFrame({"x": [0.1, 0.2], "y": [0, 0]}))
    assert list(out["status"]) == ["ok", "ok"], list(out["error"])


def test_a_second_run_on_a_running_cluster_still_runs_programs(tmp_path):
    """Stopping a run's programs is tied to the worker that closes: a running cluster's
    workers go on and run the next run's programs."""
    from dask.distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        for run in ("first", "second"):
            study = _study(tmp_path / run, [0, 4])
            study["execution"] = {"scheduler": cluster.scheduler_address, "chunk_size": 8}
            (tmp_path / run).mkdir()
            proc = run_cli(
                "run", str(write_study(tmp_path / run, study)), "--quiet", "--no-dashboard"
            )
            assert proc.returncode == 0, proc.stderr
            log = _log(tmp_path / run / "out")
            assert len(log) == 22 and (log["status"] == "ok").all(), log.loc[
                log["status"] != "ok", "error"
            ].head()


def test_the_program_runs_on_dask_workers_too(tmp_path):
    study = write_study(tmp_path, _study(tmp_path, [0, 13], workers=1))
    proc = run_cli("run", str(study), "--quiet", "--no-dashboard")
    assert proc.returncode == 0, proc.stderr
    log = _log(tmp_path / "out")
    assert log["key"].is_unique and len(log) == 22
    assert set(log.loc[log["status"] == "failed", "y"]) == {13}


@pytest.mark.parametrize(
    "change,field,expected",
    [
        (
            lambda o: o.update(command=["/no/such/simulator"]),
            "evaluator.options.command",
            "program '/no/such/simulator' not found",
        ),
        (lambda o: o.update(format="xml"), "evaluator.options.format", "'csv' or 'json'"),
        (
            lambda o: o["inputs"]["x"].update(kind="complex"),
            "evaluator.options.inputs.x.kind",
            "complex",
        ),
        (lambda o: o.update(metrics={}), "evaluator.options.metrics", "at least 1"),
        (lambda o: o.update(speed=3), "evaluator.options", "unknown key 'speed'"),
        (
            lambda o: o.update(command=[str(REPO / "tests" / "programs" / "front_sim.py"), "csv"]),
            "evaluator.options.command",
            "is not executable",
        ),
        (
            lambda o: o.update(command=["{python}", "no_such_sim.py", "csv"]),
            "evaluator.options.command",
            "script no_such_sim.py not found in the current folder",
        ),
        (
            lambda o: o.update(workdir="/no/such/folder"),
            "evaluator.options.workdir",
            "does not exist",
        ),
        (
            lambda o: o.update(output="file"),
            "evaluator.options",
            "output: file needs '{output}' in the command",
        ),
        (
            lambda o: o.update(command=o["command"] + ["{input}"]),
            "evaluator.options",
            "the command has '{input}', which is a path only with input: file",
        ),
        (
            lambda o: o["inputs"]["x"].update(minimum=1, maximum=0),
            "evaluator.options.inputs.x",
            "minimum (1) is above maximum (0)",
        ),
        (
            lambda o: o["inputs"]["y"].update(choices=["a", "b"]),
            "evaluator.options.inputs.y",
            "choices: expected a number ('a' for a int input",
        ),
        (
            lambda o: o["inputs"]["x"].update(default=2),
            "evaluator.options.inputs.x",
            "default: value out of range",
        ),
        (
            lambda o: o["metrics"].update(feasible="1"),
            "evaluator.options.metrics",
            "'feasible' is not a metric",
        ),
        (
            lambda o: o["metrics"].update(kept="1"),
            "evaluator.options.metrics",
            "'kept' is not a metric",
        ),
        (
            lambda o: o["inputs"].update(batch={"kind": "int", "default": 1}),
            "evaluator.options.inputs",
            "'batch' is not an input: dse writes",
        ),
        (
            lambda o: o["metrics"].update(x="1"),
            "evaluator.options",
            "'x' is both an input and a metric",
        ),
        (  # names the results' netCDF files cannot hold: refused before the run, not at its end
            lambda o: o["metrics"].update({"energy/J": "J"}),
            "evaluator.options.metrics",
            "'energy/J': a name holds no '/'",
        ),
        (
            lambda o: o["metrics"].update({"-loss": "1"}),
            "evaluator.options.metrics",
            "'-loss': a name starts with a letter",
        ),
        (
            lambda o: o["metrics"].update({"m" * 300: "1"}),
            "evaluator.options.metrics",
            "at most 256 bytes",
        ),
        (
            lambda o: o["inputs"].update({"z ": {"kind": "int", "default": 1}}),
            "evaluator.options.inputs",
            "does not end in a space",
        ),
        (
            lambda o: o.update(command=["front_sim.py"], workdir=str(REPO / "tests" / "programs")),
            "evaluator.options.command",
            "not found on PATH; a program in",
        ),
        (
            lambda o: o["inputs"].update(z={"kind": "str", "choices": ["a", "b"], "default": "c"}),
            "evaluator.options.inputs.z",
            "default: 'c' is not one of the choices",
        ),
    ],
)
def test_bad_options_are_one_line_errors_at_validate(tmp_path, change, field, expected):
    options = _options()
    change(options)
    study = _study(tmp_path, [0])
    study["evaluator"]["options"] = options
    proc = run_cli("validate", str(write_study(tmp_path, study)))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert field in proc.stderr and expected in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_space_parameter_is_checked_against_the_declared_inputs(tmp_path):
    study = _study(tmp_path, [0])
    study["space"]["z"] = [1, 2]
    proc = run_cli("validate", str(write_study(tmp_path, study)))
    assert proc.returncode == 2
    assert "space.z: unknown parameter 'z' for evaluator 'command'; allowed: x, y" in proc.stderr


def test_declared_units_reach_describe_and_the_evaluator():
    ev = load_evaluator(EvaluatorSpec(name="command", options=_options()))
    assert ev.metrics["f2"].long_name == "second objective" and ev.inputs["y"].kind == "int"
    assert ev.version == "1"
    with pytest.raises(ValueError, match="front_sim.py wrote 1 rows for 2 candidates"):
        ev._read(b"f1,f2\n1,2\n", 2)
    assert sys.executable in ev.args


def test_describe_shows_a_command_evaluator_as_a_study_configures_it(tmp_path):
    path = write_study(tmp_path, _study(tmp_path, [0, 1]))
    proc = run_cli("describe", "--study", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "parameters of evaluator 'command'" in proc.stdout and "second objective" in proc.stdout
    proc = run_cli("describe", "-e", "command")
    assert (
        proc.returncode == 2
        and "dse describe --study STUDY" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def test_evaluate_runs_candidates_as_a_run_does_failures_and_time_limit_included(tmp_path):
    """A program that fails on one candidate or runs past evaluator.timeout_s fails that
    candidate (status, error), the others are evaluated; no traceback, no hang."""
    path = write_study(tmp_path, _study(tmp_path, [0, 1], timeout_s=2))
    cands = tmp_path / "cands.csv"
    cands.write_text("x,y\n0.5,0\n0.5,13\n0.5,99\n0.2,1\n")
    proc = run_cli(
        "evaluate", str(path), "-c", str(cands), "-o", str(tmp_path / "out.csv"), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 failed: see the error column" in proc.stdout
    out = pd.read_csv(tmp_path / "out.csv")
    assert list(out["status"] == "ok") == [True, False, False, True]
    assert "exited with code 3" in out["error"][1] and "no result within 2 s" in out["error"][2]
    assert out["f1"][[0, 3]].notna().all()
    cands.write_text(
        "x,y\n0.5,13\n"
    )  # nothing evaluated: a failure for scripts, the error kept in the file
    proc = run_cli(
        "evaluate", str(path), "-c", str(cands), "-o", str(tmp_path / "out.csv"), timeout=60
    )
    assert (
        proc.returncode == 2
        and "every candidate failed" in proc.stderr
        and "Traceback" not in proc.stderr
    )
    assert pd.read_csv(tmp_path / "out.csv")["status"].tolist() == ["failed"]


@pytest.mark.parametrize(
    "output,expected",
    [
        (b"f1,f2,feasible\n0.1,0.2,maybe\n", "wrote 'maybe' in the column feasible"),
        (b"f1,f1,f2\n0.1,0.1,0.2\n", "wrote the column f1 twice"),
        (b"f1,f2\nabc,0.2\n", "wrote 'abc' for the metric f1: not a number"),
    ],
)
def test_what_a_program_writes_wrong_is_named_with_the_program_and_column(output, expected):
    from dse.evaluators.command import CommandEvaluator

    with pytest.raises(ValueError, match=expected):
        CommandEvaluator(**_options())._read(output, 1)


def test_a_feasible_row_without_a_number_is_infeasible_with_a_reason():
    from dse.evaluators.command import CommandEvaluator

    ev = CommandEvaluator(**_options())
    out = ev._read(b"f1,f2\n0.1,\n0.2,0.3\n", 2)
    assert list(out["feasible"]) == [False, True]
    assert out["reason"][0] == "front_sim.py wrote no finite number for f2"
    # an empty feasible cell is not feasible; other columns (f1.std) are the program's own
    out = ev._read(b"f1,f1.std,f2,feasible\n0.1,0.01,0.2,\n0.2,0.01,0.3,True\n", 2)
    assert list(out["feasible"]) == [False, True]
    out = CommandEvaluator(**_options("json"))._read(
        b'[{"f1": 0.1, "f2": 0.2, "feasible": " "}, {"f1": 0.2, "f2": 0.3, "feasible": null}]', 2
    )
    assert list(out["feasible"]) == [False, False]
    with pytest.raises(
        ValueError, match="wrote the column f1 twice"
    ):  # a byte-order mark does not hide it
        ev._read("\ufefff1,f1,f2\n0.1,0.1,0.2\n".encode(), 1)


def test_a_program_given_by_its_path_runs_from_its_workdir(tmp_path):
    from dse.evaluators.command import CommandEvaluator

    (tmp_path / "sim").mkdir()
    script = tmp_path / "sim" / "run.sh"
    script.write_text("#!/bin/sh\nexec " + sys.executable + " " + PROGRAM + " csv\n")
    script.chmod(0o755)
    options = {**_options(), "command": ["./run.sh"], "workdir": str(tmp_path / "sim")}
    ev = CommandEvaluator(**options)
    out = ev.evaluate(pd.DataFrame({"x": [0.25], "y": [0]}))
    assert out["f1"].tolist() == [0.25]


def _shell_options(script: str) -> dict:
    """A command evaluator whose program is ``sh -c script`` (the candidates on its stdin)."""
    return {**_options(), "command": ["sh", "-c", script]}


def _still_running(pids, within_s: float) -> list[int]:
    """The processes listed in the file ``pids`` that have not ended within ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        running = [pid for pid in map(int, pids.read_text().split()) if _alive(pid)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except OSError:
        return False


@pytest.mark.skipif(
    not os.path.isdir("/proc"), reason="reads /proc to find the program's processes"
)
@pytest.mark.parametrize(
    "script",
    [
        "echo $$ > {pids}; sleep 600 & echo $! >> {pids}; sleep 600",  # runs past its time-out
        "echo $$ > {pids}; sleep 600 & echo $! >> {pids}; printf 'f1,f2\\n0.1,0.2\\n'",  # answers, leaves a child
        "echo $$ > {pids}; set -m; sleep 600 & echo $! >> {pids}; sleep 600",  # the child in a group of its own
    ],
    ids=["hangs", "answers-and-leaves-a-child", "child-in-its-own-group"],
)
def test_a_program_that_leaves_a_background_child_is_stopped_at_its_time_out_with_the_child(
    tmp_path, script
):
    """The time-out held whatever the program left behind: a background ``sleep 600`` kept
    its standard output open and the call waited for it (2 s became 66 s and 606 s). The
    program's whole session is killed at the time-out, and a child it leaves behind when it
    answers is killed a moment after it exits."""
    from dse.evaluators.command import CommandEvaluator

    pids = tmp_path / "pids"
    ev = CommandEvaluator(**_shell_options(script.format(pids=pids)))
    start = time.monotonic()
    try:
        out = ev.evaluate(pd.DataFrame({"x": [0.1], "y": [0]}), timeout_s=2)
        assert out["f1"].tolist() == [0.1]
    except TimeoutError as exc:
        assert "gave no result within 2 s" in str(exc)
    assert time.monotonic() - start < 6
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    deadline = time.monotonic() + 2
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in started)


def test_a_program_that_prints_too_much_fails_past_the_documented_limit(tmp_path):
    """64 MiB of standard output took a run to 1.9 GB: what a call reads is bounded
    (``output_limit_mb``), and a program past it fails in one line, stopped, not read on."""
    from dse.evaluators.command import OUTPUT_LIMIT_MB, CommandEvaluator

    assert OUTPUT_LIMIT_MB == 64
    options = {
        **_shell_options("cat > /dev/null; printf 'f1,f2\\n'; yes 0.1,0.2"),
        "output_limit_mb": 1,
    }
    start = time.monotonic()
    with pytest.raises(
        RuntimeError,
        match=r"wrote more than 1 MB to its standard output "
        r"\(evaluator.options.output_limit_mb\); stopped",
    ):
        CommandEvaluator(**options).evaluate(pd.DataFrame({"x": [0.1], "y": [0]}), timeout_s=30)
    assert time.monotonic() - start < 10
    # in a run, the candidate fails alone with that message (a failure row), the others go on
    spec = EvaluatorSpec(
        name="command",
        options={
            **options,
            "command": [
                "sh",
                "-c",
                "read h; read x y; case $x in 0.2*) yes 0.1,0.2;; esac; printf 'f1,f2\\n'; echo $h > /dev/null; "
                "echo 0.5,0.5",
            ],
        },
        timeout_s=10,
    )
    with make_executor(ExecutionPlan(workers=0, chunk_size=1), spec) as ex:
        out = ex.evaluate(pd.DataFrame({"x": [0.1, 0.2], "y": [0, 0]}))
    assert list(out["status"]) == ["ok", "failed"]
    assert "wrote more than 1 MB" in out.loc[1, "error"]
    # an output file is measured before it is read
    big = tmp_path / "big.csv"
    options = {
        **_options(files=True),
        "command": ["sh", "-c", f"cp {big} $1", "sh", "{output}"],
        "input": "stdin",
    }
    big.write_bytes(b"f1,f2\n" + b"0.1,0.2\n" * 200_000)
    with pytest.raises(RuntimeError, match=r"wrote 1.\d MB to metrics.csv, more than 1 MB"):
        CommandEvaluator(**{**options, "output_limit_mb": 1}).evaluate(
            pd.DataFrame({"x": [0.1], "y": [0]})
        )


def test_a_programs_reason_text_reaches_the_terminal_with_its_control_characters_escaped(
    tmp_path, capsys, monkeypatch
):
    """status printed an evaluator's reason text raw: escape codes in it retitled the
    terminal or cleared the screen. Every control character is shown as its escape."""
    from dse.outputs.show import format_cell

    awk = (
        'NR==1{print "f1,f2,feasible,reason"; next} '
        '{if ($2>0) printf "%s,1,false,\\033]0;pwned\\007bad\\033[2J\\n", $1; else print $1",0,true,"}'
    )
    study = _study(tmp_path, [0, 1])
    study["evaluator"]["options"]["command"] = ["awk", "-F,", awk]
    path = write_study(tmp_path, study)
    for args in (
        ("run", path, "--quiet"),
        ("status", tmp_path / "out"),
        ("show", tmp_path / "out"),
    ):
        proc = run_cli(*map(str, args))
        out, err = proc.stdout, proc.stderr
        assert proc.returncode == 0, err
        assert "\x1b]" not in out + err and "\x07" not in out + err and "\x1b[2J" not in out + err
    assert "\\x1b]0;pwned\\x07bad\\x1b[2J" in run_cli("status", str(tmp_path / "out")).stdout
    assert format_cell("a\x1b[31mb\x9b") == "a\\x1b[31mb\\x9b"


def test_sigterm_stops_dse_evaluate_with_its_program_and_leaves_no_hidden_output(tmp_path):
    """``dse evaluate`` ended by SIGTERM died where it stood: its program (in a session of
    its own) and its hidden temporary output outlived it."""
    pids = tmp_path / "pids"
    study = write_study(tmp_path, _study(tmp_path, [77]))
    cands = tmp_path / "cands.csv"
    cands.write_text("x,y\n0.5,77\n")
    out = tmp_path / "results"
    out.mkdir()
    proc = start_program(
        "evaluate",
        str(study),
        "-c",
        str(cands),
        "-o",
        str(out / "evaluated.csv"),
        env={"FRONT_SIM_PIDS": str(pids)},
    )
    deadline = time.monotonic() + 60
    while not (pids.is_file() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids.is_file(), proc.communicate(timeout=30)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err and "Traceback" not in err, err
    running = _still_running(pids, within_s=0.5)
    for pid in running:
        os.kill(pid, signal.SIGKILL)
    assert not running and list(out.iterdir()) == []
