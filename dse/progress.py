"""A run's progress as it goes: evaluations per second, time left, failures, the best value
of each objective, for a display (a :class:`ProgressSink`) and for other terminals
(``progress.json`` in the results folder, rewritten every few seconds; ``dse status`` reads it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import time
from collections import deque
from pathlib import Path

from dse.files import atomic_write_text, json_default

#: the progress file in a results folder
PROGRESS_FILE = "progress.json"


class ProgressSink:
    """Receives progress; the CLI shows it with rich, tests and libraries ignore it.

    ``advance(n, record)``: ``n`` more candidates done (evaluated or found in the log);
    ``record`` holds the counts (``evaluations``, ``feasible``, ``failed``, ``front_size``),
    the pace (``rate_per_s``, ``eta_s``, None until known) and ``best`` (metric -> value),
    and after a whole batch its ``hypervolume``. ``note(text)``: a line worth telling (the
    dashboard's address, a lost cluster)."""

    def start(self, total: int | None, description: str) -> None: ...
    def advance(self, n: int, record: dict) -> None: ...
    def note(self, text: str) -> None: ...
    def stop(self) -> None: ...


class Pace:
    """Evaluations per second over the last ``window_s`` seconds (or since :meth:`restart`,
    when that is more recent)."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self.events: deque[tuple[float, int]] = deque()
        self.restart()

    def restart(self) -> None:
        """Count from now (once the workers are there: starting them is not evaluating)."""
        self.started = time.monotonic()
        self.events.clear()

    def add(self, n: int) -> None:
        now = time.monotonic()
        self.events.append((now, n))
        while self.events and now - self.events[0][0] > self.window_s:
            self.events.popleft()

    def rate(self) -> float | None:
        if not self.events:
            return None
        now = time.monotonic()
        since = max(self.started, now - self.window_s)
        return sum(n for t, n in self.events if t >= since) / max(now - since, 1e-9)


class ProgressReporter:
    """Counts what is done, measures the pace, feeds the sink, and rewrites the progress
    file at most every ``every_s`` seconds (and when the run stops)."""

    def __init__(
        self, sink: ProgressSink, folder: Path | None, total: int | None, *, every_s: float = 2.0
    ) -> None:
        self.sink, self.total = sink, total
        self.path = Path(folder) / PROGRESS_FILE if folder is not None else None
        self.every_s = every_s
        self.pace = Pace()
        self.done = 0
        self.record: dict = {}
        self.started = time.monotonic()
        self._written = 0.0
        self._last_note = ""

    def start(self, description: str, done: int, record: dict) -> None:
        self.sink.start(self.total, description)
        self.record = dict(record)
        if done:
            self.done = done
            self.sink.advance(done, self.record)
        self._write("running", force=True)

    def advance(self, n: int, record: dict, *, evaluated: int = 0) -> None:
        """``n`` more candidates done, ``evaluated`` of them evaluated now (the others were stored)."""
        if evaluated:
            self.pace.add(evaluated)
        self.done += n
        rate = self.pace.rate()
        left = None if self.total is None else max(self.total - self.done, 0)
        eta = None if rate is None or left is None or rate <= 0 else left / rate
        self.record = {**self.record, **record, "rate_per_s": rate, "eta_s": eta}
        self.sink.advance(n, self.record)
        self._write("running")

    def note(self, text: str) -> None:
        self._last_note = text
        if hasattr(self.sink, "note"):  # a sink written before notes existed has none
            self.sink.note(text)
        self._write("running", force=True)

    def stop(self, state: str) -> None:
        self.sink.stop()
        self._write(state, force=True)

    def _write(self, state: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.path is None or (not force and now - self._written < self.every_s):
            return
        self._written = now
        content = {
            "state": state,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "updated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "updated_unix": time.time(),
            "elapsed_s": round(now - self.started, 3),
            "done": self.done,
            "total": self.total,
            **{k: v for k, v in self.record.items() if k != "batch"},
            "note": self._last_note,
        }
        try:
            atomic_write_text(self.path, json.dumps(content, indent=1, default=json_default) + "\n")
        except OSError:  # progress is a courtesy: a full disk must not stop the run here
            pass


def read_progress(folder: Path) -> dict | None:
    """The progress file of a results folder, None when there is none (or it is unreadable)."""
    try:
        content = json.loads((Path(folder) / PROGRESS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None
