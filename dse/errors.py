"""User-facing errors: one message naming the file, the field, the value and what is allowed."""

from __future__ import annotations

import difflib
import re
import reprlib
import unicodedata
from collections.abc import Iterable

#: how much of an offending value a message shows: a whole study or a YAML alias bomb
#: would otherwise be printed in full
_VALUE_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_VALUE_REPR.maxlevel, _VALUE_REPR.maxstring, _VALUE_REPR.maxother = 2, 80, 80
_VALUE_REPR.maxdict = _VALUE_REPR.maxlist = _VALUE_REPR.maxtuple = _VALUE_REPR.maxset = 6
_VALUE_CHARS = 160


def short_repr(value: object) -> str:
    """``value`` as an error message shows it (long texts and numbers shortened)."""
    text = _VALUE_REPR.repr(value)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def printable(text: object, *, keep: str = "") -> str:
    """``text`` safe to print on a terminal: every control character (C0, DEL, C1; those in
    ``keep`` excepted) written as its escape (``\\x1b``), so that a reason text, a name or a
    value read from a file cannot move the cursor, retitle the window or hide what follows."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(
        ch
        if ch in keep or unicodedata.category(ch) != "Cc"
        else ch.encode("unicode_escape").decode()
        for ch in text
    )


def _loose(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def closest(name: object, choices: Iterable[object]) -> list[str]:
    """The text choices a misspelt ``name`` most likely means, best first (at most three;
    none rather than a misleading one):

    1. the same letters and digits in another case or spelling ('Expert-Parallel');
    2. the choices it begins ('H100' for 'H100-SXM'; 'A100' for both A100 parts);
    3. a choice one of whose parts it is ('tpe' for 'optuna-tpe');
    4. difflib's closest (ratio >= 0.75), unless another is as close, and only with the
       same numbers ('llama3-7b' is no typo of 'llama3-70b', 'GB300' none of 'GB200')."""
    if not isinstance(name, str) or not name:
        return []
    texts = [c for c in choices if isinstance(c, str)]
    key = _loose(name)
    same = [t for t in texts if _loose(t) == key]
    if same:
        return same[:1]
    begun = [t for t in texts if len(key) >= 2 and _loose(t).startswith(key)]
    if 1 <= len(begun) <= 3:
        return begun
    parts = [t for t in texts if key in {_loose(p) for p in re.split(r"[-_ .]", t) if p}]
    if 1 <= len(parts) <= 2:
        return parts
    numbers = re.findall(r"\d+", name)
    scored = sorted(
        ((difflib.SequenceMatcher(None, name, t).ratio(), t) for t in texts), reverse=True
    )
    scored = [(r, t) for r, t in scored if r >= 0.75 and re.findall(r"\d+", t) == numbers]
    if not scored or (len(scored) > 1 and scored[1][0] > scored[0][0] - 0.02):
        return []
    return [scored[0][1]]


def suggestion(name: object, choices: Iterable[object]) -> str | None:
    """``did you mean 'x'?`` (or 'x' or 'y') for :func:`closest`'s choices, or None."""
    close = closest(name, choices)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else None


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless one: '1 candidate', '4,096 candidates'."""
    return f"{n:,} {noun}{'s' * (n != 1)}"


def did_you_mean(name: object, choices: Iterable[object]) -> str:
    """:func:`suggestion` in brackets after a message, or ''."""
    text = suggestion(name, choices)
    return f" ({text})" if text else ""


#: pydantic's length errors: "List should have at least 1 item after validation, not 0",
#: "String should have at least 1 character"
_LENGTH = re.compile(
    r"(?:List|Dictionary|Tuple|Set|String|Value) should have (at (?:least|most) \d+ \w+)"
)


def pydantic_message(msg: str) -> str:
    """A pydantic error message in dse's words: without the "Value error, " prefix,
    "Input should be ..." (pydantic's "Input" is the value, not a dse Input) as "expected ...",
    and a list, mapping or text of the wrong length (an empty one) as "expected at least 1 item"."""
    msg = msg.removeprefix("Value error, ")
    length = _LENGTH.match(msg)
    if length:
        return f"expected {length.group(1)}"
    if not msg.startswith("Input should be "):
        return msg
    rest = msg.removeprefix("Input should be ")
    return "expected " + ("a value " if rest.startswith(("greater", "less")) else "") + rest


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
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.field = field
        self.value = value
        self.allowed = allowed
        self.has_value = has_value or value is not None
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = ": ".join(p for p in (self.file, self.field) if p)
        text = self.message
        if self.has_value:
            text += f" (got {short_repr(self.value)}" + (f"; {self.hint})" if self.hint else ")")
        elif self.hint:
            text += f" ({self.hint})"
        if self.allowed:
            text += f"; allowed: {self.allowed}"
        return printable(f"{where}: {text}" if where else text, keep="\t")

    def with_file(self, file: str) -> DseError:
        if self.file is None:
            self.file = file
        self.args = (self.render(),)
        return self


class StudyError(DseError):
    """The study file is invalid."""


class StoreError(DseError):
    """A results folder cannot be used (locked, truncated, foreign or newer format)."""
