"""End-to-end throughput and memory of `dse run`: the pipeline around the evaluator.

``python benchmarks/bench_pipeline.py [--sizes 1e5 1e6 1e7] [--workers 2] [--runs 3] [--slow] [--ask-ahead] [--worker-task N]``

For exhaustive studies of about 10^5, 10^6 and 10^7 candidates on the analytic evaluator
(the Llama-2 7B space of ``benchmarks/search-bench.yaml``, widened by cooling, inlet
temperature and scale-out bandwidth), each run is a real ``python -m dse run`` in a fresh
process with a local dask cluster. The table gives per size: wall time, CPU time of the
whole process tree (user + system, from the kernel's accounting of every waited-for
descendant), end-to-end candidates/s, the ratio of that to the in-process evaluator's
throughput (the study's candidates, their inputs built and evaluated in one process, one
core, in a worker's piece size, spread over the space: :func:`in_process_rates`) times
the worker count, and the peak resident memory of the process tree (sampled every
0.1 s with psutil). With ``--slow`` it also runs a study of a 50 ms-per-candidate
evaluator on 1 and then 2 workers and prints the speed-up.

The driver's cost (issue 37): the CPU time of the main process (the ``dse`` program
itself: the search loop, the log writer, the datasets; its own ``getrusage(RUSAGE_SELF)``
taken as it exits) is told apart from that of the rest of the process tree (the dask
workers and their nannies). Between two sizes the difference of each, divided by the
difference of the candidates, is the marginal CPU per candidate (start-up, cluster and
fixed costs drop out); their ratio says at how many workers the main process would be
saturated (one core of it per candidate for workers x worker CPU). Each size runs
``--runs`` times (default 3), the sizes taking turns, and every figure is the median of its
runs: one run's start-up varied by about a second of the main process's CPU, as much as
its marginal cost over 9 million candidates (2026-11-29); the main process's CPU in the search
loop alone (every thread of it, from ``Runner._search``'s start to its end) is given too,
free of that noise (the cluster's start took its main thread 1.2 and 1.9 s of CPU in two
runs). ``--profile-main FILE`` writes a
cProfile of the main process of the largest size's last run.

A worker's cost (issue 37): ``--worker-task N`` runs N tasks of the 10^7 study in this
process as a local cluster's worker runs them and prints the CPU per candidate of building
the inputs, of the evaluator and of making the log rows (the chunk's summary and front, its
staged log file), the part a worker spends besides the evaluator (a dask worker's own CPU
per candidate matched this in-process figure within its noise, 2026-11-29). On 2026-11-29
(load 1.5-4 from other work) the steps of that day took it from 1.8-2.3 to 0.9-1.3 us
against the evaluator's ~2 us (direct write of the staged file, the chunk's summary, float
columns to Arrow, the inputs' table, and the log's zstd level -4 instead of 1; LZ4 since).

With ``--ask-ahead`` (issue 37) it runs NSGA-II for ``--generations`` generations of 100
(no polish) on 2 workers, with ``search.options.ask_ahead`` off and on, for the toy
evaluator sleeping 0, 0.5 and 2 ms per candidate (sleeping: the workers' time is the same
on a loaded machine) and for the analytic evaluator on ``search-bench.yaml``, ``--repeats``
times each, alternating: the search loop's time per generation (the batches' times in
``state.json``: ask, evaluate, store, tell; the first generation left out: it imports pymoo
and measures the evaluator's cost with small tasks) and what the workers would need for the
evaluations alone (the sleep, shared by the workers), so the time they wait between
generations is the difference. Asked ahead, the workers start on the next generation while
the main process stores and tells the last one and breeds the one after.

Targets (issue 11): 10^7 in at most 5 minutes with at most 4 GB peak RSS on 2 cores;
at least 70 % of evaluator throughput x workers at 10^6; 2 workers at least 1.8 x one on
the slow evaluator. Issue 37: the main process's marginal CPU per candidate at most 3 %
of the workers'; the results folder at most 250 bytes per evaluated candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

HERE = Path(__file__).resolve().parent
# the in-process parts (the evaluator's rate, --worker-task) import the dse the runs use
# (``measure`` puts this checkout first on their PYTHONPATH), not another installed one
sys.path.insert(0, str(HERE.parent))
BASE = yaml.safe_load((HERE / "search-bench.yaml").read_text())  # 124,416 candidates

WIDEN = [  # extra parameters: each multiplies the space
    ("cooling", ["air", "liquid"]),
    ("inlet_temp_c", [20.0, 25.0, 30.0, 35.0]),
    ("scaleout_bw_gbs", [12.5, 25.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0, 6400.0]),
]


def study_of(size: float, workers: int, out: Path) -> dict:
    """The benchmark study of about ``size`` candidates (124,416 x 1, x 8 or x 80)."""
    s = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    s["name"] = f"pipeline-{size:.0e}".replace("+", "")
    s["fixed"] = {k: v for k, v in BASE["fixed"].items() if k != "cooling"}
    factor = 1
    for name, values in WIDEN:
        if 124_416 * factor >= size * 0.9:
            break
        if name == "scaleout_bw_gbs":
            s["fixed"].pop("scaleout_bw_gbs", None)
        s["space"][name] = values
        factor *= len(values)
    if "cooling" not in s["space"]:
        s["fixed"]["cooling"] = "air"
    s["search"] = {"algorithm": "exhaustive", "budget": 124_416 * factor, "seed": 0}
    # the dashboard on at every size (a local run left at the default starts without it
    # below 10 s of evaluation, and the sizes' difference would count its start-up)
    s["execution"] = {"workers": workers, "dashboard": True}
    s["output"] = str(out)
    return s


def spread_chunk(space, i: int, n: int):
    """The ``i``-th chunk of ``n`` consecutive grid positions of ``space``, the chunks spread
    over the whole space (a stride of 7,919 chunks, wrapped), as ``GridCandidates``."""
    import numpy as np

    from dse.execution.candidates import GridCandidates

    first = (i * 7919 * n) % max(int(space.size) - n, 1)
    return GridCandidates(space, np.arange(first, first + n, dtype=np.int64))


def in_process_rates(
    study_file: Path, limit: int = 400_000, repeats: int = 5, start: int = 0
) -> list[float]:
    """Candidates per CPU-second of building the inputs and evaluating them in this process,
    ``repeats`` times over ``limit`` candidates each, after a chunk that is not timed (the
    evaluator's caches, numpy's first calls): chunks of a worker's piece size
    (``PIECE_ROWS``, 131,072: the evaluator is ~12% faster per candidate on them than on
    65,536, which this measured until 2026-11-29) at positions spread over the whole space
    (its parts cost from 0.79 to 1.06 µs a candidate: the grid's first 2 M, which this
    measured until then, are its slowest), the ``start``-th onwards. One measurement of
    ~0.5 s ranged from 0.67 to 0.99 M/s between runs on this shared machine (2026-11-29):
    the table takes the median of those made before and after each run."""
    from dse.api import plan
    from dse.execution.base import PIECE_ROWS
    from dse.execution.candidates import frame

    p = plan(study_file)
    n = min(PIECE_ROWS, int(p.space.size))

    def chunk(i: int):
        return frame(spread_chunk(p.space, i, n))

    p.evaluator.evaluate(chunk(start))
    rates, i = [], start + 1
    for _ in range(repeats):
        done, t0 = 0, time.process_time()
        while done < limit:
            p.evaluator.evaluate(chunk(i))
            i, done = i + 1, done + n
        rates.append(done / (time.process_time() - t0))
    return rates


def worker_task_cost(tmp: Path, tasks: int) -> None:
    """CPU per candidate of ``tasks`` worker tasks of the 10^7 study, run in this process as a
    local cluster's worker runs them (``dse.execution.base.evaluate_chunk``'s steps: the
    inputs built from 131,072 consecutive grid positions, the evaluator, the chunk made into
    log rows, its summary and its staged log file), by step; medians over the tasks after a
    first one (imports, caches)."""
    from dse.api import plan
    from dse.execution.base import PIECE_ROWS, EvaluatorRef, evaluate_rows
    from dse.execution.candidates import frame
    from dse.files import discard_staged
    from dse.logrows import LogRows

    path = tmp / "study-worker.yaml"
    path.write_text(yaml.safe_dump(study_of(1e7, 2, tmp / "worker-run"), sort_keys=False))
    p = plan(path)
    objectives = [o.metric for o in p.study.objectives] + [c.metric for c in p.study.constraints]
    narrow = (*dict.fromkeys(objectives), "feasible", "status", "reason", "error")
    staged_in = tmp / "worker-run" / "evaluations"
    staged_in.mkdir(parents=True)
    finish = LogRows(p.study, tuple(p.space.names), 1, narrow, told=False, stage_in=str(staged_in))
    ref, n = EvaluatorRef.of(p.study.evaluator), PIECE_ROWS
    steps: dict[str, list[float]] = {"inputs": [], "evaluator": [], "log rows": []}
    for i in range(tasks + 1):
        chunk = spread_chunk(p.space, i, n)
        t0 = time.process_time()
        candidates = frame(chunk)
        t1 = time.process_time()
        result = evaluate_rows(ref, candidates)
        result["elapsed_s"] = 1e-6
        t2 = time.process_time()
        staged = finish(candidates, result).staged
        t3 = time.process_time()
        discard_staged(Path(staged))
        if i:
            for name, seconds in zip(steps, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                steps[name].append(seconds / n * 1e6)
    median = {name: sorted(v)[len(v) // 2] for name, v in steps.items()}
    print(
        f"one worker task of {n:,} candidates, median of {tasks}, CPU per candidate: "
        + ", ".join(f"{name} {us:.3f} us" for name, us in median.items())
        + f"; besides the evaluator {median['inputs'] + median['log rows']:.3f} us"
    )


#: the ``dse`` program as ``python -m dse`` runs it, saying its own CPU time as it exits
#: (the program ends with ``os._exit``: no atexit hook would run)
LAUNCHER = """
import json, os, resource, sys
out, profile, sys.argv = sys.argv[1], sys.argv[2], ["dse", *sys.argv[3:]]
real_exit = os._exit
if profile:
    import cProfile
    profiler = cProfile.Profile()
    profiler.enable()
def cpu():
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime
loop = []
def _exit(code):
    if profile:
        profiler.disable()
        profiler.dump_stats(profile)
    with open(out, "w") as f:
        json.dump({"cpu_s": cpu(), "loop_cpu_s": sum(loop)}, f)
    real_exit(code)
os._exit = _exit
import dse.runner
search = dse.runner.Runner._search
def _search(*args, **kwargs):  # the search loop's own CPU (every thread of this process)
    start = cpu()
    try:
        return search(*args, **kwargs)
    finally:
        loop.append(cpu() - start)
dse.runner.Runner._search = _search
from dse.cli.app import console
console()
"""


def dse_command(args: list[str], cpu_file: Path, profile: str = "") -> list[str]:
    """``python -m dse ARGS`` that writes its own CPU time to ``cpu_file`` as it exits."""
    return [sys.executable, "-c", LAUNCHER, str(cpu_file), profile, *args]


def measure(cmd: list[str], cpu_file: Path | None = None) -> dict:
    """Run ``cmd``; wall time, CPU time of the tree, peak RSS of the tree, and (``cpu_file``:
    where the launcher wrote it) the main process's own CPU time and the rest's."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH", "")])
        ),
    }
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [proc, *proc.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.1)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:]}")
    out = {"wall_s": wall, "cpu_s": cpu, "peak_rss_gb": peak / 1e9}
    if cpu_file is not None:
        said = json.loads(cpu_file.read_text())
        out["main_cpu_s"], out["main_loop_cpu_s"] = said["cpu_s"], said["loop_cpu_s"]
        out["workers_cpu_s"] = cpu - out["main_cpu_s"]
    return out


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def slow_speedup(tmp: Path) -> list[tuple[float, float]]:
    """``(wall, search loop)`` seconds of 400 candidates at 50 ms each (20 s of work) on 1
    and on 2 workers."""
    times = []
    for workers in (1, 2):
        out = tmp / f"slow-{workers}"
        study = {
            "name": f"slow-{workers}",
            "output": str(out),
            "space": {"x": {"range": [0.0, 1.0], "step": 1 / 199}, "y": [0, 1], "shape": ["a"]},
            "objectives": [{"metric": "f1"}, {"metric": "f2"}],
            "evaluator": {
                "name": "dse.evaluators.toy:ToyEvaluator",
                "options": {"delay_per_candidate_s": 0.05},
            },
            "search": {"algorithm": "exhaustive", "budget": 400},
            "execution": {"workers": workers},
        }
        path = tmp / f"slow-{workers}.yaml"
        path.write_text(yaml.safe_dump(study))
        wall = measure([sys.executable, "-m", "dse", "run", str(path), "--quiet", "--overwrite"])[
            "wall_s"
        ]
        loop = sum(h["seconds"] for h in json.loads((out / "state.json").read_text())["history"])
        times.append((wall, loop))
    return times


#: (label, evaluator, seconds per candidate of the toy evaluator's sleep) of --ask-ahead
AHEAD_EVALUATORS = (
    ("toy, no work", "toy", 0.0),
    ("toy, 0.5 ms/candidate", "toy", 0.0005),
    ("toy, 2 ms/candidate", "toy", 0.002),
    ("toy, 20 ms/candidate", "toy", 0.02),
    ("analytic (search-bench.yaml)", "analytic", 0.0),
)


def ahead_study(
    kind: str, delay_s: float, generations: int, ahead: bool, out: Path, algorithm: str = "nsga2"
) -> dict:
    """``algorithm`` (NSGA-II, or optuna-tpe) for ``generations`` batches of 100 on 2 workers,
    without the polish."""
    if kind == "analytic":
        study = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    else:
        study = {
            "name": "ahead-toy",
            "space": {
                "x": {"range": [0.0, 1.0], "step": 0.0005},
                "y": list(range(10)),
                "shape": ["a", "b"],
            },  # 40,020 candidates
            "objectives": [{"metric": "f1"}, {"metric": "f2"}],
            "evaluator": {
                "name": "dse.evaluators.toy:ToyEvaluator",
                "options": {"delay_per_candidate_s": delay_s},
            },
        }
    study["name"] = f"{study['name']}-{'ahead' if ahead else 'plain'}"
    study["search"] = {
        "algorithm": algorithm,
        "budget": 100 * generations,
        "batch_size": 100,
        "seed": 0,
        "polish": {"enabled": False},
        "options": {"ask_ahead": ahead},
    }
    study["execution"] = {"workers": 2}
    study["output"] = str(out)
    return study


def ask_ahead_table(
    tmp: Path, generations: int, repeats: int, algorithm: str = "nsga2", kinds: str = ""
) -> None:
    """The search loop's time per generation with and without asking ahead (see the module
    docstring); ``kinds``: the evaluators' labels to run (comma-separated parts; all)."""
    print(
        f"\n{algorithm}, {generations} generations of 100, no polish, 2 workers, "
        f"{os.cpu_count()} cores; median of {repeats} runs each, alternating\n"
    )
    print(
        "| evaluator | evaluation alone [ms/generation] | plain [ms/generation] | "
        "ask ahead [ms/generation] | ask ahead / plain | workers' wait plain -> ask ahead "
        "[ms/generation] |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    wanted = [k.strip() for k in kinds.split(",") if k.strip()]
    for label, kind, delay_s in AHEAD_EVALUATORS:
        if wanted and not any(w in label for w in wanted):
            continue
        per_gen: dict[bool, list[float]] = {False: [], True: []}
        for r in range(repeats):
            for ahead in (False, True):
                out = tmp / f"ahead-{kind}-{delay_s}-{ahead}-{r}"
                path = tmp / f"{out.name}.yaml"
                study = ahead_study(kind, delay_s, generations, ahead, out, algorithm)
                path.write_text(yaml.safe_dump(study))
                measure([sys.executable, "-m", "dse", "run", str(path), "--quiet", "--overwrite"])
                # the first generation imports pymoo and probes the cost with small tasks
                history = json.loads((out / "state.json").read_text())["history"][1:]
                per_gen[ahead].append(sum(h["seconds"] for h in history) / len(history) * 1e3)
        plain, ahead = (sorted(per_gen[a])[len(per_gen[a]) // 2] for a in (False, True))
        work = 100 * delay_s / 2 * 1e3
        print(
            f"| {label} | {work:.0f} | {plain:.1f} | {ahead:.1f} | {ahead / plain:.0%} | "
            f"{plain - work:.1f} -> {ahead - work:.1f} |",
            flush=True,
        )
    print(
        "\nevaluation alone: the toy's sleep per generation shared by 2 workers (0 for the "
        "analytic evaluator: microseconds per candidate); the workers wait for the rest"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6, 1e7])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs of each size, the sizes taking turns; the table gives medians (default 3)",
    )
    ap.add_argument(
        "--slow",
        action="store_true",
        help="also the 1-versus-2-worker speed-up of a slow evaluator",
    )
    ap.add_argument(
        "--profile-main",
        default="",
        metavar="FILE",
        help="write a cProfile of the main process of the largest size to FILE",
    )
    ap.add_argument(
        "--ask-ahead",
        action="store_true",
        help="only the NSGA-II generations with and without search.options.ask_ahead",
    )
    ap.add_argument(
        "--algorithm",
        default="nsga2",
        choices=["nsga2", "optuna-tpe"],
        help="the driver --ask-ahead runs (default nsga2)",
    )
    ap.add_argument(
        "--evaluators",
        default="",
        metavar="LABELS",
        help="--ask-ahead: only the evaluators whose label holds one of these comma-separated "
        "words (default: all)",
    )
    ap.add_argument(
        "--worker-task",
        type=int,
        default=0,
        metavar="N",
        help="only a worker's CPU per candidate by step, N tasks of the 10^7 study in this process",
    )
    ap.add_argument("--generations", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if args.ask_ahead:
            ask_ahead_table(tmp, args.generations, args.repeats, args.algorithm, args.evaluators)
            return
        if args.worker_task:
            worker_task_cost(tmp, args.worker_task)
            return
        # every size ``--runs`` times, the sizes taking turns (the machine's speed drifts):
        # each figure is the median of its runs, so that the main process's marginal CPU,
        # a difference of two sizes' totals, is not one start-up's noise
        runs: dict[float, list[dict]] = {size: [] for size in args.sizes}
        rates: dict[float, list[float]] = {size: [] for size in args.sizes}
        paths, counts = {}, {}
        for size in args.sizes:
            out = tmp / f"run-{size:.0e}"
            study = study_of(size, args.workers, out)
            paths[size] = tmp / f"study-{size:.0e}.yaml"
            paths[size].write_text(yaml.safe_dump(study, sort_keys=False))
            counts[size] = study["search"]["budget"]
        for turn in range(args.runs):
            for size in args.sizes:
                path, n, out = paths[size], counts[size], tmp / f"run-{size:.0e}"
                rates[size] += in_process_rates(path, start=100 * turn)
                cpu_file = tmp / f"cpu-{size:.0e}.json"
                profile = str(Path(args.profile_main).resolve()) if args.profile_main else ""
                last = size == max(args.sizes) and turn == args.runs - 1
                m = measure(
                    dse_command(
                        ["run", str(path), "--quiet", "--overwrite"],
                        cpu_file,
                        profile if last else "",
                    ),
                    cpu_file,
                )
                rates[size] += in_process_rates(path, start=100 * turn + 50)
                history = json.loads((out / "state.json").read_text())["history"]
                m["loop_s"] = sum(h["seconds"] for h in history)  # ask -> evaluate -> store -> tell
                m["folder_bytes"] = folder_bytes(out)
                runs[size].append(m)
                print(f"  {n:>11,} candidates: {m['wall_s']:.1f} s", flush=True)
        rows, spread = [], []
        for size in args.sizes:
            n, ms = counts[size], runs[size]
            m = {k: statistics.median(r[k] for r in ms) for k in ms[0]}
            rate = statistics.median(rates[size])
            spread.append((n, min(rates[size]), max(rates[size])))
            e2e = n / m["wall_s"]
            rows.append((n, m, e2e, e2e / (rate * args.workers), rate))
        print(
            f"\nexhaustive runs, analytic evaluator, {args.workers} workers, {os.cpu_count()} cores\n"
        )
        print(
            f"| candidates | wall [s] | CPU [s] | main CPU [s] | workers CPU [s] | candidates/s | "
            f"/ (in-process x {args.workers}) | search loop [s] | loop candidates/s | "
            f"loop / (in-process x {args.workers}) | in-process [candidates/s] | peak RSS [GB] | "
            "results folder [bytes/candidate] |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n, m, e2e, ratio, rate in rows:
            loop = n / m["loop_s"]
            print(
                f"| {n:,} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {m['main_cpu_s']:.1f} | "
                f"{m['workers_cpu_s']:.1f} | {e2e:,.0f} | {ratio:.0%} | "
                f"{m['loop_s']:.1f} | {loop:,.0f} | {loop / (rate * args.workers):.0%} | {rate:,.0f} | "
                f"{m['peak_rss_gb']:.2f} | {m['folder_bytes'] / n:,.0f} |"
            )
        print(
            "\nwall: the whole command (start-up, cluster, search loop, datasets, plot); search loop: "
            "the batches' ask-evaluate-store-tell time from state.json; main: the dse process "
            f"itself, workers: the rest of its process tree; each figure the median of "
            f"{args.runs} run(s); in-process: the median of {10 * args.runs} measurements of "
            "~0.5 s, 5 before and 5 after each run ("
            + ", ".join(f"{n:,}: {lo:,.0f}-{hi:,.0f}" for n, lo, hi in spread)
            + ")"
        )
        for (n1, m1, *_), (n2, m2, *_) in zip(rows, rows[1:], strict=False):
            dn = n2 - n1
            main_us = (m2["main_cpu_s"] - m1["main_cpu_s"]) / dn * 1e6
            loop_us = (m2["main_loop_cpu_s"] - m1["main_loop_cpu_s"]) / dn * 1e6
            workers_us = (m2["workers_cpu_s"] - m1["workers_cpu_s"]) / dn * 1e6
            ratio = main_us / workers_us if workers_us > 0 else float("inf")
            saturated = 1 / ratio if ratio > 0 else float("inf")
            print(
                f"\nmarginal CPU per candidate between {n1:,} and {n2:,}: main process "
                f"{main_us:.3f} us, workers {workers_us:.3f} us, main / workers {ratio:.1%} "
                f"(target <= 3%): the main process saturates at about {saturated:,.0f} "
                f"workers ({1e6 / main_us if main_us > 0 else float('inf'):,.0f} candidates/s); "
                f"the main process in the search loop alone {loop_us:.3f} us "
                f"({loop_us / workers_us:.1%} of the workers': without the start-up's and the "
                "end's noise)"
            )
        if args.slow:
            (w1, l1), (w2, l2) = slow_speedup(tmp)
            print(
                f"\n50 ms per candidate, 400 candidates (20 s of work): search loop 1 worker {l1:.1f} s, "
                f"2 workers {l2:.1f} s, speed-up {l1 / l2:.2f}x; whole command {w1:.1f} s and {w2:.1f} s, "
                f"{w1 / w2:.2f}x (start-up, cluster, datasets and plot included)"
            )


if __name__ == "__main__":
    main()
