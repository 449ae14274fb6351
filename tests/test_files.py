"""No write of dse follows a symbolic link or lands outside the folder it was given
(docs/security.md): links planted in a results folder, at an output path, at the old
predictable temporary names, and a folder pre-created by another user. Each case keeps a
sentinel file outside and checks its bytes and its modification time."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import run_cli, toy_study, write_study
from dse.files import atomic_folder, atomic_path, atomic_write_text, refuse_unsafe_write

SECRET = b"root-only: must not change\n"


def _sentinel(folder: Path) -> tuple[Path, tuple[bytes, int]]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sentinel"
    path.write_bytes(SECRET)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    return path, (SECRET, 1_000_000_000)


def _log_as_link(run: Path, elsewhere: Path) -> Path:
    """The run's ``evaluations`` folder moved to ``elsewhere`` and a link planted in its
    place (the log still readable through it)."""
    log = run / "evaluations"
    for f in log.iterdir():
        f.rename(elsewhere / f.name)
    log.rmdir()
    log.symlink_to(elsewhere)
    return log


def _unchanged(path: Path, was: tuple[bytes, int]) -> bool:
    return path.read_bytes() == was[0] and path.stat().st_mtime_ns == was[1]


def _cli(capsys, monkeypatch, *args) -> tuple[int, str, str]:
    """``dse ARGS`` in this process: (exit code, standard output, standard error)."""
    proc = run_cli(*map(str, args))
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def finished(tmp_path, capsys, monkeypatch) -> Path:
    study = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    code, _, err = _cli(capsys, monkeypatch, "run", study, "--quiet")
    assert code == 0, err
    return tmp_path / "out"


def test_a_write_refuses_a_link_at_its_name_and_leaves_the_target_alone(tmp_path):
    sentinel, was = _sentinel(tmp_path / "outside")
    link = tmp_path / "out.txt"
    link.symlink_to(sentinel)
    with pytest.raises(OSError, match="is a symbolic link"):
        atomic_write_text(link, "new")
    with pytest.raises(OSError, match="is a symbolic link"):
        with atomic_folder(link):
            pass
    assert link.is_symlink() and _unchanged(sentinel, was)


def test_temporary_names_are_unpredictable_private_and_never_followed(tmp_path):
    """The old temporary name ``.NAME.PID.tmp`` could be planted as a link beforehand (6,000
    links redirected a root run's write); now the temporary file lies in a folder made by
    mkdtemp (mode 0700) and planted links there are not touched."""
    sentinel, was = _sentinel(tmp_path / "outside")
    target = tmp_path / "state.json"
    planted = tmp_path / f".state.json.{os.getpid()}.tmp"
    planted.symlink_to(sentinel)
    with atomic_path(target) as tmp:
        assert tmp.parent.parent == tmp_path and tmp.parent.name != planted.name
        assert oct(tmp.parent.stat().st_mode & 0o777) == "0o700"
        tmp.write_text("{}")
    assert target.read_text() == "{}" and not target.is_symlink()
    assert _unchanged(sentinel, was)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["outside", "state.json", planted.name]
    )


def test_a_link_inside_a_results_folder_on_the_way_to_a_file_is_refused(finished, tmp_path):
    outside = tmp_path / "outside"
    sentinel, was = _sentinel(outside)
    (finished / "sub").symlink_to(outside)
    with pytest.raises(OSError, match="is a symbolic link inside the results folder"):
        atomic_write_text(finished / "sub" / "sentinel", "new")
    with pytest.raises(OSError, match="is a symbolic link inside the results folder"):
        refuse_unsafe_write(finished / "sub" / "deeper" / "x.csv")
    assert _unchanged(sentinel, was) and sorted(p.name for p in outside.iterdir()) == ["sentinel"]
    # outside a results folder a link on the way is the user's own: followed
    (tmp_path / "mine").symlink_to(outside)
    atomic_write_text(tmp_path / "mine" / "new.txt", "ok")
    assert (outside / "new.txt").read_text() == "ok"


def test_dot_dot_after_a_link_inside_a_results_folder_is_refused_not_followed_out(
    finished, tmp_path, capsys, monkeypatch
):
    """'RESULTS/LINK/../x' was checked as 'RESULTS/x' ('..' taken off by name), but the system
    walks it through the link, to beside the link's target: plot and export wrote there."""
    victim = tmp_path / "victim"
    sentinel, was = _sentinel(victim / "inner")
    (finished / "sub").symlink_to(victim / "inner")
    with pytest.raises(OSError, match="is a symbolic link inside the results folder"):
        atomic_write_text(Path(f"{finished}/sub/../x.txt"), "new")
    for command in (("plot",), ("export", "-f", "csv"), ("report",)):
        code, _, err = _cli(
            capsys, monkeypatch, command[0], finished, *command[1:], "-o", f"{finished}/sub/../x"
        )
        assert code == 2 and "is a symbolic link inside the results folder" in err, err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert _unchanged(sentinel, was) and sorted(p.name for p in victim.rglob("*")) == [
        "inner",
        "sentinel",
    ]
    # outside a results folder, '..' after the user's own link goes where the system says
    (tmp_path / "mine").symlink_to(victim / "inner")
    atomic_write_text(tmp_path / "mine" / ".." / "mine.txt", "ok")
    assert (victim / "mine.txt").read_text() == "ok"


def test_no_folder_is_made_through_a_link_inside_a_results_folder(
    finished, tmp_path, capsys, monkeypatch
):
    """export, report and calibrate made an output's missing folders (through a link planted
    in the results folder, in its target) before the write that refused the link."""
    outside = tmp_path / "outside"
    sentinel, was = _sentinel(outside)
    (finished / "figs").symlink_to(outside)
    for command in (("export", "-f", "csv"), ("export", "-f", "zarr"), ("report",), ("plot",)):
        target = finished / "figs" / "new" / "deeper" / "x"
        code, _, err = _cli(capsys, monkeypatch, command[0], finished, *command[1:], "-o", target)
        assert code == 2 and "is a symbolic link inside the results folder" in err, (command, err)
    assert _unchanged(sentinel, was) and sorted(p.name for p in outside.iterdir()) == ["sentinel"]


@pytest.mark.parametrize(
    "command,name",
    [
        (("plot",), "pareto.png"),
        (("report",), "report.html"),
        (("export", "-f", "csv"), "pareto.csv"),
        (("resume",), "pareto.nc"),  # written again by resume once missing
        (("resume",), "progress.json"),
    ],
)
def test_a_link_planted_in_a_results_folder_sends_no_command_write_outside(
    finished, tmp_path, capsys, monkeypatch, command, name
):
    """With a link planted inside a results folder, plot, report, export and resume each
    overwrote the file it pointed to (a fake ~/.bashrc got a parameter value, and bash ran it)."""
    sentinel, was = _sentinel(tmp_path / "outside")
    planted = finished / name
    if name == "progress.json":
        (
            finished / "pareto.nc"
        ).unlink()  # resume has datasets to write, and its progress with them
    planted.unlink(missing_ok=True)
    planted.symlink_to(sentinel)
    code, _, err = _cli(capsys, monkeypatch, command[0], finished, *command[1:])
    assert _unchanged(sentinel, was), (command, err)
    assert planted.is_symlink() or name == "progress.json"
    if planted.is_symlink() and code != 0:
        assert code in (2, 1) and "Traceback" not in err and "symbolic link" in err, err


@pytest.mark.parametrize("name", ["lock", "progress.json", "nsga2-asked.f64", "log"])
def test_a_pipe_planted_in_a_results_folder_holds_no_command(tmp_path, capsys, monkeypatch, name):
    """A named pipe at the lock, the progress file, NSGA-II's asked file or a log file held
    `dse status`, `show`, `export` and `resume` forever (read as a file, a pipe nobody writes
    to never ends): each now goes on without it, or refuses the folder in one line."""
    import threading
    import time

    study = write_study(
        tmp_path,
        toy_study(
            output=str(tmp_path / "out"),
            search={"algorithm": "nsga2", "budget": 40, "batch_size": 20, "polish": False},
        ),
    )
    code, _, err = _cli(capsys, monkeypatch, "run", study, "--quiet")
    assert code == 0, err
    out = tmp_path / "out"
    pipe = min((out / "evaluations").glob("*.arrow")) if name == "log" else out / name
    pipe.unlink(missing_ok=True)
    os.mkfifo(pipe)

    def unblock():  # were it opened to be read, a writer's open and close end the wait
        time.sleep(10)
        try:
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader (ENXIO), or gone: as it should be
            pass

    threading.Thread(target=unblock, daemon=True).start()
    export = ("export", out, "--all", "-o", tmp_path / "all.csv")
    for args in (("status", out), ("show", out), export, ("resume", out, "--quiet")):
        start = time.monotonic()
        code, _, err = _cli(capsys, monkeypatch, *args)
        assert time.monotonic() - start < 8 and "Traceback" not in err, (args, err)
        refused = name == "log" or (name == "nsga2-asked.f64" and args[0] == "resume")
        assert code == (2 if refused else 0), (args, err)
        if refused:
            said = err.strip().splitlines()[-1]  # (resume says first what it found)
            assert said.startswith("error:") and pipe.name in said, err
            assert "is not a file" in said or "is a device, pipe or socket" in said, err


def test_a_tilde_is_the_home_folder_in_a_study_and_a_folder_named_so_on_the_command_line(
    tmp_path,
):
    """``output: ~/res`` made a folder named ~ in the working folder, and its datasets went
    to xarray, which read the ~ as the home folder (the run ended "writing its datasets
    failed"); ``-o '~/res'`` (quoted: no shell expanded it) is a folder named ~ here, and no
    library may read or write its files under the home folder instead."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    study = write_study(work, toy_study(output="~/res"))
    env = {"HOME": str(home)}
    proc = run_cli("run", study, "--quiet", cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (home / "res" / "pareto.nc").is_file() and not (work / "~").exists()
    proc = run_cli("run", study, "-o", "~/cli", "--quiet", cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    for args in (("show", "~/cli"), ("export", "~/cli", "--all", "-o", "~/all.parquet")):
        proc = run_cli(*args, cwd=work, env=env)
        assert proc.returncode == 0, (args, proc.stderr)
    assert (work / "~" / "cli" / "pareto.nc").is_file() and (work / "~" / "all.parquet").is_file()
    # (libraries keep their caches under the home folder: .cache, .config)
    assert [p.name for p in home.iterdir() if not p.name.startswith(".")] == ["res"]


def test_an_explicit_output_that_is_a_link_is_refused_in_one_line(
    finished, tmp_path, capsys, monkeypatch
):
    sentinel, was = _sentinel(tmp_path / "outside")
    link = tmp_path / "bashrc"
    link.symlink_to(sentinel)
    for command in (("export", "-f", "csv"), ("plot",), ("report",)):
        code, _, err = _cli(capsys, monkeypatch, command[0], finished, *command[1:], "-o", link)
        assert code == 2 and err.count("\n") == 1 and "--output: is a symbolic link" in err, err
    assert _unchanged(sentinel, was)


def test_overwrite_of_a_folder_whose_log_is_a_planted_link_empties_nothing_outside(
    finished, tmp_path, capsys, monkeypatch
):
    outside = tmp_path / "outside"
    sentinel, was = _sentinel(outside)
    log = _log_as_link(finished, outside)
    study = write_study(tmp_path, toy_study(output=str(finished)), name="again.yaml")
    code, _, err = _cli(capsys, monkeypatch, "run", study, "--overwrite", "--quiet")
    assert code == 0, err
    assert _unchanged(sentinel, was) and not log.is_symlink() and any(log.iterdir())
    assert len(list(outside.iterdir())) > 1  # the old log files moved there stay


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder of another user takes root")
def test_a_folder_another_user_made_is_refused_before_anything_is_written(
    tmp_path, capsys, monkeypatch
):
    """A folder pre-created, with links in it, by another local user made root's ``dse run``
    overwrite a root-only file."""
    sentinel, was = _sentinel(tmp_path / "outside")
    trap = tmp_path / "trap"
    trap.mkdir()
    for name in ("study.yaml", "meta.json", "state.json"):
        (trap / name).symlink_to(sentinel)
    os.chown(trap, 4321, 4321)
    study = write_study(tmp_path, toy_study(output=str(trap)))
    for command in (("validate", study), ("run", study, "--quiet")):
        code, _, err = _cli(capsys, monkeypatch, *command)
        assert (
            code == 2 and "belongs to another user (uid 4321)" in err and "Traceback" not in err
        ), err
    assert _unchanged(sentinel, was)
    os.chown(trap, 0, 0)  # now root's own, but a folder of links, not a results folder
    code, _, err = _cli(capsys, monkeypatch, "run", study, "--quiet", "--overwrite")
    assert code == 2 and "symbolic link" in err or "not a dse results folder" in err, err
    assert _unchanged(sentinel, was)


def test_output_at_the_root_at_home_or_in_a_foreign_folder_is_refused(
    tmp_path, capsys, monkeypatch
):
    """``output: /`` was accepted: dse run wrote a whole run into the file-system root."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(home))
    for output, said in (
        ("/", "is the file-system root"),
        (str(home), "is your home folder itself"),
        (str(tmp_path), "holds files but is not a dse results folder"),
    ):
        study = write_study(tmp_path, toy_study(output=output), name="s.yaml")
        code, _, err = _cli(capsys, monkeypatch, "validate", study)
        assert code == 2 and said in err and "s.yaml" in err and "output.path" in err, err
        assert err.count("\n") == 1, err
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "run",
        write_study(tmp_path, toy_study(), name="t.yaml"),
        "-o",
        home,
        "--quiet",
    )
    assert code == 2 and "is your home folder itself" in err, err
    assert sorted(p.name for p in home.iterdir()) == [".bashrc"]
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "run",
        write_study(tmp_path, toy_study(), name="t.yaml"),
        "-o",
        shared,
        "--quiet",
    )
    assert code == 2 and "is writable by every user" in err and not any(shared.iterdir()), err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "run",
        write_study(tmp_path, toy_study(), name="t.yaml"),
        "-o",
        empty,
        "--quiet",
    )
    assert code == 0 and (empty / "meta.json").is_file(), err


@pytest.mark.parametrize(
    "plant, says",
    [
        (
            lambda journal, target: journal.symlink_to(target),
            "optuna.journal: cannot write: is a symbolic link",
        ),
        (
            lambda journal, target: os.link(target, journal),
            "optuna.journal: cannot write: the file has 1 other name(s) (a hard link)",
        ),
    ],
    ids=["symbolic link", "hard link"],
)
def test_a_link_planted_at_optunas_journal_is_refused_not_appended_to(
    tmp_path, capsys, monkeypatch, plant, says
):
    """optuna appends to its journal by name: a symbolic link there would take every trial's
    write, and a hard link would change the file under its other name."""
    pytest.importorskip("optuna")
    sentinel, was = _sentinel(tmp_path / "outside")
    out = tmp_path / "out"
    study = write_study(
        tmp_path,
        toy_study(
            output=str(out), search={"algorithm": "optuna-tpe", "budget": 20, "batch_size": 10}
        ),
    )
    (out / "evaluations").mkdir(
        parents=True
    )  # a run that never wrote a log: taken as a results folder
    plant(out / "optuna.journal", sentinel)
    code, _, err = _cli(capsys, monkeypatch, "run", study, "--quiet")
    assert code == 2 and says in err and "Traceback" not in err, err
    assert _unchanged(sentinel, was)


def test_sigterm_while_evaluate_writes_leaves_no_hidden_output(tmp_path, monkeypatch):
    """``dse evaluate`` killed by SIGTERM left its hidden temporary output (7.8 GB in one
    case): the signal now ends it as an exception, and the temporary folder goes with it."""
    import signal

    import pandas as pd

    from dse.cli.evaluate import write_evaluated
    from dse.evaluators import load_evaluator
    from dse.study import EvaluatorSpec, load_study

    study = load_study(write_study(tmp_path, toy_study(output=str(tmp_path / "out"))))
    ev = load_evaluator(EvaluatorSpec(name=study.evaluator.name))
    table = pd.DataFrame(
        {"x": [0.1, 0.2], "y": [0, 4], "shape": ["a", "b"], "f1": [0.1, 0.2], "f2": [1.0, 2.0]}
    )
    real = pd.DataFrame.to_csv

    def killed_while_writing(self, *args, **kwargs):
        real(self, *args, **kwargs)  # half of the output is on disk, under its hidden name
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(pd.DataFrame, "to_csv", killed_while_writing)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exc:
        write_evaluated(table, ev, tmp_path / "evaluated.csv", study)
    assert exc.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


def test_validate_no_plugins_imports_no_plugin_and_says_what_the_study_would_run(
    tmp_path, capsys, monkeypatch
):
    """``dse validate`` imports a ``module:Class`` evaluator before checking it, so an
    untrusted study's import-time code ran; ``--no-plugins`` reads the study file only."""
    marker = tmp_path / "imported"
    (tmp_path / "evil_plugin.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    study = write_study(
        tmp_path, toy_study(output=str(tmp_path / "out"), evaluator={"name": "evil_plugin:Evil"})
    )
    code, out, err = _cli(capsys, monkeypatch, "validate", study, "--no-plugins")
    assert code == 0, err
    assert "evil_plugin would be imported" in out and "not imported here" in out
    assert not marker.exists() and "evil_plugin" not in sys.modules
    command = toy_study(
        output=str(tmp_path / "out2"),
        evaluator={
            "name": "command",
            "options": {
                "command": ["rm", "-rf", "/tmp/x y"],
                "inputs": {"x": {}},
                "metrics": {"f1": "1"},
            },
        },
    )
    code, out, err = _cli(
        capsys, monkeypatch, "validate", write_study(tmp_path, command, "c.yaml"), "--no-plugins"
    )
    assert code == 0 and "program: runs rm -rf '/tmp/x y' once per chunk" in out, err
    for bad, said in (
        ({"evaluator": {"name": "no-such-evaluator"}}, "evaluator.name: unknown evaluator"),
        (
            {"output": "/"},
            "output.path: cannot write the results folder /: it is the file-system root",
        ),
    ):
        code, out, err = _cli(
            capsys,
            monkeypatch,
            "validate",
            write_study(tmp_path, toy_study(**bad), "b.yaml"),
            "--no-plugins",
        )
        assert code == 2 and said in err and err.count("\n") == 1, err


def test_overwrite_removes_a_private_temporary_folder_a_killed_writer_left(
    finished, tmp_path, capsys, monkeypatch
):
    """kill -9 during a write leaves the write's private folder (``.NAME.RANDOM.PID.tmp``)."""
    left = finished / "evaluations" / ".b000001-c00000.arrow.abc123.999999999.tmp"
    left.mkdir()
    (left / "b000001-c00000.arrow").write_bytes(b"ARROW1 torn")
    study = write_study(tmp_path, toy_study(output=str(finished)), name="again.yaml")
    code, _, err = _cli(capsys, monkeypatch, "run", study, "--overwrite", "--quiet")
    assert code == 0, err
    assert not left.exists()


def test_a_table_too_large_to_read_whole_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """200 MB of candidates for dse evaluate (or measurements for dse calibrate) took 9.2 GB
    of memory and 900 s before anything was said."""
    from dse.tables import TABLE_LIMIT_MB

    big = tmp_path / "cands.csv"
    with open(big, "wb") as f:
        f.write(b"x,y,shape\n")
        f.truncate(int(TABLE_LIMIT_MB * 1e6) + 1000)  # sparse: no disk used
    study = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    code, _, err = _cli(capsys, monkeypatch, "evaluate", study, "-c", big, "-o", tmp_path / "o.csv")
    assert (
        code == 2 and err.count("\n") == 1 and "more than the 50 MB a candidates file may be" in err
    ), err
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "calibrate",
        big,
        "--accelerator",
        "A100-80GB",
        "-o",
        tmp_path / "p.yaml",
    )
    assert (
        code == 0 or "more than the" not in err
    )  # 50 MB is within the 100 MB a measurement file may be
    with open(big, "r+b") as f:
        f.truncate(int(100e6) + 1000)
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "calibrate",
        big,
        "--accelerator",
        "A100-80GB",
        "-o",
        tmp_path / "p.yaml",
    )
    assert (
        code == 2
        and err.count("\n") == 1
        and "more than the 100 MB a measurement file may be" in err
    ), err


def test_a_staged_file_written_by_a_function_is_the_bytes_it_wrote_and_a_failed_one_leaves_nothing(
    tmp_path,
):
    """``stage_file`` takes bytes or a function that writes the open file (a worker encodes
    its chunk's log file straight into it): the same file either way; a function that
    fails part-way leaves no file and no private folder behind."""
    from dse.files import commit_staged, stage_file

    data = bytes(range(256)) * 1000
    by_bytes = stage_file(tmp_path / "a.bin", data)
    by_function = stage_file(
        tmp_path / "b.bin", lambda f: (f.write(data[:100]), f.write(data[100:]))
    )
    assert by_bytes.read_bytes() == by_function.read_bytes() == data
    commit_staged(by_function, tmp_path / "b.bin")
    assert (tmp_path / "b.bin").read_bytes() == data

    def half_then_fail(f):
        f.write(data[:500])
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        stage_file(tmp_path / "c.bin", half_then_fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["b.bin", by_bytes.parent.name])


def test_a_staged_file_is_made_durable_by_its_commit_before_its_name_appears(tmp_path, monkeypatch):
    """A worker stages its chunk without waiting for the disk; the run's commit fsyncs the
    staged file, then renames it, then fsyncs the folder: the name in the log's folder only
    ever names bytes that are on the disk. A link planted in the staged file's place is
    refused, not followed."""
    import dse.files as files

    events: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.fstat(fd).st_ino))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.stat(src).st_ino))
        return real_replace(src, dst)

    started: list[int] = []
    monkeypatch.setattr(files.os, "fsync", fsync)
    monkeypatch.setattr(files, "start_writeback", lambda fd: started.append(os.fstat(fd).st_ino))
    staged = files.stage_file(tmp_path / "a.bin", b"evaluated rows")
    assert events == []  # staged, not synced: the worker does not wait for the disk
    assert started == [staged.stat().st_ino]  # it only starts the disk write
    inode = staged.stat().st_ino
    monkeypatch.setattr(files.os, "replace", replace)
    files.commit_staged(staged, tmp_path / "a.bin")
    assert events[:2] == [("fsync", inode), ("replace", inode)]
    assert events[2][0] == "fsync" and events[2][1] == tmp_path.stat().st_ino  # the folder
    assert (tmp_path / "a.bin").read_bytes() == b"evaluated rows"

    staged = files.stage_file(tmp_path / "b.bin", b"rows")
    secret = tmp_path / "secret"
    secret.write_bytes(b"not the run's")
    staged.unlink()
    staged.symlink_to(secret)
    with pytest.raises(OSError, match="staged file is gone"):
        files.commit_staged(staged, tmp_path / "b.bin")
    assert not (tmp_path / "b.bin").exists() and secret.read_bytes() == b"not the run's"

    # a path that is not a staged file's (not in a private folder of the target's folder) is
    # refused: neither that file is moved nor its folder removed
    other = tmp_path / "other"
    other.mkdir()
    (other / "rows.arrow").write_bytes(b"someone's")
    for wrong in (other / "rows.arrow", files.stage_file(other / "c.bin", b"rows")):
        with pytest.raises(OSError, match="staged file is gone"):
            files.commit_staged(wrong, tmp_path / "c.bin")
        assert wrong.read_bytes() in (b"someone's", b"rows")
    assert not (tmp_path / "c.bin").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_start_writeback_is_found_on_linux_and_takes_a_file_or_a_pipe(tmp_path):
    """Linux's sync_file_range is found in the C library (else a worker's chunk would wait
    for the run's fsync to be written at all); a regular file is taken, and a pipe, where
    there is nothing to write back, is no error (the call is a hint: its result is not
    checked)."""
    from dse.files import _sync_file_range, start_writeback

    assert _sync_file_range() is not None
    path = tmp_path / "rows.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        start_writeback(f.fileno())
        os.fsync(f.fileno())  # waits for what was started
    assert path.stat().st_size == 1 << 20
    read, write = os.pipe()
    try:
        start_writeback(write)
    finally:
        os.close(read), os.close(write)


@pytest.mark.parametrize("name", ["..", ".", "", "sub/x", "\\x"])
def test_a_run_file_named_outside_the_folder_in_meta_json_is_refused_before_anything_is_removed(
    finished, tmp_path, capsys, monkeypatch, name
):
    """meta.json's owned_files ('..') made `run --overwrite` remove the run's log, then end
    in 'Is a directory' naming no file or field; now the folder is refused as it is read."""
    import json

    meta = json.loads((finished / "meta.json").read_text())
    meta["owned_files"] = ["optuna.journal", name]
    (finished / "meta.json").write_text(json.dumps(meta))
    log = sorted((finished / "evaluations").iterdir())
    study = write_study(tmp_path, toy_study(output=str(finished)), name="again.yaml")
    code, _, err = _cli(capsys, monkeypatch, "run", study, "--overwrite", "--quiet")
    said = err.strip().splitlines()[-1]
    assert code == 2 and "meta.json is damaged: owned_files" in said, err
    assert sorted((finished / "evaluations").iterdir()) == log


def test_a_refused_write_names_a_file_with_control_characters_in_one_escaped_line(
    finished, capsys, monkeypatch
):
    """A file system refusal (OSError) was printed as it came: a line end or an escape
    sequence in a planted link's name split the message or reached the terminal."""
    name = "ev\x1b[2Jil\nx"
    (finished / name).symlink_to(finished.parent)
    code, _, err = _cli(capsys, monkeypatch, "export", finished, "-o", finished / name / "x.csv")
    assert code == 2 and err.count("\n") == 1 and "\x1b" not in err, err
    assert "ev\\x1b[2Jil\\nx is a symbolic link inside the results folder" in err, err
    (finished.parent / "afile\n").write_text("in the way")
    for command in (("report",), ("plot",)):
        code, _, err = _cli(
            capsys, monkeypatch, *command, finished, "-o", finished.parent / "afile\n" / "x.html"
        )
        assert code == 2 and err.count("\n") == 1 and "afile\\n is a file" in err, err


def test_a_results_folder_on_the_way_through_a_link_in_another_is_refused_by_validate_and_run(
    finished, tmp_path, capsys, monkeypatch
):
    """A study whose output lay through a link planted in another results folder passed
    `dse validate`, and `dse run` made its folder in the link's target before refusing."""
    outside = tmp_path / "outside"
    sentinel, was = _sentinel(outside)
    (finished / "figs").symlink_to(outside)
    for i, output in enumerate((finished / "figs" / "run", f"{finished}/figs/../run2")):
        study = write_study(tmp_path, toy_study(output=str(output)), name=f"s{i}.yaml")
        for command in (("validate",), ("run", "--quiet")):
            code, _, err = _cli(capsys, monkeypatch, command[0], study, *command[1:])
            assert code == 2 and "is a symbolic link inside the results folder" in err, err
    assert _unchanged(sentinel, was) and sorted(p.name for p in outside.iterdir()) == ["sentinel"]
    assert not (tmp_path / "run2").exists()


def test_an_output_through_a_link_in_a_results_folder_is_refused_before_any_work(
    finished, tmp_path, capsys, monkeypatch
):
    """evaluate evaluated every candidate, and calibrate fitted (after probing the link's
    target with a file of its own), before the write refused a link planted on the way."""
    from conftest import REPO

    outside = tmp_path / "outside"
    sentinel, was = _sentinel(outside)
    (finished / "figs").symlink_to(outside)
    candidates = tmp_path / "candidates.csv"
    candidates.write_text("x,y,shape\n0.1,0,a\n")
    study = finished / "study.yaml"
    sweep = REPO / "tests" / "data" / "perseus_a100_stage.csv"
    for args in (
        ("evaluate", study, "-c", candidates, "-o", finished / "figs" / "new" / "e.csv"),
        ("calibrate", sweep, "-a", "A100-80GB", "-o", finished / "figs" / "mine.yaml"),
    ):
        code, out, err = _cli(capsys, monkeypatch, *args)
        assert code == 2 and err.startswith("error: --") and out == "", (args, out, err)
        assert "figs is a symbolic link inside the results folder" in err, err
    assert _unchanged(sentinel, was) and sorted(p.name for p in outside.iterdir()) == ["sentinel"]


def test_a_writer_removes_no_temporary_file_in_the_target_of_a_planted_log_link(
    finished, tmp_path, capsys, monkeypatch
):
    """With ``evaluations`` a link to another folder, `dse resume` took the lock and removed
    every '.NAME.PID.tmp' file and folder of a dead pid in the link's target."""
    victim = tmp_path / "victim"
    sentinel, was = _sentinel(victim)
    _log_as_link(finished, victim)
    (victim / ".notes.999999999.tmp").write_text("keep")
    (victim / ".work.999999998.tmp").mkdir()
    before = sorted(p.name for p in victim.iterdir())
    code, _, err = _cli(capsys, monkeypatch, "resume", finished, "--quiet")
    assert "Traceback" not in err, err
    assert sorted(p.name for p in victim.iterdir()) == before and _unchanged(sentinel, was)


def test_calibrate_and_evaluate_write_over_no_results_folders_own_file(
    finished, capsys, monkeypatch
):
    """`dse calibrate -o RESULTS/study.yaml` replaced the run's copy of its study: every
    command then refused the folder (its checksum no longer matched); `dse evaluate` wrote
    into a run's log folder, which export refuses."""
    from conftest import REPO

    sweep = REPO / "tests" / "data" / "perseus_a100_stage.csv"
    study = (finished / "study.yaml").read_bytes()
    code, out, err = _cli(
        capsys, monkeypatch, "calibrate", sweep, "-a", "A100-80GB", "-o", finished / "study.yaml"
    )
    assert code == 2 and "is one of the run's own files (study.yaml" in err and out == "", err
    assert (finished / "study.yaml").read_bytes() == study
    assert _cli(capsys, monkeypatch, "status", finished)[0] == 0
    candidates = finished.parent / "candidates.csv"
    candidates.write_text("x,y,shape\n0.1,0,a\n")
    log = sorted(p.name for p in (finished / "evaluations").iterdir())
    evaluate = ("evaluate", finished / "study.yaml", "-c", candidates)
    code, out, err = _cli(capsys, monkeypatch, *evaluate, "-o", finished / "evaluations" / "e.csv")
    assert code == 2 and "is one of the run's own files (evaluations" in err, err
    assert sorted(p.name for p in (finished / "evaluations").iterdir()) == log


def test_an_append_refuses_a_file_with_other_names(tmp_path):
    """A hard link planted where dse appends in place (NSGA-II's asked file, optuna's journal)
    would change the file under its other name too, wherever that is: refused, unchanged."""
    from dse.files import append_durably, refuse_shared_file

    sentinel, was = _sentinel(tmp_path / "outside")
    target = tmp_path / "run" / "nsga2-asked.f64"
    target.parent.mkdir()
    os.link(sentinel, target)
    with pytest.raises(OSError, match="other name.*hard link"):
        append_durably(target, b"12345678")
    with pytest.raises(OSError, match="hard link"):
        refuse_shared_file(target)
    assert _unchanged(sentinel, was)
    target.unlink()  # one name again: appended as before
    append_durably(target, b"12345678")
    refuse_shared_file(target)
    assert target.read_bytes() == b"12345678"


def test_a_folder_at_the_lock_is_refused_saying_what_to_do(tmp_path, capsys, monkeypatch):
    study = write_study(
        tmp_path,
        toy_study(output=str(tmp_path / "out"), search={"algorithm": "random", "budget": 40}),
    )
    code, _, err = _cli(capsys, monkeypatch, "run", study, "--quiet")
    assert code == 0, err
    (tmp_path / "out" / "lock").mkdir()
    code, _, err = _cli(capsys, monkeypatch, "resume", tmp_path / "out", "--quiet")
    assert code == 2 and "Traceback" not in err, err
    assert "is a folder where dse keeps the run's lock file; remove that folder" in err
    assert (tmp_path / "out" / "lock").is_dir()  # not removed for the user


def test_an_error_naming_a_file_with_a_line_end_stays_one_line(tmp_path, capsys, monkeypatch):
    """A user error names its file as it is: a study in a folder whose name holds a line end
    split the message in two (every control character but a tab is now its escape)."""
    folder = tmp_path / "odd\nname"
    folder.mkdir()
    study = write_study(folder, {**toy_study(output=str(tmp_path / "out")), "serach": {}})
    code, _, err = _cli(capsys, monkeypatch, "validate", study)
    assert code == 2 and err.count("\n") == 1 and "odd\\nname" in err, err
