"""Runs of `dse run` as real programs (tests/programs.py), to be killed or signalled mid-run (test_resume, test_signals)."""

from __future__ import annotations

import time
from pathlib import Path

from conftest import rows_on_disk, toy_study, write_study
from programs import Program, start_program


def background_study(
    tmp_path: Path, algorithm: str, out: Path, delay_s: float, workers: int = 0
) -> Path:
    """A toy study slow enough (``delay_s`` per candidate) to be stopped mid-run, written beside ``out``."""
    study = toy_study(output=str(out))
    study["space"] = {
        "x": {"range": [0.0, 1.0], "step": 0.05},
        "y": [0, 1, 2, 3],
        "shape": ["a", "b"],
    }
    study["search"] = {"algorithm": algorithm, "budget": 60, "seed": 11, "batch_size": 20}
    study["execution"] = {"workers": workers, "chunk_size": 5}
    study["evaluator"]["options"] = {"delay_s": delay_s}
    if algorithm == "exhaustive":
        study["space"]["x"] = {"range": [0.0, 1.0], "step": 0.1}  # 88 candidates
        study["search"]["budget"] = 88
    return write_study(tmp_path, study, name=f"{out.name}.yaml")


def start_run(study: Path) -> Program:
    """``dse run STUDY --quiet`` as a program in a session of its own (signals reach it alone)."""
    return start_program("run", study, "--quiet", new_session=True)


def start_resume(out: Path) -> Program:
    """``dse resume OUT --quiet`` as a program in a session of its own."""
    return start_program("resume", out, "--quiet", new_session=True)


def wait_for_rows(out: Path, n: int, proc: Program, timeout: float = 60) -> None:
    """Until at least ``n`` evaluations are in the log (written groups; ``.tmp`` files skipped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if rows_on_disk(out) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended before {n} rows were written: {proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError(f"no {n} rows after {timeout} s")
