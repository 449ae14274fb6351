"""Result store: one folder per study run, crash-safe, the source of truth for resume.

Layout of ``results/<name>/``::

    meta.json              format marker and version, evaluator name and version
    study.yaml             the study exactly as written
    evaluations/           the evaluation log: one Parquet file per written group, never modified
    state.json             the search driver's plain-data state and the progress history
    lock                   present while a run writes here (pid, host, start time)
    pareto.nc              the Pareto set as an xarray Dataset      (derived, rewritten)

The log is the only copy of every evaluation at rest (dse.results reads it lazily as a
Dataset); an ``evaluations.nc`` written by an earlier dse is removed by the next run.

Durability: every file is written to a temporary name, flushed and fsynced, then renamed
into place (rename is atomic on POSIX), and the folder is fsynced. A log file exists
completely or not at all, so ``kill -9`` at any moment loses at most the evaluations in
flight (evaluated, not yet in a written group) and never corrupts what was written. Log
files are written before the driver is told of the batch; ``state.json`` is written after. On resume the driver restarts from its last
state and asks the same batch again; candidates already in ``evaluations/`` are taken
from there, not evaluated again.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from dse import __version__, signals
from dse.errors import StoreError
from dse.files import (
    FORMAT,
    FORMAT_VERSION,
    OLDEST_FORMAT_READ,
    atomic_write_bytes,
    atomic_write_text,
    commit_staged,
    is_zarr_store,
    json_default,
    refuse_unsafe_write,
    remove_path,
    unfit_results_folder,
)
from dse.records import LockOwner, RunMeta, RunState
from dse.yamlfile import SMALL_FILE_BYTES, read_bounded

#: columns every log file has (whatever the study's ``keep`` policy drops from a row)
LOG_COLUMNS = ("key", "batch", "status", "feasible", "kept")


def location(file: int, rows: np.ndarray) -> np.ndarray:
    """Pack a log file's number and row numbers into one ``int64`` per row."""
    return (np.int64(file) << 32) | np.asarray(rows, dtype=np.int64)


#: the log files' format: the Arrow IPC file format (Feather v2), buffers LZ4-compressed
#: (:data:`LOG_CODEC`; Arrow's LZ4 frame format, which every Arrow reader decompresses).
#: Encoding it costs a worker 0.15 us per row of ~80 columns against 0.69 us for Parquet.
#: The codec is a worker's largest cost per candidate besides the evaluator: every log file
#: of benchmarks/bench_pipeline.py's 10^7 study (9,953,280 rows of 87 columns) encoded
#: again, CPU of one thread (2026-11-29): LZ4 0.283 us a row, 189.2 bytes a row; zstd level
#: -4 0.403 us, 172.8 bytes; -2 0.546 us, 191.9 bytes; -6 0.385 us, 177.8 bytes. LZ4 takes
#: 30 % less time than zstd -4 for 9.5 % more bytes, and reads faster (every column of 20
#: files: 0.122 against 0.165 us a row). (A single chunk had made LZ4 look worse: 0.49
#: against 0.68 us, 233 against 187 bytes; zstd -4 was the log's codec from then until
#: the whole log was measured, level 1 before it, LZ4 before 0.19 of the analytic
#: evaluator.) pandas, polars and DuckDB read it (Arrow readers decompress LZ4 and zstd of
#: any level alike: logs written with zstd are still read and resumed). Logs of results
#: format 2 (Parquet files) are still read and resumed.
LOG_SUFFIX = ".arrow"
LOG_CODEC = ("lz4", None)
#: a log file's name with its run's stamp (:attr:`ResultStore.run_stamp`): ``bBBBBBB-cCCCCC-SSSSSSSS.arrow``;
#: the files of folders written before runs were stamped have none
_STAMPED = re.compile(r"^b\d+-c\d+-([0-9a-f]{8})\.")
_LOG_SUFFIXES = (LOG_SUFFIX, ".parquet")


def encode(table: pa.Table) -> pa.Buffer:
    """A table as a log file's bytes (:data:`LOG_SUFFIX`), in an Arrow buffer: pickled (a
    worker's chunk on its way to the run), it travels out of band, with no copy into the
    pickle or out of it (a 125,000-row chunk: 1.5 ms to serialise against 31-37 ms as
    ``bytes``), and a file takes it as it takes bytes."""
    sink = pa.BufferOutputStream()
    write_encoded(table, sink)
    return sink.getvalue()


def write_encoded(table: pa.Table, sink: Any) -> None:
    """Write the bytes :func:`encode` makes of ``table`` to ``sink`` (an Arrow output stream
    or a binary file): a worker writing its chunk's log file straight to the file (131,072
    rows of 87 columns, 22 MB: 0.26 us a row less CPU than encoding into a buffer, which
    grows by copying, and writing that; the same bytes). The buffers are compressed one
    after the other, in this thread: a worker's cores are the evaluations' (dask runs a task
    per core), and Arrow's thread pool compressing them in parallel contends with the other
    workers for the same cores (0.05-0.1 us a row more CPU, the same bytes)."""
    options = pa.ipc.IpcWriteOptions(compression=pa.Codec(*LOG_CODEC), use_threads=False)
    with pa.ipc.new_file(sink, table.schema, options=options) as out:
        out.write_table(table)


def decode(data: bytes | pa.Buffer) -> pa.Table:
    """The table of a log file's bytes (:func:`encode`)."""
    return pa.ipc.open_file(data if isinstance(data, pa.Buffer) else pa.py_buffer(data)).read_all()


def read_log_file(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A log file's rows (only those of ``columns`` it has, when given), Arrow or Parquet.
    Only the columns asked for are decompressed (the narrow columns of a 10^6-row log:
    0.07 s, against 0.18 s reading every column and selecting)."""
    if columns is not None:
        names = set(log_file_schema(path).names)
        columns = [c for c in columns if c in names]
    where = os.path.abspath(path)  # pyarrow reads a leading '~' as the home folder
    if path.suffix == ".parquet":
        return pq.read_table(where, columns=columns)
    return feather.read_table(where, columns=columns, memory_map=True)


def log_file_schema(path: Path) -> pa.Schema:
    """A log file's schema, from its footer (no rows are read)."""
    if path.suffix == ".parquet":
        return pq.read_schema(path)
    with pa.memory_map(str(path)) as f:  # the footer only: 0.1 ms, against 1.7 through a file
        return pa.ipc.open_file(f).schema


def log_file_footer(path: Path) -> tuple[pa.Schema, int]:
    """A log file's schema and row count, read from its footer (no data is decoded)."""
    if path.suffix == ".parquet":
        meta = pq.read_metadata(path)
        return meta.schema.to_arrow_schema(), meta.num_rows
    with pa.memory_map(str(path)) as f:
        reader = pa.ipc.open_file(f)
        return reader.schema, reader.count_rows()


@dataclass(frozen=True)
class LogChunk:
    """An evaluated chunk as it travels from a worker: the log rows already encoded as a
    log file (:func:`encode`, an Arrow buffer), or, where the worker shares this machine's
    file system (a local cluster), already written by it as a staged log file
    (``staged``: :func:`dse.files.stage_file`, which the run renames into the log in order,
    so that the rows' bytes never pass through the run's process); the few columns the run
    loop reads (``narrow``, decoded), the chunk's summary for the running front (a
    :class:`dse.pareto.ChunkSummary`), and the full rows of its contenders (the only
    candidates that can join the front)."""

    data: pa.Buffer | None
    narrow: pa.Table
    contenders: pa.Table
    summary: Any
    staged: str | None = None
    #: the chunk's keys where they are ``first_key .. first_key + rows - 1`` (an
    #: enumeration's chunk) and the run reads no told column: ``narrow`` is then empty and
    #: no key travels back (8 bytes a candidate, most of a result's bytes: fetching the
    #: results was ~17 % of the main process's event-loop CPU at 10**7 in a profile)
    first_key: int | None = None
    rows: int = 0

    def __len__(self) -> int:
        return self.rows if self.first_key is not None else self.narrow.num_rows

    def __reduce__(self):
        # the log bytes (where not staged) as a buffer of their own, out of band; the rest as
        # one blob: pickled as they are, each Arrow and numpy buffer of the tables and the
        # summary (~160 for a task of the 10^7 benchmark) is a frame of its own through
        # dask, each read, allocated and decrypted apart by the main process's event loop
        rest = tuple(getattr(self, name) for name in self.__dataclass_fields__ if name != "data")
        return _log_chunk, (self.data, pickle.dumps(rest, protocol=pickle.HIGHEST_PROTOCOL))

    def keys(self) -> np.ndarray:
        """The chunk's keys, in its rows' order."""
        if self.first_key is not None:
            return np.arange(self.first_key, self.first_key + self.rows, dtype=np.int64)
        return self.narrow.column("key").to_numpy()

    def table(self) -> pa.Table:
        if self.data is None:
            return read_log_file(Path(self.staged))
        return decode(self.data)

    def contender_rows(self, mask: np.ndarray) -> pa.Table:
        """The full rows of the masked contenders (the running front converts them to pandas
        when it is read, all chunks' together)."""
        return self.contenders.filter(pa.array(mask)).drop_columns(["kept"])


def _log_chunk(data: pa.Buffer | None, rest: bytes) -> LogChunk:
    """A :class:`LogChunk` as :meth:`LogChunk.__reduce__` sent it."""
    return LogChunk(data, *pickle.loads(rest))


def _pid_alive(pid: int, since: float | None = None) -> bool:
    """Whether process ``pid`` runs on this host, and (``since``: when it took a lock, Unix
    time) is the process that did: one started later only reuses its number."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if since is not None:
        import psutil

        try:  # the lock's time is written to the second after the process started
            return psutil.Process(pid).create_time() <= since + 2.0
        except psutil.Error:
            return True
    return True


def _unix_time(iso: object) -> float | None:
    """Seconds since the epoch of an ISO 8601 time such as meta.json's ``created``."""
    try:
        return dt.datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _unreadable(path: Path, exc: Exception) -> StoreError:
    """The error of a log file that cannot be read: what was in it is lost."""
    return StoreError(
        f"{path} is unreadable ({exc}); its evaluations are lost: restore the file "
        "from a copy, or start again with `dse run --overwrite`"
    )


def _holds_run(path: Path) -> bool:
    """Whether ``path`` holds a run's evaluation log."""
    log = path / "evaluations"
    return log.is_dir() and any(p.suffix in _LOG_SUFFIXES for p in log.iterdir())


class ResultStore:
    """A results folder. Create with :meth:`create`, reopen with :meth:`open`."""

    def __init__(self, path: Path, meta: RunMeta) -> None:
        self.path = Path(path)
        self.meta = meta

    # -- creating and opening ------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        study_text: str,
        study_name: str,
        evaluator: str,
        evaluator_version: str,
        overwrite: bool = False,
        owned_files: tuple[str, ...] = (),
        profile_path: str | None = None,
        input_files: dict[str, str] | None = None,
    ) -> ResultStore:
        """A new results folder. ``owned_files``: files the search driver keeps in the folder
        (recorded in meta.json, so that ``--overwrite`` removes them with the run);
        ``profile_path``: the cluster profile file the run uses (recorded: the study's copy
        here names it as the study did, relative to a folder the copy is not in);
        ``input_files``: the files the evaluator reads, with their checksums
        (:meth:`~dse.evaluators.base.Evaluator.input_files`)."""
        path = Path(path)
        try:
            return cls._create(
                path,
                study_text=study_text,
                study_name=study_name,
                evaluator=evaluator,
                evaluator_version=evaluator_version,
                overwrite=overwrite,
                owned_files=owned_files,
                profile_path=profile_path,
                input_files=input_files,
            )
        except OSError as exc:
            raise StoreError(
                f"cannot write the results folder {path}: {exc.strerror or exc}"
            ) from None

    @staticmethod
    def check_creatable(path: str | Path, *, overwrite: bool = False) -> None:
        """Raise :class:`StoreError` unless a new run can be written to ``path``: what
        :meth:`create` would refuse, found before anything is written (``dse validate``): an
        empty folder made in the nearest existing folder and removed at once asks the file
        system itself (``os.access`` says yes to root everywhere; /proc refuses any folder)."""
        path = Path(path)
        try:
            if path.exists() and not path.is_dir():
                raise StoreError(
                    f"cannot write the results folder {path}: it is a file, not a folder"
                )
            if path.is_symlink() and not path.exists():
                raise StoreError(
                    f"cannot write the results folder {path}: it is a link to {os.readlink(path)}, "
                    "which does not exist"
                )
            unfit = unfit_results_folder(
                path
            )  # the root, home, another's or a foreign folder (security.md)
            if unfit:
                raise StoreError(f"cannot write the results folder {path}: it {unfit}")
            # a link planted on the way in another results folder (its folders would be made
            # in the link's target before the first file's write refused it)
            refuse_unsafe_write(path / "meta.json")
            if _holds_run(path) and not overwrite:
                raise StoreError(
                    f"{path} already holds a run; continue it with `dse resume {path}`, "
                    "or start afresh with `dse run --overwrite`"
                )
            existing = next(p for p in (path, *path.absolute().parents) if p.exists())
            if not existing.is_dir():
                raise StoreError(
                    f"cannot write the results folder {path}: {existing} is a file, not a folder"
                )
            if not os.access(existing, os.W_OK | os.X_OK):
                raise StoreError(
                    f"cannot write the results folder {path}: no permission to write in {existing}"
                )
            longest = os.pathconf(existing, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
            long = [part for part in path.parts if len(os.fsencode(part)) > longest]
            if long:
                raise StoreError(
                    f"cannot write the results folder {path}: the name {long[0][:40]}... is longer "
                    f"than the file system allows ({longest} bytes)"
                )
            os.rmdir(tempfile.mkdtemp(prefix=".dse-check-", dir=existing))
        except OSError as exc:
            raise StoreError(
                f"cannot write the results folder {path}: {exc.strerror or exc}"
            ) from None

    @classmethod
    def _create(
        cls,
        path: Path,
        *,
        study_text: str,
        study_name: str,
        evaluator: str,
        evaluator_version: str,
        overwrite: bool,
        owned_files: tuple[str, ...],
        profile_path: str | None = None,
        input_files: dict[str, str] | None = None,
    ) -> ResultStore:
        cls.check_creatable(path, overwrite=overwrite)
        if _holds_run(path) or (path / "meta.json").exists():
            old = cls.open(path, older=True)
            old.check_unlocked()
            old.clear()
        path.mkdir(parents=True, exist_ok=True)
        meta = RunMeta(
            format=FORMAT,
            format_version=FORMAT_VERSION,
            study=study_name,
            evaluator=evaluator,
            evaluator_version=evaluator_version,
            dse_version=__version__,
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            run_id=uuid.uuid4().hex,  # the datasets carry it: another run's, copied in, are refused
            log_stamped=True,  # every log file's name carries the run's stamp (run_stamp)
            owned_files=tuple(owned_files),
            study_sha256=_sha256(study_text.encode()),
            profile_path=profile_path or None,
            input_files=dict(input_files or {}),
        )
        atomic_write_text(path / "study.yaml", study_text)
        atomic_write_text(path / "meta.json", json.dumps(meta.to_json(), indent=2) + "\n")
        (path / "evaluations").mkdir(exist_ok=True)
        return cls(path, meta)

    #: files of a run besides the evaluation log, removed by :meth:`clear`
    RUN_FILES = ("state.json", "progress.json", "evaluations.nc", "pareto.nc", "meta.json")
    #: what dse writes into the folder by default from a run (plot, report and its figures,
    #: exports), also removed by :meth:`clear` when written after the run was created (and a
    #: zarr export only when it is a zarr store): left behind, they would show the old run
    DERIVED_FILES = (
        "pareto.png",
        "report.html",
        *(
            f"report-{f}.{x}"
            for f in ("front", "breakdown", "parallel", "hypervolume")
            for x in ("png", "svg")
        ),
        *(
            f"{d}{x}"
            for d in ("pareto", "evaluations")
            for x in (".csv", ".csv-metadata.json", ".parquet", ".json", ".zarr")
        ),
    )  # export's sidecar: FILE-metadata.json

    def clear(self) -> None:
        """Remove the run: its evaluation log, state, datasets, the files its search driver
        declared (``owned_files`` in meta.json) and what dse wrote from it under its default
        names (:data:`DERIVED_FILES`); anything else stays."""
        started = _holds_run(self.path)  # a run that never started wrote nothing from its results
        d = self.evaluations_dir
        if d.is_symlink():  # planted: its target's files are not the run's
            d.unlink()
        if d.is_dir():
            for f in d.iterdir():
                remove_path(f)  # a private temporary folder a killed writer left is a folder
            d.rmdir()
        self._files = None  # listed again when asked
        owned = [f for f in self.meta.owned_files if "/" not in f]
        created = _unix_time(self.meta.created)
        for name in self.DERIVED_FILES if started and created is not None else ():
            derived = self.path / name
            # only what was written after the run was created: an older file is the user's
            if (
                not derived.exists()
                or derived.is_symlink()
                or derived.stat().st_mtime < created - 1
            ):
                continue
            if derived.is_dir():
                if is_zarr_store(derived):
                    shutil.rmtree(derived)  # a zarr store dse exported
            else:
                derived.unlink()
        for name in (*self.RUN_FILES[:-1], *owned, self.RUN_FILES[-1]):
            (self.path / name).unlink(missing_ok=True)

    @classmethod
    def open(cls, path: str | Path, *, older: bool = False) -> ResultStore:
        """An existing results folder; ``older`` accepts an older format (to clear it)."""
        path = Path(path)
        if not path.is_dir():
            raise StoreError(
                f"{path} is not a results folder "
                f"({'it is a file' if path.exists() else 'it does not exist'})"
            )
        meta_file = path / "meta.json"
        if not meta_file.is_file():
            runs = _runs_in(path)  # `dse show results`: the folder of the runs, not one of them
            raise StoreError(
                f"{path} is not a dse results folder (no meta.json)"
                + (f"; it holds runs: {', '.join(runs)}" if runs else "")
            )
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{meta_file} is unreadable or truncated: {exc}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise StoreError(
                f"{path} was not written by dse (meta.json has no '{FORMAT}' format marker)"
            )
        version = meta.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise StoreError(
                f"{path} has an unknown results format version {version!r} in meta.json"
            )
        if version > FORMAT_VERSION:
            raise StoreError(
                f"{path} uses results format {version!r}, newer than this dse understands "
                f"({FORMAT_VERSION}); upgrade dse"
            )
        if version < OLDEST_FORMAT_READ and not older:
            raise StoreError(
                f"{path} uses results format {version!r}, older than this dse reads ({OLDEST_FORMAT_READ}: "
                "integer candidate keys); run the study again into a new folder"
            )
        study_file = path / "study.yaml"
        if not study_file.is_file():
            raise StoreError(f"{path} is truncated: study.yaml is missing")
        meta = RunMeta.from_json(meta, meta_file)
        written = meta.study_sha256
        if written is not None and not older and _sha256(study_file.read_bytes()) != written:
            raise StoreError(
                f"{study_file} was changed after the run started (meta.json keeps its checksum): "
                "the evaluations and the front belong to the study as it was run; put it back, "
                "or run the changed study into a new folder"
            )
        return cls(path, meta)

    @property
    def study_file(self) -> Path:
        return self.path / "study.yaml"

    # -- lock ----------------------------------------------------------------------------
    @property
    def lock_file(self) -> Path:
        return self.path / "lock"

    def _lock_owner(self) -> LockOwner | None:
        """The lock file's owner, or None if absent or unreadable (a damaged lock is stale)."""
        try:
            text = read_bounded(self.lock_file, limit_bytes=SMALL_FILE_BYTES)  # a pipe: no wait
            return LockOwner.from_json(json.loads(text))
        except (OSError, ValueError):
            return None

    def live_lock_owner(self) -> LockOwner | None:
        """The lock's owner if it is a live process (a lock from a dead process is stale)."""
        owner = self._lock_owner()
        if owner is None:
            return None
        if owner.host == socket.gethostname() and not _pid_alive(
            owner.pid, _unix_time(owner.started)
        ):
            return None
        return owner

    def check_unlocked(self) -> None:
        owner = self.live_lock_owner()
        if owner:
            raise StoreError(
                f"{self.path} is being written by process {owner.pid} on {owner.host} "
                f"(started {owner.started}); wait for it or stop it first"
            )

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder's lock; a stale lock from a dead process is taken over."""
        me = LockOwner(
            pid=os.getpid(),
            host=socket.gethostname(),
            started=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        for _ in range(2):
            try:
                fd = os.open(self.lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if self.lock_file.is_dir() and not self.lock_file.is_symlink():
                    raise StoreError(  # (no run makes it a folder: not removed for the user)
                        f"{self.lock_file} is a folder where dse keeps the run's lock file; "
                        "remove that folder, then run the command again"
                    ) from None
                owner = self.live_lock_owner()
                if owner is None:
                    self.lock_file.unlink(missing_ok=True)  # stale: its process is gone, or damaged
                    continue
                raise StoreError(
                    f"{self.path} is locked by process {owner.pid} on {owner.host} "
                    f"(started {owner.started}); if that run is dead, delete {self.lock_file}"
                ) from None
            with os.fdopen(fd, "w") as f:
                json.dump(me.to_json(), f)
                f.flush()
                os.fsync(f.fileno())
            break
        else:
            raise StoreError(f"could not take the lock {self.lock_file}")
        self.remove_dead_temp_files()
        try:
            yield
        finally:
            owner = self._lock_owner()
            if owner is not None and owner.pid == os.getpid():
                self.lock_file.unlink(missing_ok=True)

    def remove_dead_temp_files(self) -> None:
        """The half-written files (``.NAME.PID.tmp``) of processes that are gone (a run killed
        or interrupted while it wrote a log file or a dataset, a worker's staged log file the
        run never committed): ignored by every reader, removed by the folder's writer when it
        takes the lock and at a run's end."""
        log = self.evaluations_dir
        # a planted link at the log: its target's files are not the run's (never removed)
        logs = () if log.is_symlink() else log.glob(".*.tmp")
        for tmp in (*self.path.glob(".*.tmp"), *logs):
            pid = tmp.name.rsplit(".", 2)[-2]
            if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                remove_path(
                    tmp
                )  # a private folder (dse.files.atomic_path), or a link: never followed

    # -- evaluation log ------------------------------------------------------------------
    @property
    def evaluations_dir(self) -> Path:
        return self.path / "evaluations"

    def write_group(self, batch: int, data: bytes | pa.Buffer) -> Path:
        """Durably store a group of evaluated candidates, a log file's bytes (:func:`encode`):
        write, fsync, rename (:func:`dse.files.atomic_write_bytes`); one fsync covers the whole
        group. Never modified afterwards."""
        target = self._next_log_path(batch)
        atomic_write_bytes(target, data)
        self._listed(target)
        return target

    def _next_log_path(self, batch: int) -> Path:
        """The name of ``batch``'s next log file: one that does not exist yet (a re-asked
        batch after resume: never overwrite)."""
        n = len(self._files_of_batch(batch))
        target = self.evaluations_dir / self._log_name(batch, n)
        while target.exists():
            n += 1
            target = self.evaluations_dir / self._log_name(batch, n)
        return target

    def commit_group(self, batch: int, staged: Path) -> Path:
        """Store a group a worker wrote (:func:`dse.files.stage_file`) under the name
        :meth:`write_group` would give it: a rename and a folder fsync, no data copied."""
        target = self._next_log_path(batch)
        commit_staged(staged, target)
        self._listed(target)
        return target

    def _listed(self, path: Path) -> None:
        """Add a log file just written to the listing :meth:`log_files` keeps, in its order:
        listing the folder again after each write made a run's writes cost O(files**2)."""
        files = getattr(self, "_files", None)
        if files is not None:
            bisect.insort(files, path)

    @property
    def run_stamp(self) -> str:
        """The first 8 hex digits of the run's id: the log's file names carry it, so that a
        file copied in from another run (of the same study: same columns) is refused. Empty
        for a folder written before runs had ids."""
        return self.meta.run_stamp

    def _log_name(self, batch: int, n: int) -> str:
        stamp = f"-{self.run_stamp}" if self.run_stamp else ""
        return f"b{batch:06d}-c{n:05d}{stamp}{LOG_SUFFIX}"

    def _files_of_batch(self, batch: int) -> list[Path]:
        """``batch``'s log files: a run of the sorted listing (names ``bBBBBBB-...``), found
        by bisection, not a scan of every file at every write."""
        self.log_files()
        files, name, prefix = self._files, (lambda f: f.name), f"b{batch:06d}-"
        lo = bisect.bisect_left(files, prefix, key=name)
        return files[lo : bisect.bisect_left(files, prefix + "\U0010ffff", key=name)]

    def log_position(self, path: Path) -> int:
        """``path``'s place in :meth:`log_files` (a file of the log), by bisection."""
        self.log_files()
        at = bisect.bisect_left(self._files, path)
        if at == len(self._files) or self._files[at] != path:
            raise ValueError(f"{path} is not a file of the log")
        return at

    def log_files(self) -> list[Path]:
        """The log's files in the order written (leftover temporary files excluded)."""
        if getattr(self, "_files", None) is None:
            d = self.evaluations_dir
            files = (
                sorted(
                    p
                    for p in d.iterdir()
                    if p.suffix in _LOG_SUFFIXES and not p.name.startswith(".")
                )
                if d.is_dir()
                else []
            )
            odd = next((p for p in files if p.exists() and not p.is_file()), None)
            if odd is not None:  # a pipe would hold every reader of the log forever
                raise StoreError(
                    f"{odd} is not a file (a folder, device, pipe or socket): no log file of "
                    f"dse; move it out of {d}"
                )
            self._files = files
        return list(self._files)

    def check_log(self, parameters: tuple[str, ...] = ()) -> int:
        """Check every log file's footer and columns (cheap: no data is read); returns the
        number of rows in the log. A damaged file, or one without a column for each of
        ``parameters`` (a file of another study), is a :class:`StoreError`. (Files of one
        run may differ in other columns: a chunk that failed whole has only the declared
        metrics, and a plug-in may return more.)"""
        rows = 0
        for f in self.log_files():
            stamp = _STAMPED.match(f.name)
            if stamp and stamp.group(1) != self.run_stamp or not stamp and self.meta.log_stamped:
                said = (
                    f"its name says run {stamp.group(1)}" if stamp else "its name has no run stamp"
                )
                raise StoreError(
                    f"{f} was written by another run ({said}, this folder's is "
                    f"{self.run_stamp or 'unstamped'}): its rows would join this run's; move it out "
                    f"of {self.evaluations_dir}"
                )
            try:
                schema, n = log_file_footer(f)
            except Exception as exc:
                raise _unreadable(f, exc) from None
            missing = [c for c in LOG_COLUMNS if c not in schema.names]
            if missing:
                raise StoreError(
                    f"{f} holds evaluations without the columns {missing}: "
                    "not written by this version of dse"
                )
            lacking = [p for p in parameters if p not in schema.names]
            if lacking:
                raise StoreError(
                    f"{f} has no column for the study's parameters {lacking}: it belongs to "
                    f"another study; move it out of {self.evaluations_dir}"
                )
            rows += n
        return rows

    def scan(self, columns: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        """``(file number, table)`` for every log file, in order, reading only ``columns``
        (all when None). Memory stays at one file."""
        for i, f in enumerate(self.log_files()):
            yield i, self.read_file(f, columns)

    def read_file(self, path: Path, columns: list[str] | None = None) -> pa.Table:
        """One log file (only those of ``columns`` it has, when given)."""
        try:
            return read_log_file(path, columns)
        except Exception as exc:
            raise _unreadable(path, exc) from None

    def read_rows(self, locations: np.ndarray, columns: list[str]) -> pd.DataFrame:
        """The rows at ``locations`` (``file << 32 | row``, as :func:`location` packs them),
        in that order, reading only the files and ``columns`` needed."""
        locations = np.asarray(locations, dtype=np.int64)
        files, rows = locations >> 32, locations & 0xFFFFFFFF
        log = self.log_files()
        parts, order = [], []
        for f in np.unique(files):
            pick = np.flatnonzero(files == f)
            if f >= len(log) or rows[pick].max() >= log_file_footer(log[int(f)])[1]:
                raise StoreError(
                    f"the log in {self.evaluations_dir} no longer holds the files this run wrote "
                    "(moved, deleted or replaced while it ran): what the run knew is not there; "
                    "put the folder back and `dse resume`, or start again with `dse run --overwrite`"
                )
            table = self.read_file(log[int(f)], columns).take(pa.array(rows[pick]))
            parts.append(table.to_pandas())
            order.append(pick)
        if not parts:
            return pd.DataFrame(columns=columns)
        out = pd.concat(parts, ignore_index=True)
        return out.iloc[np.argsort(np.concatenate(order), kind="stable")].reset_index(drop=True)

    def writer(self, batch: int) -> LogWriter:
        """A :class:`LogWriter` for one batch."""
        return LogWriter(self, batch)

    def load_evaluations(self) -> pd.DataFrame:
        """Every kept evaluation as one table, one row per distinct candidate. For small runs
        and tests: it holds the whole log in memory (the runner and the commands stream)."""
        self.check_log()
        tables = [t for _, t in self.scan()]
        if not tables:
            return pd.DataFrame()
        table = pa.concat_tables(tables, promote_options="permissive")
        first = ~pd.Series(table.column("key").to_numpy()).duplicated(keep="first").to_numpy()
        if "kept" in table.column_names:  # kept rows only, filtered before pandas sees the cleared
            first &= table.column("kept").to_numpy(
                zero_copy_only=False
            )  # cells: integers stay integers
            table = table.drop_columns(["kept"])
        return table.filter(pa.array(first)).to_pandas()

    # -- search state --------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    def save_state(self, state: RunState) -> None:
        """Write ``state.json`` (atomically: the old state or the new one, never a torn one).
        A driver state JSON cannot hold is a TypeError or ValueError, and nothing is written."""
        text = json.dumps(state.to_json(), indent=1, default=json_default, allow_nan=True)
        atomic_write_text(self.state_file, text + "\n")

    def load_state(self) -> RunState | None:
        """``state.json`` (None before a run saved one); a damaged one is a :class:`StoreError`
        naming the field."""
        if not self.state_file.is_file():
            return None
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.state_file} is unreadable: {exc}") from None
        return RunState.from_json(data, self.state_file)


class LogWriter:
    """Groups a batch's evaluated rows into log files: one write-fsync-rename covers at least
    ``rows`` rows, or whatever was buffered for ``seconds`` (a slow evaluator's results are
    not held long). A chunk that is a group by itself is written as it came (its bytes
    were encoded on the worker); small ones are decoded and grouped. Files are written by
    one background thread, so evaluation goes on meanwhile; :meth:`flush` writes the rest
    and waits: everything added is durable when it returns, before the driver is told.
    ``written`` lists ``(file number, keys)`` of every file written: the keys as a
    ``range`` where they are consecutive and known so (an enumeration's chunk: its
    ``first_key`` and ``rows``), which the run indexes without making an array of them."""

    def __init__(
        self, store: ResultStore, batch: int, *, rows: int = 65_536, seconds: float = 1.0
    ) -> None:
        self.store, self.batch = store, batch
        self.rows, self.seconds = rows, seconds
        self._parts: list[pa.Table] = []
        self._buffered = 0
        self._since = 0.0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dse-log")
        # its thread started now, with Ctrl-C held back: started by a later submit, a Ctrl-C
        # between the thread's start and the pool noting it let flush's shutdown miss that
        # thread, whose write then landed after the datasets were written (stale datasets).
        # A Ctrl-C inside a later submit leaves at most a queued write, which shutdown waits for.
        with signals.deferred(signal.SIGINT, signal.SIGTERM):
            self._pool.submit(int).result()
        self._jobs: list = []
        self.written: list[tuple[int, np.ndarray | range]] = []

    def add(self, chunk: LogChunk | pa.Table) -> None:
        if isinstance(chunk, LogChunk) and chunk.staged is not None:  # written by the worker
            self._submit()  # keep the log in order
            self._jobs.append(self._pool.submit(self._commit, Path(chunk.staged), _keys(chunk)))
            return
        if isinstance(chunk, LogChunk) and len(chunk) >= self.rows // 32:  # decoding costs more
            self._submit()  # keep the log in order
            self._jobs.append(self._pool.submit(self._write, chunk.data, _keys(chunk)))
            return
        table = chunk.table() if isinstance(chunk, LogChunk) else chunk
        if not self._parts:
            self._since = time.monotonic()
        self._parts.append(table)
        self._buffered += len(table)
        if self._buffered >= self.rows or time.monotonic() - self._since >= self.seconds:
            self._submit()

    def _submit(self) -> None:
        if self._parts:
            group = pa.concat_tables(self._parts, promote_options="permissive")
            self._parts, self._buffered = [], 0
            self._jobs.append(
                self._pool.submit(
                    lambda g: self._write(encode(g), g.column("key").to_numpy()), group
                )
            )

    def _write(self, data: bytes | pa.Buffer, keys: np.ndarray | range) -> None:
        path = self.store.write_group(self.batch, data)
        self.written.append((self.store.log_position(path), keys))

    def _commit(self, staged: Path, keys: np.ndarray | range) -> None:
        path = self.store.commit_group(self.batch, staged)
        self.written.append((self.store.log_position(path), keys))

    def flush(self) -> None:
        """Write what is buffered and wait for every write (re-raising a failed one). Ctrl-C or
        SIGTERM while it waits is raised once the writes are done: a caller that goes on to
        write the datasets must find the log complete (a group the background thread wrote
        afterwards made them stale)."""
        interrupted: KeyboardInterrupt | None = None
        failed: BaseException | None = None
        try:
            self._submit()
        except (
            KeyboardInterrupt
        ) as exc:  # the rows still buffered were in flight; the submitted ones are written
            interrupted = exc
        for job in self._jobs:
            while True:
                try:
                    job.result()
                except KeyboardInterrupt as exc:  # the main thread's signal: the write goes on
                    interrupted = interrupted or exc
                    continue
                except BaseException as exc:  # noqa: BLE001 - the write failed: raised below
                    failed = failed or exc
                break
        self._jobs = []
        while True:
            try:
                self._pool.shutdown(wait=True)
                break
            except KeyboardInterrupt as exc:
                interrupted = interrupted or exc
        if failed is not None:
            raise failed
        if interrupted is not None:
            raise interrupted


def _keys(chunk: LogChunk) -> np.ndarray | range:
    """A chunk's keys for :attr:`LogWriter.written`: its range where it has one (no array)."""
    if chunk.first_key is not None:
        return range(chunk.first_key, chunk.first_key + chunk.rows)
    return chunk.keys()


def _runs_in(folder: Path, most: int = 5) -> list[str]:
    """The paths of up to ``most`` results folders directly in ``folder`` (sorted), and
    '...' after them where there are more."""
    try:
        runs = sorted(p.name for p in folder.iterdir() if (p / "meta.json").is_file())
    except OSError:  # a folder that cannot be listed: no names to give
        return []
    return [str(folder / r) for r in runs[:most]] + ["..."] * (len(runs) > most)
