"""pymoo NSGA-II over a mixed design space, driven through ask/tell.

Encoding: every discrete parameter is one decision variable holding the *index* of its
value (ordered numeric values keep their order, so SBX crossover and polynomial mutation
exploit it; the index is rounded back by a repair step). Categorical parameters are
indices too, but get an extra random-reset mutation because their order means nothing.
Continuous parameters are real variables in ``[low, high]``. Constraints are G <= 0
(study constraints, then evaluator infeasibility); NSGA-II ranks by constraint violation
first, so rows with NaN objectives (failed or infeasible) never enter the front.

No budget is wasted on duplicates: every candidate ever asked is remembered and mating
keeps only unseen ones; when mating cannot find enough, the batch is topped up with
unseen random candidates.

Resume: :meth:`NSGA2Driver.state` is plain data: the decision vectors, objectives and
violations of every batch told so far. :meth:`NSGA2Driver.restore` builds a fresh pymoo
algorithm with the same seed and replays the ask/tell sequence from that record without
evaluating anything; since pymoo draws all its randomness from ``algorithm.random_state``
(seeded by ``setup(..., seed=)``), the replayed algorithm is in exactly the state of an
uninterrupted one, and its next batch is the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dse.search.base import Driver
from dse.space import _column

BAD = 1e30  # objective value given to rows without finite objectives (they are infeasible)


def _pymoo():
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.duplicate import DuplicateElimination
    from pymoo.core.mutation import Mutation
    from pymoo.core.population import Population
    from pymoo.core.problem import Problem
    from pymoo.core.repair import Repair
    from pymoo.core.sampling import Sampling
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM

    return (NSGA2, DuplicateElimination, Mutation, Population, Problem, Repair, Sampling, SBX, PM)


class _Codec:
    """Decision vectors <-> candidate tables."""

    def __init__(self, space) -> None:
        self.space = space
        ps = space.parameters
        self.discrete = np.array([p.values is not None for p in ps], bool)
        self.categorical = np.array([p.kind == "categorical" for p in ps], bool)
        self.xl = np.array([0.0 if p.values is not None else p.low for p in ps], float)
        self.xu = np.array([len(p.values) - 1.0 if p.values is not None else p.high for p in ps], float)

    def repair(self, X: np.ndarray) -> np.ndarray:
        X = np.clip(np.asarray(X, float), self.xl, self.xu)
        X[:, self.discrete] = np.rint(X[:, self.discrete])
        return X

    def keys(self, X: np.ndarray) -> list[bytes]:
        return [row.tobytes() for row in np.ascontiguousarray(self.repair(np.atleast_2d(X)))]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        X = rng.uniform(self.xl, self.xu + self.discrete, size=(n, len(self.xl)))
        X[:, self.discrete] = np.floor(X[:, self.discrete])
        return self.repair(X)

    def to_frame(self, X: np.ndarray) -> pd.DataFrame:
        X = self.repair(np.atleast_2d(X))
        cols = {}
        for j, p in enumerate(self.space.parameters):
            if p.values is None:
                cols[p.name] = X[:, j]
            else:
                cols[p.name] = _column(p, np.asarray(p.values, dtype=object)[X[:, j].astype(np.int64)])
        return pd.DataFrame(cols)


def _build(codec: _Codec, *, pop_size: int, n_obj: int, n_constr: int, seed: int,
           options: dict[str, Any], seen: set[bytes]):
    NSGA2, DuplicateElimination, Mutation, Population, Problem, Repair, Sampling, SBX, PM = _pymoo()

    class _Problem(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=len(codec.xl), n_obj=n_obj, n_ieq_constr=n_constr,
                             xl=codec.xl, xu=codec.xu, vtype=float)

        def _evaluate(self, x, out, *args, **kwargs):  # pragma: no cover - ask/tell only
            raise RuntimeError("dse evaluates candidates itself")

    class _Sampling(Sampling):
        def _do(self, problem, n_samples, random_state=None, **kwargs):
            return codec.sample(random_state, n_samples)

    class _Repair(Repair):
        def _do(self, problem, X, **kwargs):
            return codec.repair(X)

    class _Mutation(Mutation):
        """Polynomial mutation, plus random reset of categorical indices."""

        def __init__(self, pm, reset_prob: float) -> None:
            super().__init__(prob=1.0)
            self.pm = pm
            self.reset_prob = reset_prob

        def _do(self, problem, X, random_state=None, **kwargs):
            X = self.pm._do(problem, X, random_state=random_state, **kwargs)
            cat = np.flatnonzero(codec.categorical)
            if len(cat):
                hit = random_state.random((len(X), len(cat))) < self.reset_prob
                draw = random_state.integers(0, (codec.xu[cat] + 1).astype(np.int64), size=(len(X), len(cat)))
                X[:, cat] = np.where(hit, draw, X[:, cat])
            return X

    class _NoRepeats(DuplicateElimination):
        """Drops candidates equal to each other, to the populations given, or to any asked before."""

        def do(self, pop, *args, return_indices=False, to_itself=True):
            taken = set(seen)
            for other in args:
                if other is not None and len(other):
                    taken.update(codec.keys(other.get("X")))
            keep = []
            for i, k in enumerate(codec.keys(pop.get("X")) if len(pop) else []):
                if k in taken:
                    continue
                keep.append(i)
                if to_itself:
                    taken.add(k)
            out = pop[keep]
            if return_indices:
                return out, keep, [i for i in range(len(pop)) if i not in set(keep)]
            return out

    n_var = len(codec.xl)
    algorithm = NSGA2(
        pop_size=pop_size,
        sampling=_Sampling(),
        crossover=SBX(prob=float(options.get("crossover_prob", 0.9)),
                      eta=float(options.get("crossover_eta", 5)), vtype=float),
        mutation=_Mutation(PM(prob=1.0, eta=float(options.get("mutation_eta", 5)), vtype=float),
                           reset_prob=float(options.get("categorical_reset_prob", 1.0 / n_var))),
        repair=_Repair(),
        eliminate_duplicates=_NoRepeats(),
    )
    algorithm.setup(_Problem(), termination=("n_gen", 10**9), seed=seed)
    return algorithm, Population


class NSGA2Driver(Driver):
    """pymoo NSGA-II; ``search.batch_size`` is the population size (one generation per batch).

    Options (``search.options``): ``pop_size`` (default batch_size), ``crossover_eta``,
    ``crossover_prob``, ``mutation_eta``, ``categorical_reset_prob``.
    """

    name = "nsga2"

    def __init__(self, space, **kwargs) -> None:
        super().__init__(space, **kwargs)
        self.codec = _Codec(space)
        self.pop_size = int(self.options.get("pop_size", self.batch_size))
        self.generation = 0
        self.exhausted = False
        self._record: list[dict[str, Any]] = []  # per told batch: X, F, G (plain lists)
        self._reset()

    def _reset(self) -> None:
        self._seen: set[bytes] = set()
        self._rng = np.random.default_rng([self.seed, 0x6E73])  # tops up short batches
        self._algorithm, self._Population = _build(
            self.codec, pop_size=self.pop_size, n_obj=self.n_objectives, n_constr=self.n_constraints,
            seed=self.seed, options=self.options, seen=self._seen)
        self._pending = None

    @property
    def done(self) -> bool:
        return self.asked >= self.budget or self.exhausted

    # -- ask / tell ------------------------------------------------------------------------
    def _ask_x(self) -> np.ndarray:
        want = min(self.pop_size, self.budget - self.asked)
        algo = self._algorithm
        pop = algo.ask()
        algo.termination.force_termination = False  # an empty mating round must not end the run
        X = np.empty((0, len(self.codec.xl))) if pop is None else self.codec.repair(pop.get("X"))
        X = X[:want]
        if len(X) < want:
            X = np.vstack([X, self._top_up(X, want - len(X))])
        return X

    def _top_up(self, X: np.ndarray, n: int) -> np.ndarray:
        """Up to ``n`` unseen random candidates (fewer only when the space is exhausted)."""
        taken = self._seen | set(self.codec.keys(X)) if len(X) else set(self._seen)
        out: list[np.ndarray] = []
        for _ in range(50):
            cand = self.codec.sample(self._rng, 4 * n)
            for row, k in zip(cand, self.codec.keys(cand), strict=True):
                if k not in taken:
                    taken.add(k)
                    out.append(row)
                    if len(out) == n:
                        return np.array(out)
        if self.space.is_discrete and self.space.size <= 2_000_000:  # finish a small space exactly
            idx = self.space.indices_of(np.arange(int(self.space.size))).astype(float)
            for row, k in zip(idx, self.codec.keys(idx), strict=True):
                if k not in taken:
                    taken.add(k)
                    out.append(row)
                    if len(out) == n:
                        break
        return np.array(out).reshape(-1, len(self.codec.xl))

    def ask(self) -> pd.DataFrame:
        X = self._ask_x()
        self._pending = X
        self._seen.update(self.codec.keys(X))
        self.asked += len(X)
        if len(X) == 0:
            self.exhausted = True
        return self.codec.to_frame(X)

    def _tell_x(self, X: np.ndarray, F: np.ndarray, G: np.ndarray) -> None:
        F = np.asarray(F, float).reshape(len(X), self.n_objectives)
        G = np.asarray(G, float).reshape(len(X), self.n_constraints)
        bad = ~np.isfinite(F).all(axis=1)
        G = np.where(np.isfinite(G), G, BAD)
        G[bad, -1] = np.maximum(G[bad, -1], 1.0)
        F = np.where(np.isfinite(F), F, BAD)
        pop = self._Population.new(X=X)
        pop.set("F", F, "G", G)
        self._algorithm.tell(infills=pop)
        self.generation += 1

    def tell(self, candidates, objectives, violations) -> None:
        X = self._pending
        if X is None or len(X) != len(candidates):
            raise RuntimeError("tell() must follow ask() with the same candidates")
        self._pending = None
        if len(X):
            self._tell_x(X, objectives, violations)
        self.told += len(X)
        self._record.append({"X": X.tolist(), "F": _nan_to_none(objectives), "G": _nan_to_none(violations)})

    # -- plain-data state ---------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {**super().state(), "generation": self.generation, "exhausted": self.exhausted,
                "pop_size": self.pop_size, "batches": self._record}

    def restore(self, state: dict[str, Any]) -> None:
        self._record = []
        self.asked = self.told = self.generation = 0
        self.exhausted = False
        self._reset()
        for b in state["batches"]:  # replay: same seed, same asks, stored results
            X = self._ask_x()
            stored = np.asarray(b["X"], float).reshape(-1, len(self.codec.xl))
            if not np.array_equal(X, stored):
                raise RuntimeError("cannot restore the NSGA-II state: replay diverged "
                                   "(different pymoo version or search options?)")
            self._seen.update(self.codec.keys(X))
            self.asked += len(X)
            if len(X):
                self._tell_x(X, _none_to_nan(b["F"]), _none_to_nan(b["G"]))
            self.told += len(X)
            self._record.append(b)
        self.exhausted = bool(state.get("exhausted", False))
        self.asked, self.told = int(state["asked"]), int(state["told"])


def _nan_to_none(a) -> list:
    a = np.asarray(a, float)
    return [[None if not np.isfinite(v) else float(v) for v in row] for row in a.reshape(len(a), -1)]


def _none_to_nan(rows) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in rows], float)
