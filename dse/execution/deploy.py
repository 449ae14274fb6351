"""The dask cluster a profile names, through its deployer (:mod:`dse.execution.deployers`):
checked without starting anything, started and then ``scale``d or ``adapt``ed, and a
preview of what it would submit (the batch job script of a dask-jobqueue class, the
``DaskCluster`` resource of the dask-kubernetes operator) without submitting anything.

The cluster libraries are optional extras of dse; a missing one is a one-line error naming
the extra, at ``dse validate`` time as at ``dse run`` time.
"""

from __future__ import annotations

from typing import Any

from dse.errors import StudyError
from dse.execution.deployers import (
    Deployer,
    checked,
    import_cluster,
    install_hint,
    make_deployer,
    missing,
)

__all__ = [
    "SubmissionErrors",
    "check_job",
    "check_profile",
    "check_submit",
    "cluster_options",
    "deployer",
    "import_cluster",
    "install_hint",
    "missing",
    "preview",
    "start_cluster",
]


def check_profile(
    profile: Any, path: str | None = None
) -> tuple[str, str | None, dict | None, dict | None]:
    """Check a profile's ``deployer``, ``cluster``, ``options``, ``scale`` and ``adapt``
    without starting anything; returns the deployer's reference, the cluster class's import
    path and the keyword arguments of ``scale`` and ``adapt``."""
    found, reference, scale, adapt = checked(profile, path)
    return reference, found.cluster, scale, adapt


def deployer(plan: Any) -> Deployer:
    """The deployer of a plan that runs on a profile's cluster."""
    return make_deployer(plan.deployer, plan.cluster, plan.cluster_options, plan.profile)


def cluster_options(plan: Any) -> dict[str, Any]:
    """The class's keyword arguments as the run passes them."""
    return deployer(plan).cluster_options(plan.dashboard)


def check_submit(plan: Any) -> None:
    """A batch-system class finds its submit command (``sbatch``, ``qsub``) on PATH: without
    it, it logs a traceback for every job and no worker ever joins."""
    problem = deployer(plan).submit_problem()
    if problem:
        raise StudyError(
            problem,
            file=plan.profile,
            field="cluster",
            allowed="run dse where jobs can be submitted (the cluster's login node), or another "
            "profile; `dse cluster PROFILE` shows the job script without submitting it",
        )


def start_cluster(plan: Any) -> Any:
    """Start the profile's cluster and size it (``scale`` or ``adapt``)."""
    check_submit(plan)
    try:
        cluster = deployer(plan).start(plan.dashboard)
    except StudyError:
        raise
    except Exception as exc:  # the class refused its options or could not reach its system
        what = plan.cluster or plan.deployer
        raise StudyError(
            f"cannot start {what}: {type(exc).__name__}: {' '.join(str(exc).split())}",
            file=plan.profile,
            field="cluster",
        ) from None
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

    LOGGERS = (
        "tornado.application",
        "asyncio",
        "distributed.deploy.spec",
        "distributed",
        "dask_jobqueue",
    )
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


def check_job(plan: Any) -> tuple[str, str] | None:
    """:func:`preview`, a class that refuses its options (a job script it cannot write, a
    Kubernetes resource it would refuse) said in one line: what ``dse run`` would meet first."""
    try:
        return preview(plan)
    except StudyError:
        raise
    except Exception as exc:  # noqa: BLE001 - the class's own refusal, whatever its type
        raise StudyError(
            f"{plan.cluster or plan.deployer} cannot write its job with these options: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())}",
            file=plan.profile,
            field="options",
        ) from None


def preview(plan: Any) -> tuple[str, str] | None:
    """What the profile's cluster would submit, as ``(what, text)`` (its deployer's
    :meth:`~dse.execution.deployers.base.Deployer.preview`); None where there is nothing
    to show. Nothing is submitted."""
    return deployer(plan).preview(plan.dashboard)
