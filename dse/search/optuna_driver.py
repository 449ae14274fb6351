"""optuna samplers (NSGA-II, TPE, GP) driven through ask/tell in batches.

Parameters carry their real values, so that ``optuna-dashboard`` shows what was evaluated:
an evenly spaced discrete parameter is an integer or float distribution with that step
(samplers exploit the order), any other discrete one a categorical distribution over its
values, a continuous one a float distribution. A stepped float is the space's own value
(0.85, not optuna's ``low + k * step`` = 0.8500000000000001): the sampler is wrapped so that
what it draws is snapped to the grid before optuna stores it. Every objective is minimised
and named after its metric (:meth:`optuna.study.Study.set_metric_names`).

Constraints (G <= 0 is feasible: one per study constraint, value minus bound, then the
evaluator's verdict) are written as optuna's list, the trial system attribute
``constraints``: optuna 5 reads it (``trial.constraints`` keys "0", "1", ...; its samplers
count feasibility and violations from it) and optuna-dashboard 0.21 reads only that
format (not optuna 5's ``constraints:<name>`` keys), to grey out infeasible trials in its
plots. Their names are the study's user attribute ``constraints`` (the list's order), and
every trial carries each value by name too, as the user attribute ``constraint: <name>``,
which the dashboard lists with the trial and can sort its table by. Not both optuna
formats: a trial with both has every constraint twice (summed violations doubled, and the
GP sampler would model each twice).

Infeasible trials are told with the worst value of each objective told so far, so that
they are dominated by the feasible ones: optuna-dashboard's "Best Trials" is the
non-dominated complete trials, constraints ignored (optuna-dashboard issue #772), unlike
optuna's :attr:`~optuna.study.Study.best_trials`. Their objective values as evaluated are
the user attributes named after the metrics. The NSGA-II and TPE samplers rank infeasible
trials by their violations alone, so this changes nothing they do; the GP sampler fits its
objective models to every complete trial, and sees an infeasible region as a plateau of
the worst values. Objective values that are not finite (a failed evaluation) get the same
worst values.

Storage: optuna's own durable storage. By default a journal file ``optuna.journal`` in the
results folder (:class:`optuna.storages.journal.JournalFileBackend`); ``search.options.storage``
may name a database URL instead (``sqlite:///...``, ``postgresql://...``), with
``search.options.study_name`` (default: the dse study's name). Without a results folder
(library use, benchmarks) the study lives in memory.

Determinism: the sampler is rebuilt for every batch with a seed derived from
``(search.seed, batch number)``; samplers keep everything else in the storage. So the
batches depend only on the seed and the results told, never on the worker count or on
the order in which evaluations finished (the runner tells them in ask order).

Duplicates: a trial whose parameters were asked before is replaced by a fresh trial
(``max_resample`` times per slot, default 2), so the budget buys distinct candidates. Then
the slot is filled by a candidate nobody has asked: on a discrete space of at most
:data:`LISTED_MAX` candidates one drawn (seeded) from the list of unasked ones and put in
with :meth:`optuna.study.Study.enqueue_trial`, and when that list is empty the search is
over (``done``: every candidate asked, however large the budget); on a larger or
continuous space a seeded random sampler draws up to 50 times, and the slot takes the
repeat if none is new (looked up, not evaluated, but counted against the budget). A trial
that repeats an earlier one is told ``FAIL`` with the user attribute ``duplicate_of`` (the
number of the trial it repeats) when the batch's results are handed over, so the complete
trials are the distinct evaluations, each once (optuna-dashboard counted 485 trials for
400 evaluations when repeats were completed with their first trial's result). Not
``PRUNED``: the TPE sampler takes pruned trials as bad ones, which would contradict the
repeated trial's result; every sampler ignores failed trials, and what the repeat would
teach is in the trial it repeats. Until then the repeat is a running trial, which the
constant liar of TPE treats as bad, so the rest of the batch moves away from it.

Resume guarantee: :meth:`tell` does not write to optuna; the results are kept in the
driver's plain-data state and handed to optuna at the start of the next :meth:`ask`. On
:meth:`restore`, the study is reloaded from the storage, results in the state that the
storage lacks are told, and trials asked but never told (a crash in flight) are marked
failed (user attribute ``stopped_in_flight``). The storage then holds exactly the completed
trials an uninterrupted run had, and the next batch, sampled with the same per-batch seed, is the same: a resumed run gives the
same candidates and the same front as an uninterrupted one.

Asking ahead (``optuna-tpe``'s ``ask_ahead``, with its constant liar): the next batch is
sampled while the last is evaluated, its trials running (the liar's pending points). The
state names the trials of the batch asked and not told (``pending``); :meth:`restore` leaves
those running, fails any other running trial, and the next :meth:`ask` returns them again
(nothing sampled or counted again). Results are handed to optuna at the next ask, and at
the end only once no batch is in flight: handed over earlier, a kill before the state is
saved would leave the storage ahead of the state, and the last batch would be sampled anew
from more than the uninterrupted run saw.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import warnings
from collections import deque
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from dse.errors import StudyError
from dse.files import refuse_shared_file, refuse_unsafe_write
from dse.search.base import DriverOptions, Problem, SearchDriver
from dse.space import _column, candidate_keys

#: a discrete space of at most this many candidates is listed (their text keys: 0.3-0.7 s
#: and ~20 MB at the limit, once in a batch) when the sampler keeps repeating itself, so
#: that the slot gets an unasked candidate and the search ends when none is left
LISTED_MAX = 100_000
UNSEEN_SEED = 0x0E5EE  # mixed into the seed of the draw from the unasked candidates
#: optuna's trial system attribute for a list of constraint values (its format before 5.0,
#: still read by optuna 5, and the only one optuna-dashboard 0.21 reads)
CONSTRAINTS_ATTR = "constraints"
#: the prefix of optuna 5's named constraint keys, which journals of dse <= 0.1 hold
NAMED_CONSTRAINT_PREFIX = "constraints:"


def _optuna():
    import optuna

    return optuna


@functools.cache
def _on_the_grid_class():
    """The sampler wrapper's class (built on first use: ``import dse`` does not import optuna)."""
    optuna = _optuna()

    class OnTheGrid(optuna.samplers.BaseSampler):
        """``inner``, with every value it draws for a stepped float parameter replaced by the
        nearest value of the space's grid (``grids``: name -> the values, as the space holds
        them), so that optuna stores 0.85 where the sampler computed 0.65 + 4 * 0.05."""

        def __init__(self, inner, grids: dict[str, tuple[float, ...]]) -> None:
            self.inner = inner
            self._grids = {k: (np.asarray(v, float), v) for k, v in grids.items()}

        def _snap(self, name: str, value):
            grid = self._grids.get(name)
            if grid is None or not isinstance(value, float):
                return value
            return grid[1][int(np.abs(grid[0] - value).argmin())]

        def infer_relative_search_space(self, study, trial):
            space = getattr(self.inner, "_search_space", None)
            if isinstance(space, _since_class()):  # it reads the trials up to this one
                space.newest = trial.number
            try:
                return self.inner.infer_relative_search_space(study, trial)
            finally:
                if isinstance(space, _since_class()):
                    space.newest = None

        def sample_relative(self, study, trial, search_space):
            params = self.inner.sample_relative(study, trial, search_space)
            return {k: self._snap(k, v) for k, v in params.items()}

        def sample_independent(self, study, trial, param_name, param_distribution):
            value = self.inner.sample_independent(study, trial, param_name, param_distribution)
            return self._snap(param_name, value)

        def before_trial(self, study, trial) -> None:
            self.inner.before_trial(study, trial)

        def after_trial(self, study, trial, state, values) -> None:
            self.inner.after_trial(study, trial, state, values)

        def reseed_rng(self) -> None:
            self.inner.reseed_rng()

    return OnTheGrid


#: a search space that has not read this many trials reads them all in one call
SINCE_MAX = 1000


@functools.cache
def _since_class():
    """optuna's intersection search space, reading only the trials it has not read.

    optuna's reads the list of every trial of the study at every ask (then looks only at
    those since the oldest one still running, which it remembers): with a journal, a loop
    over every trial (3 ms an ask at 3,000 trials). This one reads those trials alone, by
    number, up to the trial being sampled (``newest``, set by the sampler wrapper), and
    hands them to optuna's own intersection: the same result."""
    optuna = _optuna()
    from optuna.search_space.intersection import _calculate

    class Since(optuna.search_space.IntersectionSearchSpace):
        newest: int | None = None

        def calculate(self, study, use_cache: bool = False):
            start, newest = self._cached_trial_number, self.newest
            if (
                newest is None
                or start < 0
                or not 0 <= newest - start < SINCE_MAX
                or self._study_id != study._study_id
            ):
                return super().calculate(study, use_cache)
            storage, sid = study._storage, study._study_id
            trials = [
                storage.get_trial(storage.get_trial_id_from_study_id_trial_number(sid, k))
                for k in range(start, newest + 1)
            ]
            self._search_space, self._cached_trial_number = _calculate(
                trials, self._include_pruned, self._search_space, start
            )
            return copy.deepcopy(dict(sorted((self._search_space or {}).items())))

    return Since


class OptunaOptions(DriverOptions):
    """Options every optuna driver takes."""

    storage: str | None = Field(
        default=None, description="database URL (default: a journal file in the results folder)"
    )
    study_name: str | None = Field(
        default=None,
        min_length=1,
        description="name of the optuna study in the storage (default: the dse study's name)",
    )
    max_resample: int = Field(
        default=2, ge=0, description="re-asks of a slot whose candidate was asked before"
    )

    @field_validator("storage")
    @classmethod
    def _database_url(cls, v: str | None) -> str | None:
        """A URL SQLAlchemy reads, of a database whose driver is installed (optuna's RDB
        storage); whether the database answers is known only when the run opens it."""
        if v is None:
            return v
        try:
            from sqlalchemy.engine import make_url

            dialect = make_url(v).get_dialect()
            (
                getattr(dialect, "import_dbapi", None) or dialect.dbapi
            )()  # its driver (psycopg2, pymysql, ...)
        except ImportError as exc:
            raise ValueError(f"the database driver is not installed ({exc})") from None
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy's ArgumentError, NoSuchModuleError, ...
            raise ValueError(
                f"not a database URL optuna can open, such as sqlite:///study.db or "
                f"postgresql://user@host/db ({type(exc).__name__}: {exc})"
            ) from None
        return v


def _sqlite_file(url: str) -> Path | None:
    """The database file of an ``sqlite://`` URL (None: another database, or in memory)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


class _OptunaDriver(SearchDriver):
    """Shared ask/tell machinery; subclasses choose the sampler."""

    Options = OptunaOptions
    owned_files = ("optuna.journal", "optuna.journal.lock")

    @classmethod
    def check(cls, problem: Problem, options: OptunaOptions) -> None:
        """An sqlite database's folder exists (sqlite creates the file, not its folder)."""
        file = _sqlite_file(options.storage) if options.storage else None
        if file is not None and not file.absolute().parent.is_dir():
            raise StudyError(
                f"the folder of the sqlite database {file} does not exist",
                field="search.options.storage",
                value=options.storage,
                allowed="an sqlite:/// URL in an existing folder, or another database URL",
            )

    @classmethod
    def check_fresh(cls, problem: Problem, options: OptunaOptions) -> None:
        """A new run creates its optuna study: the database must not hold one of that name
        (the run would refuse only after its results folder was cleared)."""
        url = options.storage
        if not url:
            return  # the journal in the results folder: new with the folder
        file = _sqlite_file(url)
        if file is not None and not file.is_file():
            return  # a database sqlite will create: no study in it yet
        name = options.study_name or problem.name
        optuna = _optuna()
        try:
            names = optuna.study.get_all_study_names(storage=url)
        except Exception as exc:  # noqa: BLE001 - unreachable, unreadable, refuses the login, ...
            raise StudyError(
                f"cannot open the optuna storage {url}: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300]}",
                field="search.options.storage",
            ) from None
        if name in names:
            raise StudyError(
                f"optuna study '{name}' already exists in {url}, so a new run cannot create it",
                field="search.options.study_name",
                value=name,
                allowed="another study_name; or delete the old one (optuna delete-study --study-name "
                f"{name} --storage {url}); or continue its run with dse resume",
            )

    def __init__(self, problem: Problem, options: OptunaOptions) -> None:
        super().__init__(problem, options)
        self.batch_no = 0
        self.max_resample = options.max_resample
        self.study_name = options.study_name or problem.name
        self._study = None
        #: trial numbers of each batch asked and not told, oldest first (two: asked ahead)
        self._pending: deque[list[int]] = deque()
        #: batches a restored driver asks again first: asked and untold when the state was saved
        self._replay: deque[list[int]] = deque()
        self._untold: list[dict[str, Any]] = []  # results not yet handed to optuna
        self._repeats: list[list[int]] = []  # [duplicate trial, the trial it repeats], not yet told
        self._taken: dict[int, int] = {}  # a repeat a batch in flight took (nothing new found)
        self._named_constraints = False  # a journal of dse <= 0.1: optuna 5's named keys
        self._seen: dict[str, int] = {}  # candidate key -> the trial that asked it first
        self._worst: list[float | None] = [None] * self.n_objectives
        self.exhausted = False  # every candidate of a listed space has been asked
        self._unasked: list[np.ndarray] | None = None  # this batch's draw order of them (derived)
        # derived, in memory only (rebuilt from the storage after a restore):
        self._search_spaces: dict[tuple[str, bool], Any] = {}  # see _sampler
        self._ids: dict[int, int] = {}  # trial number -> optuna trial id, of trials not flushed
        self._waiting = 0  # trials waiting in the storage's queue (a run killed after enqueueing)

    @property
    def done(self) -> bool:
        return (self.asked >= self.budget or self.exhausted) and not self._replay

    # -- sampler and storage ---------------------------------------------------------------
    @property
    def sampler_seed(self) -> int:
        """The study's seed as optuna's samplers take it (numpy's legacy seeding: below 2^32)."""
        return self.seed % 2**32

    def make_sampler(self, seed: int):  # pragma: no cover - abstract
        raise NotImplementedError

    def _sampler(self, seed: int, inner=None):
        """The sampler (``make_sampler(seed)`` unless ``inner`` is given) on the space's grid.

        The sampler is new for every batch (its seed), but its intersection search space
        (optuna's incremental record of the parameters every finished trial shares) is the
        driver's, kept for the run: a new one reads every trial of the study on its first
        ask, and the batches' samplers would do so once per batch (and per random fill), a
        cost that grew with the trials so far; kept, it reads only the trials since the
        oldest one still running. The result is the same: an intersection over the trials."""
        optuna = _optuna()
        inner = inner or self.make_sampler(seed)
        fresh = getattr(inner, "_search_space", None)
        if type(fresh) is optuna.search_space.IntersectionSearchSpace:
            key = (type(inner).__name__, fresh._include_pruned)
            if key not in self._search_spaces:
                self._search_spaces[key] = _since_class()(include_pruned=fresh._include_pruned)
            inner._search_space = self._search_spaces[key]
        grids = {
            p.name: tuple(float(v) for v in p.values)
            for p in self.space.parameters
            if p.values is not None and p.kind == "real" and _step(p) is not None
        }
        return _on_the_grid_class()(inner, grids)

    def _batch_seed(self) -> int:
        return int(np.random.SeedSequence([self.seed, self.batch_no]).generate_state(1)[0])

    def _storage(self):
        optuna = _optuna()
        url = self.options.storage
        if url:
            return str(url)
        if self.problem.work_dir is None:
            return optuna.storages.InMemoryStorage()
        from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

        # absolute: optuna's lock is a symbolic link to the journal, and a relative target
        # resolves against the link's own folder (a killed run's link then points nowhere)
        path = Path(self.problem.work_dir).absolute() / "optuna.journal"
        # The journal is used only under dse's own lock on the results folder, so a journal
        # lock found here was left by a killed process: remove it (optuna would wait its 30 s
        # grace period before taking over a link to the journal, and forever for a dangling
        # one, as the relative links of dse <= 0.1.0 became)
        stale = path.with_name(path.name + ".lock")
        if stale.is_symlink() or stale.exists():
            stale.unlink()
        # optuna appends to it by name: a planted link, or another name of the file (a hard
        # link), would take the writes
        refuse_unsafe_write(path)
        refuse_shared_file(path)
        import warnings

        with (
            warnings.catch_warnings()
        ):  # optuna warns that 1 s "might be too small": here it is meant
            warnings.filterwarnings("ignore", message=".*grace_period.*", category=UserWarning)
            lock = JournalFileSymlinkLock(str(path), grace_period=1)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path), lock_obj=lock))

    def _open(self, *, create: bool):
        try:
            return self._open_storage(create=create)
        except (StudyError, KeyError):  # KeyError: no study of that name (restore decides)
            raise
        except Exception as exc:  # the database is unreachable, unwritable, refuses the login, ...
            if not self.options.storage:
                raise
            raise StudyError(
                f"cannot open the optuna storage {self.options.storage}: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300]}",
                field="search.options.storage",
            ) from None

    def _open_storage(self, *, create: bool):
        optuna = _optuna()
        storage = self._storage()
        directions = ["minimize"] * self.n_objectives
        if create:
            try:
                study = optuna.create_study(
                    storage=storage,
                    study_name=self.study_name,
                    directions=directions,
                    sampler=self._sampler(self.sampler_seed),
                )
                with warnings.catch_warnings():  # experimental since optuna 3.2, still so in 5
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    study.set_metric_names(list(self.problem.objectives))
                study.set_user_attr(CONSTRAINTS_ATTR, list(self.problem.constraints))
                return study
            except optuna.exceptions.DuplicatedStudyError:
                raise StudyError(
                    f"optuna study '{self.study_name}' already exists in {self.options.storage}",
                    field="search.options.study_name",
                ) from None
        return optuna.load_study(
            storage=storage,
            study_name=self.study_name,
            sampler=self._sampler(self.sampler_seed),
        )

    @property
    def study(self):
        if self._study is None:
            self._study = self._open(create=True)
        return self._study

    def _distributions(self) -> dict[str, Any]:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        out: dict[str, Any] = {}
        for p in self.space.parameters:
            step = _step(p)
            if p.values is None:
                out[p.name] = FloatDistribution(float(p.low), float(p.high))
            elif step is None:
                out[p.name] = CategoricalDistribution(list(p.values))
            elif p.kind == "integer":
                out[p.name] = IntDistribution(int(p.values[0]), int(p.values[-1]), step=int(step))
            else:
                out[p.name] = FloatDistribution(float(p.values[0]), float(p.values[-1]), step=step)
        return out

    def _frame(self, params: list[dict[str, Any]]) -> pd.DataFrame:
        cols = {}
        for p in self.space.parameters:
            vals = [row[p.name] for row in params]
            if p.values is None:
                cols[p.name] = np.asarray(vals, float)
            elif _step(p) is None:
                cols[p.name] = _column(p, np.asarray(vals, dtype=object))
            else:  # the space's own value nearest to the sampled one (float steps round)
                grid = np.asarray(p.values, float)
                idx = np.abs(grid[None, :] - np.asarray(vals, float)[:, None]).argmin(axis=1)
                cols[p.name] = _column(p, np.asarray(p.values, dtype=object)[idx])
        return pd.DataFrame(cols, index=range(len(params)))

    # -- ask / tell --------------------------------------------------------------------------
    def _flush(self) -> None:
        """Hand the results kept in the state to optuna (skipping trials already finished):
        each result completes its trial, each repeat is failed, naming the trial it repeats."""
        study = self.study
        if not self._untold and not self._repeats:
            return
        numbers = [r["trial"] for r in self._untold] + [dup for dup, _ in self._repeats]
        if all(n in self._ids for n in numbers):  # this batch's trials: read only them
            get = study._storage.get_trial
            trials = {n: get(self._ids[n]) for n in numbers}
        else:  # after a restore: one read of every trial
            trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        for r in self._untold:
            if r.get("duplicate_of") is None:
                self._complete(study, trials.get(r["trial"]), r)
            else:  # a repeat its slot took: looked up, not evaluated
                self._fail(study, trials.get(r["trial"]), duplicate_of=int(r["duplicate_of"]))
        for dup, orig in self._repeats:
            self._fail(study, trials.get(dup), duplicate_of=orig)
        for n in numbers:
            self._ids.pop(n, None)
        self._untold, self._repeats = [], []

    def _running(self, study, t):
        """The live trial of ``t`` if it still runs (None: finished, or never asked)."""
        optuna = _optuna()
        if t is None or t.state != optuna.trial.TrialState.RUNNING:
            return None
        return optuna.trial.Trial(study, t._trial_id)

    def _complete(self, study, t, r: dict[str, Any]) -> None:
        trial = self._running(study, t)
        if trial is None:
            return
        g = [float(v) for v in r["g"]]
        if self._named_constraints:  # a journal of dse <= 0.1: its format, not a second one
            already = t.constraints or {}  # a run killed while telling it set some of them
            for name, value in zip(self.problem.constraints, g, strict=True):
                if name not in already:
                    trial.set_constraint(name, value)
        else:  # one write (a killed run's partial one is overwritten)
            study._storage.set_trial_system_attr(t._trial_id, CONSTRAINTS_ATTR, g)
        for name, value in zip(self.problem.constraints, g, strict=True):
            trial.set_user_attr(f"constraint: {name}", value)
        for name, value in zip(self.problem.objectives, r.get("evaluated") or [], strict=False):
            trial.set_user_attr(name, value)  # an infeasible trial's values as evaluated
        study.tell(trial, r["f"])
        self._completed(t)

    def _completed(self, t) -> None:
        """Called after the trial ``t`` (as read before it was told) was completed."""

    def _fail(self, study, t, **attrs: Any) -> None:
        trial = self._running(study, t)
        if trial is None:
            return
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        study.tell(trial, state=_optuna().trial.TrialState.FAIL)

    def ask(self) -> pd.DataFrame:
        optuna = _optuna()
        if self._replay:  # asked before the state was saved and not told: the same trials
            return self._ask_again(self._replay.popleft())
        self._flush()
        study = self.study
        study.sampler = self._sampler(self._batch_seed())
        dists = self._distributions()
        n = min(self.batch_size, self.budget - self.asked)
        params: list[dict[str, Any]] = []
        numbers: list[int] = []
        self._unasked = None
        keys_now: dict[str, int] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            for slot in range(n):
                trial, key = self._ask_new(study, dists, keys_now, slot)
                if trial is None:  # every candidate of the space has been asked
                    self.exhausted = True
                    break
                first = self._seen.get(key, keys_now.get(key))
                if first is None:
                    keys_now[key] = trial.number
                else:  # the repeat a slot took when nothing new was found
                    self._taken[trial.number] = first
                params.append(trial.params)
                numbers.append(trial.number)
        self._pending.append(numbers)
        self._seen.update(keys_now)
        self._unasked = None
        if (
            self.space.is_discrete and len(self._seen) >= self.space.size
        ):  # the last candidate asked:
            self.exhausted = True  # done now, so that tell() hands this batch to optuna
        self.asked += len(params)
        self.batch_no += 1
        return self._frame(params)

    def _ask_again(self, numbers: list[int]) -> pd.DataFrame:
        """The batch of trials ``numbers``, asked before the state was saved and still
        running in the storage (:meth:`restore` left them so), as it was asked: nothing is
        sampled or counted again."""
        trials = {t.number: t for t in self.study.get_trials(deepcopy=False)}
        self._ids.update({n: trials[n]._trial_id for n in numbers})
        self._pending.append(list(numbers))
        return self._frame([trials[n].params for n in numbers])

    def _new_trial(self, study, dists):
        """``study.ask(dists)``, without reading every trial of the storage when no trial
        waits in its queue (optuna's ask looks for a waiting trial among all of them, a cost
        that grew with the trials so far: 5 ms an ask at 5,000 trials in a journal). The
        same steps as optuna 5's ``Study.ask`` otherwise: a new trial, its parameters
        suggested in the order of ``dists``."""
        optuna = _optuna()
        if self._waiting:  # the queue is not empty: optuna pops its oldest trial
            self._waiting -= 1
            trial = study.ask(dists)
        else:
            study._thread_local.cached_all_trials = None  # as Study.ask: read trials anew
            trial = optuna.Trial(study, study._storage.create_new_trial(study._study_id))
            for name, dist in dists.items():
                trial._suggest(name, dist)
        self._ids[trial.number] = trial._trial_id
        return trial

    def _key(self, trial) -> str:
        return candidate_keys(self._frame([trial.params]), self.space.names)[0]

    def _ask_new(self, study, dists, keys_now: dict[str, int], slot: int):
        """A trial whose candidate nobody has asked, and its key; (None, None) when the
        space is listed and every candidate of it has been asked."""
        optuna = _optuna()
        for _ in range(self.max_resample + 1):
            trial = self._new_trial(study, dists)
            key = self._key(trial)
            first = self._seen.get(key, keys_now.get(key))
            if first is None:
                return trial, key
            self._repeats.append([trial.number, first])  # completed with the batch
        # the sampler keeps repeating itself
        if self.space.is_discrete and self.space.size <= LISTED_MAX:
            params = self._next_unasked(dists, keys_now)
            if params is None:
                return None, None
            study.enqueue_trial(params)
            self._waiting += 1
            trial = self._new_trial(study, dists)
            return trial, self._key(trial)
        study.sampler = self._sampler(  # fill the slot at random
            0,
            optuna.samplers.RandomSampler(
                seed=int(
                    np.random.SeedSequence([self.seed, self.batch_no, slot]).generate_state(1)[0]
                )
            ),
        )
        try:
            for attempt in range(50):
                trial = self._new_trial(study, dists)
                key = self._key(trial)
                first = self._seen.get(key, keys_now.get(key))
                if first is None or attempt == 49:  # 50 draws found nothing new: the repeat
                    return trial, key
                self._repeats.append([trial.number, first])
        finally:
            study.sampler = self._sampler((self._batch_seed() + slot + 1) % 2**32)

    def _next_unasked(self, dists, keys_now: dict[str, int]) -> dict[str, Any] | None:
        """The next candidate of this batch's seeded draw from the unasked ones, as optuna
        parameters (None when every candidate has been asked)."""
        from optuna.distributions import FloatDistribution, IntDistribution

        space = self.space
        if self._unasked is None:  # listed once per batch, from the keys asked before it
            idx = space.indices_of(np.arange(int(space.size)))
            keys = candidate_keys(space.from_indices(idx), space.names)
            left = np.array([k not in self._seen for k in keys], dtype=bool)
            rng = np.random.default_rng([self.seed, self.batch_no, UNSEEN_SEED])
            self._unasked = list(rng.permutation(idx[left]))
        while self._unasked:
            row = self._unasked.pop()
            params = {}
            for p, j in zip(space.parameters, row, strict=True):
                v = p.values[int(j)]
                d = dists[p.name]
                if isinstance(d, IntDistribution):
                    params[p.name] = int(v)
                elif isinstance(d, FloatDistribution):
                    params[p.name] = float(v)
                else:
                    params[p.name] = v
            if candidate_keys(self._frame([params]), space.names)[0] not in keys_now:
                return params
        return None

    def tell(self, candidates, objectives, violations) -> None:
        if not self._pending or len(candidates) != len(self._pending[0]):
            raise RuntimeError("tell() must follow ask() with the same candidates")
        batch = self._pending.popleft()
        F = np.asarray(objectives, float).reshape(len(candidates), self.n_objectives)
        G = np.asarray(violations, float).reshape(len(candidates), self.n_constraints)
        G = np.where(np.isfinite(G), G, 1e30)
        bad = ~np.isfinite(F).all(axis=1)
        G[bad, -1] = np.maximum(G[bad, -1], 1.0)
        for j in range(self.n_objectives):
            col = F[np.isfinite(F[:, j]), j]
            if len(col):
                w = float(col.max())
                self._worst[j] = w if self._worst[j] is None else max(self._worst[j], w)
        fill = np.array([0.0 if w is None else w for w in self._worst])
        infeasible = (G > 0).any(axis=1)
        told = np.where(np.isfinite(F) & ~infeasible[:, None], F, fill)
        for i, t in enumerate(batch):  # (results of a batch told before are still kept)
            r: dict[str, Any] = {"trial": int(t), "f": told[i].tolist(), "g": G[i].tolist()}
            if infeasible[i]:  # as evaluated (None: not finite)
                r["evaluated"] = [float(v) if np.isfinite(v) else None for v in F[i]]
            if int(t) in self._taken:
                r["duplicate_of"] = self._taken.pop(int(t))
            self._untold.append(r)
        self.told += len(candidates)
        # no next ask: complete the optuna study now, once no batch is in flight (asked ahead,
        # the last batch is asked before the one before it is told: handed over then, a
        # kill before the state is saved would leave the storage ahead of the state, and
        # the resumed run would sample the last batch anew from it)
        if self.done and not self._pending:
            self._flush()

    # -- plain-data state ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "batch_no": self.batch_no,
            "study_name": self.study_name,
            "untold": self._untold,
            # the trials of the batches asked and not told (asked ahead), asked again on restore
            "pending": [list(b) for b in (*self._pending, *self._replay)],
            "taken": [[t, first] for t, first in self._taken.items()],
            "repeats": self._repeats,
            "worst": self._worst,
            "seen": self._seen,
            "exhausted": self.exhausted,
        }

    def restore(self, state: dict[str, Any]) -> None:
        optuna = _optuna()
        super().restore(state)
        self.batch_no = int(state["batch_no"])
        self.study_name = state.get("study_name", self.study_name)
        self._untold = list(state.get("untold", []))
        self._repeats = [list(r) for r in state.get("repeats", [])]
        self._worst = list(state.get("worst", [None] * self.n_objectives))
        seen = state.get("seen", {})
        self._seen = dict(seen) if isinstance(seen, dict) else dict.fromkeys(seen, -1)
        self.exhausted = bool(state.get("exhausted", False))
        self._pending = deque()
        self._replay = deque([int(n) for n in b] for b in state.get("pending", []))
        self._taken = {int(t): int(first) for t, first in state.get("taken", [])}
        try:
            self._study = self._open(create=False)
        except KeyError:  # optuna's "Record does not exist": no study of that name in the storage
            if self.batch_no or self.asked:
                raise
            self._study = (
                None  # stopped before its first ask (a cluster that never came): the first
            )
            return  # ask creates the optuna study, as in a new run
        self._waiting = len(
            self._study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.WAITING])
        )
        self._named_constraints = any(
            k.startswith(NAMED_CONSTRAINT_PREFIX)
            for t in self._study.get_trials(deepcopy=False)
            for k in t.system_attrs
        )
        self._flush()
        again = {n for b in self._replay for n in b}  # still running: asked again, then told
        for t in self._study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.RUNNING]):
            if t.number not in again:
                self._fail(self._study, t, stopped_in_flight=True)
        self._forget_in_flight(self._study)

    def _forget_in_flight(self, study) -> None:
        """Drop what the sampler cached in the storage while asking the lost batch."""


def _step(p) -> float | None:
    """The common step of an ordered discrete parameter's values, or None (not evenly spaced).

    Where the values are decimals (0.6, 0.7, ... 1.0) the step is their decimal difference
    (0.1, not the binary 0.7 - 0.6 = 0.09999999999999998): optuna checks that the step
    divides ``high - low`` in decimal and otherwise lowers ``high`` by a step (with a
    warning), and a rounded step lost the top value of the grid."""
    if p.values is None or p.kind == "categorical" or len(p.values) < 2:
        return None
    d = np.diff(np.asarray(p.values, float))
    if not (d[0] > 0 and np.allclose(d, d[0], rtol=1e-9, atol=0)):
        return None
    step = Decimal(str(p.values[1])) - Decimal(str(p.values[0]))
    span = Decimal(str(p.values[-1])) - Decimal(str(p.values[0]))
    return float(step) if step > 0 and span % step == 0 else float(d[0])


class _Generations:
    """The complete trials of each NSGA-II generation: (number, trial id), kept by the driver
    as it completes trials, read from the storage once (on the first ask of the process)."""

    def __init__(self) -> None:
        self.by_generation: dict[int, list[tuple[int, int]]] | None = None  # None: not read yet

    def read(self, study, key: str) -> dict[int, list[tuple[int, int]]]:
        if self.by_generation is None:
            complete = study._get_trials(
                deepcopy=False, states=[_optuna().trial.TrialState.COMPLETE]
            )
            self.by_generation = {}
            for t in complete:
                self.add(t, key)
        return self.by_generation

    def add(self, t, key: str) -> None:
        if self.by_generation is not None:
            g = t.system_attrs.get(key, -1)
            self.by_generation.setdefault(g, []).append((t.number, t._trial_id))


@functools.cache
def _nsga2_class():
    """optuna's NSGA-II sampler, reading only the generations it needs.

    optuna 5's sampler finds a new trial's generation by reading every complete trial, and
    the parents of a generation by reading every trial and keeping those whose ids it
    cached: at every ask, a cost that grew with the trials so far (about 20 ms an ask at
    5,000 trials). This one keeps the complete trials by generation (:class:`_Generations`)
    and reads the cached parents by id; what it returns is what optuna's methods return,
    the trials in trial order."""
    optuna = _optuna()

    class NSGA2(optuna.samplers.NSGAIISampler):
        def __init__(self, generations: _Generations, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._generations = generations

        def get_trial_generation(self, study, trial) -> int:
            key = self._get_generation_key()
            generation = trial.system_attrs.get(key, None)
            if generation is not None:
                return generation
            by_generation = self._generations.read(study, key)
            # optuna: the highest generation of a complete trial (at least 0), next once it
            # holds population_size complete trials
            top = max((g for g, ts in by_generation.items() if g >= 0 and ts), default=0)
            full = len(by_generation.get(top, ())) >= self._population_size
            generation = top + 1 if full else top
            study._storage.set_trial_system_attr(trial._trial_id, key, generation)
            return generation

        def get_population(self, study, generation: int):
            ts = self._generations.read(study, self._get_generation_key()).get(generation, [])
            get = study._storage.get_trial
            return [get(i) for _, i in sorted(ts)]

        def get_parent_population(self, study, generation: int):
            if generation == 0:
                return []
            key = self._get_parent_cache_key_prefix() + str(generation)
            ids = study._storage.get_study_system_attrs(study._study_id).get(key, None)
            if ids is None:
                return super().get_parent_population(study, generation)  # selects and caches
            get = study._storage.get_trial
            return sorted((get(i) for i in set(ids)), key=lambda t: t.number)

    # optuna names a subclass's storage keys after it: keep optuna's (journals, _forget_in_flight)
    NSGA2._GENERATION_KEY = optuna.samplers.NSGAIISampler._get_generation_key()
    NSGA2._PARENT_CACHE_KEY_PREFIX = optuna.samplers.NSGAIISampler._get_parent_cache_key_prefix()
    return NSGA2


class OptunaNSGA2Options(OptunaOptions):
    population_size: int | None = Field(
        default=None, ge=2, description="default: search.batch_size"
    )
    crossover_prob: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="probability that a child is a crossover of two parents",
    )
    mutation_prob: float | None = Field(default=None, ge=0, le=1, description="default: optuna's")


class OptunaNSGA2Driver(_OptunaDriver):
    """optuna's NSGA-II sampler; population size = ``search.batch_size``."""

    name = "optuna-nsga2"
    Options = OptunaNSGA2Options

    def __init__(self, problem: Problem, options: OptunaNSGA2Options) -> None:
        super().__init__(problem, options)
        self._generations = _Generations()  # derived from the storage, in memory only

    def _completed(self, t) -> None:
        self._generations.add(t, _optuna().samplers.NSGAIISampler._get_generation_key())

    def make_sampler(self, seed: int):
        o = self.options
        return _nsga2_class()(
            self._generations,
            population_size=o.population_size or self.batch_size,
            seed=seed,
            mutation_prob=o.mutation_prob,
            crossover_prob=o.crossover_prob,
        )

    def _forget_in_flight(self, study) -> None:
        # NSGA-II caches a generation's parents when its first child is asked, in selection
        # order, and later children read them back in trial order. If the lost batch cached
        # them, recompute them on the next ask, as an uninterrupted run did.
        optuna = _optuna()
        cls = optuna.samplers.NSGAIISampler
        gen_key, prefix = cls._get_generation_key(), cls._get_parent_cache_key_prefix()
        done = [
            t.system_attrs.get(gen_key, -1)
            for t in study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE])
        ]
        last = max(done, default=-1)
        for key, value in study._storage.get_study_system_attrs(study._study_id).items():
            if key.startswith(prefix) and value is not None and int(key[len(prefix) :]) > last:
                study._storage.set_study_system_attr(study._study_id, key, None)


class OptunaTPEOptions(OptunaOptions):
    multivariate: bool = Field(
        default=True, description="model the parameters jointly (optuna's multivariate TPE)"
    )
    constant_liar: bool = Field(
        default=True, description="treat the batch's pending trials as bad, so a batch spreads out"
    )
    n_startup_trials: int | None = Field(
        default=None, ge=0, description="default: min(batch_size, 50)"
    )
    n_ei_candidates: int = Field(
        default=24,
        ge=1,
        description="candidates drawn per ask to pick the best expected improvement",
    )
    ask_ahead: bool = Field(
        default=False,
        description="ask the next batch while the last is evaluated (the constant liar takes "
        "it as pending), so that a fast evaluator's workers do not wait between batches",
    )


class OptunaTPEDriver(_OptunaDriver):
    """optuna's (multi-objective) TPE sampler, with the constant liar for batches."""

    name = "optuna-tpe"
    Options = OptunaTPEOptions

    @classmethod
    def check(cls, problem: Problem, options: OptunaTPEOptions) -> None:
        super().check(problem, options)
        if options.ask_ahead and not options.constant_liar:
            raise StudyError(
                "search.options.ask_ahead needs the constant liar: without it TPE would sample "
                "the next batch blind to the one still evaluated",
                field="search.options.ask_ahead",
                value=True,
                allowed="constant_liar: true (the default), or ask_ahead: false",
            )

    @classmethod
    def describe(cls, problem: Problem, options: OptunaTPEOptions) -> str:
        return f"{cls.name}, asking ahead" if options.ask_ahead else cls.name

    def may_ask_ahead(self) -> bool:
        """``ask_ahead``: the next batch is sampled while the last is evaluated, its trials
        running (the constant liar's pending points)."""
        return bool(self.options.ask_ahead) and not self.done

    def make_sampler(self, seed: int):
        optuna = _optuna()
        o = self.options
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                seed=seed,
                multivariate=o.multivariate,
                constant_liar=o.constant_liar,
                n_startup_trials=(
                    min(self.batch_size, 50) if o.n_startup_trials is None else o.n_startup_trials
                ),
                n_ei_candidates=o.n_ei_candidates,
            )


class OptunaGPDriver(_OptunaDriver):
    """optuna's Gaussian-process sampler (needs ``torch`` and ``scipy``)."""

    name = "optuna-gp"

    @classmethod
    def check(cls, problem: Problem, options: OptunaOptions) -> None:
        super().check(problem, options)
        missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
        if missing:
            raise StudyError(
                f"search algorithm 'optuna-gp' needs {' and '.join(missing)}, which "
                f'{"is" if len(missing) == 1 else "are"} not installed: pip install "dse[gp]"',
                field="search.algorithm",
                value="optuna-gp",
            )

    def make_sampler(self, seed: int):
        optuna = _optuna()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.GPSampler(seed=seed)
