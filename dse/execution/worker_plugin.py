"""What dse installs on the dask workers of a run: stopping the evaluator's programs, and
on a local cluster's workers, leaving Ctrl-C to the run."""

from __future__ import annotations

from distributed import WorkerPlugin


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


class SchedulerGone:
    """A logging filter that drops distributed's "Failed to communicate with scheduler during
    heartbeat" record (a traceback). On a local cluster the scheduler lives in the run's own
    process: it goes only when the run stops, which says so itself, and a worker whose
    heartbeat fired between the scheduler's close and its own (on a busy machine) printed
    that traceback after the run's one-line message."""

    MARK = "Failed to communicate with scheduler during heartbeat"

    def filter(self, record) -> bool:
        return self.MARK not in record.getMessage()


class LeaveSignalsToTheRun(WorkerPlugin):
    """On a local cluster's worker: ignore SIGINT, and leave the scheduler's going unsaid
    (:class:`SchedulerGone`). Ctrl-C in a terminal reaches the whole
    process group; the run that started the cluster stops it, and a worker's own
    KeyboardInterrupt would only print a traceback. A forked worker already keeps the run's
    noting handler (:func:`dse.signals.deferred`); a spawned one (an evaluator that is not
    fork-safe, a worker the nanny restarted) starts with Python's default and gets it here."""

    idempotent = True

    def setup(self, worker) -> None:
        import logging
        import signal
        import threading

        heartbeat = logging.getLogger("distributed.worker")
        if not any(isinstance(f, SchedulerGone) for f in heartbeat.filters):
            heartbeat.addFilter(SchedulerGone())
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
