"""The run loop: checked study -> search driver -> executor -> evaluator -> store -> Pareto set.

Each batch the driver asks for is looked up in the key index first (nothing is evaluated
twice), the rest is evaluated by the executor; each finished chunk updates the running
front and tallies and goes to the log writer, which stores groups of rows durably; only
when the batch's rows are all written is the driver told (a driver that allows it has the
next batch asked and evaluating meanwhile: :meth:`Runner._search`). After every batch the driver's
plain-data state and the progress record (evaluations, feasible count, front size,
hypervolume) are saved. Memory does not grow with the evaluations (apart from the key
index): the log is on disk, the front in memory. At the end ``pareto.nc`` is written from
the front; the log is the only copy of every evaluation (read lazily by
:mod:`dse.results`); drawing them is the caller's.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from dse import signals
from dse.checks import RunPlan
from dse.errors import DseError
from dse.execution import ClusterLost, Executor, GridCandidates, WorkerMismatch, make_executor
from dse.execution.plan import dashboard_for
from dse.files import remove_path
from dse.keyindex import KeyIndex, consecutive
from dse.logrows import LogRows
from dse.pareto import (
    HypervolumeTracker,
    RunningFront,
    objective_matrix,
    violation_matrix,
)
from dse.progress import ProgressReporter, ProgressSink
from dse.records import BatchRecord, HypervolumeFrame, RunState
from dse.search import SearchDriver
from dse.search.phases import AskedTooMany
from dse.store import ResultStore, location
from dse.study import Study


@dataclass
class RunResult:
    """What a finished (or interrupted) run produced."""

    output_dir: Path
    front: pd.DataFrame
    counts: dict[str, int] = field(default_factory=dict)  # evaluations, feasible, failed
    ruled_out: list[tuple[str, int]] = field(default_factory=list)  # what removed candidates
    history: tuple[BatchRecord, ...] = ()  # the progress record of every batch
    interrupted: bool = False
    algorithm: str = ""
    terminated: bool = (
        False  # interrupted by SIGTERM (a batch system's end of the wall time) or SIGHUP
    )
    signum: int = 0  # that signal
    datasets_written: bool = True  # False: interrupted while pareto.nc was written
    labels: dict = field(
        default_factory=dict
    )  # the search's: front (exact, polished, approximate) and why
    summary: object = None  # what the caller's ``summarize`` made on the workers (Runner)

    @cached_property
    def evaluations(self) -> pd.DataFrame:
        """Every kept evaluation, read from the log (the whole log in memory: small runs)."""
        return ResultStore.open(self.output_dir).load_evaluations()


@dataclass
class _Flight:
    """A batch asked and handed to the executor, not yet told."""

    batch: pd.DataFrame
    keys: np.ndarray
    span: tuple[int, int] | None  # keys lo .. end-1 where they are those (an enumeration's)
    locs: np.ndarray  # where each row's candidate was stored when it was asked (-1: nowhere)
    busy: np.ndarray | None  # rows a batch in flight then evaluated (None: none was in flight)
    todo: np.ndarray | range  # the rows evaluated for it (candidates not stored, once each)
    todo_keys: np.ndarray  # their keys
    batch_no: int
    told: bool  # the driver reads the values (the workers send the told columns back)
    job: object  # the executor's handle (None: nothing to evaluate)
    started: float  # time.perf_counter() when it was asked


def _stored_or_busy(span: tuple[int, int], run: _LoopState, flights: deque[_Flight]) -> bool:
    """Whether a key ``lo .. end-1`` of ``span`` may be stored or in a batch in flight, by a
    binary search per index run and the flights' spans (a flight's rows evaluated are of
    its batch): where none is, the batch needs neither :meth:`KeyIndex.find` nor
    ``np.isin`` (an enumeration's batch, its 2**20 keys, while the one before is in flight)."""
    lo, end = span
    if run.index.holds_any(lo, end):
        return True
    return any(f.span is None or (f.span[0] < end and lo < f.span[1]) for f in flights)


def _over(driver: SearchDriver) -> bool:
    """The driver has nothing more to ask and every batch it asked is told."""
    return driver.done and driver.told >= driver.asked


class _LoopState:
    """What the loop carries from batch to batch, rebuilt from the store on resume: the key
    index (where each evaluated candidate is stored), the running front and tallies, the
    progress history. Nothing grows with the evaluations but the index (16 bytes each)."""

    def __init__(self, store: ResultStore, study: Study, state: RunState) -> None:
        self.index = KeyIndex()
        self.front = RunningFront(study)
        self.history: list[BatchRecord] = list(state.history)
        frame = state.hypervolume_frame
        self.hv = HypervolumeTracker(
            ideal=None if frame.ideal is None else list(frame.ideal),
            nadir=None if frame.nadir is None else list(frame.nadir),
        )
        self.batch_no = state.batch
        self.driver_state: dict | None = state.driver
        self._rebuild(store, study)

    def _rebuild(self, store: ResultStore, study: Study) -> None:
        """Index and front from the log: the narrow columns first, full rows of the front last."""
        store.check_log()
        narrow = [
            "key",
            "feasible",
            "status",
            "kept",
            "reason",
            "error",
            *dict.fromkeys(
                [o.metric for o in study.objectives] + [c.metric for c in study.constraints]
            ),
        ]
        seen = KeyIndex()
        for file_no, table in store.scan(narrow):
            frame = table.to_pandas()
            keys = frame["key"].to_numpy()
            fresh = seen.find(keys) < 0  # a candidate written twice counts once
            loc = location(file_no, np.arange(len(frame)))
            seen.add(keys[fresh], loc[fresh])
            self.front.update(frame[fresh].assign(_loc=loc[fresh]))
        self.index = seen
        if len(self.front.rows):
            full = store.read_rows(self.front.rows["_loc"].to_numpy(), columns=None)
            self.front.rows = full[full.columns.drop("kept", errors="ignore")]


class Runner:
    """Runs a checked study (:func:`dse.checks.plan_run`) into a results folder."""

    def __init__(
        self,
        plan: RunPlan,
        output_dir: Path,
        *,
        progress: ProgressSink | None = None,
        prepare: Callable[[], object] | None = None,
        summarize: Callable[[Path, Callable], object] | None = None,
    ) -> None:
        """``prepare``: what the caller does after the run, made ready while the run waits on
        its workers (see :func:`_import_ahead`); the command line imports its plotting there.
        ``summarize(folder, map_each)``: what the caller reads of every evaluation after a
        run that started and finished here on a local cluster (each candidate then is on the
        log once), made before the workers stop, while this process writes ``pareto.nc``:
        ``map_each(fn, items)`` maps over the workers (:meth:`Executor.map_each`); in
        :attr:`RunResult.summary` (None where it was not made or failed: the caller reads
        the log itself). The command line's figure is made so (issue 37)."""
        self.plan = plan
        self.prepare = prepare
        self.summarize = summarize
        self._fresh = False  # a run started by start(): its log holds each candidate once
        self.study = plan.study
        self.space = plan.space
        self.evaluator = plan.evaluator
        self.output_dir = Path(output_dir)
        self.progress = progress or ProgressSink()
        self.algorithm = plan.search.description

    # -- public entry points --------------------------------------------------------------
    def start(self, *, overwrite: bool = False) -> RunResult:
        try:  # before anything is created or overwritten
            self.plan.search.check_fresh()
        except DseError as exc:
            raise exc.with_file(self.study.source_path) if self.study.source_path else exc from None
        if (
            self.plan.execution.kind == "cluster"
        ):  # a batch system's submit command, before the folder
            from dse.execution.deploy import check_submit

            check_submit(self.plan.execution)
        driver = self.plan.search.build(self.output_dir)  # writes nothing before the store exists
        store = ResultStore.create(
            self.output_dir,
            study_text=self.study.to_yaml(),
            study_name=self.study.name,
            evaluator=self.evaluator.name,
            evaluator_version=self.evaluator.version,
            overwrite=overwrite,
            owned_files=tuple(driver.owned_files),
            profile_path=str(Path(self.plan.execution.profile).resolve())
            if self.plan.execution.profile
            else None,
            input_files=self._input_files(),
        )
        self._fresh = True
        return self._run(store, driver)

    def _input_files(self) -> dict[str, str]:
        """The files the evaluator reads for this study's values, with their checksums."""
        return self.evaluator.input_files(self.space.input_values())

    def resume(self) -> RunResult:
        store = ResultStore.open(self.output_dir)
        if store.meta.evaluator_version != self.evaluator.version:
            raise DseError(
                f"{self.output_dir} was evaluated with {store.meta.evaluator} "
                f"{store.meta.evaluator_version}, but this installation has "
                f"{self.evaluator.name} {self.evaluator.version}: resuming would mix two models; "
                "start a new run instead"
            )
        recorded, now = store.meta.input_files, self._input_files()
        changed = sorted(f for f in {*recorded, *now} if recorded.get(f) != now.get(f))
        if changed:
            if changed[0] not in recorded:
                what = "is new"
            elif changed[0] not in now:
                what = "is gone"
            else:
                what = "changed"
            raise DseError(
                f"{self.output_dir} was evaluated with another version of {changed[0]} (the file {what} since "
                "the run started): resuming would mix two models; restore the file, or start a new run "
                f"(`dse run --overwrite`){f' ({len(changed) - 1} more file(s) differ)' if len(changed) > 1 else ''}"
            )
        return self._run(store, self.plan.search.build(store.path))

    # -- the loop --------------------------------------------------------------------------
    def _run(self, store: ResultStore, driver: SearchDriver) -> RunResult:
        with store.locked(), contextlib.ExitStack() as handlers:
            for signum in TERMINATING:
                handlers.enter_context(signals.handling(signum, _raise_terminated))
            try:
                return self._loop(store, driver)
            finally:  # log files the workers staged and the run did not take (it was stopped)
                store.remove_dead_temp_files()

    def _loop(self, store: ResultStore, driver: SearchDriver) -> RunResult:
        study = self.study
        run = _LoopState(store, study, store.load_state() or RunState())
        if run.driver_state is not None:
            self._call(driver, "restore", run.driver_state)
            # rows of a batch the run was stopped in are in the log but not in the driver's count
            # of evaluations (it re-asks them; they are looked up): counted now, with no time
            untold = run.front.evaluations - (run.history[-1].evaluations if run.history else 0)
            if untold > 0:
                driver.observe_cost(0.0, untold)
        else:  # save the initial state, so that a run killed in its first batch resumes by restore()
            self._save_state(store, driver, run)
        total = self.plan.search.total
        report = self._report = ProgressReporter(self.progress, store.path, total)
        interrupted, lost, executor = (
            None,
            None,
            None,
        )  # interrupted: the KeyboardInterrupt (or Terminated)
        try:
            if not driver.done:  # the cluster first: a local one may fork its workers from this
                # process, which must not run a thread of its own then (the progress display's)
                execution, note = dashboard_for(self.plan.execution, self._expected_s(driver))
                if note:
                    report.note(note)
                started = make_executor(
                    execution,
                    study.evaluator,
                    notify=report.note,
                    preferred_chunk_size=self.evaluator.chunk_size,
                )
                executor = started.__enter__()
                seen = self.plan.preview
                if seen is not None and seen.seconds > 0 and not seen.failed:
                    # the cost the preview measured sizes the first tasks: a fast evaluator's
                    # small batch is one task per worker, not a dozen small probing ones
                    executor.sizer.observe(seen.evaluated, seen.seconds)
                # the workers are started (a local cluster's forked): a thread of ours is safe now
                _import_ahead(END_IMPORTS, self.prepare)
            report.start(
                f"{study.name} · {self.algorithm}",
                min(driver.told, total or driver.told),
                {**(run.history[-1].to_json() if run.history else {}), **self._live(run)},
            )
            if executor is not None:
                report.pace.restart()
                self._search(executor, store, driver, run)
                self._save_state(
                    store, driver, run
                )  # over: the last ask may have ended it (nothing left)
        except KeyboardInterrupt as exc:
            interrupted = exc
        except (ClusterLost, WorkerMismatch) as exc:  # what is stored stays; resume goes on from it
            lost = exc
        except OSError as exc:  # the file system said no (a full disk): what is stored stays too
            lost = _said(exc)
        finally:
            if _over(driver):
                report.stop("finished")
            elif interrupted is not None:
                report.stop("interrupted")
            else:
                report.stop("stopped")
            # the workers shut down while the datasets are written (a cluster takes a second),
            # having made the caller's summary first where it asked for one
            summary: list = []
            ask = (
                self.summarize is not None
                and self._fresh
                and _over(driver)
                and interrupted is None
                and lost is None
                and self.plan.execution.kind == "local"
            )
            closing = (
                threading.Thread(
                    target=self._close,
                    args=(executor, store, summary if ask else None),
                    daemon=True,
                )
                if executor is not None
                else None
            )
            if closing is not None:
                closing.start()
        written = True
        labels = driver.attributes()
        try:
            if interrupted is not None and executor is None:
                # stopped before the executor started: this run evaluated nothing, so what is
                # on disk is still true (resume writes the datasets), and writing now would
                # import libraries that a Ctrl-C in the middle of their import left broken
                front = run.front.sorted_rows()
            else:
                with report.writing("writing pareto.nc"):  # progress through the writes
                    front = self._write_outputs(store, run, labels)
        except (
            KeyboardInterrupt
        ) as exc:  # Ctrl-C or SIGTERM while the datasets are written: the log
            interrupted = interrupted or exc  # holds every evaluation, and resume writes them
            written = False
            front = run.front.sorted_rows()
        except OSError as exc:  # a full disk, most likely: the log holds every evaluation
            if lost is None:
                lost = (
                    f"{_said(exc)}; the datasets were not written"
                    if not _over(driver)
                    else f"the run is over, but writing its datasets failed: {_said(exc)}"
                )
        finally:
            if closing is not None:
                closing.join()
        if lost is not None:
            try:  # what the log holds (a group whose write failed is not in it)
                stored = min(store.check_log(), run.front.evaluations)
            except DseError:
                stored = run.front.evaluations
            raise DseError(
                f"{lost}; {stored:,} evaluations are stored in {store.path}: "
                f"continue with `{resume_command(store.path, self.plan.execution)}`"
            ) from None
        f = run.front
        return RunResult(
            store.path,
            front,
            {"evaluations": f.evaluations, "feasible": f.feasible, "failed": f.failed},
            f.summary(),
            tuple(run.history),
            interrupted is not None,
            self.algorithm,
            terminated=isinstance(interrupted, Terminated),
            signum=getattr(interrupted, "signum", 0),
            datasets_written=written,
            labels=labels,
            summary=summary[0] if summary else None,
        )

    def _close(self, executor: Executor, store: ResultStore, summary: list | None) -> None:
        """Stop the executor; before, where ``summary`` is a list, append the caller's
        summary of the finished log made on its workers (nothing where it fails: the caller
        reads the log itself)."""
        try:
            if summary is not None:
                try:
                    summary.append(self.summarize(store.path, executor.map_each))
                except Exception:  # noqa: BLE001 - the caller reads the log itself instead
                    pass
        finally:
            executor.__exit__(None, None, None)

    def _expected_s(self, driver: SearchDriver) -> float | None:
        """Seconds the evaluations left should take on the plan's workers, at the cost per
        candidate the evaluator's preview measured (None where there was no preview, or the
        run's length is not a count of candidates)."""
        seen, total = self.plan.preview, self.plan.search.total
        if seen is None or seen.failed or seen.seconds <= 0 or not seen.evaluated or not total:
            return None
        left = max(total - driver.told, 0)
        return left * seen.seconds / seen.evaluated / max(self.plan.execution.workers, 1)

    def _search(
        self, executor: Executor, store: ResultStore, driver: SearchDriver, run: _LoopState
    ) -> None:
        """Ask, evaluate what is not stored yet, store it, tell, save state, until the driver
        is done or asks an empty batch. Where the driver allows it
        (:meth:`SearchDriver.may_ask_ahead`) one batch is asked ahead: right after a batch is
        asked and handed to the executor, and again right after each tell (fixed points of the
        sequence, whatever finishes first), so that the workers start on it as soon as the
        last one's chunks are all started, while this process stores and tells that one."""
        flights: deque[_Flight] = deque()
        last_done = time.perf_counter()
        while True:
            while not driver.done and (
                not flights or (len(flights) == 1 and self._call(driver, "may_ask_ahead"))
            ):
                flight = self._ask(executor, store, driver, run, flights)
                if flight is None:  # nothing more to ask (asked ahead: for now)
                    break
                flights.append(flight)
            if not flights:
                return
            last_done = self._complete(executor, store, driver, run, flights.popleft(), last_done)

    def _ask(
        self,
        executor: Executor,
        store: ResultStore,
        driver: SearchDriver,
        run: _LoopState,
        flights: deque[_Flight],
    ) -> _Flight | None:
        """Ask the next batch and hand what is not stored yet to the executor; None for an
        empty batch. A candidate that a batch in flight evaluates is not evaluated again: it
        is looked up once that batch is stored."""
        started = time.perf_counter()
        signals.raise_lost_interrupt()  # a Ctrl-C that Python could not raise where it came
        keys = self._asked_keys(driver)
        if keys is not None:  # grid positions only: the workers make the values
            batch = pd.DataFrame(index=pd.RangeIndex(len(keys)))
        else:
            batch = self._asked(driver)
            if len(batch) == 0:
                return None
            keys = self._keys(driver, batch)
        span = (int(keys[0]), int(keys[-1]) + 1) if consecutive(keys) else None
        all_new = span is not None and not _stored_or_busy(span, run, flights)
        if all_new:
            # an enumeration's batch, all new: every row evaluated, with no lookup per key
            locs, busy = np.broadcast_to(np.int64(-1), keys.shape), None  # read-only
            todo, todo_keys = range(len(keys)), keys  # (a range: no array of 2**20 rows)
        else:
            locs, busy = run.index.find(keys), None
            unknown = locs < 0
            if flights:
                busy = unknown & np.isin(keys, np.concatenate([f.todo_keys for f in flights]))
                unknown &= ~busy
            if span is not None:  # an enumeration's batch: each key once, in order
                todo = np.flatnonzero(unknown)
            else:
                _, first = np.unique(keys, return_index=True)
                todo = np.sort(first[unknown[first]])  # unknown candidates, once each, in order
            todo_keys = keys[todo]
        told = driver.tells_values  # an enumeration reads no values: none are gathered
        batch_no = run.batch_no + len(flights)
        job = self._submit(
            executor, store, batch, todo, todo_keys, batch_no, told=told, known_consecutive=all_new
        )
        return _Flight(batch, keys, span, locs, busy, todo, todo_keys, batch_no, told, job, started)

    def _complete(
        self,
        executor: Executor,
        store: ResultStore,
        driver: SearchDriver,
        run: _LoopState,
        flight: _Flight,
        last_done: float,
    ) -> float:
        """Store the batch's evaluations, tell the driver, save the state; the time it ends.
        The batch's wall time runs from its ask, or from the end of the batch before it
        where that came later (asked ahead): the batches' times add up to the run's."""
        batch, keys, todo = flight.batch, flight.keys, flight.todo
        fg = self._collect(executor, store, run, flight)
        if flight.told:
            if flight.busy is None:
                known = np.flatnonzero(flight.locs >= 0)
                locs = flight.locs[known]
            else:  # and those the batches in flight stored since
                known = np.flatnonzero((flight.locs >= 0) | flight.busy)
                locs = run.index.find(keys[known])
            if len(known):
                fg = pd.concat(
                    [fg, store.read_rows(locs, self._fg_columns).assign(key=keys[known])],
                    ignore_index=True,
                )
            rows = fg.drop_duplicates("key").set_index("key").loc[keys].reset_index()
            study = self.study
            objectives, violations = objective_matrix(rows, study), violation_matrix(rows, study)
        else:
            # read-only NaN of their shapes (no memory written: an enumeration's batch is large)
            objectives = np.broadcast_to(np.nan, (len(batch), driver.problem.n_objectives))
            violations = np.broadcast_to(np.nan, (len(batch), driver.problem.n_constraints))
        self._call(driver, "tell", batch, objectives, violations)
        done = time.perf_counter()
        seconds = done - max(flight.started, last_done)
        driver.observe_cost(seconds, len(todo))
        record = self._record(run, len(batch), len(todo), seconds)
        run.history.append(record)
        run.batch_no += 1
        self._save_state(store, driver, run)
        self._report.advance(
            len(batch) - len(todo), {**record.to_json(), **self._live(run)}
        )  # the rest came per chunk
        return done

    def _keys(self, driver: SearchDriver, batch: pd.DataFrame) -> np.ndarray:
        """The batch's keys: the grid positions dse's own drivers made it from, else computed
        from its values (a discrete parameter's value that is not one of its values is the
        driver's error)."""
        if self.space.indexable and self._own_driver:
            keys = driver.asked_keys()
            if keys is not None and len(keys) == len(batch):
                return np.asarray(keys, dtype=np.int64)
        try:
            return self.space.keys(batch)
        except ValueError as exc:  # a value that is not one of a discrete parameter's
            raise self._driver_error(f"asked for {exc}") from None

    def _asked_keys(self, driver: SearchDriver) -> np.ndarray | None:
        """The next batch as grid positions, where dse's own driver reads no values and asks
        this way (an enumeration: :meth:`SearchDriver.ask_keys`); else None."""
        if not (self.space.indexable and self._own_driver) or driver.tells_values:
            return None
        keys = self._call(driver, "ask_keys")
        return None if keys is None or len(keys) == 0 else np.asarray(keys, dtype=np.int64)

    def _asked(self, driver: SearchDriver) -> pd.DataFrame:
        """The driver's next batch, checked: a table with every parameter of the space, each
        real parameter within its range (a discrete one is checked by its key)."""
        batch = self._call(driver, "ask")
        if not isinstance(batch, pd.DataFrame):
            raise self._driver_error(f"ask() returned {type(batch).__name__}, not a DataFrame")
        batch = batch.reset_index(drop=True)
        missing = [p.name for p in self.space.parameters if p.name not in batch.columns]
        if missing and len(batch):
            raise self._driver_error(f"asked for candidates without {missing}")
        for p in self.space.parameters:
            if p.values is None and len(batch):
                x = pd.to_numeric(batch[p.name], errors="coerce").to_numpy(dtype=float)
                out = ~((x >= p.low) & (x <= p.high))
                if out.any():
                    raise self._driver_error(
                        f"asked for {p.name} = {batch[p.name].tolist()[int(np.argmax(out))]!r}, "
                        f"outside the space's range [{p.low:g}, {p.high:g}]"
                    )
        return batch

    def _call(self, driver: SearchDriver, method: str, *args):
        """``driver.<method>(*args)``; a third-party driver's exception becomes one line that
        names the driver, the method and where it was raised (dse's own drivers keep their
        traceback: a failure there is dse's bug)."""
        try:
            return getattr(driver, method)(*args)
        except AskedTooMany as exc:  # found by dse's check of what the driver asked
            if self._own_driver:
                raise
            raise self._driver_error(str(exc)) from None
        except Exception as exc:
            if self._own_driver:
                raise
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            raise self._driver_error(
                f"{method}() raised {type(exc).__name__}: {exc} "
                f"(at {Path(frame.filename).name}:{frame.lineno})"
            ) from None

    @cached_property
    def _own_driver(self) -> bool:
        """The study's driver is one of dse's own (its failures keep their traceback)."""
        return self.plan.search.driver_cls.__module__.startswith("dse.")

    def _driver_error(self, what: str) -> DseError:
        return DseError(
            f"search driver '{self.study.search.algorithm}' {what}; what was evaluated before is "
            "stored (a bug of the driver's package)",
            field="search.algorithm",
            file=self.study.source_path or None,
        )

    @cached_property
    def _fg_columns(self) -> list[str]:
        """What a driver is told: objective and constraint metrics, the evaluator's verdict."""
        metrics = [o.metric for o in self.study.objectives] + [
            c.metric for c in self.study.constraints
        ]
        return [*dict.fromkeys(metrics), "feasible", "status"]

    def _save_state(self, store: ResultStore, driver: SearchDriver, run: _LoopState) -> None:
        frame = run.hv.state()
        state = RunState(
            batch=run.batch_no,
            history=tuple(run.history),
            driver=self._call(driver, "state"),
            hypervolume_frame=HypervolumeFrame(
                ideal=None if frame["ideal"] is None else tuple(frame["ideal"]),
                nadir=None if frame["nadir"] is None else tuple(frame["nadir"]),
            ),
            algorithm=self.algorithm,
            finished=_over(driver),
            keep=self.study.output.keep,
            # what ruled candidates out, most frequent first (dse status reads it, not the log)
            ruled_out=tuple(run.front.summary()[:RULED_OUT_KEPT]),
            ruled_out_kinds=len(run.front.ruled_out),
        )
        try:
            store.save_state(state)
        except (TypeError, ValueError) as exc:  # JSON cannot hold the driver's state
            if self._own_driver:
                raise
            raise self._driver_error(f"state() returned what JSON cannot hold ({exc})") from None

    def _submit(
        self,
        executor: Executor,
        store: ResultStore,
        batch: pd.DataFrame,
        todo: np.ndarray | range,
        keys: np.ndarray,
        batch_no: int,
        *,
        told: bool = True,
        known_consecutive: bool = False,
    ):
        """Hand the rows ``todo`` of ``batch`` (``keys`` their keys) to the executor, each
        chunk to be made into log rows of batch ``batch_no`` on the worker; the executor's
        handle, or None when there is nothing to evaluate. ``told``: the workers send back
        the columns the driver is told; ``known_consecutive``: ``keys`` are known to be
        consecutive (each chunk is sent as its first key and count, unchecked)."""
        if len(todo) == 0:
            return None
        if self.space.indexable:  # the workers build the inputs from the grid positions
            inputs = GridCandidates(self.space, keys, known_consecutive)
        else:
            inputs = self.space.with_fixed(batch.iloc[todo]).set_axis(
                pd.Index(keys, dtype=np.int64), axis=0
            )
        finish = LogRows(
            self.study,
            tuple(self.space.names),
            batch_no,
            tuple(self._narrow_columns[1:]),
            told=told,
            # a local cluster's workers write their chunks' log files themselves: the rows'
            # bytes never pass through this process (received, then written again)
            stage_in=str(store.evaluations_dir.absolute())
            if self.plan.execution.kind == "local"
            else None,
        )
        return executor.submit(inputs, finish=finish)

    def _collect(
        self, executor: Executor, store: ResultStore, run: _LoopState, flight: _Flight
    ) -> pd.DataFrame | None:
        """Take the batch's evaluations from the executor: each finished chunk comes back
        as log rows (built on the worker), updates the front and tallies, and goes to the log
        writer, whose groups are all durable when this returns. The key index learns the
        rows' places. Returns the told columns of every evaluated row (None where the driver
        is told no values: the workers send none back)."""
        told = flight.told
        if flight.job is None:
            return pd.DataFrame(columns=["key", *self._fg_columns]) if told else None
        writer = store.writer(flight.batch_no)
        told_columns = []
        try:
            for _, chunk in executor.drain(flight.job):
                run.front.fold(chunk.summary, chunk.contender_rows)
                writer.add(chunk)  # as the study keeps them: the worker blanked what it drops
                if told:
                    told_columns.append(chunk.narrow.select(["key", *self._fg_columns]))
                self._report.advance(len(chunk), self._live(run), evaluated=len(chunk))
                signals.raise_lost_interrupt()
        finally:
            writer.flush()  # what was evaluated is kept, also on Ctrl-C
        for file_no, file_keys in writer.written:
            if isinstance(file_keys, range):  # an enumeration's chunk: known by its first key
                run.index.add_range(file_keys.start, len(file_keys), int(location(file_no, 0)))
            else:
                run.index.add(file_keys, location(file_no, np.arange(len(file_keys))))
        if not told:
            return None
        return pa.concat_tables(told_columns, promote_options="permissive").to_pandas()

    @cached_property
    def _narrow_columns(self) -> list[str]:
        """The columns the front, the tallies and the driver need."""
        return ["key", *self._fg_columns, "reason", "error"]

    @cached_property
    def _best_units(self) -> dict[str, list]:
        """Each objective's stored unit and the unit the study shows it in (None: readable,
        :mod:`dse.units`), for the progress lines."""
        metrics = self.evaluator.metrics
        return {
            o.metric: [
                metrics[o.metric].unit if o.metric in metrics else "",
                self.study.display_units.get(o.metric),
            ]
            for o in self.study.objectives
        }

    def _live(self, run: _LoopState) -> dict:
        """The counts and the best value of each objective so far (the front's extremes)."""
        f = run.front
        best = {}
        if len(f.f):
            for obj, v in zip(self.study.objectives, f.f.min(axis=0), strict=True):
                best[obj.metric] = float(-v if obj.direction == "maximize" else v)
        return {
            "evaluations": f.evaluations,
            "feasible": f.feasible,
            "failed": f.failed,
            "front_size": len(f.f),
            "best": best,
            "best_units": self._best_units,
        }

    def _record(self, run: _LoopState, asked: int, evaluated: int, seconds: float) -> BatchRecord:
        """The progress record of the batch just told."""
        f = run.front
        return BatchRecord(
            batch=run.batch_no,
            asked=asked,
            evaluated=evaluated,
            evaluations=f.evaluations,
            feasible=f.feasible,
            failed=f.failed,
            front_size=len(f.f),
            hypervolume=run.hv.update(np.unique(f.f, axis=0)),
            seconds=round(seconds, 3),
        )

    def _write_outputs(
        self, store: ResultStore, run: _LoopState, search_attrs: dict
    ) -> pd.DataFrame:
        """``pareto.nc`` from the running front, with the search's attributes (what the front
        is: exact, polished or approximate) and the log's size (readers of every evaluation
        read the log itself: :mod:`dse.results`). An ``evaluations.nc`` a run of an earlier
        dse wrote here is removed (it would be stale)."""
        front = run.front.sorted_rows()
        remove_path(store.path / "evaluations.nc")
        if run.front.evaluations == 0:
            return front
        front = front.drop(columns=[c for c in ("kept", "_loc") if c in front])
        attrs = {
            **search_attrs,
            "evaluations": run.front.evaluations,
            "log_rows": store.check_log(),
            "log_keeps": self.study.output.keep,  # see dse.results
            **({"run_id": store.meta.run_id} if store.meta.run_id else {}),
        }
        from dse.datasets import to_dataset, write_netcdf  # xarray: imported ahead (END_IMPORTS)

        front_ds = to_dataset(front, self.study, self.evaluator, self.space, kind="pareto set")
        write_netcdf(front_ds.assign_attrs(attrs), store.path / "pareto.nc")
        return front


#: what writing ``pareto.nc`` imports on its first use: xarray (about 0.3 s of CPU), which
#: looks ``dask.array`` up for its type checks whenever dask is installed (with scipy, about
#: 0.3 s more), and the netCDF library
END_IMPORTS = ("dse.datasets", "dask.array", "netCDF4")


def _import_ahead(modules: tuple[str, ...], then: Callable[[], object] | None = None) -> None:
    """Import ``modules``, then call ``then``, in a background thread: while the first batch is
    evaluated this process mostly waits on its workers, and the imports the run's end needs
    (and the caller's: matplotlib for the plot) take seconds of CPU. Nothing is imported that
    the run's end would not import; one that fails is left to fail where it is needed, with
    the message it gives there. Started only once a local cluster's workers are forked: a
    fork while this thread held an import lock would leave the worker stuck on it."""

    def work() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - imported again where it is needed
                pass
        if then is not None:
            try:
                then()
            except Exception:  # noqa: BLE001 - done again where it is needed
                pass

    threading.Thread(target=work, name="dse-import-ahead", daemon=True).start()


def resume_command(path, execution) -> str:
    """The command that continues a run in ``path`` where it ran: a scheduler given on the
    command line is not in the study, so the command names it (without it, resume would run
    on a local cluster)."""
    return f"dse resume {path}" + (
        f" --scheduler {execution.scheduler}" if execution.scheduler else ""
    )


#: reasons for ruling candidates out that state.json keeps (the most frequent)
RULED_OUT_KEPT = 20


def _said(exc: OSError) -> str:
    """An OSError as the command line says it: the file, then what the system said."""
    where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
    return where + (exc.strerror or str(exc))


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch system ending a job at its wall time, ``kill``) or SIGHUP (the terminal
    or the SSH session closed), taken as Ctrl-C is: what is evaluated stays, the datasets are
    written, the lock is released."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = int(signum)


def _raise_terminated(signum, frame):
    """SIGTERM's and SIGHUP's handler while a run holds its folder."""
    raise Terminated(signum)


#: what ends a run as Ctrl-C does (SIGHUP where the system has it)
TERMINATING = (signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))
