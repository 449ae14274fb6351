"""``dask``: any dask cluster class by its import path (``dask.distributed.LocalCluster``,
a site's own class), started with the profile's options as keyword arguments."""

from __future__ import annotations

from typing import Any

from dse.execution.deployers.base import Deployer


class DaskDeployer(Deployer):
    """Any dask cluster class: its options are its keyword arguments, checked against its
    signature; the deployer of a profile no other deployer claims."""

    name = "dask"
    description = "any dask cluster class by import path, started with the profile's options"

    @classmethod
    def claims(cls, path: str, obj: Any | None = None) -> bool:
        return True  # the fallback (asked last)
