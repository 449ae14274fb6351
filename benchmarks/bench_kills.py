"""kill -9 of `dse run` at random moments: what is lost, repeated, and left running.

A study of the toy evaluator (a fixed cost per candidate) runs on a local cluster of two
forked workers. This script sends SIGKILL to the run's own process (not its process group:
as a batch system's OOM killer or ``kill -9 PID`` does) at ``--kills`` random moments,
each time after a random delay from the run's (re)start, then ``dse resume``s the folder;
after each kill it counts the processes the run left in its session 10 s later (forked
workers that outlived it). At the end the log is compared with an uninterrupted in-process
run of the same study: evaluations lost (must be 0), evaluations repeated (must be 0),
identical Pareto front, processes left over all kills (must be 0).

    python benchmarks/bench_kills.py [--kills 40] [--candidates 24000] [--cost-ms 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from bench_faults import ENV, front, log_keys, run_reference, study


def session_processes(sid: int) -> list[psutil.Process]:
    """The processes of session ``sid`` still running (zombies not counted)."""
    left = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return left


def start(folder: Path, args: list[str]) -> subprocess.Popen:
    log = open(folder / "run.log", "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "dse", *args, "--quiet"],
        stdout=log,
        stderr=log,
        env=ENV,
        cwd=folder,
        start_new_session=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--candidates", type=int, default=24000)
    ap.add_argument("--cost-ms", type=float, default=5.0, help="evaluation time per candidate")
    ap.add_argument("--max-delay-s", type=float, default=12.0, help="latest kill after a start")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="dse-bench-kills-"))
    run_reference(folder, args.candidates)
    spec = study(
        folder, "killed", {"workers": 2, "tls": True}, args.candidates, args.cost_ms / 1000
    )
    out = folder / "killed"
    print(f"{'kill':>4} {'after s':>8} {'rows then':>10} {'left 10 s later':>16}")
    kills, left_total, first = 0, 0, True
    while True:
        run = start(folder, ["run", str(spec)] if first else ["resume", str(out)])
        first = False
        if kills == args.kills:
            run.wait()
            break
        delay_s = rng.uniform(0.5, args.max_delay_s)
        try:
            run.wait(timeout=delay_s)
            print(f"the run ended before kill {kills + 1}: the study is too short for --kills")
            break
        except subprocess.TimeoutExpired:
            pass
        run.send_signal(signal.SIGKILL)
        run.wait()
        kills += 1
        time.sleep(10)
        left = session_processes(run.pid)
        left_total += len(left)
        for proc in left:
            proc.kill()
        print(f"{kills:>4} {delay_s:>8.1f} {len(log_keys(out)):>10,} {len(left):>16}")
    keys = log_keys(out)
    expected = log_keys(folder / "reference")
    lost = len(set(expected) - set(keys))
    repeated = int(keys.duplicated().sum())
    same = front(out).equals(front(folder / "reference"))
    print(
        f"\nkills: {kills}; evaluations lost: {lost}; repeated: {repeated}; "
        f"front identical: {same}; processes left over all kills: {left_total}"
    )
    print(f"(folder: {folder})")


if __name__ == "__main__":
    main()
