"""Evaluate on dask workers: an embedded ``LocalCluster``, a running scheduler (address or
scheduler file), or a cluster class a profile names (dask-jobqueue, dask-kubernetes,
``SSHCluster``, ...).

Faults: a chunk on a worker that dies is rerun elsewhere by the scheduler; a chunk that
kills workers again and again (dask's ``KilledWorker``) is split in halves and each half
submitted anew, alone on the cluster (a worker that dies takes the tasks queued on it along,
and each such loss counts against them), down to the row that kills them, which fails
alone; a chunk cancelled by a
lost connection is submitted again once the scheduler is back. Every chunk's result is
yielded exactly once. A scheduler unreachable, or no worker, for longer than
``execution.grace_s`` (before the first worker: ``execution.start_timeout_s``) stops the run
with :class:`ClusterLost`; a worker running other dse or evaluator versions stops it with
:class:`WorkerMismatch`.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from dse import signals
from dse.execution.base import (
    ClusterLost,
    Executor,
    Finish,
    WorkerMismatch,
    evaluate_chunk,
    pieces,
    worker_versions,
)
from dse.execution.candidates import Candidates, count, part
from dse.execution.deploy import SubmissionErrors, install_hint, missing, start_cluster
from dse.execution.plan import ExecutionPlan
from dse.study import EvaluatorSpec

#: seconds between looks at the scheduler while waiting for chunks
POLL_S = 0.5
#: a local cluster's scheduler runs in this process, on the client's IO loop thread, and its
#: periodic work costs this process CPU for every second the run lasts, whatever it
#: evaluates: 5.7 % of a core on an idle cluster of 2 workers with distributed's defaults,
#: 1.8 % with these (measured with /proc's per-thread CPU over 10 s, distributed 2026.8).
#: The event loop's watchdog ticks every second instead of every 20 ms (a blocked loop is
#: still reported), the resource monitor samples every 5 s instead of 0.5 s (the dashboard's
#: plots are coarser), and no task is stolen or replicated: the executor keeps its own two
#: equal tasks per worker thread in flight, and no result is held on the workers to balance.
LOCAL_CLUSTER_CONFIG = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.scheduler.work-stealing": False,
    "distributed.scheduler.active-memory-manager.start": False,
    # the workers' statistical profiler (the dashboard's Profile page) samples every thread's
    # stack every 100 ms instead of dask's 10 ms: at 10 ms a worker's other threads took
    # 0.06-0.07 us of CPU per candidate while it evaluated a chunk of the analytic
    # evaluator and 0.03-0.04 us while it made its log rows, at 100 ms 0.015-0.025 and
    # 0.015-0.02 (10^7 candidates on 2 workers, two runs each, 2026-11-29): ~3 % of a
    # worker's time per candidate; a profile over a run of minutes still has thousands of
    # samples
    "distributed.worker.profile.interval": "100ms",
}
#: seconds between a local cluster's nanny's looks at its worker's memory (distributed's
#: ``distributed.worker.memory.monitor-interval``, 0.1 s): the nannies run in this process,
#: and each look (a new psutil.Process, two reads of /proc) was half of its idle CPU (1.3 %
#: of a core with 2 workers -> 0.6-0.9 %). The look restarts a worker over 95 % of its
#: memory limit; a runaway evaluator allocating fast overshoots that between looks either
#: way (at 1 GB/s by 0.1 GB with 0.1 s, by 1 GB with 1 s), so the kernel's OOM killer is
#: the last guard in both cases. The workers' own monitor (pausing at 80 % of the limit,
#: spilling at 70 %) runs in their processes and keeps dask's interval.
NANNY_MEMORY_MONITOR_S = 1.0
#: seconds after a chunk came back during which the cluster is taken to be there without a
#: round trip to the scheduler (a look every :data:`POLL_S` while chunks come back every
#: second or two was about 1 look per second, each costing this process the request and,
#: for a local cluster, the scheduler's answer); a lost cluster is still seen within this
#: many seconds (at most the grace period) plus the grace period
ALIVE_S = 5.0
#: the terminal or SSH session closed: sent to the whole process group, handled by the run
HANGUP = (signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()
#: seconds a connection may take beyond the grace period before it is given up (distributed's
#: own timeout, the grace period, ends a plain unreachable address first)
CONNECT_SLACK_S = 5.0
#: seconds the resolver may take to say that a scheduler's host name does not exist
RESOLVE_S = 10.0


class WorkerDied(RuntimeError):
    """A candidate whose every attempt killed the worker process evaluating it."""


def unknown_host(address: str) -> str | None:
    """Why the host of a scheduler ``address`` does not exist (the resolver's answer: no such
    name), or None: it resolves, or the resolver failed for now (the grace period may outlast
    that), or it is an address, not a name."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(address if "://" in address else f"tcp://{address}").hostname
    except ValueError:
        return None
    if not host:
        return None
    answer: list[str] = []

    def ask() -> None:
        try:
            socket.getaddrinfo(host, None)
        except socket.gaierror as exc:
            if exc.errno in {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}:
                answer.append(f"no host is named '{host}' ({exc.strerror})")
        except (OSError, UnicodeError, ValueError):
            pass

    # a resolver that does not answer in time is left to the grace period, as before
    thread = threading.Thread(target=ask, name="dse-resolve", daemon=True)
    thread.start()
    thread.join(RESOLVE_S)
    return answer[0] if answer else None


def local_security(tls: bool):
    """dask's security settings for a local cluster: TLS with a certificate and key made for
    this run alone and held in memory (:func:`run_credentials`), so that only this process and
    the workers it starts can join the scheduler or a worker; ``tls`` false: plain TCP, which
    any local user can reach (``execution.tls: false``)."""
    from distributed.security import Security

    if not tls:
        return Security()
    if missing("cryptography"):
        raise ClusterLost(
            "the local dask cluster's TLS needs the cryptography package "
            f"({install_hint('cryptography')}), or execution.tls: false for plain TCP"
        )
    key, cert = run_credentials()
    roles = ("client", "scheduler", "worker")
    return Security(
        require_encryption=True,
        tls_ca_file=cert,  # the certificate signs itself: the one authority a peer trusts
        **{f"tls_{role}_key": key for role in roles},
        **{f"tls_{role}_cert": cert for role in roles},
    )


#: the name a run's certificate is issued to and by (dask checks no host name on its comms)
CREDENTIALS_NAME = "dse-local-cluster"
#: days a run's certificate is valid (it lives as long as the run, in memory only)
CREDENTIALS_DAYS = 365


def run_credentials() -> tuple[str, str]:
    """A private key and a certificate signed by it (PEM text), made for one run: what
    ``distributed.security.Security.temporary()`` makes, with an elliptic-curve key (NIST
    P-256, ECDSA with SHA-256: FIPS 186-5) instead of 2048-bit RSA. Generating an RSA key
    searches for primes: 0.03-0.27 s of this process's CPU at each local run's start on 2
    cores, against 1-2 ms for the curve's key, and its handshakes (a dozen per run) sign
    faster too."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CREDENTIALS_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # a clock a little behind
        .not_valid_after(now + datetime.timedelta(days=CREDENTIALS_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CREDENTIALS_NAME)]), False)
        .sign(key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_text = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return key_text, cert.public_bytes(pem).decode()


def dashboard_problem(link: str, timeout_s: float = 2.0) -> str | None:
    """Why the dashboard page ``link`` does not work from here, or None when it answers.

    Asked with HEAD: a page the server has answers 200 or 405 (bokeh's pages serve GET only)
    without being drawn, one it lacks 404. A GET of ``/status`` made the scheduler build the
    whole status page and keep it updating (0.3-0.4 s of this process's CPU at the start of a
    local run, and more than the timeout on a loaded machine, which then said no dashboard)."""
    import urllib.error
    import urllib.request

    if not link.startswith(("http://", "https://")):
        return "not a web address"
    try:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy
        with direct.open(urllib.request.Request(link, method="HEAD"), timeout=timeout_s):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code == 405:  # the page is there; it is drawn for a browser's GET
            return None
        hint = " (the scheduler's Python needs bokeh for a dashboard)" if exc.code == 404 else ""
        return f"it answers HTTP {exc.code}{hint}"
    except (OSError, ValueError) as exc:
        return f"it does not answer ({getattr(exc, 'reason', None) or exc})"
    return None


def free_port(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def start_method(requested: str, fork_safe: bool, threads: int | None = None) -> str:
    """How a local cluster starts its first workers (dask's ``distributed.worker.multiprocessing-method``;
    a worker restarted later is started as dask is configured, by default spawned).

    ``auto``: the user's own dask setting where it is not dask's default (``spawn``); else
    ``fork`` on Linux when the evaluator declares itself fork-safe and this process runs no
    thread but the main one (``threads``, default ``threading.active_count()``: a `dse run`
    starts its cluster before anything else; a notebook, or a process that ran a cluster
    before, has threads whose forked copies would be dead, dask's offload pool among them);
    else ``spawn``, a fresh interpreter (also the safe choice for an evaluator that holds
    threads, connections or a GPU context, and on macOS, where forking a process that has
    loaded system frameworks is unsafe). A forked worker inherits the imports and the built
    evaluator: a 2-core machine starts the quickstart's cluster about 2 s sooner."""
    if requested != "auto":
        return requested
    import dask

    configured = dask.config.get("distributed.worker.multiprocessing-method", default="spawn")
    if configured != "spawn":
        return configured
    alone = (threading.active_count() if threads is None else threads) == 1
    return "fork" if sys.platform.startswith("linux") and fork_safe and alone else "spawn"


def slow_nanny_monitors(cluster: Any, seconds: float = NANNY_MEMORY_MONITOR_S) -> None:
    """Make the local ``cluster``'s nannies look at their workers' memory every ``seconds``
    (:data:`NANNY_MEMORY_MONITOR_S`). Only the nannies': dask's setting would also slow the
    workers' own monitor, as a nanny hands its configuration on to its worker. The nanny
    keeps the interval for a worker it restarts; distributed changes a running periodic
    callback's interval the same way (the workers' heartbeats)."""
    for nanny in getattr(cluster, "workers", {}).values():
        monitor = getattr(nanny, "periodic_callbacks", {}).get("memory_monitor")
        if monitor is not None:
            monitor.callback_time = seconds * 1000


def _left(answer: BaseException) -> bool:
    """Whether a worker's answer to a call is that it went away (its connection closed), not
    that it could not run the call (dask may hand the error on as text in an Exception)."""
    text = f"{type(answer).__name__} {answer}"
    return isinstance(answer, ConnectionError) or any(
        name in text for name in ("CommClosedError", "StreamClosedError", "CommClosed")
    )


class _ClientShutdown:
    """A logging filter that drops asyncio's "Task exception was never retrieved" for
    distributed's ``AllExit``: the sentinel its client's waits end with when the client
    closes. A fetch the run stopped waiting for (every worker gone past the grace period,
    :meth:`DaskExecutor._watch`) leaves such a wait behind, and its traceback, printed when
    the client closes, said nothing the run's own one-line message does not."""

    def filter(self, record) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and type(exc).__name__ == "AllExit")


_CLIENT_SHUTDOWN = _ClientShutdown()


def _quiet_client_shutdown() -> None:
    """Install :class:`_ClientShutdown` on the asyncio logger (once)."""
    import logging

    log = logging.getLogger("asyncio")
    if _CLIENT_SHUTDOWN not in log.filters:
        log.addFilter(_CLIENT_SHUTDOWN)


class _Job:
    """A batch :meth:`DaskExecutor.submit` took: what is left to start, what came back and
    waits for :meth:`DaskExecutor.drain` (what is in flight: the executor's pending futures)."""

    def __init__(self, candidates: Candidates, finish: Finish | None) -> None:
        self.candidates, self.finish = candidates, finish
        self.offset, self.n = 0, count(candidates)
        self.again: deque[tuple[int, Candidates]] = deque()  # to submit again
        self.suspects: deque[tuple[int, Candidates]] = (
            deque()
        )  # halves of chunks that killed workers
        self.ready: deque[tuple[int, Any]] = deque()  # results not yet yielded

    @property
    def nothing_left(self) -> bool:
        """Nothing to start (again) and nothing to yield: over once none is in flight."""
        return self.offset >= self.n and not (self.again or self.suspects or self.ready)


class DaskExecutor(Executor):
    """A dask client on the cluster an :class:`ExecutionPlan` describes."""

    #: seconds of work per task (0.5 before issue 37): each task costs this process CPU (a
    #: local cluster's scheduler runs here, and every result is received here), so a fast
    #: evaluator's tasks are made as large as :class:`ChunkSizer` allows (131,072 rows) also
    #: where the machine is loaded, its cost per candidate measured two or three times higher
    #: (with 0.5 s: 475 tasks for 10^7 candidates, ~21,000 rows each). bench_pipeline.py, 2
    #: workers, load 4-9, two pairs alternating: the main process's marginal CPU per candidate
    #: 0.53 and 0.67 us -> 0.32 and 0.28 us; peak memory 1.43 and 1.19 -> 1.46 and 1.48 GB
    target_s = 2.0

    def __init__(
        self,
        evaluator: EvaluatorSpec,
        plan: ExecutionPlan,
        *,
        chunk_size: int | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(
            evaluator,
            chunk_size=chunk_size,
            workers=max(plan.workers, 1) * plan.threads_per_worker,
            notify=notify,
        )
        self.plan = plan
        self.client = None
        self.cluster = None
        self.dashboard_link: str | None = None
        self._trouble: tuple[float, str] | None = None
        self._killed = 0  # chunks whose workers died while evaluating them (dask's KilledWorker)
        self._submissions: SubmissionErrors | None = None
        self._next_look = 0.0  # time.monotonic() before which _watch does not look again
        self._jobs: list[_Job] = []  # batches submitted and not yet drained, in order
        self._pending: dict = {}  # future -> (its batch, lo, chunk, whether it runs alone)
        self._finished: queue.SimpleQueue = queue.SimpleQueue()  # futures as they finish
        self._plugin: str | None = (
            None  # the name of dse's worker plug-in registered on the scheduler
        )

    @property
    def where(self) -> str:
        p = self.plan
        return p.scheduler or (
            f"the scheduler of {p.scheduler_file}"
            if p.scheduler_file
            else f"the {p.cluster or 'local'} cluster's scheduler"
        )

    # -- starting and stopping -----------------------------------------------------------
    def __enter__(self) -> DaskExecutor:
        _quiet_client_shutdown()
        try:
            self._connect()
            self._wait_for_workers()
            self.check_versions()
            from dse.execution.worker_plugin import LeaveSignalsToTheRun, StopPrograms

            # a name of this run's: two runs on one scheduler each take off only their own
            self._plugin = f"dse-stop-programs-{os.getpid()}-{id(self):x}"
            self.client.register_plugin(StopPrograms(), name=self._plugin)
            if (
                self.plan.kind == "local"
            ):  # this process's own workers: Ctrl-C is the run's to handle
                self.client.register_plugin(LeaveSignalsToTheRun(), name="dse-leave-signals")
        except BaseException:
            self.__exit__()
            raise
        self.sizer.workers = max(sum(self.client.nthreads().values()), 1)
        self._tell_dashboard()
        return self

    def _connect(self) -> None:
        import dask
        from dask.distributed import Client, LocalCluster

        from dse.execution.worker_plugin import ForkedWorkersFollowTheRun

        p = self.plan
        timeout = f"{p.grace_s}s"
        if p.kind == "local":
            dashboard = p.dashboard and not missing("bokeh")
            port = 8787 if dashboard and free_port(8787, p.host) else 0
            address = f"{p.host}:{port}" if ":" not in p.host else f"[{p.host}]:{port}"
            security = local_security(p.tls)
            # the workers start (are forked) inside the constructor, before any task: a worker the
            # nanny restarts later is spawned, as a copy of this process by then would hold dead
            # copies of its threads (dask's offload pool: a message over 10 MiB would never go)
            with (
                dask.config.set(
                    {
                        **LOCAL_CLUSTER_CONFIG,
                        "distributed.worker.multiprocessing-method": start_method(
                            p.start_method, self.ref.fork_safe
                        ),
                    }
                ),
                signals.deferred(signal.SIGINT, signal.SIGTERM, *HANGUP),
                ForkedWorkersFollowTheRun(),
            ):
                # forked workers keep a handler that only notes SIGINT and SIGTERM: Ctrl-C in a
                # terminal, or a batch system's SIGTERM, reaches the whole process group, and each
                # worker would print a traceback while this process stops the run; one that came
                # while the workers started is handled here once they have
                self.cluster = LocalCluster(
                    n_workers=p.workers,
                    threads_per_worker=p.threads_per_worker,
                    processes=True,
                    memory_limit=p.memory_limit,
                    silence_logs=False,
                    host=p.host,  # the scheduler's, the nannies' and the workers' listeners
                    protocol="tls://" if p.tls else "tcp://",
                    security=security,
                    dashboard_address=address,
                    scheduler_kwargs={"dashboard": dashboard},
                )  # an HTTP server on a free port even without one
            slow_nanny_monitors(self.cluster)
        elif p.kind == "cluster":
            self._submissions = SubmissionErrors().__enter__()  # until __exit__
            self.cluster = start_cluster(p)
        if self.cluster is not None:
            # a local cluster's results come straight from its workers: through the scheduler,
            # which runs in this process, each chunk's bytes crossed the loopback twice
            # (10^6 candidates: 0.1-0.25 s between a batch's last task and the loop seeing it)
            direct = True if p.kind == "local" else None  # None: the client's default
            self.client = self._client(
                lambda: Client(
                    self.cluster, timeout=timeout, set_as_default=False, direct_to_workers=direct
                )
            )
        elif p.scheduler_file:
            self._wait_for_scheduler_file()
            self.client = self._client(
                lambda: Client(
                    scheduler_file=p.scheduler_file, timeout=timeout, set_as_default=False
                )
            )
        else:
            unknown = unknown_host(p.scheduler)
            if unknown:  # a misspelt name: no point waiting out the grace period
                raise ClusterLost(f"cannot reach {self.where}: {unknown}")
            self.client = self._client(
                lambda: Client(p.scheduler, timeout=timeout, set_as_default=False)
            )

    def _client(self, connect: Callable[[], Any]):
        """``connect()`` within the grace period: distributed bounds the TCP connection but not
        the handshake, which a port that is not a scheduler's (its dashboard's) never answers,
        and an HTTP reply is read as a message of exabytes; both end as one message here."""
        p, box = self.plan, {}

        def attempt() -> None:
            try:
                box["client"] = connect()
            except BaseException as exc:  # noqa: BLE001 - reported below, in the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=attempt, name="dse-connect", daemon=True)
        thread.start()
        thread.join(p.grace_s + CONNECT_SLACK_S)
        hint = (
            " (is it the dashboard's port? the scheduler's is 8786 by default)"
            if str(p.scheduler).endswith(":8787")
            else ""
        )
        if thread.is_alive():
            raise ClusterLost(
                f"{self.where} did not answer as a dask scheduler within {p.grace_s:g} s "
                f"(execution.grace_s){hint}"
            )
        if "error" in box:
            exc = box["error"]
            if isinstance(exc, KeyboardInterrupt):
                raise exc
            raise ClusterLost(
                f"cannot reach {self.where} within {p.grace_s:g} s (execution.grace_s): "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{hint}"
            ) from None
        return box["client"]

    def _wait_for_scheduler_file(self) -> None:
        """Until the scheduler file exists (a batch job may not have started its scheduler yet)."""
        from pathlib import Path

        path, timeout = Path(self.plan.scheduler_file), self.plan.start_timeout_s
        self._wait_until(
            path.is_file,
            f"the scheduler file {path}",
            f"no scheduler file at {path} after {timeout:g} s (execution.start_timeout_s): is the "
            "scheduler started, and writing there?",
        )

    def _wait_for_workers(self) -> None:
        def joined() -> bool:
            refused = self._submissions.first if self._submissions is not None else None
            if refused:
                raise ClusterLost(
                    f"the batch system refused a job of {self.plan.cluster}: {refused} "
                    f"(the job's options: {self.plan.profile or 'the profile'})"
                )
            return self._n_workers() > 0

        self._wait_until(
            joined,
            f"dask workers to join {self.where}",
            f"no dask worker joined {self.where} within {self.plan.start_timeout_s:g} s "
            "(execution.start_timeout_s)",
        )

    def _wait_until(self, ready: Callable[[], bool], what: str, timed_out: str) -> None:
        """Until ``ready()``, at most ``execution.start_timeout_s``: says once that it waits
        for ``what``; after the timeout, :class:`ClusterLost` with ``timed_out``."""
        timeout = self.plan.start_timeout_s
        deadline = time.monotonic() + timeout
        told = False
        while not ready():
            if time.monotonic() > deadline:
                raise ClusterLost(timed_out)
            if not told:
                self.notify(f"waiting for {what} (up to {timeout:g} s, execution.start_timeout_s)")
                told = True
            time.sleep(POLL_S)

    def check_versions(self) -> None:
        """Every worker there is runs the client's dse and evaluator versions (a worker that
        joins later is checked with its first chunk). A worker that leaves during the check
        (its connection closes: killed, its machine gone) is no mismatch: the run goes on with
        the others; when none answered, it waits ``execution.grace_s`` for a worker to join
        (as for a worker lost later) and checks again."""
        deadline = time.monotonic() + self.plan.grace_s
        while True:
            gone = self._check_versions_once()
            if gone is None:
                return
            if time.monotonic() > deadline:
                raise ClusterLost(
                    f"every dask worker of {self.where} left during dse's version check and "
                    f"none joined within {self.plan.grace_s:g} s (execution.grace_s); the last: "
                    f"{gone}"
                )
            self.notify(
                f"dask worker left during dse's version check ({gone}): waiting for another"
            )
            time.sleep(POLL_S)  # (the scheduler may list the dead worker a moment longer)
            while self._n_workers() == 0 and time.monotonic() <= deadline:
                time.sleep(POLL_S)

    def _check_versions_once(self) -> str | None:
        """One version check of the workers there are: None when at least one answered with
        the client's versions, else what happened to the last worker that left."""
        client, limit = self.client, self.plan.grace_s
        try:  # a bounded wait: a worker that failed to start (dse's plug-in, left on the scheduler by an
            # earlier run, cannot load where dse is missing) never answers, and Client.run waits forever
            answers = client.sync(
                client._run, worker_versions, self.ref, on_error="return", callback_timeout=limit
            )
        except TimeoutError:
            raise WorkerMismatch(
                f"the dask workers of {self.where} did not all answer dse's version check within {limit:g} s "
                "(execution.grace_s): a worker may have failed to start, for example where its Python cannot "
                "import dse (install dse, the client's version, in the Python the workers run)"
            ) from None
        except OSError as exc:  # the scheduler or every worker went away during the check
            return f"{type(exc).__name__}: {exc}"
        gone, checked = None, 0
        for address, found in answers.items():
            if isinstance(found, BaseException) and _left(found):
                gone = f"{address}: {type(found).__name__}"
                continue
            if isinstance(
                found, BaseException
            ):  # e.g. the worker's Python cannot import dse at all
                missing_dse = (
                    isinstance(found, ImportError)
                    or "No module named 'dse'" in str(found)
                    or "ImportError" in str(found)
                )  # dask may wrap it: Exception("ImportError(...)")
                raise WorkerMismatch(
                    f"dask worker {address} cannot run dse: {type(found).__name__}: {found}"
                    + (
                        ": install dse (the client's version) in the Python the workers run"
                        if missing_dse
                        else ""
                    )
                )
            if (found["dse"], found["evaluator"]) != (
                self.ref.dse_version,
                self.ref.evaluator_version,
            ):
                raise WorkerMismatch(
                    f"dask worker {address} on {found['host']} runs dse {found['dse']} with evaluator "
                    f"{self.ref.name} {found['evaluator']}, but this client runs dse {self.ref.dse_version} with "
                    f"{self.ref.evaluator_version}: install the same versions on every worker"
                )
            checked += 1
        if checked:
            if gone:
                self.notify(
                    f"dask worker left during dse's version check ({gone}); going on without it"
                )
            return None
        return gone or "no worker answered"

    def _tell_dashboard(self) -> None:
        try:
            link = self.client.dashboard_link
        except (KeyError, AttributeError):
            link = None
        if self.plan.kind == "local" and self.plan.dashboard and missing("bokeh"):
            self.notify(f"dashboard off: it needs bokeh ({install_hint('bokeh')})")
        elif self.plan.dashboard and link and (self.plan.kind != "local" or not missing("bokeh")):
            problem = dashboard_problem(link)
            if problem:  # a scheduler without bokeh serves 404 at /status; a name it alone resolves
                self.notify(f"no dask dashboard at {link}: {problem}")
            else:
                self.dashboard_link = link
                self.notify(f"dask dashboard: {link}")

    def __exit__(self, *exc) -> None:
        if (
            self.client is not None and self._plugin and self.plan.kind != "local"
        ):  # a cluster that outlives the run
            try:  # workers that join it later (another run, another Python) do not load dse's plug-in
                self.client.sync(
                    self.client._unregister_worker_plugin, self._plugin, callback_timeout=5
                )
            except Exception:  # noqa: BLE001 - the scheduler is gone
                pass
            self._plugin = None
        if self.client is not None:
            try:
                self.client.close(timeout=5)
            except Exception:  # a lost scheduler cannot be told goodbye
                pass
            self.client = None
        if self.cluster is not None:
            try:
                self.cluster.close()
            except Exception:  # noqa: BLE001 - a cluster whose jobs never started cannot close cleanly
                pass
            self.cluster = None
        if self._submissions is not None:
            self._submissions.__exit__()
            self._submissions = None

    # -- the cluster's health ------------------------------------------------------------
    def _n_workers(self) -> int:
        if self.client is None or self.client.status != "running":
            return 0
        try:
            return int(self.client.scheduler_info(n_workers=0).get("n_workers", 0))
        except Exception:
            return 0

    def _watch(self) -> None:
        """Raise :class:`ClusterLost` once the scheduler or every worker has been gone for
        longer than the grace period; say so when it goes and when it comes back."""
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + POLL_S
        if self.client.status != "running":
            problem = f"lost the connection to {self.where}"
        elif self._n_workers() == 0:
            problem = f"no dask worker is connected to {self.where}"
        else:
            if self._trouble is not None:
                self.notify(f"{self.where} has workers again; the run goes on")
            self._trouble = None
            return
        if self._trouble is None:
            self._trouble = (now, problem)
            self.notify(f"{problem}: waiting up to {self.plan.grace_s:g} s (execution.grace_s)")
        elif now - self._trouble[0] > self.plan.grace_s:
            why = (
                (
                    f"; {self._killed} chunk{'s' * (self._killed != 1)} killed the workers that evaluated "
                    "them before (an evaluator that ends its process: os._exit, a crash in native code, "
                    "running out of memory)"
                )
                if self._killed and self.client.status == "running"
                else ""
            )
            raise ClusterLost(f"{problem} for {self.plan.grace_s:g} s (execution.grace_s){why}")

    # -- evaluating ----------------------------------------------------------------------
    def submit(self, candidates: Candidates, *, finish: Finish | None = None) -> _Job:
        """Queue a batch; its chunks start as soon as the batches queued before it have none
        left to start and a slot is free (now, where one is): a batch submitted while an
        earlier one is drained starts on the slots that one frees."""
        job = _Job(candidates, finish)
        self._jobs.append(job)
        if self.client is not None:
            self._fill()
        return job

    def results(
        self, candidates: Candidates, *, finish: Finish | None = None
    ) -> Iterator[tuple[int, Any]]:
        return self.drain(self.submit(candidates, finish=finish))

    def drain(self, job: _Job) -> Iterator[tuple[int, Any]]:
        """Keeps two tasks per worker thread in flight; each finished task frees a slot for
        the next chunk, sized by the latest cost measured: of this batch while it has chunks
        left to start, then of the batch submitted after it (its results wait in it until
        it is drained). Chunks to submit again (cancelled by a lost connection) go first; a
        half of a chunk that killed workers runs alone, once the tasks in flight are done:
        queued on a worker it kills, another chunk would be lost with it each time, and after
        dask's allowed failures be taken for a killer too. Stopped before the batch is over
        (an exception, the generator closed), nothing submitted goes on."""
        complete = False
        try:
            while True:
                while job.ready:
                    yield job.ready.popleft()
                if job.nothing_left and all(
                    owner is not job for owner, *_ in self._pending.values()
                ):
                    break
                self._fill()
                done = self._wait(self._finished, self._pending)
                if self._trouble is None and any(f.status == "finished" for f in done):
                    # a chunk just came back: the scheduler and a worker are there, and the
                    # look at the cluster (a round trip to the scheduler) can wait ALIVE_S
                    alive_s = min(ALIVE_S, self.plan.grace_s)
                    self._next_look = time.monotonic() + alive_s
                for fut in done:
                    owner, lo, chunk, _ = self._pending.pop(fut)
                    result = self._outcome(
                        fut, lo, chunk, owner.finish, owner.again, owner.suspects
                    )
                    if result is not None:
                        owner.ready.extend((lo + at, payload) for at, payload in pieces(result))
                    while job.ready:
                        yield job.ready.popleft()
                self._watch()
            complete = True
        finally:
            if complete:
                self._jobs.remove(job)
                if not self._pending:  # no callback can come: let go of the futures it holds
                    self._finished = queue.SimpleQueue()
            else:
                self._jobs.clear()
                pending, self._pending = list(self._pending), {}
                if pending and self.client is not None and self.client.status == "running":
                    self.client.cancel(pending)

    def _fill(self) -> None:
        """Submit chunks while a slot is free: a suspect alone, else what is to be submitted
        again, else the next chunk of the oldest batch with chunks left to start."""
        pending = self._pending
        while self.client.status == "running" and not any(alone for *_, alone in pending.values()):
            owner = next((j for j in self._jobs if j.suspects), None)
            alone = owner is not None
            if alone:
                if pending:
                    break
                lo, chunk = owner.suspects.popleft()
            else:
                owner = next((j for j in self._jobs if j.again or j.offset < j.n), None)
                if owner is None or len(pending) >= 2 * self.sizer.workers:
                    break
                if owner.again:
                    lo, chunk = owner.again.popleft()
                else:
                    size = self.sizer.next(owner.n - owner.offset)
                    lo, chunk = (
                        owner.offset,
                        part(owner.candidates, owner.offset, owner.offset + size),
                    )
                    owner.offset += size
            fut = self.client.submit(evaluate_chunk, self.ref, chunk, owner.finish, pure=False)
            pending[fut] = (owner, lo, chunk, alone)
            fut.add_done_callback(self._finished.put)

    def map_each(self, fn, items: list) -> list:
        return self.client.gather(self.client.map(fn, items, pure=False))

    def _wait(self, finished: queue.SimpleQueue, pending: dict) -> list:
        """The pending futures that finished, waiting at most ``POLL_S`` for the first."""
        if not pending:
            time.sleep(POLL_S)
            return []
        done = []
        try:
            done.append(finished.get(timeout=POLL_S))
            while True:
                done.append(finished.get_nowait())
        except queue.Empty:
            pass
        done += [
            f for f in pending if f.done() and f not in done
        ]  # a closed client calls no callback
        return [f for f in dict.fromkeys(done) if f in pending]

    def _fetch(self, fut) -> Any:
        """A finished future's result. When the worker holding it dies before it is fetched,
        the client waits for dask to compute it again: the wait looks at the cluster every
        :data:`POLL_S`, so that a cluster that never gets a worker back ends the run after the
        grace period (:meth:`_watch`) instead of holding it here; a slow fetch just takes
        its time."""
        while True:
            try:
                return fut.result(timeout=POLL_S)
            except TimeoutError:  # distributed's is the built-in one
                self._watch()

    def _outcome(
        self, fut, lo: int, chunk: Candidates, finish: Finish | None, again: deque, suspects: deque
    ) -> Any:
        """The chunk's result, or None when it was queued to be submitted again (``again``, or
        its halves in ``suspects`` when it killed workers)."""
        from distributed import KilledWorker

        if fut.status == "error":
            exc = fut.exception()
            if isinstance(exc, WorkerMismatch):
                raise WorkerMismatch(str(exc)) from None
            if isinstance(exc, KilledWorker):
                self._killed += 1
                if count(chunk) > 1:
                    half = (
                        count(chunk) // 2
                    )  # which candidate kills the workers? try each half apart
                    suspects.extend(
                        [(lo, part(chunk, 0, half)), (lo + half, part(chunk, half, count(chunk)))]
                    )
                    return None
                # one line, the same for every such candidate (no task id)
                exc = WorkerDied(
                    "every dask worker that evaluated this candidate died (an evaluator that "
                    "ends its process: os._exit, a crash in native code, running out of memory)"
                )
            return self._failed(chunk, exc, finish)
        if fut.status == "finished":
            try:
                result, seconds = self._fetch(fut)
            except ClusterLost:
                raise
            except Exception:  # the worker holding it went away before it was fetched
                again.append((lo, chunk))
                return None
            self.sizer.observe(count(chunk), seconds)
            return result
        again.append((lo, chunk))  # cancelled (connection lost) or lost: submit it again
        return None
