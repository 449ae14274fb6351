"""The results as xarray Datasets over a ``candidate`` dimension, following the CF conventions.

Parameters are coordinates on ``candidate`` (so ``ds.set_index(candidate=[...]).unstack()``
gives a grid); metrics and bookkeeping are data variables. Every numeric variable has a
UDUNITS-2 ``units`` (``"1"`` when dimensionless), text variables have none, booleans are
CF flags; ``long_name`` is short and a longer text goes in ``description``. An
evaluator's own unit label (``tokens/s``, ``USD``, ``GB``) is kept in ``display_units``
where UDUNITS spells it differently. The study, the evaluator's name and version and the
results format version are attributes.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from dse import __version__
from dse.evaluators.base import Evaluator
from dse.files import FORMAT_VERSION, NETCDF_ENGINE, atomic_path
from dse.pareto import feasible_mask
from dse.space import Space
from dse.study import Study

CONVENTIONS = "CF-1.11"

#: unit labels evaluators use that UDUNITS-2 does not parse, and what the datasets write.
#: Counted things (tokens, sequences, steps) and money are dimensionless to UDUNITS.
CF_UNITS = {
    "": "1",
    "GB": "Gbyte",
    "GiB": "1073741824 byte",
    "GB/s": "Gbyte/s",
    "MWh": "MW h",
    "kWh": "kW h",
    "tokens": "1",
    "sequences": "1",
    "steps": "1",
    "nats/token": "1",
    "bit/token": "bit",
    "tokens/s": "s-1",
    "tokens/J": "J-1",
    "USD": "1",
    "USD/h": "h-1",
    "USD/kWh": "1/(kW h)",
    "kg/kWh": "kg/(kW h)",
}
#: temperature rates are differences, not points on the Celsius scale (CF 1.11, section 3.1.2)
_TEMPERATURE_METADATA = {"degC/s": "temperature: difference"}

BOOKKEEPING = {  # name: (units or None for text and flags, long_name, description)
    "feasible": (None, "feasible", "feasible according to the evaluator"),
    "reason": (None, "infeasibility reason", "why the evaluator found the candidate infeasible"),
    "status": (None, "evaluation status", "ok or failed"),
    "error": (None, "error message", "error message of a failed evaluation"),
    "elapsed_s": ("s", "evaluation time", "evaluation time per candidate"),
    "batch": ("1", "search batch", "search batch in which the candidate was evaluated"),
    "key": (
        "1",
        "candidate key",
        "integer candidate key: the position in the grid of a discrete space, else a 64-bit hash of the parameter values",
    ),
}


def variable_attrs(label: str, text: str, values: np.ndarray, role: str) -> dict:
    """CF attributes of one variable from an evaluator's unit ``label`` and description ``text``."""
    long_name, description = short_name(text)
    attrs: dict = {"long_name": long_name}
    if description:
        attrs["description"] = description
    if values.dtype.kind == "b":
        attrs.update(flag_values=np.array([0, 1], np.int8), flag_meanings="false true")
    elif values.dtype.kind in "iuf":
        units = CF_UNITS.get(label, label)
        attrs["units"] = units
        if label and units != label:
            attrs["display_units"] = label
        if label in _TEMPERATURE_METADATA:
            attrs["units_metadata"] = _TEMPERATURE_METADATA[label]
    attrs["role"] = role
    return attrs


def short_name(text: str) -> tuple[str, str]:
    """``(long_name, description)``: the text without its bracketed asides, up to its first
    semicolon or colon ("peak (busy-phase) power per accelerator" is "peak power per
    accelerator"), and the whole text when that is longer."""
    short, previous = text, None
    while short != previous:  # innermost brackets first
        previous, short = short, re.sub(r"\s*\([^()]*\)", "", short)
    short = re.sub(r"\s+", " ", re.split(r"; |: ", short, maxsplit=1)[0]).strip(" ,:") or text
    return short, (text if text != short else "")


def display_unit(var: xr.DataArray) -> str:
    """The unit label to show a person: the evaluator's own, else the CF units ('' for 1)."""
    return unit_label(var.attrs)


def unit_label(attrs: dict) -> str:
    """:func:`display_unit` from a variable's attributes."""
    unit = attrs.get("display_units", attrs.get("units", ""))
    return "" if unit == "1" else unit


def columns(ds: xr.Dataset) -> list[str]:
    """Parameters (coordinates) first, then the data variables."""
    return [n for n in ds.coords if n != "candidate"] + list(ds.data_vars)


def to_table(ds: xr.Dataset) -> pd.DataFrame:
    """One row per candidate, one column per parameter and variable (the dataset in memory)."""
    return pd.DataFrame({n: np.asarray(ds[n].values) for n in columns(ds)})


def to_dataset(
    table: pd.DataFrame,
    study: Study,
    evaluator: Evaluator,
    space: Space,
    *,
    kind: str,
    attrs: dict | None = None,
) -> xr.Dataset:
    """An xarray Dataset over ``candidate``: parameters as coordinates, metrics, status.
    ``attrs`` (the search's labels: how exact the front is, evaluations spent) are added."""
    inputs, metrics = evaluator.inputs, evaluator.metrics
    coords: dict = {
        "candidate": (
            "candidate",
            np.arange(len(table)),
            {"units": "1", "long_name": "candidate index"},
        )
    }
    for name in space.names:
        if name in table:
            inp = inputs.get(name)
            values = _column_values(table[name])
            if name in space.bundles:  # a bundle's name: what it sets is in the study attribute
                keys = ", ".join(next(iter(space.bundles[name].values())))
                described = f"bundle of inputs ({keys})"
            else:
                described = inp.description if inp else name
            coords[name] = (
                "candidate",
                values,
                variable_attrs(inp.unit if inp else "", described, values, "parameter"),
            )
    data_vars = {}
    for name, m in metrics.items():
        if name in table:
            values = _column_values(table[name])
            label = "" if m.unit == "bool" else m.unit
            data_vars[name] = (
                "candidate",
                values,
                variable_attrs(label, m.long_name, values, "metric"),
            )
    for name, (unit, long_name, description) in BOOKKEEPING.items():
        if name in table:
            values = _column_values(table[name])
            var_attrs = variable_attrs(unit or "", long_name, values, "bookkeeping")
            data_vars[name] = ("candidate", values, {**var_attrs, "description": description})
    if "feasible" in table or "status" in table:
        values = feasible_mask(table, study)
        data_vars["meets_constraints"] = (
            "candidate",
            values,
            {
                **variable_attrs("", "meets constraints", values, "bookkeeping"),
                "description": "feasible according to the evaluator and meets every study constraint",
            },
        )
    ds = xr.Dataset(data_vars, coords=coords)
    ds.attrs.update(
        {
            "Conventions": CONVENTIONS,
            "title": f"dse {kind}: {study.name}",
            "source": f"dse {__version__}, evaluator {evaluator.name} {evaluator.version}",
            "kind": kind,
            "study_name": study.name,
            "study": study.to_yaml(),
            "objectives": ", ".join(f"{o.direction} {o.metric}" for o in study.objectives),
            "constraints": "; ".join(str(c) for c in study.constraints),
            "fixed": ", ".join(f"{k}={v}" for k, v in study.fixed_values.items()),
            "evaluator": evaluator.name,
            "evaluator_version": evaluator.version,
            "format_version": FORMAT_VERSION,
            "dse_version": __version__,
            **evaluator.attributes(),
        }
    )
    ds.attrs.update(attrs or {})
    return ds


def _column_values(col: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(col):
        return col.to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(col):
        return col.to_numpy()
    return col.astype(str).to_numpy(dtype=object)


def write_netcdf(ds: xr.Dataset, path) -> None:
    """Write a dataset atomically (temporary file, then rename). The netCDF library reports
    a failed write (a full disk) as ``RuntimeError: NetCDF: HDF error``: said as the
    OSError it is, naming the file and the space left."""
    with atomic_path(path) as tmp:
        try:
            _to_netcdf_apart(ds, tmp)
        except RuntimeError as exc:
            import errno
            import shutil

            try:
                free = f"; {shutil.disk_usage(Path(path).parent).free / 1e6:,.1f} MB left on its file system"
            except OSError:
                free = ""
            raise OSError(
                errno.EIO, f"cannot write: the netCDF library failed ({exc}){free}", str(path)
            ) from None


def _to_netcdf_apart(ds: xr.Dataset, path) -> None:
    """``ds.to_netcdf(path)`` on a thread of its own, waited for here. Ctrl-C (Python raises
    KeyboardInterrupt in the main thread only) then interrupts the wait, never xarray's
    writer: interrupted there, the writer kept the HDF5 lock it held and its own clean-up
    waited for that lock for ever (a run hung after Ctrl-C while its datasets were written).
    The thread writes a file of its own name beside ``path`` (renamed onto it when done), so
    that a writer left behind by an interrupt never meets the next one; that file is removed
    as the wait is given up (the thread writes on into the unlinked file, or removes the file
    itself if it creates it later), and a process that ends first leaves it to
    :meth:`~dse.store.ResultStore` (its private folder ``.NAME.RANDOM.PID.tmp``: removed once the pid is gone)."""
    import os
    import threading
    import uuid

    path = Path(path)  # in atomic_path's private folder, .NAME.RANDOM.PID.tmp
    own = path.with_name(f".{uuid.uuid4().hex[:8]}.{path.name}")
    failed: list[BaseException] = []
    lock, state = threading.Lock(), {"abandoned": False}

    def write() -> None:
        try:
            ds.to_netcdf(own, engine=NETCDF_ENGINE)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            failed.append(exc)
        with lock:
            if state["abandoned"]:
                own.unlink(missing_ok=True)

    writer = threading.Thread(target=write, name="dse-netcdf-writer", daemon=True)
    writer.start()
    try:
        while writer.is_alive():
            writer.join(0.2)
    except BaseException:
        with lock:
            state["abandoned"] = True
            own.unlink(missing_ok=True)
        raise
    if failed:
        own.unlink(missing_ok=True)
        raise failed[0]
    os.replace(own, path)


def _log_layout(store, *, widths: bool = True) -> tuple[list[np.ndarray], dict[str, int]]:
    """Per log file, the rows a dataset shows (kept by the study's policy, and the first
    time the candidate was written: a re-asked batch may store one twice), and (``widths``)
    the longest UTF-8 value (bytes) of every text column, read from the log's narrow columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from dse.keyindex import KeyIndex
    from dse.store import log_file_schema

    seen, masks, longest = KeyIndex(), [], {}
    files = store.log_files()
    schema = log_file_schema(files[0]) if files and widths else None
    text = (
        [
            f.name
            for f in schema
            if pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type)
            or pa.types.is_dictionary(f.type)
        ]
        if schema
        else []
    )
    for _, table in store.scan(["key", "kept", *text]):
        keys = table.column("key").to_numpy()
        once = np.zeros(len(keys), bool)
        once[np.unique(keys, return_index=True)[1]] = True
        first = once & (seen.find(keys) < 0)
        seen.add(keys[first], np.zeros(int(first.sum()), np.int64))
        masks.append(first & table.column("kept").to_numpy(zero_copy_only=False))
        for name, col in zip(table.column_names, table.columns, strict=True):
            if (
                pa.types.is_string(col.type)
                or pa.types.is_large_string(col.type)
                or pa.types.is_dictionary(col.type)
            ):
                n = pc.max(pc.binary_length(col.cast(pa.string()))).as_py() or 0
                longest[name] = max(longest.get(name, 1), n)
    return masks, longest


def _text_as_bytes(ds: xr.Dataset) -> xr.Dataset:
    """Text variables as fixed-width UTF-8 character arrays (``_Encoding: utf-8``), as
    :func:`log_dataset` writes them: xarray reads them back as strings, and HDF5 writes
    them as fast as numbers (variable-length strings cost about a microsecond each)."""
    out = ds.copy()
    for name, var in ds.variables.items():
        if var.dtype.kind == "O":
            width = (
                max((len(str(v).encode()) for v in pd.unique(var.values.ravel())), default=1) or 1
            )
            out[name] = xr.Variable(
                var.dims, _fixed_bytes(var.values, width), {**var.attrs, "_Encoding": "utf-8"}
            )
    return out


def _fixed_bytes(values: np.ndarray, width: int) -> np.ndarray:
    """Text as UTF-8 bytes of a fixed width (each distinct value encoded once)."""
    codes, uniques = pd.factorize(
        pd.Series(values, dtype=object).astype(str), use_na_sentinel=False
    )
    return np.array([u.encode() for u in uniques], dtype=f"S{width}")[codes]


#: rows per chunk of a lazily written dataset (log files are grouped up to this size)
BLOCK_ROWS = 262_144


def _blocks(sizes: list[int], rows: int) -> list[list[int]]:
    """Consecutive file numbers grouped so that each group holds about ``rows`` rows."""
    blocks, current, n = [], [], 0
    for i, size in enumerate(sizes):
        current.append(i)
        n += size
        if n >= rows:
            blocks.append(current)
            current, n = [], 0
    return blocks + ([current] if current else [])


def log_dataset(
    store,
    study: Study,
    evaluator: Evaluator,
    space: Space,
    *,
    text: str = "bytes",
    keep: list[str] | None = None,
    template: xr.Dataset | None = None,
) -> xr.Dataset:
    """The evaluation log's shown rows as a lazy (dask-backed) Dataset, one chunk per group of
    log files (:data:`BLOCK_ROWS`), with the variables and attributes of :func:`to_dataset`
    (which builds a one-row template): nothing is read until it is computed or written, and
    a variable's chunk reads only its own column of the log's files (their other columns are
    not decompressed).

    ``text="bytes"``: text variables are fixed-width UTF-8 bytes marked ``_Encoding: utf-8``
    (netCDF char arrays that xarray reads back as strings): unlike variable-length strings,
    xarray writes them chunk by chunk without loading the whole column first. ``text="str"``:
    they are Python strings, as a netCDF file read back gives them (what every command
    reads). ``keep``: the variables to make (the others are left out; coordinates too).
    ``template``: a dataset of the same variables (the run's ``pareto.nc``, whose rows are
    log rows) that gives them their attributes instead of ``evaluator``, which may then be
    None (a plug-in evaluator need not be installed where its results are read).
    """
    import dask
    import dask.array as da

    files = store.log_files()
    masks, widths = _log_layout(store, widths=text == "bytes")
    # bytes (written): blocks of BLOCK_ROWS; str (read on indexing): a block per file, the
    # last one read kept per variable (a reader's consecutive slices decode each file once)
    blocks = _blocks([int(m.sum()) for m in masks], BLOCK_ROWS if text == "bytes" else 1)
    sizes = [sum(int(masks[i].sum()) for i in block) for block in blocks]
    nonempty = [b for b, n in enumerate(sizes) if n]
    if not nonempty:
        return to_dataset(pd.DataFrame(), study, evaluator, space, kind="evaluations")
    if template is None:
        first = next(i for i, m in enumerate(masks) if m.any())
        one = store.read_file(files[first]).filter(masks[first]).slice(0, 1)
        template = to_dataset(
            one.drop_columns(["kept"]).to_pandas(), study, evaluator, space, kind="evaluations"
        )
    block_of = {b: blocks[b] for b in nonempty}

    def read(b: int, names: list[str]):
        return _block_columns(
            store, [files[i] for i in block_of[b]], [masks[i] for i in block_of[b]], names
        )

    def values(b: int, name: str) -> np.ndarray:
        if name == "meets_constraints":
            needed = [
                "feasible",
                "status",
                *(o.metric for o in study.objectives),
                *(c.metric for c in study.constraints),
            ]
            return feasible_mask(read(b, list(dict.fromkeys(needed))).to_pandas(), study)
        var = template.variables[name]
        col = read(b, [name]).column(name)
        return _variable_values(col, var.dtype.kind == "O", text, widths.get(name, 1))

    data = {}
    for name, var in template.variables.items():
        if name == "candidate" or (keep is not None and name not in keep):
            continue
        is_text = var.dtype.kind == "O"
        if is_text and text == "bytes":
            dtype, attrs = np.dtype(f"S{widths.get(name, 1)}"), {**var.attrs, "_Encoding": "utf-8"}
        else:
            dtype, attrs = var.dtype, var.attrs
        if text == "bytes":  # dask chunks: written block by block (synchronously: see the writer)
            array = da.concatenate(
                [
                    da.from_delayed(
                        dask.delayed(values, pure=True)(b, name), shape=(sizes[b],), dtype=dtype
                    )
                    for b in nonempty
                ]
            )
        else:  # read on indexing, only the blocks a slice touches (no dask threads)
            array = xr.core.indexing.LazilyIndexedArray(
                _LogColumn(name, dtype, [sizes[b] for b in nonempty], nonempty, values)
            )
        data[name] = xr.Variable(var.dims, array, attrs)
    coords = {n: data.pop(n) for n in list(data) if n in template.coords}
    ds = xr.Dataset(data, coords={**coords, "candidate": np.arange(sum(sizes))})
    ds["candidate"].attrs.update(template["candidate"].attrs)
    ds.attrs.update(template.attrs)
    return ds


class _LogColumn(xr.backends.BackendArray):
    """One variable of :func:`log_dataset` read lazily, as a netCDF backend serves one: an
    index reads the column from the log blocks it touches (a block: consecutive log files)."""

    def __init__(self, name, dtype, sizes, blocks, values) -> None:
        self.name, self.dtype, self.blocks, self._values = name, np.dtype(dtype), blocks, values
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.shape = (int(self.starts[-1]),)
        self._last: tuple[int, np.ndarray] | None = None

    def values(self, block: int) -> np.ndarray:
        if self._last is None or self._last[0] != block:
            self._last = (block, self._values(block, self.name))
        return self._last[1]

    def __getitem__(self, key):
        return xr.core.indexing.explicit_indexing_adapter(
            key, self.shape, xr.core.indexing.IndexingSupport.OUTER, self._read
        )

    def _read(self, key: tuple) -> np.ndarray:
        (k,) = key
        rows = np.arange(self.shape[0])[k]
        if rows.size == 0:
            return np.empty(rows.shape, self.dtype)
        first = int(np.searchsorted(self.starts, rows.min(), side="right")) - 1
        last = int(np.searchsorted(self.starts, rows.max(), side="right")) - 1
        parts = [self.values(self.blocks[b]) for b in range(first, last + 1)]
        values = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return values[rows - self.starts[first]]


def _block_columns(store, files: list, masks: list[np.ndarray], names: list[str]):
    """The shown rows (``masks``) of ``names`` in ``files``, one table; a column a file lacks
    (a chunk that failed whole has only the declared metrics) is null there."""
    import pyarrow as pa

    tables = []
    for path, mask in zip(files, masks, strict=True):
        t = store.read_file(path, names)
        t = t if mask.all() else t.filter(mask)
        for name in names:
            if name not in t.column_names:
                t = t.append_column(name, pa.nulls(t.num_rows))
        tables.append(t.select(names))
    return pa.concat_tables(tables, promote_options="permissive")


def _variable_values(col, is_text: bool, text: str, width: int) -> np.ndarray:
    """A log column's values as :func:`to_dataset` makes them (text as fixed-width UTF-8
    bytes, ``text="bytes"``, or Python strings): a column without nulls is converted from
    Arrow directly (text through its dictionary), one with nulls (cells a study does not
    keep) through pandas, as to_dataset does."""
    import pyarrow as pa
    import pyarrow.compute as pc

    as_bytes = is_text and text == "bytes"
    if col.null_count or not (
        is_text
        or pa.types.is_integer(col.type)
        or pa.types.is_floating(col.type)
        or pa.types.is_boolean(col.type)
    ):
        values = _column_values(col.to_pandas())
        return _fixed_bytes(values, width) if as_bytes else values
    if is_text:
        coded = pc.dictionary_encode(
            col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col
        ).combine_chunks()  # a block is never empty (log_dataset skips empty ones)
        words = coded.dictionary.to_pylist()
        words = (
            np.array([w.encode() for w in words], dtype=f"S{width}")
            if as_bytes
            else np.array(words, dtype=object)
        )
        return words[coded.indices.to_numpy(zero_copy_only=False)]
    return col.to_numpy()


#: logs of at most this many rows are written in one piece (no dask graph to build)
EAGER_ROWS = 200_000


def write_log_dataset(
    store, study: Study, evaluator: Evaluator, space: Space, path, attrs: dict | None = None
) -> None:
    """Write the log's shown rows to ``path`` (netCDF) with ``attrs`` added: a small log in
    one piece, a large one as :func:`log_dataset`, chunk by chunk, so memory stays at a few
    log files whatever the log's size."""
    if store.check_log() <= EAGER_ROWS:
        ds = to_dataset(store.load_evaluations(), study, evaluator, space, kind="evaluations")
        write_netcdf(_text_as_bytes(ds).assign_attrs(attrs or {}), path)
        return
    import dask

    ds = log_dataset(store, study, evaluator, space).assign_attrs(attrs or {})
    with dask.config.set(scheduler="synchronous"):  # one block at a time: threads only contend
        # for the GIL and HDF5's lock (10^6 rows: 3.7 s against 4.0-6.0 s with two threads)
        write_netcdf(ds, path)
