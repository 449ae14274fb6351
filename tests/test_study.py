"""Loading studies: valid files load; every kind of invalid one gets one clear message and exit 2."""

from __future__ import annotations

import pytest
import yaml

from conftest import REPO, run_cli, toy_study, write_study
from dse.api import load_study
from dse.errors import StudyError
from dse.space import Space


def test_quickstart_study_loads_and_expands_its_space():
    study = load_study(REPO / "studies" / "quickstart.yaml")
    space = Space.from_study(study)
    assert study.name == "quickstart"
    assert space.is_discrete
    batch = dict(zip(space.names, (p.values for p in space.parameters), strict=True))
    assert batch["global_batch_size"] == (64, 128, 256, 512, 1024)
    assert batch["clock_fraction"] == (0.6, 0.7, 0.8, 0.9, 1.0)
    assert study.fixed_values["target_tokens"] == pytest.approx(2.6e10)  # 2.6e10 read as a number


@pytest.mark.parametrize("path", sorted((REPO / "studies").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_study_is_valid(path):
    load_study(path)


def _broken(tmp_path, mutate) -> str:
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    mutate(data)
    return str(write_study(tmp_path, data))


CASES = {
    "unknown key": (lambda d: d["search"].update(algoritm="x"), "search.algoritm", "allowed: algorithm"),
    "wrong type": (lambda d: d["search"].update(budget="lots"), "search.budget", "'lots'"),
    "budget in an unknown unit": (lambda d: d["search"].update(budget="10 parsecs"), "search.budget",
                                  "or a duration (e.g. '90 s', '10 min', '2 h')"),
    "budget of no time": (lambda d: d["search"].update(budget="0 min"), "search.budget", "longer than 0 s"),
    "unknown polish key": (lambda d: d["search"].update(polish={"share": 0.5}), "search.polish.share",
                           "allowed: enabled, search_share, batch_size"),
    "empty range": (lambda d: d["space"].update(clock_mhz={"range": [1410, 960], "step": 90}),
                    "space.clock_mhz", "low <= high"),
    "empty choices": (lambda d: d["space"].update(tensor_parallel=[]), "space.tensor_parallel", "empty"),
    "unknown preset": (lambda d: d["workload"].update(model="gpt-9"), "workload.model", "gpt-1.3b"),
    "unknown accelerator": (lambda d: d["space"].update(accelerator=["A100"]), "space.accelerator", "H100-SXM"),
    "unknown parameter": (lambda d: d["space"].update(tensor_paralel=[1]), "space.tensor_paralel", "tensor_parallel"),
    "unknown objective metric": (lambda d: d["objectives"][1].update(metric="time_s"),
                                 "objectives[1].metric", "time_to_train_s"),
    "unknown constraint metric": (lambda d: d.update(constraints=["temp <= 85"]), "constraints[0]", "peak_junction_temp_c"),
    "malformed constraint": (lambda d: d.update(constraints=["temp << 85"]), "constraints", "metric <= number"),
    "log range without base": (lambda d: d["space"].update(global_batch_size={"log": [64, 1024]}),
                               "space.global_batch_size", "'base'"),
    "value out of range": (lambda d: d["space"].update(clock_mhz=[-5]), "space.clock_mhz", "-5"),
    "bad algorithm": (lambda d: d["search"].update(algorithm="nsga3"), "search.algorithm", "nsga2"),
    "unknown evaluator": (lambda d: d.update(evaluator={"name": "foo"}), "evaluator.name", "analytic"),
    "missing objectives": (lambda d: d.pop("objectives"), "objectives", "missing"),
}




def test_unreadable_yaml_reports_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nspace:\n  a: [1, 2\n")
    with pytest.raises(StudyError, match=r"bad.yaml: not valid YAML at line \d+"):
        load_study(path)


def test_a_key_written_twice_is_an_error(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text((REPO / "studies" / "quickstart.yaml").read_text().replace(
        "  tensor_parallel: [1, 2]", "  tensor_parallel: [1, 2]\n  accelerator: [B200]"))
    with pytest.raises(StudyError, match="key 'accelerator' appears twice"):
        load_study(path)


def test_a_grid_too_fine_to_expand_is_refused_at_once(tmp_path):
    path = _broken(tmp_path, lambda d: d["space"].update(clock_fraction={"range": [0.6, 1.0], "step": 1e-9}))
    with pytest.raises(StudyError, match="at most 1,000,000 per parameter"):
        load_study(path)


def test_a_list_where_a_value_belongs_says_so(tmp_path):
    path = _broken(tmp_path, lambda d: d["fixed"].update(micro_batch_size=[4]))
    with pytest.raises(StudyError, match="fixed.micro_batch_size: expected a single value"):
        load_study(path)


def test_parameter_in_space_and_fixed_is_rejected(tmp_path):
    study = toy_study(fixed={"x": 0.5})
    with pytest.raises(StudyError, match="both in 'space' and in 'fixed'"):
        load_study(write_study(tmp_path, study))


def test_cli_validate_prints_one_line_and_exits_2_on_a_broken_study(tmp_path):
    path = _broken(tmp_path, lambda d: d["space"].update(clock_mhz={"range": [1410, 960], "step": 90}))
    proc = run_cli("validate", path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "space.clock_mhz" in lines[0] and "[1410, 960]" in lines[0]


def test_cli_validate_accepts_the_quickstart():
    proc = run_cli("validate", "studies/quickstart.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout and "400 candidates" in proc.stdout


def test_cli_run_refuses_a_broken_study_without_traceback(tmp_path):
    path = _broken(tmp_path, lambda d: d["workload"].update(model="gpt-9"))
    proc = run_cli("run", path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "workload.model" in proc.stderr


def test_cli_missing_study_file_exits_2():
    proc = run_cli("validate", "no/such/study.yaml")
    assert proc.returncode == 2 and "study file not found" in proc.stderr


RUN_CASES = {
    "mistyped option": (lambda d: d["search"].update(algorithm="nsga2", options={"crossover_probb": 0.5}),
                        "search.options.crossover_probb", "crossover_prob"),
    "option of the wrong type": (lambda d: d["search"].update(algorithm="nsga2", options={"crossover_prob": "banana"}),
                                 "search.options.crossover_prob", "'banana'"),
    "option out of range": (lambda d: d["search"].update(algorithm="nsga2", options={"crossover_prob": 1.5}),
                            "search.options.crossover_prob", "1.5"),
    "enumeration beyond the budget": (
        lambda d: d["space"].update(num_accelerators={"range": [8, 100000], "step": 8},
                                    global_batch_size={"range": [8, 100000], "step": 8}) or
        d["search"].update(algorithm="exhaustive", budget=2000),
        "search.budget", "would evaluate 3,125,000,000 candidates, more than the budget of 2,000"),
    "polish over a continuous space": (
        lambda d: d["space"].update(clock_fraction={"range": [0.6, 1.0]}) or d["search"].update(polish=True),
        "search.polish", "needs a discrete space"),
    "exhaustive over a continuous space": (
        lambda d: d["space"].update(clock_fraction={"range": [0.6, 1.0]}) or d["search"].update(algorithm="exhaustive"),
        "search.algorithm", "needs a discrete space"),
    "too many local workers": (lambda d: d["execution"].update(workers=1000), "execution.workers",
                               "1000 local worker processes on a machine with"),
    "unknown cluster profile": (lambda d: d["execution"].update(profile="nope"), "execution.profile",
                                "cluster profile 'nope' not found"),
    "cluster profile path outside the tree": (lambda d: d["execution"].update(profile="../elsewhere/p.yaml"),
                                              "execution.profile", "not found"),
    "malformed scheduler address": (lambda d: d["execution"].update(scheduler="host"), "execution.scheduler",
                                    "not a dask scheduler address"),
    "unknown evaluator option": (lambda d: d.update(evaluator={"name": "analytic", "options": {"speed": 1}}),
                                 "evaluator.options", "speed"),
}


@pytest.mark.parametrize("case", [*CASES, *RUN_CASES], ids=[*CASES, *RUN_CASES])
def test_invalid_study_names_file_field_and_allowed(tmp_path, case):
    """The schema's errors and everything `dse run` would refuse before starting (the
    evaluator's parameters, the driver and its options, the budget, the cluster settings)."""
    mutate, field, expected = {**CASES, **RUN_CASES}[case]
    path = _broken(tmp_path, mutate)
    with pytest.raises(StudyError) as info:
        load_study(path)
    message = str(info.value)
    assert message.startswith(path)
    assert field in message
    assert expected in message


@pytest.mark.parametrize("case", ["option of the wrong type", "enumeration beyond the budget",
                                  "too many local workers"])
def test_validate_and_run_refuse_alike_and_run_leaves_no_folder(tmp_path, case):
    mutate, field, expected = RUN_CASES[case]
    path = _broken(tmp_path, lambda d: mutate(d) or d.update(output=str(tmp_path / "out")))
    messages = []
    for command in ("validate", "run"):
        proc = run_cli(command, path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        messages.append(proc.stderr.strip())
    assert messages[0] == messages[1] and field in messages[0] and expected in messages[0]
    assert not (tmp_path / "out").exists()


def test_optuna_gp_without_its_extra_is_refused_by_validate(tmp_path):
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here, so optuna-gp is available")
    path = _broken(tmp_path, lambda d: d["search"].update(algorithm="optuna-gp"))
    proc = run_cli("validate", path)
    assert proc.returncode == 2 and "needs torch" in proc.stderr and 'pip install "dse[gp]"' in proc.stderr
