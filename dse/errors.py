"""User-facing errors: one message naming the file, the field, the value and what is allowed."""

from __future__ import annotations


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
            text += f" (got {self.value!r})"
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
