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
