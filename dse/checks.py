"""The one validation path: a schema-valid study checked against everything a run needs.

:func:`plan_run` checks the study against its evaluator (parameter names and values,
metrics of objectives and constraints), its search driver (name, options, what the
space allows, the budget) and its execution settings (profile, scheduler address, worker
count), and returns the :class:`RunPlan` the runner executes. ``dse validate`` and
``dse run`` both call it, so a study ``validate`` accepts is one ``run`` starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from dse.errors import DseError, StudyError
from dse.evaluators import Evaluator, load_evaluator
from dse.execution import ExecutionPlan, plan_execution
from dse.search import SearchPlan, plan_search
from dse.space import Space
from dse.study import Study


@dataclass(frozen=True)
class RunPlan:
    """A study checked and resolved: what ``dse validate`` approves and ``dse run`` runs."""

    study: Study
    space: Space
    evaluator: Evaluator
    search: SearchPlan
    execution: ExecutionPlan


def plan_run(study: Study, *, workers: int | None = None, scheduler: str | None = None,
             dashboard: bool | None = None) -> RunPlan:
    """Check ``study`` (with command-line overrides) and resolve it into a :class:`RunPlan`.

    Raises :class:`~dse.errors.StudyError` naming the study file, the field, the value and
    what is allowed.
    """
    try:
        evaluator = load_evaluator(study.evaluator)
        check_parameters(study, evaluator)
        space = Space.from_study(study)  # expands ranges; raises on empty ones
        check_space_values(space, evaluator)
        check_metrics(study, evaluator)
        search = plan_search(study, space)
        execution = plan_execution(study.execution, study_path=study.source_path or None,
                                   workers=workers, scheduler=scheduler, dashboard=dashboard)
    except DseError as exc:
        raise exc.with_file(study.source_path) if study.source_path else exc from None
    return RunPlan(study, space, evaluator, search, execution)


def check_parameters(study: Study, evaluator: Evaluator) -> None:
    """Every parameter the study names is an input of the evaluator; fixed values are allowed."""
    inputs = evaluator.inputs
    for section, params in (("space", study.space), ("fixed", study.fixed), ("workload", study.workload)):
        for name in params:
            if name not in inputs:
                raise StudyError(f"unknown parameter '{name}' for evaluator '{evaluator.name}'",
                                 field=f"{section}.{name}", allowed=", ".join(sorted(inputs)))
    for section, params in (("fixed", study.fixed), ("workload", study.workload)):
        for name, value in params.items():
            inputs[name].check(value, field=f"{section}.{name}")


def check_space_values(space: Space, evaluator: Evaluator) -> None:
    """Every value (or interval end) of every searched parameter is allowed by its input."""
    inputs = evaluator.inputs
    for param in space.parameters:
        values = param.values if param.values is not None else (param.low, param.high)
        for v in values:
            inputs[param.name].check(v, field=f"space.{param.name}")


def check_metrics(study: Study, evaluator: Evaluator) -> None:
    """Objectives and constraints name metrics the evaluator reports."""
    metrics = evaluator.metrics
    allowed = ", ".join(sorted(metrics))
    for i, obj in enumerate(study.objectives):
        if obj.metric not in metrics:
            raise StudyError(f"unknown metric '{obj.metric}'", field=f"objectives[{i}].metric",
                             allowed=allowed)
    for i, con in enumerate(study.constraints):
        if con.metric not in metrics:
            raise StudyError(f"unknown metric '{con.metric}' in constraint '{con}'",
                             field=f"constraints[{i}]", allowed=allowed)
