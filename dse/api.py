"""The library API: load a study, run or resume it, open its results.

>>> import dse
>>> study = dse.load_study("studies/quickstart.yaml")
>>> result = dse.run(study, workers=0, overwrite=True)  # in this process; replaces an earlier run
>>> dse.open_results(result.output_dir).front    # the Pareto set as an xarray Dataset
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral
from os import PathLike
from pathlib import Path
from typing import Any

from dse.checks import RunPlan, plan_run
from dse.errors import StudyError
from dse.progress import ProgressSink
from dse.results import Results, open_results
from dse.runner import Runner, RunResult
from dse.study import Study, parse_study
from dse.study import load_study as _load_schema

__all__ = ["Results", "RunResult", "load_study", "open_results", "plan", "resume", "run"]


def load_study(path: str | Path | Mapping[str, Any]) -> Study:
    """Read a study file (or take a mapping of its sections, as YAML would give) and check
    it completely (schema, evaluator, search, execution)."""
    study = _read(path)
    plan_run(study)
    return study


def _read(study: Study | str | Path | Mapping[str, Any]) -> Study:
    if isinstance(study, Study):  # a copy changed in Python stores what it is, not its file's text
        return study.without_stale_source()
    if isinstance(study, Mapping):
        return parse_study(dict(study), file="<mapping>")
    if isinstance(study, str | PathLike):
        return _load_schema(study)
    raise StudyError(f"expected a study: a file path, a mapping of its sections or a dse Study, "
                     f"not {type(study).__name__}", value=study)


def plan(study: Study | str | Path | Mapping[str, Any], *, workers: int | None = None,
         scheduler: str | None = None, dashboard: bool | None = None) -> RunPlan:
    """The checked plan of a study (a path, a mapping or a loaded :class:`Study`)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, Integral) or workers < 0):
        raise StudyError("expected a whole number of local worker processes", field="workers", value=workers,
                         allowed="0 (evaluate in this process) or more; None: the study's or one per core")
    return plan_run(_read(study), workers=None if workers is None else int(workers), scheduler=scheduler,
                    dashboard=dashboard)


def run(study: Study | str | Path | Mapping[str, Any], output_dir: str | Path | None = None, *, overwrite: bool = False,
        workers: int | None = None, scheduler: str | None = None, dashboard: bool | None = None,
        progress: ProgressSink | None = None) -> RunResult:
    """Run a study into ``output_dir`` (default: the study's output folder)."""
    p = plan(study, workers=workers, scheduler=scheduler, dashboard=dashboard)
    return Runner(p, Path(output_dir) if output_dir else p.study.output_dir,
                  progress=progress).start(overwrite=overwrite)


def resume(results_dir: str | Path, *, workers: int | None = None, scheduler: str | None = None,
           dashboard: bool | None = None, progress: ProgressSink | None = None) -> RunResult:
    """Continue an interrupted run: nothing already stored is evaluated again."""
    stored = open_results(results_dir)  # the integrity check every reading command makes
    p = plan(stored_study(stored), workers=workers, scheduler=scheduler, dashboard=dashboard)
    return Runner(p, Path(results_dir), progress=progress).resume()


def stored_study(stored: Results) -> Study:
    """The study of a results folder (its copy), on the cluster profile the run used: the run
    recorded the file it found (meta.json ``profile_path``), named by the study (``profile:
    mycluster``, found beside the study, not beside the copy) or given as ``--profile``, which
    replaced the study's own workers and scheduler (so resume goes on where the run ran, not
    on a local cluster)."""
    study = _load_schema(stored.store.study_file)
    used = stored.store.meta.profile_path
    if used and Path(used).is_file():
        study = (study.with_execution(profile=used) if study.execution.profile
                 else study.with_execution(profile=used, scheduler=None, workers=None))
    return study
