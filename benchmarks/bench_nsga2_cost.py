"""NSGA-II's own cost per evaluation along a run: does a generation cost more late in a run?

The nsga2 driver alone (no polish) searches benchmarks/search-bench.yaml for ``--evaluations``
candidates in batches of 100; the evaluator's results are looked up in the cached
enumeration of bench_search.py, so only the driver is timed: ``ask`` (pymoo's mating and
the no-repeat check), ``tell`` (survival) and ``state`` (what the runner saves after every
batch). Printed: milliseconds of driver time per evaluation in each stretch of 1,000
evaluations, median of ``--repeats`` runs (seeds 0, 1, ...).

    python benchmarks/bench_nsga2_cost.py                      # 20,000 evaluations, 3 seeds
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_search import _study, exact_table  # noqa: E402


def run(path: str, evaluations: int, seed: int) -> list[tuple[int, float]]:
    """(evaluations so far, driver seconds so far) at every batch end."""
    from dse.search import plan_search
    from dse.space import Space

    study = _study(path, "nsga2", evaluations, seed, False)
    space = Space.from_study(study)
    F, G = exact_table(path)
    plan = plan_search(study, space)
    driver = plan.driver_cls(plan.problem, plan.options)
    marks, spent, n = [], 0.0, 0
    while not driver.done:
        t0 = time.perf_counter()
        batch = driver.ask()
        spent += time.perf_counter() - t0
        if len(batch) == 0:
            break
        keys = space.flat_index(space.value_indices(batch))
        t0 = time.perf_counter()
        driver.tell(batch, F[keys], G[keys])
        driver.state()
        spent += time.perf_counter() - t0
        n += len(batch)
        marks.append((n, spent))
    return marks


def _seconds_at(marks: list[tuple[int, float]], evaluations: int) -> float:
    """Driver seconds at the first batch end with at least ``evaluations``."""
    return next((s for n, s in marks if n >= evaluations), marks[-1][1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(HERE / "search-bench.yaml"))
    ap.add_argument("--evaluations", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stretch", type=int, default=1000)
    args = ap.parse_args(argv)
    exact_table(args.study)  # build the cache once
    runs = [run(args.study, args.evaluations, seed) for seed in range(args.repeats)]
    print(f"nsga2 driver time per evaluation, {args.study}, median of {args.repeats} seeds")
    print(f"{'evaluations':>14} {'ms/eval':>8}")
    for lo in range(0, args.evaluations, args.stretch):
        hi = min(lo + args.stretch, args.evaluations)
        per = [
            1e3 * (_seconds_at(marks, hi) - (_seconds_at(marks, lo) if lo else 0.0)) / (hi - lo)
            for marks in runs
        ]
        print(f"{lo:>6,}-{hi:<7,} {np.median(per):8.3f}")
    print(
        f"whole run: {np.median([m[-1][1] for m in runs]):.1f} s of driver time for {args.evaluations:,} evaluations"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
