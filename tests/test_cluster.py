"""Real clusters on 127.0.0.1: a `dask scheduler` and `dask worker` processes started as a
user would, a study run against them through a profile's scheduler file, and faults made
with kill -9: a worker dying mid-run, every worker gone, the scheduler gone, a worker with
another evaluator version; and dask's SSHCluster through a real sshd, where one can run."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import (
    INTERPRETER_ENV,
    REPO,
    front_of,
    log_rows,
    rows_on_disk,
    run_cli,
    toy_study,
    write_study,
)
from dse.execution.base import EvaluatorRef, WorkerMismatch, check_versions
from dse.execution.deploy import missing
from programs import Program, start_program

ENV = {**os.environ, "DASK_LOGGING__DISTRIBUTED": "warning"}


class LocalProcesses:
    """A scheduler and workers as separate processes, found through a scheduler file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.file = folder / "scheduler.json"
        self.scheduler: Program | None = None
        self.workers: dict[str, Program | subprocess.Popen] = {}

    def start_scheduler(self) -> None:
        self.file.unlink(missing_ok=True)
        self.scheduler = self._start(
            "scheduler",
            "distributed.cli.dask_scheduler",
            ["--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(self.file)]
            + ["--no-dashboard"],
        )

    def start_worker(self, name: str, env: dict | None = None) -> None:
        self.workers[name] = self._start(
            name,
            "distributed.cli.dask_worker",
            ["--scheduler-file", str(self.file), "--host", "127.0.0.1", "--nthreads", "1"]
            + ["--no-nanny", "--no-dashboard", "--name", name, "--death-timeout", "60"],
            env,
        )

    def _start(
        self, name: str, module: str, args: list[str], env: dict | None = None
    ) -> Program | subprocess.Popen:
        """``python -m MODULE ARGS`` in a session of its own, its output in ``NAME.log``:
        forked from the tests' fork server (which has imported distributed), or a new
        interpreter where ``env`` changes what the interpreter imports (``PYTHONPATH``)."""
        if any(key.startswith(INTERPRETER_ENV) for key in env or {}):
            with open(self.folder / f"{name}.log", "ab") as log:
                return subprocess.Popen(
                    [sys.executable, "-m", module, *args],
                    cwd=self.folder,
                    stdout=log,
                    stderr=log,
                    env={**ENV, **env},
                    start_new_session=True,
                )
        return start_program(
            *args,
            module=module,
            cwd=self.folder,
            env={**ENV, **(env or {})},
            new_session=True,
            log=self.folder / f"{name}.log",
        )

    def wait_for(self, n_workers: int, timeout: float = 60) -> None:
        from dask.distributed import Client

        deadline = time.monotonic() + timeout
        while not self.file.exists():
            assert time.monotonic() < deadline, "the scheduler wrote no scheduler file"
            time.sleep(0.1)
        with Client(scheduler_file=str(self.file), timeout="30s", set_as_default=False) as client:
            client.wait_for_workers(n_workers, timeout=timeout)

    def kill(self, proc: Program | subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # gone already (and reaped by the fork server: no zombie)
            pass
        proc.wait()

    def close(self) -> None:
        for proc in [*self.workers.values(), self.scheduler]:
            if proc is not None and proc.poll() is None:
                self.kill(proc)


@pytest.fixture
def processes(tmp_path):
    cluster = LocalProcesses(tmp_path)
    yield cluster
    cluster.close()


#: the size of :func:`_study`'s space: 11 x-values, 4 y-values, 2 shapes
CANDIDATES = 88


def _study(
    tmp_path: Path, out: Path, *, execution: dict, delay: float = 0.02, evaluator: str | None = None
) -> Path:
    """:data:`CANDIDATES` candidates (exhaustive, two batches), chunks of 4, each candidate
    ``delay`` seconds."""
    study = toy_study(output=str(out))
    study["space"] = {
        "x": {"range": [0.0, 1.0], "step": 0.1},
        "y": [0, 1, 2, 3],
        "shape": ["a", "b"],
    }
    study["search"] = {"algorithm": "exhaustive", "budget": CANDIDATES, "batch_size": 60}
    study["execution"] = {"chunk_size": 4, "dashboard": False, **execution}
    study["evaluator"] = {
        "name": evaluator or study["evaluator"]["name"],
        "options": {"delay_per_candidate_s": delay},
    }
    return write_study(tmp_path, study, name=f"{out.name}.yaml")


def _profile(processes: LocalProcesses, grace_s: float = 30) -> dict:
    path = processes.folder / "here.yaml"
    path.write_text(f"scheduler_file: {processes.file}\ngrace_s: {grace_s}\nstart_timeout_s: 30\n")
    return {"profile": str(path)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The undisturbed run, in this process: its keys and its front."""
    folder = tmp_path_factory.mktemp("reference")
    out = folder / "reference"
    proc = run_cli("run", str(_study(folder, out, execution={"workers": 0}, delay=0)), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return set(log_rows(out)["key"]), front_of(out)


def _start_run(study: Path, *args: str) -> Program:
    return start_program(*args, str(study), "--quiet", new_session=True)


def _wait_for_rows(out: Path, n: int, run: Program, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while rows_on_disk(out) < n:
        assert run.poll() is None, (
            f"the run ended before {n} rows were written: {run.stderr.read()}"
        )
        assert time.monotonic() < deadline, f"no {n} rows after {timeout} s"
        time.sleep(0.05)


def _complete_and_equal(out: Path, reference) -> None:
    keys, front = reference
    rows = log_rows(out)
    assert rows["key"].is_unique, "a candidate is in the log twice"
    assert set(rows["key"]) == keys, "a candidate is missing from the log"
    assert (rows["status"] == "ok").all()
    pd.testing.assert_frame_equal(front_of(out), front)


def test_a_worker_killed_mid_run_loses_and_repeats_nothing(tmp_path, processes, reference):
    processes.start_scheduler()
    processes.start_worker("w1")
    processes.start_worker("w2")
    processes.wait_for(2)
    out = tmp_path / "run"
    run = _start_run(_study(tmp_path, out, execution=_profile(processes), delay=0.04), "run")
    _wait_for_rows(out, 40, run)
    processes.kill(processes.workers["w1"])  # in the middle of a chunk: a worker always has one
    killed_at = rows_on_disk(out)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert killed_at < CANDIDATES, "the run was over before the kill"
    _complete_and_equal(out, reference)


def _stopped_run(tmp_path: Path, processes: LocalProcesses, kill) -> tuple[Path, str, float]:
    """A run on one worker with a grace period of 2 s, ``kill(processes)`` after 20 rows:
    the results folder, the run's stderr, and the seconds from the kill to its end."""
    processes.start_scheduler()
    processes.start_worker("w1")
    processes.wait_for(1)
    out = tmp_path / "run"
    run = _start_run(_study(tmp_path, out, execution=_profile(processes, grace_s=2)), "run")
    _wait_for_rows(out, 20, run)
    kill(processes)
    gone = time.monotonic()
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 2 and "Traceback" not in stderr, stderr
    assert f"continue with `dse resume {out}`" in stderr
    stored = log_rows(out)
    assert 20 <= len(stored) < CANDIDATES and stored["key"].is_unique
    return out, stderr, time.monotonic() - gone


def _resume_on_a_new_worker(processes: LocalProcesses, out: Path, reference) -> None:
    processes.start_worker("w2")
    processes.wait_for(1)
    done = run_cli("resume", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    _complete_and_equal(out, reference)


def test_every_worker_gone_stops_after_the_grace_period_and_resume_goes_on(
    tmp_path, processes, reference
):
    out, stderr, waited = _stopped_run(tmp_path, processes, lambda p: p.kill(p.workers["w1"]))
    error = stderr.strip().splitlines()[-1]  # before it: the start line, the note that it waits
    assert error.startswith("error: no dask worker is connected to the scheduler of"), stderr
    assert (
        "waiting up to 2 s (execution.grace_s)" in stderr and "for 2 s (execution.grace_s)" in error
    )
    assert 2 <= waited < 30
    _resume_on_a_new_worker(processes, out, reference)


def test_a_lost_scheduler_stops_the_run_and_resume_goes_on_with_a_new_one(
    tmp_path, processes, reference
):
    out, stderr, waited = _stopped_run(tmp_path, processes, lambda p: p.kill(p.scheduler))
    assert (
        "error: lost the connection to the scheduler of" in stderr
        and "(execution.grace_s)" in stderr
    ), stderr
    assert 2 <= waited < 30
    processes.kill(processes.workers["w1"])
    processes.start_scheduler()  # a new scheduler writes a new file; the profile finds it there
    _resume_on_a_new_worker(processes, out, reference)


PLUGIN = """
from dse.evaluators.toy import ToyEvaluator


class Versioned(ToyEvaluator):
    version = "{version}"
"""


def test_a_worker_with_another_evaluator_version_is_refused(tmp_path, processes, monkeypatch):
    """The client imports the plug-in at version 1.0, the worker at 2.0 (two installations)."""
    for version in ("1.0", "2.0"):
        (tmp_path / f"v{version}").mkdir()
        (tmp_path / f"v{version}" / "versioned_eval.py").write_text(PLUGIN.format(version=version))
    processes.start_scheduler()
    processes.start_worker("w1", env={"PYTHONPATH": str(tmp_path / "v2.0")})
    processes.wait_for(1)
    out = tmp_path / "run"
    study = _study(
        tmp_path, out, execution=_profile(processes), evaluator="versioned_eval:Versioned"
    )
    # the client (this process) imports its evaluator from a folder of its own on sys.path
    monkeypatch.syspath_prepend(str(tmp_path / "v1.0"))
    try:
        proc = run_cli("run", str(study), "--quiet")
    finally:
        sys.modules.pop("versioned_eval", None)  # another test's would be another version
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        "runs dse 0.1.0 with evaluator versioned_eval:Versioned 2.0, but this client runs dse 0.1.0 with 1.0"
        in proc.stderr
    )
    assert rows_on_disk(out) == 0


@pytest.mark.parametrize("after_a_run", [False, True], ids=["fresh-scheduler", "after-a-run"])
def test_a_worker_whose_python_cannot_import_dse_is_named_in_one_line(
    tmp_path, processes, after_a_run
):
    """The worker's Python finds a dse that cannot be imported (here a stand-in that raises
    as a missing package does): one line naming the worker and what to install, exit 2.
    After a run on the same scheduler too: the run takes its worker plug-in off the scheduler
    when it ends (before, a worker without dse that joined later failed to start on it, and
    the next run's version check waited for that worker forever)."""
    shadow = tmp_path / "shadow" / "dse"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'dse\'", name="dse")\n'
    )
    processes.start_scheduler()
    if after_a_run:
        processes.start_worker("good")
        processes.wait_for(1)
        first = run_cli(
            "run",
            str(_study(tmp_path, tmp_path / "first", execution=_profile(processes), delay=0)),
            "--quiet",
        )
        assert first.returncode == 0, first.stderr
        processes.kill(processes.workers.pop("good"))
    processes.start_worker("w1", env={"PYTHONPATH": str(tmp_path / "shadow")})
    processes.wait_for(1)
    out = tmp_path / "run"
    proc = run_cli(
        "run",
        str(_study(tmp_path, out, execution=_profile(processes, grace_s=5))),
        "--quiet",
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot run dse" in proc.stderr and "install dse" in proc.stderr, proc.stderr
    assert rows_on_disk(out) == 0


@pytest.mark.parametrize(
    "answer",
    [None, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"],
    ids=["silent", "http"],
)
def test_an_address_that_is_not_a_dask_scheduler_ends_in_one_line(tmp_path, answer):
    """A port that accepts the connection but never answers the handshake (a dashboard port
    gone quiet) or answers in HTTP: one line and exit 2 within the grace period, no hang and
    no traceback."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer:
                conn.recv(65536)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        out = tmp_path / "run"
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        profile = tmp_path / "there.yaml"
        profile.write_text(f"scheduler: {address}\ngrace_s: 2\nstart_timeout_s: 5\n")
        start = time.monotonic()
        proc = run_cli(
            "run", str(_study(tmp_path, out, execution={"profile": str(profile)})), "--quiet"
        )
        assert time.monotonic() - start < 40
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.count("\nerror") + proc.stderr.startswith("error") == 1, proc.stderr
        assert address in proc.stderr, proc.stderr
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.skipif(
    missing("dask_jobqueue"), reason="needs dask-jobqueue: pip install 'dse[cluster]'"
)
def test_a_job_the_batch_system_refuses_ends_the_run_with_its_message(tmp_path):
    """``sbatch`` refuses the job (here a stand-in on PATH that answers as SLURM does to an
    account it does not know): one line quoting it, exit 2, long before the start timeout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(
        "#!/bin/sh\necho 'sbatch: error: Invalid account or account/partition combination "
        "specified' >&2\nexit 1\n"
    )
    sbatch.chmod(0o755)
    profile = tmp_path / "slurm.yaml"
    profile.write_text(
        "cluster: dask_jobqueue.SLURMCluster\noptions: {cores: 1, memory: 1GB, account: nobody}\n"
        "scale: {jobs: 1}\nstart_timeout_s: 120\n"
    )
    out = tmp_path / "run"
    start = time.monotonic()
    proc = run_cli(
        "run",
        str(_study(tmp_path, out, execution={"profile": str(profile)})),
        "--quiet",
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert time.monotonic() - start < 60
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        "the batch system refused a job of dask_jobqueue.SLURMCluster: sbatch: error: Invalid account or "
        "account/partition combination specified" in proc.stderr
    ), proc.stderr
    assert proc.stderr.count("\n") <= 2, proc.stderr


@pytest.mark.skipif(
    missing("dask_jobqueue"), reason="needs dask-jobqueue: pip install 'dse[cluster]'"
)
def test_a_batch_profile_where_jobs_cannot_be_submitted_is_refused_at_once(tmp_path):
    """No ``sbatch`` on PATH (a laptop, a compute node): run refuses in one line before it
    touches the results folder (before: a traceback per job, then the whole start timeout);
    validate warns (a study is often checked on a laptop, then run on the login node);
    ``dse cluster`` still shows the job script."""
    profile = tmp_path / "slurm.yaml"
    profile.write_text(
        "cluster: dask_jobqueue.SLURMCluster\noptions: {cores: 1, memory: 1GB}\n"
        "scale: {jobs: 1}\nstart_timeout_s: 120\n"
    )
    out = tmp_path / "run"
    study = str(_study(tmp_path, out, execution={"profile": str(profile)}, delay=0))
    assert (
        run_cli("run", study, "--workers", "0", "--quiet").returncode == 0
    )  # an earlier run in the folder
    nowhere = {"PATH": str(tmp_path / "no-programs-here")}
    said = "dask_jobqueue.SLURMCluster submits its jobs with 'sbatch', which is not on PATH here"
    checked = run_cli("validate", study, "--overwrite", env=nowhere)
    assert checked.returncode == 0 and f"warning: {said}" in checked.stderr, checked.stderr
    start = time.monotonic()
    proc = run_cli("run", study, "--overwrite", "--quiet", env=nowhere)
    assert time.monotonic() - start < 60
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        f"{profile}: cluster: {said}" in proc.stderr.splitlines()[-1]
        and proc.stderr.count("\n") <= 2
    )
    assert (out / "pareto.nc").exists() and rows_on_disk(
        out
    ) == CANDIDATES  # the earlier run is untouched
    shown = run_cli("cluster", str(profile), env=nowhere)
    assert shown.returncode == 0 and "#SBATCH" in shown.stdout, shown.stderr


def test_a_scheduler_file_that_never_appears_ends_after_the_start_timeout(tmp_path):
    out = tmp_path / "run"
    profile = tmp_path / "later.yaml"
    profile.write_text(
        f"scheduler_file: {tmp_path / 'not-yet.json'}\ngrace_s: 2\nstart_timeout_s: 2\n"
    )
    proc = run_cli("run", str(_study(tmp_path, out, execution={"profile": str(profile)})))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "waiting for the scheduler file" in proc.stdout + proc.stderr
    assert f"no scheduler file at {tmp_path / 'not-yet.json'} after 2 s" in proc.stderr, proc.stderr


def test_a_worker_checks_the_dse_version_it_was_sent():
    ref = EvaluatorRef.of(toy_study_spec())
    check_versions(ref)  # the same versions: nothing to say
    other = EvaluatorRef(ref.name, ref.options_yaml, None, "9.9.9", ref.evaluator_version)
    with pytest.raises(
        WorkerMismatch,
        match="runs dse 0.1.0 with evaluator .* 1.0.0, but this client runs dse 9.9.9",
    ):
        check_versions(other)


def toy_study_spec():
    from dse.study import EvaluatorSpec

    return EvaluatorSpec(name="dse.evaluators.toy:ToyEvaluator")


# -- SSH ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sshd(tmp_path):
    """A real OpenSSH server on 127.0.0.1, accepting one key for this user."""
    binary = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(binary).exists() or missing("asyncssh"):
        pytest.skip(
            'needs OpenSSH\'s sshd (Debian: openssh-server) and asyncssh (pip install "dse[ssh]")'
        )
    folder = tmp_path / "ssh"
    folder.mkdir(mode=0o700)
    for name in ("host", "user"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True
        )
    shutil.copy(folder / "user.pub", folder / "authorized_keys")
    os.chmod(folder / "authorized_keys", 0o600)
    port = _free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host'}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        f"PasswordAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
        f"PidFile {folder / 'sshd.pid'}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None
    server = subprocess.Popen(
        [binary, "-D", "-e", "-f", str(folder / "sshd_config")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 10
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.skip(f"sshd did not start here: {server.stdout.read()[-300:]}")
        time.sleep(0.1)
    yield port, folder / "user"
    server.kill()
    server.wait()
    _kill_started_through(port)


def _kill_started_through(port: int) -> None:
    """Kill what a session of the sshd on ``port`` started and left running (a remote command
    outlives its SSH connection when it has no terminal)."""
    import psutil

    for proc in psutil.process_iter():
        try:
            connection = proc.environ().get("SSH_CONNECTION", "").split()
        except (psutil.Error, OSError):
            continue
        if len(connection) == 4 and connection[3] == str(port):
            proc.kill()


def test_a_study_runs_on_workers_started_over_ssh(tmp_path, sshd, reference):
    """dask's SSHCluster (the ssh profile's class) logs into 127.0.0.1 through a real sshd and
    starts the scheduler and a worker there (the first host runs the scheduler, each other
    host a worker)."""
    port, key = sshd
    profile = tmp_path / "ssh.yaml"
    profile.write_text(
        "cluster: dask.distributed.SSHCluster\n"
        "options:\n"
        "  hosts: [127.0.0.1, 127.0.0.1]\n"
        f"  connect_options: {{port: {port}, client_keys: ['{key}'], known_hosts: null, username: {os.environ.get('USER') or 'root'}}}\n"
        "  worker_options: {nthreads: 1}\n"
        "  scheduler_options: {port: 0, dashboard_address: '127.0.0.1:0'}\n"
        f"  remote_python: {sys.executable}\n"
        "start_timeout_s: 60\n"
    )
    out = tmp_path / "run"
    proc = run_cli(
        "run",
        str(_study(tmp_path, out, execution={"profile": str(profile)}, delay=0.005)),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    _complete_and_equal(out, reference)


THIRD_PARTY_DEPLOYER = '''
from dask.distributed import LocalCluster
from pydantic import BaseModel, ConfigDict, Field

from dse import Deployer


class ThreadOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threads: int = Field(default=1, ge=1, le=4, description="worker threads in this process")


class ThreadDeployer(Deployer):
    """A cluster of threads in the run's own process: no cluster class named by the profile."""

    name = "threads"
    Options = ThreadOptions
    started = []

    def start(self, dashboard):
        options = ThreadOptions(**self.options)
        self.started.append(options.threads)
        return LocalCluster(n_workers=0, threads_per_worker=options.threads, processes=False,
                            dashboard_address=None)
'''


def test_a_third_party_deployer_named_by_module_and_class_checks_its_options_and_runs(
    tmp_path, monkeypatch
):
    """A deployer that is no installed package: ``deployer: module:Class`` in a profile. Its
    options model checks the profile before anything starts; the run starts its cluster and
    sizes it as the profile says."""
    import dse
    from dse.errors import StudyError
    from dse.execution.plan import plan_execution
    from dse.study import ExecutionSpec

    (tmp_path / "thread_deployer.py").write_text(THIRD_PARTY_DEPLOYER)
    monkeypatch.syspath_prepend(str(tmp_path))
    for options, expected in (
        ("{threads: 9}", "options.threads: expected a value less than or equal to 4 (got 9)"),
        (
            "{thredas: 2}",
            "options.thredas: unknown key 'thredas' in options (did you mean 'threads'?)",
        ),
    ):
        (tmp_path / "bad.yaml").write_text(
            f"deployer: thread_deployer:ThreadDeployer\noptions: {options}\nscale: 2\n"
        )
        with pytest.raises(StudyError) as info:
            plan_execution(
                ExecutionSpec(profile=str(tmp_path / "bad.yaml")), study_path=tmp_path / "s.yaml"
            )
        assert str(info.value).startswith(f"{tmp_path / 'bad.yaml'}: {expected}"), str(info.value)
    profile = tmp_path / "threads.yaml"
    profile.write_text(
        "deployer: thread_deployer:ThreadDeployer\noptions: {threads: 2}\nscale: 2\n"
    )
    plan = plan_execution(ExecutionSpec(profile=str(profile)), study_path=tmp_path / "s.yaml")
    assert (
        plan.kind == "cluster"
        and plan.deployer == "thread_deployer:ThreadDeployer"
        and plan.cluster is None
    )
    assert (
        plan.describe().startswith("thread_deployer:ThreadDeployer (profile")
        and "2 workers" in plan.describe()
    )
    out = tmp_path / "out"
    study = write_study(
        tmp_path, toy_study(output=str(out), execution={"profile": str(profile), "workers": None})
    )
    result = dse.run(dse.load_study(study))
    assert len(result.evaluations) == 66 and len(result.front) == 11
    import thread_deployer

    assert thread_deployer.ThreadDeployer.started == [2]


def test_the_shipped_profiles_get_the_deployer_that_claims_their_class():
    """Every built-in deployer is found through the entry-point group, as a third party's is."""
    from importlib.metadata import entry_points

    from dse.execution.plan import plan_execution
    from dse.study import ExecutionSpec

    assert {ep.name for ep in entry_points(group="dse.deployers")} >= {
        "dask",
        "jobqueue",
        "kubernetes",
        "ssh",
    }
    quickstart = REPO / "studies" / "quickstart.yaml"
    chosen = {
        name: plan_execution(ExecutionSpec(profile=name), study_path=quickstart).deployer
        for name in ("slurm", "pbs", "kubernetes", "ssh")
    }
    assert chosen == {
        "slurm": "jobqueue",
        "pbs": "jobqueue",
        "kubernetes": "kubernetes",
        "ssh": "ssh",
    }
