"""Loading studies: valid files load; every kind of invalid one gets one clear message and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_cli, toy_study, write_study
from dse.analytic.evaluator import AnalyticEvaluator
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
    "a display unit no one knows": (
        lambda d: d.update(display_units={"energy_to_train_j": "furlongs"}),
        "display_units.energy_to_train_j",
        "unknown unit 'furlongs'; known: J, kJ",
    ),
    "a bound in a unit no one knows": (
        lambda d: d["constraints"].append("energy_to_train_j <= 5 parsecs"),
        "constraints",
        "unknown unit 'parsecs'",
    ),
    "unknown key": (
        lambda d: d["search"].update(algoritm="x"),
        "search.algoritm",
        "allowed: algorithm",
    ),
    "wrong type": (lambda d: d["search"].update(budget="lots"), "search.budget", "'lots'"),
    "budget in an unknown unit": (
        lambda d: d["search"].update(budget="10 parsecs"),
        "search.budget",
        "or a duration (e.g. '90 s', '10 min', '2 h')",
    ),
    "budget of no time": (
        lambda d: d["search"].update(budget="0 min"),
        "search.budget",
        "longer than 0 s",
    ),
    "unknown polish key": (
        lambda d: d["search"].update(polish={"share": 0.5}),
        "search.polish.share",
        "allowed: enabled, search_share, batch_size",
    ),
    "empty range": (
        lambda d: d["space"].update(clock_mhz={"range": [1410, 960], "step": 90}),
        "space.clock_mhz",
        "low <= high",
    ),
    "empty choices": (
        lambda d: d["space"].update(tensor_parallel=[]),
        "space.tensor_parallel",
        "empty",
    ),
    "unknown preset": (lambda d: d["workload"].update(model="gpt-9"), "workload.model", "gpt-1.3b"),
    "unknown accelerator": (
        lambda d: d["space"].update(accelerator=["A100"]),
        "space.accelerator",
        "H100-SXM",
    ),
    "unknown parameter": (
        lambda d: d["space"].update(tensor_paralel=[1]),
        "space.tensor_paralel",
        "tensor_parallel",
    ),
    "unknown objective metric": (
        lambda d: d["objectives"][1].update(metric="time_s"),
        "objectives[1].metric",
        "time_to_train_s",
    ),
    "unknown constraint metric": (
        lambda d: d.update(constraints=["temp <= 85"]),
        "constraints[0]",
        "peak_junction_temp_c",
    ),
    "a constraint on a parameter, not a metric": (  # it suggested 'second_accelerators'
        lambda d: d.update(constraints=["num_accelerators <= 32"]),
        "constraints[0]",
        "'num_accelerators' in constraint 'num_accelerators <= 32' is a parameter of evaluator "
        "'analytic', not a metric it reports: narrow space.num_accelerators (or set "
        "fixed.num_accelerators) instead; allowed: activations_memory_gib",
    ),
    "an objective on a parameter": (
        lambda d: d["objectives"][0].update(metric="clock_fraction"),
        "objectives[0].metric",
        "'clock_fraction' is a parameter of evaluator 'analytic', not a metric it reports; allowed:",
    ),
    "malformed constraint": (
        lambda d: d.update(constraints=["temp << 85"]),
        "constraints",
        "metric <= number",
    ),
    "log range without base": (
        lambda d: d["space"].update(global_batch_size={"log": [64, 1024]}),
        "space.global_batch_size",
        "'base'",
    ),
    "value out of range": (
        lambda d: d["space"].update(clock_fraction=[-5]),
        "space.clock_fraction",
        "-5",
    ),
    "alternative inputs": (
        lambda d: d["fixed"].update(clock_mhz=1200),
        "space.clock_fraction",
        "fixed.clock_mhz and space.clock_fraction are alternatives",
    ),
    "target twice": (
        lambda d: d["fixed"].update(target_loss=2.1),
        "fixed.target_loss",
        "workload.target_tokens and fixed.target_loss are alternatives",
    ),
    "set twice": (lambda d: d["fixed"].update(model="gpt-1.3b"), "fixed.model", "set twice"),
    "repeated objective": (
        lambda d: d["objectives"].append({"metric": "energy_to_train_j"}),
        "objectives[2].metric",
        "objectives[0] already names this metric",
    ),
    "integer too large": (
        lambda d: d["space"].update(num_accelerators=[8, 1e300]),
        "space.num_accelerators",
        "integer too large",
    ),
    "endless timeout": (
        lambda d: d.update(evaluator={"timeout_s": float("inf")}),
        "evaluator.timeout_s",
        "finite",
    ),
    "name leaving results/": (lambda d: d.update(name=".."), "name", "not starting with '.'"),
    "range of text": (
        lambda d: d["space"].update(clock_fraction={"range": ["a", "b"]}),
        "space.clock_fraction.range[0]",
        "expected a number (got 'a')",
    ),
    "section not a mapping": (
        lambda d: d.update(execution=5),
        "execution",
        "expected a mapping of settings (got 5); allowed: keys workers, scheduler",
    ),
    "bad constraint": (
        lambda d: d["constraints"].append("peak_power_per_accelerator_w < "),
        "constraints[2]",
        "'peak_power_per_accelerator_w < '",
    ),
    "bad algorithm": (lambda d: d["search"].update(algorithm="nsga3"), "search.algorithm", "nsga2"),
    "unknown evaluator": (
        lambda d: d.update(evaluator={"name": "foo"}),
        "evaluator.name",
        "analytic",
    ),
    "missing objectives": (lambda d: d.pop("objectives"), "objectives", "missing"),
    "no objectives": (
        lambda d: d.update(objectives=[]),
        "objectives",
        "objectives: at least one objective is needed (got [])",
    ),
    "empty choices mapping": (
        lambda d: d["space"].update(tensor_parallel={"choices": []}),
        "space.tensor_parallel.choices",
        "choices: expected at least 1 item (got [])",
    ),
    "misspelt key": (
        lambda d: d["search"].update(algoritm="x"),
        "search.algoritm",
        "(did you mean 'algorithm'?)",
    ),
    "misspelt parameter": (
        lambda d: d["space"].update(Tensor_Parallel=[1]),
        "space.Tensor_Parallel",
        "(did you mean 'tensor_parallel'?)",
    ),
    "misspelt preset": (
        lambda d: d["workload"].update(model="gpt-1.3"),
        "workload.model",
        "(got 'gpt-1.3'; did you mean 'gpt-1.3b'?)",
    ),
    "misspelt metric": (
        lambda d: d["objectives"][1].update(metric="time_to_trian_s"),
        "objectives[1].metric",
        "(did you mean 'time_to_train_s'?)",
    ),
    # bundle parameters (space.NAME: {bundles: ...}): their form
    "bundle of no inputs": (
        lambda d: d["space"].update(fabric={"bundles": {"ib": {}}}),
        "space.fabric.bundles.ib",
        "a bundle is a mapping of at least one input to its value (got {})",
    ),
    "no bundles": (
        lambda d: d["space"].update(fabric={"bundles": {}}),
        "space.fabric.bundles",
        "no bundles: at least one is needed",
    ),
    "bundle name not a name": (
        lambda d: d["space"].update(fabric={"bundles": {"-ib": {"scaleout_pj_per_bit": 25}}}),
        "space.fabric.bundles",
        "a bundle's name is a text of 1 to 64 letters, digits",
    ),
    "bundle name a number": (
        lambda d: d["space"].update(fabric={"bundles": {400: {"scaleout_pj_per_bit": 25}}}),
        "space.fabric.bundles",
        "(got 400)",
    ),
    "bundles setting other inputs": (
        lambda d: d["space"].update(
            fabric={
                "bundles": {
                    "ib": {"scaleout_pj_per_bit": 25, "scaleout_latency_us": 5},
                    "roce": {"scaleout_pj_per_bit": 25},
                }
            }
        ),
        "space.fabric.bundles.roce",
        "does not set scaleout_latency_us, which bundle 'ib' sets: every bundle sets the same inputs",
    ),
    "bundle value not a single value": (
        lambda d: d["space"].update(fabric={"bundles": {"ib": {"scaleout_pj_per_bit": [1, 2]}}}),
        "space.fabric.bundles.ib.scaleout_pj_per_bit",
        "expected a single value (got [1, 2])",
    ),
    "bundle value not finite": (
        lambda d: d["space"].update(
            fabric={"bundles": {"ib": {"scaleout_pj_per_bit": float("nan")}}}
        ),
        "space.fabric.bundles.ib.scaleout_pj_per_bit",
        "expected a single value",
    ),
    "bundle choice that is none": (
        lambda d: d["space"].update(
            fabric={"bundles": {"ib": {"scaleout_pj_per_bit": 25}}, "choices": ["roce"]}
        ),
        "space.fabric.choices[0]",
        "no bundle of that name (got 'roce'); allowed: ib",
    ),
    "bundles beside another form": (
        lambda d: d["space"].update(
            fabric={"bundles": {"ib": {"scaleout_pj_per_bit": 25}}, "step": 1}
        ),
        "space.fabric.step",
        "unknown key 'step' in space.fabric; allowed: bundles, choices",
    ),
}


@pytest.mark.parametrize(
    "typed, meant",
    [
        ("H100", ["H100-SXM", "H100-SXM-96GB"]),
        ("A100", ["A100-40GB", "A100-80GB"]),
        ("h100 sxm", ["H100-SXM"]),
        ("GB300", []),  # another real part, not a typo of GB200
        ("llama3-7b", []),  # not llama3-70b: the numbers differ
        ("gpt-1.3", ["gpt-1.3b"]),
        ("tpe", ["optuna-tpe"]),
        ("optuna-tpee", ["optuna-tpe"]),
        ("energy_j", []),  # energy_idle_j and energy_host_j are as close: neither
        ("energy_to_trian_j", ["energy_to_train_j"]),
    ],
)
def test_suggestions_name_what_a_typo_means_or_nothing(typed, meant):
    from dse.analytic import declarations
    from dse.analytic.time import hardware, workload
    from dse.errors import closest
    from dse.search import available_drivers

    choices = [
        *hardware.accelerator_names(),
        *workload.presets(),
        *available_drivers(),
        *declarations.METRICS,
    ]
    assert closest(typed, choices) == meant


def test_unreadable_yaml_reports_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nspace:\n  a: [1, 2\n")
    with pytest.raises(StudyError, match=r"bad.yaml: not valid YAML at line \d+"):
        load_study(path)


def test_a_key_written_twice_is_an_error(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(
        (REPO / "studies" / "quickstart.yaml")
        .read_text()
        .replace("  tensor_parallel: [1, 2]", "  tensor_parallel: [1, 2]\n  accelerator: [B200]")
    )
    with pytest.raises(StudyError, match="key 'accelerator' appears twice"):
        load_study(path)


def test_a_grid_too_fine_to_expand_is_refused_at_once(tmp_path):
    path = _broken(
        tmp_path, lambda d: d["space"].update(clock_fraction={"range": [0.6, 1.0], "step": 1e-9})
    )
    with pytest.raises(StudyError, match="at most 1,000,000 per parameter"):
        load_study(path)


def test_a_list_where_a_value_belongs_says_so(tmp_path):
    path = _broken(tmp_path, lambda d: d["fixed"].update(micro_batch_size=[4]))
    with pytest.raises(StudyError, match="fixed.micro_batch_size: expected a single value"):
        load_study(path)


def test_parameter_in_space_and_fixed_is_rejected(tmp_path):
    study = toy_study(fixed={"x": 0.5})
    with pytest.raises(
        StudyError, match=r"space\.x: 'x' is both searched \(space\.x\) and set \(fixed\.x\)"
    ) as e:
        load_study(write_study(tmp_path, study))
    assert "source_text" not in str(e.value)  # the field, not the whole study, is named


def test_cli_validate_prints_one_line_and_exits_2_on_a_broken_study(tmp_path):
    path = _broken(
        tmp_path, lambda d: d["space"].update(clock_mhz={"range": [1410, 960], "step": 90})
    )
    proc = run_cli("validate", path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "space.clock_mhz" in lines[0] and "[1410, 960]" in lines[0]


def test_cli_validate_accepts_the_quickstart(tmp_path):
    proc = run_cli("validate", "studies/quickstart.yaml", "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout and "400 candidates" in proc.stdout
    assert (
        list(tmp_path.iterdir()) == []
    )  # no results folder, and no folder left from asking the file system


def test_cli_validate_says_when_a_grid_stops_short_of_the_end_the_study_wrote(tmp_path):
    """{range: [0.6, 1.0], step: 0.15} has no 1.0 and {log: [64, 1000], base: 2} no 1000:
    the grid leaves the end out, which validate says (the study is still valid)."""

    def short(d):
        d["space"]["clock_fraction"] = {"range": [0.6, 1.0], "step": 0.15}
        d["space"]["global_batch_size"] = {"log": [64, 1000], "base": 2}

    proc = run_cli("validate", _broken(tmp_path, short), "-o", str(tmp_path / "out"))
    assert proc.returncode == 0 and "192 candidates" in proc.stdout, proc.stderr
    said = " ".join(proc.stderr.split())  # rich wraps long lines
    assert (
        "space.clock_fraction: the grid in steps of 0.15 from 0.6 ends at 0.9, short of 1" in said
    ), said
    assert (
        "space.global_batch_size: the grid in powers of 2 from 64 ends at 512, short of 1000"
        in said
    ), said
    proc = run_cli("validate", "studies/quickstart.yaml", "-o", str(tmp_path / "out"))
    assert proc.returncode == 0 and "warning" not in proc.stderr, (
        proc.stderr
    )  # its grids reach their ends


def test_cli_run_refuses_a_broken_study_without_traceback(tmp_path):
    path = _broken(tmp_path, lambda d: d["workload"].update(model="gpt-9"))
    proc = run_cli("run", path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "workload.model" in proc.stderr


def test_cli_missing_study_file_exits_2():
    proc = run_cli("validate", "no/such/study.yaml")
    assert proc.returncode == 2 and "study file not found" in proc.stderr


RUN_CASES = {
    # each of these once passed dse validate and ended dse run (or validate) in a traceback
    "a NUL character in the results folder's path": (
        lambda d: d.update(output="results/a\x00b"),
        "output.path",
        "expected a text without a NUL character (\\x00) (got 'results/a\\x00b')",
    ),
    "an escape sequence in the results folder's path": (  # printed raw in the run's line
        lambda d: d.update(output="results/\x1b]0;owned\x07x"),
        "output.path",
        "expected a folder path without control characters (got 'results/\\x1b]0;owned\\x07x')",
    ),
    "a NUL character in the cluster profile's name": (
        lambda d: d.update(execution={"profile": "slurm\x00"}),
        "execution.profile",
        "expected a text without a NUL character",
    ),
    "a batch no memory holds": (  # nsga2's population: pymoo drew a 36 TiB array
        lambda d: d["search"].update(batch_size=10**12),
        "search.batch_size",
        "expected a value less than or equal to 1048576 (got 1000000000000)",
    ),
    "an nsga2 population no memory holds": (
        lambda d: d["search"].update(algorithm="nsga2", options={"pop_size": 10**12}),
        "search.options.pop_size",
        "expected a value less than or equal to 1048576",
    ),
    "mistyped option": (
        lambda d: d["search"].update(algorithm="nsga2", options={"crossover_probb": 0.5}),
        "search.options.crossover_probb",
        "crossover_prob",
    ),
    "option of the wrong type": (
        lambda d: d["search"].update(algorithm="nsga2", options={"crossover_prob": "banana"}),
        "search.options.crossover_prob",
        "'banana'",
    ),
    "option out of range": (
        lambda d: d["search"].update(algorithm="nsga2", options={"crossover_prob": 1.5}),
        "search.options.crossover_prob",
        "1.5",
    ),
    "enumeration beyond the budget": (
        lambda d: (
            d["space"].update(
                num_accelerators={"range": [8, 100000], "step": 8},
                global_batch_size={"range": [8, 100000], "step": 8},
            )
            or d["search"].update(algorithm="exhaustive", budget=2000)
        ),
        "search.budget",
        "would evaluate 3,125,000,000 candidates, more than the budget of 2,000",
    ),
    "polish over a continuous space": (
        lambda d: (
            d["space"].update(clock_fraction={"range": [0.6, 1.0]})
            or d["search"].update(polish=True)
        ),
        "search.polish",
        "needs a discrete space",
    ),
    "exhaustive over a continuous space": (
        lambda d: (
            d["space"].update(clock_fraction={"range": [0.6, 1.0]})
            or d["search"].update(algorithm="exhaustive")
        ),
        "search.algorithm",
        "needs a discrete space",
    ),
    "too many local workers": (
        lambda d: d["execution"].update(workers=1000),
        "execution.workers",
        "1000 local worker processes on a machine with",
    ),
    "unknown cluster profile": (
        lambda d: d["execution"].update(profile="nope"),
        "execution.profile",
        "cluster profile 'nope' not found",
    ),
    "cluster profile path outside the tree": (
        lambda d: d["execution"].update(profile="../elsewhere/p.yaml"),
        "execution.profile",
        "not found",
    ),
    "malformed scheduler address": (
        lambda d: d["execution"].update(scheduler="host"),
        "execution.scheduler",
        "not a dask scheduler address",
    ),
    "unknown evaluator option": (
        lambda d: d.update(evaluator={"name": "analytic", "options": {"speed": 1}}),
        "evaluator.options",
        "speed",
    ),
    "true as a batch size": (
        lambda d: d["search"].update(batch_size=True),
        "search.batch_size",
        "expected a number, not true or false",
    ),
    "false as a seed": (
        lambda d: d["search"].update(seed=False),
        "search.seed",
        "expected a number, not true or false",
    ),
    "true as a worker count": (
        lambda d: d["execution"].update(workers=True),
        "execution.workers",
        "expected a number, not true or false",
    ),
    "a number as a switch": (
        lambda d: d["execution"].update(tls=1),
        "execution.tls",
        "expected true or false (got 1)",
    ),
    "a word as a switch": (
        lambda d: d["search"].update(polish={"enabled": "no"}),
        "search.polish.enabled",
        "expected true or false (got 'no')",
    ),
    "a word as a driver's switch": (
        lambda d: d["search"].update(algorithm="nsga2", options={"ask_ahead": "yes"}),
        "search.options.ask_ahead",
        "expected true or false (got 'yes')",
    ),
    # found by a review: tracebacks (OverflowError) or silently odd spaces before
    "infinite range end": (
        lambda d: d["space"].update(clock_fraction={"range": [0.5, float("inf")]}),
        "space.clock_fraction",
        "expected finite numbers",
    ),
    "step too fine for a float": (
        lambda d: d["space"].update(clock_fraction={"range": [0.1, 1], "step": 1e-320}),
        "space.clock_fraction",
        "this grid has inf values",
    ),
    "integer beyond a float in a list": (
        lambda d: d["space"].update(num_accelerators=[8, 10**400]),
        "space.num_accelerators",
        "expected finite numbers",
    ),
    "integer beyond a float as a range end": (
        lambda d: d["space"].update(tensor_parallel={"range": [1, 10**400]}),
        "space.tensor_parallel",
        "expected finite numbers",
    ),
    "integer beyond a float as a log end": (
        lambda d: d["space"].update(global_batch_size={"log": [1, 10**400], "base": 2}),
        "space.global_batch_size",
        "expected finite numbers",
    ),
    "true as a range end": (
        lambda d: d["space"].update(tensor_parallel={"range": [True, 4]}),
        "space.tensor_parallel.range",
        "expected a number, not true or false",
    ),
    "true among integers": (
        lambda d: d["space"].update(tensor_parallel=[1, True]),
        "space.tensor_parallel",
        "expected a number (got True)",
    ),
    "continuous range of an integer": (
        lambda d: d["space"].update(global_batch_size={"range": [64.5, 512.0]}),
        "space.global_batch_size",
        "expected an integer (got 64.5)",
    ),
    "value listed twice": (
        lambda d: d["space"].update(tensor_parallel=[1, 1, 2]),
        "space.tensor_parallel",
        "items 0 and 1 are both 1",
    ),
    "one accelerator in two spellings": (
        lambda d: d["space"].update(accelerator=["A100-80GB", "a100_80gb"]),
        "space.accelerator",
        "items 0 and 1 are both 'A100-80GB'",
    ),
    "range not a pair": (
        lambda d: d["space"].update(tensor_parallel={"range": [1]}),
        "space.tensor_parallel.range",
        "expected [low, high]: a list of two numbers (got [1])",
    ),
    "constraint bound not a number": (
        lambda d: d.update(constraints=["mfu <= 1.2.3"]),
        "constraints[0]",
        "a constraint is written 'metric <= number'",
    ),
    "constraint neither text nor mapping": (
        lambda d: d.update(constraints=[5]),
        "constraints[0]",
        "or as a mapping {metric, op, bound, unit}",
    ),
    "true as a driver option": (
        lambda d: d["search"].update(algorithm="nsga2", options={"pop_size": True}),
        "search.options.pop_size",
        "expected a number, not true or false",
    ),
    "scheduler port beyond 65535": (
        lambda d: d["execution"].update(scheduler="tcp://127.0.0.1:99999"),
        "execution.scheduler",
        "no such port",
    ),
    "name ending in a newline": (
        lambda d: d.update(name="quickstart\n"),
        "name",
        "(got 'quickstart\\n')",
    ),
    # bundle parameters (space.NAME: {bundles: ...}): checked against the evaluator
    "unknown input in a bundle": (
        lambda d: d["space"].update(fabric={"bundles": {"ib": {"scaleout_latncy_us": 5}}}),
        "space.fabric.bundles.ib.scaleout_latncy_us",
        "unknown input 'scaleout_latncy_us' in bundle 'ib' of space.fabric",
    ),
    "bundle value out of range": (
        lambda d: d["space"].update(fabric={"bundles": {"ib": {"scaleout_latency_us": -5}}}),
        "space.fabric.bundles.ib.scaleout_latency_us",
        "value out of range (got -5)",
    ),
    "bundle input also fixed": (
        lambda d: d["space"].update(fabric={"bundles": {"ib": {"scaleout_bw_gbs": 25}}}),
        "space.fabric.bundles.ib.scaleout_bw_gbs",
        "set both by the bundles of space.fabric and by fixed.scaleout_bw_gbs",
    ),
    "bundle input also searched": (
        lambda d: d["space"].update(fabric={"bundles": {"ib": {"clock_fraction": 0.5}}}),
        "space.fabric.bundles.ib.clock_fraction",
        "set both by the bundles of space.fabric and by space.clock_fraction",
    ),
    "bundle input set by two bundle parameters": (
        lambda d: d["space"].update(
            fabric={"bundles": {"ib": {"scaleout_pj_per_bit": 25}}},
            net={"bundles": {"x": {"scaleout_pj_per_bit": 3}}},
        ),
        "space.net.bundles.x.scaleout_pj_per_bit",
        "set both by the bundles of space.net and by the bundles of space.fabric",
    ),
    "bundle input an alternative of a searched one": (
        lambda d: d["space"].update(fabric={"bundles": {"ib": {"clock_mhz": 1000}}}),
        "space.clock_fraction",
        "the bundles of space.fabric (clock_mhz) and space.clock_fraction are alternatives",
    ),
    "bundle parameter named as an input": (
        lambda d: d["space"].update(pue={"bundles": {"ib": {"scaleout_pj_per_bit": 25}}}),
        "space.pue",
        "'pue' is an input of evaluator 'analytic'",
    ),
    "bundle parameter named as a metric": (
        lambda d: d["space"].update(mfu={"bundles": {"ib": {"scaleout_pj_per_bit": 25}}}),
        "space.mfu",
        "'mfu' names a metric in the results",
    ),
    "unknown text in a bundle": (
        lambda d: d["space"].update(fabric={"bundles": {"ib": {"scaleout_fabric": "token-ring"}}}),
        "space.fabric.bundles.ib.scaleout_fabric",
        "unknown scaleout_fabric (got 'token-ring')",
    ),
    # each quantity is stored once, in its SI unit (analytic 0.19): a study naming a removed
    # copy is told its replacement and how to keep the copy's unit
    "a removed metric as an objective": (
        lambda d: d["objectives"][0].update(metric="energy_to_train_mwh"),
        "objectives[0].metric",
        f"was removed in evaluator 'analytic' {AnalyticEvaluator.version} (each quantity is "
        "stored once, in its SI unit): use energy_to_train_j (shown in MWh with "
        "`display_units: {energy_to_train_j: MWh}`)",
    ),
    "a removed metric in a constraint": (
        lambda d: d["constraints"].append("time_to_train_days <= 60"),
        "constraints[2]",
        "write 'time_to_train_s <= 60 days'",
    ),
    "a removed metric given a display unit": (
        lambda d: d.update(display_units={"it_energy_to_train_mwh": "MWh"}),
        "display_units.it_energy_to_train_mwh",
        "use it_energy_to_train_j (shown in MWh",
    ),
    "a bound in a unit of another kind": (
        lambda d: d["constraints"].append("energy_to_train_j <= 5 days"),
        "constraints[2]",
        "days is not a unit of energy_to_train_j, which is in J; allowed: J, kJ, MJ",
    ),
    "a display unit of another kind": (
        lambda d: d.update(display_units={"time_to_train_s": "MWh"}),
        "display_units.time_to_train_s",
        "time_to_train_s is in s: it cannot be shown in MWh (got 'MWh'); allowed: ms, s, min, h, days",
    ),
    "a display unit of a unitless metric": (
        lambda d: d.update(display_units={"mfu": "h"}),
        "display_units.mfu",
        "allowed: no other unit than the metric's own (1)",
    ),
}


def test_whole_number_floats_of_an_integer_input_make_an_integer_grid(tmp_path):
    """``{range: [1.0, 4.0]}`` and ``{log: [64, 1024], base: 2.0}`` of integer inputs are
    the integer grids (before: float values, and a continuous range of fractions)."""
    path = _broken(
        tmp_path,
        lambda d: d["space"].update(
            tensor_parallel={"range": [1.0, 4.0]},
            global_batch_size={"log": [64, 1024], "base": 2.0},
        ),
    )
    from dse.api import plan

    space = plan(path).space
    values = {p.name: p.values for p in space.parameters}
    assert values["tensor_parallel"] == (1, 2, 3, 4) and all(
        type(v) is int for v in values["tensor_parallel"]
    )
    assert values["global_batch_size"] == (64, 128, 256, 512, 1024)
    assert all(type(v) is int for v in values["global_batch_size"])


def test_yaml_merge_keys_are_read_as_yaml_reads_them(tmp_path):
    """``<<: *anchor`` merges a mapping (the duplicate-key check once refused it as not YAML)."""
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    fixed = data.pop("fixed")
    path = tmp_path / "merge.yaml"
    path.write_text(
        yaml.safe_dump(data, sort_keys=False)
        + "fixed:\n  <<: {"
        + ", ".join(f"{k}: {v}" for k, v in fixed.items())
        + "}\n"
    )
    study = load_study(path)
    assert dict(study.fixed) == fixed


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


@pytest.mark.parametrize(
    "case", ["option of the wrong type", "enumeration beyond the budget", "too many local workers"]
)
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
    assert (
        proc.returncode == 2
        and "needs torch" in proc.stderr
        and 'pip install "dse[gp]"' in proc.stderr
    )


def test_names_in_another_spelling_are_the_catalog_s(tmp_path):
    """`a100-80gb` is A100-80GB and 2.0 of an integer input is 2: the plan, its space and
    so every stored candidate hold the evaluator's own spelling."""
    from dse.api import plan

    study = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    study["space"].update(accelerator=["a100-80gb", "H100 SXM"], tensor_parallel=[1, 2.0])
    study["workload"]["model"] = "GPT-1.3B"
    p = plan(write_study(tmp_path, study))
    values = {q.name: q.values for q in p.space.parameters}
    assert values["accelerator"] == ("A100-80GB", "H100-SXM")
    assert values["tensor_parallel"] == (1, 2) and all(
        type(v) is int for v in values["tensor_parallel"]
    )
    assert p.study.fixed_values["model"] == "gpt-1.3b"


def test_a_huge_value_is_shortened_in_the_message(tmp_path):
    """A YAML alias bomb (a few hundred bytes that expand to 10^9 items) is named, not printed."""
    levels = ['  l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    text = (
        (REPO / "studies" / "quickstart.yaml")
        .read_text()
        .replace(
            "description: GPT 1.3B on 26B tokens - energy versus time over accelerators, batch size and clock",
            "description:\n" + "\n".join(levels),
        )
    )
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    proc = run_cli("validate", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path}: description: expected a text" in proc.stderr
    assert len(proc.stderr) < 1000, proc.stderr[:2000]


def test_validate_refuses_the_results_folder_run_would_refuse(tmp_path):
    """A results folder that is a file, or that holds a run, is refused by `validate` as by
    `run`; the study's own folder is named with the study file and its field."""
    study = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    a_file = tmp_path / "taken"
    a_file.write_text("not a folder")
    path = write_study(tmp_path, {**study, "output": str(a_file)})
    for command in ("validate", "run"):
        proc = run_cli(command, str(path), "-w", "0")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.startswith(
            f"error: {path}: output.path: cannot write the results folder {a_file}: "
            "it is a file, not a folder"
        ), proc.stderr
    held = tmp_path / "held"
    (held / "evaluations").mkdir(parents=True)
    (held / "evaluations" / "chunk-000000.arrow").write_bytes(b"")
    proc = run_cli("validate", "studies/quickstart.yaml", "-o", str(held))
    assert proc.returncode == 2 and f"{held} already holds a run" in proc.stderr
    assert (
        run_cli("validate", "studies/quickstart.yaml", "-o", str(held), "--overwrite").returncode
        == 0
    )


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_validate_refuses_a_results_folder_the_file_system_refuses_as_run_does(tmp_path):
    """/proc takes no new folder whatever its permission bits say (and root passes every
    permission check): validate says so as run does, with the same line."""
    messages = []
    for command in ("validate", "run"):
        proc = run_cli(
            command, "studies/quickstart.yaml", "-w", "0", "-o", "/proc/dse-no-such-folder"
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        messages.append(proc.stderr.strip())
    assert messages[0] == messages[1], messages
    assert messages[0].startswith(
        "error: cannot write the results folder /proc/dse-no-such-folder: "
    ), messages


def test_describe_takes_an_accelerator_in_another_spelling():
    proc = run_cli("describe", "-a", "a100-80gb")
    assert proc.returncode == 0, proc.stderr
    assert "accelerator A100-80GB (hardware catalog)" in proc.stdout


def test_describe_an_accelerator_gives_each_numbers_own_note_and_readable_values():
    """B200's idle power and lowest clock are assumed, not datasheet numbers: the catalog's
    note on that line is the source shown; values are rounded and mappings spelled out."""
    proc = run_cli("describe", "-a", "B200")
    assert proc.returncode == 0, proc.stderr
    rows, last = {}, None
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:4]]
        if not line.startswith("│") or len(cells) < 3:
            continue
        if cells[0]:
            last = cells[0]
            rows[last] = cells[1:]
        else:  # a wrapped cell goes on under its row
            rows[last] = [f"{a} {b}".strip() for a, b in zip(rows[last], cells[1:], strict=True)]
    value, source = rows["hardware.idle_w"]
    assert (
        value == "140"
        and source.startswith("B200 in the hardware catalog")
        and "assumed, not measured" in source
    )
    assert "assumed (not published)" in rows["hardware.clock_min_mhz"][1]
    assert rows["hardware.peak_tflops"][0] == "bf16 2250, fp16 2250, tf32 1100, fp8 4500"
    calibration = yaml.safe_load((REPO / "dse/analytic/data/calibration.yaml").read_text())
    b200 = calibration["fitted"]["B200"]["matmul_eff_max"]  # the value shown, not a copy of it
    assert rows["calibration.matmul_eff_max"][0] == f"{b200:.4g}"


@pytest.mark.parametrize(
    "args, expected",
    [
        (("export", "results/none", "--format", "xls"), "Invalid value for '--format' / '-f'"),
        (
            ("run", "--workers", "abc", "studies/quickstart.yaml"),
            "Invalid value for '--workers' / '-w'",
        ),
        (("nosuch",), "No such command 'nosuch'"),
        (("validate",), "Missing argument 'study'"),
    ],
)
def test_a_bad_command_line_is_one_line_too(args, expected):
    proc = run_cli(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr
    assert "--help` lists what is allowed" in lines[0]
