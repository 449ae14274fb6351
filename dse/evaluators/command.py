"""The command evaluator: an external program (a simulator) evaluates each chunk.

The study declares the program, the inputs it reads and the metrics it writes::

    evaluator:
      name: command
      timeout_s: 30                  # per candidate; the program gets n x 30 s for n candidates
      options:
        command: ["{python}", sim/run.py, --config, sim/base.toml]
        inputs:  {num_accelerators: {kind: int, minimum: 1}, clock_mhz: {unit: MHz}}
        metrics: {energy_j: J, time_s: s}
        format: csv                  # or json: how candidates go in and metrics come out
        input: stdin                 # or file: "{input}" in the command is the file's path
        output: stdout               # or file: "{output}" in the command is where it writes

Per call the program gets one chunk of candidates (one row or record each, a column per
declared input, defaults filled in) and must answer with one row per candidate, in order:
every declared metric, and optionally ``feasible`` (default true) and ``reason``. A
non-zero exit, a missing metric or a wrong row count fails the call, and a call over its
time-out is killed (with whatever it started: its whole session, and so is whatever it
left behind when it exits normally); an answer larger than ``output_limit_mb`` (64 MB by
default) fails the call too, read no further; the executor then splits the chunk to find
the rows that fail, so one bad candidate fails alone, its message ending in the program's
standard error. ``{python}`` in the command is this Python interpreter.
"""

from __future__ import annotations

import atexit
import csv
import io
import json
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dse.errors import StudyError
from dse.evaluators.base import RESERVED_NAMES, TRUTH, Evaluator, Input, Metric, name_problem

#: characters of the program's standard error kept in a failure's message
STDERR_CHARS = 2000
#: the most a call's answer may hold by default (MB, 10^6 bytes; ``output_limit_mb``): the
#: answer is parsed in memory, some 25 times its size at the peak, so a program that prints
#: without end must not take the run's memory with it
OUTPUT_LIMIT_MB = 64.0
#: seconds the program's standard output and error may stay open after it exited (held by
#: a process it left behind) before that process is killed and what was read is taken
AFTER_EXIT_S = 1.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputDecl(_Strict):
    """One input column the program reads."""

    kind: Literal["int", "float", "str", "bool"] = "float"
    unit: str = "1"
    description: str = ""
    default: bool | int | float | str | None = None
    choices: list[bool | int | float | str] | None = None
    minimum: float | None = None
    maximum: float | None = None

    @model_validator(mode="after")
    def _consistent(self) -> InputDecl:
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"minimum ({self.minimum:g}) is above maximum ({self.maximum:g})")
        if (
            self.choices is not None
            and self.default is not None
            and self.default not in self.choices
        ):
            raise ValueError(f"default: {self.default!r} is not one of the choices {self.choices}")
        decl = Input("", self.kind, self.unit, "", None, None, self.minimum, self.maximum)
        for what, values in (
            ("choices", self.choices or []),
            ("default", [] if self.default is None else [self.default]),
        ):
            for v in values:
                try:
                    decl.check(v, field=what)
                except StudyError as exc:
                    raise ValueError(
                        f"{what}: {exc.message} ({v!r} for a {self.kind} input"
                        + (f"; allowed: {exc.allowed}" if exc.allowed else "")
                        + ")"
                    ) from None
        return self


def _names_netcdf_can_hold(names: dict) -> None:
    for name in names:
        problem = name_problem(name)
        if problem:
            raise ValueError(f"{name!r}: {problem}")


class MetricDecl(_Strict):
    """One metric the program writes (a text alone is its unit)."""

    unit: str = "1"
    long_name: str = ""


class CommandOptions(_Strict):
    command: list[str] | str = Field(
        description="the program and its arguments; {input}, {output}, {python}"
    )
    inputs: dict[str, InputDecl] = Field(min_length=1)
    metrics: dict[str, MetricDecl] = Field(min_length=1)
    format: Literal["csv", "json"] = "csv"
    input: Literal["stdin", "file"] = "stdin"
    output: Literal["stdout", "file"] = "stdout"
    workdir: str | None = Field(
        default=None, description="the program's working folder (default: the current one)"
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="environment variables added for the program"
    )
    version: str = Field(default="1", description="the program's version, stored with the results")
    output_limit_mb: float = Field(
        default=OUTPUT_LIMIT_MB,
        gt=0,
        allow_inf_nan=False,
        description="the most a call's answer may hold (MB of standard output, or of "
        "the output file); a call past it fails",
    )

    @field_validator("metrics", mode="before")
    @classmethod
    def _unit_alone(cls, v: Any) -> Any:
        if isinstance(v, dict):
            reserved = [k for k in RESERVED_NAMES if k in v]
            if reserved:
                raise ValueError(
                    f"'{reserved[0]}' is not a metric: feasible and reason are the program's own "
                    f"columns, and dse writes {', '.join(n for n in RESERVED_NAMES if n not in ('feasible', 'reason'))} itself"
                )
            _names_netcdf_can_hold(v)
            return {k: {"unit": d} if isinstance(d, str) else d for k, d in v.items()}
        return v

    @field_validator("inputs", mode="after")
    @classmethod
    def _not_reserved(cls, v: dict) -> dict:
        _names_netcdf_can_hold(v)
        reserved = [k for k in RESERVED_NAMES if k in v]
        if reserved:
            raise ValueError(
                f"'{reserved[0]}' is not an input: dse writes {', '.join(RESERVED_NAMES)} itself"
            )
        return v

    @field_validator("command")
    @classmethod
    def _not_empty(cls, v: list[str] | str) -> list[str] | str:
        if not (shlex.split(v) if isinstance(v, str) else v):
            raise ValueError("the command names no program")
        return v

    @model_validator(mode="after")
    def _inputs_are_not_metrics(self) -> CommandOptions:
        both = sorted(set(self.inputs) & set(self.metrics))
        if both:
            raise ValueError(f"'{both[0]}' is both an input and a metric; name them apart")
        return self

    @model_validator(mode="after")
    def _files_named(self) -> CommandOptions:
        """input/output: file need their placeholder in the command, and a placeholder needs
        its file (the program would read or write a file that is never there)."""
        text = self.command if isinstance(self.command, str) else " ".join(self.command)
        for key in ("input", "output"):
            placeholder, mode = "{" + key + "}", getattr(self, key)
            if mode == "file" and placeholder not in text:
                raise ValueError(
                    f"{key}: file needs '{placeholder}' in the command (where the file's path goes)"
                )
            if mode != "file" and placeholder in text:
                raise ValueError(
                    f"the command has '{placeholder}', which is a path only with {key}: file "
                    f"({key} is {mode})"
                )
        return self


#: process groups of the programs running now in this process: killed when it exits (a
#: dask worker closed while a program runs; the program is in its own session, so the
#: signal that stops dse does not reach it)
_RUNNING: set[int] = set()


def worker_closing(worker=None) -> bool:
    """``worker`` (default: the dask worker this call runs on, if any) is closing: its
    programs were stopped, and the halves of a failed call must not start them again."""
    if worker is None:
        distributed = sys.modules.get("distributed")  # not imported: not on a worker
        if distributed is None:
            return False
        try:
            worker = distributed.get_worker()
        except ValueError:
            return False
    return getattr(getattr(worker, "status", None), "name", "") in (
        "closing",
        "closing_gracefully",
        "closed",
    )


def kill_session(pid: int) -> None:
    """Kill session ``pid`` (a program started in its own session, and whatever it started
    there): its process group, and on Linux every process of the session in another group
    too (a shell's background job under ``set -m``). A process that made a session of its own
    (``setsid``) is out of reach (docs/security.md)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for other in _session_members(pid):
        try:
            os.kill(other, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` (Linux: from /proc; elsewhere none)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[
            stat.rfind(b")") + 2 :
        ].split()  # after "pid (name) ": state ppid pgrp session
        if len(fields) > 3 and fields[3] == str(sid).encode():
            members.append(int(entry))
    return members


def _kill_group(proc: subprocess.Popen) -> None:
    kill_session(proc.pid)
    proc.wait()


class _Stopped(Exception):
    """Why a call's exchange with its program ended early: ``timeout`` or ``too_much``."""


def _exchange(
    proc: subprocess.Popen, data: bytes | None, deadline: float | None, limit_bytes: int
) -> tuple[bytes, bytes]:
    """Give ``data`` to the program's standard input and read its standard output (at most
    ``limit_bytes``) and error (the last :data:`STDERR_CHARS` kept) until the program has
    exited and closed both, without waiting past ``deadline`` (``time.monotonic``) nor more
    than :data:`AFTER_EXIT_S` for a process it left behind holding them. Raises
    :class:`_Stopped` (``args[0]``: ``"timeout"`` or ``"too_much"``, ``args[1]``: stderr)."""
    out, err = bytearray(), bytearray()
    sel = selectors.DefaultSelector()
    pending = memoryview(data or b"")
    if proc.stdin is not None:
        if pending:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > AFTER_EXIT_S:
                break  # a process it left behind holds the pipes: killed below, by the caller
            if deadline is not None and now >= deadline:
                raise _Stopped("timeout", bytes(err))
            wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - now))
            for key, _ in sel.select(wait):
                if key.fileobj is proc.stdin:
                    try:
                        sent = os.write(key.fd, pending[: 1 << 16])
                    except BlockingIOError:  # the pipe filled up since select said otherwise
                        sent = 0
                    except BrokenPipeError:  # it stopped reading: what it answers tells
                        sent = len(pending)
                    pending = pending[sent:]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > limit_bytes:
                        raise _Stopped("too_much", bytes(err))
                else:
                    err += chunk
                    if len(err) > 4 * STDERR_CHARS:
                        del err[: -2 * STDERR_CHARS]
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            proc.wait(remaining)  # it closed its output but may still run
        except subprocess.TimeoutExpired:
            raise _Stopped("timeout", bytes(err)) from None
    finally:
        sel.close()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()
    return bytes(out), bytes(err)


@atexit.register
def stop_programs() -> None:
    """Kill the programs running now in this process, with whatever they started (at exit,
    and when a dask worker closes: its nanny kills a worker that does not stop in time, and
    a killed process runs no exit handler)."""
    for pid in list(_RUNNING):
        kill_session(pid)


class CommandEvaluator(Evaluator):
    name = "command"
    version = "1"
    description = "an external program, run once per chunk of candidates"
    Options = CommandOptions
    enforces_timeout = True
    fork_safe = True  # it keeps the program's name; each chunk starts the program anew

    def __init__(self, **options: Any) -> None:
        opts = CommandOptions.model_validate(options)
        super().__init__(**options)
        self.opts = opts
        self.version = opts.version
        self.args = (
            shlex.split(opts.command) if isinstance(opts.command, str) else list(opts.command)
        )
        self.args = [a.replace("{python}", sys.executable) for a in self.args]
        program = self.args[0]
        script = len(self.args) > 1 and Path(program).name.startswith("python")
        self.label = Path(self.args[1 if script else 0]).name  # how messages name the program
        if opts.workdir is not None and not Path(opts.workdir).is_dir():
            raise StudyError(
                f"workdir {opts.workdir} is not a folder"
                if Path(opts.workdir).exists()
                else f"workdir {opts.workdir} does not exist",
                field="evaluator.options.workdir",
            )
        # checked as the program will be run: a bare name is looked up on PATH, a path from workdir
        where = (
            Path(opts.workdir) / program
            if opts.workdir and not Path(program).is_absolute()
            else Path(program)
        )
        if "/" not in program:
            if shutil.which(program) is None:
                hint = (
                    f"; a program in {opts.workdir or 'the current folder'} is given as ./{program}"
                    if where.is_file()
                    else ""
                )
                raise StudyError(
                    f"program '{program}' not found on PATH{hint}",
                    field="evaluator.options.command",
                )
        elif not where.is_file():
            raise StudyError(
                f"program '{program}' not found (not on PATH, not a file)",
                field="evaluator.options.command",
            )
        elif not os.access(where, os.X_OK):
            raise StudyError(
                f"program '{program}' is not executable (chmod +x it, or run it through an "
                'interpreter: ["{python}", script.py])',
                field="evaluator.options.command",
            )
        if (
            script and not Path(self.args[1]).is_absolute()
        ):  # {python} script.py: the script must be there
            path = Path(opts.workdir or ".") / self.args[1]
            if not path.is_file() and not self.args[1].startswith("-"):
                raise StudyError(
                    f"script {self.args[1]} not found in {opts.workdir or 'the current folder'} "
                    "(the program runs in workdir)",
                    field="evaluator.options.command",
                )

    @property
    def inputs(self) -> dict[str, Input]:
        return {
            n: Input(
                n,
                d.kind,
                d.unit,
                d.description,
                d.default,
                tuple(d.choices) if d.choices is not None else None,
                d.minimum,
                d.maximum,
            )
            for n, d in self.opts.inputs.items()
        }

    @property
    def metrics(self) -> dict[str, Metric]:
        return {n: Metric(n, d.unit, d.long_name or n) for n, d in self.opts.metrics.items()}

    def evaluate(self, candidates: pd.DataFrame, timeout_s: float | None = None) -> pd.DataFrame:
        table = self.with_defaults(candidates)[list(self.opts.inputs)]
        with tempfile.TemporaryDirectory(prefix="dse-command-") as tmp:
            files = {
                "input": Path(tmp) / f"candidates.{self.opts.format}",
                "output": Path(tmp) / f"metrics.{self.opts.format}",
            }
            data = self._write(table)
            if self.opts.input == "file":
                files["input"].write_bytes(data)
            args = [
                a.replace("{input}", str(files["input"])).replace("{output}", str(files["output"]))
                for a in self.args
            ]
            stdout = self._run(args, data if self.opts.input == "stdin" else None, timeout_s)
            if self.opts.output == "file":
                if not files["output"].is_file():
                    raise RuntimeError(
                        f"{self.label} wrote no {files['output'].name} ('{{output}}' in the command)"
                    )
                size_mb = files["output"].stat().st_size / 1e6
                if size_mb > self.opts.output_limit_mb:
                    raise RuntimeError(
                        f"{self.label} wrote {size_mb:,.1f} MB to {files['output'].name}, more than "
                        f"{self.opts.output_limit_mb:g} MB (evaluator.options.output_limit_mb)"
                    )
                stdout = files["output"].read_bytes()
        return self._read(stdout, len(table))

    def _write(self, table: pd.DataFrame) -> bytes:
        if self.opts.format == "csv":
            return table.to_csv(index=False).encode()
        return json.dumps(table.to_dict(orient="records"), default=_plain).encode()

    def _run(self, args: list[str], data: bytes | None, timeout_s: float | None) -> bytes:
        if worker_closing():
            raise RuntimeError(f"{self.label} was stopped: the dask worker is closing")
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.opts.workdir,
            env={**os.environ, **self.opts.env},
            start_new_session=True,
        )
        _RUNNING.add(proc.pid)
        if worker_closing():  # the worker began to close while this program started: stopped too
            _kill_group(proc)
            _RUNNING.discard(proc.pid)
            raise RuntimeError(f"{self.label} was stopped: the dask worker is closing")
        limit = self.opts.output_limit_mb
        try:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            out, err = _exchange(proc, data, deadline, int(limit * 1e6))
        except _Stopped as stop:
            _kill_group(proc)  # the program and whatever it started
            if stop.args[0] == "timeout":
                raise TimeoutError(
                    f"{self.label} gave no result within {timeout_s:g} s (evaluator.timeout_s)"
                    f"{_tail(stop.args[1])}"
                ) from None
            raise RuntimeError(
                f"{self.label} wrote more than {limit:g} MB to its standard output "
                f"(evaluator.options.output_limit_mb); stopped{_tail(stop.args[1])}"
            ) from None
        except BaseException:  # the run stops (Ctrl-C, SIGTERM): its program must not outlive it
            _kill_group(proc)
            raise
        finally:
            _RUNNING.discard(proc.pid)
        kill_session(proc.pid)  # what it left behind does not outlive the call
        if proc.returncode != 0:
            raise RuntimeError(f"{self.label} exited with code {proc.returncode}{_tail(err)}")
        return out

    def _read(self, output: bytes, n: int) -> pd.DataFrame:
        try:
            if self.opts.format == "csv":
                table = pd.read_csv(io.BytesIO(output))
            else:
                table = pd.DataFrame.from_records(json.loads(output or b"[]"))
        except (ValueError, pd.errors.ParserError) as exc:
            raise ValueError(
                f"{self.label} wrote no readable {self.opts.format.upper()}: {exc}"
            ) from None
        if (
            self.opts.format == "csv"
        ):  # pandas renames a repeated column (f1, f1.1): look at the header itself
            lines = [
                ln for ln in output.decode("utf-8-sig", errors="replace").splitlines() if ln.strip()
            ]
            try:
                header = next(csv.reader(lines[:1]), [])
            except csv.Error:
                header = []  # pandas reports what it cannot read
            twice = sorted({c for c in header if c and header.count(c) > 1})
            if twice:
                raise ValueError(f"{self.label} wrote the column {twice[0]} twice")
        missing = [m for m in self.opts.metrics if m not in table]
        if missing:
            raise ValueError(
                f"{self.label} did not write the metrics {missing} (it wrote {list(table.columns)})"
            )
        if len(table) != n:
            raise ValueError(f"{self.label} wrote {len(table)} rows for {n} candidates")
        out = pd.DataFrame({m: self._numbers(table[m], m) for m in self.opts.metrics})
        feasible = table["feasible"] if "feasible" in table else pd.Series(True, index=table.index)
        out["feasible"] = [self._truth(v) for v in feasible]
        reason = (
            table["reason"].astype(object).where(table["reason"].notna(), "").astype(str)
            if "reason" in table
            else pd.Series("", index=table.index)
        )
        out["reason"] = np.where(
            out["feasible"], "", reason.replace("", "infeasible (the program said so)")
        )
        # a feasible row without a number for a metric: the program could not compute it
        for m in self.opts.metrics:
            gap = out["feasible"].to_numpy() & ~np.isfinite(out[m].to_numpy())
            out.loc[gap, "reason"] = f"{self.label} wrote no finite number for {m}"
            out.loc[gap, "feasible"] = False
        return out

    def _numbers(self, column: pd.Series, metric: str) -> np.ndarray:
        values = pd.to_numeric(column, errors="coerce")
        bad = values.isna() & column.notna() & (column.astype(str).str.strip() != "")
        if bad.any():
            raise ValueError(
                f"{self.label} wrote {column[bad].iloc[0]!r} for the metric {metric}: not a number"
            )
        return values.to_numpy(float)

    def _truth(self, value: Any) -> bool:
        """The ``feasible`` column: true/false, yes/no or 1/0; an empty cell or null is not
        feasible (as before: the program did not say so); anything else is an error."""
        if isinstance(value, bool | np.bool_):
            return bool(value)
        text = "" if value is None or pd.isna(value) else str(value).strip().lower()
        if text == "":
            return False
        if text in TRUTH:
            return TRUTH[text]
        raise ValueError(
            f"{self.label} wrote {value!r} in the column feasible (true or false expected)"
        )


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else str(value)


def _tail(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    if not text:
        return ""
    return "; stderr: " + (text if len(text) <= STDERR_CHARS else "..." + text[-STDERR_CHARS:])
