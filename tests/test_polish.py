"""The search's phases: the front polish (recall on a known front, resume from plain state,
labels in the datasets) and budgets in time (auto measures the evaluator, then chooses)."""

from __future__ import annotations

import json

import moocore
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from conftest import run_cli, toy_study, write_study
from dse.checks import plan_run
from dse.errors import StudyError
from dse.evaluators import load_evaluator
from dse.evaluators.toy import ToyEvaluator
from dse.pareto import objective_matrix, violation_matrix
from dse.runner import Runner
from dse.search import plan_search
from dse.search.exhaustive import MIN_BATCH
from dse.space import Space
from dse.study import Study

# a 10,800-candidate corner of benchmarks/search-bench.yaml, three objectives: the exact
# front (enumerated below, in well under a second) has about 140 points
SMALL = {
    "name": "small-3obj",
    "workload": {"model": "llama2-7b", "target_tokens": 1.0e12},
    "space": {
        "accelerator": ["H100-SXM", "B200"],
        "num_accelerators": {"log": [8, 128], "base": 2},
        "global_batch_size": {"log": [64, 1024], "base": 2},
        "clock_mhz": {"range": [900, 1400], "step": 100},
        "tensor_parallel": [1, 2, 4],
        "pipeline_parallel": [1, 2],
        "micro_batch_size": [1, 2, 4],
        "recompute": ["none", "full"],
    },
    "fixed": {"cooling": "air", "scaleout_bw_gbs": 50},
    "objectives": [
        {"metric": "energy_to_train_j"},
        {"metric": "time_to_train_s"},
        {"metric": "facility_peak_power_w"},
    ],
    "constraints": ["peak_junction_temp_c <= 85", "memory_per_accelerator_gib <= 80"],
    "search": {"algorithm": "nsga2", "budget": 1620, "batch_size": 40},  # 15% of the space
    "execution": {"workers": 0},
}


def _with(study: dict, **search) -> Study:
    return Study.model_validate({**study, "search": {**study["search"], **search}})


def _front_keys(keys: np.ndarray, F: np.ndarray, ok: np.ndarray) -> set[int]:
    keys = np.unique(keys)
    keys = keys[ok[keys]]
    return set(keys[moocore.is_nondominated(F[keys], keep_weakly=True)].tolist())


def test_the_polish_finds_the_exact_front_of_a_small_three_objective_space():
    """Recall guard: at 15% of the space NSGA-II with its polish reports every point of the
    exact front and nothing else; without the polish it misses some and reports dominated ones."""
    study = _with(SMALL)
    space = Space.from_study(study)
    every = space.from_indices(space.indices_of(np.arange(int(space.size))))
    table = pd.concat(
        [
            every,
            load_evaluator(study.evaluator).evaluate(space.with_fixed(every)).assign(status="ok"),
        ],
        axis=1,
    )
    F, G = objective_matrix(table, study), violation_matrix(table, study)
    ok = (G <= 0).all(axis=1) & np.isfinite(F).all(axis=1)
    exact = _front_keys(np.flatnonzero(ok), F, ok)
    assert 100 < len(exact) < 200
    for seed in (0, 1, 2):
        recall = {}
        for polish in (None, False):
            driver = plan_search(_with(SMALL, seed=seed, polish=polish), space).build(None)
            asked = []
            while not driver.done:
                batch = driver.ask()
                keys = space.flat_index(space.value_indices(batch))
                driver.tell(batch, F[keys], G[keys])
                asked.append(keys)
            asked = np.concatenate(asked)
            assert len(asked) <= 1620 and len(np.unique(asked)) == len(asked)
            found = _front_keys(asked, F, ok)
            recall[polish] = len(found & exact) / len(exact)
            if polish is None:
                assert recall[None] >= 0.95 and found <= exact, (seed, recall)
                assert driver.attributes()["polish_evaluations"] > 0
        assert recall[None] > recall[False]


def _drive(driver, study: Study, space: Space) -> tuple[list[pd.DataFrame], list[dict]]:
    """The ask/tell loop with the toy evaluator; the batches and the JSON state after each."""
    ev, batches, states = (
        ToyEvaluator(),
        [],
        [json.loads(json.dumps(driver.state(), allow_nan=False))],
    )
    while not driver.done:
        batch = driver.ask().reset_index(drop=True)
        if len(batch) == 0:
            break
        table = pd.concat([batch, ev.evaluate(space.with_fixed(batch)).assign(status="ok")], axis=1)
        driver.tell(batch, objective_matrix(table, study), violation_matrix(table, study))
        driver.observe_cost(0.01, len(batch))
        batches.append(batch)
        states.append(json.loads(json.dumps(driver.state(), allow_nan=False)))
    return batches, states


def _toy(**search) -> Study:
    return Study.model_validate(
        toy_study(
            space={
                "x": {"range": [0.0, 1.0], "step": 0.05},
                "y": list(range(10)),
                "shape": ["a", "b"],
            },
            constraints=["f1 >= 0.3"],
            search={"algorithm": "nsga2", "budget": 300, "batch_size": 20, "seed": 3, **search},
        )
    )


def test_a_restored_polish_asks_what_the_uninterrupted_one_asks():
    """States saved during the search, at the switch and in the polish, as JSON: a driver
    restored from any of them asks the same batches and ends in the same state."""
    study = _toy()
    space = Space.from_study(study)
    reference = plan_search(study, space).build(None)
    batches, states = _drive(reference, study, space)
    phases = [s["phase"] for s in states]
    assert phases[0] == "search" and "polish" in phases and phases[-1] == "done"
    assert states[-1]["converged"] and states[-1]["polish_asked"] > 0
    assert len(batches[-1]) <= 5  # polish batches are a quarter of batch_size
    first_polish = phases.index("polish")
    for cut in (0, first_polish - 1, first_polish, len(states) - 3):
        resumed = plan_search(study, space).build(None)
        resumed.restore(states[cut])  # the batch in flight when the run died is asked again
        rest, rest_states = _drive(resumed, study, space)
        assert len(rest) == len(batches) - cut
        for a, b in zip(rest, batches[cut:], strict=True):
            pd.testing.assert_frame_equal(a, b)
        assert rest_states[-1] == states[-1]


def test_a_state_saved_by_the_driver_alone_resumes_without_a_polish():
    """Runs started before the phases saved the driver's own state: they go on as started."""
    study = _toy()
    space = Space.from_study(study)
    plan = plan_search(study, space)
    alone = plan.driver_cls(plan.problem, plan.options)
    ev = ToyEvaluator()
    for _ in range(2):
        batch = alone.ask().reset_index(drop=True)
        t = pd.concat([batch, ev.evaluate(space.with_fixed(batch)).assign(status="ok")], axis=1)
        alone.tell(batch, objective_matrix(t, study), violation_matrix(t, study))
    resumed = plan.build(None)
    resumed.restore(json.loads(json.dumps(alone.state())))
    batches, states = _drive(resumed, study, space)
    assert sum(map(len, batches)) == 300 - 40 and states[-1]["polish_asked"] == 0
    assert resumed.attributes()["front"] == "approximate"


@pytest.mark.parametrize(
    "search,label,detail",
    [
        ({"algorithm": "exhaustive", "budget": 420}, "exact", "every candidate"),
        ({"algorithm": "nsga2", "budget": 300}, "polished", "local optimum"),
        ({"algorithm": "random", "budget": 100}, "approximate", "no polish"),
        (
            {
                "algorithm": "random",
                "budget": 100,
                "polish": {"search_share": 0.5, "batch_size": 10},
            },
            "approximate",
            "before the polish reached a local optimum",
        ),
    ],
)
def test_the_datasets_say_how_exact_the_front_is(tmp_path, search, label, detail):
    study = _toy(**search)
    result = Runner(plan_run(study), tmp_path / "out").start()
    with xr.open_dataset(tmp_path / "out" / "pareto.nc", engine="h5netcdf") as ds:
        attrs = dict(ds.attrs)
    assert attrs["front"] == label and detail in attrs["front_detail"]
    assert attrs["evaluations"] == len(result.evaluations) <= search["budget"]
    assert (attrs["polish_evaluations"] > 0) == (label == "polished" or "polish" in search)
    assert attrs["search"].startswith(search["algorithm"])


def test_the_polish_needs_a_discrete_space():
    continuous = toy_study(
        space={"x": {"range": [0.0, 1.0]}, "y": [0, 1], "shape": ["a", "b"]},
        search={"algorithm": "nsga2", "budget": 100},
    )
    plan = plan_search(
        Study.model_validate(continuous), Space.from_study(Study.model_validate(continuous))
    )
    assert plan.polish is None and "polish" not in plan.description  # the default is off there
    continuous["search"]["polish"] = True
    study = Study.model_validate(continuous)
    with pytest.raises(StudyError, match="search.polish: the front polish needs a discrete space"):
        plan_search(study, Space.from_study(study))


def test_a_budget_in_time_lets_auto_enumerate_a_space_that_fits(tmp_path):
    study = _toy(algorithm="auto", budget="1 min")
    plan = plan_run(study)
    assert plan.search.total is None and "fits 60 s" in plan.search.description
    Runner(plan, tmp_path / "out").start()
    with xr.open_dataset(tmp_path / "out" / "pareto.nc", engine="h5netcdf") as ds:
        assert ds.attrs["front"] == "exact" and ds.attrs["evaluations"] == 420
        assert ds.attrs["search"].startswith("auto → exhaustive (420 candidates at")
        assert "within the" in ds.attrs["search"]


def test_a_budget_in_time_that_enumeration_would_exceed_searches_then_polishes(tmp_path):
    """0.1 s per chunk of 5 candidates: the 420 candidates would take about 8 s, the budget
    is 3 s, so auto goes on with NSGA-II and the polish; `dse status` says so and why."""
    study = toy_study(
        space={"x": {"range": [0.0, 1.0], "step": 0.05}, "y": list(range(10)), "shape": ["a", "b"]},
        search={"algorithm": "auto", "budget": "3 s", "batch_size": 20, "seed": 1},
        execution={"workers": 0, "chunk_size": 5},
        output=str(tmp_path / "out"),
    )
    study["evaluator"]["options"] = {"delay_s": 0.1}
    proc = run_cli("run", str(write_study(tmp_path, study)), "--quiet")
    assert proc.returncode == 0, proc.stderr
    state = json.loads((tmp_path / "out" / "state.json").read_text())
    driver = state["driver"]
    # the polish ends at a local optimum or at the batch that crosses the limit: every batch
    # but the last started within it (no bound on the last one's length: that is the machine's)
    before_last = driver["spent_s"] - state["history"][-1]["seconds"]  # (rounded to 1 ms there)
    assert driver["converged"] or 3.0 <= driver["spent_s"] and before_last < 3.0 + 1e-3
    assert driver["inner"]["auto"]["choice"] == "nsga2" and driver["polish_asked"] > 0
    status = run_cli("status", str(tmp_path / "out"))
    text = " ".join(status.stdout.split())  # rich wraps long lines
    assert status.returncode == 0 and "search: auto → nsga2 (420 candidates at" in text
    assert "more than the" in text and "then the front polish" in text
    with xr.open_dataset(tmp_path / "out" / "pareto.nc", engine="h5netcdf") as ds:
        assert ds.attrs["front"] in ("approximate", "polished") and ds.attrs["evaluations"] < 420


def test_a_budget_in_time_ends_the_search_at_the_batch_that_crosses_it(tmp_path):
    study = Study.model_validate(
        toy_study(
            space={
                "x": {"range": [0.0, 1.0], "step": 0.01},
                "y": list(range(10)),
                "shape": ["a", "b"],
            },
            search={"algorithm": "nsga2", "budget": "1.5 s", "batch_size": 10, "polish": False},
            evaluator={"name": "dse.evaluators.toy:ToyEvaluator", "options": {"delay_s": 0.05}},
            execution={"workers": 0, "chunk_size": 10},
        )
    )
    result = Runner(plan_run(study), tmp_path / "out").start()
    spent = sum(h.seconds for h in result.history)
    assert (
        1.5 <= spent and sum(h.seconds for h in result.history[:-1]) < 1.5
    )  # the last batch crossed it
    assert 10 <= len(result.evaluations) < 2020
    with xr.open_dataset(tmp_path / "out" / "pareto.nc", engine="h5netcdf") as ds:
        assert (
            ds.attrs["front"] == "approximate"
            and "budget (1.5 s) was spent" in ds.attrs["front_detail"]
        )


@pytest.mark.parametrize(
    "budget,costs,chunks,choice",
    [
        ("100 s", (0.001,), [10], "exhaustive"),  # 20,020 x 1 ms fit 100 s at once
        (
            "100 s",
            (0.01, 0.002),
            [10, 40],
            "exhaustive",
        ),  # overheads dominate the first chunk: measure a larger one
        # still too slow when the allowance (10 s after the first chunk) runs out
        ("100 s", (0.01, 0.008, 0.006, 0.006), [10, 40, 160, 640], "nsga2"),
        (
            "100 s",
            (0.5,),
            [10],
            "nsga2",
        ),  # far too slow: no second chunk (20 s, past the allowance)
        # a short budget: the first chunk's start-up (3.7 ms each) would choose nsga2 for a space
        # that enumerates in 2 s; the second chunk measures it
        ("4 s", (0.0037, 0.0001), [10, 40], "exhaustive"),
    ],
)
def test_auto_measures_growing_chunks_before_it_chooses(budget, costs, chunks, choice):
    """With a budget in time auto enumerates in chunks that grow while the measured cost
    says the rest might not fit, within 10% of the budget after the first chunk, then chooses."""
    study = Study.model_validate(
        toy_study(
            space={
                "x": {"range": [0.0, 1.0], "step": 0.001},
                "y": list(range(10)),
                "shape": ["a", "b"],
            },
            search={"algorithm": "auto", "budget": budget, "batch_size": 10},
        )
    )
    space = Space.from_study(study)
    driver = plan_search(study, space).build(None)
    auto, sizes = driver.inner, []
    for per in costs:
        batch = driver.ask().reset_index(drop=True)
        sizes.append(len(batch))
        t = pd.concat(
            [batch, ToyEvaluator().evaluate(space.with_fixed(batch)).assign(status="ok")], axis=1
        )
        driver.tell(batch, objective_matrix(t, study), violation_matrix(t, study))
        driver.observe_cost(per * len(batch), len(batch))
    assert sizes == chunks and auto.decided and auto.inner.name == choice
    assert driver.state()["inner"]["auto"]["choice"] == choice
    assert ("within the" if choice == "exhaustive" else "more than the") in driver.explain()
    next_batch = driver.ask()
    # the rest of the space in exhaustive's batches (at most MIN_BATCH), or nsga2's population
    assert len(next_batch) == (
        min(MIN_BATCH, int(space.size) - sum(sizes)) if choice == "exhaustive" else 10
    )


def test_rows_told_on_resume_without_their_time_do_not_make_auto_choose():
    """On resume the rows of a stopped batch are told with 0 s (they were evaluated before):
    taken as a cost they made 8,000 candidates of 60 ms look like 0.5 ms and chose exhaustive."""
    study = Study.model_validate(
        toy_study(
            space={
                "x": {"range": [0.0, 1.0], "step": 0.001},
                "y": list(range(10)),
                "shape": ["a", "b"],
            },
            search={"algorithm": "auto", "budget": "100 s", "batch_size": 10},
        )
    )
    driver = plan_search(study, Space.from_study(study)).build(None)
    driver.observe_cost(0.0, 20)
    assert not driver.inner.decided and driver.evaluated == 20
    driver.observe_cost(0.5 * 10, 10)  # far too slow: nsga2
    assert driver.inner.decided and driver.inner.inner.name == "nsga2" and driver.evaluated == 30
