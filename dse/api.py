"""The library API: load a study, run or resume it, open its results.

>>> import dse
>>> study = dse.load_study("studies/quickstart.yaml")
>>> result = dse.run(study, workers=0)           # in this process
>>> dse.open_results(result.output_dir).front    # the Pareto set as an xarray Dataset
"""

from __future__ import annotations

from pathlib import Path

from dse.checks import RunPlan, plan_run
from dse.progress import ProgressSink
from dse.results import Results, open_results
from dse.runner import Runner, RunResult
from dse.study import Study
from dse.study import load_study as _load_schema

__all__ = ["Results", "RunResult", "load_study", "open_results", "plan", "resume", "run"]


def load_study(path: str | Path) -> Study:
    """Read a study file and check it completely (schema, evaluator, search, execution)."""
    study = _load_schema(path)
    plan_run(study)
    return study


def plan(study: Study | str | Path, *, workers: int | None = None, scheduler: str | None = None,
         dashboard: bool | None = None) -> RunPlan:
    """The checked plan of a study (a path or a loaded :class:`Study`)."""
    if not isinstance(study, Study):
        study = _load_schema(study)
    return plan_run(study, workers=workers, scheduler=scheduler, dashboard=dashboard)


def run(study: Study | str | Path, output_dir: str | Path | None = None, *, overwrite: bool = False,
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
    """The study of a results folder (its copy), with the cluster profile the run used: the
    copy names it as the study did (``profile: mycluster``, found beside the study), and the
    run recorded the file it found (meta.json ``profile_path``)."""
    study = _load_schema(stored.store.study_file)
    used = stored.store.meta.get("profile_path")
    if study.execution.profile and used and Path(used).is_file():
        study = study.with_execution(profile=used)
    return study
