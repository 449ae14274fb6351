"""pymoo NSGA-II over a mixed design space, driven through ask/tell.

Encoding: every discrete parameter is one decision variable holding the *index* of its
value (ordered numeric values keep their order, so SBX crossover and polynomial mutation
exploit it; the index is rounded back by a repair step). Categorical parameters are
indices too, but get an extra random-reset mutation because their order means nothing.
Continuous parameters are real variables in ``[low, high]``. Constraints are G <= 0
(study constraints, then evaluator infeasibility); NSGA-II ranks by constraint violation
first, so rows with NaN objectives (failed or infeasible) never enter the front: their
objectives are replaced by a huge value and their last violation raised to at least 1.

No budget is wasted on duplicates: every candidate ever asked is remembered in a hash set
(of integer grid positions in a discrete space, of the decision vectors' bytes otherwise)
that is looked up, never copied; mating keeps only unseen candidates, and when ten rounds
of mating cannot find enough, the batch is topped up with unseen random candidates. So a
generation costs the same late in a run as early.

Resume: every generation starts from plain data, in an uninterrupted run too. The driver
keeps only the generation counter, the current (surviving) population as numbers, the
decision vectors asked so far (for the duplicate check) and the seed. In a results folder
the asked vectors are appended to :data:`ASKED_FILE` (raw float64 rows) when the state is
saved, and the state names how many rows of it are its own: a saved state costs one
population and one batch of rows, whatever the generation (the whole record, rewritten
into ``state.json`` every generation, made a late generation cost several times an early
one: ``benchmarks/bench_nsga2_cost.py``). Rows appended for a batch whose state was not
saved (a killed run) are cut off on restore. Without a folder (library use) the record is
in the state itself, as a list. :meth:`ask` builds a fresh pymoo NSGA-II for the
generation, seeded from ``(seed, generation)`` through numpy's ``SeedSequence``, hands it
the stored population as an already evaluated initial population (pymoo ranks it; nothing
is evaluated) and asks it for offspring; the top-up candidates
come from a generator seeded the same way. :meth:`tell` lets pymoo's rank-and-crowding
survival pick the next population out of parents and offspring and stores it as plain
numbers. :meth:`state` is that data and :meth:`restore` only loads it, so a resumed run
executes exactly the code of an uninterrupted one and asks the same next batch: with the
same seed and pymoo version the final front is the same. No ask/tell history is replayed
and the state does not grow with the generations. After a pymoo upgrade a saved state
still resumes (it holds no pymoo objects); the following batches are then those the new
pymoo draws from the same data, which need not be the old version's.

Asking ahead (``ask_ahead``, off by default): the runner asks generation g + 1 right after
g, before g is told (:meth:`SearchDriver.may_ask_ahead`), so its workers start on it while
g is stored and told. A batch is bred from the population told so far and seeded by its
batch number (:attr:`asked_batches`, the generation's when not asking ahead: the same
candidates as before); the tell of a batch asked ahead merges it into the current
population, which is not the one it was bred from, by the survival of a fresh algorithm
seeded by the generation. The state then names the batch asked and not told (``untold``:
its size; its decision vectors are the last rows of the asked record), and a restored
driver's first :meth:`ask` gives it again, so a resumed run asks what the uninterrupted one
asks.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from dse.errors import StoreError
from dse.files import append_durably
from dse.search.base import DriverOptions, Problem, SearchDriver
from dse.space import _column
from dse.study import MAX_BATCH
from dse.yamlfile import open_regular

BAD = 1e30  # objective value given to rows without finite objectives (they are infeasible)
STATE_VERSION = 2  # 2: population as plain data; earlier states (ask/tell history) are converted
#: every decision vector asked, in ask order, as little-endian float64 rows (one value per
#: parameter: a value index, or the value of a continuous parameter); the state says how
#: many rows are its own (``asked_rows``)
ASKED_FILE = "nsga2-asked.f64"


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


def _seed(seed: int, generation: int, purpose: int) -> np.random.SeedSequence:
    """A stable seed for one purpose in one generation (independent of Python's hash())."""
    return np.random.SeedSequence(
        [int(seed) & 0xFFFFFFFF, int(seed) >> 32, int(generation), purpose]
    )


# purposes: pymoo's random_state, the top-up sampler, the survival of a batch asked ahead
PYMOO, TOP_UP, SURVIVAL = 0x6E7367, 0x746F70, 0x737276
# pymoo mates again until it has enough children not seen before, up to 100 times; late in a
# run almost every child is a repeat, so those rounds cost several times the rest of a
# generation and grow with the run. After 10 rounds the batch is topped up with unseen random
# candidates instead: a generation then costs the same late as early (bench_nsga2_cost.py),
# with the same recall and hypervolume within seed noise (bench_search.py).
MATING_RETRIES = 10


class _Codec:
    """Decision vectors <-> candidate tables."""

    def __init__(self, space) -> None:
        self.space = space
        ps = space.parameters
        self.discrete = np.array([p.values is not None for p in ps], bool)
        self.categorical = np.array([p.kind == "categorical" for p in ps], bool)
        self.xl = np.array([0.0 if p.values is not None else p.low for p in ps], float)
        self.xu = np.array(
            [len(p.values) - 1.0 if p.values is not None else p.high for p in ps], float
        )
        self.strides = space.strides if space.indexable else None

    @property
    def n_var(self) -> int:
        return len(self.xl)

    def repair(self, X: np.ndarray) -> np.ndarray:
        X = np.clip(np.asarray(X, float), self.xl, self.xu)
        X[:, self.discrete] = np.rint(X[:, self.discrete])
        return X

    def keys(self, X: np.ndarray) -> list[int] | list[bytes]:
        """Hashable keys of decision vectors: grid positions in a discrete space, bytes otherwise."""
        X = self.repair(np.atleast_2d(X))
        if self.strides is not None:
            return (X.astype(np.int64) @ self.strides).tolist()
        return [row.tobytes() for row in np.ascontiguousarray(X)]

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
                cols[p.name] = _column(
                    p, np.asarray(p.values, dtype=object)[X[:, j].astype(np.int64)]
                )
        return pd.DataFrame(cols)

    def rows(self, X: np.ndarray) -> list[list[int | float]]:
        """Decision vectors as JSON-able rows: value indices as ints, reals as floats."""
        return [
            [int(v) if d else float(v) for v, d in zip(row, self.discrete, strict=True)]
            for row in np.atleast_2d(X)
        ]


def _build(
    codec: _Codec,
    *,
    pop_size: int,
    n_obj: int,
    n_constr: int,
    seed: np.random.SeedSequence,
    options: NSGA2Options,
    seen: set,
    population=None,
):
    """A fresh NSGA-II; ``population`` (evaluated) becomes its initial population.

    Long for one reason: pymoo's classes are subclassed here, in the function, because pymoo
    is imported only when NSGA-II runs (its import costs half a second that ``dse validate``
    and the other drivers should not pay); each subclass is a few lines closing over
    ``codec`` and ``seen``."""
    NSGA2, DuplicateElimination, Mutation, Population, Problem, Repair, Sampling, SBX, PM = _pymoo()

    class _Problem(Problem):
        def __init__(self) -> None:
            super().__init__(
                n_var=codec.n_var,
                n_obj=n_obj,
                n_ieq_constr=n_constr,
                xl=codec.xl,
                xu=codec.xu,
                vtype=float,
            )

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
                draw = random_state.integers(
                    0, (codec.xu[cat] + 1).astype(np.int64), size=(len(X), len(cat))
                )
                X[:, cat] = np.where(hit, draw, X[:, cat])
            return X

    class _NoRepeats(DuplicateElimination):
        """Drops candidates equal to each other, to the populations given, or to any asked before.
        Inactive while the stored population is handed in (it was all asked before). The set
        of candidates asked before is looked up, never copied: a call costs the size of the
        populations it compares, not of the run so far."""

        active = True

        def do(self, pop, *args, return_indices=False, to_itself=True):
            if not self.active:
                keep = list(range(len(pop)))
                return (pop, keep, []) if return_indices else pop
            taken = set()  # the populations given and the candidates kept so far
            for other in args:
                if other is not None and len(other):
                    taken.update(codec.keys(other.get("X")))
            keep = []
            for i, k in enumerate(codec.keys(pop.get("X")) if len(pop) else []):
                if k in seen or k in taken:
                    continue
                keep.append(i)
                if to_itself:
                    taken.add(k)
            out = pop[keep]
            if return_indices:
                kept = set(keep)
                return out, keep, [i for i in range(len(pop)) if i not in kept]
            return out

    no_repeats = _NoRepeats()
    algorithm = NSGA2(
        pop_size=pop_size,
        sampling=_Sampling() if population is None else population,
        crossover=SBX(prob=options.crossover_prob, eta=options.crossover_eta, vtype=float),
        mutation=_Mutation(
            PM(prob=1.0, eta=options.mutation_eta, vtype=float),
            reset_prob=(
                1.0 / codec.n_var
                if options.categorical_reset_prob is None
                else options.categorical_reset_prob
            ),
        ),
        repair=_Repair(),
        eliminate_duplicates=no_repeats,
    )
    algorithm.mating.n_max_iterations = MATING_RETRIES
    algorithm.setup(_Problem(), termination=("n_gen", 10**9), seed=int(seed.generate_state(1)[0]))
    if (
        population is not None
    ):  # the stored, evaluated population: pymoo ranks it, evaluates nothing
        no_repeats.active = False
        initial = algorithm.ask()
        algorithm.tell(infills=initial)
        no_repeats.active = True
    return algorithm


def _population(X: np.ndarray, F: np.ndarray, G: np.ndarray):
    Population = _pymoo()[3]
    pop = Population.new(X=np.asarray(X, float))
    pop.set("F", np.asarray(F, float), "G", np.asarray(G, float))
    return pop


class NSGA2Options(DriverOptions):
    pop_size: int | None = Field(
        default=None,
        ge=2,
        le=MAX_BATCH,
        description="population size (default: search.batch_size)",
    )
    crossover_prob: float = Field(default=0.9, ge=0, le=1, description="SBX crossover probability")
    crossover_eta: float = Field(default=5.0, gt=0, description="SBX distribution index")
    mutation_eta: float = Field(
        default=5.0, gt=0, description="polynomial mutation distribution index"
    )
    categorical_reset_prob: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="random reset of a categorical index per child (default: 1 / parameters)",
    )
    ask_ahead: bool = Field(
        default=False,
        description="breed the next generation while the last is evaluated, from the "
        "generations told so far (a generation's lag), so that a fast evaluator's workers do "
        "not wait between generations",
    )


class NSGA2Driver(SearchDriver):
    """pymoo NSGA-II; ``search.batch_size`` is the population size (one generation per batch)."""

    name = "nsga2"
    Options = NSGA2Options
    polish_default = True
    owned_files = (ASKED_FILE,)

    def __init__(self, problem: Problem, options: NSGA2Options) -> None:
        super().__init__(problem, options)
        self.codec = _Codec(problem.space)
        self.pop_size = options.pop_size or problem.batch_size
        self.generation = 0
        self.exhausted = False
        n = self.codec.n_var
        # the current population (survivors of the last generation), all plain numbers:
        self._X = np.empty((0, n))
        self._F = np.empty((0, self.n_objectives))
        self._G = np.empty((0, self.n_constraints))
        # the decision vectors asked and not yet in ASKED_FILE (all of them without a folder)
        self._unsaved: list[np.ndarray] = []
        self._saved = 0  # rows of ASKED_FILE that are this run's
        self._cut: int | None = 0  # ASKED_FILE's bytes to keep before the next append
        self._seen: set = set()  # the keys (Codec.keys) of every vector asked
        # the batches asked and not told, oldest first: the decision vectors, the generation
        # they were asked in, and the pymoo algorithm that bred them
        self._pending: deque[tuple[np.ndarray, int, Any]] = deque()
        # batches a restored state names as asked and not told: ask() gives them again
        self._replay: deque[np.ndarray] = deque()

    @classmethod
    def describe(cls, problem: Problem, options: NSGA2Options) -> str:
        return f"{cls.name}, asking ahead" if options.ask_ahead else cls.name

    @property
    def asked_batches(self) -> int:
        """Batches asked so far: the generations told, and those asked and not told (one
        ahead of the generation when asking ahead)."""
        return self.generation + len(self._pending) + len(self._replay)

    @property
    def done(self) -> bool:
        return (self.asked >= self.budget or self.exhausted) and not self._replay

    def may_ask_ahead(self) -> bool:
        """``ask_ahead``: the next generation is bred while the last is evaluated."""
        return bool(self.options.ask_ahead) and not self.done

    # -- ask / tell ------------------------------------------------------------------------
    def ask(self) -> pd.DataFrame:
        if self._replay:  # asked before the state was saved: the same batch, counted already
            X = self._replay.popleft()
            self._pending.append((X, -1, None))
            return self.codec.to_frame(X)
        want = min(self.pop_size, self.budget - self.asked)
        # seeded by the batch's number: asked ahead, a batch is asked before the last is told
        algorithm = self._algorithm(_seed(self.seed, self.asked_batches, PYMOO))
        pop = algorithm.ask()
        X = np.empty((0, self.codec.n_var)) if pop is None else self.codec.repair(pop.get("X"))
        X = X[:want]
        if len(X) < want:
            X = np.vstack([X, self._top_up(X, want - len(X))])
        if len(X) == 0:
            self.exhausted = True
            return self.codec.to_frame(X)
        self._pending.append((X, self.generation, algorithm))
        self._unsaved.append(np.array(X, float))
        self._seen.update(self.codec.keys(X))
        self.asked += len(X)
        return self.codec.to_frame(X)

    def _algorithm(self, seed: int):
        """pymoo's NSGA-II on the current population (none before the first tell), seeded."""
        return _build(
            self.codec,
            pop_size=self.pop_size,
            n_obj=self.n_objectives,
            n_constr=self.n_constraints,
            seed=seed,
            options=self.options,
            seen=self._seen,
            population=_population(self._X, self._F, self._G) if len(self._X) else None,
        )

    def _top_up(self, X: np.ndarray, n: int) -> np.ndarray:
        """Up to ``n`` unseen random candidates (fewer only when the space is exhausted)."""
        rng = np.random.default_rng(_seed(self.seed, self.asked_batches, TOP_UP))
        seen = self._seen
        taken = set(self.codec.keys(X)) if len(X) else set()  # this batch's; seen is not copied
        out: list[np.ndarray] = []
        for _ in range(50):
            cand = self.codec.sample(rng, 4 * n)
            for row, k in zip(cand, self.codec.keys(cand), strict=True):
                if k not in seen and k not in taken:
                    taken.add(k)
                    out.append(row)
                    if len(out) == n:
                        return np.array(out)
        if self.space.is_discrete and self.space.size <= 2_000_000:  # finish a small space exactly
            idx = self.space.indices_of(np.arange(int(self.space.size))).astype(float)
            for row, k in zip(idx, self.codec.keys(idx), strict=True):
                if k not in seen and k not in taken:
                    taken.add(k)
                    out.append(row)
                    if len(out) == n:
                        break
        return np.array(out).reshape(-1, self.codec.n_var)

    def tell(self, candidates, objectives, violations) -> None:
        if not self._pending or len(self._pending[0][0]) != len(candidates):
            raise RuntimeError("tell() must follow ask() with the same candidates, in ask order")
        X, generation, algorithm = self._pending.popleft()
        F = np.asarray(objectives, float).reshape(len(X), self.n_objectives)
        G = np.asarray(violations, float).reshape(len(X), self.n_constraints)
        F, G = _for_pymoo(F, G)
        if generation != self.generation:
            # asked ahead: the population it was bred from is not the current one, which the
            # survival merges it into (by pymoo's own step, seeded by the generation)
            algorithm = self._algorithm(_seed(self.seed, self.generation, SURVIVAL))
        algorithm.tell(infills=_population(X, F, G))  # rank-and-crowding survival
        survivors = algorithm.pop
        self._X = np.array(survivors.get("X"), float).reshape(-1, self.codec.n_var)
        self._F = np.array(survivors.get("F"), float).reshape(-1, self.n_objectives)
        self._G = np.array(survivors.get("G"), float).reshape(-1, self.n_constraints)
        self.generation += 1
        self.told += len(X)

    # -- plain-data state ---------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """JSON-able: the population (decision vectors; objectives and violations as pymoo
        saw them, failed rows at 1e30 with violation >= 1, so no NaN), the asked record: in
        a results folder the number of rows of :data:`ASKED_FILE`, the rows asked since the
        last call appended to it (durably, before the runner saves this state)."""
        return {
            **super().state(),
            "version": STATE_VERSION,
            "seed": self.seed,
            "generation": self.generation,
            # the batches asked and not told, oldest first: the last rows of the asked record
            "untold": [len(X) for X, *_ in self._pending] + [len(X) for X in self._replay],
            "exhausted": self.exhausted,
            "pop_size": self.pop_size,
            "population": {
                "X": self.codec.rows(self._X),
                "F": self._F.tolist(),
                "G": self._G.tolist(),
            },
            **self._asked_record(),
        }

    def _asked_record(self) -> dict[str, Any]:
        n = self.codec.n_var
        new = np.vstack(self._unsaved) if self._unsaved else np.empty((0, n))
        if self.problem.work_dir is None:
            return {"asked_candidates": self.codec.rows(new)}
        if len(new) or self._cut is not None:
            data = np.ascontiguousarray(new, dtype="<f8").tobytes()
            append_durably(self._asked_path, data, keep=self._cut)
            self._saved += len(new)
            self._unsaved, self._cut = [], None
        return {"asked_file": ASKED_FILE, "asked_rows": self._saved}

    @property
    def _asked_path(self):
        return Path(self.problem.work_dir) / ASKED_FILE

    def _read_asked(self, rows: int) -> np.ndarray:
        """The first ``rows`` rows of :data:`ASKED_FILE` (a state names how many are its own)."""
        n, path = self.codec.n_var, self._asked_path if self.problem.work_dir else None
        want = rows * n * 8
        try:
            if path is None:
                raise FileNotFoundError("no results folder")
            with open_regular(path) as f:  # (a pipe planted there would hold the read)
                data = f.read(want)
        except OSError as exc:
            raise StoreError(
                f"the NSGA-II state names {rows:,} asked candidates in {ASKED_FILE}, which "
                f"cannot be read ({exc.strerror or exc}): start a new run"
            ) from None
        if len(data) < want:
            raise StoreError(
                f"{path} holds {len(data) // (8 * n):,} of the {rows:,} candidates the NSGA-II "
                "state says were asked (the file is damaged): start a new run"
            )
        return np.frombuffer(data, dtype="<f8").reshape(rows, n).astype(float)

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION and "batches" in state:
            state = self._from_history(state)
        if int(state["seed"]) != self.seed or int(state["pop_size"]) != self.pop_size:
            raise RuntimeError(
                "cannot restore the NSGA-II state: the seed or population size changed"
            )
        super().restore(state)
        n = self.codec.n_var
        self.generation = int(state["generation"])
        self.exhausted = bool(state["exhausted"])
        pop = state["population"]
        self._X = np.array(pop["X"], float).reshape(-1, n)
        self._F = np.array(pop["F"], float).reshape(-1, self.n_objectives)
        self._G = np.array(pop["G"], float).reshape(-1, self.n_constraints)
        if "asked_candidates" in state:  # without a folder, or saved by dse before ASKED_FILE
            asked = np.array(state["asked_candidates"], float).reshape(-1, n)
            # in a folder, ASKED_FILE is written anew from these at the next save
            self._unsaved, self._saved, self._cut = [asked], 0, 0
        else:
            asked = self._read_asked(int(state["asked_rows"]))
            # rows after these were asked in a batch whose state was not saved: cut off
            self._unsaved, self._saved, self._cut = [], len(asked), asked.nbytes
        self._seen = set(self.codec.keys(asked)) if len(asked) else set()
        self._pending, self._replay = deque(), deque()
        end = len(asked)
        for n in reversed([int(n) for n in state.get("untold", [])]):
            self._replay.appendleft(asked[end - n : end])
            end -= n

    def _from_history(self, old: dict[str, Any]) -> dict[str, Any]:
        """A state of the earlier layout (every told batch, replayed on restore) in this one:
        the population is the rank-and-crowding survivors of everything told. The run goes
        on from there; its next batches are not those the old driver would have asked."""
        n, batches = self.codec.n_var, old["batches"]
        X = np.array([row for b in batches for row in b["X"]], float).reshape(-1, n)
        F = np.array(
            [[np.nan if v is None else v for v in r] for b in batches for r in b["F"]], float
        ).reshape(-1, self.n_objectives)
        G = np.array(
            [[np.nan if v is None else v for v in r] for b in batches for r in b["G"]], float
        ).reshape(-1, self.n_constraints)
        F, G = _for_pymoo(F, G)
        if len(X):
            algorithm = _build(
                self.codec,
                pop_size=self.pop_size,
                n_obj=self.n_objectives,
                n_constr=self.n_constraints,
                seed=_seed(self.seed, len(batches), PYMOO),
                options=self.options,
                seen=set(),
            )
            pop = algorithm.survival.do(
                algorithm.problem,
                _population(X, F, G),
                n_survive=self.pop_size,
                random_state=np.random.default_rng(_seed(self.seed, len(batches), PYMOO)),
            )
            X, F, G = pop.get("X"), pop.get("F"), pop.get("G")
        return {
            "asked": int(old["asked"]),
            "told": int(old["told"]),
            "seed": self.seed,
            "pop_size": int(old.get("pop_size", self.pop_size)),
            "generation": len(batches),
            "exhausted": bool(old.get("exhausted", False)),
            "population": {
                "X": self.codec.rows(X),
                "F": np.asarray(F).tolist(),
                "G": np.asarray(G).tolist(),
            },
            "asked_candidates": self.codec.rows(
                np.array([r for b in batches for r in b["X"]], float).reshape(-1, n)
            ),
        }


def _for_pymoo(F: np.ndarray, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NaN-free objectives and violations: rows without finite objectives get BAD objectives
    and a last violation of at least 1, so they rank below every feasible row."""
    bad = ~np.isfinite(F).all(axis=1)
    G = np.where(np.isfinite(G), G, BAD)
    G[bad, -1] = np.maximum(G[bad, -1], 1.0)
    return np.where(np.isfinite(F), F, BAD), G
