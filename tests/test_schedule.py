"""Batch-size schedules (issue 35): the critical-batch law integrated over a ramp, the noise
scale growing as the loss falls, each phase timed at its own batch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import GPT3_A100
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
