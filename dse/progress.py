"""A run's progress as it goes: evaluations per second, time left, failures, the best value
of each objective, for a display (a :class:`ProgressSink`) and for other terminals
(``progress.json`` in the results folder, rewritten every few seconds; ``dse status`` reads it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
import socket
import time
from collections import deque
from pathlib import Path

from dse.files import atomic_write_text, json_default
from dse.yamlfile import SMALL_FILE_BYTES, read_bounded

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
        self.first: float | None = None  # when the first chunk came back
        self.events.clear()

    def add(self, n: int) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = now
        self.events.append((now, n))
        while self.events and now - self.events[0][0] > self.window_s:
            self.events.popleft()

    def rate(self) -> float | None:
        """Evaluations per second since the first chunk came back (or over the window).

        The wait for the first chunk is start-up (imports, page faults, the first tasks kept
        small until a cost is measured), not the pace: counted, it made the first time-left
        estimate of a large run ~30x too long. So the clock starts when the first chunk is
        back and that chunk is not counted; the rate is unknown (None) until more chunks came
        back over at least :data:`MIN_SPAN_S` (a first wave of chunks from many workers
        lands at once)."""
        if self.first is None:
            return None
        now = time.monotonic()
        since = max(self.first, now - self.window_s)
        if now - self.first < MIN_SPAN_S:
            return None
        counted = sum(n for t, n in self.events if t > since)
        return counted / (now - since) if counted else None


#: the shortest time after the first chunk over which a rate is measured
MIN_SPAN_S = 0.5


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
        self._state = state
        self._write(state, force=True)

    @contextlib.contextmanager
    def writing(self, description: str):
        """Progress of the datasets written after the search (a quarter of a 10^6-point
        run's time): every dask task computed within counts as a step, for the display
        (``record["phase"]``: ``tasks``) and in ``progress.json`` (``writing``: done and
        total tasks; ``state`` stays the run's). Shows nothing where no dask graph is
        computed (a small log is written in one piece)."""
        from dask.callbacks import Callback

        reporter, phase = self, {"done": 0, "total": 0, "started": False}
        t0 = time.monotonic()
        state = getattr(self, "_state", "running")

        def record() -> dict:
            elapsed = time.monotonic() - t0
            rate = phase["done"] / elapsed if elapsed > 0 and phase["done"] else None
            left = phase["total"] - phase["done"]
            return {
                "phase": "tasks",
                "total": phase["total"],
                "rate_per_s": rate,
                "eta_s": None if rate is None else left / rate,
            }

        class _Steps(Callback):
            def _start_state(self, dsk, _state) -> None:
                phase["total"] += len(dsk)
                if not phase["started"]:
                    phase["started"] = True
                    reporter.sink.start(phase["total"], description)
                reporter.sink.advance(0, record())

            def _posttask(self, *_args) -> None:
                phase["done"] += 1
                reporter.sink.advance(1, record())
                reporter.record = {
                    **reporter.record,
                    "writing": {"done": phase["done"], "total": phase["total"]},
                }
                reporter._write(state)

        try:
            with _Steps():
                yield
        finally:
            if phase["started"]:
                self.sink.stop()
                self.record = {k: v for k, v in self.record.items() if k != "writing"}
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


def clock_time(seconds: float | None) -> str:
    """``h:mm:ss`` of a duration, ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class LineProgress(ProgressSink):
    """Progress as plain lines, for output that is not a terminal (a batch job's log, a
    pipe), where a live bar shows nothing until the end. A line is written when at least
    ``every_s`` seconds **and** ``every_fraction`` of the total have passed since the last
    one (whichever is rarer: a long run writes ~10 lines, a slow one one per ``every_s``),
    and a last one when it stops. One line reads::

        progress: 40/66 candidates done (60.6 %), 12.3 evaluations/s, time left 0:00:02, elapsed 0:00:03 (h:mm:ss); feasible 38, failed 0, front 5 points

    :data:`LINE` parses it. A phase after the search (the datasets written) counts its own
    steps (``record["phase"]``: what they are, e.g. ``tasks``) and says so instead."""

    def __init__(
        self,
        write,
        *,
        every_s: float = 10.0,
        every_fraction: float = 0.1,
        clock=time.monotonic,
    ) -> None:
        self.write, self.every_s, self.every_fraction, self.clock = (
            write,
            every_s,
            every_fraction,
            clock,
        )
        self.total: int | None = None
        self.description = ""
        self.done = self._said_done = 0
        self.record: dict = {}
        self.started = self._said_at = clock()
        self._open = self._open_running = False

    def start(self, total: int | None, description: str) -> None:
        self.total, self.description = total, description
        self.done = self._said_done = 0
        self.record = {}
        self.started = self._said_at = self.clock()
        self._open = self._open_running = True
        self.write(f"progress: {description}: started" + (f", {total:,} to do" if total else ""))

    def advance(self, n: int, record: dict) -> None:
        self.done += n
        self.record = record
        if record.get("phase") and record.get("total"):  # a phase learns its size as it goes
            self.total = record["total"]
        now = self.clock()
        step = self.every_fraction * self.total if self.total else 0.0
        if now - self._said_at >= self.every_s and self.done - self._said_done >= step:
            self._say(now)

    def note(self, text: str) -> None:
        self.write(text)

    def stop(self) -> None:
        if self._open:
            self._open_running = False
            if self.done != self._said_done or not self.done:  # the last count, said once
                self._say(self.clock())
            self._open = False

    def _no_mean_rate(self, now: float) -> bool:
        """Whether no mean rate can stand in for an unmeasured one: while the run goes on (a
        mean over the start-up is the estimate the pace avoids), or with no time elapsed."""
        return self._open_running or now <= self.started or not self.done

    def _say(self, now: float) -> None:
        self._said_at, self._said_done = now, self.done
        r = self.record
        noun = r.get("phase") or "candidates"
        total = self.total
        of = f"{self.done:,}/{total:,}" if total else f"{self.done:,}"
        share = f" ({100 * self.done / total:.1f} %)" if total else ""
        rate, eta = r.get("rate_per_s"), r.get("eta_s")
        if rate is None and not self._no_mean_rate(now):  # the run's mean, once it is over
            rate = self.done / (now - self.started)
        if total and self.done >= total:
            eta = 0.0
        per_s = "?" if rate is None else f"{rate:,.1f}"
        what = "evaluations" if noun == "candidates" else noun
        line = (
            f"progress: {of} {noun} done{share}, {per_s} {what}/s, time left "
            f"{clock_time(eta)}, elapsed {clock_time(now - self.started)} (h:mm:ss)"
        )
        if noun == "candidates":
            line += (
                f"; feasible {r.get('feasible', 0):,}, failed {r.get('failed', 0):,}, "
                f"front {r.get('front_size', 0):,} points"
            )
        else:
            line = line.replace("progress:", f"progress: {self.description}:", 1)
        self.write(line)


#: a line of :class:`LineProgress`: done, total, per cent, rate, its unit, time left and elapsed
LINE = re.compile(
    r"progress: (?:.*?: )?(?P<done>[\d,]+)(?:/(?P<total>[\d,]+))? (?P<noun>\w+) done"
    r"(?: \((?P<percent>[\d.]+) %\))?, (?P<rate>[\d,.]+|\?) (?P<unit>\w+)/s, "
    r"time left (?P<left>[\d:]+|\?), elapsed (?P<elapsed>[\d:]+) \(h:mm:ss\)"
)


def read_progress(folder: Path) -> dict | None:
    """The progress file of a results folder, None when there is none (or it is unreadable)."""
    try:
        text = read_bounded(Path(folder) / PROGRESS_FILE, limit_bytes=SMALL_FILE_BYTES)
        content = json.loads(text)  # (a pipe planted there is refused, not waited on)
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None
