"""User-facing errors: one message naming the file, the field, the value and what is allowed."""

from __future__ import annotations

import reprlib

#: how much of an offending value a message shows: a whole study or a YAML alias bomb
#: would otherwise be printed in full
_VALUE_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_VALUE_REPR.maxlevel, _VALUE_REPR.maxstring, _VALUE_REPR.maxother = 2, 80, 80
_VALUE_REPR.maxdict = _VALUE_REPR.maxlist = _VALUE_REPR.maxtuple = _VALUE_REPR.maxset = 6
_VALUE_CHARS = 160


def _short_repr(value: object) -> str:
    text = _VALUE_REPR.repr(value)
    return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS - 3] + "..."


class DseError(Exception):
    """An error caused by user input or the environment; shown without a traceback, exit code 2."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        value: object = None,
        allowed: str | None = None,
        has_value: bool = False,
    ) -> None:
        self.message = message
        self.file = file
        self.field = field
        self.value = value
        self.allowed = allowed
        self.has_value = has_value or value is not None
        super().__init__(self.render())

    def render(self) -> str:
        where = ": ".join(p for p in (self.file, self.field) if p)
        text = self.message
        if self.has_value:
            text += f" (got {_short_repr(self.value)})"
        if self.allowed:
            text += f"; allowed: {self.allowed}"
        return f"{where}: {text}" if where else text

    def with_file(self, file: str) -> DseError:
        if self.file is None:
            self.file = file
        self.args = (self.render(),)
        return self


class StudyError(DseError):
    """The study file is invalid."""


class StoreError(DseError):
    """A results folder cannot be used (locked, truncated, foreign or newer format)."""
