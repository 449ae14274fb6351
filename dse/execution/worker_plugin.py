"""What dse installs on every dask worker of a run: stopping the evaluator's programs."""

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
