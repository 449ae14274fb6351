"""Result store: one folder per study run, crash-safe, the source of truth for resume.

Layout of ``results/<name>/``::

    meta.json              format marker and version, evaluator name and version
    study.yaml             the study exactly as written
    evaluations/           one Parquet file per evaluated chunk, never modified
    state.json             the search driver's plain-data state and the progress history
    lock                   present while a run writes here (pid, host, start time)
    evaluations.nc         every evaluation as an xarray Dataset   (derived, rewritten)
    pareto.nc              the Pareto set as an xarray Dataset      (derived, rewritten)

Durability: every file is written to a temporary name, flushed and fsynced, then renamed
into place (rename is atomic on POSIX), and the folder is fsynced. A chunk's file exists
completely or not at all, so ``kill -9`` at any moment loses at most the chunks in flight
and never corrupts what was written. Chunk files are written before the driver is told
of the batch; ``state.json`` is written after. On resume the driver restarts from its last
state and asks the same batch again; candidates already in ``evaluations/`` are taken
from there, not evaluated again.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from dse import __version__
from dse.errors import StoreError
from dse.files import FORMAT, FORMAT_VERSION, atomic_path, atomic_write_text, json_default


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ResultStore:
    """A results folder. Create with :meth:`create`, reopen with :meth:`open`."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = Path(path)
        self.meta = meta

    # -- creating and opening ------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, *, study_text: str, study_name: str, evaluator: str,
               evaluator_version: str, overwrite: bool = False,
               owned_files: tuple[str, ...] = ()) -> ResultStore:
        """A new results folder. ``owned_files``: files the search driver keeps in the folder
        (recorded in meta.json, so that ``--overwrite`` removes them with the run)."""
        path = Path(path)
        try:
            return cls._create(path, study_text=study_text, study_name=study_name, evaluator=evaluator,
                               evaluator_version=evaluator_version, overwrite=overwrite,
                               owned_files=owned_files)
        except OSError as exc:
            raise StoreError(f"cannot write the results folder {path}: {exc.strerror or exc}") from None

    @classmethod
    def _create(cls, path: Path, *, study_text: str, study_name: str, evaluator: str,
                evaluator_version: str, overwrite: bool, owned_files: tuple[str, ...]) -> ResultStore:
        started = (path / "evaluations").is_dir() and any((path / "evaluations").glob("*.parquet"))
        if started or (path / "meta.json").exists():
            if started and not overwrite:
                raise StoreError(
                    f"{path} already holds a run; continue it with `dse resume {path}`, "
                    "or start afresh with `dse run --overwrite`"
                )
            old = cls.open(path)
            old.check_unlocked()
            old.clear()
        path.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "study": study_name,
            "evaluator": evaluator,
            "evaluator_version": evaluator_version,
            "dse_version": __version__,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "owned_files": list(owned_files),
        }
        atomic_write_text(path / "study.yaml", study_text)
        atomic_write_text(path / "meta.json", json.dumps(meta, indent=2) + "\n")
        (path / "evaluations").mkdir(exist_ok=True)
        return cls(path, meta)

    #: files of a run besides the evaluation log, removed by :meth:`clear`
    RUN_FILES = ("state.json", "evaluations.nc", "pareto.nc", "meta.json")

    def clear(self) -> None:
        """Remove the run: its evaluation log, state, datasets and the files its search
        driver declared (``owned_files`` in meta.json); anything else stays."""
        d = self.evaluations_dir
        if d.is_dir():
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
        owned = [str(f) for f in self.meta.get("owned_files", []) if "/" not in str(f)]
        for name in (*self.RUN_FILES[:-1], *owned, self.RUN_FILES[-1]):
            (self.path / name).unlink(missing_ok=True)

    @classmethod
    def open(cls, path: str | Path) -> ResultStore:
        path = Path(path)
        if not path.is_dir():
            raise StoreError(f"{path} is not a results folder (it does not exist)")
        meta_file = path / "meta.json"
        if not meta_file.is_file():
            raise StoreError(f"{path} is not a dse results folder (no meta.json)")
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{meta_file} is unreadable or truncated: {exc}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise StoreError(f"{path} was not written by dse (meta.json has no '{FORMAT}' format marker)")
        version = meta.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise StoreError(f"{path} has an unknown results format version {version!r} in meta.json")
        if version > FORMAT_VERSION:
            raise StoreError(
                f"{path} uses results format {version!r}, newer than this dse understands "
                f"({FORMAT_VERSION}); upgrade dse"
            )
        if not (path / "study.yaml").is_file():
            raise StoreError(f"{path} is truncated: study.yaml is missing")
        return cls(path, meta)

    @property
    def study_file(self) -> Path:
        return self.path / "study.yaml"

    # -- lock ----------------------------------------------------------------------------
    @property
    def lock_file(self) -> Path:
        return self.path / "lock"

    def _lock_owner(self) -> dict | None:
        """The lock file's content, or None if absent or unreadable (a damaged lock is stale)."""
        try:
            owner = json.loads(self.lock_file.read_text())
            owner["pid"] = int(owner["pid"])
            return owner
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def live_lock_owner(self) -> dict | None:
        """The lock's owner if it is a live process (a lock from a dead process is stale)."""
        owner = self._lock_owner()
        if owner is None:
            return None
        if owner.get("host") == socket.gethostname() and not _pid_alive(owner["pid"]):
            return None
        return owner

    def check_unlocked(self) -> None:
        owner = self.live_lock_owner()
        if owner:
            raise StoreError(
                f"{self.path} is being written by process {owner['pid']} on {owner.get('host', '?')} "
                f"(started {owner.get('started', '?')}); wait for it or stop it first"
            )

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder's lock; a stale lock from a dead process is taken over."""
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        for _ in range(2):
            try:
                fd = os.open(self.lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self.live_lock_owner()
                if owner is None:
                    self.lock_file.unlink(missing_ok=True)  # stale: its process is gone, or damaged
                    continue
                raise StoreError(
                    f"{self.path} is locked by process {owner.get('pid')} on {owner.get('host')} "
                    f"(started {owner.get('started', '?')}); if that run is dead, delete {self.lock_file}"
                ) from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
                f.flush()
                os.fsync(f.fileno())
            break
        else:
            raise StoreError(f"could not take the lock {self.lock_file}")
        try:
            yield
        finally:
            if (self._lock_owner() or {}).get("pid") == os.getpid():
                self.lock_file.unlink(missing_ok=True)

    # -- evaluations ---------------------------------------------------------------------
    @property
    def evaluations_dir(self) -> Path:
        return self.path / "evaluations"

    def append_chunk(self, batch: int, chunk: int, table: pd.DataFrame) -> Path:
        """Durably store one evaluated chunk (parameters, metrics, status, keys)."""
        target = self.evaluations_dir / f"b{batch:06d}-c{chunk:05d}.parquet"
        if target.exists():  # a re-asked batch after resume: keep both, never overwrite
            n = 1
            while (alt := target.with_name(f"{target.stem}-r{n}.parquet")).exists():
                n += 1
            target = alt
        with atomic_path(target) as tmp:
            table.to_parquet(tmp, index=False)
        return target

    def chunk_files(self) -> list[Path]:
        if not self.evaluations_dir.is_dir():
            return []
        return sorted(p for p in self.evaluations_dir.iterdir()
                      if p.suffix == ".parquet" and not p.name.startswith("."))

    def load_evaluations(self) -> pd.DataFrame:
        """Every stored evaluation, in the order written, one row per distinct candidate."""
        files = self.chunk_files()
        if not files:
            return pd.DataFrame()
        frames = []
        for f in files:
            try:
                frame = pd.read_parquet(f)
            except Exception as exc:
                raise StoreError(f"{f} is unreadable ({exc}); move it aside and resume") from None
            missing = [c for c in ("key", "status", "feasible") if c not in frame.columns]
            if missing:
                raise StoreError(f"{f} holds evaluations without the columns {missing}: "
                                 "not written by this version of dse")
            frames.append(frame)
        df = pd.concat(frames, ignore_index=True)
        return df.drop_duplicates("key", keep="first").reset_index(drop=True)

    # -- search state --------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    def save_state(self, state: dict[str, Any]) -> None:
        atomic_write_text(self.state_file, json.dumps(state, indent=1, default=json_default) + "\n")

    def load_state(self) -> dict[str, Any] | None:
        if not self.state_file.is_file():
            return None
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.state_file} is unreadable: {exc}") from None
        if not isinstance(state, dict) or not isinstance(state.get("history", []), list) or any(
            not isinstance(r, dict) or "batch" not in r for r in state.get("history", [])
        ):
            raise StoreError(f"{self.state_file} is damaged (not a dse search state)")
        return state

