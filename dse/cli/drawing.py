"""``pareto.png`` drawn by a forked child that imports the plotting libraries while the run goes on.

``dse run`` ends by drawing the front; matplotlib's import alone is about 0.7 s of CPU on an
idle core, and the main process is busy through the whole run (checking the study, starting
the cluster, handling results, writing ``pareto.nc``), while the second core is idle until
the workers have work. :meth:`Drawer.start` forks a child just before the cluster starts
(the run's own process then holds one thread, its folder is not locked yet and no port is
open); the child imports matplotlib and :mod:`dse.outputs.plot` and waits. At the end the
main process sends it the results folder and the child draws the same ``pareto.png`` with
the same code that would have drawn it in the main process.

The child is only a way to get there sooner: when it cannot be started (not Linux, a
thread of this process running: an in-process call from a program that has threads), did
not answer, or says its drawing failed, :func:`draw` draws in this process, which then says
what went wrong exactly as before. A child that is not asked to draw ends when its pipe
closes (the run ended otherwise) or when the run's process is gone (killed: the workers
forked later hold the pipe's write end too, as may any process that took the run's pipes,
so the child watches its parent's process id, as the forked workers do). Ctrl-C is the
run's: the child ignores SIGINT; SIGTERM stops its drawing (its files are written
atomically, so nothing half written stays).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from pathlib import Path

#: how often a waiting child looks whether the run's process is still there (seconds)
PARENT_POLL_S = 0.5


class Drawer:
    """The forked child and its two pipes (requests to it, answers from it)."""

    def __init__(self, pid: int, requests: int, answers: int) -> None:
        self.pid = pid
        self._requests: int | None = requests
        self._answers: int | None = answers

    @classmethod
    def start(cls, threads: int | None = None) -> Drawer | None:
        """Fork the child, or None where forking is not safe or not available: this process
        runs a thread besides the main one (``threads``, default ``threading.active_count()``;
        a forked copy of a thread that held a lock would hold it for good)."""
        alone = (threading.active_count() if threads is None else threads) == 1
        if not sys.platform.startswith("linux") or not alone:
            return None
        parent = os.getpid()
        requests_r, requests_w = os.pipe()
        answers_r, answers_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (requests_r, requests_w, answers_r, answers_w):
                os.close(fd)
            return None
        if pid == 0:  # the child: never returns
            code = 0
            try:
                os.close(requests_w)
                os.close(answers_r)
                _serve(requests_r, answers_w, parent)
            except BaseException:  # noqa: BLE001 - the parent draws itself when no answer comes
                code = 1
            finally:
                os._exit(code)
        os.close(requests_r)
        os.close(answers_w)
        return cls(pid, requests_w, answers_r)

    def draw(self, results: Path) -> bool:
        """Have the child draw ``results``' front; True when it did. A KeyboardInterrupt
        (Ctrl-C) stops the child's drawing and is raised here."""
        if self._requests is None or self._answers is None:
            return False
        try:
            os.write(self._requests, os.fsencode(str(Path(results).absolute())) + b"\n")
            answer = _read_line(self._answers)
        except KeyboardInterrupt:
            self.close(stop=True)
            raise
        except OSError:  # the child is gone
            answer = b""
        finally:
            self._close_pipes()
        return answer == b"drawn"

    def close(self, *, stop: bool = False) -> None:
        """Let the child go (its pipe closes) and reap it; ``stop``: stop it now (SIGTERM: a
        drawing in progress removes what it started)."""
        self._close_pipes()
        if self.pid:
            with contextlib.suppress(OSError):
                if stop:
                    os.kill(self.pid, signal.SIGTERM)
                os.waitpid(self.pid, 0)
            self.pid = 0

    def _close_pipes(self) -> None:
        for fd in (self._requests, self._answers):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._requests = self._answers = None


def _read_line(fd: int, parent: int | None = None) -> bytes:
    """A line from ``fd`` (b"" at its end); ``parent``: also b"" once that process is gone."""
    data = b""
    while not data.endswith(b"\n"):
        if parent is not None:
            while not select.select([fd], [], [], PARENT_POLL_S)[0]:
                if os.getppid() != parent:
                    return b""
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.strip()


def _stop(signum, frame):
    raise KeyboardInterrupt


def _serve(requests: int, answers: int, parent: int) -> None:
    """The child: import, wait for a results folder, draw it, answer."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's; it stops this child
    signal.signal(signal.SIGTERM, _stop)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # a library's message would be the run's to print: the parent
    os.dup2(devnull, 2)  # draws again, in its own process, when this child fails
    import matplotlib

    matplotlib.use("Agg")  # as the plot chooses it (dse.outputs.plot.front_figure)
    import matplotlib.pyplot  # noqa: F401

    from dse.outputs.plot import plot_results

    request = _read_line(requests, parent)
    if not request:  # the run ended otherwise, or its process is gone
        return
    plot_results(Path(os.fsdecode(request)))
    os.write(answers, b"drawn\n")
