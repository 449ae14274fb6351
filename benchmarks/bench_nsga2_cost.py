"""A search driver's own cost per evaluation along a run: does a generation cost more late in a run?

The nsga2 driver (``--algorithm``: or optuna-nsga2, optuna-tpe) alone (no polish) searches benchmarks/search-bench.yaml for ``--evaluations``
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
    python benchmarks/bench_nsga2_cost.py --algorithm optuna-nsga2        # 3,000, 1 seed
    python benchmarks/bench_nsga2_cost.py --algorithm optuna-tpe --evaluations 2000

For the optuna drivers (their trials in ``optuna.journal``, as in a run) it also prints the
optuna trials per evaluation (a repeat of an asked candidate is replaced by a fresh trial, so
late in a run a slot takes 2-3 trials: the same trials before and after) and the CPU time
per trial. 2026-11-29, seed 0, on 2 cores loaded by other work (CPU time, yet about 20%
noise under that load); ms per evaluation (per trial), before (ee99345: optuna read every
trial of the study several times at every ask) and after:

    evaluations   trials/eval   optuna-nsga2 before   after         optuna-tpe before   after
    0-500             1.09           11.5 (10.5)      11.0 (10.1)       17.9 (15.0)   19.5 (16.4)
    500-1,000         1.18            9.2 (7.8)       11.4 (9.6)        43.4 (25.5)   35.6 (20.9)
    1,000-1,500       1.48           15.7 (10.6)      18.2 (12.3)       97.1 (43.7)   71.4 (32.1)
    1,500-2,000       2.08           31.3 (15.0)      28.2 (13.5)      155.0 (56.2)  102.6 (37.1)
    2,000-2,500       2.33           45.1 (19.4)      37.1 (16.0)
    2,500-3,000       2.57           65.4 (25.4)      34.6 (13.5)
    whole run                        89.0 s           70.2 s (55.0 s in a quieter minute)
                                                                       156.7 s       114.6 s

(trials/eval: optuna-nsga2's; optuna-tpe's are 1.19, 1.70, 2.22, 2.76.) optuna-nsga2's time
per trial no longer grows with the trials so far (10-16 ms, most of it optuna's journal
writes, an ``fsync`` each); its time per evaluation grows with the repeats it draws as it
converges. optuna-tpe's still grows: about 70% of an ask late in a run is TPE's own model
(``TPESampler._sample``: its Parzen estimators over every complete trial, its split of them
by non-domination rank), which fits on all past trials by design; optuna 5's TPE has no
option to limit the trials it reads (``n_ei_candidates`` sets the candidates scored per
ask, not the trials fitted).
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
) -> list[tuple[int, float, int]]:
    """(evaluations so far, driver CPU seconds so far, optuna trials so far) at every batch end.

    optuna trials: the evaluations plus the repeats replaced by fresh trials (0 for nsga2)."""
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
        marks, spent, n, trials = [], 0.0, 0, 0
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
            trials += len(getattr(driver, "_ids", ()))  # the optuna trials of this batch
            marks.append((n, spent, trials))
    return marks


def _at(marks: list[tuple[int, float, int]], evaluations: int, what: int = 1) -> float:
    """Driver seconds (``what`` 1) or optuna trials (2) at the first batch end with at least
    ``evaluations`` (0 for none)."""
    if evaluations == 0:
        return 0.0
    return next((m[what] for m in marks if m[0] >= evaluations), marks[-1][what])


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
    optuna = args.algorithm != "nsga2"
    print(
        f"{'evaluations':>14} {'ms/eval':>8}"
        + (f" {'trials/eval':>11} {'ms/trial':>8}" if optuna else "")
    )
    for lo in range(0, args.evaluations, args.stretch):
        hi = min(lo + args.stretch, args.evaluations)
        seconds = [_at(marks, hi) - _at(marks, lo) for marks in runs]
        trials = [_at(marks, hi, 2) - _at(marks, lo, 2) for marks in runs]
        line = f"{lo:>6,}-{hi:<7,} {1e3 * np.median(seconds) / (hi - lo):8.3f}"
        if optuna:  # the repeats replaced by fresh trials: more trials per evaluation late
            per_trial = [1e3 * s / max(t, 1) for s, t in zip(seconds, trials, strict=True)]
            line += f" {np.median(trials) / (hi - lo):11.2f} {np.median(per_trial):8.3f}"
        print(line)
    print(
        f"whole run: {np.median([m[-1][1] for m in runs]):.1f} s of driver CPU time for {args.evaluations:,} evaluations"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
