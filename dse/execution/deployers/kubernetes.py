"""``kubernetes``: a ``DaskCluster`` resource through the dask-kubernetes operator
(``dask_kubernetes.operator.KubeCluster``); the resource it creates shown without creating it."""

from __future__ import annotations

import getpass
import json
import os
from typing import Any

from pydantic import ConfigDict, field_validator

from dse.execution.deployers.base import AnyOptions, Deployer

#: KubeCluster's keyword arguments that shape its DaskCluster resource, and their dask config keys
_KUBE = {
    "image": "image",
    "n_workers": "count.start",
    "resources": "resources",
    "env": "env",
    "worker_command": "worker-command",
    "scheduler_service_type": "scheduler-service-type",
    "idle_timeout": "idle-timeout",
    "jupyter": "scheduler-jupyter",
}


class KubeOptions(AnyOptions):
    """``KubeCluster``'s keyword arguments; ``resources`` checked here (Kubernetes would
    refuse another shape only when the resource is created), the rest against its signature."""

    model_config = ConfigDict(extra="allow", frozen=True)
    resources: Any = None  # {requests: {...}, limits: {...}}

    @field_validator("resources", mode="before")
    @classmethod
    def _resources(cls, v: Any) -> Any:
        if v is not None and not (isinstance(v, dict) and set(v) <= {"requests", "limits"}):
            raise ValueError("expected Kubernetes resources as {requests: {...}, limits: {...}}")
        return v


class KubernetesDeployer(Deployer):
    """A DaskCluster on Kubernetes, created by the dask-kubernetes operator."""

    name = "kubernetes"
    description = "a DaskCluster on Kubernetes through the dask-kubernetes operator"
    Options = KubeOptions
    default_cluster = "dask_kubernetes.operator.KubeCluster"

    @classmethod
    def claims(cls, path: str, obj: Any | None = None) -> bool:
        if obj is not None:
            return getattr(obj, "__module__", "").startswith("dask_kubernetes.operator")
        return path.startswith(("dask_kubernetes.operator", "dask_kubernetes:"))

    def preview(self, dashboard: bool) -> tuple[str, str] | None:
        """The DaskCluster resource (YAML), built as ``KubeCluster`` builds it."""
        import dask
        import yaml
        from dask_kubernetes.operator import make_cluster_spec

        self.cluster_class()  # a missing extra named as at run time
        options = self.options
        spec = options.get("custom_cluster_spec")
        if spec is None:
            name = dask.config.get("kubernetes.name", override_with=options.get("name"))
            kwargs = {
                k: dask.config.get(f"kubernetes.{key}", override_with=options.get(k))
                for k, key in _KUBE.items()
            }
            if isinstance(kwargs["worker_command"], str):
                kwargs["worker_command"] = kwargs["worker_command"].split(" ")
            spec = make_cluster_spec(
                name=name.format(user=getpass.getuser(), uuid="preview", **os.environ), **kwargs
            )
        return "DaskCluster resource", yaml.safe_dump(json.loads(json.dumps(spec)), sort_keys=False)
