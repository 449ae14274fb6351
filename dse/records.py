"""The run's records as types: ``meta.json`` (:class:`RunMeta`), ``state.json``
(:class:`RunState`) and the per-batch progress records in it (:class:`BatchRecord`).

The store writes and reads them (:mod:`dse.store`); the run loop, ``dse status``,
``dse resume`` and the report read their fields, never a key of the JSON text.

Each file carries ``record_version``:

- version 1 (no ``record_version`` in the file): the records as dse wrote them before
  they were typed; fields added over time are optional there, and take the value that
  meant "not recorded" (``run_id`` is required once ``log_stamped`` is, as dse wrote both).
- version 2: every field the writer writes is required.

A record that is not what its version says (a field missing, of the wrong type) is a
:class:`~dse.errors.StoreError` naming the file, the field, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.errors import StoreError, short_repr

#: the version written; older ones are read (see the module's docstring)
RECORD_VERSION = 2
#: the key of the version in every record file
VERSION_KEY = "record_version"

_REQUIRED = object()


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_count(v: object) -> bool:
    return _is_int(v) and v >= 0


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_text(v: object) -> bool:
    return isinstance(v, str)


def _is_text_or_none(v: object) -> bool:
    return v is None or isinstance(v, str)


def _is_bool(v: object) -> bool:
    return isinstance(v, bool)


def _is_texts(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_file_names(v: object) -> bool:
    """A list of plain file names (no folder part, not '.' or '..'): what a run removes by name."""
    return _is_texts(v) and all(
        x not in ("", ".", "..") and not any(c in x for c in "/\\\0") for x in v
    )


def _is_checksums(v: object) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()
    )


def _is_numbers_or_none(v: object) -> bool:
    return v is None or isinstance(v, list) and all(_is_number(x) for x in v)


def _is_reasons(v: object) -> bool:
    return (
        v is None
        or isinstance(v, list)
        and all(
            isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and _is_count(r[1])
            for r in v
        )
    )


#: what a damaged record's message suggests: state.json is replaced by `dse run --overwrite`;
#: meta.json is what that command needs to clear a folder
_RERUN = "restore the file from a copy, or start again with `dse run --overwrite`"
_REMOVE = "restore the file from a copy, or remove the folder and run the study again"


class _Fields:
    """Reads the fields of one JSON object of a record file, checking each; a field that is
    absent or of the wrong type is a :class:`StoreError` naming the file, the field (its
    path within the file), the value and what is allowed."""

    def __init__(self, data: object, file: Path, where: str = "", *, remedy: str = _RERUN) -> None:
        self.file, self.where, self.remedy = file, where, remedy
        if not isinstance(data, dict):
            self._damaged(
                where or "the file", "is not a JSON object", data, "an object of named fields"
            )
        self.data: dict = data

    def _damaged(
        self, name: str, problem: str, value: object = _REQUIRED, allowed: str = ""
    ) -> None:
        got = "" if value is _REQUIRED else f" (got {short_repr(value)})"
        raise StoreError(
            f"{self.file} is damaged: {name} {problem}{got}; allowed: {allowed}; {self.remedy}"
        )

    def get(
        self, name: str, check: Callable[[object], bool], allowed: str, default: Any = _REQUIRED
    ) -> Any:
        path = f"{self.where}.{name}" if self.where else name
        if name not in self.data:
            if default is _REQUIRED:
                self._damaged(path, "is missing", allowed=allowed)
            return default
        value = self.data[name]
        if not check(value):
            self._damaged(path, "is not valid", value, allowed)
        return value


def _version(fields: _Fields) -> int:
    """The record version of a file (1 where it has none), refused when newer than this dse."""
    version = fields.get(VERSION_KEY, _is_int, "a whole number", 1)
    if not 1 <= version <= RECORD_VERSION:
        raise StoreError(
            f"{fields.file} is a record of version {version}, which this dse does not read "
            f"(versions 1 to {RECORD_VERSION}); upgrade dse"
        )
    return version


def _optional_before(version: int, default: Any) -> Any:
    """A field's default in a record of ``version``: required (no default) from version 2."""
    return default if version < 2 else _REQUIRED


# -- meta.json -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunMeta:
    """``meta.json``: what the run is, written once when its folder is created. The
    results format marker and version (``format``, ``format_version``) are checked by
    :meth:`dse.store.ResultStore.open` before the rest is read."""

    format: str
    format_version: int
    study: str  # the study's name
    evaluator: str
    evaluator_version: str
    dse_version: str
    created: str  # ISO 8601, UTC
    run_id: str = (
        ""  # a random hex id the datasets carry ("": a folder of a dse before runs had ids)
    )
    log_stamped: bool = False  # every log file's name carries the first 8 hex digits of run_id
    owned_files: tuple[str, ...] = ()  # files of the search driver, removed with the run
    study_sha256: str | None = None  # the checksum of study.yaml (None: not recorded)
    profile_path: str | None = None  # the cluster profile file the run used
    input_files: dict[str, str] = field(
        default_factory=dict
    )  # files the evaluator reads -> SHA-256
    record_version: int = RECORD_VERSION

    @property
    def run_stamp(self) -> str:
        """The first 8 hex digits of the run's id, which the log's file names carry."""
        return self.run_id[:8]

    def to_json(self) -> dict[str, Any]:
        out = {
            VERSION_KEY: RECORD_VERSION,
            "format": self.format,
            "format_version": self.format_version,
            "study": self.study,
            "evaluator": self.evaluator,
            "evaluator_version": self.evaluator_version,
            "dse_version": self.dse_version,
            "created": self.created,
            "run_id": self.run_id,
            "log_stamped": self.log_stamped,
            "owned_files": list(self.owned_files),
            "study_sha256": self.study_sha256,
        }
        if self.profile_path is not None:
            out["profile_path"] = self.profile_path
        if self.input_files:
            out["input_files"] = dict(self.input_files)
        return out

    @classmethod
    def from_json(cls, data: object, file: Path) -> RunMeta:
        f = _Fields(data, file, remedy=_REMOVE)
        version = _version(f)
        text = "text"
        log_stamped = f.get(
            "log_stamped", _is_bool, "true or false", _optional_before(version, False)
        )
        run_id_default = "" if version < 2 and not log_stamped else _REQUIRED
        return cls(
            format=f.get("format", _is_text, text),
            format_version=f.get("format_version", _is_int, "a whole number"),
            study=f.get("study", _is_text, "the study's name (text)"),
            evaluator=f.get("evaluator", _is_text, "the evaluator's name (text)"),
            evaluator_version=f.get(
                "evaluator_version", _is_text, "the evaluator's version (text)"
            ),
            dse_version=f.get("dse_version", _is_text, "dse's version (text)"),
            created=f.get("created", _is_text, "a time in ISO 8601 (text)"),
            run_id=f.get(
                "run_id",
                lambda v: isinstance(v, str) and len(v) >= 8,
                "the run's id (text of at least 8 hex digits)",
                run_id_default,
            ),
            log_stamped=log_stamped,
            owned_files=tuple(
                f.get(
                    "owned_files",
                    _is_file_names,
                    "a list of file names (no folder part, not '.' or '..')",
                    _optional_before(version, []),
                )
            ),
            study_sha256=f.get(
                "study_sha256",
                _is_text_or_none,
                "the SHA-256 checksum of study.yaml (text)",
                _optional_before(version, None),
            ),
            profile_path=f.get(
                "profile_path", _is_text_or_none, "the path of a cluster profile (text)", None
            ),
            input_files=dict(
                f.get(
                    "input_files",
                    _is_checksums,
                    "a mapping of file paths to their SHA-256 checksums (text: text)",
                    {},
                )
            ),
            record_version=version,
        )


# -- lock ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LockOwner:
    """``lock``: the process that writes the folder (created exclusively, so not versioned;
    a lock that cannot be read is stale, not damaged)."""

    pid: int
    host: str = "?"
    started: str = "?"  # ISO 8601, UTC, to the second

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "started": self.started}

    @classmethod
    def from_json(cls, data: object) -> LockOwner | None:
        """The owner a lock file names, or None where it names none (a damaged lock)."""
        if not isinstance(data, dict):
            return None
        try:
            pid = int(data["pid"])
        except (KeyError, TypeError, ValueError):
            return None
        return cls(pid=pid, host=str(data.get("host", "?")), started=str(data.get("started", "?")))


# -- state.json ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchRecord:
    """What one batch did, appended to the run's progress history after the driver was
    told of it. Counts are of evaluations so far (``evaluations``, ``feasible``,
    ``failed``, ``front_size``); ``asked`` and ``evaluated`` are the batch's own."""

    batch: int
    asked: int = 0  # candidates the driver asked for
    evaluated: int = 0  # of those, evaluated (the others were stored already)
    evaluations: int = 0
    feasible: int = 0
    failed: int = 0
    front_size: int = 0
    hypervolume: float = 0.0  # in the normalised frame of HypervolumeFrame
    seconds: float = 0.0  # the batch's wall time, s

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))

    @classmethod
    def from_json(cls, data: object, file: Path, where: str, version: int) -> BatchRecord:
        f = _Fields(data, file, where)
        count = "a whole number of at least 0"
        return cls(
            batch=f.get("batch", _is_count, count),
            **{
                name: f.get(name, _is_count, count, _optional_before(version, 0))
                for name in (
                    "asked",
                    "evaluated",
                    "evaluations",
                    "feasible",
                    "failed",
                    "front_size",
                )
            },
            hypervolume=float(
                f.get("hypervolume", _is_number, "a number", _optional_before(version, 0.0))
            ),
            seconds=float(
                f.get("seconds", _is_number, "a number of seconds", _optional_before(version, 0.0))
            ),
        )


@dataclass(frozen=True)
class HypervolumeFrame:
    """The frame the hypervolume is measured in (:class:`dse.pareto.HypervolumeTracker`):
    the ideal and nadir points of the first batch's front (None before there was one)."""

    ideal: tuple[float, ...] | None = None
    nadir: tuple[float, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ideal": None if self.ideal is None else list(self.ideal),
            "nadir": None if self.nadir is None else list(self.nadir),
        }

    @classmethod
    def from_json(cls, data: object, file: Path) -> HypervolumeFrame:
        f = _Fields(data, file, "hypervolume_frame")
        points = "a list of numbers, one per objective, or null"
        ideal, nadir = (
            f.get(name, _is_numbers_or_none, points, None) for name in ("ideal", "nadir")
        )
        return cls(
            None if ideal is None else tuple(float(x) for x in ideal),
            None if nadir is None else tuple(float(x) for x in nadir),
        )


@dataclass(frozen=True)
class RunState:
    """``state.json``: saved after every batch (and before the first), the point a resumed
    run goes on from. ``driver`` is the search driver's own plain data (its layout is the
    driver's: dse only stores it)."""

    batch: int = 0  # batches told so far
    history: tuple[BatchRecord, ...] = ()
    driver: dict[str, Any] | None = None
    hypervolume_frame: HypervolumeFrame = HypervolumeFrame()
    algorithm: str = "?"  # what the search is, in words
    finished: bool = False  # the driver has nothing more to ask
    keep: str = "all"  # the study's output.keep when the run was made
    #: what ruled candidates out, most frequent first (None: a state saved before it was kept)
    ruled_out: tuple[tuple[str, int], ...] | None = None
    ruled_out_kinds: int | None = None  # how many different reasons there were
    record_version: int = RECORD_VERSION

    @property
    def last(self) -> BatchRecord | None:
        """The record of the last batch told, if any."""
        return self.history[-1] if self.history else None

    @property
    def evaluations(self) -> int:
        """Evaluations as of the last batch told."""
        return self.history[-1].evaluations if self.history else 0

    def to_json(self) -> dict[str, Any]:
        return {
            VERSION_KEY: RECORD_VERSION,
            "driver": self.driver,
            "batch": self.batch,
            "history": [r.to_json() for r in self.history],
            "hypervolume_frame": self.hypervolume_frame.to_json(),
            "algorithm": self.algorithm,
            "finished": self.finished,
            "keep": self.keep,
            "ruled_out": None if self.ruled_out is None else [list(r) for r in self.ruled_out],
            "ruled_out_kinds": self.ruled_out_kinds,
        }

    @classmethod
    def from_json(cls, data: object, file: Path) -> RunState:
        f = _Fields(data, file)
        version = _version(f)
        history = f.get(
            "history",
            lambda v: isinstance(v, list),
            "a list of batch records",
            _optional_before(version, []),
        )
        frame = f.get(
            "hypervolume_frame",
            lambda v: isinstance(v, dict),
            "an object with 'ideal' and 'nadir'",
            _optional_before(version, {}),
        )
        ruled_out = f.get(
            "ruled_out",
            _is_reasons,
            "a list of [reason, count] pairs, or null",
            _optional_before(version, None),
        )
        kinds = f.get(
            "ruled_out_kinds",
            lambda v: v is None or _is_count(v),
            "a whole number, or null",
            _optional_before(version, None),
        )
        return cls(
            batch=f.get("batch", _is_count, "a whole number of at least 0"),
            history=tuple(
                BatchRecord.from_json(r, file, f"history[{i}]", version)
                for i, r in enumerate(history)
            ),
            driver=f.get(
                "driver",
                lambda v: v is None or isinstance(v, dict),
                "the driver's state (an object), or null",
                _optional_before(version, None),
            ),
            hypervolume_frame=HypervolumeFrame.from_json(frame, file),
            algorithm=f.get("algorithm", _is_text, "text", _optional_before(version, "?")),
            finished=f.get("finished", _is_bool, "true or false", _optional_before(version, False)),
            keep=f.get(
                "keep",
                lambda v: v in ("all", "feasible", "front"),
                "all, feasible or front",
                _optional_before(version, "all"),
            ),
            ruled_out=None if ruled_out is None else tuple((str(r), int(n)) for r, n in ruled_out),
            ruled_out_kinds=kinds,
            record_version=version,
        )
