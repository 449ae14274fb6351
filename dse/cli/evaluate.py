"""Evaluate a table of given candidates (``dse evaluate``): no search, no dask."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from dse.checks import RunPlan
from dse.errors import DseError, StudyError, did_you_mean
from dse.evaluators import Evaluator
from dse.execution.base import EvaluatorRef, evaluate_rows
from dse.pareto import feasible_mask
from dse.signals import handling
from dse.space import bundle_columns
from dse.study import Study
from dse.tables import check_shape, check_size

#: a column that names the rows (kept as OUT.csv's first column, not given to the evaluator)
LABEL = "id"


class _Ended(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the command stands: a KeyboardInterrupt, which the
    executor lets through (it records any other exception as the candidates' failure)."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = int(signum)


@contextlib.contextmanager
def ended_cleanly_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP end the command as an exception (exit code 128 + the signal), not
    where the process stands: the hidden temporary output (the CSV being written, 7.8 GB in
    one case) is removed and the programs a command evaluator started are killed on the way
    out, as for Ctrl-C."""

    def stop(signum: int, frame: object) -> None:
        raise _Ended(signum)

    try:
        with contextlib.ExitStack() as stack:
            for signum in (signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])):
                stack.enter_context(handling(signum, stop))
            yield
    except _Ended as ended:
        os.write(2, f"terminated ({signal.Signals(ended.signum).name})\n".encode())
        raise SystemExit(128 + ended.signum) from None


def _has_label(table: pd.DataFrame, ev: Evaluator) -> bool:
    """``table`` names its rows in a :data:`LABEL` column (one the evaluator does not use)."""
    return LABEL in table.columns and LABEL not in ev.inputs and LABEL not in ev.metrics


def read_candidates(
    path: Path, ev: Evaluator, bundles: dict[str, dict] | None = None
) -> pd.DataFrame:
    """Read a candidates CSV and check its columns and values against the evaluator's inputs
    (text values in the evaluator's spelling, as a study's are); a :data:`LABEL` column
    (unless the evaluator has such an input) names the rows and is read as text; a column
    named as one of the study's bundle parameters (``bundles``: each one's bundles) holds
    bundle names."""
    bundles = bundles or {}
    if Path(path).is_dir():
        raise DseError("is a folder; give the candidates CSV file", file=str(path))
    check_size(
        path,
        "candidates file",
        instead="split it, or search the space with `dse run`, which streams",
    )
    check_shape(path)  # a row longer than the header would shift its values under an index column
    try:
        table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise DseError("candidates file not found", file=str(path)) from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise DseError(f"cannot read candidates CSV: {exc}", file=str(path)) from None
    table = table.dropna(how="all")  # a row of empty cells (",,,") is no candidate
    if len(table) == 0:
        raise DseError("candidates file has no rows", file=str(path))
    inputs = ev.inputs
    label = _has_label(table, ev)
    if label:
        table[LABEL] = table[LABEL].astype(str)
    unknown = [
        c
        for c in table.columns
        if c not in inputs and c not in bundles and not (label and c == LABEL)
    ]
    if unknown:
        other = next((sep for sep in (";", "\t", "|") if sep in str(unknown[0])), None)
        hint = (  # a spreadsheet's export in another separator is one column named by all
            f" (its values are separated by {other!r}: dse reads comma-separated values)"
            if other and len(table.columns) == 1
            else did_you_mean(unknown[0], inputs)
        )
        raise DseError(
            f"unknown column(s) {unknown}{hint}",
            file=str(path),
            allowed=", ".join(sorted(inputs)),
        )
    for col in table.columns:
        if label and col == LABEL:
            continue
        if col in bundles:
            _check_bundle_column(table, col, bundles[col], path)
            continue
        inp = inputs[col]
        values = table[col]
        if inp.kind in ("int", "float"):
            numeric = pd.to_numeric(values, errors="coerce")
            bad = values[numeric.isna() & values.notna()]
            if len(bad):
                raise DseError(
                    f"non-numeric value in row {bad.index[0] + 2}",
                    file=str(path),
                    field=col,
                    value=bad.iloc[0],
                    allowed=inp._allowed(),
                )
            table[col] = numeric
        if inp.kind == "str":  # a100-80gb is A100-80GB, as in a study
            table[col] = table[col].map(
                lambda v, inp=inp: inp.canonical(v) if isinstance(v, str) else v
            )
        for v in pd.unique(table[col].dropna()):
            v = inp.canonical(
                v.item() if isinstance(v, np.generic) else v
            )  # 8.0 of an integer input is 8
            try:
                inp.check(v, field=col)
            except StudyError as exc:
                rows = np.flatnonzero((table[col] == v).to_numpy())
                exc.field = (
                    f"row {int(table.index[rows[0]]) + 2}, column {col}" if len(rows) else col
                )
                raise exc.with_file(str(path)) from None
    return table


def _check_bundle_column(table: pd.DataFrame, col: str, bundles: dict, path: Path) -> None:
    """A bundle parameter's column: a bundle's name in every row."""
    names = table[col]
    bad = ~names.isin(list(bundles))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise DseError(
            f"not a bundle of {col}",
            file=str(path),
            field=f"row {int(table.index[row]) + 2}, column {col}",
            value=names.iloc[row],
            allowed=", ".join(bundles),
        )


def _check_alternatives(table: pd.DataFrame, ev, path: Path) -> None:
    """No row sets two alternative inputs (the evaluator would ignore one of them)."""
    for group in ev.exclusive_inputs:
        present = [n for n in group if n in table.columns]
        if len(present) < 2:
            continue
        both = table[present].notna().sum(axis=1) > 1
        if both.any():
            row = int(both.index[np.flatnonzero(both.to_numpy())[0]])
            raise DseError(
                f"row {row + 2} sets {' and '.join(present)}, which are alternatives: evaluator "
                f"'{ev.name}' uses only one of them (the study's fixed values count)",
                file=str(path),
                allowed=f"one of {', '.join(group)} per candidate",
            )


def _with_bundles(table: pd.DataFrame, bundles: dict[str, dict], path: Path) -> pd.DataFrame:
    """``table`` with the inputs of each row's bundles (a bundle parameter of one bundle is
    that bundle where the file has no column for it); an input both a bundle and a column
    of the file set is refused."""
    table = table.copy()
    for name, named in bundles.items():
        if name not in table.columns and len(named) == 1:
            table[name] = next(iter(named))
        if name not in table.columns:
            continue
        keys = list(next(iter(named.values())))
        both = [key for key in keys if key in table.columns]
        if both:
            raise DseError(
                f"{both[0]} is set both by its column and by the bundles of {name}; "
                "give one of them",
                file=str(path),
                field=both[0],
            )
        for key, column in bundle_columns(named, table[name]).items():
            table[key] = column
    return table


def evaluate_csv(plan: RunPlan, path: Path) -> tuple[pd.DataFrame, list[str], dict[str, int]]:
    """The candidates with the study's fixed values filled in, every metric, and
    ``meets_constraints`` (feasible and within the study's constraints); the study's
    searched parameters the file has no column for (nor one of their alternatives), which
    took the evaluator's defaults; and, per searched parameter, how many of its cells were
    empty and took the evaluator's default. ``plan``: the checked study, its evaluator and space."""
    with ended_cleanly_by_signals():
        return _evaluate_csv(plan, path)


def _evaluate_csv(plan: RunPlan, path: Path) -> tuple[pd.DataFrame, list[str], dict[str, int]]:
    study, ev, bundles = plan.study, plan.evaluator, plan.space.bundles
    table = read_candidates(path, ev, bundles)
    labels = table.pop(LABEL) if _has_label(table, ev) else None
    table = _with_bundles(table, bundles, path)
    given = set(table.columns)
    given |= {
        n for group in ev.exclusive_inputs if given & set(group) for n in group
    }  # an alternative was given
    # a searched parameter of one value is as good as fixed (docs/study-file.md)
    single = {
        p.name: p.values[0]
        for p in plan.space.parameters
        if p.values is not None and len(p.values) == 1
    }
    defaulted = [n for n in study.space if n not in given and n not in single]
    blanks = {
        n: int(table[n].isna().sum())
        for n in study.space
        if n in table.columns
        and n not in single
        and n not in bundles
        and ev.inputs[n].default is not None
        and table[n].isna().any()
    }
    for k, v in {
        **single,
        **study.fixed_values,
    }.items():  # missing columns and empty cells: the study's value
        table[k] = table[k].fillna(v) if k in table.columns else v
    _check_alternatives(table, ev, path)
    # a searched parameter the file leaves out: its default, shown in OUT.csv
    for name in defaulted:
        if name not in bundles and ev.inputs[name].default is not None:
            table[name] = ev.inputs[name].default
    # then the evaluator's default, so OUT.csv shows what was used
    for name, inp in ev.inputs.items():
        if name in table.columns and inp.default is not None:
            column = table[name]
            if isinstance(inp.default, str) and column.dtype.kind == "f":
                column = column.astype(object)  # a text column left empty reads as floats
            table[name] = column.fillna(inp.default)
    # as a run evaluates: evaluator.timeout_s holds, and a failing candidate is isolated and
    # recorded (status, error) instead of stopping the command
    result = evaluate_rows(EvaluatorRef.of(study.evaluator), table.reset_index(drop=True))
    full = pd.concat([table.reset_index(drop=True), result], axis=1)
    full["meets_constraints"] = feasible_mask(full, study)
    # an integer input as written (16, not 16.0) where every row has one
    for name, inp in ev.inputs.items():
        col = full.get(name)
        if (
            inp.kind == "int"
            and col is not None
            and col.dtype.kind == "f"
            and col.notna().all()
            and (col == col.round()).all()
        ):
            full[name] = col.astype(np.int64)
    if labels is not None:
        full.insert(0, LABEL, labels.to_numpy())
    return full, defaulted, blanks


def write_evaluated(table: pd.DataFrame, ev, output: Path, study: Study) -> Path:
    """``OUT.csv`` with its CSV-on-the-Web sidecar ``OUT.csv-metadata.json`` (every column's
    unit and description, as ``dse export`` writes them); returns the sidecar's path."""
    import xarray as xr

    from dse import __version__
    from dse.datasets import BOOKKEEPING, variable_attrs
    from dse.outputs.export import write_csv

    def values(name):
        col = table[name]
        return (
            col.to_numpy() if col.dtype.kind in "biuf" else col.astype(str).to_numpy(dtype=object)
        )

    data = {}
    for name in table.columns:
        v = values(name)
        if name in ev.inputs:
            inp = ev.inputs[name]
            attrs = variable_attrs(
                inp.unit if inp.kind in ("int", "float") else "", inp.description, v, "parameter"
            )
        elif name in study.bundles:
            keys = ", ".join(study.bundles[name].keys)
            attrs = variable_attrs("", f"bundle of inputs ({keys})", v, "parameter")
        elif name in ev.metrics:
            m = ev.metrics[name]
            attrs = variable_attrs("" if m.unit == "bool" else m.unit, m.long_name, v, "metric")
        elif name in BOOKKEEPING:
            unit, long_name, description = BOOKKEEPING[name]
            attrs = {
                **variable_attrs(unit or "", long_name, v, "bookkeeping"),
                "description": description,
            }
        elif name == LABEL:
            attrs = {
                **variable_attrs("", "candidate label", v, "bookkeeping"),
                "description": "the row's name, from the candidates file",
            }
        elif name == "meets_constraints":
            attrs = {
                **variable_attrs("", "meets constraints", v, "bookkeeping"),
                "description": "feasible according to the evaluator and meets every study constraint",
            }
        else:  # a column a plug-in returned without declaring it
            attrs = variable_attrs("", name, v, "metric")
        data[name] = xr.Variable("candidate", v, attrs)
    ds = xr.Dataset(
        data,
        attrs={
            "title": f"dse evaluate: {study.name}",
            "source": f"dse {__version__}, evaluator {ev.name} {ev.version}",
        },
    )
    with ended_cleanly_by_signals():
        return write_csv(ds, [table], output, units_row=False)


def write_trajectory(table: pd.DataFrame, ev: Evaluator, output: Path, points: int) -> None:
    """``output``: the evaluator's trajectory (:meth:`~dse.evaluators.Evaluator.trajectory`)
    of every candidate of ``table`` (:func:`evaluate_csv`'s), ``points`` rows each, with the
    rows' :data:`LABEL` beside ``candidate`` where the candidates file names them."""
    from dse.files import atomic_path

    inputs = table[[c for c in table.columns if c in ev.inputs]]
    with ended_cleanly_by_signals():
        try:
            out = ev.trajectory(inputs, points)
        except (ValueError, ArithmeticError, TypeError, KeyError) as exc:
            raise DseError(
                f"evaluator '{ev.name}' could not give the trajectory: {exc}",
                field="--trajectory",
                value=str(output),
            ) from None
        if LABEL in table.columns and "candidate" in out.columns:
            labels = table[LABEL].to_numpy()[out["candidate"].to_numpy(dtype=int)]
            out.insert(int(out.columns.get_loc("candidate")) + 1, LABEL, labels)
        with atomic_path(output) as tmp, open(tmp, "w", newline="") as f:
            out.to_csv(f, index=False)
