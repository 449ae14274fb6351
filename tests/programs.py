"""`dse` as a real program without a fresh interpreter each time: a child of this test
process's fork server (conftest), which imported dse, pandas, xarray and dask once, runs
the program's own entry point (:func:`dse.cli.console`) with its own arguments, folder,
environment, session and standard output and error (pipes). It is a process like any
other: it can be signalled, killed with -9, its process group stopped, its children
listed; it ends as the program does (``os._exit`` with the command's code, or by the
signal, reported as :class:`subprocess.Popen` reports it, ``-signum``).

Each start saves the ~1.4 CPU-s a new interpreter spends importing those libraries (the
kill, signal and cluster tests start dozens). Tests of the interpreter itself (its
encoding variables, ``python -m dse``, the installed ``dse`` script) start a real
interpreter (:func:`conftest.run_cli_subprocess`)."""

from __future__ import annotations

import importlib
import io
import logging
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import threading
import traceback
from multiprocessing import reduction
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_FORK_SERVER = multiprocessing.get_context("forkserver")


class _Fd:
    """A file descriptor handed to the child as multiprocessing hands a connection's."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        return _inherited, (reduction.DupFd(self.fd),)


def _inherited(dup) -> _Fd:
    return _Fd(dup.detach())


def _program(args, cwd, env, new_session, stdout: _Fd, stderr: _Fd, module: str | None) -> None:
    """The child: the program's own start, in the state a new interpreter would give it
    (``module``: ``python -m MODULE ARGS`` instead of ``dse ARGS``)."""
    if new_session:
        os.setsid()
    for fd, target in ((stdout.fd, 1), (stderr.fd, 2)):
        os.dup2(fd, target)
        os.close(fd)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout = io.TextIOWrapper(
        open(1, "wb", buffering=0, closefd=False), encoding="utf-8", write_through=unbuffered
    )
    sys.stderr = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    # a program started from a terminal: Ctrl-C raises KeyboardInterrupt, SIGTERM and SIGHUP
    # end it (the fork server may have started while a run held them ignored or deferred)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    os.chdir(cwd)
    _dask_as_the_program_configures_it(env, dse=module is None)
    os.environ.clear()
    os.environ.update(env)
    try:
        if module is None:
            from dse.cli import console

            sys.argv = ["dse", *args]
            console()  # ends the process with the command's exit code
        else:
            sys.argv = [module, *args]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 - what the interpreter prints, and its exit code
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def _dask_as_the_program_configures_it(env: dict[str, str], dse: bool) -> None:
    """dask's configuration and distributed's logging as the program has them when it first
    imports dask: from its own ``DASK_*`` variables, for ``dse`` with the logging level its
    ``main`` sets before that import (``DASK_LOGGING__DISTRIBUTED``, unless the user set
    one); the fork server imported both with its own environment."""
    import dask

    os.environ.clear()
    os.environ.update({"DASK_LOGGING__DISTRIBUTED": "warning", **env} if dse else env)
    dask.config.refresh()
    logging_config = importlib.import_module("distributed.config")
    for name in ("distributed", "distributed.client", "distributed.gc", "bokeh", "tornado"):
        logging.getLogger(name).handlers.clear()  # bound to the fork server's stderr
    logging_config.initialize_logging(dask.config.config)


class Program:
    """The part of :class:`subprocess.Popen` the tests use, for a forked ``dse``."""

    def __init__(self, command: list[str], args: list[str], process, stdout, stderr) -> None:
        self.args = [*(["python", "-m", *command] if command else ["dse"]), *args]
        self._process = process
        self.pid: int = process.pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(9)

    def terminate(self) -> None:
        self.send_signal(15)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both streams read to their end (at once, so that neither pipe fills), then the exit."""
        texts = {}

        def read(name: str, stream) -> None:
            texts[name] = stream.read()

        readers = [
            threading.Thread(target=read, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(timeout)
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return texts.get("stdout"), texts.get("stderr")


def start_program(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    new_session: bool = False,
    module: str | None = None,
    log: Path | None = None,
) -> Program:
    """``dse ARGS`` (or ``python -m MODULE ARGS``) started as a program (``env`` added to
    this process's environment; ``new_session``: a session and process group of its own,
    as ``start_new_session``); its output on two pipes, or both streams appended to ``log``."""
    args = [str(a) for a in args]
    env = {**os.environ, **(env or {})}
    if log is None:
        pipes = [os.pipe(), os.pipe()]
        ends = [write_end for _, write_end in pipes]
    else:
        pipes = []
        ends = [os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)] * 2
    process = _FORK_SERVER.Process(
        target=_program,
        args=(args, str(cwd or REPO), env, new_session, _Fd(ends[0]), _Fd(ends[1]), module),
        daemon=False,
    )
    try:
        process.start()
    finally:
        for fd in set(ends):
            os.close(fd)
    stdout, stderr = (
        (open(read_end, encoding="utf-8") for read_end, _ in pipes) if pipes else (None, None)
    )
    return Program([module] if module else [], args, process, stdout, stderr)


def run_program(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """``dse ARGS`` as a program, to its end: its exit code and what it printed."""
    program = start_program(*args, cwd=cwd, env=env)
    try:
        stdout, stderr = program.communicate(timeout)
    except subprocess.TimeoutExpired:
        program.kill()
        raise
    return subprocess.CompletedProcess(program.args, program.returncode, stdout, stderr)
