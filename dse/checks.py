"""The one validation path: a schema-valid study checked against everything a run needs.

:func:`plan_run` checks the study against its evaluator (parameter names and values,
metrics of objectives and constraints), its search driver (name, options, what the
space allows, the budget) and its execution settings (profile, scheduler address, worker
count), and returns the :class:`RunPlan` the runner executes. :func:`check_new_run` and
:func:`check_resume` then check what a run needs of this machine and this moment (the
results folder, the driver's own files, the cluster's job and submit command, the
scheduler) and, for a new run, evaluate the evaluator's preview; what they find worth
saying but not refusing is the plan's :attr:`RunPlan.warnings`. ``dse validate``,
``dse run``, ``dse resume``, ``dse.run`` and ``dse.resume`` all go through them, so a
study ``validate`` accepts is one ``run`` starts, and one it refuses the library refuses
with the same message.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from dse.errors import DseError, StoreError, StudyError, counted, did_you_mean
from dse.evaluators import Evaluator, load_evaluator
from dse.evaluators.base import RESERVED_NAMES, name_problem
from dse.execution import ExecutionPlan, plan_execution
from dse.preview import Preview, preview
from dse.search import SearchPlan, plan_search
from dse.space import Space, short_of_its_end
from dse.store import ResultStore
from dse.study import BundlesSpec, ChoicesSpec, Constraint, LogSpec, RangeSpec, Study
from dse.units import UNITS, canonical, factor, kinds_of


@dataclass(frozen=True)
class RunPlan:
    """A study checked and resolved: what ``dse validate`` approves and ``dse run`` runs.

    :func:`plan_run` fills the first five fields; :func:`check_new_run` and
    :func:`check_resume` the rest: the results folder (``output_dir``, None until then),
    the warnings a run starts with (each one line), and what the preview found (None when
    the evaluator allows none, or on resume)."""

    study: Study
    space: Space
    evaluator: Evaluator
    search: SearchPlan
    execution: ExecutionPlan
    output_dir: Path | None = None
    overwrite: bool = False
    warnings: tuple[str, ...] = ()
    preview: Preview | None = None


def plan_run(
    study: Study,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard: bool | None = None,
) -> RunPlan:
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
        execution = plan_execution(
            study.execution,
            study_path=study.source_path or None,
            workers=workers,
            scheduler=scheduler,
            dashboard=dashboard,
        )
    except DseError as exc:
        raise exc.with_file(study.source_path) if study.source_path else exc from None
    return RunPlan(study, space, evaluator, search, execution)


def check_sections(study: Study) -> None:
    """A parameter is given in one place (space, fixed or workload) and an objective names
    each metric once."""
    for name in study.space:
        for section, params in (("fixed", study.fixed), ("workload", study.workload)):
            if name in params:
                raise StudyError(
                    f"'{name}' is both searched (space.{name}) and set ({section}.{name}); "
                    "give it in one place",
                    field=f"space.{name}",
                )
    set_by: dict[str, str] = {}  # input -> the bundle parameter that sets it
    for name, spec in study.bundles.items():
        for key in spec.keys:
            elsewhere = [
                f"{section}.{key}"
                for section, params in (
                    ("space", study.space),
                    ("fixed", study.fixed),
                    ("workload", study.workload),
                )
                if key in params
            ]
            if key in set_by:
                elsewhere.insert(0, f"the bundles of space.{set_by[key]}")
            if elsewhere:
                file, field = spec.where(name, spec.names[0], key)
                raise StudyError(
                    f"'{key}' is set both by the bundles of space.{name} and by {elsewhere[0]}; "
                    "give it in one place (a bundle's inputs are set by it alone)",
                    file=file,
                    field=field,
                )
            set_by[key] = name
    for name in study.fixed:
        if name in study.workload:
            raise StudyError(
                f"'{name}' is set twice (workload.{name} and fixed.{name}); give it in one place",
                field=f"fixed.{name}",
            )
    first: dict[str, int] = {}
    for i, obj in enumerate(study.objectives):
        if obj.metric in first:
            raise StudyError(
                f"objectives[{first[obj.metric]}] already names this metric; each metric is one "
                "objective",
                field=f"objectives[{i}].metric",
                value=obj.metric,
            )
        first[obj.metric] = i


def _section_of(study: Study, name: str) -> str:
    return next(s for s in ("space", "fixed", "workload") if name in getattr(study, s))


def check_parameters(study: Study, evaluator: Evaluator) -> None:
    """Every parameter the study names is an input of the evaluator, and of each group of
    alternative inputs (:attr:`~dse.evaluators.Evaluator.exclusive_inputs`) it sets one."""
    inputs = evaluator.inputs
    bundles = study.bundles
    for name, spec in bundles.items():
        check_bundle_name(name, evaluator)
        for bundle, values in spec.bundles.items():
            for key in values:
                if key not in inputs:
                    file, field = spec.where(name, bundle, key)
                    raise StudyError(
                        f"unknown input '{key}' in bundle '{bundle}' of space.{name} for "
                        f"evaluator '{evaluator.name}'{did_you_mean(key, inputs)}",
                        file=file,
                        field=field,
                        allowed=", ".join(sorted(inputs)),
                    )
    for section, params in (
        ("space", {n: s for n, s in study.space.items() if n not in bundles}),
        ("fixed", study.fixed),
        ("workload", study.workload),
    ):
        for name in params:
            if name not in inputs:
                raise StudyError(
                    f"unknown parameter '{name}' for evaluator '{evaluator.name}'"
                    f"{did_you_mean(name, inputs)}",
                    field=f"{section}.{name}",
                    allowed=", ".join(sorted(inputs)),
                )
    in_bundles = {key: name for name, spec in bundles.items() for key in spec.keys}
    given = set(study.space) | set(study.fixed) | set(study.workload) | set(in_bundles)
    for group in evaluator.exclusive_inputs:
        both = [name for name in group if name in given]
        if len(both) > 1:
            where = [
                f"the bundles of space.{in_bundles[n]} ({n})"
                if n in in_bundles
                else f"{_section_of(study, n)}.{n}"
                for n in both
            ]
            raise StudyError(
                f"{' and '.join(where)} are alternatives: evaluator '{evaluator.name}' uses only "
                "one of them; set one",
                field=where[-1],
                allowed=f"one of {', '.join(group)}",
            )


def check_bundle_name(name: str, evaluator: Evaluator) -> None:
    """A bundle parameter's name names a column of bundle names in the results, beside the
    inputs and metrics: it must be a name the results can hold and none of theirs."""
    field = f"space.{name}"
    why = name_problem(name)
    if why:
        raise StudyError(why, field=field, value=name)
    if name in evaluator.inputs:
        raise StudyError(
            f"'{name}' is an input of evaluator '{evaluator.name}': a bundle parameter's values "
            "are bundle names, not that input's values; name the parameter otherwise "
            f"(e.g. '{name}_choice')",
            field=field,
            allowed="a name that is no input, metric or column dse writes",
        )
    if name in evaluator.metrics or name in RESERVED_NAMES:
        raise StudyError(
            f"'{name}' names a {'metric' if name in evaluator.metrics else 'column dse writes'}"
            " in the results; name the bundle parameter otherwise",
            field=field,
            allowed="a name that is no input, metric or column dse writes",
        )


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
            return s.model_copy(
                update={"range": tuple(one(name, v) for v in s.range), "step": step}
            )
        if isinstance(s, LogSpec):
            base = None if s.base is None else one(name, s.base)
            return s.model_copy(update={"log": tuple(one(name, v) for v in s.log), "base": base})
        if isinstance(s, BundlesSpec):  # each bundle's values, as their inputs spell them
            bundles = {
                b: {k: one(k, v) if k in inputs else v for k, v in values.items()}
                for b, values in s.bundles.items()
            }
            return s.model_copy(update={"bundles": bundles})
        return one(name, s)

    return study.model_copy(
        update={
            "space": {n: spec(n, s) for n, s in study.space.items()},
            "fixed": {n: one(n, v) for n, v in study.fixed.items()},
            "workload": {n: one(n, v) for n, v in study.workload.items()},
        }
    )


def check_values(study: Study, evaluator: Evaluator) -> None:
    """Every fixed and workload value is allowed by its input."""
    inputs = evaluator.inputs
    for section, params in (("fixed", study.fixed), ("workload", study.workload)):
        for name, value in params.items():
            inputs[name].check(value, field=f"{section}.{name}")
    for name, spec in study.bundles.items():
        for bundle, values in spec.bundles.items():
            for key, value in values.items():
                file, field = spec.where(name, bundle, key)
                try:
                    inputs[key].check(value, field=field)
                except StudyError as exc:
                    raise exc.with_file(file) if file else exc from None


def check_distinct(study: Study) -> None:
    """No value is listed twice for one parameter (after the canonical spelling: ``h100_sxm``
    and ``H100 SXM`` are one accelerator); true and 1 are not the same value here."""
    for name, s in study.space.items():
        if isinstance(s, list):
            values = s
        elif isinstance(s, ChoicesSpec):
            values = s.choices
        else:
            values = []
        seen: dict = {}
        for i, v in enumerate(values):
            key = (type(v) is bool, v)
            if key in seen:
                raise StudyError(
                    f"items {seen[key]} and {i} are both {v!r} (as the evaluator spells its values)",
                    field=f"space.{name}",
                    allowed="each value once",
                )
            seen[key] = i


def check_space_values(space: Space, evaluator: Evaluator) -> None:
    """Every value (or interval end) of every searched parameter is allowed by its input,
    and an integer input is not searched over a continuous range."""
    inputs = evaluator.inputs
    for param in space.parameters:
        if param.name in space.bundles:  # bundle names (their inputs: check_values)
            continue
        inp = inputs[param.name]
        values = param.values if param.values is not None else (param.low, param.high)
        for v in values:
            inp.check(v, field=f"space.{param.name}")
        if param.values is None and inp.kind == "int":
            raise StudyError(
                "a continuous range of an integer input: every sample would be a fraction",
                field=f"space.{param.name}",
                value={"range": [param.low, param.high]},
                allowed="whole-number ends (a grid of step 1), a 'step', a 'log' grid or a list",
            )


def check_metrics(study: Study, evaluator: Evaluator) -> None:
    """Objectives, constraints and ``display_units`` name metrics the evaluator reports; a
    constraint's unit and a display unit are of the metric's kind (:mod:`dse.units`)."""
    metrics = evaluator.metrics
    allowed = ", ".join(sorted(metrics))
    for i, obj in enumerate(study.objectives):
        if obj.metric not in metrics:
            raise StudyError(
                _unknown_metric(obj.metric, evaluator, f"'{obj.metric}'"),
                field=f"objectives[{i}].metric",
                allowed=_allowed(obj.metric, evaluator, allowed),
            )
    for i, con in enumerate(study.constraints):
        if con.metric not in metrics:
            raise StudyError(
                _unknown_metric(
                    con.metric, evaluator, f"'{con.metric}' in constraint '{con}'", con
                ),
                field=f"constraints[{i}]",
                allowed=_allowed(con.metric, evaluator, allowed),
            )
        stored = metrics[con.metric].unit
        if con.unit is not None and UNITS[con.unit][0] != canonical(stored):
            raise StudyError(
                f"constraint '{con}': {con.unit} is not a unit of {con.metric}, which "
                f"{_in(stored)}",
                field=f"constraints[{i}]",
                allowed=_units_of(stored),
            )
    for metric, unit in study.display_units.items():
        field = f"display_units.{metric}"
        if metric not in metrics:
            raise StudyError(
                _unknown_metric(metric, evaluator, f"'{metric}'"),
                field=field,
                allowed=_allowed(metric, evaluator, allowed),
            )
        stored = metrics[metric].unit
        if factor(stored, unit) is None:
            raise StudyError(
                f"{metric} {_in(stored)}: it cannot be shown in {unit}",
                field=field,
                value=unit,
                allowed=_units_of(stored),
            )


def _allowed(name: str, evaluator: Evaluator, allowed: str) -> str | None:
    """Every metric, for a name that is none; nothing for a removed one (its message names
    the replacement)."""
    return None if name in evaluator.removed_metrics else allowed


def _in(stored: str) -> str:
    return "has no unit" if stored in ("", "1") else f"is in {stored}"


def _units_of(stored: str) -> str:
    kinds = kinds_of(stored)
    return ", ".join(kinds) if kinds else f"no other unit than the metric's own ({stored or '1'})"


def _unknown_metric(
    name: str, evaluator: Evaluator, what: str, con: Constraint | None = None
) -> str:
    """The message for a metric the evaluator does not report: a metric an earlier version
    reported names its replacement and how to keep the removed one's unit; one of its
    parameters says so (a constraint on it: narrow the space), not a look-alike metric."""
    removed = evaluator.removed_metrics.get(name)
    if removed is None and name in evaluator.inputs:  # a knob, not a result: no look-alike metric
        where = f": narrow space.{name} (or set fixed.{name}) instead" if con is not None else ""
        return (
            f"{what} is a parameter of evaluator '{evaluator.name}', not a metric it reports{where}"
        )
    if removed is None:
        return f"unknown metric {what}{did_you_mean(name, evaluator.metrics)}"
    metric, unit = removed
    if con is not None:
        how = f"write '{metric} {con.op} {con.bound:g} {unit}'"
    else:
        how = f"use {metric} (shown in {unit} with `display_units: {{{metric}: {unit}}}`)"
    return (
        f"metric {what} was removed in evaluator '{evaluator.name}' {evaluator.version} "
        f"(each quantity is stored once, in its SI unit): {how}"
    )


# -- what a run needs of this machine and this moment ---------------------------------------------
def check_new_run(
    plan: RunPlan, output: str | Path | None = None, *, overwrite: bool = False, here: bool = True
) -> RunPlan:
    """``plan`` checked for a new run into ``output`` (default: the study's folder): the
    folder, the driver's own files, the cluster's job and submit command, the scheduler,
    and the evaluator's preview (:mod:`dse.preview`: a cheap evaluator evaluates the space,
    or a sample of it, in this process). Raises :class:`~dse.errors.DseError` on what a run
    would fail on; returns the plan with its folder, warnings and preview.

    ``here``: the run starts in this process now (``dse run``, ``dse.run``): a batch
    system's submit command missing here is refused. ``dse validate`` checks a study that
    is often run elsewhere (a login node) and only warns about it."""
    file = plan.study.source_path or None
    output_dir = check_output(plan.study, output, overwrite=overwrite)
    try:  # what a new run needs of its driver (an optuna study name its database already holds)
        plan.search.check_fresh()
    except DseError as exc:
        raise _named(exc, file) from None
    warnings = [*_execution_warnings(plan, here), *_grid_warnings(plan)]
    seen = preview(plan.evaluator, plan.space, plan.study)
    warnings += _preview_verdict(seen, file)
    return replace(
        plan, output_dir=output_dir, overwrite=overwrite, warnings=tuple(warnings), preview=seen
    )


def check_resume(plan: RunPlan, results_dir: str | Path) -> RunPlan:
    """``plan`` (of a results folder's stored study) checked for resuming it: the cluster's
    job and submit command and the scheduler, as for a new run. The folder, the driver's
    files and the preview were checked when the run began (the runner checks the
    evaluator's version and input files against the folder)."""
    return replace(
        plan, output_dir=Path(results_dir), warnings=tuple(_execution_warnings(plan, True))
    )


def check_output(
    study: Study, output: str | Path | None = None, *, overwrite: bool = False
) -> Path:
    """The results folder a run of ``study`` writes (``output``, else the study's), checked
    as a run would before it writes anything; a problem with the study's own folder names
    the study file and the field that sets it."""
    path = Path(output) if output is not None else study.output_dir
    try:
        ResultStore.check_creatable(path, overwrite=overwrite)
    except StoreError as exc:
        if output is not None:
            raise
        raise StudyError(
            exc.message,
            file=study.source_path or None,
            field="output.path" if study.output.path else "name (results/<name>)",
        ) from None
    return path


def _named(exc: DseError, file: str | None) -> DseError:
    return exc.with_file(file) if file else exc


def _execution_warnings(plan: RunPlan, here: bool) -> list[str]:
    """A cluster profile's job (the class may refuse its options) and submit command; a
    scheduler that does not answer now (a run waits ``grace_s`` for it)."""
    said = []
    execution = plan.execution
    if execution.kind == "cluster":  # the job the class would write, as a run meets it first
        from dse.execution.deploy import check_job, check_submit

        check_job(execution)
        try:
            check_submit(execution)
        except DseError as exc:
            if here:
                raise
            said.append(f"{exc.message} ({exc.allowed or ''}): dse run refuses to start here")
    if execution.scheduler:
        try:
            silent = not_answering(execution.scheduler)
        except DseError as exc:
            raise _named(exc, plan.study.source_path or None) from None
        if silent:
            said.append(
                f"{silent}; a run waits {execution.grace_s:g} s (execution.grace_s) for it, then stops"
            )
    return said


def not_answering(address: str) -> str:
    """Why nothing answers at a scheduler ``address`` now ("" when a TCP connection opens
    within 2 s; whether it is a dask scheduler is for the run to find); a host name that
    does not exist is refused, as a run stops at once on it."""
    from dse.execution.dask_cluster import unknown_host

    unknown = unknown_host(address)
    if unknown:
        raise DseError(
            f"cannot reach {address}: {unknown}",
            field="execution.scheduler or --scheduler",
            value=address,
        )
    try:
        where = urlsplit(address if "://" in address else f"tcp://{address}")
        with socket.create_connection((where.hostname, where.port), timeout=2.0):
            return ""
    except (OSError, ValueError) as exc:
        return f"nothing answers at {address} now ({getattr(exc, 'strerror', None) or exc})"


def _grid_warnings(plan: RunPlan) -> list[str]:
    """A grid whose steps miss the end the study wrote (the end is left out)."""
    file = plan.study.source_path
    said = []
    for parameter in plan.space.parameters:
        short = short_of_its_end(plan.study.space[parameter.name], parameter)
        if short:
            said.append(f"{file + ': ' if file else ''}space.{parameter.name}: {short}")
    return said


def _preview_verdict(seen: Preview | None, file: str | None) -> list[str]:
    """Refuse what every call of a run would fail on (a malformed table) and a whole space
    with no feasible candidate (a run would end with no front); warn about a failing call
    and a sample with no feasible candidate."""
    if seen is None:
        return []
    n = counted(seen.evaluated, "candidate")
    if seen.contract:
        raise DseError(
            f"the evaluator's preview call on {n} broke the evaluator contract, so a run would "
            f"fail every candidate: {seen.failed}",
            file=file,
        )
    reasons = "; ".join(f"{r} ({c})" for r, c in seen.ruled_out[:5])
    if seen.whole_space and seen.feasible == 0 and not seen.failed:
        raise DseError(
            f"none of the space's {n} is feasible and within the constraints, so a run would "
            f"find no front: {reasons}",
            file=file,
        )
    if seen.failed:
        if seen.breach:
            then = (
                "a run fails every call whose table breaks the evaluator contract, all its candidates "
                "(not retried one by one)"
            )
        else:
            then = "a run splits a failing call until each failing candidate is alone, and reports them"
        return [f"the evaluator failed on the preview's {n} ({seen.failed}): {then}"]
    if seen.feasible == 0:
        return [
            f"none of {n} drawn from the space is feasible and meets the constraints ({reasons}): "
            "the search may find none"
        ]
    return []
