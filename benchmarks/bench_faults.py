"""Faults during a run: kill -9 a dask worker at random moments and count what is lost.

A real `dask scheduler` and two `dask worker` processes (each under a nanny, which starts a
new worker process when its worker dies) run on 127.0.0.1; `dse run` evaluates a study on
them (the toy evaluator, a fixed cost per candidate) while this script kills a worker
process with SIGKILL at ``--kills`` random moments. For each kill it prints the chunks
the worker held (running or queued there), the seconds until all of them were evaluated elsewhere,
and the seconds until the cluster had two workers again. At the end it compares the
evaluation log with an undisturbed run of the same study: evaluations lost (must be 0),
evaluations repeated in the log (must be 0), and whether the Pareto front is the same.

    python benchmarks/bench_faults.py [--kills 10] [--candidates 2400] [--cost-ms 20] [--seed 0]
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

import pandas as pd
import xarray as xr
import yaml

from dse.files import NETCDF_ENGINE  # the engine dse writes with, installed with it

ENV = {**os.environ, "DASK_LOGGING__DISTRIBUTED": "error"}


def study(folder: Path, name: str, execution: dict, candidates: int, cost_s: float) -> Path:
    xs = max(candidates // 8, 2)
    spec = {
        "name": name,
        "space": {
            "x": {"range": [0.0, 1.0], "step": 1 / (xs - 1)},
            "y": [0, 1, 2, 3],
            "shape": ["a", "b"],
        },
        "objectives": [{"metric": "f1"}, {"metric": "f2"}],
        "evaluator": {
            "name": "dse.evaluators.toy:ToyEvaluator",
            "options": {"delay_per_candidate_s": cost_s},
        },
        "search": {"algorithm": "exhaustive", "budget": 8 * xs, "batch_size": 8 * xs},
        "execution": {"chunk_size": 10, "dashboard": False, **execution},
        "output": str(folder / name),
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_reference(folder: Path, candidates: int) -> Path:
    """The undisturbed run the disturbed one is compared with: the same study evaluated in
    the run's own process, without a cost per candidate, in ``folder/reference``."""
    reference = study(folder, "reference", {"workers": 0}, candidates, 0.0)
    subprocess.run(
        [sys.executable, "-m", "dse", "run", str(reference), "--quiet"],
        check=True,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return folder / "reference"


def spawn(folder: Path, name: str, args: list[str]) -> subprocess.Popen:
    log = open(folder / f"{name}.log", "ab")
    return subprocess.Popen(
        [sys.executable, *args], stdout=log, stderr=log, env=ENV, cwd=folder, start_new_session=True
    )


def log_keys(out: Path) -> pd.Series:
    files = sorted((out / "evaluations").glob("*.arrow"))
    return (
        pd.concat([pd.read_feather(f, columns=["key"]) for f in files])["key"]
        if files
        else pd.Series([], dtype="int64")
    )


def front(out: Path) -> pd.DataFrame:
    with xr.open_dataset(out / "pareto.nc", engine=NETCDF_ENGINE) as ds:
        df = ds[["x", "y", "shape", "f1", "f2"]].to_dataframe().reset_index(drop=True)
    df["shape"] = df["shape"].astype(str)
    return df.sort_values(["x", "y", "shape"]).reset_index(drop=True)


def task_states(dask_scheduler, keys):
    return {
        k: dask_scheduler.tasks[k].state if k in dask_scheduler.tasks else "forgotten" for k in keys
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=2400)
    ap.add_argument("--cost-ms", type=float, default=20.0, help="evaluation time per candidate")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from dask.distributed import Client

    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="dse-bench-faults-"))
    cost_s = args.cost_ms / 1000
    run_reference(folder, args.candidates)

    file = folder / "scheduler.json"
    procs = [
        spawn(
            folder,
            "scheduler",
            [
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--scheduler-file",
                str(file),
                "--no-dashboard",
            ],
        )
    ]
    while not file.exists():
        time.sleep(0.1)
    for i in range(2):
        procs.append(
            spawn(
                folder,
                f"worker{i}",
                [
                    "-m",
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    str(file),
                    "--host",
                    "127.0.0.1",
                    "--nthreads",
                    "1",
                    "--nanny",
                    "--no-dashboard",
                ],
            )
        )
    client = Client(scheduler_file=str(file), timeout="30s", set_as_default=False)
    client.wait_for_workers(2, timeout=60)
    (folder / "here.yaml").write_text(f"scheduler_file: {file}\ngrace_s: 60\n")
    faulty = study(
        folder, "faulty", {"profile": str(folder / "here.yaml")}, args.candidates, cost_s
    )
    expected_s = args.candidates * cost_s / 2
    moments = sorted(rng.uniform(0.5, 0.85 * expected_s) for _ in range(args.kills))
    print(
        f"{args.candidates} candidates at {args.cost_ms:g} ms each on 2 workers (about {expected_s:.0f} s undisturbed); "
        f"{args.kills} kills at random moments; logs in {folder}\n"
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "dse", "run", str(faulty), "--quiet"],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    rows = []
    try:
        for moment in moments:
            while time.monotonic() - started < moment:
                time.sleep(0.02)
            if run.poll() is not None:
                break
            pids = client.run(os.getpid)
            victim = rng.choice(sorted(pids))
            running = list(client.processing(workers=[victim]).get(victim, []))
            at = time.monotonic()
            os.kill(pids[victim], signal.SIGKILL)
            rerun_s = back_s = None
            while (rerun_s is None or back_s is None) and time.monotonic() - at < 120:
                now = time.monotonic() - at
                states = client.run_on_scheduler(task_states, keys=running) if running else {}
                if rerun_s is None and all(s in ("memory", "forgotten") for s in states.values()):
                    rerun_s = now
                if (
                    back_s is None
                    and now > 0.2
                    and len(client.scheduler_info(n_workers=-1)["workers"]) == 2
                ):
                    back_s = now
                time.sleep(0.02)
            rows.append(
                {
                    "kill": len(rows) + 1,
                    "at_s": at - started,
                    "chunks_on_worker": len(running),
                    "rerun_done_s": rerun_s,
                    "two_workers_again_s": back_s,
                }
            )
        _, stderr = run.communicate(timeout=600)
        total_s = time.monotonic() - started
    finally:
        client.close()
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
    if run.returncode != 0:
        sys.exit(f"the run failed: {stderr}")

    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    expected, got = set(log_keys(folder / "reference")), log_keys(folder / "faulty")
    same_front = front(folder / "faulty").equals(front(folder / "reference"))
    print(
        f"\nrun took {total_s:.1f} s with {len(rows)} kills; evaluations expected {len(expected)}, in the log {len(got)}"
    )
    print(f"evaluations lost: {len(expected - set(got))} (must be 0)")
    print(f"evaluations repeated: {len(got) - got.nunique()} (must be 0)")
    print(f"front equal to the undisturbed run's: {same_front}")
    print(
        f"recovery (all chunks of the killed worker evaluated elsewhere): median {table['rerun_done_s'].median():.2f} s, "
        f"max {table['rerun_done_s'].max():.2f} s"
    )


if __name__ == "__main__":
    main()
