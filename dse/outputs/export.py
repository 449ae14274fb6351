"""Export a run's Pareto set or all its evaluations: CSV, Parquet, netCDF, zarr, JSON.

Units travel with every format: netCDF and zarr carry the dataset's CF attributes;
Parquet carries ``units`` and ``long_name`` in each field's Arrow metadata (and the
dataset attributes in the schema's ``dse`` entry); CSV gets a CSV-on-the-Web sidecar
``<file>-metadata.json`` (column titles, units as ``schema:unitText``, descriptions) and,
with ``units_row``, a second header row of units; JSON is a JSON Table Schema document
(``pandas.read_json(path, orient="table")``) with each field's units in the schema.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from dse.datasets import columns, display_unit, to_table, write_netcdf
from dse.errors import DseError
from dse.files import (
    atomic_folder,
    atomic_path,
    atomic_write_text,
    names_a_file_type,
)
from dse.outputs.target import output_path
from dse.results import DATASETS, open_results

#: candidates written at a time by an export of every evaluation (a few tens of MB of table)
EXPORT_ROWS = 1 << 16
SUFFIX = {"csv": ".csv", "parquet": ".parquet", "netcdf": ".nc", "zarr": ".zarr", "json": ".json"}


def export_format(fmt: str | None, output: Path | None) -> str:
    """The format to write: ``fmt`` when given, else the one ``output``'s suffix names, else
    CSV. A suffix of another known format than ``fmt`` is refused (a file named .parquet
    holding CSV helps nobody)."""
    suffix = Path(output).suffix.lower() if output else ""
    named = {suffix: name for name, suffix in SUFFIX.items()}.get(suffix)
    if fmt is None:
        # a suffix that reads as a file type (.xlsx, .tsv) but not one of ours is refused;
        # a dot inside a name (front-0.5, gpt-1.3b) is no suffix: CSV
        if named is None and names_a_file_type(suffix):
            raise DseError(
                f"cannot tell the format from the output's suffix {Path(output).suffix}",
                field="--output",
                value=str(output),
                allowed=f"a file ending in {', '.join(SUFFIX.values())}, or --format",
            )
        return named or "csv"
    if named is not None and named != fmt:
        raise DseError(
            f"--format {fmt} does not match the output's suffix {Path(output).suffix} ({named})",
            field="--output",
            value=str(output),
            allowed=f"a {SUFFIX.get(fmt, fmt)} file, or no --format",
        )
    return fmt


def export_results(
    results: Path,
    fmt: str | None,
    *,
    front: bool = True,
    output: Path | None = None,
    units_row: bool = False,
) -> Path:
    """Write the dataset in ``fmt`` (None: from ``output``'s suffix, else CSV); returns the
    path written, or (netCDF onto the run's own ``pareto.nc``, the default) that file,
    checked and left as the run wrote it. Every evaluation is read from the log (the only
    copy at rest) and written block by block."""
    fmt = export_format(fmt, output)
    if fmt not in SUFFIX:
        raise DseError(f"unknown export format '{fmt}'", allowed=", ".join(SUFFIX))
    if units_row and fmt != "csv":
        raise DseError(f"--units-row applies to CSV only, not to {fmt}", allowed="csv")
    run = open_results(results)
    stem = "pareto" if front else "evaluations"
    default = Path(results) / f"{stem}{SUFFIX[fmt]}"

    def source():  # every evaluation is read slice by slice (a run may not fit in memory), the front whole
        if front:
            return contextlib.nullcontext(run.feasible_front())
        # netCDF takes text best as fixed-width UTF-8 (written block by block)
        return run.open_dataset(front=False, text="bytes" if fmt == "netcdf" else "str")

    if (
        fmt == "netcdf"
        and front
        and Path(output or default).resolve() == (Path(results) / DATASETS[front]).resolve()
    ):
        with source():  # the run's own dataset is the export: checked as every export's source is, not rewritten
            return Path(output or default)
    output = output_path(output, default, run.path, may_be_folder=fmt == "zarr")
    with source() as ds:
        if fmt == "zarr":
            write_zarr(ds, output)
        elif fmt == "csv":
            write_csv(ds, tables(ds), output, units_row=units_row)
        elif fmt == "netcdf":
            write_netcdf(ds, output)  # atomic, and a full disk said as one
        else:
            with atomic_path(
                output
            ) as tmp:  # whole or not at all, fsynced (as every file dse writes)
                if fmt == "parquet":
                    write_parquet(ds, tables(ds), tmp)
                else:
                    write_json(ds, tables(ds), tmp)
    return output


def tables(ds: xr.Dataset, rows: int | None = None) -> Iterator[pd.DataFrame]:
    """The dataset as tables of at most ``rows`` (default :data:`EXPORT_ROWS`) candidates
    (:func:`to_table` of each slice; a lazily opened dataset reads only that slice)."""
    rows = rows or EXPORT_ROWS
    n = int(ds.sizes["candidate"])
    for start in range(0, max(n, 1), rows):
        yield to_table(ds.isel(candidate=slice(start, min(start + rows, n))))


def write_json(ds: xr.Dataset, parts: Iterable[pd.DataFrame], output: Path) -> None:
    """A JSON Table Schema document as ``pandas.read_json(path, orient="table")`` reads it:
    ``{"schema": {"fields": [...], "pandas_version": ...}, "data": [one object per row],
    "attributes": {...}}``. Each field carries its ``type`` and the variable's CF ``units``,
    ``display_units``, ``long_name`` and ``description``; ``attributes`` holds the
    dataset's (pandas ignores both). The rows are written as they come (no document of every
    row is built in memory)."""
    parts = iter(parts)
    first_part = next(parts, None)
    info = variables(ds)
    fields = []
    if first_part is not None:
        for name in first_part.columns:
            col = first_part[name]
            field = {"name": str(name), "type": _table_type(col)}
            field.update(info.get(str(name), {}))
            fields.append(field)
    head = json.dumps(
        {"schema": {"fields": fields, "pandas_version": "1.4.0"}}, indent=1, allow_nan=False
    )
    with open(output, "w") as f:
        f.write(head[:-2] + ',\n "data": [')  # the object without its closing brace
        first = True
        for part in [first_part, *parts] if first_part is not None else []:
            for record in _json_records(part):
                f.write(("\n  " if first else ",\n  ") + json.dumps(record, allow_nan=False))
                first = False
        f.write(
            "\n ],\n"
            + ' "attributes": '
            + json.dumps(_attributes(ds), allow_nan=False, default=str)
            + "\n}\n"
        )


def _table_type(col: pd.Series) -> str:
    """The JSON Table Schema type pandas reads a column back as: a column with missing
    values that pandas would not hold as a number is ``any`` (object), as read."""
    kind = col.dtype.kind
    if kind == "b":
        return "boolean"
    if kind in "iu":
        return "integer"
    if kind == "f":
        return "number"
    return "any"


def _json_records(table) -> list[dict]:
    """One JSON object per row; every float exactly as stored (Python's shortest repr that
    reads back to the same double: pandas' to_json keeps 10 digits), NaN and infinities null."""

    def plain(v):
        if isinstance(v, np.generic):
            v = v.item()
        return None if isinstance(v, float) and not np.isfinite(v) else v

    return [{k: plain(v) for k, v in row.items()} for row in table.to_dict(orient="records")]


def variables(ds: xr.Dataset) -> dict[str, dict[str, str]]:
    """Per column: CF ``units`` (absent for text and flags), the unit a person reads, ``long_name``."""
    out = {}
    for n in columns(ds):
        a = ds[n].attrs
        unit = a.get("units")
        out[n] = {
            k: v
            for k, v in (
                ("units", unit),
                ("display_units", unit and display_unit(ds[n])),
                ("long_name", a.get("long_name", n)),
                ("description", a.get("description")),
            )
            if v is not None
        }
    return out


def _attributes(ds: xr.Dataset) -> dict:
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in ds.attrs.items()}


def write_csv(
    ds: xr.Dataset, parts: Iterable[pd.DataFrame], output: Path, *, units_row: bool
) -> Path:
    """Tables with the same columns as one CSV, optionally with a units row under the
    header, and its CSVW sidecar."""
    info = variables(ds)
    names: list[str] = columns(ds)
    with atomic_path(output) as tmp, open(tmp, "w", newline="") as f:
        for i, part in enumerate(parts):
            if i == 0:  # the header is the first table's (the caller's column order)
                names = [str(c) for c in part.columns]
                f.write(",".join(names) + "\n")
                if units_row:
                    f.write(
                        ",".join(
                            ds[n].attrs.get("display_units", ds[n].attrs.get("units", ""))
                            for n in names
                        )
                        + "\n"
                    )
            part.to_csv(f, index=False, header=False)
    types = {"b": "boolean", "i": "integer", "u": "integer", "f": "double"}
    columns_ = []
    for n in names:
        col = {
            "name": n,
            "titles": n,
            "datatype": types.get(ds[n].dtype.kind, "string"),
            "dc:title": info[n]["long_name"],
        }
        if "units" in info[n]:
            col["schema:unitText"] = ds[n].attrs.get("display_units", info[n]["units"])
        if "description" in info[n]:
            col["dc:description"] = info[n]["description"]
        columns_.append(col)
    sidecar = {
        "@context": "http://www.w3.org/ns/csvw",
        "url": output.name,
        "dc:title": ds.attrs.get("title", ""),
        "dc:source": ds.attrs.get("source", ""),
        "dialect": {"headerRowCount": 2 if units_row else 1},
        "tableSchema": {"columns": columns_},
    }
    path = sidecar_of(output)
    atomic_write_text(path, json.dumps(sidecar, indent=1) + "\n")
    return path


def sidecar_of(output: Path) -> Path:
    """The CSV-on-the-Web description written beside ``output`` (``FILE-metadata.json``)."""
    return output.with_name(output.name + "-metadata.json")


def write_parquet(ds: xr.Dataset, parts: Iterable[pd.DataFrame], output: Path) -> None:
    """Typed columns; each field's Arrow metadata holds its ``units`` and ``long_name``; one
    row group per table of ``parts`` (the first sets the schema)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    info = variables(ds)
    writer, schema = None, None
    try:
        for part in parts:
            if writer is None:
                tbl = pa.Table.from_pandas(part, preserve_index=False)
                fields = [
                    f.with_metadata({k.encode(): str(v).encode() for k, v in info[f.name].items()})
                    for f in tbl.schema
                ]
                meta = dict(tbl.schema.metadata or {})
                meta[b"dse"] = json.dumps({"attributes": _attributes(ds)}).encode()
                schema = pa.schema(fields, metadata=meta)
                writer = pq.ParquetWriter(output, schema)
                tbl = pa.Table.from_arrays(tbl.columns, schema=schema)
            else:
                tbl = pa.Table.from_pandas(part, schema=schema, preserve_index=False)
            writer.write_table(tbl)
    finally:
        if writer is not None:
            writer.close()


def write_zarr(ds: xr.Dataset, output: Path) -> None:
    """Zarr format 2 with consolidated metadata: every zarr reader opens it, and neither
    writing nor ``xr.open_zarr`` warns (format 3 has no specification yet for fixed-width
    strings nor for consolidated metadata). Text is written as variable-length strings."""
    text = {n: v.astype(object) for n, v in ds.variables.items() if v.dtype.kind in "US"}
    out = ds.assign_coords({n: v for n, v in text.items() if n in ds.coords})
    out = out.assign({n: v for n, v in text.items() if n not in ds.coords})
    for v in out.variables.values():
        v.encoding = {}
        if "flag_values" in v.attrs:
            v.attrs["flag_values"] = np.asarray(v.attrs["flag_values"]).tolist()
    with atomic_folder(output) as tmp:  # the old store (or none) until the new one is whole
        out.to_zarr(tmp, mode="w-", zarr_format=2, consolidated=True)
