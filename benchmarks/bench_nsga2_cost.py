"""NSGA-II's own cost per evaluation along a run: does a generation cost more late in a run?

The nsga2 driver alone (no polish) searches benchmarks/search-bench.yaml for ``--evaluations``
candidates in batches of 100; the evaluator's results are looked up in the cached
enumeration of bench_search.py, so only the driver is timed: ``ask`` (pymoo's mating and
the no-repeat check), ``tell`` (survival) and the state the runner saves after every batch
(``state()``, then written to ``state.json`` as the store writes it). The driver keeps its
files in a temporary results folder, as in a run; ``--no-folder``: without one, as in
library use, where the record of asked candidates is a list inside the state (as every
run's was before ``nsga2-asked.f64``). Printed: milliseconds of driver CPU time per
evaluation in each stretch of 1,000 evaluations, median of ``--repeats`` runs (seeds 0,
1, ...); CPU time, so that other processes on the machine do not count.

    python benchmarks/bench_nsga2_cost.py                      # 20,000 evaluations, 3 seeds
    python benchmarks/bench_nsga2_cost.py --no-folder          # the record inside state.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_search import _study, exact_table  # noqa: E402

ALGORITHMS = ("nsga2", "optuna-nsga2", "optuna-tpe")


def run(
    path: str, evaluations: int, seed: int, folder: bool = True, algorithm: str = "nsga2"
) -> list[tuple[int, float]]:
    """(evaluations so far, driver CPU seconds so far) at every batch end."""
    from dse.files import atomic_write_text, json_default
    from dse.search import plan_search
    from dse.space import Space

    study = _study(path, algorithm, evaluations, seed, False)
    space = Space.from_study(study)
    F, G = exact_table(path)
    plan = plan_search(study, space)
    with tempfile.TemporaryDirectory() as work:
        problem = replace(plan.problem, work_dir=Path(work) if folder else None)
        driver = plan.driver_cls(problem, plan.options)
        marks, spent, n = [], 0.0, 0
        while not driver.done:
            t0 = time.process_time()
            batch = driver.ask()
            spent += time.process_time() - t0
            if len(batch) == 0:
                break
            keys = space.flat_index(space.value_indices(batch))
            t0 = time.process_time()
            driver.tell(batch, F[keys], G[keys])
            text = json.dumps(driver.state(), indent=1, default=json_default, allow_nan=True)
            atomic_write_text(Path(work) / "state.json", text + "\n")  # as ResultStore.save_state
            spent += time.process_time() - t0
            n += len(batch)
            marks.append((n, spent))
    return marks


def _seconds_at(marks: list[tuple[int, float]], evaluations: int) -> float:
    """Driver seconds at the first batch end with at least ``evaluations``."""
    return next((s for n, s in marks if n >= evaluations), marks[-1][1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(HERE / "search-bench.yaml"))
    ap.add_argument("--algorithm", choices=ALGORITHMS, default="nsga2")
    ap.add_argument("--evaluations", type=int, help="default: 20,000 (nsga2), 3,000 (optuna-*)")
    ap.add_argument("--repeats", type=int, help="seeds 0, 1, ...; default: 3 (nsga2), 1 (optuna-*)")
    ap.add_argument("--stretch", type=int, help="default: 1,000 (nsga2), 500 (optuna-*)")
    ap.add_argument("--no-folder", action="store_true", help="no results folder (library use)")
    args = ap.parse_args(argv)
    small = args.algorithm != "nsga2"  # optuna's samplers are slower per trial: a shorter run
    args.evaluations = args.evaluations or (3_000 if small else 20_000)
    args.repeats = args.repeats or (1 if small else 3)
    args.stretch = args.stretch or (500 if small else 1000)
    exact_table(args.study)  # build the cache once
    runs = [
        run(args.study, args.evaluations, seed, folder=not args.no_folder, algorithm=args.algorithm)
        for seed in range(args.repeats)
    ]
    where = "without a folder" if args.no_folder else "in a results folder"
    print(
        f"{args.algorithm} driver CPU time per evaluation, {where}, {args.study}, "
        f"median of {args.repeats} seed(s)"
    )
    print(f"{'evaluations':>14} {'ms/eval':>8}")
    for lo in range(0, args.evaluations, args.stretch):
        hi = min(lo + args.stretch, args.evaluations)
        per = [
            1e3 * (_seconds_at(marks, hi) - (_seconds_at(marks, lo) if lo else 0.0)) / (hi - lo)
            for marks in runs
        ]
        print(f"{lo:>6,}-{hi:<7,} {np.median(per):8.3f}")
    print(
        f"whole run: {np.median([m[-1][1] for m in runs]):.1f} s of driver CPU time for {args.evaluations:,} evaluations"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
