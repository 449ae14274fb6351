"""Search-driver benchmark: how close does each driver get to the true front, how fast?

The study (benchmarks/search-bench.yaml by default) has a discrete space that can be
enumerated: the exhaustive driver evaluates all of it and gives the true Pareto front.
Then NSGA-II (pymoo), optuna NSGA-II, optuna TPE and random search run with several seeds;
each run goes through the real driver's ask/tell loop, the real evaluator and the real
objective/violation matrices of dse.pareto, only in-process instead of on dask (dask's
per-batch overhead would dominate and measures nothing about the search).

Reported, per driver: the hypervolume of the front found within 1%, 2% and 5% of the
space, as a ratio to the true front's (median over the seeds; all fronts are normalised in
one frame: true ideal -> 0, true nadir -> 1, reference point 1.1), and the evaluations
needed to reach 0.99 of it (median; measured at batch ends; ">B" = not reached within
the largest budget B). A driver's asks never depend on its budget (only the last batch is
cut short), so one run per seed at the largest budget gives the smaller budgets as prefixes.
optuna's samplers cost more per trial as trials accumulate (optuna NSGA-II: ~6 minutes for
5% of this space; TPE: ~6 minutes for 2%), so by default optuna NSGA-II runs to 2% and TPE
to 1% only (``--optuna-max 0.05 --tpe-max 0.05`` for the full table, which takes hours).

    python benchmarks/bench_search.py                 # all drivers, 5 seeds
    python benchmarks/bench_search.py --seeds 3 --drivers nsga2 random
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
BUDGETS = (0.01, 0.02, 0.05)
TARGET = 0.99


def _setup(study_path: str):
    from dse.evaluators import load_evaluator
    from dse.space import Space
    from dse.study import load_study

    study = load_study(study_path)
    return study, Space.from_study(study), load_evaluator(study.evaluator)


def _driver(study, space, algo: str, budget: int, seed: int):
    from dse.search import DRIVERS

    module, _, cls = DRIVERS[algo].partition(":")
    s = study.search
    return getattr(importlib.import_module(module), cls)(
        space, budget=budget, seed=seed, batch_size=s.batch_size,
        n_objectives=len(study.objectives), n_constraints=len(study.constraints) + 1,
        options={}, output_dir=None)


def _evaluate(study, space, evaluator, batch: pd.DataFrame):
    from dse.pareto import objective_matrix, violation_matrix

    batch = batch.reset_index(drop=True)
    res = evaluator.evaluate(space.with_fixed(batch))
    table = pd.concat([batch, res.assign(status="ok")], axis=1)
    f, g = objective_matrix(table, study), violation_matrix(table, study)
    return f, g


def run(study_path: str, algo: str, budget: int, seed: int):
    """One driver run: objectives (all-minimise, NaN where infeasible) in ask order, batch ends, seconds."""
    study, space, evaluator = _setup(study_path)
    driver = _driver(study, space, algo, budget, seed)
    fs, ends = [], []
    started = time.perf_counter()
    while not driver.done:
        batch = driver.ask()
        if len(batch) == 0:
            break
        f, g = _evaluate(study, space, evaluator, batch)
        driver.tell(batch, f, g)
        feasible = (g <= 0).all(axis=1) & np.isfinite(f).all(axis=1)
        fs.append(np.where(feasible[:, None], f, np.nan))
        ends.append(sum(len(x) for x in fs))
    return algo, seed, np.vstack(fs), ends, time.perf_counter() - started


class Frame:
    def __init__(self, true_front: np.ndarray) -> None:
        self.lo, self.hi = true_front.min(axis=0), true_front.max(axis=0)
        self.true = self.hv(true_front)

    def hv(self, f: np.ndarray) -> float:
        import moocore

        f = f[np.isfinite(f).all(axis=1)]
        if len(f) == 0:
            return 0.0
        z = (f - self.lo) / np.where(self.hi > self.lo, self.hi - self.lo, 1.0)
        return float(moocore.hypervolume(z, ref=np.full(f.shape[1], 1.1)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(HERE / "search-bench.yaml"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--drivers", nargs="+", default=["nsga2", "optuna-nsga2", "optuna-tpe", "random"])
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (processes)")
    ap.add_argument("--optuna-max", type=float, default=0.02,
                    help="largest budget (fraction of the space) for the optuna drivers, whose cost "
                         "per trial grows with the trials so far (default 0.02; 0.05 takes ~6 min a run)")
    ap.add_argument("--tpe-max", type=float, default=0.01,
                    help="largest budget for optuna-tpe (default 0.01; 0.02 takes ~6 min a run)")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console()
    study, space, evaluator = _setup(args.study)
    size = int(space.size)

    # -- the true front, by exhaustive enumeration through the exhaustive driver ---------
    t0 = time.perf_counter()
    _, _, f_all, _, _ = run(args.study, "exhaustive", size, 0)
    import moocore

    feas = f_all[np.isfinite(f_all).all(axis=1)]
    true_front = np.unique(feas[moocore.is_nondominated(feas)], axis=0)
    frame = Frame(true_front)
    console.print(f"[bold]{study.name}[/bold]: {size:,} candidates, {len(feas):,} feasible, "
                  f"true front {len(true_front)} points (enumerated in {time.perf_counter() - t0:.1f} s)")

    budgets = [max(1, int(round(b * size))) for b in BUDGETS]
    jobs = []
    for algo in args.drivers:
        top = max(b for b, frac in zip(budgets, BUDGETS, strict=True)
                  if (not algo.startswith("optuna") or frac <= args.optuna_max + 1e-12)
                  and (algo != "optuna-tpe" or frac <= args.tpe_max + 1e-12))
        jobs += [(args.study, algo, top, seed) for seed in range(args.seeds)]
    results: dict[str, list] = {a: [] for a in args.drivers}
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for algo, seed, f, ends, secs in pool.map(run, *zip(*jobs, strict=True)):
            results[algo].append((seed, f, ends, secs))
            console.print(f"  {algo:13s} seed {seed}: {len(f):5d} evaluations in {secs:6.1f} s", highlight=False)
    console.print(f"runs took {time.perf_counter() - t0:.1f} s on {args.jobs} processes")

    table = Table(title=f"hypervolume / true hypervolume (median of {args.seeds} seeds); "
                        f"evaluations to reach {TARGET}")
    table.add_column("driver")
    for b, frac in zip(budgets, BUDGETS, strict=True):
        table.add_column(f"{frac:.0%} ({b:,})", justify="right")
    table.add_column(f"evals to {TARGET}", justify="right")
    table.add_column("s / run", justify="right")
    summary = {}
    for algo in args.drivers:
        runs = results[algo]
        cells, to_target = [], []
        for b in budgets:
            if all(len(f) >= b for _, f, _, _ in runs):
                ratios = [frame.hv(f[:b]) / frame.true for _, f, _, _ in runs]
                cells.append(f"{np.median(ratios):.4f}")
                summary[(algo, b)] = float(np.median(ratios))
            else:
                cells.append("n/a")
        for _, f, ends, _ in runs:
            hit = next((e for e in ends if frame.hv(f[:e]) >= TARGET * frame.true), None)
            to_target.append(np.inf if hit is None else hit)
        med = float(np.median(to_target))
        reached = f"{med:,.0f}" if np.isfinite(med) else f">{max(len(f) for _, f, _, _ in runs):,}"
        secs = np.median([s for *_, s in runs])
        table.add_row(algo, *cells, reached, f"{secs:.1f}")
        summary[(algo, "evals")] = med
    console.print(table)

    if "nsga2" in args.drivers:
        ok = summary.get(("nsga2", budgets[-1]), 0) >= TARGET
        console.print(f"target (NSGA-II reaches {TARGET} of the true hypervolume within 5% of the space): "
                      + ("[green]met[/green]" if ok else "[red]not met[/red]"))
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
