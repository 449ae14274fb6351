"""The library API: load a study, run or resume it, open its results.

>>> import dse
>>> study = dse.load_study("studies/quickstart.yaml")
>>> result = dse.run(study, workers=0, overwrite=True)  # in this process; replaces an earlier run
>>> dse.open_results(result.output_dir).front    # the Pareto set as an xarray Dataset
>>> dse.sensitivity(result.output_dir, at="knee")  # elasticities to each knob (dse.outputs.sensitivity)

``run`` and ``resume`` check what ``dse validate`` checks and refuse what it refuses, with
the same message; :func:`check_run` returns that checked plan without running it (its
``warnings``, what its ``preview`` found). ``dse run``, ``dse resume`` and ``dse validate``
print these plans.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from numbers import Integral
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.checks import RunPlan, check_new_run, check_resume, plan_run
from dse.errors import StudyError
from dse.progress import ProgressSink
from dse.runner import Runner, RunResult
from dse.study import Study, parse_study
from dse.study import load_study as _load_schema

if TYPE_CHECKING:
    from dse.results import Results


def __getattr__(name: str):
    """:class:`dse.results.Results`, imported on first use (as every use of :mod:`dse.results`
    here): xarray (about 0.3 s of CPU) is then imported while a run waits on its workers, not
    before the run starts (:func:`dse.runner._import_ahead`)."""
    if name == "Results":
        from dse.results import Results

        return Results
    raise AttributeError(f"module 'dse.api' has no attribute {name!r}")


def open_results(path: str | Path) -> Results:
    """Open a results folder written by ``dse run`` (raises a one-line error otherwise)."""
    from dse.results import open_results as opened

    return opened(path)


__all__ = [
    "Results",
    "RunPlan",
    "RunResult",
    "check_run",
    "load_study",
    "open_results",
    "plan",
    "plan_resume",
    "resume",
    "run",
]


def load_study(path: str | Path | Mapping[str, Any]) -> Study:
    """Read a study file (or take a mapping of its sections, as YAML would give) and check
    it (schema, evaluator, search, execution: :func:`plan`). What depends on the moment a run
    starts (its results folder, the scheduler, the evaluator's preview) :func:`run` checks."""
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
    raise StudyError(
        f"expected a study: a file path, a mapping of its sections or a dse Study, "
        f"not {type(study).__name__}",
        value=study,
    )


def plan(
    study: Study | str | Path | Mapping[str, Any],
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard: bool | None = None,
) -> RunPlan:
    """The checked plan of a study (a path, a mapping or a loaded :class:`Study`)."""
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, Integral) or workers < 0
    ):
        raise StudyError(
            "expected a whole number of local worker processes",
            field="workers",
            value=workers,
            allowed="0 (evaluate in this process) or more; None: the study's or one per core",
        )
    return plan_run(
        _read(study),
        workers=None if workers is None else int(workers),
        scheduler=scheduler,
        dashboard=dashboard,
    )


def check_run(
    study: Study | str | Path | Mapping[str, Any],
    output_dir: str | Path | None = None,
    *,
    overwrite: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard: bool | None = None,
    here: bool = True,
) -> RunPlan:
    """Everything a new run into ``output_dir`` (default: the study's output folder) checks
    before it starts, without running it: the plan (:func:`plan`), the results folder, the
    driver's files, the cluster and scheduler, the evaluator's preview. Raises
    :class:`~dse.errors.DseError` on what a run refuses; the plan's ``warnings`` are what it
    would start with. ``here=False``: the run starts elsewhere (``dse validate`` on a laptop
    for a login node), so a batch system's missing submit command is a warning."""
    p = plan(study, workers=workers, scheduler=scheduler, dashboard=dashboard)
    return check_new_run(p, output_dir, overwrite=overwrite, here=here)


def run(
    study: Study | str | Path | Mapping[str, Any] | RunPlan,
    output_dir: str | Path | None = None,
    *,
    overwrite: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard: bool | None = None,
    progress: ProgressSink | None = None,
    prepare: Callable[[], object] | None = None,
    summarize: Callable[[Path, Callable], object] | None = None,
) -> RunResult:
    """Run a study into ``output_dir`` (default: the study's output folder), checked as
    :func:`check_run` checks it, or run a plan :func:`check_run` returned. The plan's
    warnings go to ``progress.note`` as the run starts. ``prepare``: called in a background
    thread once the workers have started, to make ready what the caller does after the run
    (``dse run`` imports its plotting there). ``summarize``: what the caller reads of every
    evaluation, made on the workers before they stop (:class:`dse.runner.Runner`; in
    ``RunResult.summary``; ``dse run`` summarises the log for its figure)."""
    if isinstance(study, RunPlan):
        p = (
            study
            if study.output_dir is not None
            else check_new_run(study, output_dir, overwrite=overwrite)
        )
    else:
        p = check_run(
            study,
            output_dir,
            overwrite=overwrite,
            workers=workers,
            scheduler=scheduler,
            dashboard=dashboard,
        )
    _note_warnings(p, progress)
    return Runner(p, p.output_dir, progress=progress, prepare=prepare, summarize=summarize).start(
        overwrite=p.overwrite
    )


def plan_resume(
    results: str | Path | Results,
    *,
    study: Study | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard: bool | None = None,
) -> RunPlan:
    """The checked plan that continues the run in ``results`` (a folder, or one already
    opened): its stored study (:func:`stored_study`; ``study``: that study changed, e.g. to
    run on another cluster profile), checked as a new run's is, its cluster and scheduler
    as they are now."""
    from dse.results import Results, open_results

    stored = (
        results if isinstance(results, Results) else open_results(results)
    )  # the integrity check
    s = stored_study(stored) if study is None else study
    return check_resume(
        plan(s, workers=workers, scheduler=scheduler, dashboard=dashboard), stored.path
    )


def resume(
    results_dir: str | Path | RunPlan,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard: bool | None = None,
    progress: ProgressSink | None = None,
    prepare: Callable[[], object] | None = None,
) -> RunResult:
    """Continue an interrupted run (a results folder, or the plan :func:`plan_resume`
    returned): nothing already stored is evaluated again. ``prepare``: as for :func:`run`."""
    if isinstance(results_dir, RunPlan):
        p = results_dir
    else:
        p = plan_resume(results_dir, workers=workers, scheduler=scheduler, dashboard=dashboard)
    _note_warnings(p, progress)
    return Runner(p, p.output_dir, progress=progress, prepare=prepare).resume()


def _note_warnings(p: RunPlan, progress: ProgressSink | None) -> None:
    """The plan's warnings, told as the run starts: to the progress sink, else as Python
    warnings (``UserWarning``)."""
    for warning in p.warnings:
        if progress is not None:
            progress.note(f"warning: {warning}")
        else:
            warnings.warn(warning, UserWarning, stacklevel=3)


def stored_study(stored: Results) -> Study:
    """The study of a results folder (its copy), on the cluster profile the run used: the run
    recorded the file it found (meta.json ``profile_path``), named by the study (``profile:
    mycluster``, found beside the study, not beside the copy) or given as ``--profile``, which
    replaced the study's own workers and scheduler (so resume goes on where the run ran, not
    on a local cluster)."""
    study = _load_schema(stored.store.study_file)
    used = stored.store.meta.profile_path
    if used and Path(used).is_file():
        study = (
            study.with_execution(profile=used)
            if study.execution.profile
            else study.with_execution(profile=used, scheduler=None, workers=None)
        )
    return study
