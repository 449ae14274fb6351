"""Cluster deployers, the third plug-in point: what starts the dask cluster a profile names.

Found as evaluators and search drivers are (:mod:`dse.plugins`): a name registered in the
entry-point group ``dse.deployers`` (dse's own register there through its
``pyproject.toml``, as a third party does) or ``package.module:Class``. A profile names
one with ``deployer:``; without it, the first registered deployer that claims the
profile's ``cluster`` class, and ``dask`` (any cluster class) where none does.
"""

from __future__ import annotations

from typing import Any

from dse.errors import StudyError
from dse.execution.deployers.base import Deployer, import_cluster, install_hint, missing
from dse.plugins import load_class, registered
from dse.study import validate_options

GROUP = "dse.deployers"
#: the deployer of a cluster class no other claims
FALLBACK = "dask"

__all__ = [
    "FALLBACK",
    "GROUP",
    "Deployer",
    "checked",
    "choose",
    "deployer_class",
    "import_cluster",
    "install_hint",
    "make_deployer",
    "missing",
]


def deployer_class(name: str) -> type[Deployer]:
    """The deployer a profile's ``deployer`` names: registered, or ``package.module:Class``."""
    return load_class(GROUP, name, Deployer, field="deployer", kind="cluster deployer")


def choose(cluster: str | None, deployer: str | None) -> tuple[str, type[Deployer]]:
    """``(reference, class)`` of the deployer for a profile: the one it names, else the first
    registered one that claims its ``cluster`` (by the import path, then by the imported
    class), else :data:`FALLBACK`. The reference is what the plan keeps."""
    if deployer:
        return deployer, deployer_class(deployer)
    if not cluster:
        raise StudyError(
            "a profile names a 'cluster' class, a 'deployer', a 'scheduler' or a 'scheduler_file'",
            field="cluster",
        )
    names = sorted(n for n in registered(GROUP) if n != FALLBACK)
    if FALLBACK not in registered(GROUP):
        raise StudyError(
            f"no cluster deployer '{FALLBACK}' is registered (entry-point group {GROUP}): dse's "
            "installation is incomplete; reinstall it (pip install -e .)",
            field="cluster",
        )
    classes = [(n, deployer_class(n)) for n in names]
    for name, cls in classes:
        if cls.claims(cluster):
            return name, cls
    obj = import_cluster(cluster)
    for name, cls in classes:
        if cls.claims(cluster, obj):
            return name, cls
    return FALLBACK, deployer_class(FALLBACK)


def make_deployer(
    reference: str, cluster: str | None, options: dict[str, Any], profile: str | None = None
) -> Deployer:
    """The deployer ``reference`` names (as :func:`choose` returned it), for a profile."""
    return deployer_class(reference)(cluster, options, profile)


def checked(
    profile: Any, path: str | None = None
) -> tuple[Deployer, str, dict | None, dict | None]:
    """The deployer of a profile (a :class:`~dse.execution.plan.ClusterProfile`) with its
    options checked (its :attr:`~Deployer.Options` model, then :meth:`~Deployer.check`);
    returns it, its reference and the keyword arguments of ``scale`` and ``adapt``."""
    reference, cls = choose(profile.cluster, profile.deployer)
    validate_options(cls.Options, profile.options, prefix=("options",))
    deployer = cls(profile.cluster, profile.options, path)
    scale = profile.scale.model_dump(exclude_none=True) if profile.scale else None
    adapt = profile.adapt.model_dump(exclude_none=True) if profile.adapt else None
    deployer.check(scale, adapt)
    if scale:
        scale = {"n" if k == "workers" else k: v for k, v in scale.items()}
    return deployer, reference, scale, adapt
