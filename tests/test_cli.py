"""The command line called in-process: `dse.cli.main(argv) -> int` keeps nothing between calls
and leaves the process as it found it."""

from __future__ import annotations

import logging
import os
import signal

from conftest import run_cli, toy_study, write_study


def _process_state() -> dict:
    import optuna

    return {
        "environ": dict(os.environ),
        "sigint": signal.getsignal(signal.SIGINT),
        "sigterm": signal.getsignal(signal.SIGTERM),
        "sighup": signal.getsignal(signal.SIGHUP),
        "root handlers": list(logging.getLogger().handlers),
        "optuna": optuna.logging.get_verbosity(),
        "cwd": os.getcwd(),
    }


def test_main_keeps_nothing_between_calls_and_restores_the_process(tmp_path, capsys):
    import netCDF4  # noqa: F401 - its import sets HDF5_PLUGIN_PATH: a library's, not main's

    from dse.cli import main
    from dse.cli.app import _CALL

    before = _process_state()
    out = tmp_path / "out"
    study = write_study(
        tmp_path,
        toy_study(
            output=str(out), search={"algorithm": "optuna-tpe", "budget": 20, "batch_size": 10}
        ),
    )
    assert (
        main(["run", str(study), "-q"]) == 0
    )  # a run that ended: Ctrl-C after it would leave code 0
    capsys.readouterr()
    assert _process_state() == before
    assert _CALL.get(None) is None  # the call's consoles and what it said are gone with it
    assert (
        main(["resume", str(tmp_path / "nowhere")]) == 2
    )  # refused: nothing of the run above carried
    assert "error:" in capsys.readouterr().err
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("dse ")
    assert (
        main([]) == 2 and "Usage" in capsys.readouterr().out
    )  # `dse` alone: its help, as click ends it
    assert main(["no-such-command"]) == 2 and "No such command" in capsys.readouterr().err
    assert _process_state() == before


def test_each_call_takes_the_width_and_streams_it_finds():
    """The consoles are made per call: COLUMNS (and the captured streams) of this call, not of
    the process when dse.cli was imported."""
    narrow = run_cli("describe", "--search", "list", env={"COLUMNS": "60"})
    wide = run_cli("describe", "--search", "list", env={"COLUMNS": "180"})
    assert narrow.returncode == wide.returncode == 0
    assert (
        max(map(len, narrow.stdout.splitlines()))
        <= 60
        < max(map(len, wide.stdout.splitlines()))
        <= 180
    )


def test_describe_folds_long_values_on_a_narrow_terminal_never_cuts_them():
    """At 80 columns `dse describe` ended values with '…' (megatron-530…, a source's file
    cut): each value is folded onto further lines instead, every character kept."""
    for args in ((), ("--accelerator", "H100-SXM"), ("--search", "list")):
        wide = run_cli("describe", *args, env={"COLUMNS": "400"})
        narrow = run_cli("describe", *args, env={"COLUMNS": "80"})
        assert narrow.returncode == 0 and "…" not in narrow.stdout, args
        assert max(map(len, narrow.stdout.splitlines())) <= 80
        # the same characters in the cells, read column by column, as the wide table's
        assert _letters(narrow.stdout) == _letters(wide.stdout), args


def _letters(text: str) -> list[str]:
    """Every letter and digit of a table's cells, in order, column by column."""
    import re

    rows = [line.split("│")[1:-1] for line in text.splitlines() if line.startswith("│")]
    columns = max(map(len, rows), default=0)
    return sorted(
        "".join(re.findall(r"[0-9A-Za-z]", "".join(r[c] for r in rows if len(r) == columns)))
        for c in range(columns)
    )


def test_an_option_value_refused_by_the_parser_is_said_in_dse_words():
    """Not pydantic's "Value error, " or "Input should be", as a study's values are said."""
    for args, expected in (
        (
            ("export", "results/x", "-f", "xlsx"),
            "error: Invalid value for '--format' / '-f': 'xlsx' is not one of 'csv', ",
        ),
        (
            ("show", "results/x", "-n", "0"),
            "error: Invalid value for '--limit' / '-n': expected a value greater than or equal to 1",
        ),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2 and proc.stderr.startswith(expected), proc.stderr
        assert "Value error" not in proc.stderr and "Input should" not in proc.stderr
        assert proc.stderr.rstrip().endswith("--help` lists what is allowed)")
