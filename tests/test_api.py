"""The library API: load, run, resume and open results without the command line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import dse
from conftest import toy_study, write_study
from dse.errors import StudyError


def test_run_resume_and_open_results_in_process(tmp_path):
    out = tmp_path / "out"
    path = write_study(tmp_path, toy_study(output=str(out)))
    study = dse.load_study(path)
    result = dse.run(study)
    assert result.output_dir == out and len(result.evaluations) == 66 and len(result.front) == 11
    assert not (out / "pareto.png").exists()  # the run loop writes datasets; drawing is a command's
    results = dse.open_results(out)
    front = results.front
    assert front.sizes["candidate"] == 11 and set(front["y"].values) == {0}
    np.testing.assert_allclose(np.sort(front["f2"].values), np.sort(1 - np.sqrt(front["x"].values)))
    assert results.study.name == "toy" and results.state().finished is True
    again = dse.resume(out)  # a finished run resumes to the same front, evaluating nothing
    assert len(again.evaluations) == 66 and sorted(again.front["key"]) == sorted(
        result.front["key"]
    )


def test_prepare_runs_in_a_thread_of_its_own_while_the_run_goes_on(tmp_path):
    """``prepare`` (``dse run`` imports its plotting there) is called once the executor has
    started, in a background thread, and the run ends as it does without it."""
    import threading

    called = []
    path = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    result = dse.run(
        path, workers=0, prepare=lambda: called.append(threading.current_thread().name)
    )
    assert len(result.evaluations) == 66 and len(result.front) == 11
    for thread in threading.enumerate():
        if thread.name == "dse-import-ahead":
            thread.join(30)
    assert called == ["dse-import-ahead"]


def test_summarize_is_made_on_the_workers_of_a_run_started_and_finished_here(tmp_path):
    """``summarize`` (``dse run`` reads the log for its figure there) is called once, after a
    finished run on a local cluster, with the folder and a map over the workers (not this
    process), and its answer comes back in the result; a resumed run (its log may hold a
    candidate twice) and an in-process run are not summarised (the caller reads the log)."""
    import os

    from dse.api import plan_resume
    from dse.runner import Runner

    calls = []

    def summarize(folder, map_each):
        calls.append(folder)
        return map_each(lambda item: (item, os.getpid()), [0, 1, 2])

    out = tmp_path / "out"
    study = toy_study(output=str(out))
    study["execution"] = {"workers": 1, "chunk_size": 10}
    result = dse.run(write_study(tmp_path, study), summarize=summarize)
    assert calls == [out] and len(result.front) == 11
    assert [item for item, _ in result.summary] == [0, 1, 2]
    assert os.getpid() not in {pid for _, pid in result.summary}  # the worker's
    resumed = Runner(plan_resume(out), out, summarize=summarize).resume()
    assert resumed.summary is None and calls == [out]  # (finished: no worker is started)
    inline = toy_study(output=str(tmp_path / "inline"))
    assert (
        dse.run(write_study(tmp_path, inline, "inline.yaml"), summarize=summarize).summary is None
    )
    assert calls == [out]


def test_the_first_tasks_are_sized_from_the_cost_the_preview_measured(tmp_path, monkeypatch):
    """The toy evaluator allows a preview (the whole space of 66 candidates, evaluated in this
    process as the run is checked): the run's first task is sized from its cost, the whole
    batch in one task for the one in-process worker, not a probing task of 8 (and 7 more
    tasks growing from it)."""
    from dse.execution.base import ChunkSizer

    sizes = []
    real_next = ChunkSizer.next

    def next_size(self, remaining):
        sizes.append(real_next(self, remaining))
        return sizes[-1]

    monkeypatch.setattr(ChunkSizer, "next", next_size)
    study = toy_study(output=str(tmp_path / "out"), search={"batch_size": 100})
    del study["execution"]["chunk_size"]  # the sizer's choice
    plan = dse.check_run(write_study(tmp_path, study), workers=0)
    assert plan.preview.evaluated == 66 and plan.preview.seconds > 0
    result = dse.run(plan)
    assert len(result.evaluations) == 66 and len(result.front) == 11
    assert sizes[0] == 66


def test_load_study_checks_everything_run_checks(tmp_path):
    path = write_study(
        tmp_path, toy_study(search={"algorithm": "nsga2", "options": {"pop_sise": 10}})
    )
    with pytest.raises(StudyError, match="search.options.pop_sise"):
        dse.load_study(path)


def test_importing_dse_is_cheap_and_exports_the_plugin_contracts():
    code = (
        "import sys, dse; print(sorted(m for m in ('pandas', 'xarray', 'dask', 'pymoo', 'optuna') "
        "if m in sys.modules))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
        == "[]"
    )
    from dse.evaluators.base import Evaluator
    from dse.search.base import Problem, SearchDriver

    assert (
        dse.Evaluator is Evaluator and dse.SearchDriver is SearchDriver and dse.Problem is Problem
    )


def test_a_study_changed_in_python_is_stored_as_it_runs(tmp_path):
    """``model_copy(update=...)`` of a loaded study: the results folder's study.yaml (which
    resume, show and status read) holds the study that ran, not the file it came from."""
    from dse.study import Objective

    study = dse.load_study(write_study(tmp_path, toy_study()))
    changed = study.model_copy(
        update={"objectives": [Objective(metric="f2"), Objective(metric="f1")]}
    )
    dse.run(changed, tmp_path / "changed")
    stored = dse.open_results(tmp_path / "changed").study
    assert [o.metric for o in stored.objectives] == ["f2", "f1"]
    dse.run(study, tmp_path / "same")  # unchanged: the file's own text, comments and all
    assert (tmp_path / "same" / "study.yaml").read_text() == study.source_text
    numpy = study.model_copy(update={"space": {**study.space, "y": [np.int64(0), np.int64(4)]}})
    dse.run(
        numpy, tmp_path / "numpy"
    )  # numbers a program computed with numpy are stored as numbers
    assert dse.open_results(tmp_path / "numpy").study.space["y"] == [0, 4]


def test_the_library_takes_a_mapping_and_refuses_what_it_cannot_use_in_one_error(tmp_path):
    study = dse.load_study(toy_study())  # a mapping, as YAML would give
    assert study.name == "toy"
    for bad in (-1, 0.5, "two", True):
        with pytest.raises(
            dse.StudyError, match="workers: expected a whole number of local worker processes"
        ):
            dse.run(study, tmp_path / "w", workers=bad)
    assert not (tmp_path / "w").exists()
    with pytest.raises(
        dse.StudyError,
        match="expected a study: a file path, a mapping of its sections or a dse Study, not int",
    ):
        dse.run(5)
    assert issubclass(dse.StudyError, dse.DseError) and issubclass(dse.StoreError, dse.DseError)


def test_resume_goes_on_on_the_profile_a_run_was_given(tmp_path):
    """``--profile`` (here through the library, as the command line passes it) replaces the
    study's own workers and scheduler; resume reads the profile the run recorded (before:
    the study's own execution, so a SLURM run resumed on a local cluster of the login node)."""
    from dse.api import plan, stored_study

    profile = tmp_path / "one.yaml"
    profile.write_text("workers: 1\nthreads_per_worker: 1\n")
    study = dse.load_study(
        write_study(tmp_path, toy_study(execution={"workers": 0}))
    )  # its file: no profile
    dse.run(
        study.with_execution(profile=str(profile), scheduler=None, workers=None), tmp_path / "out"
    )
    again = stored_study(dse.open_results(tmp_path / "out"))
    assert again.execution.profile == str(profile.resolve()) and again.execution.workers is None
    assert plan(again).execution.kind == "local" and plan(again).execution.workers == 1
