"""The deployer contract: what starts the dask cluster a profile names, and checks the
profile before anything runs.

A deployer is the third plug-in point (beside evaluators and search drivers), found the
same way: a name registered in the entry-point group ``dse.deployers`` or
``package.module:Class``. A profile names one with ``deployer:``; without it, the first
deployer that claims the profile's ``cluster`` class is used (:func:`~dse.execution.
deployers.choose`), and any dask cluster class falls to ``dask``.

Call order: ``Deployer(cluster, options, profile)`` → :meth:`Deployer.check` (``dse
validate`` and ``dse run`` alike, nothing started) → :meth:`Deployer.submit_problem`
(before a run creates its folder) → :meth:`Deployer.start` (the run) or
:meth:`Deployer.preview` (``dse cluster``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import signal
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from dse import signals
from dse.errors import StudyError

#: top-level module -> (the package that provides it, the dse extra that installs it)
EXTRAS = {
    "dask_jobqueue": ("dask-jobqueue", "slurm"),
    "dask_kubernetes": ("dask-kubernetes", "kubernetes"),
    "asyncssh": ("asyncssh", "ssh"),
    "bokeh": ("bokeh", "dashboard"),
}


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
        raise StudyError(
            "not an import path of a dask cluster class",
            field="cluster",
            value=path,
            allowed="package.module.Class, e.g. dask_jobqueue.SLURMCluster",
        )
    try:
        # dask-jobqueue (0.9) sets SIGINT -> sys.exit() when imported: a run then ended with
        # exit code 0, no "interrupted" and no datasets written
        with signals.kept(signal.SIGINT, signal.SIGTERM):
            obj = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        name = exc.name or module
        if name.split(".")[0] not in EXTRAS or not missing(
            name.split(".")[0]
        ):  # a typo, not a missing extra
            raise StudyError(
                f"cannot import the cluster class {path}: no module named '{name}' (a typo, or a "
                f"package to install)",
                field="cluster",
            ) from None
        raise StudyError(
            f"the cluster class {path} needs {EXTRAS[name.split('.')[0]][0]}, "
            f"which is not installed: {install_hint(name, path)}",
            field="cluster",
        ) from None
    except (ImportError, AttributeError) as exc:
        raise StudyError(
            f"cannot import the cluster class {path}: {exc}", field="cluster"
        ) from None
    if not callable(obj):
        raise StudyError(f"{path} is not a dask cluster class", field="cluster")
    return obj


def qualified(obj: Any) -> str:
    """``module.qualname`` of a class or function (what a deployer may claim)."""
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"


def keywords(funcs: list) -> set[str] | None:
    """The keyword arguments a chain of constructors takes (None: any, a ``**kwargs`` is
    passed on to something not in the chain)."""
    names: set[str] = set()
    for f in funcs:
        params = inspect.signature(f).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return names - {"self"}
    return None


class AnyOptions(BaseModel):
    """Options a deployer does not declare field by field: the cluster class's keyword
    arguments, checked against its signature (:meth:`Deployer.accepted_options`)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class Deployer:
    """Starts the dask cluster of a profile: ``cluster`` (an import path, which a deployer
    may not need), ``options`` (the profile's ``options``: the keyword arguments of the
    class) and ``profile`` (the profile file, for messages).

    A subclass sets :attr:`name`, :attr:`description` and :attr:`Options` (a pydantic
    model of the options it reads: checked by ``dse validate``; ``extra="allow"`` leaves
    the others to the class's signature) and overrides what it does differently."""

    #: the name it is registered under (entry-point group ``dse.deployers``)
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: the profile's ``options`` as this deployer reads them
    Options: ClassVar[type[BaseModel]] = AnyOptions
    #: whether ``scale.jobs`` and ``adapt.minimum_jobs``/``maximum_jobs`` (batch jobs) apply
    batch_jobs: ClassVar[bool] = False
    #: a cluster class of its own when the profile names none (None: the profile must)
    default_cluster: ClassVar[str | None] = None

    def __init__(
        self, cluster: str | None, options: dict[str, Any], profile: str | None = None
    ) -> None:
        self.cluster = cluster or self.default_cluster
        self.options = dict(options)
        self.profile = profile

    # -- which profiles it is chosen for --------------------------------------------------
    @classmethod
    def claims(cls, path: str, obj: Any | None = None) -> bool:
        """Whether a profile whose ``cluster`` is ``path`` (the imported class ``obj`` once
        known; None: decide from the text alone) is this deployer's when it names none."""
        return False

    # -- checks, nothing started ----------------------------------------------------------
    def cluster_class(self) -> Any:
        """The class (or function) that makes the cluster."""
        if not self.cluster:
            raise StudyError(
                f"deployer '{self.name}' starts a class the profile names, and it names none",
                field="cluster",
                allowed="an import path such as dask.distributed.LocalCluster",
            )
        return import_cluster(self.cluster)

    def accepted_options(self) -> set[str] | None:
        """The keyword arguments the cluster class accepts; None where it cannot be told
        (it takes ``**kwargs``)."""
        obj = self.cluster_class()
        if isinstance(obj, type):
            return keywords([obj.__init__])
        return keywords([obj])

    def required_options(self) -> set[str]:
        """The arguments the cluster class cannot be called without (none where its
        signature cannot be told): a function such as ``os.system`` is callable, and ended a
        run in a TypeError that ``dse validate`` never met."""
        obj = self.cluster_class()
        try:
            params = inspect.signature(obj.__init__ if isinstance(obj, type) else obj).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            return set()
        named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return {
            p.name
            for i, p in enumerate(params.values())
            if p.default is p.empty
            and (p.kind in named or p.kind is p.KEYWORD_ONLY)
            and not (i == 0 and isinstance(obj, type))  # self
        }

    def check(self, scale: dict | None, adapt: dict | None) -> None:
        """Check the options against the cluster class, where there is one (its import,
        unknown keywords), and the profile's size; raises :class:`~dse.errors.StudyError`
        naming the field. The :attr:`Options` model has been checked before."""
        if not self.cluster and type(self).start is Deployer.start:
            self.cluster_class()  # it starts the class a profile names, and this one names none
        if self.cluster:
            self.cluster_class()
            allowed = self.accepted_options()
            for key in self.options:
                if allowed is not None and key not in allowed:
                    raise StudyError(
                        f"unknown option '{key}' of {self.cluster}",
                        field=f"options.{key}",
                        allowed=", ".join(sorted(allowed)),
                    )
            needed = sorted(self.required_options() - set(self.options))
            if needed and type(self).start is Deployer.start:  # it calls the class with these
                raise StudyError(
                    f"{self.cluster} cannot start without {', '.join(map(repr, needed))}, "
                    "which the profile's options do not give",
                    field="options",
                    value=dict(self.options),
                    allowed="a dask cluster class, e.g. dask_jobqueue.SLURMCluster, and its "
                    "keyword arguments",
                )
        for section, kwargs in (("scale", scale), ("adapt", adapt)):
            jobs = [k for k in kwargs or {} if "jobs" in k]
            if jobs and not self.batch_jobs:
                raise StudyError(
                    f"'{jobs[0]}' counts batch jobs of a dask-jobqueue cluster, and "
                    f"{self.cluster or self.name} is none",
                    field=f"{section}.{jobs[0]}",
                    allowed="workers" if section == "scale" else "minimum, maximum",
                )

    def submit_problem(self) -> str | None:
        """Why no job could be submitted from here (a batch system's command not on PATH),
        or None; asked before a run creates its folder."""
        return None

    # -- starting -------------------------------------------------------------------------
    def cluster_options(self, dashboard: bool) -> dict[str, Any]:
        """The class's keyword arguments; without a dashboard (``--no-dashboard``) a scheduler
        started by the class is asked for none where the class takes ``scheduler_options``."""
        options = dict(self.options)
        obj = self.cluster_class()
        takes = inspect.signature(obj.__init__ if isinstance(obj, type) else obj).parameters
        if not dashboard and "scheduler_options" in takes:
            options["scheduler_options"] = {
                "dashboard": False,
                **(options.get("scheduler_options") or {}),
            }
        return options

    def start(self, dashboard: bool) -> Any:
        """The started cluster (a ``distributed`` cluster object: ``scale``, ``adapt``,
        ``scheduler_address``, ``close``); sized by the caller."""
        return self.cluster_class()(**self.cluster_options(dashboard))

    def preview(self, dashboard: bool) -> tuple[str, str] | None:
        """What the cluster would submit, as ``(what, text)`` (a job script, a resource),
        without submitting anything; None where there is nothing to show."""
        return None
