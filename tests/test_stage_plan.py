"""Per-stage clock plans (Perseus, Chung et al. SOSP 2024): the 1F1B emulation, the planned
frontier against the one-clock one, the check against Perseus's published GPT-3 175B A100
frontier, and the evaluator's ``clock_plan`` input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import GPT3_A100
from dse.analytic import validate_energy
from dse.analytic.energy import stage_plan
from dse.analytic.evaluator import AnalyticEvaluator

# the clocks of Perseus's stage profile (the validate-model table): a coarse grid, fast
COARSE_MHZ = np.array([1410, 1350, 1290, 1200, 1110, 1080, 1050, 990, 900, 855], dtype=float)


@pytest.mark.parametrize(("stages", "micro_batches"), [(1, 4), (4, 8), (8, 12), (6, 3)])
def test_balanced_1f1b_takes_m_plus_p_minus_1_slots(stages, micro_batches):
    """Equal stages: the 1F1B iteration is (M + P - 1) slots of a forward and a backward
    (Narayanan et al. 2021), whatever the forward/backward split."""
    work = stage_plan.StageWork(
        forward_s=np.full(stages, 1.0), backward_s=np.full(stages, 2.0), micro_batches=0
    )
    sched = stage_plan._schedule(stages, micro_batches)
    dur = np.where(sched.backward, 2.0, 1.0)[None, :]
    t = stage_plan.iteration_time_s(dur, sched, stages)
    assert t[0] == pytest.approx((micro_batches + stages - 1) * 3.0)
    assert len(sched.stage) == 2 * stages * micro_batches
    del work


def test_a_stage_off_the_critical_path_is_planned_lower_for_the_same_time():
    """One heavy stage sets the pace: the light stages' steady-state passes run at a lower
    clock, the iteration takes no longer, and the energy falls."""
    work = stage_plan.StageWork(
        forward_s=np.array([1.0, 1.0, 1.0, 1.3]),
        backward_s=np.array([2.0, 2.0, 2.0, 2.6]),
        micro_batches=16,
    )
    curve = validate_energy.stage_curve(COARSE_MHZ)
    start = np.zeros((1, 16), dtype=np.int64)
    t0, e0 = stage_plan.evaluate_plans(work, curve, start[:, None, :], "phase")
    best, e1 = stage_plan.plan(work, curve, start, t0[:, 0], "phase")
    t1, _ = stage_plan.evaluate_plans(work, curve, best[:, None, :], "phase")
    assert t1[0, 0] <= t0[0, 0] * (1 + 1e-9)
    assert e1[0] < 0.97 * e0[0, 0]
    steady = best[0].reshape(4, 4)[:, 1]  # each stage's steady-state clock
    assert steady[:3].sum() > 0  # light stages lowered in their steady state
    assert steady[3] == 0  # the pace stage stays at the top


def test_the_closed_form_plan_keeps_the_time_and_saves_what_it_says_on_the_emulation():
    """The evaluator's closed form (each light stage's steady-state slot at the
    lowest-energy clock that still fits the pace stage's slot) checked on the exact 1F1B
    emulation: the same iteration time, the saving it computes within 1%."""
    curve = validate_energy.stage_curve(COARSE_MHZ)
    for forward, m in (([1.0, 1.0, 1.0, 1.3], 16), ([1.0, 1.0, 1.0, 1.1], 32)):
        fwd = np.array(forward)
        work = stage_plan.StageWork(forward_s=fwd, backward_s=2 * fwd, micro_batches=m)
        slot = 3 * fwd
        closed = stage_plan.steady_state_saving_j(
            slot[None, :],
            np.array([m]),
            lambda: (curve.time_factor[None], curve.energy_j_per_s[None], curve.blocked_w[None]),
        )[0]
        plan = np.zeros((1, 1, 16), dtype=np.int64)
        for s in range(4):  # the closed form's clock for each stage's steady state
            e = curve.energy_j_per_s * slot[s] + curve.blocked_w * np.maximum(
                slot.max() - slot[s] * curve.time_factor, 0.0
            )
            e = np.where(slot[s] * curve.time_factor <= slot.max() * (1 + 1e-12), e, np.inf)
            plan[0, 0, 4 * s + 1] = int(np.argmin(e))
        t0, e0 = stage_plan.evaluate_plans(work, curve, np.zeros_like(plan), "phase")
        t1, e1 = stage_plan.evaluate_plans(work, curve, plan, "phase")
        assert t1[0, 0] == pytest.approx(t0[0, 0], rel=1e-12)
        assert closed > 0.05 * e0[0, 0] / 4
        assert closed == pytest.approx((e0[0, 0] - e1[0, 0]) / 4, rel=0.01)


def test_perseus_planned_frontier_never_above_the_one_clock_frontier():
    r = validate_energy.perseus_frontier_report(COARSE_MHZ)
    assert r["planned_never_above"] == {"stage": True, "phase": True}
    one = r["frontiers"]["one_clock"]
    for g in ("stage", "phase"):
        fr = r["frontiers"][f"planned_{g}"]
        assert np.all(fr.energy_j <= one.energy_j * (1 + 1e-12))  # plan by plan, target by target
        assert r[f"planned_{g}"]["least_energy_j"] <= r["one_clock"]["least_energy_j"]
    # the model's fastest plan: 8 stages, 12 micro-batches, the last stage 6.8% heavier
    assert r["one_clock"]["fastest_time_s"] == pytest.approx(2.8365, rel=1e-3)
    assert r["one_clock"]["fastest_time_s"] == pytest.approx(2.818, rel=0.01)  # Perseus's


@pytest.mark.xfail(
    strict=True,
    reason="issue 35's target not met: the model's least-energy point is -24% energy for +22% "
    "time against Perseus's -9.0% for +13% (docs/model-energy.md, section 7a)",
)
def test_perseus_least_energy_point_within_3_points():
    r = validate_energy.perseus_frontier_report(COARSE_MHZ, granularities=("stage",))
    model, published = r["planned_stage"], r["published"]
    assert abs(model["energy_change"] - published["energy_change"]) <= 0.03
    assert abs(model["time_change"] - published["time_change"]) <= 0.03


def _gpt3(plan, clock_fraction, **extra):
    return {**GPT3_A100, "clock_fraction": clock_fraction, "clock_plan": plan, **extra}


def test_clock_plan_input_saves_energy_at_the_same_time():
    rows = [_gpt3(p, cf) for p in ("one", "per_stage") for cf in (1.0, 0.8)]
    rows += [
        _gpt3(p, 1.0, model="llama2-7b", pipeline_parallel=1, num_accelerators=64)
        for p in ("one", "per_stage")
    ]
    r = AnalyticEvaluator().evaluate(pd.DataFrame(rows))
    assert r["feasible"].all()
    one, planned = r.iloc[[0, 1]], r.iloc[[2, 3]]
    np.testing.assert_allclose(planned["time_to_train_s"], one["time_to_train_s"], rtol=1e-12)
    np.testing.assert_allclose(planned["step_time_s"], one["step_time_s"], rtol=1e-12)
    saved = 1.0 - planned["energy_to_train_j"].to_numpy() / one["energy_to_train_j"].to_numpy()
    assert (saved > 0.001).all() and (saved < 0.05).all()
    # one stage: nothing to plan
    assert r.loc[5, "energy_to_train_j"] == r.loc[4, "energy_to_train_j"]
