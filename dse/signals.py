"""A signal's handler for the length of a block."""

from __future__ import annotations

import contextlib
import signal
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
            if current is not None:  # None: a handler not set from Python, which Python cannot restore
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
