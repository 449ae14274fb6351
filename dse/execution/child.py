"""An evaluator in a child process that can be killed: ``evaluator.timeout_s`` for plug-in
evaluators that cannot stop themselves.

The child (a Python process running :func:`main`, in its own session) builds the evaluator once
and evaluates the chunks it is sent through its standard input; results come back through a
private copy of its standard output (what the evaluator prints goes to standard error). A
call that runs past its limit kills the child's whole process group, a program it started
included; the next call starts a new child.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
from multiprocessing.connection import Connection

import pandas as pd

from dse.evaluators.command import kill_session

#: seconds a new child may take to import and build the evaluator (not part of any time-out)
BUILD_S = 120.0


class EvaluatorFailed(RuntimeError):
    """The evaluator raised in the child; the message is its ``Type: message``."""


class ChildEvaluator:
    """The evaluator ``(name, options_yaml)`` in a child process."""

    def __init__(self, name: str, options_yaml: str) -> None:
        self.name, self.options_yaml = name, options_yaml
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from dse.execution.child import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.send = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self._ask(("build", self.name, self.options_yaml), BUILD_S, "building the evaluator")

    def _ask(self, message: tuple, limit_s: float, what: str):
        try:
            self.send.send(message)
            answered = self.recv.poll(limit_s)
            status, payload = self.recv.recv() if answered else ("", None)
        except (EOFError, OSError):
            code = self.stop()
            raise RuntimeError(
                f"the evaluator's process ended ({_ended(code)}) while {what}"
            ) from None
        if not answered:
            self.stop()
            raise TimeoutError(
                f"{what} took longer than {limit_s:g} s (evaluator.timeout_s); stopped"
            )
        if status == "contract":
            from dse.evaluators import ContractError

            raise ContractError(payload)
        if status != "ok":
            raise EvaluatorFailed(payload)
        return payload

    def evaluate(self, candidates: pd.DataFrame, limit_s: float) -> pd.DataFrame:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        n = len(candidates)
        return self._ask(
            ("evaluate", candidates), limit_s, f"evaluating {n} candidate{'s' * (n != 1)}"
        )

    def stop(self) -> int | None:
        """Kill the child and whatever it started; returns its exit code."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        kill_session(proc.pid)  # whatever it started too, even once it has ended itself
        for conn in (self.send, self.recv):
            conn.close()
        for pipe in (proc.stdin, proc.stdout):
            pipe.close()
        return proc.wait()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"


_children: dict[tuple[str, str], ChildEvaluator] = {}


def child_evaluator(name: str, options_yaml: str) -> ChildEvaluator:
    """This process's child for the evaluator ``(name, options_yaml)``."""
    key = (name, options_yaml)
    if key not in _children:
        _children[key] = ChildEvaluator(name, options_yaml)
    return _children[key]


@atexit.register
def stop_children() -> None:
    """Kill this process's evaluator children (at exit, and when a dask worker closes)."""
    for child in _children.values():
        child.stop()


def main() -> None:
    """The child's loop: build once, then evaluate each chunk sent until standard input closes."""
    import yaml

    from dse.evaluators import ContractError, check_result, load_evaluator
    from dse.study import EvaluatorSpec

    inp = Connection(os.dup(0), writable=False)
    out = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # what the evaluator prints must not mix with the results
    ev = None
    while True:
        try:
            message = inp.recv()
        except EOFError:
            return
        try:
            if message[0] == "build":
                ev = load_evaluator(
                    EvaluatorSpec(name=message[1], options=yaml.safe_load(message[2]) or {})
                )
                reply = ("ok", ev.version)
            else:
                candidates = message[1]
                reply = ("ok", check_result(ev, candidates, ev.evaluate(candidates)))
        except ContractError as exc:
            reply = ("contract", str(exc))
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        out.send(reply)
