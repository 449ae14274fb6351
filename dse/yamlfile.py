"""The one way dse reads a YAML file it was handed (a study, an accelerator profile, a cluster
profile): safe constructors only, a key written twice in one mapping refused (YAML would
silently keep the last one), and nesting bounded (a document nested a thousand levels deep
would otherwise end in Python's RecursionError). Every problem is a :class:`yaml.YAMLError`,
so a caller turns it into its one-line refusal as it does a syntax error. A file a study names
(a catalog of bundles) is read by :func:`read_inside`: beside the study, through real
folders only, and bounded in size. Any other file a user names or an untrusted folder holds
is opened by :func:`open_regular` (read by :func:`read_bounded`): a regular file only, never
a pipe or a device that would hold the reader forever."""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

#: the deepest nesting of mappings and lists a file dse reads may have (a study is ~6 deep)
MAX_DEPTH = 64


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate keys and nesting deeper than :data:`MAX_DEPTH`."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_DEPTH} levels (allowed: at most {MAX_DEPTH})",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _mapping_without_duplicates(
    loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False
) -> dict:
    """A mapping; a key written twice is an error (YAML would silently keep the last one)."""
    seen: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *anchor': merged by construct_mapping
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key (a list): construct_mapping refuses it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"key '{key}' appears twice in one mapping", key_node.start_mark
            )
        seen[key] = True
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


# a date (2025-02-15) is read as the text written, not as a Python date: the inputs that take
# one (``software_release``) read their text, and a message quotes it as the user wrote it
StrictLoader.add_constructor(
    "tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node)
)


class NumbersLoader(StrictLoader):
    """:class:`StrictLoader` that also reads ``2.6e10`` as a number (YAML 1.1 reads it as text;
    studies are full of such numbers)."""


NumbersLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str, *, numbers: bool = True) -> Any:
    """The document in ``text``; raises :class:`yaml.YAMLError` on a syntax error, a duplicate
    key or nesting deeper than :data:`MAX_DEPTH`."""
    try:
        return yaml.load(text, Loader=NumbersLoader if numbers else StrictLoader)  # noqa: S506
    except RecursionError:  # (bounded above; kept for a deep chain of aliases)
        raise yaml.YAMLError(f"nested too deeply (allowed: at most {MAX_DEPTH} levels)") from None


def read_inside(folder: Path, name: str, *, limit_bytes: int) -> bytes:
    """The bytes of the file ``name`` (a relative path) inside ``folder``, read as a file a
    study names is: an absolute path, a ``..`` component, a symbolic link at the file or at
    any folder below ``folder`` on the way to it (which could lead anywhere), something that
    is no regular file and a file of more than ``limit_bytes`` bytes are refused. Raises
    ``ValueError`` with a one-line reason (``OSError`` where the file cannot be read)."""
    rel = Path(name)
    if not name or rel.is_absolute() or name.startswith("~"):
        raise ValueError("is not a path relative to the study's folder")
    if ".." in rel.parts:
        raise ValueError("leads out of the study's folder ('..'); keep the file beside the study")
    here = Path(folder)
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            raise ValueError(
                f"passes through a symbolic link ({here}); dse reads a file a study names "
                "through real folders only (copy the file beside the study)"
            )
    fd = os.open(here, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder, a device, a pipe
        os.close(fd)
        raise ValueError("is not a regular file")
    with os.fdopen(fd, "rb") as f:
        return _read_at_most(f, limit_bytes)


def _read_at_most(f, limit_bytes: int) -> bytes:
    """The bytes of the open file ``f``, at most ``limit_bytes`` (one more is read to tell a
    larger file, refused with ``ValueError``)."""
    data = f.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise ValueError(f"is larger than the {limit_bytes:,} bytes such a file may be")
    return data


#: the most bytes a small file may hold: a results folder's lock and progress, an accelerator
#: profile, a cluster profile (each a few kB)
SMALL_FILE_BYTES = 1_000_000


def open_regular(path: Path | str) -> Any:
    """``path`` opened to be read in binary, a regular file only: a pipe, a device or a
    socket is refused rather than opened for reading (a named pipe nobody writes to would
    hold the reader forever, ``/dev/zero`` never ends) with an ``OSError`` (``EINVAL``) whose
    ``strerror`` says so; a folder with ``IsADirectoryError``."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(
                errno.EINVAL, "is a device, pipe or socket, not a file; give a file path", str(path)
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path | str, *, limit_bytes: int) -> str:
    """The text of the file at ``path`` that a user named (a study) or an untrusted folder
    holds (a results folder's lock): a regular file (:func:`open_regular`) of at most
    ``limit_bytes`` bytes. Raises ``OSError`` where the file cannot be opened or read (a
    pipe, a device, a folder, a missing file), ``ValueError`` with a one-line reason where it
    is larger, and ``UnicodeDecodeError`` (a ValueError) where it is not UTF-8; line ends are
    read as ``Path.read_text`` reads them (``\\r\\n`` and ``\\r`` as ``\\n``)."""
    with open_regular(path) as f:
        data = _read_at_most(f, limit_bytes)
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


#: libyaml's safe loader where PyYAML was built with it (the same documents), else Python's
_PACKAGED_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_packaged(text: str) -> Any:
    """A data file shipped inside the package (the analytic model's catalogs, not a file a
    user handed over): safe constructors, read by libyaml where available, about 8x faster
    than the pure-Python parser (its five catalogs: 98 against 12 ms of every process's
    start, the run's and each worker's; the same dictionaries, compared)."""
    return yaml.load(text, Loader=_PACKAGED_LOADER)  # noqa: S506
