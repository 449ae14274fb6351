"""Energy accounting, facility overhead, swings, metrics and the re-time contract."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from dse.analytic import declarations, model
from dse.analytic import rows as rows_module
from dse.analytic.energy import accelerator, clock_search, phases, power, transfer
from dse.analytic.energy import model as energy_model
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import model as time_model
from dse.analytic.time.step import StepBreakdown

COMPONENTS = (
    "energy_compute_j",
    "energy_memory_j",
    "energy_network_j",
    "energy_idle_j",
    "energy_waiting_j",
    "energy_host_j",
    "energy_power_supply_j",
    "energy_facility_overhead_j",
)


def _evaluate(**cols) -> pd.DataFrame:
    n = max([len(v) for v in cols.values() if isinstance(v, list)] or [1])
    df = pd.DataFrame({k: v if isinstance(v, list) else [v] * n for k, v in cols.items()})
    return AnalyticEvaluator().evaluate(df)


def _cfg(**cols) -> dict[str, np.ndarray]:
    n = max([len(v) for v in cols.values() if isinstance(v, list)] or [1])
    ev = AnalyticEvaluator()
    table = ev.with_defaults(
        pd.DataFrame({k: v if isinstance(v, list) else [v] * n for k, v in cols.items()})
    )
    return {
        name: (
            table[name].astype(str).to_numpy(dtype=object)
            if inp.kind == "str"
            else pd.to_numeric(table[name], errors="coerce").to_numpy(dtype=np.float64)
        )
        for name, inp in ev.inputs.items()
    }


def test_declared_metrics_are_returned_and_old_names_still_work():
    r = _evaluate(accelerator=["A100-80GB", "H100-SXM"], num_accelerators=16, pipeline_parallel=2)
    for m in declarations.ENERGY_METRICS:
        assert m.name in r.columns, m.name
    for name in (
        "energy_to_train_j",
        "time_to_train_s",
        "peak_junction_temp_c",
        "peak_power_per_accelerator_w",
        "facility_peak_power_w",
        "avg_power_per_accelerator_w",
        "tokens_per_j",
        "energy_time_product_js",
    ):
        assert np.isfinite(r[name]).all(), name


def test_breakdown_adds_up_to_the_facility_energy():
    r = _evaluate(
        accelerator="H100-SXM",
        num_accelerators=[8, 64, 256],
        pipeline_parallel=[1, 2, 4],
        tensor_parallel=[1, 2, 4],
        model="gpt-1.3b",
    )
    total = sum(r[c] for c in COMPONENTS)
    np.testing.assert_allclose(total, r["energy_to_train_j"], rtol=1e-9)
    np.testing.assert_allclose(
        r["energy_to_train_j"] - r["energy_facility_overhead_j"],
        r["it_energy_to_train_j"],
        rtol=1e-9,
    )
    np.testing.assert_allclose(
        r["energy_to_train_j"] * 1.0 / 1.2, r["it_energy_to_train_j"], rtol=1e-9
    )  # PUE 1.2
    np.testing.assert_allclose(
        r["energy_time_product_js"], r["energy_to_train_j"] * r["time_to_train_s"], rtol=1e-9
    )
    np.testing.assert_allclose(
        r["tokens_per_j"], r["tokens_to_train"] / r["energy_to_train_j"], rtol=1e-9
    )
    assert (r["energy_waiting_j"][1:] > 0).all()  # pipeline bubble and exposed communication
    assert (r[list(COMPONENTS)] >= 0).all().all()


def test_cooling_cop_replaces_pue():
    r = _evaluate(accelerator="H100-SXM", cooling_cop=[4.0], pue=1.5)
    assert r["energy_facility_overhead_j"][0] == pytest.approx(r["it_energy_to_train_j"][0] / 4.0)


def test_network_energy_uses_the_seed_pj_per_bit():
    seed = (
        declarations.INPUTS["scaleup_pj_per_bit"].default,
        declarations.INPUTS["scaleout_pj_per_bit"].default,
    )
    assert transfer.network_energy_j(np.array([1.0]), np.array([0.0]), *seed)[0] == pytest.approx(
        16e-12
    )
    assert transfer.network_energy_j(np.array([0.0]), np.array([1.0]), *seed)[0] == pytest.approx(
        200e-12
    )
    a = _evaluate(accelerator="H100-SXM", num_accelerators=64, scaleout_pj_per_bit=[25.0, 50.0])
    assert a["energy_network_j"][1] > a["energy_network_j"][0]


def test_cost_carbon_and_landauer():
    r = _evaluate(
        accelerator="A100-80GB",
        energy_price_per_kwh=0.2,
        accelerator_hour_price=1.5,
        grid_carbon_kg_per_kwh=0.5,
    )
    kwh = r["energy_to_train_j"][0] / 3.6e6
    hours = r["time_to_train_s"][0] / 3600 * 8
    assert r["cost_usd"][0] == pytest.approx(hours * 1.5 + kwh * 0.2)
    assert r["carbon_kg"][0] == pytest.approx(kwh * 0.5)
    bound = (
        1.380649e-23
        * (30 + 273.15)
        * np.log(2)
        * r["parameters"][0]
        * r["min_tokens_to_train"][0]
        * 3.0
    )
    assert r["landauer_bound_j"][0] == pytest.approx(bound)
    assert 1e6 < r["landauer_ratio"][0] < 1e14
    assert 0 < r["energy_utilisation_factor"][0] < 1


# one job (Llama 2 7B on 1,024 H100s, TP 8) at batches from below to far above its
# critical batch, one target loss: 2.6e10 tokens stated at 512 sequences
WASTE_SWEEP = dict(
    model="llama2-7b",
    accelerator="H100-SXM",
    num_accelerators=1024,
    tensor_parallel=8,
    sequence_parallel=True,
    micro_batch_size=1,
    target_batch_size=512,
    global_batch_size=[128, 256, 512, 1024, 2048, 4096, 16384],
)


def test_efficiency_metrics_do_not_reward_wasted_tokens():
    """The Landauer ratio and the efficiency index are taken against the tokens the target
    needs (E_min), which no batch changes: a run that consumes more tokens for the same loss
    and spends at least as much energy (and time) on them never scores better (issue 35:
    they used to improve from batch 512 to 16,384 while the energy grew several-fold)."""
    r = _evaluate(**WASTE_SWEEP)
    assert r["feasible"].all()
    tokens, energy = r["tokens_to_train"].to_numpy(), r["energy_to_train_j"].to_numpy()
    time_s = r["time_to_train_s"].to_numpy()
    ratio, eei = r["landauer_ratio"].to_numpy(), r["energy_efficiency_index"].to_numpy()
    # the bound is the target's: the same at every batch, below every batch's tokens
    assert np.ptp(r["landauer_bound_j"]) == 0.0
    assert np.ptp(r["min_tokens_to_train"]) == 0.0
    assert (r["min_tokens_to_train"] < tokens).all()
    assert tokens[-1] > 10 * tokens[0]  # the sweep does waste tokens
    wasteful = 0
    for i in range(len(r)):
        for j in range(len(r)):
            if tokens[i] > tokens[j] and energy[i] >= energy[j]:
                wasteful += 1
                assert ratio[i] >= ratio[j]
                if time_s[i] >= time_s[j]:
                    assert eei[i] <= eei[j]
    assert wasteful >= 10
    best = int(np.argmin(energy))
    assert ratio[-1] > ratio[best] and eei[-1] < eei[best]
    # on one job size and accelerator: the ratio ranks as the energy, the index as 1 / ETP
    np.testing.assert_allclose(ratio / energy, ratio[0] / energy[0], rtol=1e-9)
    etp = r["energy_time_product_js"].to_numpy()
    np.testing.assert_allclose(eei * etp, eei[0] * etp[0], rtol=1e-9)
    assert int(np.argmax(eei)) == int(np.argmin(etp))


def test_rate_metrics_see_the_batch_not_the_target():
    """MFU and tokens per joule are rates of the hardware: they count every consumed token,
    so they keep rising with the batch past the point where the run to the target gets
    dearer (documented in docs/model-energy.md, section 5a)."""
    r = _evaluate(**WASTE_SWEEP)
    assert np.all(np.diff(r["mfu"]) > 0) and np.all(np.diff(r["tokens_per_j"]) > 0)
    assert r["energy_to_train_j"].iloc[-1] > r["energy_to_train_j"].min()


def test_power_swing_and_ramp_and_the_power_floor():
    base = dict(
        accelerator="H100-SXM",
        num_accelerators=512,
        pipeline_parallel=4,
        tensor_parallel=8,
        model="llama2-7b",
    )
    r = _evaluate(**base, power_floor_w=[np.nan, 400.0])
    assert r["facility_power_swing_w"][0] > 0
    assert r["facility_power_ramp_w_per_s"][0] == pytest.approx(
        r["facility_power_swing_w"][0] / 0.01
    )
    assert (
        r["facility_power_swing_w"][1] < r["facility_power_swing_w"][0]
    )  # the floor smooths the swing
    assert r["energy_to_train_j"][1] > r["energy_to_train_j"][0]  # ... at an energy cost
    assert r["facility_peak_power_w"][0] >= r["facility_avg_power_w"][0]


def test_retime_is_only_called_when_the_clock_changes():
    cfg = _cfg(
        accelerator="H100-SXM", num_accelerators=8, micro_batch_size=8, power_cap_w=[np.nan, np.nan]
    )  # GPU-bound
    calls = []

    def retime(clock, rows):
        calls.append((clock, rows))
        return time_model.evaluate(model.take_rows(cfg, rows), clock)

    with np.errstate(all="ignore"):
        perf = time_model.evaluate(cfg)
        energy_model.evaluate(cfg, perf, retime=retime)
        assert calls == []
        cfg["power_cap_w"] = np.array([np.nan, 350.0])
        perf = time_model.evaluate(cfg)
        out = energy_model.evaluate(cfg, perf, retime=retime)
    assert len(calls) == 1
    assert list(calls[0][1]) == [1]  # only the capped row is re-timed
    assert out.metrics["effective_clock_mhz"][0] == perf.clock_mhz[0]
    assert out.metrics["effective_clock_mhz"][1] < perf.clock_mhz[1]
    assert out.timing.step_time_s[1] > perf.step_time_s[1]
    assert out.timing.step_time_s[0] == perf.step_time_s[0]


def test_infeasible_and_odd_rows_never_raise():
    r = _evaluate(
        accelerator=["H100-SXM", "A100-80GB", "H100-SXM"],
        num_accelerators=[7, 8, 8],
        tensor_parallel=[2, 3, 1],
        clock_mhz=[1980, 1410, 5000],
    )
    assert len(r) == 3
    assert not r["feasible"][0]


def test_lower_clock_trades_time_for_energy_on_a_compute_bound_job():
    clocks = [1410.0, 1200.0, 1050.0]
    r = _evaluate(
        accelerator="A100-80GB",
        num_accelerators=64,
        tensor_parallel=8,
        pipeline_parallel=8,
        model="gpt3-175b",
        global_batch_size=64,
        micro_batch_size=1,
        recompute="full",
        clock_mhz=clocks,
        host_power_w=0.0,
        nic_power_w=0.0,
        scaleup_switch_power_w=0.0,
    )
    assert np.all(np.diff(r["time_to_train_s"]) > 0)
    assert r["energy_to_train_j"][1] < r["energy_to_train_j"][0]
    assert np.all(np.diff(r["peak_power_per_accelerator_w"]) < 0)


def _mixed_cfg(n: int = 3000, seed: int = 3) -> dict[str, np.ndarray]:
    """A mixed table with capped and throttled rows (hot air-cooled inlets, low caps)."""
    rng = np.random.default_rng(seed)
    pick = lambda xs: list(rng.choice(xs, n))  # noqa: E731
    return _cfg(
        accelerator=pick(["A100-80GB", "H100-SXM", "MI300X", "B200"]),
        model=pick(["gpt-1.3b", "llama2-7b"]),
        num_accelerators=pick([8, 64, 512]),
        tensor_parallel=pick([1, 2, 4, 8]),
        pipeline_parallel=pick([1, 2, 4]),
        cooling=pick(["air", "liquid"]),
        inlet_temp_c=list(rng.uniform(20, 55, n)),
        power_cap_w=list(np.where(rng.random(n) < 0.4, rng.uniform(250, 900, n), np.nan)),
    )


def _arrays(result, prefix="") -> dict[str, np.ndarray]:
    """Every array of a (nested) result dataclass, by dotted field name."""
    out = {}
    for f in dataclasses.fields(result):
        v = getattr(result, f.name)
        out.update(
            _arrays(v, f"{prefix}{f.name}.")
            if dataclasses.is_dataclass(v)
            else {prefix + f.name: v}
        )
    return out


def test_retiming_a_subset_equals_retiming_every_row_for_those_rows():
    cfg = _mixed_cfg()
    rng = np.random.default_rng(1)
    with np.errstate(all="ignore"):
        clock = time_model.evaluate(cfg).clock_mhz * rng.uniform(0.5, 1.0, 3000)
        rows = np.flatnonzero(rng.random(3000) < 0.2)
        every = _arrays(time_model.evaluate(cfg, clock))
        some = _arrays(time_model.evaluate(model.take_rows(cfg, rows), clock[rows]))
    assert some.keys() == every.keys()
    for k, v in some.items():
        np.testing.assert_array_equal(v, every[k][rows], err_msg=k)


def test_retime_gets_the_changed_rows_and_their_clocks_only():
    # the one retime signature: retime(clock_mhz, rows) -> TimeResult for those rows
    cfg = _mixed_cfg()
    seen = []

    def retime(clock_mhz, rows):
        seen.append((clock_mhz, rows))
        return time_model.evaluate(model.take_rows(cfg, rows), clock_mhz)

    with np.errstate(all="ignore"):
        perf = time_model.evaluate(cfg)
        reason_before = perf.reason.copy()
        out = energy_model.evaluate(cfg, perf, retime)
        clock = out.metrics["effective_clock_mhz"]
        at_final_clock = time_model.evaluate(cfg, clock)
    assert out.metrics["power_capped"].any() and out.metrics["throttled"].any()
    # the first call re-times every row whose clock changes; a later pass (the estimate is not
    # exact where a stage waits for its host) only some of them, at lower clocks again
    changed = np.flatnonzero(clock < perf.clock_mhz)
    np.testing.assert_array_equal(seen[0][1], changed)
    for clock_rows, rows in seen:
        assert set(rows) <= set(changed)
        assert np.all(clock_rows < perf.clock_mhz[rows])
    final = {}
    for clock_rows, rows in seen:
        final.update(zip(rows, clock_rows, strict=True))
    np.testing.assert_array_equal([final[i] for i in changed], clock[changed])
    for k, v in out.timing.metrics().items():  # the time result at the clock it runs at
        np.testing.assert_array_equal(v, getattr(at_final_clock, k), err_msg=k)
    np.testing.assert_array_equal(perf.reason, reason_before)  # perf is not modified


def test_energy_reasons_come_back_and_time_reasons_win():
    cfg = _cfg(
        accelerator="H100-SXM",
        num_accelerators=[8, 7],
        tensor_parallel=[1, 2],
        power_cap_w=[50.0, 50.0],
    )
    with np.errstate(all="ignore"):
        perf = time_model.evaluate(cfg)
        e = energy_model.evaluate(
            cfg, perf, retime=lambda c, rows: time_model.evaluate(model.take_rows(cfg, rows), c)
        )
        r = model.evaluate(cfg)
    assert list(perf.reason) == [
        "",
        "tensor x context x pipeline parallel does not divide the accelerator count",
    ]
    assert "power cap" in e.reason[0] and "power cap" in e.reason[1]
    assert "power cap" in r["reason"][0]
    assert r["reason"][1] == perf.reason[1]
    assert list(r["feasible"]) == [False, False]


def test_the_clock_estimate_at_the_timed_clock_is_the_breakdowns_own_phases():
    # the clock search's estimate of the phases (phases.ClockScaling) is exact where it is anchored
    with np.errstate(all="ignore"):
        perf = time_model.evaluate(_mixed_cfg())
        b, f0 = perf.breakdown, perf.clock_mhz
        ok = np.isfinite(f0) & np.isfinite(b.step_s)
        estimate, own = phases.ClockScaling(b, f0).times(f0), phases.phase_times(b)
    for name in ("step", "compute", "memory", "fine_wait", "blocked", "busy"):
        np.testing.assert_array_equal(
            getattr(estimate, name)[ok], getattr(own, name)[ok], err_msg=name
        )


def test_a_lower_clock_first_fills_the_wait_for_the_host():
    # 1 s compute-bound, 1 s memory-bound of which 0.4 s the GPU waits for its host's launches:
    # at half the clock compute takes 2 s, and 0.4 s of its growth hides in that wait
    b = dataclasses.replace(
        StepBreakdown.one_accelerator(np.array([1.0]), np.array([1.0]), np.zeros(1)),
        host_idle_s=np.array([0.4]),
    )
    t = phases.ClockScaling(b, np.array([2000.0])).times(np.array([1000.0]))
    assert t.compute[0] == 2.0 and t.step[0] == pytest.approx(2.6)
    assert t.memory[0] == pytest.approx(0.6) and t.fine_wait[0] == 0.0


def test_the_clock_search_and_the_energy_half_give_the_same_power_at_the_set_clock():
    # one energy model: the search's cap test at the timed clock is the energy half's busy power
    cfg = _mixed_cfg()
    with np.errstate(all="ignore"):
        perf = time_model.evaluate(cfg)
        acc = energy_model._accelerators(energy_model.EnergyInputs.of(cfg), perf)
        e, _ = accelerator.energy_and_thermal(perf.breakdown, perf.clock_mhz, acc)
        cap_ok, _ = clock_search.LimitCheck(perf.breakdown, acc, perf.clock_mhz)(perf.clock_mhz)
    finite = np.isfinite(e.busy_w)
    assert finite.sum() > 100 and (~cap_ok).any() and cap_ok.any()
    np.testing.assert_array_equal(
        cap_ok[finite], ~(e.busy_w > acc.cap_w * (1 + clock_search.BISECTION_RTOL))[finite]
    )


def test_the_search_over_few_rows_tests_several_steps_at_once_with_the_same_result():
    # a small bisection (the search's later passes) evaluates the clocks of several steps in
    # one call; it finds the very clocks the step-by-step bisection does, bit for bit
    cfg = _mixed_cfg(n=1500)
    with np.errstate(all="ignore"):
        perf = time_model.evaluate(cfg)
        acc = energy_model._accelerators(energy_model.EnergyInputs.of(cfg), perf)
        cap_ok, hot_ok = clock_search.LimitCheck(perf.breakdown, acc, perf.clock_mhz)(
            perf.clock_mhz
        )
        finite = np.isfinite(perf.clock_mhz)
        cap_rows = np.flatnonzero(~cap_ok & finite)
        hot_rows = np.flatnonzero(~hot_ok & finite)
        assert len(cap_rows) > 20 and len(hot_rows) > 20
        at = np.concatenate([cap_rows[:20], hot_rows[:20]])
        hot = np.arange(len(at)) >= 20
        lo, hi = acc.clock_min_mhz[at], np.asarray(perf.clock_mhz, dtype=float)[at]
        for sel in (slice(0, 1), slice(15, 25), slice(None)):
            rows, n = at[sel], len(at[sel])

            def check(repeat, rows=rows):
                picked = rows[np.tile(np.arange(len(rows)), repeat)]
                return clock_search.LimitCheck(
                    rows_module.take(perf.breakdown, picked),
                    rows_module.take(acc, picked),
                    np.asarray(perf.clock_mhz, dtype=float)[picked],
                )

            one = clock_search._bisect(check(1), lo[sel], hi[sel], hot[sel])
            assert (one < hi[sel]).all()
            for levels in (2, 3, 6):
                tree = clock_search._bisect(
                    check(2**levels - 1), lo[sel], hi[sel], hot[sel], levels
                )
                assert n and np.array_equal(tree.view(np.int64), one.view(np.int64))


def test_once_and_where_shared_give_the_values_of_the_whole_computation_to_the_bit():
    """``rows.once`` (an element-wise function of inputs left at their defaults, computed on
    one row) and ``rows.where_shared`` (no copy where the mask picks one side) give the bits
    of the plain computation; where they cannot, they are the plain computation."""
    from dse.analytic.columns import repeat_one

    rng = np.random.default_rng(11)
    n = 3000
    fraction = repeat_one(np.array([0.55]), n)  # a default: one value, read-only
    pj = repeat_one(np.array([np.nan]), n)
    full = rng.uniform(0.2, 1.0, n)

    def scaled(p, f):
        return np.where(np.isfinite(p), p, 5.0) * power.link_energy_scale(f)

    for args in ((pj, fraction), (pj, full), (5.0, fraction)):
        got, want = rows_module.once(scaled, *args), scaled(*args)
        assert got.shape == want.shape
        assert np.array_equal(got.view(np.int64), want.view(np.int64))
    assert not rows_module.once(scaled, pj, fraction).flags.writeable  # one value, broadcast
    x = rng.standard_normal(n)
    x[::7], x[::11] = np.nan, -0.0
    for mask in (np.ones(n, bool), np.zeros(n, bool), rng.random(n) < 0.5):
        for a, b in ((x, 0.0), (x, np.nan), (0.0, x), (x, -x)):
            got, want = rows_module.where_shared(mask, a, b), np.where(mask, a, b)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got.view(np.int64), want.view(np.int64))
    assert rows_module.where_shared(np.ones(n, bool), x, 0.0) is x  # no copy


def test_checkpointing_off_leaves_every_output_unchanged():
    # without failures (failures_per_accelerator_hour 0; the default, Llama 3's rate, makes the
    # default interval the Young/Daly optimum, tests/test_goodput.py), no interval = none
    cfg = {**_mixed_cfg(n=600), "failures_per_accelerator_hour": np.zeros(600)}
    without = {k: v for k, v in cfg.items() if not k.startswith("checkpoint_")}
    with np.errstate(all="ignore"):
        base = model.evaluate(declarations.complete(without))
        for extra in (
            {"checkpoint_interval_s": np.zeros(600)},
            {
                "checkpoint_interval_s": np.zeros(600),
                "checkpoint_write_gbs": np.full(600, 0.5),
                "checkpoint_duration_s": np.full(600, 30.0),
            },
        ):
            off = model.evaluate({**cfg, **extra})
            assert off.keys() == base.keys()
            for k in base:
                np.testing.assert_array_equal(off[k], base[k], err_msg=k)
    perf = time_model.evaluate(declarations.complete(without))
    # the candidates the time model does not refuse are timed (the others get NaN)
    ok = perf.reason_code == 0
    assert ok.sum() > 100
    np.testing.assert_array_equal(base["checkpoint_time_s"][ok], 0.0)
    np.testing.assert_array_equal(base["checkpoint_overhead"][ok], 0.0)
    # time metrics come from the time model (at the candidates' own clock)
    timed = ~base["power_capped"] & ~base["throttled"] & ok
    np.testing.assert_array_equal(base["time_to_train_s"][timed], perf.time_to_train_s[timed])


def test_a_checkpoint_writes_the_training_state_once_whatever_the_layout():
    """Weights and optimizer state (2 + 12 B per parameter) are written once per checkpoint,
    each replicated tensor's write shared by its copies: at a given aggregate bandwidth a
    checkpoint takes the same time on 64 or 1,024 accelerators, at any ZeRO stage, and the
    time is the state over that bandwidth."""
    n = np.array([64, 64, 64, 1024, 1024, 1024])
    aggregate_gbs = 100.0
    r = _evaluate(
        accelerator="H100-SXM",
        model="llama2-7b",
        num_accelerators=list(n),
        global_batch_size=1024,
        tensor_parallel=[4, 2, 1, 1, 2, 8],
        zero_stage=[0, 1, 3, 1, 2, 0],
        micro_batch_size=1,
        checkpoint_write_gbs=list(aggregate_gbs / n),
        checkpoint_interval_s=3600.0,
        failures_per_accelerator_hour=0.0,
    )
    assert r["feasible"].all(), r["reason"].tolist()
    per_checkpoint_s = r["checkpoint_time_s"] / (
        (r["time_to_train_s"] - r["checkpoint_time_s"]) / 3600.0
    )
    np.testing.assert_allclose(per_checkpoint_s, per_checkpoint_s[0], rtol=1e-12)
    # (the memory count leaves out the final norm's few thousand parameters)
    np.testing.assert_allclose(
        per_checkpoint_s, 14.0 * r["parameters"] / (aggregate_gbs * 1e9), rtol=1e-5
    )
    # a mixture of experts (expert weights shared over the expert-data-parallel ranks) and
    # context parallelism (copies across its ranks too): the same rule
    m = _evaluate(
        accelerator="H100-SXM",
        model="qwen3-30b-a3b",
        num_accelerators=64,
        global_batch_size=256,
        micro_batch_size=1,
        tensor_parallel=[1, 2, 1],
        context_parallel=[1, 1, 2],
        expert_parallel=[8, 4, 16],
        zero_stage=[1, 3, 1],
        checkpoint_write_gbs=aggregate_gbs / 64,
        checkpoint_interval_s=3600.0,
        failures_per_accelerator_hour=0.0,
    )
    assert m["feasible"].all(), m["reason"].tolist()
    per_checkpoint_s = m["checkpoint_time_s"] / (
        (m["time_to_train_s"] - m["checkpoint_time_s"]) / 3600.0
    )
    np.testing.assert_allclose(
        per_checkpoint_s, 14.0 * m["parameters"] / (aggregate_gbs * 1e9), rtol=1e-3
    )


def _swing_case(**extra) -> pd.DataFrame:
    return _evaluate(
        accelerator="H100-SXM",
        num_accelerators=512,
        pipeline_parallel=4,
        tensor_parallel=8,
        model="llama2-7b",
        failures_per_accelerator_hour=0.0,
        **extra,
    )


def test_checkpointing_adds_the_predicted_time_and_energy():
    interval = 3600.0
    r = _swing_case(
        checkpoint_interval_s=[0.0, interval, interval],
        checkpoint_write_gbs=[1.0, 1.0, 0.25],
        zero_stage=1,
    )
    base, ck, slow = (r.iloc[i] for i in range(3))
    # ZeRO-1: each rank holds its shard of the optimizer state and a copy of the weights,
    # whose write the data-parallel ranks share (each tensor is written once)
    state_b = (
        base["weights_memory_gib"] / base["data_parallel"] + base["optimizer_memory_gib"]
    ) * 2**30  # GiB
    t_one = state_b / 1e9  # seconds per checkpoint at 1 GB/s
    n_ck = base["time_to_train_s"] / interval
    assert ck["checkpoint_time_s"] == pytest.approx(n_ck * t_one, rel=1e-12)
    assert slow["checkpoint_time_s"] == pytest.approx(4 * ck["checkpoint_time_s"], rel=1e-12)
    assert ck["time_to_train_s"] == pytest.approx(
        base["time_to_train_s"] + ck["checkpoint_time_s"], rel=1e-12
    )
    assert ck["checkpoint_overhead"] == pytest.approx(
        ck["checkpoint_time_s"] / ck["time_to_train_s"], rel=1e-12
    )
    assert ck["step_time_s"] == base["step_time_s"]  # the iteration itself is unchanged
    # energy: N accelerators parked (context held, no kernel: 121.7 W on H100, Vadari 2026)
    # plus host and NIC/switch static power for the checkpoint time, plus the bytes over the
    # scale-out fabric, with the PUE
    p_parked = 80.0 + 0.0673 * (700.0 - 80.0)  # H100: idle 80 W, TDP 700 W, a_p 0.0673
    assert p_parked == pytest.approx(121.7, abs=0.1)
    p_static = 800.0 / 8 + 25.0 + 25.0 + 30.0  # host share, NIC, scale-up and scale-out switches
    links = state_b * 8 * 25e-12 * n_ck
    wall = (1 + 0.08) / 0.96  # server fans and 80 PLUS Titanium supplies (the defaults)
    extra_it = 512 * ((p_parked + p_static) * ck["checkpoint_time_s"] + links) * wall
    assert ck["it_energy_to_train_j"] - base["it_energy_to_train_j"] == pytest.approx(
        extra_it, rel=1e-6
    )
    assert ck["energy_to_train_j"] - base["energy_to_train_j"] == pytest.approx(
        1.2 * extra_it, rel=1e-6
    )
    assert ck["energy_idle_j"] - base["energy_idle_j"] == pytest.approx(
        512 * 80.0 * ck["checkpoint_time_s"], rel=1e-9
    )
    assert ck["energy_waiting_j"] - base["energy_waiting_j"] == pytest.approx(
        512 * (p_parked - 80.0) * ck["checkpoint_time_s"], rel=1e-6
    )
    for c in (
        "energy_compute_j",
        "energy_memory_j",
        "energy_per_step_j",
        "peak_power_per_accelerator_w",
        "facility_peak_power_w",
        "peak_junction_temp_c",
    ):
        assert ck[c] == base[c], c
    # the swing steps down to the parked power, below the blocked power of the bubble
    p_blocked = 80.0 + 0.10 * (700.0 - 80.0)
    assert base["facility_power_swing_w"] == pytest.approx(
        512 * (base["peak_power_per_accelerator_w"] - p_blocked) * wall
    )
    assert ck["facility_power_swing_w"] == pytest.approx(
        512 * (ck["peak_power_per_accelerator_w"] - p_parked) * wall
    )
    total = sum(ck[c] for c in COMPONENTS)
    assert total == pytest.approx(ck["energy_to_train_j"], rel=1e-9)
    assert ck["facility_avg_power_w"] == pytest.approx(
        ck["energy_to_train_j"] / ck["time_to_train_s"], rel=1e-9
    )
    assert ck["facility_avg_power_w"] < base["facility_avg_power_w"]
    assert ck["cost_usd"] > base["cost_usd"]


def test_checkpoint_duration_override_and_the_checkpoint_as_a_low_phase():
    # tensor parallel only, one data-parallel rank: no bubble, no data-parallel all-reduce,
    # so without checkpoints the job never steps down and there is no swing
    base = dict(
        accelerator="H100-SXM",
        num_accelerators=8,
        tensor_parallel=8,
        model="llama2-7b",
        failures_per_accelerator_hour=0.0,
    )
    r = _evaluate(
        **base,
        checkpoint_interval_s=[0.0, 1800.0, 1800.0],
        checkpoint_duration_s=[np.nan, 60.0, 0.0],
    )
    assert r["bubble_time_s"][0] == 0 and r["dp_comm_time_s"][0] == 0
    assert r["facility_power_swing_w"][0] == 0
    assert r["checkpoint_overhead"][1] == pytest.approx(
        (60.0 / 1800) / (1 + 60.0 / 1800), rel=1e-12
    )
    assert r["checkpoint_time_s"][1] == pytest.approx(
        r["time_to_train_s"][0] / 1800 * 60.0, rel=1e-12
    )
    p_parked = 80.0 + 0.0673 * (700.0 - 80.0)  # a checkpoint parks the accelerators
    assert r["facility_power_swing_w"][1] == pytest.approx(
        8 * (r["peak_power_per_accelerator_w"][1] - p_parked) * (1 + 0.08) / 0.96
    )
    assert r["facility_power_ramp_w_per_s"][1] == pytest.approx(
        r["facility_power_swing_w"][1] / 0.01
    )
    assert (
        r["facility_power_swing_w"][2] == 0 and r["checkpoint_time_s"][2] == 0
    )  # a zero-length checkpoint
    assert r["time_to_train_s"][2] == r["time_to_train_s"][0]
    # the power floor smooths the checkpoint step as it does the bubble
    f = _evaluate(
        **base,
        checkpoint_interval_s=1800.0,
        checkpoint_duration_s=60.0,
        power_floor_w=[np.nan, 400.0],
    )
    assert f["facility_power_swing_w"][1] < f["facility_power_swing_w"][0]
    assert f["energy_to_train_j"][1] > f["energy_to_train_j"][0]


def test_checkpointing_on_infeasible_and_odd_rows_never_raises():
    r = _evaluate(
        accelerator=["H100-SXM", "A100-80GB", "H100-SXM", "nope"],
        num_accelerators=[7, 8, 8, 8],
        tensor_parallel=[2, 3, 1, 1],
        clock_mhz=[1980, 1410, 5000, 1000],
        checkpoint_interval_s=600.0,
        power_cap_w=[np.nan, np.nan, 50.0, np.nan],
    )
    assert len(r) == 4
    assert not r["feasible"].any()
    cfg = _mixed_cfg(n=500)
    cfg["checkpoint_interval_s"] = np.where(np.arange(500) % 2 == 0, 900.0, 0.0)
    with np.errstate(all="ignore"):
        out = model.evaluate(cfg)
    ok = out["feasible"] & (cfg["checkpoint_interval_s"] > 0)
    assert ok.any() and (out["checkpoint_overhead"][ok] > 0).all()
    assert np.isfinite(out["time_to_train_s"][ok]).all()


def test_a_power_floor_holds_in_every_phase_and_below_the_cap():
    """Power smoothing's floor is a minimum of the board's draw: a busy phase below it burns
    up to it as well, so the peak is never below the average (the floor used to lift only
    the waits); and no floor makes a board draw more than its power limit."""
    r = _evaluate(
        model="llama2-7b",
        num_accelerators=64,
        global_batch_size=512,
        tensor_parallel=2,
        pipeline_parallel=4,
        framework="megatron",
        clock_fraction=0.6,
        power_floor_w=[np.nan, 400.0, 700.0, 700.0],
        power_cap_w=[np.nan, np.nan, np.nan, 500.0],
    )
    assert (r["peak_power_per_accelerator_w"] >= r["avg_power_per_accelerator_w"] - 1e-9).all()
    assert (r["facility_power_swing_w"] >= 0).all() and (r["junction_temp_swing_c"] >= -1e-9).all()
    assert r["avg_power_per_accelerator_w"][2] == pytest.approx(
        700.0, rel=1e-9
    )  # the floor everywhere
    assert r["peak_power_per_accelerator_w"][3] <= 500.0 * (1 + 1e-6)  # at most the cap
    assert r["energy_to_train_j"][2] > r["energy_to_train_j"][1] > r["energy_to_train_j"][0]


def test_the_gpu_waiting_for_its_host_draws_waiting_power_not_memory_power():
    """A host-bound step: the time model puts the GPU's wait for kernel launches in the
    memory slot; the power model counts it with the other fine-grained waits."""
    cfg = _cfg(
        model="llama3-8b",
        accelerator="H100-SXM",
        num_accelerators=64,
        framework="megatron-core",
        global_batch_size=64,
        tensor_parallel=8,
        sequence_parallel=True,
        seq_len=512,
    )
    b = time_model.evaluate(cfg).breakdown
    assert b.host_idle_s[0] > 0.3 * b.step_s[0]  # host-bound
    t = phases.phase_times(b)
    assert t.memory[0] == pytest.approx(
        b.memory_s[0] + b.optimizer_s[0] - b.host_idle_s[0], rel=1e-12
    )
    assert t.fine_wait[0] == pytest.approx(
        b.layer_comm_s[0] + b.pp_comm_s[0] + b.host_idle_s[0], rel=1e-12
    )


def test_power_at_the_wall_adds_server_fans_and_power_supply_losses():
    """The node's DC power (accelerators, host, NICs, switch shares) times (1 + fans) /
    psu_efficiency is its power at the wall: fans in energy_host_j, the conversion loss in
    energy_power_supply_j; 80 PLUS Titanium (0.96) by default, Platinum (0.94) costs more."""
    kw = dict(accelerator="H100-SXM", num_accelerators=64, model="gpt-1.3b", pue=1.2)
    dc = _evaluate(**kw, psu_efficiency=1.0, fan_power_fraction=0.0).iloc[0]
    r = _evaluate(**kw, psu_efficiency=[0.96, 0.94], fan_power_fraction=0.08)
    assert dc["energy_power_supply_j"] == 0
    for i, eta in enumerate((0.96, 0.94)):
        w = 1.08 / eta
        assert r["it_energy_to_train_j"][i] == pytest.approx(w * dc["it_energy_to_train_j"])
        assert r["energy_power_supply_j"][i] == pytest.approx(
            (1 / eta - 1) * 1.08 * dc["it_energy_to_train_j"]
        )
        assert r["energy_host_j"][i] - dc["energy_host_j"] == pytest.approx(
            0.08 * dc["it_energy_to_train_j"]
        )
        for m in ("node_peak_power_w", "node_avg_power_w", "facility_peak_power_w"):
            assert r[m][i] == pytest.approx(w * dc[m]), m
        assert r["energy_compute_j"][i] == dc["energy_compute_j"]  # the accelerators: unchanged
    assert r["energy_to_train_j"][1] > r["energy_to_train_j"][0]
    # one node at the wall: 8 accelerators' busy power plus their host, fans and supplies
    assert dc["node_peak_power_w"] == pytest.approx(
        dc["facility_peak_power_w"] / 1.2 / (64 / 8), rel=1e-12
    )
    assert dc["node_peak_power_w"] > 8 * dc["peak_power_per_accelerator_w"]
    assert dc["node_avg_power_w"] <= dc["node_peak_power_w"]
