"""What dse installs on the dask workers of a run: stopping the evaluator's programs, and
on a local cluster's workers, leaving Ctrl-C to the run."""

from __future__ import annotations

import os
import threading
import time

from distributed import WorkerPlugin

#: seconds between a forked worker's looks at whether the run that started it is still there
PARENT_POLL_S = 0.5

_watching = {"on": False, "hooked": False}


class StopPrograms(WorkerPlugin):
    """On a worker that closes (the run stopped, the cluster shuts down), kill the programs
    the command evaluator runs and the evaluator children of ``evaluator.timeout_s``: they
    run in their own sessions, and the nanny kills a worker busy with a chunk without
    running its exit handlers, which would leave them running."""

    idempotent = True

    def teardown(self, worker) -> None:
        from dse.evaluators.command import stop_programs, worker_closing
        from dse.execution.child import stop_children

        # only on a worker that closes (a plug-in removed from a worker that goes on, with
        # another run's programs, must leave them be)
        if not worker_closing(worker):
            return

        stop_programs()
        stop_children()


class ClosingNoise:
    """A logging filter for what a worker logs while the cluster closes: distributed's
    "Failed to communicate with scheduler during heartbeat" (a traceback), "failed during
    get data" (a traceback: the run, fetching a result straight from the worker, stopped
    on Ctrl-C mid-transfer) and "Async instruction ... ended with CancelledError" (a task
    cancelled by ``Worker.close``). On a local cluster the scheduler and the client live in
    the run's own process and go only when the run stops, which says so itself; a worker
    printed these after the run's one-line message. ``LOGGERS``: where each is logged."""

    LOGGERS = {
        "distributed.worker": (
            "Failed to communicate with scheduler during heartbeat",
            "failed during get data with",
        ),
        "distributed.worker.state_machine": ("ended with CancelledError",),
    }

    def __init__(self, marks: tuple[str, ...]) -> None:
        self.marks = marks

    def filter(self, record) -> bool:
        message = record.getMessage()
        return not any(mark in message for mark in self.marks)


class LeaveSignalsToTheRun(WorkerPlugin):
    """On a local cluster's worker: ignore SIGINT and SIGHUP, and leave the cluster's closing unsaid
    (:class:`ClosingNoise`). Ctrl-C in a terminal reaches the whole
    process group; the run that started the cluster stops it, and a worker's own
    KeyboardInterrupt would only print a traceback. A forked worker already keeps the run's
    noting handler (:func:`dse.signals.deferred`); a spawned one (an evaluator that is not
    fork-safe, a worker the nanny restarted) starts with Python's default and gets it here."""

    idempotent = True

    def setup(self, worker) -> None:
        import logging
        import signal
        import threading

        for name, marks in ClosingNoise.LOGGERS.items():
            logger = logging.getLogger(name)
            if not any(isinstance(f, ClosingNoise) for f in logger.filters):
                logger.addFilter(ClosingNoise(marks))
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if hasattr(signal, "SIGHUP"):  # a closed terminal: the run stops the cluster
                signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _stop_with_parent(parent_pid: int) -> None:
    """A forked worker's watch: once the run that forked it is gone (reparented: its parent
    process id changes), kill the evaluator's programs and leave at once."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    try:
        from dse.evaluators.command import stop_programs
        from dse.execution.child import stop_children

        stop_programs()
        stop_children()
    finally:
        os._exit(1)


def _after_fork_in_child() -> None:
    if not _watching["on"]:
        return
    _watching["on"] = False  # this worker's own forks (the command evaluator's) are not watched
    threading.Thread(
        target=_stop_with_parent, args=(os.getppid(),), name="dse-parent-watch", daemon=True
    ).start()


class ForkedWorkersFollowTheRun:
    """While a local cluster forks its workers, each one forked starts a thread that ends it
    when the run's process is gone. dask's own watch is a pipe whose write end the run holds
    (the worker leaves when it closes); a worker forked while a sibling's pipe was open
    inherits that write end too, and when two nannies start at once each worker holds the
    other's: after a kill -9 of the run both stay, reparented to PID 1, for good (~3.5 % of
    kills in a trial). The parent's process id does not depend on who holds what."""

    def __enter__(self) -> ForkedWorkersFollowTheRun:
        if not _watching["hooked"] and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _watching["hooked"] = True
        _watching["on"] = True
        return self

    def __exit__(self, *exc) -> None:
        _watching["on"] = False
