"""Evaluated chunks as log rows, built where they were evaluated (on the workers).

:class:`LogRows` is the executor's ``finish`` for a run: it turns an evaluator's result
table into the log's columns, encodes them as a log file's bytes, and picks out what the
run loop needs decoded: the narrow columns (key, the objective and constraint metrics,
the verdict), the chunk's summary for the running front (tallies, what ruled candidates
out, its own non-dominated feasible rows and their objectives) and those rows in full. So
the main process neither decodes nor re-encodes a chunk, nor sorts its rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dse.files import stage_file
from dse.keyindex import consecutive
from dse.pareto import summarize
from dse.store import LogChunk, encode, write_encoded
from dse.study import Study

#: the fewest rows a worker writes as a log file itself (a smaller chunk, a slow evaluator's,
#: goes back as bytes, which the run groups with others into one file)
STAGED_ROWS = 2048


@dataclass(frozen=True)
class LogRows:
    """The log rows of a chunk: the candidate's ``key`` (the chunk's index), the ``batch``,
    the searched ``parameters``, every result column, and ``kept`` (True: the runner clears
    it, and the cells it does not keep, where the study keeps less). ``narrow``: the
    columns the chunk's summary is made of, sent back decoded when ``told`` (the search
    driver reads them); else only the key goes back with the encoded rows, or for
    consecutive keys (an enumeration's chunk) only the first."""

    study: Study
    parameters: tuple[str, ...]
    batch: int
    narrow: tuple[str, ...] = ()
    told: bool = True
    #: the log's folder, where the workers share this machine's file system (a local
    #: cluster): a chunk of at least :data:`STAGED_ROWS` rows is written there by the worker
    #: (:func:`dse.files.stage_file`) and only its name goes back
    stage_in: str | None = None

    def __call__(self, candidates: pd.DataFrame, result: pd.DataFrame) -> LogChunk:
        n = len(candidates)
        keys = candidates.index.to_numpy(dtype=np.int64)
        if not result.columns.is_unique:
            raise ValueError(
                f"duplicate result columns: {sorted(set(result.columns[result.columns.duplicated()]))}"
            )
        columns = [
            pa.array(keys),
            pa.array(np.full(n, self.batch, np.int32)),
            *(arrow_column(candidates[name]) for name in self.parameters),
            *(arrow_column(result[name]) for name in result.columns),
            pa.array(np.ones(n, bool)),
        ]
        names = ["key", "batch", *self.parameters, *(str(name) for name in result.columns), "kept"]
        table = pa.Table.from_arrays(columns, names=names)
        narrow = table.select([c for c in ("key", *self.narrow) if c in names])
        summary = summarize(narrow.to_pandas(), self.study)
        # the columns sent back, copied (take): the table shares the evaluator's arrays, which
        # an evaluator may reuse for its next call while this chunk waits to be told
        # (an enumeration's consecutive keys, not told: none; the run knows them by the first)
        first_key = None if self.told or not consecutive(keys) else int(keys[0])
        if first_key is None:
            sent = (narrow if self.told else narrow.select(["key"])).take(pa.array(np.arange(n)))
        else:
            sent = narrow.select([]).slice(0, 0)
        contender_rows = table.take(pa.array(summary.contenders))
        kept = self._kept(table, summary)
        # the run's front reads the tallies and the contenders only: no flag per row goes back
        summary = replace(summary, ok=np.zeros(0, bool))
        if self.stage_in is not None and n >= STAGED_ROWS:
            try:  # encoded straight into the file (no buffer of the bytes first)
                staged = stage_file(
                    Path(self.stage_in) / "staged.arrow", partial(write_encoded, kept)
                )
            except OSError:  # the bytes go back: the run writes them, or says why it cannot
                pass
            else:
                return LogChunk(None, sent, contender_rows, summary, str(staged), first_key, n)
        return LogChunk(encode(kept), sent, contender_rows, summary, None, first_key, n)

    def _kept(self, table: pa.Table, summary) -> pa.Table:
        """The rows as the study's ``output.keep`` stores them: every row's key, batch, verdict
        and told metrics; the other cells only of the feasible rows (``feasible``) or of the
        chunk's own non-dominated feasible rows (``front``: only those can be on the front;
        the front's rows, the run's own, are among them). Done here, on the worker: the main
        process appends the bytes as they came."""
        keep = self.study.output.keep
        if keep == "all":
            return table
        kept = summary.ok.copy() if keep == "feasible" else np.zeros(table.num_rows, bool)
        if keep == "front":
            kept[summary.contenders] = True
        if kept.all():  # nothing dropped: the rows as they are, without a copy
            return table
        stays = {"key", "batch", *self.narrow}
        columns = []
        for name in table.column_names:
            col = table.column(name)
            if name == "kept":
                col = pa.array(kept)
            elif name not in stays:
                col = blank(col, kept)
            columns.append(col)
        return pa.Table.from_arrays(columns, names=table.column_names)


def blank(col: pa.ChunkedArray | pa.Array, kept: np.ndarray) -> pa.Array:
    """``col`` with the cells of rows not ``kept`` null (the column keeps its type). Where at
    least half of the rows are dropped (``keep: front``), a numeric column's dropped values
    are also zeroed: a null only masks its slot, and the value left under the mask would be
    stored and compressed as before (the log would not shrink). Where fewer are
    (``keep: feasible``), the values stay under a new validity mask and are not copied:
    a copy of every column of the chunk, on the worker, raised the run's peak memory above
    ``keep: all``'s, to save little."""
    if isinstance(col, pa.ChunkedArray):
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    numeric = (
        pa.types.is_floating(col.type)
        or pa.types.is_integer(col.type)
        or pa.types.is_boolean(col.type)
    )
    if numeric and col.offset == 0 and np.count_nonzero(kept) * 2 > len(kept):
        valid = kept if col.null_count == 0 else kept & col.is_valid().to_numpy(False)
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(col.type, len(col), [bitmap, col.buffers()[1]])
    if numeric:
        null = ~kept | col.is_null().to_numpy(zero_copy_only=False)
        values = col.fill_null(False if pa.types.is_boolean(col.type) else 0).to_numpy(
            zero_copy_only=False
        )
        return pa.array(np.where(null, np.zeros(1, values.dtype), values), type=col.type, mask=null)
    return pc.if_else(pa.array(kept), col, pa.scalar(None, col.type))


def arrow_column(column: pd.Series) -> pa.Array:
    """A column as ``pa.Table.from_pandas`` converts it (a missing value, NaN included,
    is null), without its per-value pass over float columns: their values are shared with
    numpy and only a column with a NaN gets a validity mask (~25x faster on a chunk of
    ~70 float metrics)."""
    if isinstance(column.dtype, np.dtype) and column.dtype.kind == "f":
        values = np.ascontiguousarray(column.to_numpy())
        if len(values) == 0 or not np.isnan(values.min()):  # no NaN (one pass, no mask made)
            return pa.array(values)
        # the validity bitmap packed here and the values shared: the array pa.array(values,
        # mask=...) makes, in a third of its time (a chunk of 67 metrics, most with a NaN)
        valid = np.packbits(values == values, bitorder="little")  # (NaN is not NaN)
        return pa.Array.from_buffers(
            pa.from_numpy_dtype(values.dtype),
            len(values),
            [pa.py_buffer(valid), pa.py_buffer(values)],
        )
    try:
        return pa.array(column, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise type(exc)(f"column {column.name!r} ({column.dtype}): {exc}") from None
