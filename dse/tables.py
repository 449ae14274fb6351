"""The shape of a CSV file a user gives (candidates, measurement tables), checked before
pandas reads it: a row with more fields than the header (which ``read_csv`` turns into an
index column, shifting every value one column to the left), a nameless header column
(``Unnamed: 3``) and a header naming a column twice (which it renames ``name.1``) are
refused with their line.
"""

from __future__ import annotations

import csv
import stat
from pathlib import Path

from dse.errors import DseError

#: the largest table file dse reads whole into memory (MB, 10^6 bytes): candidates for ``dse
#: evaluate``, measurements for ``dse calibrate``. A table is held some tens of times its size
#: at the peak (200 MB of candidates took 9.2 GB); a larger one is refused in one line.
TABLE_LIMIT_MB = 50.0


def check_size(
    path: Path | str, what: str, *, limit_mb: float = TABLE_LIMIT_MB, instead: str = ""
) -> None:
    """Refuse a file of more than ``limit_mb`` MB (``what`` it is, and ``instead``: what to
    do rather, in the message), and a device, pipe or socket (a named pipe nobody writes to
    would hold the reader forever, ``/dev/zero`` never ends); a missing file is left to the
    reader."""
    try:
        info = Path(path).stat()
    except OSError:
        return
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        raise DseError(
            f"is a device, pipe or socket, not a file; give the {what} itself", file=str(path)
        )
    size_mb = info.st_size / 1e6
    if size_mb > limit_mb:
        raise DseError(
            f"is {size_mb:,.1f} MB, more than the {limit_mb:g} MB a {what} may be"
            + (f"; {instead}" if instead else ""),
            file=str(path),
        )


def check_shape(path: Path | str, *, comment: str | None = None) -> None:
    """Refuse a data row with more fields than the header (empty ones too: a comma at the
    end of a line), and a header with a nameless column or one named twice. Rows with fewer
    fields are left to the reader (their missing cells are empty); blank lines, and lines
    starting with ``comment``, are not rows. A file that cannot be read as text is left to
    the reader, which names the problem."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            width = None
            for record in reader:
                if not any(cell.strip() for cell in record):
                    continue
                if comment and record[0].lstrip().startswith(comment):
                    continue
                if width is None:
                    header = [c.strip() for c in record]
                    width = len(header)
                    if "" in header:
                        raise DseError(
                            f"the header's column {header.index('') + 1} has no name"
                            + (" (a comma at the end of the line?)" if header[-1] == "" else ""),
                            file=str(path),
                            field=f"line {reader.line_num}",
                            allowed="a name for every column",
                        )
                    twice = sorted({c for c in header if c and header.count(c) > 1})
                    if twice:
                        raise DseError(
                            f"column '{twice[0]}' appears twice in the header",
                            file=str(path),
                            field=twice[0],
                            allowed="each column once",
                        )
                elif (
                    len(record) > width
                ):  # pandas would shift the row's values under an index column
                    trailing = not any(cell.strip() for cell in record[width:])
                    raise DseError(
                        f"{len(record)} fields under a header of {width}"
                        + (" (a comma at the end of the line?)" if trailing else ""),
                        file=str(path),
                        field=f"line {reader.line_num}",
                        allowed="one value per header column (an empty one between two commas)",
                    )
    except (OSError, UnicodeDecodeError, csv.Error):
        return
