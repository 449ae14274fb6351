"""Search benchmark: how much of the exact Pareto front does each driver find, and how much
of what it reports is really on it?

Each study (``--studies``; by default benchmarks/search-bench.yaml with two objectives,
search-bench-3obj.yaml with three, search-bench-constrained.yaml with three objectives and
constraints that bind hard) has a discrete space of 124,416 candidates, small enough to
enumerate: the exact front is the weakly non-dominated set of the feasible candidates. The
whole space is evaluated once with the study's evaluator and cached under
benchmarks/.cache/ (keyed by the study text and the evaluator and dse versions), so a rerun
does not evaluate it again; the searches then look their results up in that table, as the
runner looks up a candidate it has seen (the evaluator is deterministic).

Every search is what ``dse run`` drives: ``plan_search(study).build()``, the study's driver
inside its phases (search, then the front polish where it is on), asked and told batch by
batch in-process. Reported per driver, budget (share of the space) and seed:

- recall: the share of the exact front's points (candidates) on the reported front;
- off-front: the share of the reported front's points that the exact front dominates (they
  look Pareto-optimal only because better designs were never evaluated);
- hypervolume of the reported front as a ratio to the exact front's (all fronts in one
  frame: the exact front's ideal -> 0, its nadir -> 1, reference point 1.1);
- evaluations asked (a polish that reaches a local optimum stops before the budget) and the
  label the datasets would carry (exact, polished or approximate).

Cells give the median over the seeds and, in the per-seed columns, every seed's value.
Without a polish a driver's asks do not depend on its budget (only the last batch is cut
short), so one run per seed at the largest budget gives the smaller ones as prefixes; with
the polish each budget is its own run (the budget decides when the polish starts).

    python benchmarks/bench_search.py                      # default drivers, 5 seeds
    python benchmarks/bench_search.py --drivers nsga2 nsga2:nopolish --studies 3obj --seeds 3
    python benchmarks/bench_search.py --drivers nsga2 nsga2:ahead --studies 3obj   # asking ahead

``:ahead`` sets NSGA-II's ``ask_ahead`` (docs/search.md, "Asking ahead"): the loop then asks
as the runner does, one batch ahead, telling in ask order.

Targets (3 objectives, search-bench-3obj): at 2% of the space the median recall of nsga2
(with its default polish) is at least 0.95 with no off-front point; at 1% at least 0.85.
The script exits non-zero when a target it measured is missed.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
STUDIES = {
    "2obj": "search-bench.yaml",
    "3obj": "search-bench-3obj.yaml",
    "constrained": "search-bench-constrained.yaml",
}
BUDGETS = (0.01, 0.02, 0.05)
DRIVERS = ["nsga2", "nsga2:nopolish", "random", "random:polish"]
TARGETS = {
    ("3obj", 0.02): (0.95, 0.0),
    ("3obj", 0.01): (0.85, None),
}  # recall at least, off-front at most


def _study(
    path: str,
    algo: str | None = None,
    budget: int | None = None,
    seed: int | None = None,
    polish: bool | None = None,
    options: dict | None = None,
):
    from dse.study import Study, load_study

    study = load_study(path)
    if algo is None:
        return study
    data = study.model_dump(mode="json")
    data["search"].update(
        algorithm=algo, budget=budget, seed=seed, polish=polish, options=options or {}
    )
    return Study.model_validate(data)


def exact_table(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Objectives (minimised) and violations of every candidate, in grid order (cached)."""
    import pandas as pd

    from dse import __version__
    from dse.evaluators import load_evaluator
    from dse.pareto import objective_matrix, violation_matrix
    from dse.space import Space

    study = _study(path)
    evaluator = load_evaluator(study.evaluator)
    tag = hashlib.sha256(
        f"{Path(path).read_text()}|{evaluator.name}|{evaluator.version}|{__version__}".encode()
    )
    cached = CACHE / f"{Path(path).stem}-{tag.hexdigest()[:16]}.npz"
    if cached.exists():
        with np.load(cached) as z:
            return z["F"], z["G"]
    space = Space.from_study(study)
    parts = []
    for batch in space.enumerate(20_000):
        res = evaluator.evaluate(space.with_fixed(batch)).reset_index(drop=True)
        table = pd.concat([batch.reset_index(drop=True), res.assign(status="ok")], axis=1)
        parts.append((objective_matrix(table, study), violation_matrix(table, study)))
    F, G = np.vstack([p[0] for p in parts]), np.vstack([p[1] for p in parts])
    CACHE.mkdir(exist_ok=True)
    (CACHE / ".gitignore").write_text("*\n")
    tmp = cached.with_suffix(".tmp.npz")
    np.savez(tmp, F=F, G=G)
    tmp.replace(cached)
    return F, G


def _feasible(F: np.ndarray, G: np.ndarray) -> np.ndarray:
    return (G <= 0).all(axis=1) & np.isfinite(F).all(axis=1)


def _front(keys: np.ndarray, F: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Grid positions of the weakly non-dominated feasible candidates among ``keys``."""
    import moocore

    keys = np.unique(keys)
    keys = keys[ok[keys]]
    return keys[moocore.is_nondominated(F[keys], keep_weakly=True)] if len(keys) else keys


def run(path: str, variant: str, budget: int, seed: int):
    """One search as dse run drives it; the grid positions asked, in order, and what it says."""
    from dse.search import plan_search
    from dse.space import Space

    algo, *modes = variant.split(":")
    polish = True if "polish" in modes else (False if "nopolish" in modes else None)
    options = {"ask_ahead": True} if "ahead" in modes else None
    study = _study(path, algo, budget, seed, polish, options)
    space = Space.from_study(study)
    F, G = exact_table(path)
    driver = plan_search(study, space).build(None)
    asked, driver_s, flights = [], 0.0, []
    started = time.perf_counter()
    while True:  # as the runner drives it (Runner._search): one batch ahead where allowed
        t0 = time.perf_counter()
        while not driver.done and (not flights or (len(flights) == 1 and driver.may_ask_ahead())):
            batch = driver.ask()
            if len(batch) == 0:
                break
            flights.append(batch)
        if not flights:
            break
        batch = flights.pop(0)
        keys = space.flat_index(space.value_indices(batch))
        t1 = time.perf_counter()
        driver.tell(batch, F[keys], G[keys])
        driver.observe_cost(time.perf_counter() - t0, len(keys))
        driver.state()  # saved after every batch by the runner
        driver_s += time.perf_counter() - t1 + (t1 - t0)
        asked.append(keys)
    keys = np.concatenate(asked) if asked else np.empty(0, np.int64)
    return (
        path,
        variant,
        budget,
        seed,
        keys,
        driver.attributes(),
        time.perf_counter() - started,
        driver_s,
    )


class Frame:
    """Hypervolume in the exact front's frame: ideal -> 0, nadir -> 1, reference 1.1."""

    def __init__(self, front_f: np.ndarray) -> None:
        self.lo, self.hi = front_f.min(axis=0), front_f.max(axis=0)
        self.exact = self.hv(front_f)

    def hv(self, f: np.ndarray) -> float:
        import moocore

        if len(f) == 0:
            return 0.0
        z = (f - self.lo) / np.where(self.hi > self.lo, self.hi - self.lo, 1.0)
        return float(moocore.hypervolume(z, ref=np.full(f.shape[1], 1.1)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--studies",
        nargs="+",
        default=list(STUDIES),
        help=f"study files, or the short names {', '.join(STUDIES)}",
    )
    ap.add_argument(
        "--drivers",
        nargs="+",
        default=DRIVERS,
        help="algorithms; ':polish' / ':nopolish' turns the front polish on / off "
        "(default: the algorithm's own default)",
    )
    ap.add_argument(
        "--budgets", nargs="+", type=float, default=list(BUDGETS), help="shares of the space"
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (processes)")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from dse.space import Space

    console = Console(width=170)
    paths = {name: str(HERE / STUDIES[name]) if name in STUDIES else name for name in args.studies}
    exact = {}
    for name, path in paths.items():
        t0 = time.perf_counter()
        F, G = exact_table(path)
        ok = _feasible(F, G)
        front = _front(np.flatnonzero(ok), F, ok)
        exact[name] = (F, ok, front, Frame(F[front]))
        console.print(
            f"[bold]{name}[/bold] ({Path(path).name}): {len(F):,} candidates, {int(ok.sum()):,} feasible, "
            f"{F.shape[1]} objectives, exact front {len(front)} points "
            f"({time.perf_counter() - t0:.1f} s, cached in {CACHE.relative_to(HERE.parent)})"
        )

    jobs = []
    for path in paths.values():
        size = int(Space.from_study(_study(path)).size)
        budgets = sorted({max(1, round(b * size)) for b in args.budgets})
        for variant in args.drivers:
            prefix = (
                ":nopolish" in variant
                or variant.partition(":")[0]
                in ("random", "optuna-tpe", "optuna-nsga2", "exhaustive")
                and not variant.endswith(":polish")
            )
            for seed in range(args.seeds):
                jobs += [(path, variant, b, seed) for b in ([budgets[-1]] if prefix else budgets)]
    runs: dict = {}
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for path, variant, budget, seed, keys, attrs, secs, driver_s in pool.map(
            run, *zip(*jobs, strict=True)
        ):
            runs[(path, variant, budget, seed)] = (keys, attrs, secs, driver_s)
    console.print(
        f"{len(jobs)} runs took {time.perf_counter() - t0:.1f} s on {args.jobs} processes"
    )

    failed = []
    for name, path in paths.items():
        F, ok, front, frame = exact[name]
        true = set(front.tolist())
        size = len(F)
        table = Table(
            title=f"{name}: exact front {len(front)} points; median of {args.seeds} seeds "
            "(per seed in brackets)"
        )
        for col in (
            "driver",
            "budget",
            "recall",
            "recall per seed",
            "off-front",
            "off-front per seed",
            "hypervolume",
            "evaluations",
            "front label",
            "driver ms/eval",
        ):
            table.add_column(col, justify="left" if col in ("driver", "front label") else "right")
        for variant in args.drivers:
            for share in args.budgets:
                b = max(1, round(share * size))
                rec, off, hv, used, labels, cost = [], [], [], [], [], []
                for seed in range(args.seeds):
                    hit = runs.get((path, variant, b, seed))
                    if hit is None:  # a prefix of the run at the largest budget
                        top = max(k[2] for k in runs if k[:2] == (path, variant) and k[3] == seed)
                        keys, attrs, secs, driver_s = runs[(path, variant, top, seed)]
                        keys, attrs = keys[:b], {"front": "approximate"}
                    else:
                        keys, attrs, secs, driver_s = hit
                    found = _front(keys, F, ok)
                    rec.append(len(true.intersection(found.tolist())) / len(true))
                    off.append(
                        float(np.mean([k not in true for k in found.tolist()]))
                        if len(found)
                        else 0.0
                    )
                    hv.append(frame.hv(F[found]) / frame.exact)
                    used.append(len(keys))
                    labels.append(attrs.get("front", "?"))
                    cost.append(1e3 * driver_s / max(len(keys), 1) if hit is not None else np.nan)
                per_seed = lambda v: " ".join(f"{x:.2f}" for x in v)  # noqa: E731
                label = max(set(labels), key=labels.count) + (
                    f" ({len(set(labels))} kinds)" if len(set(labels)) > 1 else ""
                )
                table.add_row(
                    variant,
                    f"{share:.0%} ({b:,})",
                    f"{np.median(rec):.3f}",
                    per_seed(rec),
                    f"{np.median(off):.3f}",
                    per_seed(off),
                    f"{np.median(hv):.4f}",
                    f"{np.median(used):,.0f}",
                    label,
                    "" if np.isnan(cost).all() else f"{np.nanmedian(cost):.2f}",
                )
                target = TARGETS.get((name, share))
                if target and variant == "nsga2":
                    want_rec, want_off = target
                    met = np.median(rec) >= want_rec and (
                        want_off is None or np.median(off) <= want_off
                    )
                    failed += (
                        []
                        if met
                        else [
                            f"{name} at {share:.0%}: recall {np.median(rec):.3f} "
                            f"(target {want_rec}), off-front {np.median(off):.3f}"
                        ]
                    )
                    console.print(
                        f"target {name} nsga2 at {share:.0%}: recall >= {want_rec}"
                        + ("" if want_off is None else " and no off-front point")
                        + (" [green]met[/green]" if met else " [red]not met[/red]")
                    )
        console.print(table)
    for line in failed:
        console.print(f"[red]target missed[/red]: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
