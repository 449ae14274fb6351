"""The dask cluster a profile names: any cluster class by import path, started with its
keyword arguments and then ``scale``d or ``adapt``ed; and a preview of what it would submit
(the batch job script of a dask-jobqueue class, the ``DaskCluster`` resource of the
dask-kubernetes operator) without submitting anything.

The cluster libraries are optional extras of dse; a missing one is a one-line error naming
the extra, at ``dse validate`` time as at ``dse run`` time.
"""

from __future__ import annotations

import getpass
import importlib
import importlib.util
import inspect
import json
import os
import re
import signal
from typing import Any

from dse import signals
from dse.errors import StudyError

#: top-level module -> (the package that provides it, the dse extra that installs it)
EXTRAS = {
    "dask_jobqueue": ("dask-jobqueue", "slurm"),
    "dask_kubernetes": ("dask-kubernetes", "kubernetes"),
    "asyncssh": ("asyncssh", "ssh"),
    "bokeh": ("bokeh", "dashboard"),
}
#: modules a cluster callable imports only when called
NEEDS = {"distributed.deploy.ssh.SSHCluster": "asyncssh"}
#: cluster callables that learn their processes' addresses from those processes' INFO log
#: lines, which inherit this process's dask configuration (the CLI logs warnings only)
READS_INFO_LOGS = {"distributed.deploy.ssh.SSHCluster"}


def install_hint(module: str, path: str = "") -> str:
    """``pip install "dse[EXTRA]"`` for a missing module (``path``: the class that needs it)."""
    top = module.split(".")[0]
    package, extra = EXTRAS.get(top, (top, None))
    if top == "dask_jobqueue" and ".PBS" in path:
        extra = "pbs"
    return f'pip install "dse[{extra}]"' if extra else f"pip install {package}"


def missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


def import_cluster(path: str) -> Any:
    """The cluster class (or function, as ``SSHCluster``) that ``path`` names:
    ``package.module.Class`` or ``package.module:Class``."""
    module, _, attr = path.replace(":", ".").rpartition(".")
    if not module:
        raise StudyError("not an import path of a dask cluster class", field="cluster", value=path,
                         allowed="package.module.Class, e.g. dask_jobqueue.SLURMCluster")
    try:
        # dask-jobqueue (0.9) sets SIGINT -> sys.exit() when imported: a run then ended with
        # exit code 0, no "interrupted" and no datasets written
        with signals.kept(signal.SIGINT, signal.SIGTERM):
            obj = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        name = exc.name or module
        if name.split(".")[0] not in EXTRAS or not missing(name.split(".")[0]):  # a typo, not a missing extra
            raise StudyError(f"cannot import the cluster class {path}: no module named '{name}' (a typo, or a "
                             f"package to install)", field="cluster") from None
        raise StudyError(f"the cluster class {path} needs {EXTRAS[name.split('.')[0]][0]}, "
                         f"which is not installed: {install_hint(name, path)}", field="cluster") from None
    except (ImportError, AttributeError) as exc:
        raise StudyError(f"cannot import the cluster class {path}: {exc}", field="cluster") from None
    if not callable(obj):
        raise StudyError(f"{path} is not a dask cluster class", field="cluster")
    need = NEEDS.get(f"{obj.__module__}.{obj.__qualname__}")
    if need and missing(need):
        raise StudyError(f"the cluster class {path} needs {EXTRAS[need][0]}, which is not installed: "
                         f"{install_hint(need, path)}", field="cluster")
    return obj


def _keywords(funcs: list) -> set[str] | None:
    """The keyword arguments a chain of constructors takes (None: any, a ``**kwargs`` is
    passed on to something not in the chain)."""
    names: set[str] = set()
    for f in funcs:
        params = inspect.signature(f).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return names - {"self"}
    return None


#: cluster callables whose ``**kwargs`` go to a class whose signature tells what it takes
PASSES_ON = {"distributed.deploy.ssh.SSHCluster": ("distributed.deploy.spec", "SpecCluster")}


def accepted_options(obj: Any) -> set[str] | None:
    """The keyword arguments a cluster callable accepts, None where it cannot be told (it
    takes ``**kwargs``). A dask-jobqueue class passes the rest to its job class, dask's
    ``SSHCluster`` to ``SpecCluster``."""
    if not isinstance(obj, type):
        chain = [obj]
        target = PASSES_ON.get(f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}")
        if target is None:
            return _keywords(chain)
        chain.append(getattr(importlib.import_module(target[0]), target[1]).__init__)
        names = _keywords(chain)  # less what the callable gives the class itself
        return None if names is None else names - {"scheduler", "workers", "worker", "name"}
    job_cls = getattr(obj, "job_cls", None)
    if job_cls is None:
        return _keywords([obj.__init__])
    jobs = [c.__init__ for c in job_cls.__mro__ if "__init__" in vars(c) and c is not object]
    own = {p.name for p in inspect.signature(obj.__init__).parameters.values()
           if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
    rest = _keywords(jobs)
    return None if rest is None else own | rest - {"scheduler", "name"}


#: dask-jobqueue's old option names and the ones that replaced them (dask-jobqueue 0.8)
RENAMED_JOB_OPTIONS = {"env_extra": "job_script_prologue", "extra": "worker_extra_args",
                       "job_extra": "job_extra_directives", "header_skip": "job_directives_skip",
                       "project": "account"}


def check_cluster(profile: Any) -> tuple[dict | None, dict | None]:
    """Check a profile's ``cluster``, ``options``, ``scale`` and ``adapt`` without starting
    anything; returns the keyword arguments of ``scale`` and ``adapt``."""
    obj = import_cluster(profile.cluster)
    allowed = accepted_options(obj)
    jobqueue = hasattr(obj, "job_cls")
    for key in profile.options:
        if jobqueue and key in RENAMED_JOB_OPTIONS:  # dask-jobqueue still takes them, with a long warning
            raise StudyError(f"option '{key}' of {profile.cluster} was renamed", field=f"options.{key}",
                             allowed=RENAMED_JOB_OPTIONS[key])
        if allowed is not None and key not in allowed:
            raise StudyError(f"unknown option '{key}' of {profile.cluster}", field=f"options.{key}",
                             allowed=", ".join(sorted(allowed)))
    scale = profile.scale.model_dump(exclude_none=True) if profile.scale else None
    adapt = profile.adapt.model_dump(exclude_none=True) if profile.adapt else None
    for section, kwargs in (("scale", scale), ("adapt", adapt)):
        jobs = [k for k in kwargs or {} if "jobs" in k]
        if jobs and not jobqueue:
            raise StudyError(f"'{jobs[0]}' counts batch jobs of a dask-jobqueue cluster, and "
                             f"{profile.cluster} is none", field=f"{section}.{jobs[0]}",
                             allowed="workers" if section == "scale" else "minimum, maximum")
    if jobqueue:  # the common job options, as dask-jobqueue reads them (nothing is started or written)
        _check_job_options(profile.options)
    hosts = profile.options.get("hosts")
    if getattr(obj, "__name__", "") == "SSHCluster" and hosts is not None and not (
            isinstance(hosts, list) and hosts and all(isinstance(h, str) for h in hosts)):
        raise StudyError("expected a list of hosts, the scheduler's first: [head, node1, node2]",
                         field="options.hosts", value=hosts)
    if scale:
        scale = {"n" if k == "workers" else k: v for k, v in scale.items()}
    return scale, adapt


#: a batch walltime: [days-]hours:minutes[:seconds], minutes and seconds below 60
WALLTIME = re.compile(r"(\d+-)?\d{1,4}:[0-5]\d(:[0-5]\d)?")


def _check_job_options(options: dict) -> None:
    """``cores`` and ``processes`` whole numbers of at least 1, ``memory`` a size such as
    ``32GB``, the options dask-jobqueue reads as lists lists of text and those it puts in the
    script as they are text, where given (dask-jobqueue's configuration may supply them)."""
    from dask.utils import parse_bytes

    for key in ("cores", "processes"):
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise StudyError("expected a whole number of at least 1", field=f"options.{key}", value=v)
    cores, processes = options.get("cores"), options.get("processes")
    if isinstance(cores, int) and isinstance(processes, int) and processes > cores:
        raise StudyError(f"{processes} worker processes per job on {cores} cores leave a worker without a thread",
                         field="options.processes", value=processes, allowed=f"1 to {cores} (cores)")
    v = options.get("memory")
    if v is not None:
        try:  # a bare number is bytes to dask-jobqueue: 32000 would ask SLURM for 32K
            ok = isinstance(v, str) and 0 < parse_bytes(v) < float("inf") and not v.strip().isdigit()
        except Exception:  # noqa: BLE001 - a list, a mapping, an overflow: not a size
            ok = False
        if not ok:
            raise StudyError("expected a size with its unit, such as '32GB'", field="options.memory", value=v)
    v = options.get("walltime")
    if v is not None and not (isinstance(v, str) and WALLTIME.fullmatch(v.strip())):
        raise StudyError("expected a walltime such as '02:00:00' (hours:minutes:seconds, or days-hours:minutes:"
                         "seconds; a bare number is minutes to SLURM and seconds to PBS)", field="options.walltime",
                         value=v)
    lists = {"job_script_prologue": "a list of shell lines, such as ['source /opt/dse/.venv/bin/activate']",
             "job_extra_directives": "a list of directives, such as ['--exclusive']",
             "job_directives_skip": "a list of directive texts to leave out, such as ['--mem']",
             "worker_extra_args": "a list of arguments, such as ['--lifetime', '55m']"}
    for key, what in lists.items():  # a text would be taken one character per item
        v = options.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise StudyError(f"expected {what}", field=f"options.{key}", value=v)
    for key in ("python", "queue", "account", "interface", "shebang", "local_directory", "log_directory"):
        v = options.get(key)
        if v is not None and not isinstance(v, str):
            raise StudyError("expected text", field=f"options.{key}", value=v)


def cluster_options(plan: Any) -> dict[str, Any]:
    """The class's keyword arguments; without a dashboard (``--no-dashboard``) a scheduler
    started by the class is asked for none where the class takes ``scheduler_options``."""
    options = dict(plan.cluster_options)
    obj = import_cluster(plan.cluster)
    takes = inspect.signature(obj.__init__ if isinstance(obj, type) else obj).parameters
    if not plan.dashboard and "scheduler_options" in takes:
        options["scheduler_options"] = {"dashboard": False, **(options.get("scheduler_options") or {})}
    return options


def check_submit(plan: Any) -> None:
    """A batch-system class (dask-jobqueue's) finds its submit command (``sbatch``, ``qsub``)
    on PATH: without it, it logs a traceback for every job and no worker ever joins."""
    import shutil

    command = getattr(getattr(import_cluster(plan.cluster), "job_cls", None), "submit_command", None)
    program = command.split()[0] if isinstance(command, str) and command.strip() else None
    if program and shutil.which(program) is None:
        raise StudyError(f"{plan.cluster} submits its jobs with '{program}', which is not on PATH here",
                         file=plan.profile, field="cluster",
                         allowed="run dse where jobs can be submitted (the cluster's login node), or another "
                                 "profile; `dse cluster PROFILE` shows the job script without submitting it")


def start_cluster(plan: Any) -> Any:
    """Start the profile's cluster and size it (``scale`` or ``adapt``)."""
    import contextlib

    import dask

    check_submit(plan)
    obj = import_cluster(plan.cluster)
    logs = dask.config.set({"logging.distributed": "info"}) if (
        f"{obj.__module__}.{obj.__qualname__}" in READS_INFO_LOGS) else contextlib.nullcontext()
    try:
        with logs:
            cluster = obj(**cluster_options(plan))
    except Exception as exc:  # the class refused its options or could not reach its system
        raise StudyError(f"cannot start {plan.cluster}: {type(exc).__name__}: {' '.join(str(exc).split())}",
                         file=plan.profile, field="cluster") from None
    if plan.scale:
        cluster.scale(**plan.scale)
    elif plan.adapt:
        cluster.adapt(**plan.adapt)
    return cluster


class SubmissionErrors:
    """While active, the errors a dask-jobqueue cluster logs when its batch system refuses a
    job (``sbatch``/``qsub`` exits non-zero: the job is submitted in the cluster's event loop,
    and the error would otherwise be three tracebacks and a wait for workers that never
    come). Such records are kept (``first``: the batch system's own message) and not printed."""

    LOGGERS = ("tornado.application", "asyncio", "distributed.deploy.spec", "distributed", "dask_jobqueue")
    MARK = "Command exited with non-zero exit code"

    def __init__(self) -> None:
        self.first: str | None = None

    def filter(self, record) -> bool:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += "\n" + str(record.exc_info[1])
        if self.MARK not in text:
            return True
        if self.first is None:
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            said = [ln for ln in lines if "error" in ln.lower() and self.MARK not in ln]
            self.first = (said or lines)[-1]
        return False

    def __enter__(self) -> SubmissionErrors:
        import logging

        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)
        return self

    def __exit__(self, *exc) -> None:
        import logging

        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)


#: KubeCluster's keyword arguments that shape its DaskCluster resource, and their dask config keys
_KUBE = {"image": "image", "n_workers": "count.start", "resources": "resources", "env": "env",
         "worker_command": "worker-command", "scheduler_service_type": "scheduler-service-type",
         "idle_timeout": "idle-timeout", "jupyter": "scheduler-jupyter"}


def check_job(plan: Any) -> tuple[str, str] | None:
    """:func:`preview`, a class that refuses its options (a job script it cannot write, a
    Kubernetes resource it would refuse) said in one line: what ``dse run`` would meet first."""
    try:
        return preview(plan)
    except StudyError:
        raise
    except Exception as exc:  # noqa: BLE001 - the class's own refusal, whatever its type
        raise StudyError(f"{plan.cluster} cannot write its job with these options: {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())}", file=plan.profile, field="options") from None


def preview(plan: Any) -> tuple[str, str] | None:
    """What the profile's cluster would submit, as ``(what, text)``: a dask-jobqueue class's
    job script, or the DaskCluster resource (YAML) a dask-kubernetes ``KubeCluster`` creates;
    None for other classes. Nothing is submitted: a jobqueue class starts its scheduler in
    this process and stops it again; the Kubernetes resource is built as ``KubeCluster`` builds it."""
    obj = import_cluster(plan.cluster)
    if hasattr(obj, "job_script"):
        options = cluster_options(plan)
        options.pop("n_workers", None)  # it would submit jobs: nothing is, to show the script
        options["scheduler_options"] = {"dashboard": False, "dashboard_address": "127.0.0.1:0",
                                        **(options.get("scheduler_options") or {})}
        cluster = obj(**options)
        try:
            return "job script (the scheduler's address is filled in at run time)", cluster.job_script()
        finally:
            cluster.close()
    if getattr(obj, "__module__", "").startswith("dask_kubernetes.operator"):
        import dask
        import yaml
        from dask_kubernetes.operator import make_cluster_spec

        options = plan.cluster_options
        resources = options.get("resources")
        if resources is not None and not (isinstance(resources, dict) and set(resources) <= {"requests", "limits"}):
            raise StudyError("expected Kubernetes resources as {requests: {...}, limits: {...}}",
                             file=plan.profile, field="options.resources", value=resources)
        spec = options.get("custom_cluster_spec")
        if spec is None:
            name = dask.config.get("kubernetes.name", override_with=options.get("name"))
            kwargs = {k: dask.config.get(f"kubernetes.{key}", override_with=options.get(k)) for k, key in _KUBE.items()}
            if isinstance(kwargs["worker_command"], str):
                kwargs["worker_command"] = kwargs["worker_command"].split(" ")
            spec = make_cluster_spec(name=name.format(user=getpass.getuser(), uuid="preview", **os.environ), **kwargs)
        return "DaskCluster resource", yaml.safe_dump(json.loads(json.dumps(spec)), sort_keys=False)
    return None
