"""Search drivers: known fronts, constraints, determinism across workers, resume from plain state."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import moocore
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from dse.checks import plan_run
from dse.errors import StoreError, StudyError
from dse.evaluators.toy import ToyEvaluator
from dse.pareto import objective_matrix, violation_matrix
from dse.search import EVALUATOR_VERDICT, available_drivers, plan_search
from dse.search.auto import AutoDriver
from dse.search.base import SearchDriver
from dse.search.nsga2 import ASKED_FILE
from dse.space import Space, candidate_keys
from dse.study import Study
from tests.conftest import TOY, toy_study

ALL = ["random", "exhaustive", "nsga2", "optuna-nsga2", "optuna-tpe"]


def _study(**overrides) -> Study:
    base = toy_study(
        space={"x": {"range": [0.0, 1.0], "step": 0.05}, "y": list(range(10)), "shape": ["a", "b"]},
        constraints=["f1 >= 0.3"],
    )  # 21 x 10 x 2 = 420 candidates
    for k, v in overrides.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return Study.model_validate(base)


def _drive(driver, study: Study, space: Space, *, batches: int | None = None) -> pd.DataFrame:
    """The real ask/tell loop with the toy evaluator in-process; every told row, in ask order."""
    ev, told = ToyEvaluator(), []
    n = 0
    while not driver.done and (batches is None or n < batches):
        batch = driver.ask().reset_index(drop=True)
        if len(batch) == 0:
            break
        table = pd.concat([batch, ev.evaluate(space.with_fixed(batch)).assign(status="ok")], axis=1)
        driver.tell(batch, objective_matrix(table, study), violation_matrix(table, study))
        told.append(table)
        n += 1
    return pd.concat(told, ignore_index=True)


def _front(table: pd.DataFrame, study: Study) -> set[str]:
    f, g = objective_matrix(table, study), violation_matrix(table, study)
    ok = (g <= 0).all(axis=1) & np.isfinite(f).all(axis=1)
    rows = table[ok].reset_index(drop=True)
    nd = moocore.is_nondominated(f[ok], keep_weakly=True)
    return set(candidate_keys(rows[nd], ["x", "y", "shape"]))


TRUE_FRONT = {
    f"{x}|0|a"
    for x in [
        "0.3",
        "0.35",
        "0.4",
        "0.45",
        "0.5",
        "0.55",
        "0.6",
        "0.65",
        "0.7",
        "0.75",
        "0.8",
        "0.85",
        "0.9",
        "0.95",
        "1",
    ]
}


def _driver(study: Study, tmp_path: Path | None = None):
    """What the runner drives: the study's driver inside its phases (search, polish)."""
    space = Space.from_study(study)
    return plan_search(study, space).build(tmp_path), space


def _inner(study: Study):
    """The study's driver alone."""
    space = Space.from_study(study)
    plan = plan_search(study, space)
    return plan.driver_cls(plan.problem, plan.options), space


def test_exhaustive_enumeration_gives_the_exact_front():
    study = _study(
        search={
            "algorithm": "exhaustive",
            "budget": 420,
            "batch_size": 50,
            "options": {"chunk": 64},
        }
    )
    driver, space = _driver(study)
    told = _drive(driver, study, space)
    assert len(told) == 420 and told["x"].nunique() == 21
    assert len(set(candidate_keys(told, space.names))) == 420
    assert _front(told, study) == TRUE_FRONT


def _drive_keys_ahead(driver, states: list) -> list[np.ndarray]:
    """The runner's loop for an enumeration (Runner._search with Runner._asked_keys): grid
    positions asked, one batch ahead where may_ask_ahead() says so, told in ask order with
    no values, the state saved (as JSON) after each tell; every told batch's keys."""
    told, flights = [], []
    while True:
        while not driver.done and (not flights or (len(flights) == 1 and driver.may_ask_ahead())):
            keys = driver.ask_keys()
            if keys is None or len(keys) == 0:
                break
            flights.append(np.array(keys))
        if not flights:
            return told
        keys = flights.pop(0)
        nan = np.full((len(keys), 1), np.nan)
        driver.tell(pd.DataFrame(index=pd.RangeIndex(len(keys))), nan, nan)
        told.append(keys)
        states.append(json.loads(json.dumps(driver.state(), allow_nan=False)))


def test_exhaustive_asks_ahead_and_resumes_a_state_with_a_batch_untold(tmp_path):
    """An enumeration asks the next grid positions while the last batch is stored and told
    (its workers do not wait between batches); a state saved then names that batch, and a
    restored driver asks the same positions again, then the rest, each once."""
    study = _study(search={"algorithm": "exhaustive", "budget": 420, "options": {"chunk": 64}})
    driver, _ = _driver(study)
    states: list = []
    told = _drive_keys_ahead(driver, states)
    assert np.array_equal(np.concatenate(told), np.arange(420))
    assert [s["untold"] for s in states] == [[64]] * 5 + [[36], []]
    assert driver.done and states[-1]["inner"]["asked"] == states[-1]["inner"]["told"] == 420
    for cut in (0, 3, 5):
        resumed, _ = _driver(study)
        resumed.restore(states[cut])
        assert not resumed.done
        rest: list = []
        again = _drive_keys_ahead(resumed, rest)
        assert np.array_equal(np.concatenate(again), np.arange(64 * (cut + 1), 420))
        assert rest[-1] == states[-1]


@pytest.mark.parametrize(
    "algo,budget,polish",
    [
        ("nsga2", 200, False),
        ("optuna-nsga2", 260, None),
        ("optuna-tpe", 260, None),
        ("nsga2", 200, None),
    ],
)
def test_search_drivers_find_the_known_front_without_repeats(algo, budget, polish):
    """Without a polish the budget buys distinct candidates; with it (nsga2's default) the run
    ends when the front is a local optimum, here the exact front, before the budget is spent."""
    study = _study(
        search={"algorithm": algo, "budget": budget, "batch_size": 20, "seed": 4, "polish": polish}
    )
    driver, space = _driver(study)
    told = _drive(driver, study, space)
    polished = polish is None and algo == "nsga2"
    assert len(set(candidate_keys(told, space.names))) == len(told)
    assert len(told) < budget if polished else len(told) == budget
    assert _front(told, study) == TRUE_FRONT
    assert driver.attributes()["front"] == ("polished" if polished else "approximate")


def test_random_search_respects_the_budget_and_finds_only_feasible_front_points():
    study = _study(search={"algorithm": "random", "budget": 300, "batch_size": 64})
    driver, space = _driver(study)
    told = _drive(driver, study, space)
    assert (
        len(told) == 300 and [len(b) for b in np.array_split(told, [64, 128, 192, 256])][-1] == 44
    )
    front = _front(told, study)
    parts = [k.split("|") for k in front]  # x|y|shape: only candidates meeting every constraint
    assert front and all(float(x) >= 0.3 and not (s == "b" and int(y) > 8) for x, y, s in parts)
    assert (
        len(front & TRUE_FRONT) >= 3
    )  # about half the front is sampled at all: 1 - (419/420)**300
    again, _ = _driver(study)
    pd.testing.assert_frame_equal(_drive(again, study, space), told)  # seeded


@pytest.mark.parametrize("algo", ["nsga2", "optuna-nsga2", "optuna-tpe"])
def test_mixed_continuous_space_with_infeasible_and_failed_rows(algo):
    """A real-valued x, evaluator infeasibility (shape b, y > 8), NaN objectives: the driver
    keeps going and what it finds on the front is feasible and near the true front."""
    study = _study(
        space={"x": {"range": [0.0, 1.0]}, "y": list(range(10)), "shape": ["a", "b"]},
        search={"algorithm": algo, "budget": 240, "batch_size": 24, "seed": 1},
    )
    driver, space = _driver(study)
    ev, n = ToyEvaluator(), 0
    found = []
    while not driver.done:
        batch = driver.ask().reset_index(drop=True)
        table = pd.concat([batch, ev.evaluate(space.with_fixed(batch)).assign(status="ok")], axis=1)
        f, g = objective_matrix(table, study), violation_matrix(table, study)
        f[table["x"].to_numpy() > 0.97] = np.nan  # "failed" rows
        g[table["x"].to_numpy() > 0.97, -1] = 1.0
        driver.tell(batch, f, g)
        found.append(table.assign(failed=table["x"] > 0.97))
        n += len(batch)
    told = pd.concat(found, ignore_index=True)
    assert (
        n == 240
        and told["x"].between(0, 1).all()
        and len(set(candidate_keys(told, space.names))) == 240
    )
    ok = told[~told["failed"] & (told["x"] >= 0.3) & ~((told["shape"] == "b") & (told["y"] > 8))]
    f = objective_matrix(ok, study)
    front = ok[moocore.is_nondominated(f)]
    # most of the front is found on the true front (y = 0, shape a)
    assert ((front["y"] == 0) & (front["shape"] == "a")).mean() >= 0.8 and len(front) >= 5


@pytest.mark.parametrize("algo", ALL)
def test_state_is_json_and_a_restored_driver_asks_the_same_next_batches(algo, tmp_path):
    study = _study(
        search={
            "algorithm": algo,
            "budget": 420 if algo == "exhaustive" else 300,
            "batch_size": 20,
            "seed": 7,
            "options": {"chunk": 20} if algo == "exhaustive" else {},
        }
    )
    first, space = _driver(study, tmp_path / "a")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    _drive(first, study, space, batches=3)
    saved = json.loads(json.dumps(first.state(), allow_nan=False))
    first.ask()  # a batch in flight when the run "crashes": asked, never told
    resumed, _ = _driver(study, tmp_path / "a")
    resumed.restore(saved)
    reference, _ = _driver(study, tmp_path / "b")
    _drive(reference, study, space, batches=3)
    for _ in range(2):
        a, b = resumed.ask(), reference.ask()
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
        for d, batch in ((resumed, a), (reference, b)):
            t = pd.concat(
                [
                    batch.reset_index(drop=True),
                    ToyEvaluator().evaluate(space.with_fixed(batch)).assign(status="ok"),
                ],
                axis=1,
            )
            d.tell(batch, objective_matrix(t, study), violation_matrix(t, study))
    assert resumed.asked == reference.asked
    assert (
        resumed.asked == 100 or resumed.state()["phase"] == "polish"
    )  # polish batches are smaller


def _dashboard_study(storage) -> dict | None:
    """What optuna-dashboard's own server answers for the journal's only study (its
    ``/api/studies/<id>`` JSON, called through its WSGI app); None without optuna-dashboard."""
    import io

    try:
        from optuna_dashboard._app import create_app
    except ImportError:
        return None
    app = create_app(storage)

    def get(path: str) -> dict:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "wsgi.input": io.BytesIO(),
            "wsgi.url_scheme": "http",
        }
        status: list[str] = []
        body = b"".join(app(environ, lambda s, h, *_: status.append(s)))
        assert status[0].startswith("200"), (path, status, body[:300])
        return json.loads(body)

    (summary,) = get("/api/studies")["study_summaries"]
    return get(f"/api/studies/{summary['study_id']}")


def test_optuna_journal_holds_each_evaluation_once_with_named_constraints_and_grid_values(
    tmp_path,
):
    """The journal as optuna and optuna-dashboard read it: a complete trial per distinct
    evaluation (repeats failed, naming the trial they repeat), constraints in the list the
    dashboard reads and by name, infeasible trials dominated (out of "Best Trials"), and the
    grid's own parameter values (0.15, not 0.15000000000000002)."""
    import optuna
    from optuna.trial import TrialState

    # 8 x 2 = 16 candidates, all asked: the sampler repeats itself near the end
    study = _study(
        space={"x": {"range": [0.2, 0.55], "step": 0.05}, "y": [0], "shape": ["a", "b"]},
        search={"algorithm": "optuna-tpe", "budget": 16, "batch_size": 8, "seed": 2},
    )
    driver, space = _driver(study, tmp_path)
    told = _drive(driver, study, space)
    names = [str(c) for c in study.constraints] + [EVALUATOR_VERDICT]
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "optuna.journal"))
    )
    stored = optuna.load_study(study_name="toy", storage=storage)  # the dse study's name
    assert stored.metric_names == ["f1", "f2"] and stored.user_attrs["constraints"] == names
    trials = stored.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(complete) + len(failed) == len(trials) and failed  # repeats happened, and only
    keys = candidate_keys(pd.DataFrame([t.params for t in complete]), space.names)
    assert len(keys) == len(set(keys)) == len(set(candidate_keys(told, space.names))) == 16
    for t in failed:  # a repeat names a complete trial with the same parameters
        first = trials[t.user_attrs["duplicate_of"]]
        assert first.state == TrialState.COMPLETE and first.params == t.params
    # constraints: optuna's list (what the dashboard reads), and each by name
    told_keys = candidate_keys(told, space.names)
    rows = dict(zip(told_keys, violation_matrix(told, study).tolist(), strict=True))
    values = dict(zip(told_keys, objective_matrix(told, study).tolist(), strict=True))
    for t, key in zip(complete, keys, strict=True):
        assert t.system_attrs["constraints"] == rows[key]
        assert list(t.constraints.values()) == rows[key]  # optuna reads it, each once
        assert [t.user_attrs[f"constraint: {n}"] for n in names] == rows[key]
        feasible = max(rows[key]) <= 0
        assert (t.values == values[key]) == feasible  # an infeasible trial: the worst values
        if not feasible:
            assert [t.user_attrs[m] for m in ("f1", "f2")] == values[key]
    assert any(max(r) > 0 for r in rows.values())  # some infeasible ones
    # exact grid values: the study's decimals, where optuna's 0.2 + k * 0.05 is not one
    written = {f"{0.2 + k * 0.05:.2f}".rstrip("0") for k in range(8)}
    noisy = {repr(0.2 + k * 0.05) for k in range(8)} - written  # 0.30000000000000004, ...
    assert noisy and {repr(t.params["x"]) for t in complete} == written
    assert all(repr(t.params["x"]) in written for t in trials)
    best = {k for t, k in zip(complete, keys, strict=True) if t in stored.best_trials}
    assert best == _front(told, study)  # optuna's best trials: dse's front

    dashboard = _dashboard_study(storage)
    if dashboard is None:
        pytest.skip("optuna-dashboard is not installed (pip install 'dse[optuna-dashboard]')")
    states = [t["state"] for t in dashboard["trials"]]
    assert states.count("Complete") == 16 and states.count("Fail") == len(failed)
    assert all(t["constraints"] for t in dashboard["trials"] if t["state"] == "Complete")
    shown = {t["number"] for t in dashboard["best_trials"]}
    assert shown == {t.number for t in complete if t in stored.best_trials}  # "Best Trials"
    assert all(max(t["constraints"]) <= 0 for t in dashboard["best_trials"])
    shown_x = {p["param_external_value"] for t in dashboard["trials"] for p in t["params"]}
    assert written <= shown_x and not noisy & shown_x
    attrs = {a["key"] for a in dashboard["union_user_attrs"]}
    assert {f"constraint: {n}" for n in names} | {"duplicate_of"} <= attrs


def test_auto_enumerates_spaces_that_fit_the_budget_and_uses_nsga2_otherwise():
    small = _study(search={"algorithm": "auto", "budget": 420})
    big = _study(search={"algorithm": "auto", "budget": 419})
    for study, chosen in ((small, "exhaustive"), (big, "nsga2")):
        plan = plan_search(study, Space.from_study(study))
        assert plan.driver_cls is AutoDriver and AutoDriver.chosen(plan.problem).name == chosen
        assert plan.description.startswith(f"auto → {chosen}")
        assert plan.build(None).inner.inner.name == chosen
        assert ("+ polish" in plan.description) == (chosen == "nsga2")
    assert plan_search(small, Space.from_study(small)).total == 420
    ahead = _study(search={"algorithm": "auto", "budget": 419, "options": {"ask_ahead": True}})
    plan = plan_search(ahead, Space.from_study(ahead))
    assert plan.description.startswith("auto → nsga2, asking ahead")
    driver, plain = plan.build(None), plan_search(big, Space.from_study(big)).build(None)
    driver.ask(), plain.ask()
    assert driver.may_ask_ahead() and not plain.may_ask_ahead()  # NSGA-II's option, passed on
    assert {
        "auto",
        "random",
        "exhaustive",
        "nsga2",
        "optuna-nsga2",
        "optuna-tpe",
        "optuna-gp",
    } <= set(available_drivers())


def test_optuna_gp_says_what_is_missing():
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    study = _study(search={"algorithm": "optuna-gp"})
    with pytest.raises(StudyError, match="needs torch"):
        _driver(study)


def test_optuna_tpe_asks_ahead_only_with_its_constant_liar_and_says_so(tmp_path):
    """Without the constant liar TPE would sample the next batch blind to the one still
    evaluated: refused by dse validate as by dse run (exit 2, the field named); with it the
    search's description says it asks ahead."""
    from tests.conftest import run_cli, write_study

    bad = {"ask_ahead": True, "constant_liar": False}
    study = toy_study(search={"algorithm": "optuna-tpe", "budget": 40, "options": bad})
    path = write_study(tmp_path, study)
    for command in ("validate", "run"):
        proc = run_cli(command, str(path))
        assert proc.returncode == 2, proc.stderr
        assert "search.options.ask_ahead" in proc.stderr and "constant liar" in proc.stderr
    good = _study(search={"algorithm": "optuna-tpe", "options": {"ask_ahead": True}})
    assert "asking ahead" in _driver(good)[0].explain()


def test_same_candidates_and_front_whatever_the_worker_count(tmp_path):
    """The real runner on real dask clusters of 1 and 2 workers; chunks finish in any order."""
    from dse.runner import Runner

    results = []
    for workers in (1, 2):
        # NSGA-II for 40 evaluations, then the polish finds the whole front (a local optimum)
        study = _study(
            search={"algorithm": "nsga2", "budget": 200, "batch_size": 40, "seed": 5},
            execution={"workers": workers, "chunk_size": 7},
        )
        out = tmp_path / f"w{workers}"
        res = Runner(plan_run(study), out).start()
        with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as ds:
            front = sorted(
                candidate_keys(ds[["x", "y", "shape"]].to_dataframe(), ["x", "y", "shape"])
            )
            assert bool(ds["meets_constraints"].all()) and float(ds["f1"].min()) >= 0.3
        ev = res.evaluations.sort_values(["batch", "key"])
        results.append((ev[["batch", "key"]].to_numpy().tolist(), front, res.history))
    (ev1, front1, hist1), (ev2, front2, hist2) = results
    assert ev1 == ev2 and 40 < len(ev1) < 200
    assert front1 == front2 and set(front1) == TRUE_FRONT
    assert [h.hypervolume for h in hist1] == [h.hypervolume for h in hist2]
    assert hist1[-1].front_size == len(front1) and hist1[-1].feasible > 0


def _plain(x) -> bool:
    """Only JSON's own types (no numpy scalars, no bytes, no NaN)."""
    if isinstance(x, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in x.items())
    if isinstance(x, list):
        return all(_plain(v) for v in x)
    if isinstance(x, float):
        return bool(np.isfinite(x))
    return x is None or isinstance(x, (str, int, bool))


def test_nsga2_state_is_bounded_plain_data_and_a_restored_run_ends_on_the_same_front():
    """The state is the population, not the history: apart from the record of asked candidates
    it does not grow with the generations; after json.dumps/json.loads it restores a driver
    that asks exactly what the uninterrupted one asks, to the same final front."""
    study = _study(search={"algorithm": "nsga2", "budget": 300, "batch_size": 20, "seed": 3})
    reference, space = _inner(study)
    states = [json.loads(json.dumps(reference.state(), allow_nan=False))]
    told = []
    while not reference.done:
        told.append(_drive(reference, study, space, batches=1))
        states.append(json.loads(json.dumps(reference.state(), allow_nan=False)))
    told = pd.concat(told, ignore_index=True)
    assert len(states) == 16 and all(_plain(s) for s in states)
    assert all(s.keys() == states[0].keys() for s in states)
    for g, s in enumerate(states):
        assert s["generation"] == g and len(s["asked_candidates"]) == s["asked"] == 20 * g
        assert (
            len(s["population"]["X"])
            == len(s["population"]["F"])
            == len(s["population"]["G"])
            == (20 if g else 0)
        )
    rest = [
        len(json.dumps({k: v for k, v in s.items() if k != "asked_candidates"})) for s in states[1:]
    ]
    assert max(rest) < 1.5 * min(rest)  # bounded: one population whatever the generation

    for cut in (0, 1, 7):  # before the first batch, after it, mid-run
        resumed, _ = _inner(study)
        resumed.restore(json.loads(json.dumps(states[cut])))
        rest_told = _drive(resumed, study, space)
        pd.testing.assert_frame_equal(rest_told, told.iloc[20 * cut :].reset_index(drop=True))
        assert resumed.state() == states[-1]
    assert _front(told, study) == TRUE_FRONT


def _inner_in(study: Study, folder: Path):
    """The study's driver alone, keeping its files in ``folder`` (as in a results folder)."""
    space = Space.from_study(study)
    plan = plan_search(study, space)
    return plan.driver_cls(replace(plan.problem, work_dir=folder), plan.options), space


def test_nsga2_in_a_results_folder_saves_a_state_of_constant_size_and_resumes_from_it(tmp_path):
    """In a results folder the asked record is appended to nsga2-asked.f64 and the state only
    counts its rows: every saved state has the size of one population, late as early. A
    restore from any saved state asks what the uninterrupted run asks, also when the file
    holds rows of a batch whose state was never saved (a run killed between the two)."""
    study = _study(search={"algorithm": "nsga2", "budget": 300, "batch_size": 20, "seed": 3})
    plain, space = _inner(study)  # the same search without a folder: its record in the state
    told_plain = _drive(plain, study, space)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ASKED_FILE).write_bytes(b"stale bytes of an earlier run")
    reference, _ = _inner_in(study, folder)
    states, told, files = [json.loads(json.dumps(reference.state()))], [], []
    files.append((folder / ASKED_FILE).read_bytes())
    while not reference.done:
        told.append(_drive(reference, study, space, batches=1))
        states.append(json.loads(json.dumps(reference.state(), allow_nan=False)))
        files.append((folder / ASKED_FILE).read_bytes())
    told = pd.concat(told, ignore_index=True)
    pd.testing.assert_frame_equal(told, told_plain)  # the record's place changes nothing asked
    assert files[0] == b""  # a new run's file starts empty
    assert all("asked_candidates" not in s and s["asked_file"] == ASKED_FILE for s in states)
    sizes = [len(json.dumps(s)) for s in states[1:]]
    assert max(sizes) < 1.2 * min(sizes)  # one population whatever the generation
    asked = np.frombuffer(files[-1], "<f8").reshape(-1, 3)
    assert len(asked) == states[-1]["asked_rows"] == 300
    assert len(set(candidate_keys(told, space.names))) == 300

    for cut in (0, 1, 7):
        # the killed run had appended the next batch's rows, but not saved its state
        (folder / ASKED_FILE).write_bytes(files[cut + 1] if cut + 1 < len(files) else files[cut])
        resumed, _ = _inner_in(study, folder)
        resumed.restore(json.loads(json.dumps(states[cut])))
        rest_told = _drive(resumed, study, space)
        pd.testing.assert_frame_equal(rest_told, told.iloc[20 * cut :].reset_index(drop=True))
        assert resumed.state() == states[-1]
        assert (folder / ASKED_FILE).read_bytes() == files[-1]

    # a state from before the file (its record a list) resumes, and the file is written anew
    (folder / ASKED_FILE).unlink()
    listed, _ = _inner_in(study, folder)
    old = {**states[7], "asked_candidates": asked[: states[7]["asked_rows"]].tolist()}
    del old["asked_file"], old["asked_rows"]
    listed.restore(old)
    pd.testing.assert_frame_equal(
        _drive(listed, study, space), told.iloc[140:].reset_index(drop=True)
    )
    assert listed.state() == states[-1] and (folder / ASKED_FILE).read_bytes() == files[-1]

    (folder / ASKED_FILE).write_bytes(files[3])  # shorter than the state says: damaged
    with pytest.raises(StoreError, match="holds 60 of the 140 candidates"):
        _inner_in(study, folder)[0].restore(states[7])


def test_nsga2_converts_a_state_saved_in_the_earlier_history_layout():
    """States saved before the plain-data population (every told batch, replayed on restore)
    still resume: the population is re-selected from everything told, nothing is asked twice."""
    study = _study(search={"algorithm": "nsga2", "budget": 200, "batch_size": 20, "seed": 2})
    first, space = _inner(study)
    told = _drive(first, study, space, batches=4)
    f, g = objective_matrix(told, study), violation_matrix(told, study)
    f[:5] = np.nan  # failed rows are stored as null
    X = np.array(first.state()["asked_candidates"], float)
    rows = lambda a: [[None if not np.isfinite(v) else float(v) for v in r] for r in a]  # noqa: E731
    old = {
        "driver": "nsga2",
        "asked": 80,
        "told": 80,
        "generation": 4,
        "exhausted": False,
        "pop_size": 20,
        "batches": [
            {"X": X[i : i + 20].tolist(), "F": rows(f[i : i + 20]), "G": rows(g[i : i + 20])}
            for i in range(0, 80, 20)
        ],
    }
    resumed, _ = _inner(study)
    resumed.restore(json.loads(json.dumps(old)))
    state = resumed.state()
    assert state["generation"] == 4 and state["asked"] == 80 and len(state["population"]["X"]) == 20
    rest = _drive(resumed, study, space)
    assert len(rest) == 120
    assert len(set(candidate_keys(pd.concat([told, rest]), space.names))) == 200


def test_optuna_takes_over_the_journal_lock_a_killed_run_left(tmp_path, monkeypatch):
    """A run killed inside optuna's journal write leaves its lock, a symbolic link; a
    relative one (the results folder given as a relative path) dangles. The next run of the
    folder (resume) takes the journal at once instead of waiting forever."""
    import signal

    monkeypatch.chdir(tmp_path)
    Path("out").mkdir()
    study = _study(search={"algorithm": "optuna-tpe", "budget": 40, "batch_size": 20})
    driver, space = _driver(study, Path("out"))
    _drive(driver, study, space, batches=1)
    lock = Path("out/optuna.journal.lock")
    lock.symlink_to("out/optuna.journal")  # as optuna links it for a relative path: dangling
    assert not lock.exists()

    def waited_too_long(*_):
        raise TimeoutError("the journal lock was not taken over within 30 s")

    previous = signal.signal(signal.SIGALRM, waited_too_long)
    signal.alarm(30)
    try:
        again, _ = _driver(study, Path("out"))
        again.restore(driver.state())
        assert len(again.ask()) == 20
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not lock.is_symlink()


def test_optuna_takes_a_seed_beyond_32_bits():
    """numpy's legacy seeding, which optuna's samplers use, takes seeds below 2^32 only."""
    study = _study(
        search={"algorithm": "optuna-tpe", "budget": 40, "batch_size": 20, "seed": 2**64 + 7}
    )
    driver, space = _driver(study)
    assert len(_drive(driver, study, space, batches=1)) == 20


def test_an_optuna_storage_that_cannot_be_opened_is_one_clear_error():
    study = _study(
        search={
            "algorithm": "optuna-tpe",
            "budget": 40,
            "batch_size": 20,
            "options": {"storage": "nonsense://x"},
        }
    )
    with pytest.raises(
        StudyError, match=r"search\.options\.storage: not a database URL optuna can open"
    ):
        plan_search(study, Space.from_study(study))
    study = _study(
        search={
            "algorithm": "optuna-tpe",
            "budget": 40,
            "batch_size": 20,
            "options": {"storage": "sqlite:////proc/no/such/folder/study.db"},
        }
    )
    with pytest.raises(
        StudyError,
        match=r"search\.options\.storage: the folder of the sqlite database "
        r"/proc/no/such/folder/study.db does not exist",
    ):
        plan_search(study, Space.from_study(study))  # dse validate refuses it too
    study = _study(
        search={
            "algorithm": "optuna-tpe",
            "budget": 40,
            "batch_size": 20,
            "options": {"storage": "sqlite:////proc/study.db"},
        }
    )  # a folder sqlite cannot write
    driver, _ = _driver(study)  # the database is opened with the first batch
    with pytest.raises(
        StudyError, match=r"search\.options\.storage: cannot open the optuna storage sqlite:"
    ):
        driver.ask()


def test_a_new_run_refuses_an_optuna_study_name_its_database_holds_before_touching_the_folder(
    tmp_path,
):
    from tests.conftest import run_cli, write_study

    out = tmp_path / "out"
    study = write_study(
        tmp_path,
        toy_study(
            output=str(out),
            search={
                "algorithm": "optuna-tpe",
                "budget": 10,
                "batch_size": 5,
                "options": {
                    "storage": f"sqlite:///{tmp_path / 'studies.db'}",
                    "study_name": "mine",
                },
            },
        ),
    )
    assert run_cli("run", str(study), "-q").returncode == 0
    before = sorted(p.name for p in out.iterdir())
    for command in ("validate", "run"):
        proc = run_cli(command, str(study), "--overwrite", *(["-q"] if command == "run" else []))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert (
            f"error: {study}: search.options.study_name: optuna study 'mine' already exists in sqlite:///"
            in proc.stderr
        ), proc.stderr
    assert sorted(p.name for p in out.iterdir()) == before and (out / "pareto.nc").is_file()
    assert "evaluations 10" in run_cli("status", str(out)).stdout


def test_a_feasible_row_without_a_finite_objective_is_ruled_out_under_that_objective():
    from dse.pareto import RunningFront, ruled_out, summarize

    study = Study.model_validate(toy_study(constraints=["f_sum <= 1.5"]))
    table = pd.DataFrame(
        {
            "f1": [0.1, np.nan, 0.3, 0.2],
            "f2": [0.9, 0.5, np.inf, 0.8],
            "f_sum": [1.0, 0.5, 1.2, 1.9],
            "feasible": True,
            "reason": "",
            "status": "ok",
            "error": "",
        }
    )
    assert ruled_out(table, study) == {
        "objective f1: no finite value": 1,
        "objective f2: no finite value": 1,
        "constraint f_sum <= 1.5": 1,
    }
    assert summarize(table, study).contenders.tolist() == [0]  # what a chunk offers the front
    front = RunningFront(study)
    assert front.update(table).tolist() == [True, False, False, False]
    assert front.feasible == 1 and front.rows["f1"].tolist() == [0.1]


@pytest.mark.parametrize("algo", ["optuna-tpe", "optuna-nsga2"])
def test_optuna_can_ask_the_top_value_of_a_decimal_grid(algo, tmp_path):
    import warnings

    # 0.7 - 0.6 is 0.09999999999999998 in binary: as a step, optuna lowered the top to 0.9
    space = {"x": {"range": [0.6, 1.0], "step": 0.1}, "y": [0, 1], "shape": ["a"]}
    study = Study.model_validate(
        toy_study(
            space=space, search={"algorithm": algo, "budget": 20, "batch_size": 10, "seed": 5}
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # optuna warns where it changes a distribution's range
        driver = plan_search(study, Space.from_study(study)).build(tmp_path)
        asked = driver.ask()
        distributions = driver.inner._distributions()
    assert distributions["x"].high == 1.0
    assert set(asked["x"]) <= {0.6, 0.7, 0.8, 0.9, 1.0}


def test_a_search_that_found_nothing_feasible_says_so_not_that_the_polish_ran_short(tmp_path):
    from tests.conftest import run_cli, write_study

    out = tmp_path / "out"
    study = toy_study(
        output=str(out),
        constraints=["f1 <= -1"],  # no preview: the run meets it
        evaluator={"name": TOY, "options": {"preview": False}},
        search={"algorithm": "nsga2", "budget": 40, "batch_size": 20, "polish": {"enabled": True}},
    )
    proc = run_cli("run", str(write_study(tmp_path, study)), "-q")
    assert proc.returncode == 2 and "no feasible candidate" in proc.stderr, proc.stderr
    status = run_cli("status", str(out))
    assert "nothing to polish" in status.stdout and "phase done" in status.stdout, status.stdout
    assert "hypervolume - (no front yet)" in status.stdout  # no front, so no frame to measure in
    assert "before the polish reached" not in status.stdout


@pytest.mark.parametrize(
    "search",
    [
        {"algorithm": "optuna-tpe", "budget": 1000, "batch_size": 20},
        {"algorithm": "random", "budget": 1000, "batch_size": 20},
        {"algorithm": "random", "budget": "30 s", "batch_size": 4},
        {"algorithm": "nsga2", "budget": 50, "batch_size": 8},
    ],
    ids=["optuna-tpe", "random", "random-in-time", "nsga2"],
)
def test_a_search_ends_when_every_candidate_of_the_space_is_evaluated(tmp_path, search):
    """A sampling driver would ask repeats until its budget (a budget in time: until the
    time is spent; it used to stop at the space's size in draws, repeats included); every
    candidate evaluated ends the search, recorded as finished with the exact front."""
    from tests.conftest import run_cli, write_study

    out = tmp_path / "out"
    study = toy_study(
        output=str(out),
        space={"x": [0.1, 0.5, 0.9], "y": [0, 9], "shape": ["a", "b"]},
        search=search,
    )  # 12 candidates
    checked = run_cli("validate", str(write_study(tmp_path, study)))
    assert "12 evaluations at most: the whole space" in " ".join(checked.stdout.split()), (
        checked.stdout
    )
    proc = run_cli("run", str(write_study(tmp_path, study)), "-q")
    assert proc.returncode == 0, proc.stderr
    state = json.loads((out / "state.json").read_text())
    assert state["finished"] is True
    assert sum(h["evaluations"] for h in state["history"][-1:]) == 12
    assert (
        len(state["history"]) <= 2 or search["algorithm"] != "optuna-tpe"
    )  # no batches of repeats
    status = run_cli("status", str(out)).stdout
    assert (
        "finished" in status.splitlines()[0]
        and "front exact: every candidate of the space was evaluated" in status
    )
    with xr.open_dataset(out / "pareto.nc") as ds:
        assert ds.attrs["front"] == "exact"


class _NoName(SearchDriver):  # a plug-in that forgot its name
    def ask(self):
        return pd.DataFrame()

    def tell(self, candidates, objectives, violations):
        pass


class _TooMany(SearchDriver):  # a plug-in that asks past the budget
    name = "too-many"

    def ask(self):
        return self.space.sample(np.random.default_rng(0), 1000)

    def tell(self, candidates, objectives, violations):
        pass


def test_a_plugin_driver_without_a_name_or_past_its_budget_is_one_line_naming_the_file(tmp_path):
    from tests.conftest import run_cli, write_study

    for cls, command, expected in (
        (
            "_NoName",
            "validate",
            "search.algorithm: search driver class _NoName does not set `name`",
        ),
        ("dse.search.base:SearchDriver", "validate", "does not set `name`"),
        (
            "_TooMany",
            "run",
            "search driver 'tests.test_search:_TooMany' asked 1,000 candidates with 20 left "
            "of the budget of 20 evaluations",
        ),
    ):  # dse's check, not the driver, raised
        name = cls if ":" in cls else f"tests.test_search:{cls}"
        study = write_study(
            tmp_path,
            toy_study(output=str(tmp_path / "out"), search={"algorithm": name, "budget": 20}),
        )
        proc = run_cli(command, str(study), "--overwrite")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"error: {study}: " in proc.stderr and expected in proc.stderr, proc.stderr
        assert "phases.py" not in proc.stderr


@pytest.mark.parametrize("algo", ["optuna-tpe", "optuna-nsga2"])
def test_optuna_asks_every_candidate_once_and_stops_when_the_budget_exceeds_the_space(
    algo, tmp_path
):
    """66 candidates, a budget of 100: the samplers soon repeat themselves; each slot they
    cannot fill gets an unasked candidate, and the run ends when none is left, with the
    exact front (before: 80 asked, 14 of them repeats counted against the budget)."""
    from dse.api import run

    # 66 = 3 batches of 22: the last candidate fills the last slot of a batch, and the driver
    # is done then, so that batch is handed to optuna too (the review found it left RUNNING)
    study = Study.model_validate(
        toy_study(search={"algorithm": algo, "budget": 100, "seed": 5, "batch_size": 22})
    )
    result = run(study, tmp_path / "out")
    table = result.evaluations
    keys = candidate_keys(table, ["x", "y", "shape"])
    assert len(keys) == len(set(keys)) == 66  # every candidate, each once
    assert result.labels["front"] == "exact"
    state = json.loads((tmp_path / "out" / "state.json").read_text())
    assert state["driver"]["asked"] == 66  # the budget's last 34 are not spent on repeats
    import optuna

    stored = optuna.load_study(
        study_name="toy",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(tmp_path / "out" / "optuna.journal"))
        ),
    )
    trials = stored.get_trials()
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 66 and not any("duplicate_of" in t.user_attrs for t in complete)
    assert all(  # the rest are repeats, failed
        "duplicate_of" in t.user_attrs for t in trials if t.state == optuna.trial.TrialState.FAIL
    )
    assert len(trials) == 66 + sum(t.state == optuna.trial.TrialState.FAIL for t in trials)


def test_an_optuna_run_stopped_before_its_first_batch_resumes(tmp_path):
    """The run's state is saved before the optuna study exists (its first ask creates it):
    a run stopped while its cluster never came resumes (before: KeyError 'Record does not
    exist.' as a traceback, though the run's message said to resume)."""
    from tests.conftest import run_cli, write_study

    out = tmp_path / "out"
    study = write_study(
        tmp_path,
        toy_study(
            output=str(out),
            search={"algorithm": "optuna-tpe", "budget": 30},
            execution={
                "workers": None,
                "scheduler": "tcp://127.0.0.1:1",
                "grace_s": 1,
                "start_timeout_s": 1,
            },
        ),
    )
    first = run_cli("run", str(study), "--quiet")
    assert first.returncode == 2 and "0 evaluations are stored" in first.stderr, first.stderr
    resumed = run_cli("resume", str(out), "--workers", "0", "--quiet")
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    assert json.loads((out / "state.json").read_text())["driver"]["asked"] == 30


def test_running_front_of_arrow_chunks_is_the_front_of_their_tables():
    """Chunks folded as Arrow tables (as the workers send their contenders) give the rows a
    front of DataFrames gives, in the order they joined, and drop the rows a later chunk
    dominates."""
    import pyarrow as pa

    from dse.pareto import RunningFront, summarize

    study = Study.model_validate(toy_study())
    rng = np.random.default_rng(3)
    tables = [
        pd.DataFrame(
            {
                "f1": rng.random(50),
                "f2": rng.random(50),
                "feasible": rng.random(50) > 0.2,
                "reason": "",
                "status": "ok",
                "error": "",
                "key": np.arange(50) + 50 * i,
            }
        )
        for i in range(6)
    ]
    by_frame, by_arrow = RunningFront(study), RunningFront(study)
    for t in tables:
        by_frame.update(t)
        chunk = summarize(t, study)
        contenders = pa.Table.from_pandas(t.iloc[chunk.contenders], preserve_index=False)
        by_arrow.fold(chunk, lambda mask, c=contenders: c.filter(pa.array(mask)))
    assert len(by_arrow.rows) == len(by_arrow.f) == len(by_frame.f)
    pd.testing.assert_frame_equal(by_arrow.rows, by_frame.rows.reset_index(drop=True))
    from dse.pareto import feasible_mask

    everything = pd.concat(tables, ignore_index=True)
    ok = everything[feasible_mask(everything, study)]
    nd = moocore.is_nondominated(objective_matrix(ok, study), keep_weakly=True)
    assert sorted(by_arrow.rows["key"]) == sorted(ok["key"][nd])
    np.testing.assert_array_equal(by_arrow.sorted_rows()["key"], by_frame.sorted_rows()["key"])


def test_an_optuna_nsga2_ask_does_not_read_every_trial_of_the_study():
    """A generation's cost must not grow with the trials so far: after the first batches,
    the driver's ask (and the sampler's search space, NSGA-II's generations and parents)
    never lists every trial of the storage. (TPE's model reads them all by design.)"""
    study = _study(
        space={"x": {"range": [0.0, 1.0]}, "y": list(range(10)), "shape": ["a", "b"]},
        search={"algorithm": "optuna-nsga2", "budget": 200, "batch_size": 20, "seed": 3},
    )
    driver, space = _inner(study)
    _drive(driver, study, space, batches=5)
    storage = driver.study._storage
    listed: list[object] = []
    read_all = storage.get_all_trials

    def counting(study_id, deepcopy=True, states=None):
        listed.append(states)
        return read_all(study_id, deepcopy=deepcopy, states=states)

    storage.get_all_trials = counting
    _drive(driver, study, space, batches=2)
    assert listed == []


def _drive_ahead(
    driver, study: Study, space: Space, states: list | None = None, snapshot=None
) -> pd.DataFrame:
    """The runner's loop where the driver asks ahead (Runner._search): the next batch is
    asked while one is untold where may_ask_ahead() says so, tells come in ask order, the
    state is saved (as JSON) after each tell; every told row, in tell order. ``snapshot(at)``
    is called after each round of asks (``"asked"``), after each tell (``"told"``) and after
    the state is saved (``"saved"``)."""
    ev, told, flights = ToyEvaluator(), [], []
    while True:
        while not driver.done and (not flights or (len(flights) == 1 and driver.may_ask_ahead())):
            batch = driver.ask().reset_index(drop=True)
            if len(batch) == 0:
                break
            flights.append(batch)
        if snapshot is not None:
            snapshot("asked")
        if not flights:
            return pd.concat(told, ignore_index=True)
        batch = flights.pop(0)
        table = pd.concat([batch, ev.evaluate(space.with_fixed(batch)).assign(status="ok")], axis=1)
        driver.tell(batch, objective_matrix(table, study), violation_matrix(table, study))
        told.append(table)
        if snapshot is not None:
            snapshot("told")
        if states is not None:
            rows = sum(len(t) for t in told)
            states.append((json.loads(json.dumps(driver.state(), allow_nan=False)), rows))
        if snapshot is not None:
            snapshot("saved")


def test_nsga2_asking_ahead_is_deterministic_and_resumes_from_a_state_with_a_batch_untold(
    tmp_path,
):
    """search.options.ask_ahead: the next generation is asked while the last is untold (bred
    from what was told: one generation's lag). Each saved state names the batch asked and not
    told; a driver restored from it asks that batch again first, then exactly what the
    uninterrupted run asks, to the same front. Nothing is asked twice."""
    study = _study(
        search={
            "algorithm": "nsga2",
            "budget": 300,
            "batch_size": 20,
            "seed": 3,
            "options": {"ask_ahead": True},
        }
    )
    folder = tmp_path / "run"
    folder.mkdir()
    reference, space = _driver(study, folder)
    states: list = []
    told = _drive_ahead(reference, study, space, states)
    assert len(set(candidate_keys(told, space.names))) == len(told) == reference.asked
    untold = [s["inner"]["untold"] for s, _ in states]
    assert untold[0] == [20] and untold[-1] == []  # asked ahead, and nothing left in the end
    assert all(s["untold"] == s["inner"]["untold"] for s, _ in states if s["phase"] == "search")
    assert _front(told, study) == TRUE_FRONT  # with the polish, as without asking ahead

    again, _ = _driver(study, tmp_path / "again")  # the same sequence, whatever else ran
    (tmp_path / "again").mkdir()
    pd.testing.assert_frame_equal(_drive_ahead(again, study, space), told)
    plain, _ = _driver(_study(search={**study.search.model_dump(), "options": {}}), None)
    assert not _drive_ahead(plain, study, space).equals(told)  # a lag changes what is bred

    for cut in (0, 1, 4):
        state, rows = states[cut]
        resumed, _ = _driver(study, folder)
        resumed.restore(json.loads(json.dumps(state)))
        assert not resumed.done
        rest = _drive_ahead(resumed, study, space)
        pd.testing.assert_frame_equal(rest, told.iloc[rows:].reset_index(drop=True))
        assert resumed.state() == states[-1][0]


def test_random_asks_ahead_and_resumes_from_a_state_with_a_batch_untold(tmp_path):
    """Random draws do not depend on what is told: the next batch is asked while the last is
    evaluated, the same draws as one batch at a time; a state saved with a batch asked and
    not told gives a driver that draws it again, then the rest, as the uninterrupted run."""
    study = _study(search={"algorithm": "random", "budget": 130, "batch_size": 20, "seed": 5})
    reference, space = _driver(study)
    states: list = []
    told = _drive_ahead(reference, study, space, states)
    plain, _ = _driver(study)
    pd.testing.assert_frame_equal(told, _drive(plain, study, space))  # the same draws
    assert [s["untold"] for s, _ in states] == [[20]] * 5 + [[10], []]
    for cut in (0, 2, 5):
        state, rows = states[cut]
        resumed, _ = _driver(study)
        resumed.restore(json.loads(json.dumps(state)))
        rest = _drive_ahead(resumed, study, space)
        pd.testing.assert_frame_equal(rest, told.iloc[rows:].reset_index(drop=True))
        assert resumed.state() == states[-1][0]


def test_optuna_tpe_asking_ahead_is_deterministic_and_resumes_from_a_state_with_a_batch_untold(
    tmp_path,
):
    """optuna-tpe's ask_ahead: the next batch is sampled while the last is untold (its trials
    running, the constant liar's pending points). Each saved state names the trials asked and
    not told; restored from it with the journal as it was then, as a kill after the next
    ask left it (that batch's trials running, failed on restore), or as a kill after the
    next tell left it (before its state was saved; the last batch is then asked ahead, and
    nothing is handed to optuna while it is in flight), the driver asks those trials again
    first, then exactly what the uninterrupted run asks."""
    search = {"algorithm": "optuna-tpe", "budget": 160, "batch_size": 20, "seed": 3}
    study = _study(search={**search, "options": {"ask_ahead": True}})
    folder = tmp_path / "run"
    folder.mkdir()
    reference, space = _driver(study, folder)
    journal = folder / "optuna.journal"
    states: list = []
    journals: dict[str, list[bytes]] = {"asked": [], "told": [], "saved": []}

    def snapshot(at):
        journals[at].append(journal.read_bytes())

    told = _drive_ahead(reference, study, space, states, snapshot)
    assert len(set(candidate_keys(told, space.names))) == len(told) == reference.asked == 160
    pending = [s["inner"]["pending"] for s, _ in states]
    assert [len(b) for b in pending[0]] == [20] and pending[-1] == []
    assert all(len(b) <= 1 for b in pending)

    (tmp_path / "again").mkdir()
    again, _ = _driver(study, tmp_path / "again")
    pd.testing.assert_frame_equal(_drive_ahead(again, study, space), told)
    plain, _ = _driver(_study(search={**search, "polish": False}), None)
    assert not _drive_ahead(plain, study, space).equals(told)  # sampled with a batch pending

    last = len(states) - 1
    for cut, journal_then in (
        (0, journals["saved"][0]),
        (3, journals["saved"][3]),
        (2, journals["asked"][3]),  # (the first round of asks is the two before any tell)
        (last - 2, journals["told"][last - 1]),  # the last batch asked ahead, the one before told
    ):
        state, rows = states[cut]
        where = tmp_path / f"cut-{cut}-{len(journal_then)}"
        where.mkdir()
        (where / "optuna.journal").write_bytes(journal_then)
        resumed, _ = _driver(study, where)
        resumed.restore(json.loads(json.dumps(state)))
        assert not resumed.done
        rest = _drive_ahead(resumed, study, space)
        pd.testing.assert_frame_equal(rest, told.iloc[rows:].reset_index(drop=True))


class _Overlapping(SearchDriver):
    """A plug-in that asks ahead, each batch repeating half of the one before it (in flight
    when it is asked); it checks that it is told each row's own results."""

    name = "overlapping"

    def may_ask_ahead(self) -> bool:
        return True

    def ask(self) -> pd.DataFrame:
        k = self.asked // 10
        self.asked += 10
        return pd.DataFrame(
            {"x": [round(0.05 * i, 2) for i in range(5 * k, 5 * k + 10)], "y": 0, "shape": "a"}
        )

    def tell(self, candidates, objectives, violations) -> None:
        table = ToyEvaluator().evaluate(candidates).assign(status="ok")
        study = _study()
        assert np.array_equal(objectives, objective_matrix(table, study), equal_nan=True)
        assert np.array_equal(violations, violation_matrix(table, study), equal_nan=True)
        self.told += len(candidates)


def test_a_candidate_asked_ahead_while_a_batch_in_flight_evaluates_it_is_looked_up_after_it(
    tmp_path,
):
    """Asked ahead, a batch may repeat candidates the batch in flight evaluates: each is
    evaluated once, and told from the log once that batch is stored."""
    from dse.api import run

    study = _study(search={"algorithm": "tests.test_search:_Overlapping", "budget": 30})
    result = run(study, tmp_path / "out", workers=0)
    assert [h.evaluated for h in result.history] == [10, 5, 5]
    assert result.evaluations["key"].is_unique and len(result.evaluations) == 20


def test_nondominated_screening_gives_moocores_mask_with_ties_and_duplicates():
    """``dse.pareto.nondominated`` screens many points with pivots before moocore's test:
    the same mask as moocore's alone (weakly non-dominated points, duplicates of a front
    point kept) for continuous points, integer grids full of ties, and near-fronts."""
    from dse.pareto import SCREENED, nondominated

    rng = np.random.default_rng(7)
    for trial in range(60):
        n, m = int(rng.integers(SCREENED, 4 * SCREENED)), int(rng.integers(2, 5))
        if trial % 3 == 0:
            f = rng.random((n, m))
        elif trial % 3 == 1:
            f = rng.integers(0, 5, (n, m)).astype(float)
        else:
            x = rng.random(n)
            f = np.column_stack([x, 1 - x + 0.01 * rng.random(n), *rng.random((m - 2, n))])
        expected = moocore.is_nondominated(f, keep_weakly=True)
        assert (nondominated(f) == expected).all()


def test_a_chunks_summary_counts_what_ruled_out_counts_of_its_rows_not_feasible():
    """A chunk's summary (made once per chunk on a worker, its matrices computed once) counts
    what ruled its rows out, as :func:`ruled_out` does on those rows alone and as counting
    them row by row does, in the same order: failed evaluations by message, the evaluator's
    reasons (an empty one as ``infeasible``), broken constraints and objectives without a
    finite value."""
    from dse.pareto import feasible_mask, ruled_out, summarize

    study = plan_run(
        Study.model_validate(toy_study(constraints=["f_sum <= 1.2", "f1 >= 0.1"]))
    ).study
    assert len(study.constraints) == 2
    rng = np.random.default_rng(3)
    n = 3000
    table = pd.DataFrame(
        {
            "f1": rng.random(n),
            "f2": rng.random(n),
            "feasible": rng.random(n) > 0.2,
            "reason": rng.choice(["", "too hot", "too big"], n),
            "status": np.where(rng.random(n) > 0.05, "ok", "failed"),
            "error": rng.choice(["", "boom", "bang"], n),
        }
    )
    table.loc[rng.random(n) > 0.97, "f2"] = np.nan
    table["f_sum"] = table["f1"] + rng.random(n)
    table.loc[rng.random(n) > 0.9, "reason"] = "infeasible"  # said, or left empty: one count
    chunk = summarize(table, study)
    ok = feasible_mask(table, study)
    assert (chunk.ok == ok).all() and chunk.feasible == int(ok.sum())
    # row by row: the evaluator's verdicts in the order they first appear, then the
    # constraints and the objectives in the study's order
    expected: dict[str, int] = {}
    rows = [row for row, good in zip(table.itertuples(), ok, strict=True) if not good]
    for row in rows:
        if row.status != "ok":
            verdict = f"evaluator: evaluation failed: {row.error}"
        elif not row.feasible:
            verdict = f"evaluator: {row.reason or 'infeasible'}"
        else:
            continue
        expected[verdict] = expected.get(verdict, 0) + 1
    evaluator_ok = [r for r in rows if r.status == "ok" and r.feasible]
    for con, broken in (
        ("f_sum <= 1.2", lambda r: r.f_sum > 1.2),
        ("f1 >= 0.1", lambda r: r.f1 < 0.1),
    ):
        if sum(map(broken, evaluator_ok)):
            expected[f"constraint {con}"] = sum(map(broken, evaluator_ok))
    no_f2 = [r for r in evaluator_ok if r.f_sum <= 1.2 and r.f1 >= 0.1 and not np.isfinite(r.f2)]
    expected["objective f2: no finite value"] = len(no_f2)
    assert list(chunk.ruled_out.items()) == list(expected.items())
    assert list(ruled_out(table[~ok], study).items()) == list(expected.items())
    assert chunk.failed == int((table["status"] != "ok").sum())
    front = moocore.is_nondominated(objective_matrix(table, study)[ok], keep_weakly=True)
    assert (chunk.contenders == np.flatnonzero(ok)[front]).all()
