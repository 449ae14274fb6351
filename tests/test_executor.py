"""Executors: in this process and on real dask clusters (a local one, a separately started
scheduler); cluster profiles, cluster classes, extras and scheduler addresses checked before
anything runs; failing rows isolated, time-outs, the dashboard, logging left alone."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from dask.distributed import LocalCluster

from conftest import REPO, run_cli, toy_study, write_study
from dse.errors import StudyError
from dse.execution import ExecutionPlan, make_executor, plan_execution
from dse.execution.base import PIECE_ROWS
from dse.execution.dask_cluster import NANNY_MEMORY_MONITOR_S
from dse.execution.deploy import missing, preview
from dse.study import EvaluatorSpec, ExecutionSpec

TOY = EvaluatorSpec(name="dse.evaluators.toy:ToyEvaluator", options={"fail_above_x": 0.5})
NEEDS = {
    "ssh": "asyncssh",
    "slurm": "dask_jobqueue",
    "pbs": "dask_jobqueue",
    "kubernetes": "dask_kubernetes",
}


@pytest.mark.parametrize(
    "name", ["local", "scheduler", "scheduler-file", "ssh", "slurm", "pbs", "kubernetes"]
)
def test_every_shipped_profile_plans(name):
    if name in NEEDS and missing(NEEDS[name]):
        pytest.skip(f'{NEEDS[name]} is not installed (pip install "dse[{name}]")')
    plan = plan_execution(
        ExecutionSpec(profile=name), study_path=REPO / "studies" / "quickstart.yaml"
    )
    assert plan.profile.endswith(f"workers/{name}.yaml")
    kinds = {"local": "local", "scheduler": "scheduler", "scheduler-file": "scheduler"}
    assert plan.kind == kinds.get(name, "cluster")
    if name == "local":
        assert plan.workers == 2
    if name in ("slurm", "pbs"):
        assert (
            plan.start_timeout_s == 3600 and plan.grace_s == 600
        )  # the profile's, not the defaults


def test_unknown_profile_and_bad_keys_are_clear_errors(tmp_path):
    study_file = tmp_path / "study.yaml"
    with pytest.raises(StudyError, match="cluster profile 'nope' not found"):
        plan_execution(ExecutionSpec(profile="nope"), study_path=study_file)
    (tmp_path / "odd.yaml").write_text("workerz: 3\n")
    with pytest.raises(
        StudyError,
        match=r"odd.yaml: workerz: unknown key 'workerz' in cluster profile \(did you mean 'workers'\?\); "
        "allowed: description, cluster, options, scale, adapt, scheduler",
    ):
        plan_execution(ExecutionSpec(profile="odd"), study_path=study_file)


@pytest.mark.parametrize(
    "text,expected",
    [
        (
            "scheduler: tcp://a:1\ncluster: dask.distributed.LocalCluster\n",
            "names one of 'cluster', 'scheduler'",
        ),
        ("scheduler: tcp://a:1\nworkers: 3\n", "they do not go with 'scheduler'"),
        ("scale: 3\n", "'scale' belongs to a 'cluster' class"),
        (
            "cluster: dask.distributed.LocalCluster\nscale: 2\nadapt: {maximum: 4}\n",
            "'scale' (a fixed size) or 'adapt'",
        ),
        (
            "cluster: dask.distributed.LocalCluster\nscale: {jobs: 2}\n",
            "scale.jobs: 'jobs' counts batch jobs",
        ),
        (
            "cluster: dask.distributed.LocalCluster\nscale: {workers: 1, jobs: 2}\n",
            "exactly one of 'workers' or 'jobs'",
        ),
        (
            "cluster: no_such_package.Cluster\n",
            "cannot import the cluster class no_such_package.Cluster: no module named 'no_such_package'",
        ),
        ("cluster: LocalCluster\n", "cluster: not an import path of a dask cluster class"),
        ("cluster: dask.distributed.NoSuchCluster\n", "cannot import the cluster class"),
        ("scheduler: garbage\n", "scheduler: not a dask scheduler address"),
        ("adapt: {maximum: 0}\ncluster: dask.distributed.LocalCluster\n", "adapt.maximum"),
        (
            "adapt: {minimum: 2, maximum: 1}\ncluster: dask.distributed.LocalCluster\n",
            "adapt.minimum (2) is above",
        ),
        (
            "adapt: {minimum: 1, maximum_jobs: 3}\ncluster: dask.distributed.LocalCluster\n",
            "workers (minimum) or batch",
        ),
        (
            "adapt: {target_duration: whenever}\ncluster: dask.distributed.LocalCluster\n",
            "adapt.target_duration: expected a duration",
        ),
        ("workers: 1\nmemory_limit: lots\n", "memory_limit: expected 'auto', 0 (no limit)"),
        ("workers: 1\nmemory_limit: -5\n", "memory_limit: expected 'auto'"),
        ("workers: 1\nmemory_limit: true\n", "memory_limit: expected 'auto'"),
        ("workers: 1\nmemory_limit: .inf\n", "memory_limit: expected 'auto'"),
        (
            "cluster: dask.distributed_typo.LocalCluster\n",
            "no module named 'dask.distributed_typo'",
        ),
        # profiles that validated but could never get a worker, or ran one that thrashed
        (
            "cluster: dask.distributed.LocalCluster\nscale: 0\n",
            "scale.workers: expected a value greater than or equal to 1",
        ),
        (
            "cluster: dask_jobqueue.SLURMCluster\noptions: {cores: 1, memory: 1GB}\nscale: {jobs: 0}\n",
            "scale.jobs: expected a value greater than or equal to 1",
        ),
        (
            "cluster: dask_jobqueue.SLURMCluster\noptions: {cores: 1, memory: 1GB}\n",
            "dask_jobqueue.SLURMCluster submits no job until told how many: give 'scale'",
        ),
        ("scheduler_file: ''\n", "scheduler_file: "),
        # a folder where the scheduler file goes: validate passed it, a run waited for it in vain
        ("scheduler_file: .\n", "the scheduler file is not a regular file"),
        (
            "workers: 1\nmemory_limit: 2.5\n",
            "memory_limit: expected a fraction of the memory (at most 1) or at least 1 MiB",
        ),
        ("workers: true\n", "workers: expected a number, not true or false"),
        # cluster deployers (dse.deployers): a name that is none, one that starts a class the profile does not name
        (
            "deployer: dsk\ncluster: dask.distributed.LocalCluster\n",
            "deployer: unknown cluster deployer 'dsk' (did you "
            "mean 'dask'?); allowed: dask, jobqueue",
        ),
        (
            "deployer: jobqueue\nscale: {jobs: 1}\n",
            "cluster: deployer 'jobqueue' starts a class the profile names, and it names none",
        ),
        ("deployer: ssh\nscheduler: tcp://a:1\n", "names one of 'cluster', 'scheduler'"),
    ],
)
def test_bad_profiles_are_one_line_errors_naming_the_profile(tmp_path, text, expected):
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(StudyError) as info:
        plan_execution(ExecutionSpec(profile="p"), study_path=tmp_path / "study.yaml")
    message = str(info.value)
    assert message.startswith(str(tmp_path / "p.yaml")) and expected in message, message
    assert "\n" not in message


def test_the_studys_own_worker_count_wins_over_a_local_profile_and_is_refused_beside_a_remote_one(
    tmp_path,
):
    """A study that names a profile and sets ``execution.workers`` gets its own count on a
    local profile (as its grace periods); beside a profile that starts no local cluster the
    count would be ignored, so validate and run refuse it; --workers still wins over both."""
    quickstart = REPO / "studies" / "quickstart.yaml"
    assert (
        plan_execution(ExecutionSpec(profile="local"), study_path=quickstart).workers == 2
    )  # the profile's
    assert (
        plan_execution(ExecutionSpec(profile="local", workers=1), study_path=quickstart).workers
        == 1
    )
    with pytest.raises(StudyError) as info:
        plan_execution(ExecutionSpec(profile="scheduler", workers=1), study_path=quickstart)
    message = str(info.value)
    assert (
        message.startswith(
            "execution.workers: a count of local worker processes, but profile 'scheduler'"
        )
        and "names tcp://127.0.0.1:8786" in message
    ), message
    assert (
        plan_execution(
            ExecutionSpec(profile="scheduler", workers=1), study_path=quickstart, workers=0
        ).kind
        == "in-process"
    )
    with pytest.raises(
        StudyError,
        match=r"^execution.workers: a count of local worker processes, but "
        r"execution.scheduler \(tcp://h:1\) names a running cluster",
    ):
        plan_execution(ExecutionSpec(scheduler="tcp://h:1", workers=2))
    assert (
        plan_execution(
            ExecutionSpec(scheduler="tcp://h:1", workers=2), scheduler="tcp://h:2"
        ).scheduler
        == "tcp://h:2"
    )
    # what the refusal offers: --workers runs on this machine, whatever the study's scheduler
    assert (
        plan_execution(ExecutionSpec(scheduler="tcp://h:1", workers=2), workers=0).kind
        == "in-process"
    )
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "there.yaml").write_text("scheduler: tcp://192.0.2.1:8786\n")
    study = write_study(tmp_path, toy_study(execution={"profile": "there", "workers": 0}))
    proc = run_cli("validate", str(study), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        proc.stderr.count("\n") == 1
        and "execution.workers" in proc.stderr
        and "--workers N" in proc.stderr
    )


@pytest.mark.skipif(
    missing("dask_jobqueue"), reason='dask-jobqueue is not installed (pip install "dse[slurm]")'
)
def test_an_unknown_option_of_a_jobqueue_class_is_refused_at_validate(tmp_path):
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "q.yaml").write_text(
        "cluster: dask_jobqueue.SLURMCluster\noptions: {cores: 2, memory: 4GB, corez: 3}\nscale: {jobs: 1}\n"
    )
    study = write_study(tmp_path, toy_study(execution={"profile": "q", "workers": None}))
    proc = run_cli("validate", str(study), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        "q.yaml: options.corez: unknown option 'corez' of dask_jobqueue.SLURMCluster; allowed:"
        in proc.stderr
    )
    assert "walltime" in proc.stderr  # the job class's options are allowed too


@pytest.mark.skipif(
    missing("dask_jobqueue"), reason='dask-jobqueue is not installed (pip install "dse[slurm]")'
)
@pytest.mark.parametrize(
    "options,expected",
    [
        (
            "{cores: eight, memory: 32GB}",
            "options.cores: expected a whole number of at least 1 (got 'eight')",
        ),
        (
            "{cores: 8, memory: lots}",
            "options.memory: expected a size with its unit, such as '32GB' (got 'lots')",
        ),
        (
            "{cores: 8, memory: [32GB]}",
            "options.memory: expected a size with its unit, such as '32GB' (got ['32GB'])",
        ),
        # what dask-jobqueue would pass on to a broken job: 32000 bytes is '--mem=32K', a string
        # prologue is one character per line, '2 hours' is refused by sbatch only at run time
        (
            "{cores: 8, memory: 32000}",
            "options.memory: expected a size with its unit, such as '32GB' (got 32000)",
        ),
        (
            "{cores: 8, memory: 8GB, walltime: 2 hours}",
            "options.walltime: expected a walltime such as '02:00:00'",
        ),
        (
            "{cores: 8, memory: 8GB, walltime: '25:99:00'}",
            "options.walltime: expected a walltime such as '02:00:00'",
        ),
        (
            "{cores: 8, memory: 8GB, walltime: 7200}",
            "options.walltime: expected a walltime such as '02:00:00'",
        ),
        (
            "{cores: 8, memory: 8GB, job_script_prologue: source x}",
            "options.job_script_prologue: expected a list of shell lines",
        ),
        (
            "{cores: 8, memory: 8GB, env_extra: [source x]}",
            "options.env_extra: option 'env_extra' of dask_jobqueue.SLURMCluster was renamed; allowed: job_script_prologue",
        ),
        (
            "{cores: 2, processes: 4, memory: 8GB}",
            "options.processes: 4 worker processes per job on 2 cores leave a "
            "worker without a thread (got 4); allowed: 1 to 2 (cores)",
        ),
        # a text where dask-jobqueue takes a list: one '#SBATCH' line per character
        (
            "{cores: 8, memory: 8GB, job_extra_directives: --exclusive}",
            "options.job_extra_directives: expected a list of directives, such as ['--exclusive']",
        ),
        (
            "{cores: 8, memory: 8GB, worker_extra_args: --lifetime 55m}",
            "options.worker_extra_args: expected a list",
        ),
        ("{cores: 8, memory: 8GB, python: 3}", "options.python: expected text (got 3)"),
    ],
)
def test_job_options_of_the_wrong_kind_are_refused_at_validate(tmp_path, options, expected):
    (tmp_path / "q.yaml").write_text(
        f"cluster: dask_jobqueue.SLURMCluster\noptions: {options}\nscale: {{jobs: 1}}\n"
    )
    with pytest.raises(StudyError) as info:
        plan_execution(ExecutionSpec(profile="q"), study_path=tmp_path / "study.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'q.yaml'}: {expected}"), str(info.value)


def test_a_cluster_class_that_needs_an_argument_the_options_do_not_give_is_refused(tmp_path):
    """A callable the options cannot start (``textwrap.dedent`` needs ``text``): validate
    said ok and the run ended in "cannot start ...: TypeError" after making its folder."""
    (tmp_path / "q.yaml").write_text("cluster: textwrap.dedent\noptions: {}\n")
    with pytest.raises(StudyError) as info:
        plan_execution(ExecutionSpec(profile="q"), study_path=tmp_path / "study.yaml")
    assert str(info.value).startswith(
        f"{tmp_path / 'q.yaml'}: options: textwrap.dedent cannot start without 'text'"
    ), str(info.value)
    (tmp_path / "q.yaml").write_text("cluster: textwrap.dedent\noptions: {text: x}\n")
    plan_execution(ExecutionSpec(profile="q"), study_path=tmp_path / "study.yaml")  # given: ok


def test_a_misspelt_option_of_ssh_cluster_is_refused(tmp_path):
    """``SSHCluster`` passes its ``**kwargs`` to ``SpecCluster``, whose signature tells (before:
    validate said ok and the run ended in a TypeError)."""
    (tmp_path / "q.yaml").write_text(
        "cluster: dask.distributed.SSHCluster\n"
        "options: {hosts: [a, b], remote_pyhton: /usr/bin/python3}\n"
    )
    with pytest.raises(StudyError) as info:
        plan_execution(ExecutionSpec(profile="q"), study_path=tmp_path / "study.yaml")
    message = str(info.value)
    assert (
        "options.remote_pyhton: unknown option 'remote_pyhton' of dask.distributed.SSHCluster"
        in message
    )
    assert (
        "remote_python" in message and "shutdown_on_close" in message
    )  # its own and SpecCluster's


def test_ssh_hosts_given_as_one_string_are_refused(tmp_path):
    (tmp_path / "q.yaml").write_text(
        "cluster: dask.distributed.SSHCluster\noptions: {hosts: localhost}\n"
    )
    with pytest.raises(StudyError) as info:
        plan_execution(ExecutionSpec(profile="q"), study_path=tmp_path / "study.yaml")
    assert "options.hosts: expected a list of hosts" in str(info.value), str(info.value)


def test_dse_cluster_refuses_a_broken_study_file_as_validate_does(tmp_path):
    """`dse cluster local --study FILE` said ok of a FILE that is not valid YAML."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nspace: [unclosed\n")
    messages = []
    for args in (("cluster", "local", "--study", str(broken)), ("validate", str(broken))):
        proc = run_cli(*args)
        assert (
            proc.returncode == 2 and "Traceback" not in proc.stderr and "ok" not in proc.stdout
        ), proc.stdout
        messages.append(proc.stderr.strip())
    assert messages[0] == messages[1] and messages[0].startswith(
        f"error: {broken}: not valid YAML"
    ), messages


@pytest.mark.skipif(
    missing("dask_jobqueue"), reason='dask-jobqueue is not installed (pip install "dse[slurm]")'
)
def test_a_job_the_class_cannot_write_is_one_line_from_dse_cluster(tmp_path):
    (tmp_path / "q.yaml").write_text(
        "cluster: dask_jobqueue.SLURMCluster\noptions: {cores: 8}\nscale: {jobs: 1}\n"
    )  # no memory
    proc = run_cli("cluster", str(tmp_path / "q.yaml"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        "You must specify how much cores and memory per job" in proc.stderr
        and proc.stderr.count("\n") == 1
    )
    assert "ok" not in proc.stdout  # said before anything is called ok
    # dse validate refuses it as dse run would
    study = write_study(
        tmp_path, {**toy_study(output=str(tmp_path / "out")), "execution": {"profile": "q.yaml"}}
    )
    proc = run_cli("validate", str(study), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "You must specify how much cores and memory per job" in proc.stderr, proc.stderr


@pytest.mark.skipif(
    missing("dask_jobqueue"), reason='dask-jobqueue is not installed (pip install "dse[slurm]")'
)
def test_importing_a_cluster_class_leaves_ctrl_c_to_dse():
    """dask-jobqueue sets SIGINT -> sys.exit() when imported: a run would end with code 0 and
    no datasets on Ctrl-C. In a fresh process, as a run imports it."""
    code = (
        "import signal; from dse.execution.deploy import import_cluster; "
        "before = signal.getsignal(signal.SIGINT); import_cluster('dask_jobqueue.SLURMCluster'); "
        "assert signal.getsignal(signal.SIGINT) is before, signal.getsignal(signal.SIGINT)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "profile,module,extra",
    [
        ("slurm", "dask_jobqueue", "slurm"),
        ("pbs", "dask_jobqueue", "pbs"),
        ("kubernetes", "dask_kubernetes", "kubernetes"),
        ("ssh", "asyncssh", "ssh"),
    ],
)
def test_a_missing_extra_is_named_at_validate_and_run(
    tmp_path, monkeypatch, profile, module, extra
):
    """The extra's package made unimportable in this process (``sys.modules[name] = None``
    for it and its modules an earlier test imported; undone after the test)."""
    execution = {"profile": str(REPO / "workers" / f"{profile}.yaml"), "workers": None}
    study = write_study(tmp_path, toy_study(execution=execution, output=str(tmp_path / "out")))
    for name in [module, *(n for n in sys.modules if n.startswith(f"{module}."))]:
        monkeypatch.setitem(sys.modules, name, None)
    for command in ("validate", "run"):
        proc = run_cli(command, str(study))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f'which is not installed: pip install "dse[{extra}]"' in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(
    missing("dask_jobqueue"), reason='dask-jobqueue is not installed (pip install "dse[slurm]")'
)
@pytest.mark.parametrize(
    "name,lines",
    [
        (
            "slurm",
            [
                "#SBATCH -p normal",
                "#SBATCH -A my-account",
                "#SBATCH --cpus-per-task=8",
                "#SBATCH -t 02:00:00",
                "source /opt/dse/.venv/bin/activate",
                "--nthreads 1",
                "--nworkers 8",
            ],
        ),
        (
            "pbs",
            [
                "#PBS -q workq",
                "#PBS -A my-account",
                "#PBS -l select=1:ncpus=8:mem=30GB",
                "#PBS -l walltime=02:00:00",
                "--nworkers 8",
            ],
        ),
    ],
)
def test_the_batch_job_script_a_profile_submits(name, lines):
    """SLURM and PBS cannot run here: the job script dask-jobqueue would submit is checked."""
    proc = run_cli("cluster", name)
    assert proc.returncode == 0, proc.stderr
    assert "job script" in proc.stdout
    script = proc.stdout[proc.stdout.index("#!/usr/bin/env bash") :]
    for line in lines:
        assert line in script, (line, script)
    assert "python -m distributed.cli.dask_worker tcp://" in script  # a real scheduler address


def test_a_misspelt_profile_name_is_refused_with_the_profiles_there(tmp_path):
    """`dse cluster slrum` in the repository: the profile meant, and the names under
    workers/; a name with none there nor close says no more than where it looked."""
    proc = run_cli("cluster", "slrum")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cluster profile 'slrum' not found (did you mean 'slurm'?)" in proc.stderr
    names = sorted(p.stem for p in (REPO / "workers").glob("*.yaml"))
    assert f"there: {', '.join(names)})" in proc.stderr and "slurm" in names
    proc = run_cli("cluster", "slrum", cwd=tmp_path)
    assert proc.returncode == 2 and "did you mean" not in proc.stderr
    assert "there:" not in proc.stderr and "workers/slrum.yaml" in proc.stderr


@pytest.mark.skipif(
    missing("dask_kubernetes"),
    reason='dask-kubernetes is not installed (pip install "dse[kubernetes]")',
)
def test_the_kubernetes_resource_a_profile_creates():
    import yaml

    plan = plan_execution(
        ExecutionSpec(profile="kubernetes"), study_path=REPO / "studies" / "quickstart.yaml"
    )
    what, text = preview(plan)
    spec = yaml.safe_load(text)
    assert (
        what == "DaskCluster resource"
        and spec["kind"] == "DaskCluster"
        and spec["metadata"]["name"].startswith("dse-")
    )
    worker = spec["spec"]["worker"]
    assert worker["replicas"] == 4
    container = worker["spec"]["containers"][0]
    assert container["image"] == "registry.example.org/dse:0.1.0"
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "4Gi"}
    assert {"name": "OMP_NUM_THREADS", "value": "1"} in container["env"]
    assert (
        spec["spec"]["scheduler"]["spec"]["containers"][0]["image"]
        == "registry.example.org/dse:0.1.0"
    )


@pytest.mark.parametrize("workers", [0, 1], ids=["in-process", "dask"])
def test_a_failing_row_fails_alone_and_keeps_its_message(workers):
    """The toy raises for a call holding x > 0.5: the chunk is split until those rows are alone."""
    cands = pd.DataFrame({"x": [0.1, 0.2, 0.9, 0.3, 0.6, 0.05, 0.7, 0.4], "y": 0, "shape": "a"})
    plan = ExecutionPlan(workers=workers, chunk_size=4, dashboard=False)
    with make_executor(plan, TOY) as ex:
        out = ex.evaluate(cands)
    assert list(out["status"]) == ["ok", "ok", "failed", "ok", "failed", "ok", "failed", "ok"]
    assert out.loc[[0, 1, 3, 5, 7], "f1"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.05, 0.4])
    assert out.loc[2, "error"] == "RuntimeError: toy failure: x above 0.5"


@pytest.mark.parametrize("workers", [0, 1], ids=["in-process", "dask"])
def test_a_batch_submitted_while_another_is_drained_starts_on_the_slots_it_frees(workers):
    """Asking ahead: two batches submitted, drained in order, each row of each once from its
    own drain; on dask the second batch's chunks start while the first is drained (its last
    chunks running), not after it."""
    slow = EvaluatorSpec(name="dse.evaluators.toy:ToyEvaluator", options={"delay_s": 0.1})
    first = pd.DataFrame({"x": [0.05 * i for i in range(1, 13)], "y": 0, "shape": "a"})
    second = pd.DataFrame({"x": [0.03 * i for i in range(1, 9)], "y": 1, "shape": "b"})
    plan = ExecutionPlan(workers=workers, chunk_size=2, dashboard=False)
    with make_executor(plan, slow) as ex:
        a, b = ex.submit(first), ex.submit(second)
        got_a = sorted(ex.drain(a), key=lambda part: part[0])
        if workers:  # a chunk of the second was started before the first's last came back
            assert b.offset > 0
        got_b = sorted(ex.drain(b), key=lambda part: part[0])
    for got, batch in ((got_a, first), (got_b, second)):
        assert [lo for lo, _ in got] == list(range(0, len(batch), 2))
        f1 = pd.concat([r for _, r in got], ignore_index=True)["f1"]
        assert f1.tolist() == pytest.approx(batch["x"].tolist())


@pytest.mark.parametrize("workers", [0, 1], ids=["in-process", "dask"])
def test_a_task_of_more_than_a_piece_comes_back_piece_by_piece(workers):
    """A task larger than PIECE_ROWS is evaluated and finished a piece at a time where it
    runs; the executor yields each piece at its own offset."""
    n = PIECE_ROWS + 100
    cands = pd.DataFrame({"x": np.linspace(0.0, 0.5, n), "y": 0, "shape": "a"})
    plan = ExecutionPlan(workers=workers, chunk_size=n, dashboard=False)
    with make_executor(plan, TOY) as ex:  # finish: the piece's inputs beside its metrics
        got = sorted(ex.results(cands, finish=pd.DataFrame.join), key=lambda part: part[0])
    assert [lo for lo, _ in got] == [0, PIECE_ROWS]
    assert [len(piece) for _, piece in got] == [PIECE_ROWS, 100]
    assert got[1][1]["x"].tolist() == cands["x"].iloc[PIECE_ROWS:].tolist()
    assert got[0][1]["status"].eq("ok").all()


def test_a_plugin_evaluator_past_its_time_out_fails_that_row_only():
    """The toy hangs for a call holding x > 0.8; evaluator.timeout_s runs it in a child
    process that is killed when a call's time is up."""
    spec = EvaluatorSpec(
        name="dse.evaluators.toy:ToyEvaluator", options={"hang_above_x": 0.8}, timeout_s=0.5
    )
    cands = pd.DataFrame({"x": [0.1, 0.9, 0.3, 0.4], "y": 0, "shape": "a"})
    start = time.monotonic()
    with make_executor(ExecutionPlan(workers=0, chunk_size=4), spec) as ex:
        out = ex.evaluate(cands)
    assert list(out["status"]) == ["ok", "failed", "ok", "ok"]
    assert out.loc[1, "error"] == (
        "TimeoutError: evaluating 1 candidate took longer than 0.5 s (evaluator.timeout_s); stopped"
    )
    assert time.monotonic() - start < 20  # 4 x 0.5 + 2 x 0.5 + 0.5 s of time-outs, and child starts


FORK_PROBE = """
import json, sys
import dask
import pandas as pd
from dse.execution import ExecutionPlan, make_executor
from dse.study import EvaluatorSpec

def started_by_spawn():
    return any("spawn_main" in arg for arg in sys.orig_argv)

def big():
    return b"x" * (20 << 20)  # over dask's 10 MiB offload limit: sent by a thread of the worker's

if __name__ == "__main__":
    seen = []
    plan = ExecutionPlan(workers=1, dashboard=False, start_method=sys.argv[1])
    with make_executor(plan, EvaluatorSpec(name="dse.evaluators.toy:ToyEvaluator")) as ex:
        # a restarted worker is spawned whatever started the first (the restart is done once,
        # where the first was forked)
        for restart in (False, True) if sys.argv[1] == "auto" else (False,):
            if restart:
                ex.client.restart()
            spawned, = ex.client.run(started_by_spawn).values()
            size = len(ex.client.submit(big, pure=False).result(timeout=60))
            seen.append({"spawned": spawned, "size": size,
                         "setting": dask.config.get("distributed.worker.multiprocessing-method")})
        out = ex.evaluate(pd.DataFrame({"x": [0.1, 0.2], "y": 0, "shape": "a"}))
    print(json.dumps({"seen": seen, "f1": out["f1"].tolist()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="auto forks workers on Linux only")
@pytest.mark.parametrize("method, spawned", [("auto", False), ("spawn", True)])
def test_a_fork_safe_evaluator_gets_forked_workers_unless_the_study_says_spawn(
    tmp_path, method, spawned
):
    """In a fresh process (as `dse run` is), a local cluster's first worker is a copy of it
    for a fork-safe evaluator, unless the study says spawn (a spawned worker is a fresh
    interpreter started by multiprocessing's spawn_main); a worker the nanny restarts mid-run
    is spawned (tested after a forked first), since a copy of the process would hold dead
    copies of dask's threads; each returns a result large enough to go through dask's offload thread, and dask's setting is
    its default again once the cluster has started."""
    import json

    probe = tmp_path / "probe.py"
    probe.write_text(FORK_PROBE)
    proc = subprocess.run(
        [sys.executable, str(probe), method],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    restarted = [True] if method == "auto" else []
    assert [s["spawned"] for s in got["seen"]] == [spawned, *restarted]
    assert [s["size"] for s in got["seen"]] == [20 << 20] * (1 + len(restarted))
    assert {s["setting"] for s in got["seen"]} == {"spawn"}
    assert got["f1"] == pytest.approx([0.1, 0.2])


def test_workers_are_forked_only_for_an_evaluator_that_declares_it_and_the_user_setting_wins():
    import dask

    from dse.execution.dask_cluster import start_method

    linux = sys.platform.startswith("linux")
    # dask's own default (conftest sets this process's to forkserver)
    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}):
        assert start_method("auto", fork_safe=True, threads=1) == ("fork" if linux else "spawn")
        assert (
            start_method("auto", fork_safe=True, threads=3) == "spawn"
        )  # a process with threads is not copied
        assert start_method("auto", fork_safe=False, threads=1) == "spawn"
        assert start_method("spawn", fork_safe=True) == "spawn"
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        assert start_method("auto", fork_safe=True, threads=1) == "forkserver"
    from dse.analytic.evaluator import AnalyticEvaluator
    from dse.evaluators.base import Evaluator

    assert AnalyticEvaluator.fork_safe and not Evaluator.fork_safe  # a plug-in must declare it


def test_a_local_cluster_leaves_logging_alone_and_starts_no_dashboard_when_told(caplog):
    """Without a dashboard the scheduler's HTTP server (health, metrics) takes a free port:
    no '8787 already in use' warning, no dashboard page."""
    distributed = logging.getLogger("distributed")
    before = (distributed.level, [h.level for h in distributed.handlers])
    plan = ExecutionPlan(workers=1, dashboard=False)
    with caplog.at_level(logging.WARNING), make_executor(plan, TOY) as ex:
        assert ex.dashboard_link is None
        port = ex.client.scheduler_info()["services"]["dashboard"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as page:
            assert page.read() == b"ok"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30)
        ex.evaluate(pd.DataFrame({"x": [0.1], "y": 0, "shape": "a"}))
        # the nannies (in this process) look at their workers' memory less often; the
        # workers' own monitor (pause, spill) keeps dask's interval
        nannies = list(ex.cluster.workers.values())
        assert [n.periodic_callbacks["memory_monitor"].callback_time for n in nannies] == [
            NANNY_MEMORY_MONITOR_S * 1000
        ]
        dask_s = dask.utils.parse_timedelta(
            dask.config.get("distributed.worker.memory.monitor-interval")
        )
        own = ex.client.run(
            lambda dask_worker: dask_worker.periodic_callbacks["memory_monitor"].callback_time
        )
        assert list(own.values()) == [dask_s * 1000] and dask_s < NANNY_MEMORY_MONITOR_S
        # the workers' profiler samples their stacks every 100 ms (dask: 10 ms), still on
        sampling = ex.client.run(
            lambda dask_worker: dask_worker.periodic_callbacks["profile"].callback_time
        )
        assert list(sampling.values()) == [100]
    assert (distributed.level, [h.level for h in distributed.handlers]) == before
    assert not [r for r in caplog.records if "already in use" in r.getMessage()]


@pytest.mark.skipif(
    missing("bokeh"), reason='bokeh is not installed (pip install "dse[dashboard]")'
)
def test_the_dashboard_is_on_with_bokeh_and_its_address_told():
    notes = []
    with make_executor(ExecutionPlan(workers=1), TOY, notify=notes.append) as ex:
        link = ex.dashboard_link
        assert link and notes == [f"dask dashboard: {link}"]
        with urllib.request.urlopen(link, timeout=30) as page:
            assert page.status == 200 and b"Dask" in page.read()


def test_a_short_local_run_starts_without_the_dashboard_unless_asked(tmp_path):
    """Left at its default, the dashboard is off for a local run whose evaluations the
    preview puts under DASHBOARD_MIN_S, and the run says so; asked for (the study, or
    --dashboard), or for a run long enough to watch, or another cluster, it stays."""
    from dse.execution.plan import DASHBOARD_MIN_S, dashboard_for, plan_execution

    study = toy_study(output=str(tmp_path / "out"), execution={"workers": 1})
    proc = run_cli("run", str(write_study(tmp_path, study)), "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert "dask dashboard: off, for evaluations that should take under 10 s" in proc.stderr
    assert "dask dashboard: http" not in proc.stderr

    default = plan_execution(ExecutionSpec(workers=2))
    assert default.dashboard and default.dashboard_auto
    off, note = dashboard_for(default, DASHBOARD_MIN_S / 2)
    assert not off.dashboard and "execution.dashboard: true" in note
    for plan, expected_s in (
        (default, DASHBOARD_MIN_S * 2),  # long enough to watch
        (default, None),  # no preview: not known
        (plan_execution(ExecutionSpec(workers=2, dashboard=True)), 1.0),  # the study asks
        (plan_execution(ExecutionSpec(workers=2), dashboard=True), 1.0),  # --dashboard
        (plan_execution(ExecutionSpec(scheduler="tcp://127.0.0.1:8786")), 1.0),  # not local
    ):
        assert dashboard_for(plan, expected_s) == (plan, "")
    assert not plan_execution(ExecutionSpec(workers=2), dashboard=False).dashboard


def test_run_on_a_separately_started_scheduler(tmp_path):
    out = tmp_path / "out"
    study = write_study(tmp_path, toy_study(output=str(out)))
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        proc = run_cli("run", str(study), "--scheduler", cluster.scheduler_address, "--quiet")
    assert proc.returncode == 0, proc.stderr
    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
        assert ds.sizes["candidate"] == 11


@pytest.mark.parametrize("size", ["adapt: {minimum: 1, maximum: 2}", "scale: 2"])
def test_a_profile_starts_a_cluster_class_and_sizes_it(tmp_path, size):
    """Any dask cluster class by import path, with its options, then adapt or scale: here
    dask's LocalCluster, started with no workers until the profile sizes it."""
    (tmp_path / "adaptive.yaml").write_text(
        "cluster: dask.distributed.LocalCluster\n"
        "options: {n_workers: 0, threads_per_worker: 1, processes: true, dashboard_address: '127.0.0.1:0'}\n"
        f"{size}\nstart_timeout_s: 60\n"
    )
    out = tmp_path / "out"
    study = write_study(
        tmp_path,
        toy_study(
            output=str(out), execution={"profile": str(tmp_path / "adaptive.yaml"), "workers": None}
        ),
    )
    proc = run_cli("run", str(study), "--quiet", "--no-dashboard")
    assert proc.returncode == 0, proc.stderr
    assert "dask.distributed.LocalCluster (profile" in proc.stderr
    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
        assert ds.sizes["candidate"] == 11


def _resolver_says_no_such_name(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        return exc.errno == socket.EAI_NONAME
    return False


def test_a_scheduler_host_that_does_not_exist_fails_at_once_not_after_the_grace_period(tmp_path):
    host = "no-such-scheduler.invalid"  # RFC 6761: never resolves
    if not _resolver_says_no_such_name(host):
        pytest.skip("this machine's resolver does not answer 'no such name' for a .invalid host")
    study = write_study(
        tmp_path, toy_study(output=str(tmp_path / "out"), execution={"grace_s": 60})
    )
    start = time.monotonic()
    proc = run_cli("run", str(study), "--scheduler", f"tcp://{host}:8786", "--quiet")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"cannot reach tcp://{host}:8786: no host is named '{host}'" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 30  # not the 60 s grace period


def test_validate_warns_of_a_scheduler_nothing_answers_at_and_refuses_one_that_does_not_exist(
    tmp_path,
):
    with (
        socket.socket() as s
    ):  # bound, never listening: refuses connections, and no one else can take the port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        study = write_study(
            tmp_path, toy_study(output=str(tmp_path / "out"), execution={"workers": None})
        )
        proc = run_cli("validate", str(study), "--scheduler", f"tcp://127.0.0.1:{port}")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: nothing answers at tcp://127.0.0.1:{port} now" in proc.stderr, proc.stderr
    host = "no-such-scheduler.invalid"
    if _resolver_says_no_such_name(host):
        proc = run_cli("validate", str(study), "--scheduler", f"tcp://{host}:8786")
        assert proc.returncode == 2 and f"no host is named '{host}'" in proc.stderr, proc.stderr


def test_an_unreachable_scheduler_fails_after_the_grace_period_in_one_line(tmp_path):
    with (
        socket.socket() as s
    ):  # bound, never listening: refuses connections, and no one else can take the port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        study = write_study(
            tmp_path, toy_study(output=str(tmp_path / "out"), execution={"grace_s": 1})
        )
        start = time.monotonic()
        proc = run_cli("run", str(study), "--scheduler", f"tcp://127.0.0.1:{port}", "--quiet")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"cannot reach tcp://127.0.0.1:{port} within 1 s (execution.grace_s)" in proc.stderr
    assert time.monotonic() - start < 30


@pytest.mark.parametrize(
    "address", ["garbage", "tcp://host", "tcp://host:port", "http//x:1", "host: 8786"]
)
def test_a_malformed_scheduler_address_is_refused(address):
    with pytest.raises(StudyError, match="execution.scheduler: not a dask scheduler address"):
        plan_execution(ExecutionSpec(scheduler=address))


@pytest.mark.parametrize(
    "address", ["tcp://10.0.0.1:8786", "node-3.cluster:8786", "tls://[::1]:8786"]
)
def test_well_formed_scheduler_addresses_pass(address):
    assert plan_execution(ExecutionSpec(scheduler=address)).scheduler == address


def test_validate_and_run_refuse_a_malformed_address_alike_and_run_leaves_no_folder(tmp_path):
    study = write_study(
        tmp_path,
        toy_study(
            output=str(tmp_path / "out"), execution={"scheduler": "garbage", "workers": None}
        ),
    )
    for command in ("validate", "run"):
        proc = run_cli(command, str(study))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "execution.scheduler: not a dask scheduler address (got 'garbage')" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_process_that_builds_an_evaluator_keeps_the_memory_its_chunks_free():
    """Building an evaluator sets glibc's allocator to keep freed blocks (a dask nanny's
    MALLOC_TRIM_THRESHOLD_ made every chunk page-fault its columns afresh), and Arrow's
    buffers come from that heap."""
    code = (
        "import pyarrow as pa; from dse.evaluators import load_evaluator; from dse.study import EvaluatorSpec; "
        "load_evaluator(EvaluatorSpec(name='analytic')); from dse.allocator import keep_freed_memory; "
        "print(keep_freed_memory(), pa.default_memory_pool().backend_name)"
    )
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}  # as a dask nanny starts a worker
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    if not sys.platform.startswith("linux"):
        pytest.skip("mallopt is glibc's (Linux); elsewhere keep_freed_memory does nothing")
    assert out.split() == ["True", "system"]


def test_the_dse_program_puts_libarrow_on_the_system_heap_before_it_allocates():
    """pyarrow.set_memory_pool does not reach libarrow's own default pool (an IPC writer's
    compressed buffers came from mimalloc's fresh pages); the program sets the variable
    libarrow reads first, and what it starts inherits it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the system heap is chosen on Linux only (where keep_freed_memory tunes it)")
    code = (
        "from dse.allocator import arrow_on_system_heap; arrow_on_system_heap(); "
        "import os, numpy as np, pyarrow as pa; from dse.store import encode; "
        "encode(pa.table({'x': np.random.default_rng(0).random(200_000)})); "
        "used = [n for n in pa.supported_memory_backends() if n != 'system' "
        "and getattr(pa, n + '_memory_pool')().max_memory() > 0]; "
        "print(pa.default_memory_pool().backend_name, os.environ['ARROW_DEFAULT_MEMORY_POOL'], used)"
    )
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out.split() == ["system", "system", "[]"]
    env["ARROW_DEFAULT_MEMORY_POOL"] = "mimalloc"  # a user's own choice stays
    code = "from dse.allocator import arrow_on_system_heap; import os; arrow_on_system_heap(); print(os.environ['ARROW_DEFAULT_MEMORY_POOL'])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out.strip() == env["ARROW_DEFAULT_MEMORY_POOL"]


def _logged(logger: str, message: str) -> bool:
    """On a worker: whether ``logger`` lets an error with ``message`` through."""
    record = logging.LogRecord(logger, logging.ERROR, __file__, 0, message, None, None)
    return bool(logging.getLogger(logger).filter(record))


def test_a_local_clusters_workers_leave_its_closing_unsaid():
    """The scheduler of a local cluster closes only when the run stops (which says so): a
    worker whose heartbeat fired in between printed a traceback after the run's message,
    one whose result the run was fetching when Ctrl-C stopped it, another, and one whose
    task the close cancelled, a warning."""
    said = {
        ("distributed.worker", "Failed to communicate with scheduler during heartbeat."): False,
        ("distributed.worker", "failed during get data with tcp://127.0.0.1:46513 -> None"): False,
        (
            "distributed.worker.state_machine",
            "Async instruction for <Task cancelled> ended with CancelledError",
        ): False,
        ("distributed.worker", "Unexpected exception during heartbeat. Closing worker."): True,
    }
    with make_executor(ExecutionPlan(workers=1, dashboard=False), TOY) as ex:
        for (logger, message), shown in said.items():
            assert set(ex.client.run(_logged, logger, message).values()) == {shown}, message


@pytest.mark.skipif(
    missing("dask_jobqueue"), reason='dask-jobqueue is not installed (pip install "dse[slurm]")'
)
def test_a_jobqueue_profile_sized_by_its_own_n_workers_plans_and_shows_its_script_without_submitting(
    tmp_path,
):
    """``JobQueueCluster(n_workers=2)`` scales itself: a size, like ``scale``; showing the
    job script submits nothing (a recording ``sbatch`` on PATH would otherwise be called)."""
    (tmp_path / "q.yaml").write_text(
        "cluster: dask_jobqueue.SLURMCluster\n"
        "options: {cores: 1, processes: 1, memory: 2GB, n_workers: 2}\n"
    )
    plan = plan_execution(ExecutionSpec(profile="q"), study_path=tmp_path / "study.yaml")
    assert plan.kind == "cluster"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        f"#!/bin/sh\necho called >> {tmp_path / 'submitted'}\necho 'Submitted batch job 1'\n"
    )
    (bin_dir / "sbatch").chmod(0o755)
    shown = run_cli(
        "cluster",
        str(tmp_path / "q.yaml"),
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert shown.returncode == 0 and "#SBATCH" in shown.stdout, shown.stderr
    assert not (tmp_path / "submitted").exists()


def test_a_closing_clients_left_over_waits_print_no_traceback(caplog):
    """A fetch the run stopped waiting for (every worker gone past the grace period) ends in
    distributed's AllExit when the client closes; asyncio would print it as a traceback
    ("Task exception was never retrieved"). The executor's filter drops that one only."""
    import asyncio
    import gc
    import logging

    from distributed.client import AllExit

    from dse.execution.dask_cluster import _quiet_client_shutdown

    _quiet_client_shutdown()

    async def fail(exc):
        raise exc

    async def leave_two():
        asyncio.ensure_future(fail(AllExit()))
        asyncio.ensure_future(fail(ValueError("a real error")))
        await asyncio.sleep(0.01)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(leave_two())
        gc.collect()
    said = "\n".join(r.getMessage() + repr(r.exc_info) for r in caplog.records)
    assert "a real error" in said and "AllExit" not in said
