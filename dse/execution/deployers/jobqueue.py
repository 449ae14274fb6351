"""``jobqueue``: batch jobs through dask-jobqueue (``SLURMCluster``, ``PBSCluster``, any
``JobQueueCluster``): the job options checked as the batch system would read them, the job
script shown without submitting it, the submit command looked for before a run starts."""

from __future__ import annotations

import inspect
import re
import shutil
from typing import Any

from pydantic import ConfigDict, field_validator

from dse.errors import StudyError
from dse.execution.deployers.base import AnyOptions, Deployer, keywords

#: dask-jobqueue's old option names and the ones that replaced them (dask-jobqueue 0.8)
RENAMED_JOB_OPTIONS = {
    "env_extra": "job_script_prologue",
    "extra": "worker_extra_args",
    "job_extra": "job_extra_directives",
    "header_skip": "job_directives_skip",
    "project": "account",
}
#: a batch walltime: [days-]hours:minutes[:seconds], minutes and seconds below 60
WALLTIME = re.compile(r"(\d+-)?\d{1,4}:[0-5]\d(:[0-5]\d)?")

_LISTS = {
    "job_script_prologue": "a list of shell lines, such as ['source /opt/dse/.venv/bin/activate']",
    "job_extra_directives": "a list of directives, such as ['--exclusive']",
    "job_directives_skip": "a list of directive texts to leave out, such as ['--mem']",
    "worker_extra_args": "a list of arguments, such as ['--lifetime', '55m']",
}
_TEXTS = ("python", "queue", "account", "interface", "shebang", "local_directory", "log_directory")


class JobOptions(AnyOptions):
    """The job options dask-jobqueue reads in common, checked as the batch system would take
    them (dask-jobqueue's configuration may supply any of them); the class's other keyword
    arguments are checked against its and its job class's signatures."""

    model_config = ConfigDict(extra="allow", frozen=True)
    cores: Any = None  # per job
    processes: Any = None  # worker processes per job, one thread each
    memory: Any = None  # per job, a size with its unit: '32GB'
    walltime: Any = None  # [days-]hours:minutes[:seconds]
    job_script_prologue: Any = None
    job_extra_directives: Any = None
    job_directives_skip: Any = None
    worker_extra_args: Any = None
    python: Any = None
    queue: Any = None
    account: Any = None
    interface: Any = None
    shebang: Any = None
    local_directory: Any = None
    log_directory: Any = None

    @field_validator("cores", "processes", mode="before")
    @classmethod
    def _count(cls, v: Any) -> Any:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError("expected a whole number of at least 1")
        return v

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> Any:
        """A bare number is bytes to dask-jobqueue: 32000 would ask SLURM for 32K."""
        from dask.utils import parse_bytes

        if v is None:
            return v
        try:
            ok = (
                isinstance(v, str) and 0 < parse_bytes(v) < float("inf") and not v.strip().isdigit()
            )
        except Exception:  # noqa: BLE001 - a list, a mapping, an overflow: not a size
            ok = False
        if not ok:
            raise ValueError("expected a size with its unit, such as '32GB'")
        return v

    @field_validator("walltime", mode="before")
    @classmethod
    def _walltime(cls, v: Any) -> Any:
        if v is not None and not (isinstance(v, str) and WALLTIME.fullmatch(v.strip())):
            raise ValueError(
                "expected a walltime such as '02:00:00' (hours:minutes:seconds, or days-hours:"
                "minutes:seconds; a bare number is minutes to SLURM and seconds to PBS)"
            )
        return v

    @field_validator(*_LISTS, mode="before")
    @classmethod
    def _list(cls, v: Any, info) -> Any:
        """A text would be taken one character per item."""
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ValueError(f"expected {_LISTS[info.field_name]}")
        return v

    @field_validator(*_TEXTS, mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        if v is not None and not isinstance(v, str):
            raise ValueError("expected text")
        return v


class JobQueueDeployer(Deployer):
    """A dask-jobqueue cluster: workers in batch jobs, sized in jobs or workers."""

    name = "jobqueue"
    description = "batch jobs through dask-jobqueue (SLURM, PBS, any JobQueueCluster)"
    Options = JobOptions
    batch_jobs = True

    @classmethod
    def claims(cls, path: str, obj: Any | None = None) -> bool:
        if obj is not None:
            return hasattr(obj, "job_cls")
        return path.startswith(("dask_jobqueue.", "dask_jobqueue:"))

    def accepted_options(self) -> set[str] | None:
        """The class's own keyword arguments and its job class's (it passes the rest on)."""
        obj = self.cluster_class()
        job_cls = getattr(obj, "job_cls", None)
        if job_cls is None:
            return keywords([obj.__init__])
        jobs = [c.__init__ for c in job_cls.__mro__ if "__init__" in vars(c) and c is not object]
        own = {
            p.name
            for p in inspect.signature(obj.__init__).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        } - {"self"}
        rest = keywords(jobs)
        return None if rest is None else own | rest - {"scheduler", "name"}

    def check(self, scale: dict | None, adapt: dict | None) -> None:
        for key in self.options:  # dask-jobqueue still takes them, with a long warning
            if key in RENAMED_JOB_OPTIONS:
                raise StudyError(
                    f"option '{key}' of {self.cluster} was renamed",
                    field=f"options.{key}",
                    allowed=RENAMED_JOB_OPTIONS[key],
                )
        if (
            self.cluster and scale is None and adapt is None and not self.options.get("n_workers")
        ):  # before its import
            raise StudyError(
                f"{self.cluster} submits no job until told how many: give 'scale' (e.g. "
                "{jobs: 4}), 'adapt' (e.g. {maximum_jobs: 8}) or options.n_workers"
            )
        super().check(scale, adapt)
        cores, processes = self.options.get("cores"), self.options.get("processes")
        if isinstance(cores, int) and isinstance(processes, int) and processes > cores:
            raise StudyError(
                f"{processes} worker processes per job on {cores} cores leave a worker without a "
                "thread",
                field="options.processes",
                value=processes,
                allowed=f"1 to {cores} (cores)",
            )

    def submit_problem(self) -> str | None:
        """Without its submit command (``sbatch``, ``qsub``) on PATH, dask-jobqueue logs a
        traceback for every job and no worker ever joins."""
        command = getattr(getattr(self.cluster_class(), "job_cls", None), "submit_command", None)
        program = command.split()[0] if isinstance(command, str) and command.strip() else None
        if program and shutil.which(program) is None:
            return f"{self.cluster} submits its jobs with '{program}', which is not on PATH here"
        return None

    def preview(self, dashboard: bool) -> tuple[str, str] | None:
        """The job script: the class starts its scheduler in this process and stops it again;
        no job is submitted."""
        options = self.cluster_options(dashboard)
        options.pop("n_workers", None)  # it would submit jobs: nothing is, to show the script
        options["scheduler_options"] = {
            "dashboard": False,
            "dashboard_address": "127.0.0.1:0",
            **(options.get("scheduler_options") or {}),
        }
        cluster = self.cluster_class()(**options)
        try:
            return (
                "job script (the scheduler's address is filled in at run time)",
                cluster.job_script(),
            )
        finally:
            cluster.close()
