"""Progress as a run goes: evaluations per second, time left, failures and the best value
of each objective on the progress display, in ``progress.json``, and in `dse status` run
from another terminal while the run goes on."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from conftest import REPO, run_cli, run_cli_subprocess, toy_study, write_study
from dse.cli.pace import progress_lines
from dse.progress import Pace, ProgressReporter, ProgressSink, read_progress
from programs import start_program


def _slow_study(tmp_path, delay: float = 0.02, **evaluator_options):
    study = toy_study(output=str(tmp_path / "out"))
    study["evaluator"]["options"] = {"delay_per_candidate_s": delay, **evaluator_options}
    study["execution"] = {"workers": 0, "chunk_size": 3}
    return write_study(tmp_path, study)


def test_dse_status_shows_a_run_in_progress_from_another_terminal(tmp_path):
    study = _slow_study(
        tmp_path, 0.06, fail_above_x=0.85
    )  # about 4 s; x = 0.9 and 1.0 fail: 12 candidates
    run = start_program("run", str(study), "--quiet")
    out = tmp_path / "out"
    deadline = time.monotonic() + 60
    while True:  # until the running process has written progress with a measured pace
        live = read_progress(out)
        if live and live.get("rate_per_s") and live.get("best"):
            break
        assert run.poll() is None and time.monotonic() < deadline, (
            run.stderr.read() if run.poll() else "no progress"
        )
        time.sleep(0.1)
    status = run_cli("status", str(out))
    run.communicate(timeout=120)
    assert status.returncode == 0, status.stderr
    assert "running (process" in status.stdout
    assert "in progress:" in status.stdout and "of 66 candidates done" in status.stdout
    assert (
        "evaluations/s" in status.stdout
        and " left" in status.stdout
        and "best: f1 " in status.stdout
    )
    assert run.returncode == 0
    final = json.loads((out / "progress.json").read_text())
    assert final["state"] == "finished" and final["done"] == final["total"] == 66
    assert final["failed"] == 12  # the best f2 is at the largest x that did not fail
    assert final["best"] == {"f1": 0.0, "f2": pytest.approx(1 - math.sqrt(0.8))}
    assert final["rate_per_s"] > 0 and final["eta_s"] == 0


def test_dse_status_shows_square_brackets_of_a_note_and_a_study_name_as_written(tmp_path):
    """A note such as 'pip install "dse[dashboard]"' and a results folder with brackets in its
    name are text, not rich markup: `dse status` prints them whole (it dropped '[dashboard]')."""
    import datetime as dt
    import os
    import socket

    out = tmp_path / "out[v2]"
    study = write_study(tmp_path, toy_study(output=str(out)))
    assert run_cli("run", str(study), "--quiet").returncode == 0
    # the folder as a run in progress leaves it: its lock and progress file name a live process (this one)
    me = os.getpid()
    (out / "lock").write_text(
        json.dumps(
            {
                "pid": me,
                "host": socket.gethostname(),
                "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            }
        )
    )
    live = json.loads((out / "progress.json").read_text())
    note = 'dashboard off: it needs bokeh (pip install "dse[dashboard]")'
    (out / "progress.json").write_text(
        json.dumps({**live, "state": "running", "pid": me, "note": note})
    )
    status = run_cli("status", str(out))
    assert status.returncode == 0, status.stderr
    assert f"last note: {note}" in status.stdout, status.stdout
    assert status.stdout.startswith(f"toy in {out}: running (process {me} "), status.stdout


def test_output_that_is_not_a_terminal_gets_plain_progress_lines(tmp_path):
    """stderr redirected (a batch job's log): plain lines, parseable, the last one complete."""
    from dse.progress import LINE

    proc = run_cli("run", str(_slow_study(tmp_path)), env={"COLUMNS": "220"})
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stderr  # no terminal control sequences in a log
    lines = [LINE.search(line) for line in proc.stderr.splitlines() if "candidates done" in line]
    assert lines and all(lines), proc.stderr
    last = lines[-1].groupdict()
    assert last["done"] == last["total"] == "66" and last["percent"] == "100.0"
    assert last["unit"] == "evaluations" and last["rate"] != "?" and last["left"] == "0:00:00"
    assert "feasible 55, failed 0, front 11 points" in proc.stderr


def test_line_progress_writes_every_10_s_or_10_percent_whichever_is_rarer():
    from dse.progress import LINE, LineProgress

    lines, now = [], [0.0]
    sink = LineProgress(lines.append, clock=lambda: now[0])
    sink.start(1000, "s")
    for _ in range(1000):  # one candidate per 0.125 s: 10 % (100 candidates) takes 12.5 s
        now[0] += 0.125
        sink.advance(1, {"rate_per_s": 8.0, "eta_s": 1.0})
    sink.stop()
    done = [int(LINE.search(x)["done"].replace(",", "")) for x in lines[1:]]
    assert done == [100 * k for k in range(1, 11)]  # the last one once
    lines.clear()
    slow = LineProgress(lines.append, clock=lambda: now[0])
    slow.start(1000, "s")
    for _ in range(1000):  # one candidate per 0.0625 s: 10 % takes 6.25 s, a line every 10 s
        now[0] += 0.0625
        slow.advance(1, {})
    slow.stop()
    done = [int(LINE.search(x)["done"].replace(",", "")) for x in lines[1:]]
    assert done == [160 * k for k in range(1, 7)] + [1000]  # every 10 s, and the end
    lines.clear()
    fast = LineProgress(lines.append, clock=lambda: now[0])
    fast.start(1000, "s")
    for _ in range(1000):  # 1,000 candidates in 2 s: 10 % every 0.2 s, a line every 10 s only
        now[0] += 0.002
        fast.advance(1, {})
    fast.stop()
    assert len(lines) == 2  # the start and the end
    assert LINE.search(lines[1])["rate"] == "500.0"  # unmeasured: the mean, once it is over


class _Record(ProgressSink):
    def __init__(self) -> None:
        self.events = []

    def start(self, total, description):
        self.events.append(("start", total))

    def advance(self, n, record):
        self.events.append(("advance", n, dict(record)))


def test_the_reporter_measures_the_pace_and_the_time_left(tmp_path):
    """The pace counts from the first chunk back: the wait for it (start-up) is not the pace."""
    sink = _Record()
    report = ProgressReporter(sink, tmp_path, total=100, every_s=0)
    report.start("s", 0, {})
    time.sleep(0.3)  # start-up: a first chunk that took long
    report.advance(5, {}, evaluated=5)
    assert sink.events[-1][2]["rate_per_s"] is None  # nothing measured yet: no estimate
    before = time.monotonic()
    time.sleep(0.6)
    report.advance(15, {"failed": 1, "best": {"f1": 0.5}}, evaluated=15)
    elapsed_s = time.monotonic() - before
    record = sink.events[-1][2]
    assert 15 / (elapsed_s + 0.05) <= record["rate_per_s"] <= 15 / 0.6
    assert record["eta_s"] == 80 / record["rate_per_s"]
    assert read_progress(tmp_path)["done"] == 20
    pace, best = progress_lines(record)
    assert "evaluations/s · 0:00:0" in pace and "failed 1" in pace and best == "best: f1 0.5"


def test_the_pace_forgets_what_is_older_than_its_window():
    pace = Pace(window_s=0.2)
    pace.add(1000)
    time.sleep(0.6)  # a rate is measured over 0.5 s at least (dse.progress.MIN_SPAN_S)
    pace.add(10)
    assert pace.rate() < 100


def test_a_narrow_terminal_keeps_the_count_and_cuts_the_long_lines():
    """At 60 columns the bar's line still shows done/total; the pace and the best values
    are lines of their own below it, cut at the edge."""
    import io

    from rich.console import Console

    from dse.cli.app import RichProgress

    buf = io.StringIO()
    shown = RichProgress(Console(file=buf, width=60, force_terminal=True, color_system=None))
    shown.start(995_328, "big · exhaustive")
    shown.advance(
        250_000,
        {
            "rate_per_s": 139_931.2,
            "left_s": 5.0,
            "failed": 0,
            "feasible": 272_996,
            "front_size": 21,
            "best": {"energy_to_train_j": 3.9e10, "time_to_train_s": 3.3e5},
        },
    )
    shown.bar.refresh()
    lines = [ln for ln in buf.getvalue().replace("\x1b[2K", "\n").splitlines() if ln.strip()]
    last = [ln for ln in lines if "big · exhaustive" in ln][-1]
    assert "250000/995328" in last, lines
    assert any("evaluations/s" in ln for ln in lines) and any(
        ln.lstrip().startswith("best:") for ln in lines
    )
    shown.stop()


def test_a_run_that_ends_below_its_budget_keeps_its_counts_on_the_last_line():
    """A converged polish stops short of the budget: the bar ends at what was done, and the
    line with the feasible, failed and front counts stays (it was cleared, leaving "best:")."""
    import io

    from rich.console import Console

    from dse.cli.app import RichProgress

    buf = io.StringIO()
    shown = RichProgress(Console(file=buf, width=120, force_terminal=True, color_system=None))
    shown.start(2000, "study · nsga2")
    shown.advance(
        369,
        {
            "rate_per_s": 1000.0,
            "left_s": 1.0,
            "failed": 2,
            "feasible": 300,
            "front_size": 21,
            "best": {"f1": 0.5},
        },
    )
    shown.stop()
    final = buf.getvalue().replace("\x1b[2K", "\n").split("369/2000")[-1]
    assert "369/369" in final and "feasible 300" in final and "front 21" in final, final


def test_output_to_a_closed_stream_a_closed_pipe_or_an_ascii_terminal_is_no_traceback(tmp_path):
    """cron and daemons close stdout (``>&-``), ``| head -1`` closes the pipe, ``LC_ALL=C``
    without UTF-8 cannot encode '…' (each a traceback and exit 1 before)."""
    import os

    out = tmp_path / "out"
    assert (
        run_cli("run", str(write_study(tmp_path, toy_study(output=str(out)))), "--quiet").returncode
        == 0
    )
    dse = f"{sys.executable} -m dse"
    closed = subprocess.run(
        ["bash", "-c", f"{dse} status {out} >&-; echo rc=$?"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "rc=0" in closed.stdout and "Traceback" not in closed.stderr, closed.stderr
    if sys.platform == "linux":  # a pipe of one page (F_SETPIPE_SZ), so that the output outlasts it
        import fcntl

        read_end, write_end = os.pipe()
        fcntl.fcntl(read_end, 1031, 4096)
        reader = subprocess.Popen(
            [sys.executable, "-m", "dse", "describe"],
            cwd=REPO,  # long
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "60"},
        )
        os.close(write_end)
        with os.fdopen(read_end) as head:
            head.readline()  # then closed, as `head -1` does
        _, stderr = reader.communicate(timeout=120)
        assert reader.returncode == 141 and stderr == "", (
            stderr
        )  # 128 + SIGPIPE, as a shell says it
    # a subprocess: the interpreter's own encoding of its standard streams is what is tested
    ascii_only = run_cli_subprocess(
        "status",
        str(out),
        env={
            "LC_ALL": "C",
            "LANG": "C",
            "PYTHONUTF8": "0",
            "PYTHONCOERCECLOCALE": "0",
            "PYTHONIOENCODING": "",
            "COLUMNS": "40",
        },
    )
    assert ascii_only.returncode == 0 and "Traceback" not in ascii_only.stderr, ascii_only.stderr


def test_a_slow_start_does_not_make_the_first_estimate_long():
    """A 3 s start-up, then 100 evaluations per 0.1 s: the first estimate is the pace after
    the start-up (the old one, from the start, was ~4x too long here and ~30x on a 10^6 run)."""
    from unittest import mock

    now = [0.0]
    with mock.patch("dse.progress.time.monotonic", lambda: now[0]):
        pace = Pace(window_s=30)
        now[0] = 3.0
        pace.add(100)  # the first chunk: paid the start-up
        for _ in range(10):
            now[0] += 0.1
            pace.add(100)
        assert pace.rate() == pytest.approx(1000, rel=0.01)


def test_a_run_ends_with_its_search_no_second_copy_of_the_evaluations_to_write(tmp_path):
    """Every evaluation stays in the log alone (issue 37): after the search's last line no
    phase writes them again; pareto.nc is written, evaluations.nc is not."""
    from dse.progress import LINE

    proc = run_cli("run", str(_slow_study(tmp_path, 0.0)))
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("progress:")]
    assert lines and "evaluations.nc" not in proc.stderr, proc.stderr
    last = LINE.search(lines[-1]).groupdict()
    assert last["done"] == last["total"] and last["noun"] == "candidates", lines[-1]
    assert (tmp_path / "out" / "pareto.nc").exists()
    assert not (tmp_path / "out" / "evaluations.nc").exists()
    assert json.loads((tmp_path / "out" / "progress.json").read_text())["state"] == "finished"
