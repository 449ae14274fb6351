"""A results folder opened for reading: the study, the evaluation log, the state, the datasets.

Every command that reads a finished or interrupted run (``status``, ``export``, ``plot``,
``resume``) opens it through :func:`open_results`, so each sees the same checks and the
same messages.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import pandas as pd
import xarray as xr

from dse.errors import DseError
from dse.store import ResultStore
from dse.study import Study, load_study

DATASETS = {True: "pareto.nc", False: "evaluations.nc"}


class Results:
    """A results folder (see :mod:`dse.store` for its layout)."""

    def __init__(self, path: str | Path) -> None:
        self.store = ResultStore.open(path)
        self.path = self.store.path

    @cached_property
    def study(self) -> Study:
        """The study as it was run (``study.yaml``)."""
        return load_study(self.store.study_file)

    @property
    def meta(self) -> dict:
        return self.store.meta

    def state(self) -> dict:
        """The search state and progress history (empty before the first batch)."""
        return self.store.load_state() or {}

    def log(self) -> pd.DataFrame:
        """Every stored evaluation, one row per distinct candidate."""
        return self.store.load_evaluations()

    def dataset(self, *, front: bool) -> xr.Dataset:
        """``pareto.nc`` (``front=True``) or ``evaluations.nc``, loaded into memory."""
        with self.open_dataset(front=front) as ds:
            return self._checked(ds.load, front)

    def open_dataset(self, *, front: bool, keep: list[str] | None = None) -> xr.Dataset:
        """The dataset opened lazily: a variable is read when indexed or loaded, so a caller
        can read a run of any size slice by slice (close it, or use it in a ``with``).
        ``keep`` names the variables to open (the others are dropped unread: xarray with
        h5netcdf reads a variable-length text variable whole when it opens it)."""
        path = self.path / DATASETS[front]
        if not path.is_file():
            raise DseError(f"{path} does not exist yet; finish or resume the run first "
                           f"(`dse resume {self.path}` writes it)")

        def read():
            drop = None
            if keep is not None:
                import h5netcdf

                with h5netcdf.File(path, "r") as f:
                    drop = [n for n in f.variables if n not in keep and n != "candidate"]
            return xr.open_dataset(path, engine="h5netcdf", drop_variables=drop)

        return self._checked(read, front)

    def _checked(self, read, front: bool):
        try:
            return read()
        except (OSError, ValueError) as exc:
            raise DseError(f"{self.path / DATASETS[front]} is damaged ({exc}); `dse resume "
                           f"{self.path}` writes it again from the stored evaluations") from None

    @property
    def front(self) -> xr.Dataset:
        """The Pareto set."""
        return self.dataset(front=True)

    @property
    def evaluations(self) -> xr.Dataset:
        """Every evaluation."""
        return self.dataset(front=False)


def open_results(path: str | Path) -> Results:
    """Open a results folder written by ``dse run`` (raises a one-line error otherwise)."""
    return Results(path)
