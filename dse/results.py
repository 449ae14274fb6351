"""A results folder opened for reading: the study, the evaluation log, the state, the datasets.

Every command that reads a run (``status``, ``resume``, ``export``, ``plot``, ``report``,
``show``) opens it through :func:`open_results`, so each sees the same integrity check
and, for a damaged folder, the same one-line message: the folder's marker and format,
``study.yaml``, every log file's footer and columns (no data read), ``state.json``, and
that the log holds at least the evaluations the state records. ``pareto.nc`` is served
only when it was written from the log as it is now (its ``log_rows`` attribute): a run
killed before it rewrote it, or still going, is told so instead of serving stale numbers.
Every evaluation is read from the log itself (``evaluations/``, the only copy at rest), as
a lazy Dataset with the variables and attributes ``evaluations.nc`` had (dse before issue
37 wrote that second copy after every run); it is served under the same condition as the
front, whose attributes (the search's labels, ``log_rows``, ``log_keeps``) it carries.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

import pandas as pd
import xarray as xr

from dse.errors import DseError, StoreError
from dse.files import NETCDF_ENGINE
from dse.records import RunMeta, RunState
from dse.store import ResultStore
from dse.study import Study, load_study

#: the run's datasets at rest: the front (every evaluation is read from the log)
DATASETS = {True: "pareto.nc"}
#: chunk cache per variable when a dataset is read (HDF5's default; see open_dataset)
READ_CHUNK_CACHE_BYTES = 1 << 20


class Results:
    """A results folder (see :mod:`dse.store` for its layout)."""

    def __init__(self, path: str | Path) -> None:
        self.store = ResultStore.open(path)
        self.path = self.store.path
        # the state before the log: a running run commits a batch's log files before it
        # records the batch in state.json, so the log read after holds every evaluation the
        # state read before records (read the other way round, a batch recorded in between
        # looked like missing files)
        self.state_when_opened = self.state()
        self.log_rows = self.store.check_log(tuple(self.study.space))
        if (
            self.log_rows and not self.store.state_file.is_file()
        ):  # a run saves its state before its first batch
            raise StoreError(
                f"{self.path} is damaged: state.json is missing but {self.store.evaluations_dir} holds "
                f"{self.log_rows} evaluations; restore it, or start again with `dse run --overwrite`"
            )
        recorded = self.state_when_opened.evaluations
        if self.log_rows < recorded:
            raise StoreError(
                f"{self.path} is damaged: state.json records {recorded} evaluations but "
                f"{self.store.evaluations_dir} holds {self.log_rows}; restore the missing files, "
                "or start again with `dse run --overwrite`"
            )

    @cached_property
    def study(self) -> Study:
        """The study as it was run (``study.yaml``)."""
        return load_study(self.store.study_file)

    @property
    def meta(self) -> RunMeta:
        """``meta.json``: what the run is."""
        return self.store.meta

    def state(self) -> RunState:
        """``state.json``: the search state and progress history (empty before the first batch)."""
        return self.store.load_state() or RunState()

    def log(self) -> pd.DataFrame:
        """Every stored evaluation, one row per distinct candidate."""
        return self.store.load_evaluations()

    def dataset(self, *, front: bool) -> xr.Dataset:
        """``pareto.nc`` (``front=True``) or every evaluation, loaded into memory."""
        with self.open_dataset(front=front) as ds:
            return self._checked(ds.load, front) if front else ds.load()

    def open_dataset(
        self, *, front: bool, keep: list[str] | None = None, text: str = "str"
    ) -> xr.Dataset:
        """The dataset opened lazily: a variable is read when indexed or loaded, so a caller
        can read a run of any size slice by slice (close it, or use it in a ``with``).
        ``keep`` names the variables to open (the others are dropped unread: a text
        variable is decoded whole when it is opened). Every evaluation (``front=False``)
        is read from the log (:func:`dse.datasets.log_dataset`; ``text="bytes"``: text as
        fixed-width UTF-8, as a netCDF file is best written), with ``pareto.nc``'s
        attributes: served when the front is."""
        if not front:
            from dse.datasets import log_dataset

            with self.open_dataset(front=True) as pareto:
                attrs = dict(pareto.attrs)
                # the front's rows are log rows: its variables are the log's (with their
                # attributes); an empty front has none, and the evaluator tells them
                template = (
                    pareto.isel(candidate=slice(0, 1)).load() if pareto.sizes["candidate"] else None
                )
            ds = log_dataset(
                self.store,
                self.study,
                self.evaluator if template is None else None,
                self.space,
                text=text,
                keep=keep,
                template=template,
            )
            return ds.assign_attrs(
                {**attrs, "title": f"dse evaluations: {self.study.name}", "kind": "evaluations"}
            )
        path = self.path / DATASETS[front]
        if not path.is_file():
            owner = self.store.live_lock_owner()
            if owner:  # resume would be refused: the run is going
                raise DseError(
                    f"{path} does not exist yet: the run is still going (process {owner.pid} on "
                    f"{owner.host}) and writes it when it ends; `dse status {self.path}` shows "
                    "its progress"
                )
            raise DseError(
                f"{path} does not exist yet; finish or resume the run first "
                f"(`dse resume {self.path}` writes it)"
            )

        def read():
            import netCDF4

            # absolute: xarray reads a leading '~' of a relative path ('-o "~/x"': a folder
            # named ~ here) as the home folder, and would open a file there
            where = os.path.abspath(path)
            drop = None
            if keep is not None:
                with netCDF4.Dataset(where, "r") as f:
                    drop = [n for n in f.variables if n not in keep and n != "candidate"]
            # netCDF-C gives each variable of a file it opens a 64 MiB chunk cache: reading a
            # 10^7-row run slice by slice, `dse report` held 1.6 GB of them (0.6 GB with
            # HDF5's own default, 1 MiB, which h5py uses); so the 1 MiB, for this file only
            before = netCDF4.get_chunk_cache()
            netCDF4.set_chunk_cache(READ_CHUNK_CACHE_BYTES)
            try:
                return xr.open_dataset(where, engine=NETCDF_ENGINE, drop_variables=drop)
            finally:
                netCDF4.set_chunk_cache(*before)

        return self._checked(read, front)

    def _checked(self, read, front: bool):
        path = self.path / DATASETS[front]
        try:
            ds = read()
        except (OSError, ValueError) as exc:
            raise DseError(
                f"{path} is damaged ({exc}); `dse resume "
                f"{self.path}` writes it again from the stored evaluations"
            ) from None
        run_id, own = ds.attrs.get("run_id"), self.store.meta.run_id or None
        if run_id is not None and own is not None and run_id != own:
            ds.close()
            raise DseError(
                f"{path} was written by another run (run_id {run_id}, this folder's is {own}): "
                f"`dse resume {self.path}` writes it again from this run's evaluations"
            )
        written = ds.attrs.get("log_rows")
        if written is not None and int(written) != self.log_rows:
            owner = self.store.live_lock_owner()
            if owner:
                why = f"the run is still going (process {owner.pid} on {owner.host})"
            else:
                why = f"`dse resume {self.path}` writes it again"
            raise DseError(
                f"{path} was written from {int(written)} evaluations, but the log now "
                f"holds {self.log_rows}: {why}"
            )
        return ds

    def datasets_state(self) -> str:
        """One line on ``pareto.nc`` (every evaluation is read from the log, served when the
        front is): written from the log as it is now, or what export, plot, report and show
        would say of it (no data is read)."""
        try:
            if not (self.path / DATASETS[True]).is_file():
                return (
                    f"{DATASETS[True]} is missing; `dse resume {self.path}` writes it from the "
                    "stored evaluations"
                )
            self.open_dataset(front=True, keep=[]).close()
        except DseError as exc:
            return str(exc)
        return "pareto.nc written from the log as it is; every evaluation read from the log"

    @cached_property
    def space(self):
        """The study's space (what the datasets' coordinates are)."""
        from dse.space import Space

        return Space.from_study(self.study)

    @cached_property
    def evaluator(self):
        """The study's evaluator (its inputs' and metrics' units and descriptions name the
        datasets' variables): built only to read every evaluation."""
        from dse.evaluators import load_evaluator

        return load_evaluator(self.study.evaluator)

    @property
    def front(self) -> xr.Dataset:
        """The Pareto set."""
        return self.dataset(front=True)

    def feasible_front(self) -> xr.Dataset:
        """The Pareto set, refused (one message for every command) when the run found no
        feasible candidate: there is no front to show, plot, report or export."""
        ds = self.front
        if ds.sizes.get("candidate", 0) == 0:
            raise DseError(
                f"{self.path} has no feasible candidate, so there is no Pareto front; "
                f"`dse status {self.path}` shows what ruled them out, and "
                f"`dse export {self.path} --all` writes every evaluation"
            )
        return ds

    @property
    def evaluations(self) -> xr.Dataset:
        """Every evaluation."""
        return self.dataset(front=False)


def open_results(path: str | Path) -> Results:
    """Open a results folder written by ``dse run`` (raises a one-line error otherwise)."""
    return Results(path)
