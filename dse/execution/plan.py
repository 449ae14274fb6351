"""Where a study's candidates are evaluated, checked before anything starts.

``execution.workers: 0`` evaluates in this process; otherwise an embedded dask
``LocalCluster`` of that many single-threaded worker processes, or a running scheduler
named by ``execution.scheduler``, ``--scheduler`` or a cluster profile under ``workers/``.
:func:`plan_execution` resolves and checks all of it (the profile file, the scheduler
address, the worker count) for ``dse validate`` and ``dse run`` alike.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dse.errors import StudyError
from dse.study import ExecutionSpec, raise_validation_error

_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ucx|ws|wss)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")


class ClusterProfile(BaseModel):
    """A cluster profile ``workers/<name>.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    scheduler: str | None = Field(default=None, description="address of a running dask scheduler")
    workers: int | None = Field(default=None, ge=0, description="local worker processes")
    threads_per_worker: int = Field(default=1, ge=1)
    memory_limit: str | int | float = "auto"


@dataclass(frozen=True)
class ExecutionPlan:
    """A checked execution: in this process, a local dask cluster, or a remote scheduler."""

    workers: int  # local worker processes (0: in this process); unused with a scheduler
    scheduler: str | None
    chunk_size: int | None  # None: sized from the evaluator's measured cost
    threads_per_worker: int = 1
    memory_limit: str | int | float = "auto"
    profile: str | None = None  # the profile file used, if any

    @property
    def kind(self) -> str:
        return "scheduler" if self.scheduler else ("in-process" if self.workers == 0 else "local")

    def describe(self) -> str:
        if self.scheduler:
            return f"dask scheduler {self.scheduler}"
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


def find_profile(name: str, study_path: str | Path | None = None) -> Path:
    """The file a profile name (``local``) or path (``workers/local.yaml``) refers to."""
    tried = []
    if name.endswith((".yaml", ".yml")) or "/" in name:
        base = Path(study_path).resolve().parent if study_path else Path.cwd()
        tried = [Path(name), base / name]
    else:
        tried = [d / f"{name}.yaml" for d in profile_dirs(study_path)]
    for p in tried:
        if p.is_file():
            return p
    raise StudyError(f"cluster profile '{name}' not found", field="execution.profile",
                     allowed="a name of a file under workers/ (" + ", ".join(str(p) for p in tried)
                             + ") or a path to one")


def load_profile(path: Path) -> ClusterProfile:
    """Read and check a profile file."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise StudyError(f"cluster profile is not valid YAML: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise StudyError("cluster profile must be a mapping of settings", file=str(path))
    try:
        return ClusterProfile.model_validate(data)
    except ValidationError as exc:
        raise_validation_error(exc, file=str(path), model=ClusterProfile, root="cluster profile")
        raise  # unreachable


def check_address(address: str, field: str) -> str:
    if not _ADDRESS.match(address):
        raise StudyError("not a dask scheduler address", field=field, value=address,
                         allowed="tcp://HOST:PORT (or tls://, ucx://, ws://; the port is required)")
    return address


def local_worker_limit() -> int:
    """At most one single-threaded worker process per core."""
    return os.cpu_count() or 1


def plan_execution(spec: ExecutionSpec, *, study_path: str | Path | None = None,
                   workers: int | None = None, scheduler: str | None = None) -> ExecutionPlan:
    """Resolve the study's ``execution`` section with command-line overrides (``workers``,
    ``scheduler``); raises :class:`StudyError` for anything ``dse run`` could not use."""
    profile = None
    profile_path = None
    if spec.profile:
        profile_path = find_profile(spec.profile, study_path)
        profile = load_profile(profile_path)
    field = "--scheduler" if scheduler else "execution.scheduler"
    address = scheduler or spec.scheduler or (profile.scheduler if profile else None)
    if address:
        if not scheduler and not spec.scheduler:
            field = f"scheduler in {profile_path}"
        check_address(address, field)
    n = workers if workers is not None else (
        profile.workers if profile is not None and profile.workers is not None else spec.workers)
    limit = local_worker_limit()
    if not address and n > limit:
        where = "--workers" if workers is not None else "execution.workers"
        raise StudyError(f"{n} local worker processes on a machine with {limit} cores", field=where,
                         value=n, allowed=f"0 (in this process) to {limit}, or a dask scheduler for more")
    return ExecutionPlan(
        workers=n, scheduler=address, chunk_size=spec.chunk_size,
        threads_per_worker=profile.threads_per_worker if profile else 1,
        memory_limit=profile.memory_limit if profile else "auto",
        profile=str(profile_path) if profile_path else None)
