"""Where ``export``, ``plot`` and ``report`` write: ``--output`` checked before anything is written
(and ``evaluate``'s outputs, whose folders are checked alike: :func:`refuse_blocked_folder`).

A path the user gives must name a file (not a folder, not nothing), its folder must be
creatable (no file in the way), and it must not be one of the run's own files (its log,
state, study copy, datasets or a search driver's files): writing there would wreck the
results folder it reads from.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dse.errors import DseError, printable
from dse.files import is_zarr_store, not_a_file, refuse_unsafe_write, results_folder_of
from dse.store import ResultStore

#: what a results folder holds that no export, figure or report may replace
RUN_OWN = (*ResultStore.RUN_FILES, "study.yaml", "lock", "evaluations")


def output_path(
    output: Path | str | None, default: Path, run_path: Path, *, may_be_folder: bool = False
) -> Path:
    """``output`` (None: ``default``) checked as a place to write; ``may_be_folder``: the
    output is itself a folder (a zarr store), so an existing zarr store is replaced, not refused
    (any other folder is)."""
    if output is None:
        return Path(default)
    if str(output).strip() == "":
        raise DseError("is empty; give a file name", field="--output", value=str(output))
    refuse_standard_output(output)
    output = Path(output)
    why = not_a_file(output)
    if why:
        raise DseError(why, field="--output", value=str(output))
    refuse_link_on_the_way(output)
    if output.is_dir() and not may_be_folder:
        raise DseError(
            "is a folder; give a file name",
            field="--output",
            value=str(output),
            allowed=f"a file path, e.g. {output / Path(default).name}",
        )
    if may_be_folder and output.exists() and not output.is_dir():
        raise DseError(
            "is a file, but a zarr store is a folder: exporting there would replace the file",
            field="--output",
            value=str(output),
            allowed="a new path, or a zarr store to replace",
        )
    if output.is_dir() and not is_zarr_store(output):  # a zarr store replaces what is there
        raise DseError(
            "is a folder that is not a zarr store: exporting there would replace everything in it",
            field="--output",
            value=str(output),
            allowed=f"a new path, or a zarr store to replace, e.g. {output / Path(default).name}",
        )
    refuse_blocked_folder(output)
    _refuse_run_file(output, run_path)
    return output


def refuse_link_on_the_way(output: Path | str, field: str = "--output") -> None:
    """A link planted in a results folder on the way to ``output`` (a folder of its path),
    refused before any work, as the write itself would refuse it
    (:func:`dse.files.refuse_unsafe_write`): nothing is made or probed through it first."""
    try:
        refuse_unsafe_write(Path(output))
    except OSError as exc:
        # in one line: a line end in a planted link's name shown as its escape
        why = printable(str(exc.strerror or exc).removeprefix("cannot write: "))
        raise DseError(why, field=field, value=str(output)) from None


def refuse_blocked_folder(output: Path, field: str = "--output") -> Path:
    """Refuse, before any work, an ``output`` whose missing folders cannot be made (they are
    made when it is written): the nearest entry above it that is there is not a folder (a
    file, or a symbolic link to nothing, which no folder can be made through). Returns that
    folder, the one the missing ones will be made in."""
    parents = Path(output).absolute().parents
    for parent in parents:
        if not os.path.lexists(parent):
            continue  # a folder that will be made
        if not parent.is_dir():
            why = "is not a folder"
            if parent.is_file():
                why = "is a file, not a folder"
            elif not parent.exists():  # a link to nothing: mkdir would find it there
                why = "is a symbolic link to nothing, not a folder"
            raise DseError(
                f"cannot write there: {printable(parent)} {why}", field=field, value=str(output)
            )
        return parent
    return parents[-1]  # (the root: always there)


def refuse_standard_output(output: Path | str) -> None:
    """'-', the usual name of standard output: dse writes files (one named '-' would surprise)."""
    if str(output).strip() == "-":
        raise DseError(
            "is '-', but dse writes files, not standard output; give a file name",
            field="--output",
            value=str(output),
        )


def refuse_a_run_file(output: Path | str, field: str = "--output") -> None:
    """``output`` refused when it is one of the own files of the results folder it lies in
    (the nearest folder above it with a ``meta.json``): for a command that reads no run but
    may be pointed into one (``dse calibrate -o RESULTS/study.yaml`` replaced the run's study
    copy, and every command then refused the folder)."""
    folder = results_folder_of(Path(os.path.realpath(output)))
    if folder is not None:
        _refuse_run_file(
            Path(output), folder, allowed="a file outside the results folder", field=field
        )


def _refuse_run_file(
    output: Path,
    run_path: Path,
    allowed: str = "another file name, e.g. the default (leave --output out)",
    field: str = "--output",
) -> None:
    # realpath, not resolve(): a loop of links is no RuntimeError (open_results refuses it)
    run, target = Path(os.path.realpath(run_path)), Path(os.path.realpath(output))
    if target.parent != run and run not in target.parents:
        return
    own = set(RUN_OWN)
    try:  # a search driver's files (optuna's journal), as the run recorded them
        own |= set(json.loads((run / "meta.json").read_text()).get("owned_files", []))
    except (OSError, ValueError, AttributeError):
        pass
    first = target.relative_to(run).parts[0]
    if first in own:
        raise DseError(
            f"is one of the run's own files ({first} in {run_path}); writing there would damage the run",
            field=field,
            value=str(output),
            allowed=allowed,
        )
