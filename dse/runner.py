"""The run loop: checked study -> search driver -> executor -> evaluator -> store -> Pareto set.

Each batch the driver asks for is looked up in the store first (nothing is evaluated
twice), the rest is evaluated by the executor and written durably chunk by chunk, and only
then is the driver told. After every batch the driver's plain-data state and the progress
record (evaluations, feasible count, front size, hypervolume) are saved. At the end the
Pareto set and every evaluation are written as datasets; drawing them is the caller's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from dse.checks import RunPlan
from dse.datasets import to_dataset, write_netcdf
from dse.errors import DseError
from dse.execution import Executor, make_executor
from dse.pareto import (
    HypervolumeTracker,
    feasible_mask,
    front_mask,
    objective_matrix,
    violation_matrix,
)
from dse.search import SearchDriver
from dse.space import candidate_keys
from dse.store import ResultStore
from dse.study import Study


@dataclass
class RunResult:
    """What a finished (or interrupted) run produced."""

    output_dir: Path
    evaluations: pd.DataFrame
    front: pd.DataFrame
    history: list[dict] = field(default_factory=list)
    interrupted: bool = False
    algorithm: str = ""
    datasets: dict[str, xr.Dataset] = field(default_factory=dict)  # "pareto" and "evaluations", as written


@dataclass
class _LoopState:
    """What the loop carries from batch to batch; rebuilt from the store on resume.

    The tallies (evaluations, feasible, failed, the front's objective vectors) and the key
    index are updated from each batch's new rows only, so a batch costs the same late in a
    long run as early.
    """

    frames: list[pd.DataFrame]
    where: dict[str, tuple[int, int]]  # candidate key -> (frame, row) of its stored evaluation
    history: list[dict]
    hv: HypervolumeTracker
    batch_no: int
    driver_state: dict | None
    n_evaluations: int = 0
    n_feasible: int = 0
    n_failed: int = 0
    front_f: np.ndarray | None = None  # objective vectors of the current front (minimised)

    @classmethod
    def from_store(cls, store: ResultStore, study: Study) -> _LoopState:
        state = store.load_state() or {}
        run = cls(
            frames=[], where={}, history=state.get("history", []),
            hv=HypervolumeTracker(**state.get("hypervolume_frame", {})),
            batch_no=int(state.get("batch", 0)), driver_state=state.get("driver"),
            front_f=np.empty((0, len(study.objectives))),
        )
        run.append(store.load_evaluations(), study)
        return run

    def append(self, new: pd.DataFrame, study: Study) -> None:
        """Fold newly stored evaluations into the index, the tallies and the front."""
        import moocore

        if len(new) == 0:
            return
        frame = len(self.frames)
        self.frames.append(new)
        for row, key in enumerate(new["key"]):
            self.where.setdefault(key, (frame, row))
        feasible = feasible_mask(new, study)
        self.n_evaluations += len(new)
        self.n_feasible += int(feasible.sum())
        self.n_failed += int((new["status"] != "ok").sum()) if "status" in new else 0
        if feasible.any():
            f = np.vstack([self.front_f, objective_matrix(new, study)[feasible]])
            self.front_f = f[moocore.is_nondominated(f, keep_weakly=True)]

    def unknown(self, keys: list[str]) -> np.ndarray:
        """Mask of the keys that have no stored evaluation."""
        return np.fromiter((k not in self.where for k in keys), dtype=bool, count=len(keys))

    def rows_for(self, keys: list[str]) -> pd.DataFrame:
        """The stored rows of ``keys``, in that order (only the frames that hold them are read)."""
        by_frame: dict[int, list[tuple[int, int]]] = {}
        for pos, key in enumerate(keys):
            frame, row = self.where[key]
            by_frame.setdefault(frame, []).append((pos, row))
        parts, order = [], []
        for frame, pairs in by_frame.items():
            parts.append(self.frames[frame].iloc[[row for _, row in pairs]])
            order.extend(pos for pos, _ in pairs)
        rows = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
        return rows.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)


class ProgressSink:
    """Receives progress; the CLI shows it with rich, tests and libraries ignore it."""

    def start(self, total: int | None, description: str) -> None: ...
    def advance(self, n: int, record: dict) -> None: ...
    def stop(self) -> None: ...


class Runner:
    """Runs a checked study (:func:`dse.checks.plan_run`) into a results folder."""

    def __init__(self, plan: RunPlan, output_dir: Path, *, progress: ProgressSink | None = None) -> None:
        self.plan = plan
        self.study = plan.study
        self.space = plan.space
        self.evaluator = plan.evaluator
        self.output_dir = Path(output_dir)
        self.progress = progress or ProgressSink()
        self.algorithm = plan.search.description

    # -- public entry points --------------------------------------------------------------
    def start(self, *, overwrite: bool = False) -> RunResult:
        driver = self.plan.search.build(self.output_dir)  # writes nothing before the store exists
        store = ResultStore.create(
            self.output_dir, study_text=self.study.to_yaml(), study_name=self.study.name,
            evaluator=self.evaluator.name, evaluator_version=self.evaluator.version, overwrite=overwrite,
            owned_files=tuple(driver.owned_files),
        )
        return self._run(store, driver)

    def resume(self) -> RunResult:
        store = ResultStore.open(self.output_dir)
        if store.meta.get("evaluator_version") != self.evaluator.version:
            raise DseError(
                f"{self.output_dir} was evaluated with {store.meta.get('evaluator')} "
                f"{store.meta.get('evaluator_version')}, but this installation has "
                f"{self.evaluator.name} {self.evaluator.version}: resuming would mix two models; "
                "start a new run instead"
            )
        return self._run(store, self.plan.search.build(store.path))

    # -- the loop --------------------------------------------------------------------------
    def _run(self, store: ResultStore, driver: SearchDriver) -> RunResult:
        with store.locked():
            return self._loop(store, driver)

    def _loop(self, store: ResultStore, driver: SearchDriver) -> RunResult:
        study = self.study
        run = _LoopState.from_store(store, study)
        if run.driver_state is not None:
            driver.restore(run.driver_state)
        else:  # save the initial state, so that a run killed in its first batch resumes by restore()
            self._save_state(store, driver, run)

        total = self.plan.search.total
        self.progress.start(total, f"{study.name} · {self.algorithm}")
        if driver.asked:
            self.progress.advance(min(driver.asked, total or driver.asked), run.history[-1] if run.history else {})
        interrupted = False
        try:
            if not driver.done:
                with make_executor(self.plan.execution, study.evaluator) as executor:
                    while not driver.done and self._batch(executor, store, driver, run):
                        pass
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self.progress.stop()
        evaluations = store.load_evaluations()
        front, datasets = self._write_outputs(store, evaluations, driver.attributes())
        return RunResult(store.path, evaluations, front, run.history, interrupted, self.algorithm, datasets)

    def _batch(self, executor: Executor, store: ResultStore, driver: SearchDriver, run: _LoopState) -> bool:
        """Ask, evaluate what is not stored yet, store it, tell, save state. False when the
        driver has nothing more to ask."""
        study = self.study
        started = time.perf_counter()
        batch = driver.ask().reset_index(drop=True)
        if len(batch) == 0:
            return False
        keys = candidate_keys(batch, self.space.names)
        batch = batch.assign(key=keys)
        todo = batch[run.unknown(keys)].drop_duplicates("key")
        run.append(self._evaluate(executor, store, run.batch_no, todo), study)
        rows = run.rows_for(keys)
        driver.tell(batch.drop(columns="key"), objective_matrix(rows, study), violation_matrix(rows, study))
        seconds = time.perf_counter() - started
        driver.observe_cost(seconds, len(todo))
        record = self._record(run, len(batch), len(todo), seconds)
        run.history.append(record)
        run.batch_no += 1
        self._save_state(store, driver, run)
        self.progress.advance(len(batch), record)
        return True

    def _save_state(self, store: ResultStore, driver: SearchDriver, run: _LoopState) -> None:
        store.save_state({
            "driver": driver.state(), "batch": run.batch_no, "history": run.history,
            "hypervolume_frame": run.hv.state(), "algorithm": self.algorithm, "finished": driver.done,
        })

    def _evaluate(self, executor: Executor, store: ResultStore, batch_no: int,
                  todo: pd.DataFrame) -> pd.DataFrame:
        """Evaluate ``todo`` and store each chunk durably as soon as it finishes."""
        if len(todo) == 0:
            return pd.DataFrame()
        todo = todo.reset_index(drop=True)
        params = todo[self.space.names]
        keys = todo["key"].to_numpy()
        written: list[pd.DataFrame] = []
        offsets: dict[int, int] = {}
        size = executor.chunk_size
        for i in range(0, len(todo), size):
            offsets[i // size] = i

        def on_chunk(i: int, inputs: pd.DataFrame, result: pd.DataFrame) -> None:
            lo = offsets[i]
            table = params.iloc[lo:lo + len(inputs)].reset_index(drop=True)
            table = pd.concat([table, result.reset_index(drop=True)], axis=1)
            table.insert(0, "key", keys[lo:lo + len(inputs)])
            table.insert(1, "batch", batch_no)
            store.append_chunk(batch_no, i, table)
            written.append(table)

        executor.evaluate(self.space.with_fixed(params), on_chunk=on_chunk)
        return pd.concat(written, ignore_index=True)

    def _record(self, run: _LoopState, asked: int, evaluated: int, seconds: float) -> dict:
        """The progress record of the batch just told."""
        front = run.front_f if run.front_f is not None else np.empty((0, 0))
        return {
            "batch": run.batch_no, "asked": asked, "evaluated": evaluated,
            "evaluations": run.n_evaluations, "feasible": run.n_feasible, "failed": run.n_failed,
            "front_size": len(front), "hypervolume": run.hv.update(np.unique(front, axis=0)),
            "seconds": round(seconds, 3),
        }

    def _write_outputs(self, store: ResultStore, evaluations: pd.DataFrame,
                       search_attrs: dict) -> tuple[pd.DataFrame, dict]:
        """Write ``evaluations.nc`` and ``pareto.nc``; the front and both datasets."""
        if len(evaluations) == 0:
            return evaluations, {}
        mask = front_mask(evaluations, self.study)
        front = evaluations[mask].reset_index(drop=True)
        first = self.study.objectives[0].metric
        if len(front) and first in front:
            front = front.sort_values(first, kind="stable").reset_index(drop=True)
        attrs = {**search_attrs, "evaluations": len(evaluations)}
        all_ds = to_dataset(evaluations, self.study, self.evaluator, self.space, kind="evaluations", attrs=attrs)
        write_netcdf(all_ds, store.path / "evaluations.nc")
        front_ds = to_dataset(front, self.study, self.evaluator, self.space, kind="pareto set", attrs=attrs)
        write_netcdf(front_ds, store.path / "pareto.nc")
        return front, {"pareto": front_ds, "evaluations": all_ds}
