"""File helpers shared by everything that writes: atomic writes and the results format version.

Every file dse writes goes to a temporary name beside its target, is flushed and fsynced,
then renamed into place (rename is atomic on POSIX) and the folder is fsynced: a reader
sees the old file or the new one, never a torn one. The temporary name lies in a private
folder (``mkdtemp``: unpredictable, mode 0700), and no write goes through a symbolic link
(docs/security.md).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FORMAT = "dse-results"  # marker in meta.json and in every dataset written
FORMAT_VERSION = (
    3  # 2: integer candidate keys, grouped log files with a "kept" column; 3: Arrow log files
)
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
    """Why ``path`` cannot be replaced by a file written beside it and renamed onto it, or
    None: an existing device, pipe or socket (the rename would put a regular file in its
    place), or a symbolic link (dse never writes through a link, nor replaces one: a link
    planted where dse writes would otherwise send the write anywhere)."""
    path = Path(path)
    for where in (path, _resolved(path)):  # /dev/stdout links to a pipe that resolve() cannot name
        if where.exists() and not where.is_file() and not where.is_dir():
            return "is a device, pipe or socket, not a file; give a file path"
    if path.is_symlink():
        return (
            f"is a symbolic link (to {os.readlink(path)}); dse does not write through links: "
            "give the file itself, or another name"
        )
    return None


def _resolved(path: Path) -> Path:
    try:
        return path.resolve(strict=False)
    except (RuntimeError, OSError):  # a loop of links
        return path


def results_folder_of(path: Path) -> Path | None:
    """The nearest folder above ``path`` (by name: ``..`` is not resolved) that holds a
    ``meta.json`` that is a file, not a link: the results folder ``path`` lies in, or None."""
    for folder in Path(os.path.abspath(path)).parents:
        if os.path.isfile(folder / "meta.json") and not os.path.islink(folder / "meta.json"):
            return folder
    return None


def refuse_unsafe_write(path: Path) -> None:
    """Raise OSError (one line, naming ``path``) unless a file may be put at ``path``: not a
    device, pipe or socket, not a symbolic link, and, inside a results folder, reached from
    that folder through real folders only (a link planted inside a results folder, at the
    file's name or at a folder on the way to it, would send a write outside the folder)."""
    path = Path(path)
    why = not_a_file(path)
    if why:
        raise OSError(
            errno.ELOOP if path.is_symlink() else errno.EINVAL, f"cannot write: {why}", str(path)
        )
    # the folders as the system walks them: '..' is not resolved by name, for after a link
    # it leaves the link's target, not the link ('RESULTS/LINK/../x' lies beside the target)
    for folder in Path(path).absolute().parents:
        # a link's own folder, found as it really is (its path may hold links or '..' itself)
        root = results_folder_of(_beside(folder)) if folder.is_symlink() else None
        if root is not None:
            raise OSError(
                errno.ELOOP,
                f"cannot write: {folder} is a symbolic link inside the results folder "
                f"{root}; dse writes there through real folders only (remove the link)",
                str(path),
            )


def _beside(link: Path) -> Path:
    """``link`` named from its folder's real path (links and '..' above it resolved)."""
    return Path(os.path.realpath(link.parent)) / link.name


def unfit_results_folder(path: Path) -> str | None:
    """Why ``path`` must not become a results folder, or None: the file-system root or the
    user's home folder itself (a run writes and ``--overwrite`` removes files at its top), an
    existing folder that belongs to another user or that every user may write in (either could
    plant links in it while dse writes), or one that holds files but is no results folder (neither ``meta.json`` nor an
    ``evaluations`` folder; an empty folder is fine)."""
    where = _resolved(Path(os.path.abspath(path)))
    if where == Path(where.anchor):
        return "is the file-system root; give a folder of its own, e.g. results/NAME"
    try:
        home = _resolved(Path.home())
    except (RuntimeError, KeyError):  # no home folder known
        home = None
    if where == home:
        return "is your home folder itself; give a folder of its own, e.g. ~/results/NAME"
    if not where.is_dir():
        return None
    info = where.stat()
    if info.st_uid != os.geteuid():
        return (
            f"belongs to another user (uid {info.st_uid}), who could put links in it while dse writes; "
            "give a folder of your own"
        )
    if info.st_mode & stat.S_IWOTH:
        return (
            "is writable by every user, who could put links in it while dse writes; "
            "give a folder of your own (or chmod o-w it)"
        )
    meta, log = where / "meta.json", where / "evaluations"
    ours = (meta.is_file() and not meta.is_symlink()) or (log.is_dir() and not log.is_symlink())
    if os.listdir(where) and not ours:
        return (
            "holds files but is not a dse results folder (no meta.json); give a new or empty folder"
        )
    return None


def _private_folder(path: Path) -> Path:
    """A new folder beside ``path`` that only this user can enter (``mkdtemp``: an
    unpredictable name, created exclusively, mode 0700), named ``.NAME.RANDOM.PID.tmp`` so
    that readers skip it and :class:`~dse.store.ResultStore` removes it once the pid is gone."""
    # a name of at most 255 bytes, as the file's own may be (a long one is cut)
    try:
        return Path(
            tempfile.mkdtemp(
                prefix=f".{_cut(path.name, 255 - 40)}.",
                suffix=f".{os.getpid()}.tmp",
                # absolute: a library writing by path (xarray) reads a leading '~' of a
                # relative one as the home folder, and would write there; '..' kept, as
                # the rename onto ``path`` walks it (after a link it leaves the link's target)
                dir=str(path.parent.absolute()),
            )
        )
    except (
        OSError
    ) as exc:  # named as the file to write, not the hidden folder that could not be made
        raise OSError(exc.errno, f"cannot write: {exc.strerror or exc}", str(path)) from None


def _cut(name: str, limit: int) -> str:
    """``name`` cut to at most ``limit`` bytes of UTF-8 (whole characters)."""
    return name.encode()[:limit].decode(errors="ignore")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path for ``path``, renamed onto it when the block succeeds. The temporary
    path lies in a private folder made beside ``path`` (:func:`_private_folder`), so nobody
    else can put a link where the block (or a library writing by path: xarray, matplotlib,
    pyarrow) writes; ``path`` is checked (:func:`refuse_unsafe_write`) before the block and
    again just before the rename, which replaces a directory entry and never writes through
    one. A device, pipe, socket or symbolic link at ``path`` is refused (OSError)."""
    path = Path(path)
    refuse_unsafe_write(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    private = _private_folder(path)
    tmp = private / path.name
    try:
        yield tmp
        if tmp.is_symlink():
            raise OSError(
                errno.ELOOP, "cannot write: the file written is a symbolic link", str(path)
            )
        if tmp.is_file():
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        refuse_unsafe_write(path)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:  # named as the file the caller writes, not the temporary one beside it
        if exc.filename is not None and Path(exc.filename) != tmp and str(private) not in str(exc):
            raise  # about another file: its own name says where
        # (no file named: a write that found the disk full says only "No space left on device")
        why = (
            (exc.strerror or str(exc))
            .replace(str(tmp), str(path))
            .replace(str(private), str(path.parent))
        )
        if not why.startswith("cannot write"):
            why = f"cannot write: {why}"
        raise OSError(exc.errno, why, str(path)) from None
    finally:
        shutil.rmtree(private, ignore_errors=True)


def stage_file(path: Path, data: Any) -> Path:
    """Write ``data`` (bytes or a buffer, or a function that writes to the open binary file
    it is given) for ``path`` now, and put it there later: the file is written and flushed
    in a private folder beside ``path`` (as :func:`atomic_path` makes one) and its path
    returned, for :func:`commit_staged` to make durable and rename onto ``path``, or onto
    another name in that folder, from any process of this machine (a local cluster's worker
    writes an evaluated chunk, the run commits it in order). Nothing is left where the write
    fails. Not fsynced here: the writer (a worker, whose core is the evaluations') would wait
    for the disk; it only starts the disk write (:func:`start_writeback`), and the
    committer's fsync waits for it, while the workers go on (10^7 candidates on 2 workers,
    2026-11-29: the workers' time writing a chunk of 131,072 rows 0.95 -> 0.70 us a row)."""
    path = Path(path)
    refuse_unsafe_write(path)
    private = _private_folder(path)
    tmp = private / path.name
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            start_writeback(f.fileno())
    except BaseException:
        shutil.rmtree(private, ignore_errors=True)
        raise
    return tmp


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's ``sync_file_range`` from the C library (Python's ``os`` has none), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


#: ``sync_file_range``'s SYNC_FILE_RANGE_WRITE: start writing the dirty pages, do not wait
_START_WRITE = 2


def start_writeback(fd: int) -> None:
    """Start writing a file's bytes to the disk without waiting (Linux's
    ``sync_file_range(SYNC_FILE_RANGE_WRITE)``; elsewhere nothing): the writer pays for
    handing the pages to the disk, so a later ``fsync`` by another process (the run's
    commit) mostly waits: a 25 MB chunk's file, started here, took that fsync 0.3-0.9 ms
    against 10-13 ms (2026-11-29), and the run's process stays light (its marginal CPU
    per candidate, 10^6 to 10^7 on 2 workers: 0.015, 0.042 and 0.071 us with this, 0.077
    without; a noisy figure on this machine). A hint only: durability is the fsync's."""
    call = _sync_file_range()
    if call is not None:
        call(fd, 0, 0, _START_WRITE)


def commit_staged(staged: Path, path: Path) -> None:
    """Make a file :func:`stage_file` wrote durable (fsync), rename it onto ``path`` (checked
    as :func:`atomic_path` checks its target; a folder of the same file system), make the
    rename durable, and remove the private folder it was written in: a name in ``path``'s
    folder only ever names a file whose bytes are on the disk."""
    staged, path = Path(staged), Path(path)
    refuse_unsafe_write(path)
    private = staged.parent  # removed below: only a private folder of path's own folder
    try:
        ours = (
            private.name.startswith(".")
            and private.name.endswith(".tmp")
            and not private.is_symlink()
            and os.path.samefile(private.parent, path.parent)
        )
    except OSError:
        ours = False
    if not ours:
        raise OSError(errno.ENOENT, "cannot write: the staged file is gone", str(path))
    try:  # not through a link (a file of the same name planted in its place)
        fd = os.open(staged, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise OSError(errno.ENOENT, "cannot write: the staged file is gone", str(path)) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.ENOENT, "cannot write: the staged file is gone", str(path))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(staged, path)
    fsync_dir(path.parent)
    shutil.rmtree(private, ignore_errors=True)


def discard_staged(staged: Path) -> None:
    """Remove a file :func:`stage_file` wrote, with its private folder."""
    shutil.rmtree(Path(staged).parent, ignore_errors=True)


def is_zarr_store(path: Path) -> bool:
    """Whether ``path`` is a folder holding a zarr store (format 2 or 3) at its top."""
    path = Path(path)
    return path.is_dir() and ((path / "zarr.json").is_file() or (path / ".zgroup").is_file())


@contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """A temporary folder for ``path`` (in a private folder beside it, as :func:`atomic_path`
    makes), put in its place when the block succeeds; an old folder there is moved aside
    (into the private folder) first and removed after. A reader finds the old folder or the
    new one, never half of one; a failed block, or a failure between the two renames, leaves
    ``path`` as it was. A symbolic link at ``path`` is refused, as a file is."""
    path = Path(path)
    if path.is_symlink():
        refuse_unsafe_write(path)
    if path.exists() and not path.is_dir():
        raise OSError(errno.ENOTDIR, "cannot write: it is a file, not a folder", str(path))
    refuse_unsafe_write(path / "x")  # the folders on the way to it
    path.parent.mkdir(parents=True, exist_ok=True)
    private = _private_folder(path)
    tmp, old = private / path.name, private / ".old"
    moved = False
    try:
        yield tmp
        if path.is_symlink():
            refuse_unsafe_write(path)
        if path.exists():
            os.replace(path, old)
            moved = True
        os.replace(tmp, path)
        moved = False
        fsync_dir(path.parent)
    finally:
        if moved and not os.path.lexists(path):  # the new one did not arrive: the old one goes back
            os.replace(old, path)
        shutil.rmtree(private, ignore_errors=True)


def remove_path(path: Path) -> None:
    """Remove a file, link or folder tree at ``path`` (nothing there is fine); a link is
    removed itself, never followed."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: Any) -> None:
    """Write ``data`` (bytes, or any buffer: an Arrow buffer is written without a copy) to
    ``path`` so that the file is either old or new, never torn."""
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def append_durably(path: Path, data: bytes, *, keep: int | None = None) -> None:
    """Append ``data`` to the file ``path`` (created when missing) and fsync it; ``keep``:
    first cut the file to its first ``keep`` bytes (0: a new file's content). Appended bytes
    are durable when this returns, so a record written after them (a state saved
    atomically) may count on them; bytes appended after the last such record are what
    ``keep`` cuts off when the record is read back. Never through a link (O_NOFOLLOW), nor
    into a file with another name elsewhere (a hard link: :func:`refuse_shared_file`)."""
    refuse_unsafe_write(path)
    new = not os.path.lexists(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    try:
        _refuse_links_to(os.fstat(fd), path)  # the file opened, not the name looked at
        if keep is not None:
            os.ftruncate(fd, keep)
        os.lseek(fd, 0, os.SEEK_END)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        fsync_dir(Path(path).parent)


def refuse_shared_file(path: Path) -> None:
    """Raise OSError (one line, naming ``path``) where the file at ``path`` has other names
    (hard links): a write in place (an append, a third-party library's journal) would change
    the file under its other names too, wherever they are. A file replaced by a rename (the
    atomic writes) leaves the other names' content as it was, and needs no such check."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    _refuse_links_to(st, path)


def _refuse_links_to(st: os.stat_result, path: Path) -> None:
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise OSError(
            errno.EMLINK,
            f"cannot write: the file has {st.st_nlink - 1} other name(s) (a hard link); dse "
            "appends to it in place, which would change it under those names too (remove "
            "the other names, or this one)",
            str(path),
        )


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
