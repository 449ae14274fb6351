"""Plug-in lookup shared by every plug-in point: entry-point groups or ``module:attribute``.

Built-ins register exactly like third-party plug-ins, through their package's entry
points (as xarray's ``xarray.backends``): ``dse.evaluators`` for evaluators and
``dse.search`` for search drivers. A class that is not installed as a package can be
named by ``package.module:Attribute``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from dse.errors import StudyError, did_you_mean


def registered(group: str) -> dict[str, str]:
    """Names registered in an entry-point group and the object each refers to."""
    return {ep.name: ep.value for ep in entry_points(group=group)}


def _package(ep) -> str:
    """The name of the installed package that declares entry point ``ep``."""
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or "an unnamed package"


def load_class(group: str, name: str, base: type, *, field: str, kind: str) -> type:
    """The subclass of ``base`` that ``name`` refers to: a registered name or ``module:attribute``.

    ``field`` (the study field that named it) and ``kind`` (e.g. "evaluator") go into the
    message of the :class:`~dse.errors.StudyError` raised when it cannot be found.
    """
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise StudyError(f"cannot import {kind} '{name}': {exc}", field=field) from None
        except Exception as exc:  # noqa: BLE001 - the plug-in's module failed while it was imported
            raise StudyError(
                f"{kind} '{name}' failed while its module was imported: {type(exc).__name__}: {exc}",
                field=field,
            ) from None
    else:
        found = entry_points(group=group)
        eps = {ep.name: ep for ep in found}
        claims = sorted({f"{_package(ep)} ({ep.value})" for ep in found if ep.name == name})
        if len(claims) > 1:  # which one loads would depend on the order of sys.path
            raise StudyError(
                f"{kind} '{name}' is registered by more than one installed package: "
                f"{' and '.join(claims)}; uninstall one, or name the class as "
                "package.module:Class",
                field=field,
            )
        if name not in eps:
            raise StudyError(
                f"unknown {kind} '{name}'{did_you_mean(name, eps)}",
                field=field,
                allowed=", ".join(sorted(eps)) + " (registered), or package.module:Class",
            )
        try:
            obj = eps[name].load()
        except (ImportError, AttributeError) as exc:
            raise StudyError(
                f"{kind} '{name}' is registered ({eps[name].value}) but cannot be imported: {exc}",
                field=field,
            ) from None
        except Exception as exc:  # noqa: BLE001 - the plug-in's module failed while it was imported
            raise StudyError(
                f"{kind} '{name}' ({eps[name].value}) failed while its module was imported: "
                f"{type(exc).__name__}: {exc}",
                field=field,
            ) from None
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise StudyError(f"'{name}' is not a subclass of dse's {base.__name__}", field=field)
    return obj
