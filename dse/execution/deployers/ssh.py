"""``ssh``: dask's ``SSHCluster``, workers started over SSH (needs asyncssh: ``dse[ssh]``)."""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import ConfigDict, field_validator

from dse.errors import StudyError
from dse.execution.deployers.base import (
    EXTRAS,
    AnyOptions,
    Deployer,
    install_hint,
    keywords,
    missing,
    qualified,
)

#: the function dask's ``SSHCluster`` is, and the class its ``**kwargs`` go to
SSH_CLUSTER = "distributed.deploy.ssh.SSHCluster"
SPEC_CLUSTER = ("distributed.deploy.spec", "SpecCluster")


class SSHOptions(AnyOptions):
    """``SSHCluster``'s keyword arguments; ``hosts`` checked here (a single text would be
    read one character per host), the others against its signature and ``SpecCluster``'s."""

    model_config = ConfigDict(extra="allow", frozen=True)
    hosts: Any = None

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts(cls, v: Any) -> Any:
        if v is not None and not (isinstance(v, list) and v and all(isinstance(h, str) for h in v)):
            raise ValueError(
                "expected a list of hosts, the scheduler's first: [head, node1, node2]"
            )
        return v


class SSHDeployer(Deployer):
    """Workers started over SSH by dask's ``SSHCluster``: the first host runs the scheduler."""

    name = "ssh"
    description = "dask's SSHCluster: a scheduler and workers started over SSH"
    Options = SSHOptions
    default_cluster = "dask.distributed.SSHCluster"

    @classmethod
    def claims(cls, path: str, obj: Any | None = None) -> bool:
        if obj is not None:
            return qualified(obj) == SSH_CLUSTER
        return path.replace(":", ".") in (
            "dask.distributed.SSHCluster",
            "distributed.SSHCluster",
            SSH_CLUSTER,
        )

    def cluster_class(self) -> Any:
        obj = super().cluster_class()
        if missing("asyncssh"):  # imported by SSHCluster only when called
            raise StudyError(
                f"the cluster class {self.cluster} needs {EXTRAS['asyncssh'][0]}, which is not "
                f"installed: {install_hint('asyncssh', self.cluster or '')}",
                field="cluster",
            )
        return obj

    def accepted_options(self) -> set[str] | None:
        """``SSHCluster``'s own keywords and those of ``SpecCluster``, less what it gives the
        class itself."""
        chain = [
            self.cluster_class(),
            getattr(importlib.import_module(SPEC_CLUSTER[0]), SPEC_CLUSTER[1]).__init__,
        ]
        names = keywords(chain)
        return None if names is None else names - {"scheduler", "workers", "worker", "name"}

    def start(self, dashboard: bool) -> Any:
        """``SSHCluster`` learns its processes' addresses from their INFO log lines, which
        inherit this process's dask configuration (the command line logs warnings only)."""
        import dask

        with dask.config.set({"logging.distributed": "info"}):
            return super().start(dashboard)
