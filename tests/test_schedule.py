"""Batch-size schedules (issue 35): the critical-batch law integrated over a ramp, the noise
scale growing as the loss falls, each phase timed at its own batch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import GPT3_A100, REPO, run_cli, write_study
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import training

# GPT-3 175B at its 1,536-sequence batch, 300B tokens stated there (Brown et al. 2020)
GPT3 = {**GPT3_A100, "target_tokens": 3e11, "target_batch_size": 1536}


def _evaluate(rows) -> pd.DataFrame:
    return AnalyticEvaluator().evaluate(pd.DataFrame([{**GPT3, **r} for r in rows]))


def _progress():
    p = np.array([1.75e11])
    return training.progress_of(
        p, np.array([3e11]), np.array([np.nan]), np.array([np.nan]), np.array([1536 * 2048.0])
    )


def test_the_noise_scale_grows_as_the_loss_falls_to_the_targets():
    p = _progress()
    u = p.e_min[0] * np.array([1e-6, 1e-3, 0.1, 0.5, 1.0])
    scale = np.array([p.noise_scale(np.array([x]))[0] for x in u])
    assert np.all(np.diff(scale) > 0)
    assert scale[-1] == pytest.approx(p.b_noise_target[0], rel=1e-9)  # the target's at the end


def test_a_tiny_batch_needs_the_small_batch_limit_and_a_larger_one_more():
    p = _progress()
    tiny = training.phase_tokens(p, np.array([[1.0]]), np.zeros((1, 0)))
    assert tiny.sum() == pytest.approx(p.e_min[0], rel=1e-6)
    b = 1536 * 2048.0
    const = training.phase_tokens(p, np.array([[b]]), np.zeros((1, 0))).sum()
    closed = p.e_min[0] * (1 + b / p.b_noise_target[0])  # the noise scale at the target throughout
    assert const > closed  # earlier, at a higher loss, the noise scale is smaller
    # a ramp's early phases at a small batch spend fewer tokens for the same progress
    ramp = training.phase_tokens(
        p, np.array([[16 * 2048.0, 400 * 2048.0, b]]), np.array([[2e9, 6e9]])
    )
    assert ramp[0, :2] == pytest.approx([2e9, 6e9])
    assert ramp.sum() < const


def test_gpt3_ramp_saves_tokens_and_runs_each_phase_at_its_batch():
    r = _evaluate(
        [
            {"batch_schedule": "linear", "batch_ramp_tokens": 0.0},  # constant, same law
            {"batch_schedule": "linear", "batch_ramp_start_size": 16, "batch_ramp_tokens": 4e9},
            {"batch_schedule": "linear", "batch_ramp_start_size": 16, "batch_ramp_tokens": 1.2e10},
            {"batch_schedule": "steps", "batch_ramp_start_size": 16, "batch_ramp_tokens": 1.2e10},
            {},  # constant, the closed form
        ]
    )
    assert r["feasible"].all()
    tokens = r["tokens_to_train"].to_numpy()
    assert tokens[2] < tokens[1] < tokens[0]  # a longer ramp saves more
    assert 0.005 < 1 - tokens[2] / tokens[0] < 0.05
    # the same target: E_min, and the bound of the information it needs, are the schedule's
    assert np.ptp(r["min_tokens_to_train"]) == 0.0
    assert np.ptp(r["landauer_bound_j"]) == pytest.approx(0.0, abs=1e-9 * r["landauer_bound_j"][0])
    # the iteration reported is the final batch's; the ramp's small batches take more steps
    np.testing.assert_allclose(r["step_time_s"], r["step_time_s"][4], rtol=1e-12)
    assert r["steps_to_train"][2] > r["steps_to_train"][0]
    assert r["steps_to_train"][3] > r["steps_to_train"][2]  # steps: each phase at its lower end
    # time and energy are the phases' sums: below the constant batch's here
    assert r["time_to_train_s"][2] < r["time_to_train_s"][0]
    assert r["energy_to_train_j"][2] < r["energy_to_train_j"][0]
    np.testing.assert_allclose(
        r["tokens_per_j"], r["tokens_to_train"] / r["energy_to_train_j"], rtol=1e-12
    )


def test_ramp_rows_mixed_with_constant_rows_evaluate_as_alone():
    rows = [{}, {"batch_schedule": "steps", "batch_ramp_tokens": 4e9}, {"global_batch_size": 768}]
    together = _evaluate(rows)
    for i, row in enumerate(rows):
        alone = _evaluate([row])
        for name in ("tokens_to_train", "time_to_train_s", "energy_to_train_j", "reason"):
            assert together[name][i] == alone[name][0]


def test_a_ramp_to_an_unreachable_loss_is_infeasible_as_a_constant_batch_is():
    rows = [
        {"target_loss": 1.7, "batch_schedule": s, "batch_ramp_tokens": 4e9}
        for s in ("constant", "linear")
    ]
    result = AnalyticEvaluator().evaluate(
        pd.DataFrame(
            [{**{k: v for k, v in GPT3.items() if k != "target_tokens"}, **r} for r in rows]
        )
    )
    assert not result["feasible"].any()
    assert (result["reason"] == "target loss unreachable at this model size (Chinchilla fit)").all()
    assert result["tokens_to_train"].isna().all() and result["energy_to_train_j"].isna().all()


def _fine_tokens(p, batch_tokens: float) -> float:
    """A constant batch's tokens to the target by an independent integration: the midpoint
    rule over 200,000 geometric cells of progress (plus the first from 0)."""
    edges = np.concatenate([[0.0], np.geomspace(1e-3, p.e_min[0], 200_001)])
    mids = 0.5 * (edges[1:] + edges[:-1])
    return float(np.sum(np.diff(edges) * (1 + batch_tokens / p.noise_scale(mids[None, :])[0])))


@pytest.mark.parametrize("batch", [16, 384, 1536, 6144])
def test_the_schedules_integration_matches_a_fine_one(batch):
    p = _progress()
    b = batch * 2048.0
    graded = training.phase_tokens(p, np.array([[b]]), np.zeros((1, 0))).sum()
    assert graded == pytest.approx(_fine_tokens(p, b), rel=1e-3)
    # the phases of a critical schedule (ending at chosen progress) add to the same
    ends = p.e_min[0] * np.array([[0.0, 1e-4, 0.01, 0.3]])
    split = training.progress_path_to(p, np.full((1, 5), b), ends).tokens.sum()
    assert split == pytest.approx(_fine_tokens(p, b), rel=1e-3)


def test_the_progress_where_the_noise_scale_reaches_a_batch_inverts_it():
    p = _progress()
    targets = np.array([[1e5, 1e6, 3e6, 7e6]])
    u = training.progress_at_noise_scale(p, targets)
    assert np.all(np.diff(u) > 0) and np.all(u < p.e_min[0])
    np.testing.assert_allclose(p.noise_scale(u), targets, rtol=1e-9)
    # at the untrained loss already, or never at this size
    below = training.progress_at_noise_scale(p, np.array([[10.0, 1e12]]))
    assert below[0, 0] == 0.0 and np.isinf(below[0, 1])


CONSTANT_BY_THE_LAW = {"batch_schedule": "linear", "batch_ramp_tokens": 0.0}  # one batch, 8a's law


def _critical(**row):
    return {"batch_schedule": "critical", "batch_ramp_start_size": 16, **row}


def test_following_the_critical_batch_never_needs_more_tokens_than_its_largest_batch():
    rows = []
    for final in (384, 1536):
        rows.append({**CONSTANT_BY_THE_LAW, "global_batch_size": final})
        rows += [
            _critical(global_batch_size=final, critical_batch_multiple=m)
            for m in (0.1, 0.5, 1.0, 4.0, 100.0)
        ]
    r = _evaluate(rows)
    assert r["feasible"].all()
    assert np.ptp(r["min_tokens_to_train"]) == 0.0  # one target
    for start in (0, 6):
        constant, followed = r.iloc[start], r.iloc[start + 1 : start + 6]
        assert (followed["tokens_to_train"] < constant["tokens_to_train"]).all()
        # a larger multiple stays at small batches for less of the run: more tokens
        assert np.all(np.diff(followed["tokens_to_train"].to_numpy()) > 0)
        assert (followed["steps_to_train"] > constant["steps_to_train"]).all()


def test_a_critical_batch_above_the_largest_throughout_is_the_constant_batch():
    # a noise scale of 1e9 tokens at the target: 100 x the critical batch is 3e7 tokens at the
    # untrained loss already, above 1,536 sequences (3.1M tokens)
    big = {"b_noise_tokens": 1e9}
    same_size = {"batch_ramp_start_size": 1536}  # one level: the largest
    r = _evaluate(
        [
            {**CONSTANT_BY_THE_LAW, **big},
            _critical(critical_batch_multiple=100.0, **big),
            {**CONSTANT_BY_THE_LAW},
            {**_critical(), **same_size},
        ]
    )
    for constant, followed in ((0, 1), (2, 3)):
        for name in ("tokens_to_train", "time_to_train_s", "energy_to_train_j", "steps_to_train"):
            # the empty phases below the largest batch are evaluated as a token each
            assert r[name][followed] == pytest.approx(r[name][constant], rel=1e-9), name


def test_the_batch_follows_the_multiple_of_the_critical_batch_in_whole_micro_batches():
    multiple = 0.5
    rows = [_critical(global_batch_size=1536, critical_batch_multiple=multiple)]
    candidates = pd.DataFrame([{**GPT3, **r} for r in rows])
    traj = AnalyticEvaluator().trajectory(candidates, 2001)
    seq = traj["batch_sequences"].to_numpy()
    assert np.all(np.diff(seq) >= 0)  # the batch only grows as the loss falls
    assert np.all(seq % 16 == 0) and seq[0] == 16 and seq[-1] == 1536  # 16 replicas
    levels = np.unique(seq)
    # batch_ramp_steps 8 levels below the largest, geometric from 16, in whole micro-batches
    # per replica (the lowest, passed in the first few hundred million tokens, between points)
    geometric = np.round(16 * 96 ** (np.arange(9) / 8) / 16) * 16
    assert set(levels) <= set(geometric) and len(levels) >= 6
    ratio = np.max(geometric[1:] / geometric[:-1])
    # the default noise scale is Kaplan's critical batch at the loss reached
    wanted = multiple * training.critical_batch_tokens(traj["loss_nats"].to_numpy())
    got = traj["batch_tokens"].to_numpy()
    inside = (seq > levels[0]) & (seq < levels[-1])
    assert inside.sum() > 20
    # the nearest level (in ratio) to the multiple; the points' loss is read between the
    # integration's points, so a point next to a switch may be a little past it
    assert np.all(got[inside] / wanted[inside] <= np.sqrt(ratio) * 1.05)
    assert np.all(got[inside] / wanted[inside] >= 1 / (np.sqrt(ratio) * 1.05))
    # clamped: the smallest batch while the multiple is below it, the largest above
    assert np.all(wanted[seq == levels[0]] <= levels[0] * 2048 * np.sqrt(ratio) * 1.05)
    assert np.all(wanted[seq == levels[-1]] >= levels[-1] * 2048 / (np.sqrt(ratio) * 1.05))


def test_critical_rows_mixed_with_ramps_and_constant_rows_evaluate_as_alone():
    rows = [
        {},
        _critical(critical_batch_multiple=0.5),
        {"batch_schedule": "linear", "batch_ramp_tokens": 4e9},
        _critical(global_batch_size=768, batch_ramp_steps=3),
    ]
    together = _evaluate(rows)
    for i, row in enumerate(rows):
        alone = _evaluate([row])
        for name in ("tokens_to_train", "time_to_train_s", "energy_to_train_j", "reason"):
            assert together[name][i] == alone[name][0]


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        ("fixed", {"critical_batch_multiple": 0}, "critical_batch_multiple"),
        ("space", {"critical_batch_multiple": [1.0, 500.0]}, "critical_batch_multiple"),
        ("fixed", {"critical_batch_multiple": "half"}, "critical_batch_multiple"),
        ("workload", {"batch_schedule": "critcal"}, "did you mean 'critical'"),
    ],
)
def test_a_bad_critical_schedule_is_refused_by_validate_and_run_alike(tmp_path, where, value, said):
    study = yaml.safe_load((REPO / "studies" / "gpt3-critical-batch.yaml").read_text())
    for part in ("workload", "space", "fixed"):
        for key in value:
            study[part].pop(key, None)
    study[where].update(value)
    path = write_study(tmp_path, study)
    out = tmp_path / "out"
    procs = [run_cli(command, str(path), "-o", str(out)) for command in ("validate", "run")]
    for proc in procs:
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert said in proc.stderr and "study.yaml" in proc.stderr
    assert procs[0].stderr == procs[1].stderr
    assert not out.exists()
