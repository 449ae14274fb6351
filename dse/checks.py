"""The one validation path: a schema-valid study checked against everything a run needs.

:func:`plan_run` checks the study against its evaluator (parameter names and values,
metrics of objectives and constraints), its search driver (name, options, what the
space allows, the budget) and its execution settings (profile, scheduler address, worker
count), and returns the :class:`RunPlan` the runner executes. ``dse validate`` and
``dse run`` both call it, so a study ``validate`` accepts is one ``run`` starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from dse.errors import DseError, StudyError, did_you_mean
from dse.evaluators import Evaluator, load_evaluator
from dse.execution import ExecutionPlan, plan_execution
from dse.search import SearchPlan, plan_search
from dse.space import Space
from dse.study import ChoicesSpec, LogSpec, RangeSpec, Study


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
        check_sections(study)
        evaluator = load_evaluator(study.evaluator)
        check_parameters(study, evaluator)
        study = canonical_values(study, evaluator)
        check_values(study, evaluator)
        space = Space.from_study(study)  # expands ranges; raises on empty ones
        check_space_values(space, evaluator)
        check_distinct(study)  # after: a wrong value is named as such, not as listed twice
        check_metrics(study, evaluator)
        search = plan_search(study, space)
        execution = plan_execution(study.execution, study_path=study.source_path or None,
                                   workers=workers, scheduler=scheduler, dashboard=dashboard)
    except DseError as exc:
        raise exc.with_file(study.source_path) if study.source_path else exc from None
    return RunPlan(study, space, evaluator, search, execution)


def check_sections(study: Study) -> None:
    """A parameter is given in one place (space, fixed or workload) and an objective names
    each metric once."""
    for name in study.space:
        for section, params in (("fixed", study.fixed), ("workload", study.workload)):
            if name in params:
                raise StudyError(f"'{name}' is both searched (space.{name}) and set ({section}.{name}); "
                                 "give it in one place", field=f"space.{name}")
    for name in study.fixed:
        if name in study.workload:
            raise StudyError(f"'{name}' is set twice (workload.{name} and fixed.{name}); give it in one place",
                             field=f"fixed.{name}")
    first: dict[str, int] = {}
    for i, obj in enumerate(study.objectives):
        if obj.metric in first:
            raise StudyError(f"objectives[{first[obj.metric]}] already names this metric; each metric is one "
                             "objective", field=f"objectives[{i}].metric", value=obj.metric)
        first[obj.metric] = i


def _section_of(study: Study, name: str) -> str:
    return next(s for s in ("space", "fixed", "workload") if name in getattr(study, s))


def check_parameters(study: Study, evaluator: Evaluator) -> None:
    """Every parameter the study names is an input of the evaluator, and of each group of
    alternative inputs (:attr:`~dse.evaluators.Evaluator.exclusive_inputs`) it sets one."""
    inputs = evaluator.inputs
    for section, params in (("space", study.space), ("fixed", study.fixed), ("workload", study.workload)):
        for name in params:
            if name not in inputs:
                raise StudyError(f"unknown parameter '{name}' for evaluator '{evaluator.name}'"
                                 f"{did_you_mean(name, inputs)}",
                                 field=f"{section}.{name}", allowed=", ".join(sorted(inputs)))
    given = set(study.space) | set(study.fixed) | set(study.workload)
    for group in evaluator.exclusive_inputs:
        both = [name for name in group if name in given]
        if len(both) > 1:
            where = [f"{_section_of(study, n)}.{n}" for n in both]
            raise StudyError(f"{' and '.join(where)} are alternatives: evaluator '{evaluator.name}' uses only "
                             "one of them; set one", field=where[-1], allowed=f"one of {', '.join(group)}")


def canonical_values(study: Study, evaluator: Evaluator) -> Study:
    """The study with every value as the evaluator's inputs spell it
    (:meth:`~dse.evaluators.Input.canonical`: ``a100-80gb`` is ``A100-80GB``, ``8.0`` of an
    integer input is ``8``)."""
    inputs = evaluator.inputs

    def one(name, value):
        return inputs[name].canonical(value)

    def spec(name, s):
        if isinstance(s, list):
            return [one(name, v) for v in s]
        if isinstance(s, ChoicesSpec):
            return s.model_copy(update={"choices": [one(name, v) for v in s.choices]})
        if isinstance(s, RangeSpec):  # [1.0, 8.0] of an integer input is [1, 8]: the integer grid
            step = None if s.step is None else one(name, s.step)
            return s.model_copy(update={"range": tuple(one(name, v) for v in s.range), "step": step})
        if isinstance(s, LogSpec):
            base = None if s.base is None else one(name, s.base)
            return s.model_copy(update={"log": tuple(one(name, v) for v in s.log), "base": base})
        return one(name, s)

    return study.model_copy(update={"space": {n: spec(n, s) for n, s in study.space.items()},
                                    "fixed": {n: one(n, v) for n, v in study.fixed.items()},
                                    "workload": {n: one(n, v) for n, v in study.workload.items()}})


def check_values(study: Study, evaluator: Evaluator) -> None:
    """Every fixed and workload value is allowed by its input."""
    inputs = evaluator.inputs
    for section, params in (("fixed", study.fixed), ("workload", study.workload)):
        for name, value in params.items():
            inputs[name].check(value, field=f"{section}.{name}")


def check_distinct(study: Study) -> None:
    """No value is listed twice for one parameter (after the canonical spelling: ``h100_sxm``
    and ``H100 SXM`` are one accelerator); true and 1 are not the same value here."""
    for name, s in study.space.items():
        values = s if isinstance(s, list) else s.choices if isinstance(s, ChoicesSpec) else []
        seen: dict = {}
        for i, v in enumerate(values):
            key = (type(v) is bool, v)
            if key in seen:
                raise StudyError(f"items {seen[key]} and {i} are both {v!r} (as the evaluator spells its values)",
                                 field=f"space.{name}", allowed="each value once")
            seen[key] = i


def check_space_values(space: Space, evaluator: Evaluator) -> None:
    """Every value (or interval end) of every searched parameter is allowed by its input,
    and an integer input is not searched over a continuous range."""
    inputs = evaluator.inputs
    for param in space.parameters:
        inp = inputs[param.name]
        values = param.values if param.values is not None else (param.low, param.high)
        for v in values:
            inp.check(v, field=f"space.{param.name}")
        if param.values is None and inp.kind == "int":
            raise StudyError("a continuous range of an integer input: every sample would be a fraction",
                             field=f"space.{param.name}", value={"range": [param.low, param.high]},
                             allowed="whole-number ends (a grid of step 1), a 'step', a 'log' grid or a list")


def check_metrics(study: Study, evaluator: Evaluator) -> None:
    """Objectives and constraints name metrics the evaluator reports."""
    metrics = evaluator.metrics
    allowed = ", ".join(sorted(metrics))
    for i, obj in enumerate(study.objectives):
        if obj.metric not in metrics:
            raise StudyError(f"unknown metric '{obj.metric}'{did_you_mean(obj.metric, metrics)}",
                             field=f"objectives[{i}].metric",
                             allowed=allowed)
    for i, con in enumerate(study.constraints):
        if con.metric not in metrics:
            raise StudyError(f"unknown metric '{con.metric}' in constraint '{con}'"
                             f"{did_you_mean(con.metric, metrics)}",
                             field=f"constraints[{i}]", allowed=allowed)

