"""The loss trajectory (issue 35, item 4): each candidate's run from its start to its end,
consistent with the run's own tokens, time and energy, and `dse evaluate --trajectory`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import GPT3_A100
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import training
from dse.evaluators import has_trajectory, load_evaluator
from dse.study import EvaluatorSpec
from tests.conftest import TOY, run_cli, toy_study, write_study

# GPT-3 175B on 1,024 A100s (studies/gpt3-batch-ramp.yaml's layout)
GPT3 = {**GPT3_A100, "target_batch_size": 1536, "batch_ramp_start_size": 16}
TOKENS = dict(target_tokens=3e11)
ROWS = [
    {**TOKENS, "batch_schedule": "constant"},
    {**TOKENS, "batch_schedule": "linear", "batch_ramp_tokens": 0.0},
    {**TOKENS, "batch_schedule": "linear", "batch_ramp_tokens": 1.2e10},
    {**TOKENS, "batch_schedule": "steps", "batch_ramp_tokens": 4e9, "batch_ramp_steps": 4},
    {"target_loss": 2.05, "batch_schedule": "linear", "batch_ramp_tokens": 1.2e10},
    {"target_loss": 2.05, "batch_schedule": "constant", "global_batch_size": 768},
    {
        **TOKENS,
        "num_accelerators": 2048,
        "second_accelerator": "H100-SXM",
        "second_pipeline_stages": 4,
    },  # a mixed fleet: one batch
    # the batch following the critical batch (levels from one micro-batch per replica)
    {**TOKENS, "batch_schedule": "critical", "critical_batch_multiple": 0.5},
    {"target_loss": 2.05, "batch_schedule": "critical", "batch_ramp_steps": 3},
]
POINTS = 41


@pytest.fixture(scope="module")
def evaluated():
    ev = AnalyticEvaluator()
    candidates = pd.DataFrame([{**GPT3, **r} for r in ROWS])
    return candidates, ev.evaluate(candidates), ev.trajectory(candidates, POINTS)


def _target_loss(candidates, result, i):
    row = candidates.iloc[i]
    if np.isfinite(row.get("target_loss", np.nan)):
        return row["target_loss"]
    active = np.array([result["active_parameters"][i]])
    d_ref, _ = training.resolve_target(
        active, np.array([3e11]), np.array([np.nan]), np.array([np.nan])
    )
    return training.chinchilla_loss(active, d_ref)[0]


def test_the_last_point_is_the_runs_result_and_its_target_loss(evaluated):
    candidates, result, traj = evaluated
    assert len(traj) == POINTS * len(candidates)
    assert result["feasible"].all()
    for i in range(len(candidates)):
        run = traj[traj["candidate"] == i]
        first, last = run.iloc[0], run.iloc[-1]
        assert first[["tokens", "min_tokens", "time_s", "energy_j"]].tolist() == [0, 0, 0, 0]
        assert first["loss_nats"] == pytest.approx(training.UNTRAINED_LOSS)
        assert last["tokens"] == pytest.approx(result["tokens_to_train"][i], rel=1e-9)
        assert last["time_s"] == pytest.approx(result["time_to_train_s"][i], rel=1e-9)
        assert last["energy_j"] == pytest.approx(result["energy_to_train_j"][i], rel=1e-9)
        assert last["min_tokens"] == pytest.approx(result["min_tokens_to_train"][i], rel=1e-9)
        assert last["loss_nats"] == pytest.approx(_target_loss(candidates, result, i), rel=1e-9)


def test_the_loss_falls_and_the_run_only_adds_tokens_time_and_energy(evaluated):
    _, _, traj = evaluated
    for _, run in traj.groupby("candidate"):
        loss = run["loss_nats"].to_numpy()
        assert np.all(np.diff(loss) <= 0)
        assert np.all(np.diff(loss[1:]) < 0)  # below the untrained loss, strictly falling
        for col in ("tokens", "min_tokens", "time_s", "energy_j"):
            assert np.all(np.diff(run[col].to_numpy()) > 0), col
        # progress never outruns the tokens (a token is worth at most one small-batch token)
        assert np.all(run["min_tokens"] <= run["tokens"] * (1 + 1e-12))


def test_a_ramp_starts_at_a_small_batch_and_gains_loss_early(evaluated):
    candidates, _, traj = evaluated
    runs = {i: run.reset_index(drop=True) for i, run in traj.groupby("candidate")}
    batch = {i: run["batch_sequences"].to_numpy() for i, run in runs.items()}
    for i in (0, 1, 5, 6):  # constant batches (ramp 0 tokens: the same batch throughout)
        assert np.all(batch[i] == candidates["global_batch_size"][i])
    for i in (2, 3, 4, 7, 8):  # ramps, and the critical batch followed
        assert batch[i][0] < 200 and batch[i][-1] == 1536
        assert np.all(np.diff(batch[i]) >= 0)
        assert runs[i]["batch_tokens"][0] == batch[i][0] * 2048  # GPT-3's sequence length
    # at the end of the 12B ramp, the ramp has reached a lower loss than the constant batch
    # of the same law at the same tokens, and has spent less time to get there
    ramp, const = runs[2], runs[1]
    at = 1.2e10
    assert np.interp(at, ramp["tokens"], ramp["loss_nats"]) < np.interp(
        at, const["tokens"], const["loss_nats"]
    )
    assert np.interp(at, ramp["tokens"], ramp["min_tokens"]) > np.interp(
        at, const["tokens"], const["min_tokens"]
    )


def test_a_clock_plan_keeps_the_loss_per_token_and_saves_energy_all_along():
    rows = [{**GPT3, **TOKENS, "clock_plan": plan} for plan in ("one", "per_stage")]
    traj = AnalyticEvaluator().trajectory(pd.DataFrame(rows), 21)
    one, planned = (traj[traj["candidate"] == i].reset_index(drop=True) for i in (0, 1))
    for col in ("tokens", "loss_nats", "batch_sequences"):
        np.testing.assert_allclose(planned[col], one[col], rtol=1e-12)
    np.testing.assert_allclose(planned["time_s"], one["time_s"], rtol=1e-9)
    assert (planned["energy_j"][1:] < one["energy_j"][1:]).all()


def test_only_evaluators_with_the_hook_give_a_trajectory():
    toy = load_evaluator(EvaluatorSpec(name=TOY))
    assert not has_trajectory(toy) and has_trajectory(AnalyticEvaluator())
    with pytest.raises(NotImplementedError):
        toy.trajectory(pd.DataFrame({"x": [0.5]}), 10)
    with pytest.raises(ValueError, match="at least 2"):
        AnalyticEvaluator().trajectory(pd.DataFrame([GPT3]), 1)


def _candidates(tmp_path):
    csv = tmp_path / "c.csv"
    csv.write_text("id,global_batch_size,batch_ramp_tokens\nconstant,1536,0\nramp,1536,1.2e10\n")
    return csv


def test_dse_evaluate_writes_the_trajectories(tmp_path):
    csv, out, traj = _candidates(tmp_path), tmp_path / "o.csv", tmp_path / "t.csv"
    said = run_cli(
        "evaluate", "studies/gpt3-batch-ramp.yaml", "-c", csv, "-o", out, "--trajectory", traj,
        "--points", "7",
    )  # fmt: skip
    assert said.returncode == 0, said.stderr
    assert f"trajectories (7 points each) → {traj}" in " ".join(said.stdout.split())
    table, evaluated = pd.read_csv(traj), pd.read_csv(out)
    assert list(table.columns[:2]) == ["candidate", "id"]
    assert {"tokens", "loss_nats", "batch_sequences", "time_s", "energy_j"} <= set(table.columns)
    assert len(table) == 14 and table["id"].tolist() == ["constant"] * 7 + ["ramp"] * 7
    ends = table.groupby("id").last()
    for name, col in (("tokens", "tokens_to_train"), ("energy_j", "energy_to_train_j")):
        assert ends[name].to_numpy() == pytest.approx(evaluated.set_index("id")[col], rel=1e-9)


def test_dse_evaluate_refuses_a_trajectory_it_cannot_write(tmp_path):
    csv, out = _candidates(tmp_path), tmp_path / "o.csv"
    base = ("evaluate", "studies/gpt3-batch-ramp.yaml", "-c", csv, "-o", out)
    (tmp_path / "a-file").write_text("")  # a file where --trajectory's folder would be made
    for extra, says in (
        (("--trajectory", out), "--trajectory"),  # would replace --output
        (("--trajectory", tmp_path / "t.parquet"), "writes CSV, not .parquet"),
        (("--trajectory", tmp_path / "a-file" / "t.csv"), "is a file, not a folder"),
        (("--trajectory", tmp_path / "t.csv", "--points", "1"), "--points"),
    ):
        said = run_cli(*base, *extra)
        assert said.returncode == 2, (extra, said.stderr)
        assert says in said.stderr and "Traceback" not in said.stderr
    assert not (tmp_path / "t.csv").exists()


def test_a_plug_in_without_the_hook_is_refused_in_one_line(tmp_path):
    path = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
    csv = tmp_path / "c.csv"
    csv.write_text("x,y,shape\n0.5,4,a\n")
    said = run_cli(
        "evaluate", path, "-c", csv, "-o", tmp_path / "o.csv", "--trajectory", tmp_path / "t.csv"
    )
    assert said.returncode == 2
    lines = said.stderr.strip().splitlines()
    assert len(lines) == 1 and "gives no trajectory" in lines[0], said.stderr
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "t.csv").exists()


def test_following_the_critical_batch_reaches_every_loss_with_fewer_tokens(evaluated):
    _, _, traj = evaluated
    runs = {i: run for i, run in traj.groupby("candidate")}
    for followed, constant in ((7, 1),):  # the critical batch followed up to 1,536, and 1,536
        for loss in (4.0, 3.0, 2.5, 2.2, 2.1, 2.01):

            def tokens_at(run, loss=loss):
                return np.interp(-loss, -run["loss_nats"], run["tokens"])

            assert tokens_at(runs[followed]) < tokens_at(runs[constant]), loss
