"""A signal's handler for the length of a block, and the interrupts Python could not raise."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def handling(signum: int, handler: Callable[[int, Any], Any] | int) -> Iterator[None]:
    """``handler`` (a function, or ``signal.SIG_IGN``) for ``signum`` inside the block, the
    previous one after it. Only the main thread can set a handler: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, before)


@contextlib.contextmanager
def kept(*signums: int) -> Iterator[None]:
    """The handlers of ``signums`` as they are now, back in place after the block, whatever
    it sets (an import that installs its own)."""
    with contextlib.ExitStack() as stack:
        for signum in signums:
            current = signal.getsignal(signum)
            if (
                current is not None
            ):  # None: a handler not set from Python, which Python cannot restore
                stack.enter_context(handling(signum, current))
        yield


@contextlib.contextmanager
def deferred(*signums: int) -> Iterator[None]:
    """Inside the block ``signums`` are noted, not handled; after it the previous handlers
    are back and each noted signal is raised again, once, for them to handle. A process
    forked inside the block (a local cluster's workers) keeps the noting handler: a signal
    sent to the whole process group (Ctrl-C in a terminal, a batch system's SIGTERM) is then
    handled by this process alone, and the workers print nothing. (Ignoring the signal in
    the block instead lost a Ctrl-C pressed while the workers started.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum: int, frame: Any) -> None:
        noted.append(signum)

    try:
        with contextlib.ExitStack() as stack:
            for signum in signums:
                stack.enter_context(handling(signum, note))
            yield
    finally:
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)


#: interrupts Python could not raise where they arrived (see :func:`keep_lost_interrupts`)
_lost: list[BaseException] = []


def keep_lost_interrupts() -> None:
    """Keep, instead of printing, a KeyboardInterrupt (Ctrl-C, or the run's SIGTERM) that
    arrived while Python ran a weakref callback or a ``__del__``: an exception cannot leave
    those, so Python printed an "Exception ignored" traceback and the run went on as if no
    key had been pressed. :func:`raise_lost_interrupt` raises it at the next safe point."""
    previous = sys.unraisablehook
    if getattr(previous, "keeps_lost_interrupts", False):
        return

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _lost.append(unraisable.exc_value)
            return
        previous(unraisable)

    hook.keeps_lost_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def raise_lost_interrupt() -> None:
    """Raise the interrupt :func:`keep_lost_interrupts` kept, once (nothing when none was)."""
    if _lost:
        exc = _lost[0]
        _lost.clear()
        raise exc
