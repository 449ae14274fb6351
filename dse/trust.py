"""A study checked without running any of its code: ``dse validate --no-plugins``.

``dse validate`` builds the study's evaluator and search driver, and so imports a
``package.module:Class`` named there (module code runs as it is imported) and runs the
evaluator's preview. Here only the study file is read: its schema and values, the plug-ins
it names (a registered name is looked up in the installed packages' metadata, never
loaded; a ``module:Class`` is named, not imported), the program a ``command`` evaluator
would start, the cluster profile it would read, and the results folder it would write.
What this cannot check (an evaluator's or driver's own options, the space against the
evaluator's inputs) ``dse validate`` checks, after the study is trusted (docs/security.md).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from dse.errors import DseError, StudyError, did_you_mean, printable
from dse.plugins import registered
from dse.store import ResultStore
from dse.study import Study, load_study

#: the entry-point groups of the two plug-in points a study names (as dse.evaluators and dse.search)
GROUPS = {
    "evaluator": ("dse.evaluators", "evaluator.name"),
    "search algorithm": ("dse.search", "search.algorithm"),
}


def check_without_plugins(
    path: str | Path, output: str | Path | None = None, *, overwrite: bool = False
) -> list[str]:
    """What the study at ``path`` would make dse do, as lines to print, after the checks
    that need none of its code; raises :class:`~dse.errors.DseError` (one line) for what
    ``dse run`` would refuse among them. Imports no plug-in and starts no program."""
    study = load_study(path)
    lines = [
        f"{printable(study.name)}: the study file is well-formed; no plug-in code was imported or run"
    ]
    for kind, name in (
        ("evaluator", study.evaluator.name),
        ("search algorithm", study.search.algorithm),
    ):
        lines.append(f"{kind}: {_plugin(kind, name, file=str(path))}")
    for name, spec in study.bundles.items():
        if spec.catalog:
            lines.append(
                f"catalog of bundles: {printable(spec.catalog)} (read and checked as the study is: "
                f"the bundles of space.{printable(name)})"
            )
    command = _command(study)
    if command:
        lines.append(
            f"program: runs {printable(command)} once per chunk of candidates, as you, in "
            f"{printable(study.evaluator.options.get('workdir') or 'the current folder')}"
        )
    if study.execution.profile:
        lines.append(
            f"cluster profile: {printable(study.execution.profile)} (a profile may name a cluster class "
            "to import, and the commands its jobs run)"
        )
    if study.execution.scheduler:
        lines.append(
            f"scheduler: sends the evaluator to {printable(study.execution.scheduler)} to run there"
        )
    out = Path(output) if output is not None else study.output_dir
    try:
        ResultStore.check_creatable(out, overwrite=overwrite)
    except DseError as exc:  # the study's own folder named with the study file and its field
        if output is not None:
            raise
        raise StudyError(exc.message, file=str(path), field="output.path") from None
    lines.append(f"results folder: {printable(out)}")
    lines.append(
        "not checked here: the plug-ins' own options and the space against the evaluator's inputs; "
        "`dse validate` without --no-plugins checks them (it imports the plug-ins)"
    )
    return lines


def _plugin(kind: str, name: str, *, file: str) -> str:
    """How ``name`` would be found: an installed package's registered name (which one), or a
    module that would be imported; an unknown registered name is refused."""
    group, field = GROUPS[kind]
    if ":" in name:
        module = name.partition(":")[0]
        return (
            f"{printable(name)}: the module {printable(module)} would be imported (its code runs as it "
            "is), from the installed packages or the current folder; not imported here"
        )
    names = registered(group)
    if name not in names:
        raise StudyError(
            f"unknown {kind} '{name}'{did_you_mean(name, names)}",
            file=file,
            field=field,
            allowed=", ".join(sorted(names)) + " (registered), or package.module:Class",
        )
    return f"{printable(name)}, registered by an installed package ({printable(names[name])}); not imported here"


def _command(study: Study) -> str | None:
    """The command line a ``command`` evaluator would run, or None."""
    if study.evaluator.name != "command":
        return None
    command = study.evaluator.options.get("command")
    if isinstance(command, list):
        return shlex.join(str(c) for c in command)
    return str(command) if command is not None else None
