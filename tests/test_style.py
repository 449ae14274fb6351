"""The code keeps one format and passes the linter (ruff, configured in pyproject.toml)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO

PATHS = ("dse", "tests", "benchmarks")
needs_ruff = pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None, reason='ruff is not installed (pip install ".[test]")'
)


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, *PATHS], cwd=REPO, capture_output=True, text=True
    )


@needs_ruff
def test_every_file_is_formatted_as_ruff_format_writes_it():
    proc = _ruff("format", "--check")
    assert proc.returncode == 0, f"run `ruff format {' '.join(PATHS)}`:\n{proc.stdout}{proc.stderr}"


@needs_ruff
def test_the_linter_finds_nothing():
    proc = _ruff("check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
