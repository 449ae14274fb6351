"""Where a study's candidates are evaluated, checked before anything starts.

``execution.workers: 0`` evaluates in this process; otherwise an embedded dask
``LocalCluster`` (one single-threaded worker process per core by default), a running
scheduler (``execution.scheduler``, ``--scheduler``, or a profile's ``scheduler`` or
``scheduler_file``), or any dask cluster class a profile under ``workers/`` names by import
path (``dask_jobqueue.SLURMCluster``, ``dask_kubernetes.operator.KubeCluster``,
``dask.distributed.SSHCluster``) with its keyword arguments and ``scale`` or ``adapt``.
:func:`plan_execution` resolves and checks all of it (the profile file, the cluster class
and its options, a missing extra, the scheduler address, the worker count) for
``dse validate`` and ``dse run`` alike.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from dse.errors import StudyError, did_you_mean
from dse.study import ExecutionSpec, _Strict, raise_validation_error, yaml_problem
from dse.yamlfile import SMALL_FILE_BYTES, load_yaml, read_bounded

_ADDRESS = re.compile(
    r"^(?:(?:tcp|tls|ucx|ws|wss)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$"
)

#: defaults of the grace periods (seconds), where neither study nor profile sets them
GRACE_S = 60.0
START_TIMEOUT_S = 300.0


class Scale(_Strict):
    """A fixed size: ``workers`` (any cluster) or ``jobs`` (dask-jobqueue: batch jobs)."""

    workers: int | None = Field(default=None, ge=1)
    jobs: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one(self) -> Scale:
        if (self.workers is None) == (self.jobs is None):
            raise ValueError(
                "scale takes exactly one of 'workers' or 'jobs' (or a number of workers)"
            )
        return self


class Adapt(_Strict):
    """Adaptive scaling between bounds (dask's ``Cluster.adapt``)."""

    minimum: int | None = Field(default=None, ge=0, description="workers at least")
    maximum: int | None = Field(default=None, ge=1, description="workers at most")
    minimum_jobs: int | None = Field(default=None, ge=0, description="dask-jobqueue: jobs at least")
    maximum_jobs: int | None = Field(default=None, ge=1, description="dask-jobqueue: jobs at most")
    target_duration: str | None = Field(
        default=None, description="time the queued work should take, e.g. '30s'"
    )
    wait_count: int | None = Field(default=None, ge=1)
    interval: str | None = Field(default=None, description="how often to re-plan, e.g. '1s'")

    @field_validator("target_duration", "interval")
    @classmethod
    def _duration(cls, v: str | None) -> str | None:
        if v is not None:
            from dask.utils import parse_timedelta

            try:
                if not parse_timedelta(v) > 0:
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                raise ValueError("expected a duration such as '30s', '5 minutes' or '1h'") from None
        return v

    @model_validator(mode="after")
    def _bounds(self) -> Adapt:
        for lo, hi in (("minimum", "maximum"), ("minimum_jobs", "maximum_jobs")):
            a, b = getattr(self, lo), getattr(self, hi)
            if a is not None and b is not None and a > b:
                raise ValueError(f"adapt.{lo} ({a}) is above adapt.{hi} ({b})")
        workers = [k for k in ("minimum", "maximum") if getattr(self, k) is not None]
        jobs = [k for k in ("minimum_jobs", "maximum_jobs") if getattr(self, k) is not None]
        if workers and jobs:
            raise ValueError(
                f"adapt bounds workers ({', '.join(workers)}) or batch jobs ({', '.join(jobs)}), "
                "not both"
            )
        return self


#: where a local cluster listens unless its profile says otherwise
LOOPBACK = "127.0.0.1"


class ClusterProfile(_Strict):
    """A cluster profile ``workers/<name>.yaml``: one of a local cluster (``workers``,
    ``threads_per_worker``, ``memory_limit``), a running scheduler (``scheduler`` or
    ``scheduler_file``), or a dask cluster class (``cluster``, ``options``, ``scale``/``adapt``)."""

    description: str = ""
    cluster: str | None = Field(
        default=None,
        description="import path of a dask cluster class, e.g. dask_jobqueue.SLURMCluster",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="the cluster class's keyword arguments"
    )
    scale: Scale | None = None
    adapt: Adapt | None = None
    scheduler: str | None = Field(
        default=None, min_length=1, description="address of a running dask scheduler"
    )
    scheduler_file: str | None = Field(
        default=None,
        min_length=1,
        description="a running scheduler's file (dask scheduler --scheduler-file)",
    )
    workers: int | None = Field(default=None, ge=0, description="local worker processes")
    threads_per_worker: int = Field(default=1, ge=1)
    memory_limit: str | int | float = "auto"
    grace_s: float | None = Field(default=None, gt=0)
    host: str = Field(
        default=LOOPBACK,
        min_length=1,
        description="the address a local cluster's scheduler, workers and dashboard listen on "
        "(default: the loopback, reachable from this machine only)",
    )

    @field_validator("memory_limit", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> Any:
        """As dask reads it: ``auto``, 0 (no limit), a fraction of the machine's memory (at
        most 1), a byte count, or a size such as ``4GB``; finite and never negative."""
        if v == "auto":
            return v
        from dask.utils import parse_bytes

        try:
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                raise TypeError
            size = (
                float(v)
                if not isinstance(v, str) or re.fullmatch(r"\s*[0-9.eE+-]+\s*", v)
                else parse_bytes(v)
            )
        except Exception:  # noqa: BLE001 - anything dask could not read either
            size = None
        if size is None or not (math.isfinite(size) and size >= 0):
            raise ValueError(
                "expected 'auto', 0 (no limit), a fraction of the memory, a number of bytes or a "
                "size such as '4GB'"
            )
        if 1 < size < 2**20:  # dask reads 2.5 as 2 bytes: a worker restarted again and again
            raise ValueError(
                "expected a fraction of the memory (at most 1) or at least 1 MiB (a size such as "
                "'4GB'; a bare number is bytes)"
            )
        return v

    start_timeout_s: float | None = Field(default=None, gt=0)
    deployer: str | None = Field(
        default=None,
        min_length=1,
        description="what starts the cluster: a name registered in the entry-point group "
        "dse.deployers, or package.module:Class (default: the one that "
        "claims the cluster class, else 'dask')",
    )

    @model_validator(mode="before")
    @classmethod
    def _scale_as_number(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and isinstance(data.get("scale"), int)
            and not isinstance(data["scale"], bool)
        ):
            return {**data, "scale": {"workers": data["scale"]}}
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> ClusterProfile:
        kinds = [
            k
            for k in ("cluster", "deployer", "scheduler", "scheduler_file")
            if getattr(self, k) is not None
        ]
        if kinds[:2] == ["cluster", "deployer"]:  # a deployer of that class
            kinds = kinds[1:]
        if len(kinds) > 1:
            raise ValueError(
                f"a profile names one of 'cluster', 'scheduler' or 'scheduler_file', not {kinds}"
            )
        local = sorted(
            {"workers", "threads_per_worker", "memory_limit", "host"} & self.model_fields_set
        )
        if kinds and local:
            raise ValueError(
                f"{local} set the embedded local cluster; they do not go with '{kinds[0]}'"
            )
        for key in ("options", "scale", "adapt"):
            if key in self.model_fields_set and self.cluster is None and self.deployer is None:
                raise ValueError(
                    f"'{key}' belongs to a 'cluster' class, and this profile names none"
                )
        if self.scale is not None and self.adapt is not None:
            raise ValueError("a profile takes 'scale' (a fixed size) or 'adapt' (bounds), not both")
        return self


#: a local run expected to take less than this (its evaluations, at the cost the evaluator's
#: preview measured) starts without the dask dashboard unless the study or the command line
#: asks for it: importing and serving bokeh was 0.6 s of a 3.3 s quickstart, for a page
#: nobody opens before the run is over
DASHBOARD_MIN_S = 10.0


def dashboard_for(plan: ExecutionPlan, expected_s: float | None) -> tuple[ExecutionPlan, str]:
    """``plan`` with the dashboard off where it was left at its default, the cluster is local
    and its run is expected to take less than :data:`DASHBOARD_MIN_S` (``expected_s``; None:
    not known, the dashboard stays), and the line that says so ("" where nothing changed)."""
    if (
        expected_s is None
        or expected_s >= DASHBOARD_MIN_S
        or not (plan.dashboard and plan.dashboard_auto and plan.kind == "local")
    ):
        return plan, ""
    return replace(plan, dashboard=False), (
        f"dask dashboard: off, for evaluations that should take under {DASHBOARD_MIN_S:g} s "
        "(execution.dashboard: true or --dashboard starts it)"
    )


@dataclass(frozen=True)
class ExecutionPlan:
    """A checked execution: in this process, a local dask cluster, a running scheduler, or a
    cluster class started for the run."""

    workers: int  # local worker processes (0: in this process); unused otherwise
    scheduler: str | None = None
    chunk_size: int | None = None  # None: sized from the evaluator's measured cost
    threads_per_worker: int = 1
    memory_limit: str | int | float = "auto"
    profile: str | None = None  # the profile file used, if any
    scheduler_file: str | None = None
    cluster: str | None = None  # import path of a dask cluster class
    deployer: str | None = (
        None  # what starts it: a registered name or module:Class (dse.execution.deployers)
    )
    cluster_options: dict[str, Any] = field(default_factory=dict)
    scale: dict[str, int] | None = None  # keyword arguments of cluster.scale
    adapt: dict[str, Any] | None = None  # keyword arguments of cluster.adapt
    dashboard: bool = True
    #: the dashboard left at its default (by the study and the command line): a short local
    #: run starts without it (:func:`dashboard_for`)
    dashboard_auto: bool = False
    start_method: str = (
        "auto"  # local workers: auto, fork, spawn or forkserver (dask_cluster.start_method)
    )
    grace_s: float = GRACE_S
    start_timeout_s: float = START_TIMEOUT_S
    tls: bool = True  # a local cluster: TLS with temporary credentials (execution.tls)
    host: str = "127.0.0.1"  # what a local cluster's listeners bind to (a profile's host)

    @property
    def kind(self) -> str:
        if self.cluster or self.deployer:
            return "cluster"
        if self.scheduler or self.scheduler_file:
            return "scheduler"
        return "in-process" if self.workers == 0 else "local"

    def describe(self) -> str:
        if self.cluster or self.deployer:
            size = ""
            if self.scale:
                ((unit, n),) = self.scale.items()  # dask's scale(n=...) or scale(jobs=...)
                unit = {"n": "workers"}.get(unit, unit)
                size = f", {n} {unit if n != 1 else unit.removesuffix('s')}"
            elif self.adapt:
                size = ", adaptive " + " ".join(f"{k} {v}" for k, v in self.adapt.items())
            return f"{self.cluster or self.deployer} (profile {self.profile}{size})"
        if self.scheduler:
            return f"dask scheduler {self.scheduler}"
        if self.scheduler_file:
            return f"dask scheduler of {self.scheduler_file}"
        if self.workers == 0:
            return "in this process"
        return f"local dask cluster of {self.workers} worker{'s' if self.workers != 1 else ''}"


def profile_dirs(study_path: str | Path | None) -> list[Path]:
    """Where ``execution.profile`` names are looked up: ./workers, then the ``workers/``
    folder beside the study's folder (a project's ``studies/`` and ``workers/``), then the
    study's own folder."""
    dirs = [Path("workers")]
    if study_path:
        here = Path(study_path).resolve().parent
        dirs += [here.parent / "workers", here / "workers", here]
    return dirs


def names_a_path(name: str) -> bool:
    """A profile named by its file (``workers/local.yaml``), not by name (``local``)."""
    return name.endswith((".yaml", ".yml")) or "/" in name


def find_profile(name: str, study_path: str | Path | None = None) -> Path:
    """The file a profile name (``local``) or path (``workers/local.yaml``) refers to."""
    tried = []
    if names_a_path(name):
        base = Path(study_path).resolve().parent if study_path else Path.cwd()
        tried = [Path(name), base / name]
    else:
        tried = [d / f"{name}.yaml" for d in profile_dirs(study_path)]
    tried = list({p.resolve(): p for p in tried}.values())  # ./workers may be the study's workers/
    for p in tried:
        if p.is_file():
            return p
    folder = next((p for p in (Path(name), *tried) if p.is_dir()), None)
    what = f"is a folder ({folder}), not a profile file" if folder else "not found"
    # the profiles there are (a typo's 'slrum' meant one of them): the workers/ folders only,
    # as the study's own folder holds studies
    known = sorted(
        {
            f.stem
            for p in tried
            if p.parent.name == "workers" and p.parent.is_dir()
            for f in p.parent.glob("*.yaml")
            if f.is_file()
        }
    )
    if not folder and not names_a_path(name):
        what += did_you_mean(name, known)
    raise StudyError(
        f"cluster profile '{name}' {what}",
        field="execution.profile",
        allowed="a name of a file under workers/ ("
        + ", ".join(str(p) for p in tried)
        + (f"; there: {', '.join(known)}" if known else "")
        + ") or a path to one",
    )


def load_profile(path: Path) -> ClusterProfile:
    """Read and check a profile file (its schema; :func:`plan_execution` checks the rest)."""
    try:
        data = load_yaml(read_bounded(path, limit_bytes=SMALL_FILE_BYTES), numbers=False) or {}
    except yaml.YAMLError as exc:
        raise StudyError(
            f"cluster profile {path} is not valid YAML{yaml_problem(exc)}",
            field="execution.profile",
        ) from None
    except (OSError, ValueError) as exc:  # (not UTF-8, or larger than a profile may be)
        raise StudyError(
            f"cannot read cluster profile {path}: {getattr(exc, 'strerror', None) or exc}",
            field="execution.profile",
        ) from None
    if not isinstance(data, dict):
        raise StudyError("cluster profile must be a mapping of settings", file=str(path))
    try:
        return ClusterProfile.model_validate(data)
    except ValidationError as exc:
        raise_validation_error(exc, file=str(path), model=ClusterProfile, root="cluster profile")
        raise  # unreachable


def check_address(address: str, field: str) -> str:
    allowed = "tcp://HOST:PORT (or tls://, ucx://, ws://; the port is required, 1 to 65535)"
    if not _ADDRESS.match(address):
        raise StudyError(
            "not a dask scheduler address", field=field, value=address, allowed=allowed
        )
    if not 1 <= int(address.rsplit(":", 1)[1]) <= 65535:
        raise StudyError("no such port", field=field, value=address, allowed=allowed)
    return address


def local_worker_limit() -> int:
    """At most one single-threaded worker process per core."""
    return os.cpu_count() or 1


def plan_execution(
    spec: ExecutionSpec,
    *,
    study_path: str | Path | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard: bool | None = None,
) -> ExecutionPlan:
    """Resolve the study's ``execution`` section with command-line overrides (``workers``,
    ``scheduler``, ``dashboard``); raises :class:`StudyError` for anything ``dse run`` could
    not use."""
    profile, profile_path = None, None
    if spec.profile:
        profile_path = find_profile(spec.profile, study_path)
        profile = load_profile(profile_path)
    timing = {
        "grace_s": spec.grace_s or (profile and profile.grace_s) or GRACE_S,
        "start_timeout_s": spec.start_timeout_s
        or (profile and profile.start_timeout_s)
        or START_TIMEOUT_S,
        "dashboard": spec.dashboard if dashboard is None else dashboard,
        "dashboard_auto": dashboard is None and "dashboard" not in spec.model_fields_set,
        "start_method": spec.start_method,
        "chunk_size": spec.chunk_size,
        "profile": str(profile_path) if profile_path else None,
        "tls": spec.tls,
    }
    address = scheduler or (
        spec.scheduler if workers is None else None
    )  # --workers: on this machine
    if address:
        check_address(address, "--scheduler" if scheduler else "execution.scheduler")
        if not scheduler and workers is None and spec.workers is not None:
            raise StudyError(
                f"a count of local worker processes, but execution.scheduler ({spec.scheduler}) "
                "names a running cluster, whose workers are its own",
                field="execution.workers",
                value=spec.workers,
                allowed="one of execution.workers or execution.scheduler (or --workers N on the "
                "command line to run on this machine instead)",
            )
        return ExecutionPlan(workers=0, scheduler=address, **timing)
    if workers is None and profile is not None:  # --workers wins over a profile's cluster
        remote = profile.cluster or profile.deployer or profile.scheduler or profile.scheduler_file
        if remote and spec.workers is not None:  # the study's own value would be silently ignored
            raise StudyError(
                f"a count of local worker processes, but profile '{spec.profile}' ({profile_path}) "
                f"runs no local cluster: it names {remote}",
                field="execution.workers",
                value=spec.workers,
                allowed="leave execution.workers out (that cluster has its own workers), or --workers N on "
                "the command line to run on this machine instead",
            )
        try:
            plan = _profile_plan(profile, profile_path, timing)
        except StudyError as exc:
            raise exc.with_file(str(profile_path)) from None
        if plan is not None:
            return plan
    # the command line, then the study's own value (as for every other setting), then the profile's
    from_profile = (
        workers is None
        and spec.workers is None
        and profile is not None
        and profile.workers is not None
    )
    if workers is not None:  # --workers
        n = workers
    elif spec.workers is not None:  # execution.workers
        n = spec.workers
    elif from_profile:  # the local cluster profile's workers
        n = profile.workers
    else:
        n = None
    limit = local_worker_limit()
    n = limit if n is None else n
    if n > limit:
        if workers is not None:
            where = "--workers"
        elif from_profile:
            where = "workers"
        else:
            where = "execution.workers"
        error = StudyError(
            f"{n} local worker processes on a machine with {limit} cores",
            field=where,
            value=n,
            allowed=f"0 (in this process) to {limit}, or a dask scheduler for more",
        )
        raise (error.with_file(str(profile_path)) if from_profile else error) from None
    return ExecutionPlan(
        workers=n,
        threads_per_worker=profile.threads_per_worker if profile else 1,
        memory_limit=profile.memory_limit if profile else "auto",
        host=profile.host if profile else LOOPBACK,
        **timing,
    )


def _profile_plan(profile: ClusterProfile, path: Path, timing: dict) -> ExecutionPlan | None:
    """The plan of a profile that names a scheduler or a cluster class (None: a local one)."""
    if profile.scheduler:
        return ExecutionPlan(
            workers=0, scheduler=check_address(profile.scheduler, "scheduler"), **timing
        )
    if profile.scheduler_file:
        file = Path(profile.scheduler_file).expanduser()
        file = file if file.is_absolute() else path.resolve().parent / file
        if file.exists() and not file.is_file():  # a run would wait for it until its time-out
            raise StudyError(
                "the scheduler file is not a regular file",
                file=str(path),
                field="scheduler_file",
                value=str(file),
                allowed="the JSON file a dask scheduler writes (dask scheduler --scheduler-file), "
                "or a path where it will",
            )
        return ExecutionPlan(workers=0, scheduler_file=str(file), **timing)
    if profile.cluster or profile.deployer:
        from dse.execution.deploy import check_profile

        deployer, cluster, scale, adapt = check_profile(profile, str(path))
        return ExecutionPlan(
            workers=0,
            cluster=cluster,
            deployer=deployer,
            cluster_options=dict(profile.options),
            scale=scale,
            adapt=adapt,
            **timing,
        )
    return None
