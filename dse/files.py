"""File helpers shared by everything that writes: atomic writes and the results format version.

Every file dse writes goes to a temporary name beside its target, is flushed and fsynced,
then renamed into place (rename is atomic on POSIX) and the folder is fsynced: a reader
sees the old file or the new one, never a torn one.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FORMAT = "dse-results"  # marker in meta.json and in every dataset written
FORMAT_VERSION = 3  # 2: integer candidate keys, grouped log files with a "kept" column; 3: Arrow log files
OLDEST_FORMAT_READ = 2  # format 2's Parquet log files are read as they are
#: the netCDF library that writes and reads the datasets: the netCDF-C library (netCDF4)
#: defines a variable in well under 1 ms where h5netcdf's Python layer over h5py takes 5-15 ms
#: (the quickstart's evaluations.nc, 71 variables: 0.07-0.12 against 0.4-1.1 s to write,
#: 0.04 against 0.4-0.55 s to read); the files are the same netCDF-4/HDF5 files either way,
#: and h5netcdf reads them (the tests do)
NETCDF_ENGINE = "netcdf4"


def names_a_file_type(suffix: str) -> bool:
    """Whether a file name's suffix (``.xlsx``, ``.TSV``) reads as a file type rather than a
    dot inside the name (``front-0.5``, ``gpt-1.3b``): a letter, then 1 to 5 letters or digits."""
    return re.fullmatch(r"\.[a-z][a-z0-9]{1,5}", suffix.lower()) is not None


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def not_a_file(path: Path) -> str | None:
    """Why ``path`` cannot be replaced by a file written beside it and renamed onto it (an
    existing device, pipe or socket: the rename would put a regular file in its place), or
    None. A symbolic link is followed (:func:`write_target`: a loop of links is an OSError)."""
    for where in (Path(path), write_target(path)):  # /dev/stdout links to a pipe that resolve() cannot name
        if where.exists() and not where.is_file() and not where.is_dir():
            return "is a device, pipe or socket, not a file; give a file path"
    return None


def write_target(path: Path) -> Path:
    """The file a write to ``path`` replaces: a symbolic link's target (the link stays a link
    and its target gets the new content), else ``path``."""
    path = Path(path)
    if not path.is_symlink():
        return path
    try:
        return path.resolve(strict=False)
    except (RuntimeError, OSError):  # a loop of links
        raise OSError(errno.ELOOP, "a loop of symbolic links", str(path)) from None


def _cut(name: str, limit: int) -> str:
    """``name`` cut to at most ``limit`` bytes of UTF-8 (whole characters)."""
    return name.encode()[:limit].decode(errors="ignore")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (beside a symbolic link's target), renamed onto it
    when the block succeeds; a device, pipe or socket is refused (OSError), never replaced."""
    path = write_target(path)
    why = not_a_file(path)
    if why:
        raise OSError(errno.EINVAL, f"cannot write: {path} {why}", str(path))
    # a name of at most 255 bytes, as the file's own may be (a long one is cut, the pid keeps it apart)
    tmp = path.with_name(f".{_cut(path.name, 255 - 24)}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        if tmp.is_file():
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:  # named as the file the caller writes, not the temporary one beside it
        if exc.filename is not None and Path(exc.filename) != tmp and str(tmp) not in str(exc):
            raise  # about another file: its own name says where
        # (no file named: a write that found the disk full says only "No space left on device")
        why = (exc.strerror or str(exc)).replace(str(tmp), str(path))
        raise OSError(exc.errno, f"cannot write: {why}", str(path)) from None
    finally:
        if tmp.exists():
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)


def is_zarr_store(path: Path) -> bool:
    """Whether ``path`` is a folder holding a zarr store (format 2 or 3) at its top."""
    path = Path(path)
    return path.is_dir() and ((path / "zarr.json").is_file() or (path / ".zgroup").is_file())


@contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """A temporary folder beside ``path`` (beside a symbolic link's target: the link stays),
    put in its place when the block succeeds; an old folder there is moved aside first and
    removed after. A reader finds the old folder or the new one, never half of one; a failed
    block, or a failure between the two renames, leaves ``path`` as it was."""
    path = write_target(path)
    # a name of at most 255 bytes, as the file's own may be (a long one is cut, the pid keeps it apart)
    tmp = path.with_name(f".{_cut(path.name, 255 - 24)}.{os.getpid()}.tmp")
    old = path.with_name(f".{path.name}.{os.getpid()}.old")
    for stale in (tmp, old):  # left by a killed process whose pid this one now has
        _remove(stale)
    moved = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        if path.exists():
            os.replace(path, old)
            moved = True
        os.replace(tmp, path)
        moved = False
        fsync_dir(path.parent)
    finally:
        if moved and not path.exists():  # the new one did not arrive: the old one goes back
            os.replace(old, path)
        for leftover in (tmp, old):
            _remove(leftover)


def _remove(path: Path) -> None:
    """Remove a file, link or folder tree at ``path`` (nothing there is fine)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that the file is either old or new, never torn."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def json_default(obj: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays."""
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")
