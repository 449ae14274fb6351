import dataclasses

import numpy as np
import pandas as pd
import pytest
from test_memory import cfg

from dse.analytic import declarations
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import hardware, training
from dse.analytic.time import model as time_model

NAMES = [
    "V100-SXM2",
    "A100-40GB",
    "A100-80GB",
    "H100-SXM",
    "H200",
    "B200",
    "MI250X",
    "MI300X",
    "GB200",
    "MI325X",
    "MI355X",
    "TPU-v5e",
    "TPU-v5p",
    "TPU-v6e",
]


def test_catalog_complete():
    cat = hardware.catalog()
    assert set(NAMES) <= set(cat)
    for name in NAMES:
        for f in (
            "peak_tflops",
            "hbm_bw_gbs",
            "hbm_gb",
            "clock_max_mhz",
            "clock_min_mhz",
            "tdp_w",
            "idle_w",
            "scaleup_bw_gbs",
            "scaleup_domain",
            "source",
        ):
            assert cat[name][f] is not None
    assert cat["A100-80GB"]["peak_tflops"]["bf16"] == 312
    assert cat["H100-SXM"]["peak_tflops"]["bf16"] == 989


def test_interface_for_energy_model():
    r = time_model.evaluate(cfg(2, accelerator="A100-80GB"))
    for k in ("clock_max_mhz", "clock_min_mhz", "tdp_w", "idle_w", "peak_flops", "hbm_bw_bps"):
        assert getattr(r.hw, k).shape == (2,)
    for k in (
        "compute_s",
        "memory_s",
        "layer_comm_s",
        "pp_comm_s",
        "dp_comm_s",
        "bubble_s",
        "optimizer_s",
        "step_s",
        "hbm_traffic_bytes",
        "scaleup_bytes",
        "scaleout_bytes",
    ):
        assert getattr(r.breakdown, k).shape == (2,)
    for m in declarations.TIME_METRICS:
        assert getattr(r, m.name).shape == (2,)
    assert list(r.reason) == ["", ""]
    b = r.breakdown
    parts = sum(
        getattr(b, k)
        for k in (
            "compute_s",
            "memory_s",
            "layer_comm_s",
            "pp_comm_s",
            "dp_comm_s",
            "bubble_s",
            "optimizer_s",
        )
    )
    assert np.allclose(parts, b.step_s)


def test_compute_scales_with_clock_memory_does_not():
    c = cfg(1, accelerator="A100-80GB")
    hi = time_model.evaluate(c)
    lo = time_model.evaluate(c, clock_mhz=np.array([705.0]))
    # every GEMM's compute-bound time doubles; a GEMM may turn compute-bound at the lower
    # clock (roofline), moving its time from the memory slot to the compute slot
    assert lo.breakdown.compute_s[0] >= 2 * hi.breakdown.compute_s[0] * (1 - 1e-9)
    assert lo.breakdown.memory_s[0] <= hi.breakdown.memory_s[0] * (1 + 1e-9)
    big = cfg(
        1,
        accelerator="A100-80GB",
        model="gpt3-175b",
        num_accelerators=1024,
        tensor_parallel=8,
        pipeline_parallel=8,
        global_batch_size=1024,
        flash_attention=True,
    )
    hi, lo = time_model.evaluate(big), time_model.evaluate(big, clock_mhz=np.array([705.0]))
    assert np.isclose(lo.breakdown.compute_s[0], 2 * hi.breakdown.compute_s[0], rtol=1e-3)
    assert np.isclose(lo.breakdown.memory_s[0], hi.breakdown.memory_s[0], rtol=2e-3)


@pytest.mark.parametrize(
    "kw, reason",
    [
        (
            dict(num_accelerators=12, tensor_parallel=8),
            "tensor x context x pipeline parallel does not divide the accelerator count",
        ),
        (
            dict(tensor_parallel=3, num_accelerators=3),
            "tensor parallel degree does not divide the attention heads",
        ),
        (dict(pipeline_parallel=25, num_accelerators=25), "more pipeline stages than layers"),
        (
            dict(
                pipeline_parallel=5,
                num_accelerators=40,
                interleave=2,
                global_batch_size=80,
                framework="megatron",
            ),
            "pipeline parallel x interleave does not divide the layers",
        ),
        (
            dict(global_batch_size=100, micro_batch_size=3),
            "data parallel x micro batch does not divide the global batch",
        ),
        (
            dict(accelerator="V100-SXM2", precision="bf16"),
            "precision not supported by the accelerator",
        ),
        (dict(clock_mhz=5000.0), "clock outside the accelerator's range"),
        (dict(target_loss=1.0), "target loss unreachable at this model size (Chinchilla fit)"),
    ],
)
def test_infeasible_layouts_have_reasons(kw, reason):
    r = time_model.evaluate(cfg(1, **kw))
    assert r.reason[0] == reason


def test_pipeline_bubble_and_interleave():
    base = dict(
        model="gpt3-175b",
        accelerator="H100-SXM",
        num_accelerators=1024,
        tensor_parallel=8,
        pipeline_parallel=16,
        global_batch_size=1024,
        sequence_parallel=True,
        framework="megatron",
    )
    r1 = time_model.evaluate(cfg(1, **base))
    r2 = time_model.evaluate(cfg(1, **base, interleave=2))
    assert r1.reason[0] == "" and r2.reason[0] == ""
    assert np.isclose(r2.bubble_time_s[0] * 2, r1.bubble_time_s[0], rtol=1e-6)
    assert 0.2 < r1.mfu[0] < 0.8


def test_scaleout_bandwidth_slows_data_parallel():
    base = dict(
        model="llama2-7b", accelerator="H100-SXM", num_accelerators=256, global_batch_size=256
    )
    fast = time_model.evaluate(cfg(1, **base, scaleout_bw_gbs=50.0))
    slow = time_model.evaluate(cfg(1, **base, scaleout_bw_gbs=1.0))
    assert slow.dp_comm_time_s[0] > fast.dp_comm_time_s[0]
    assert slow.step_time_s[0] > fast.step_time_s[0]


def test_a_tpu_without_a_scaleout_input_takes_its_own_dcn():
    """Slices of TPU v5e joined by the data-centre network: without a scaleout_bw_gbs input
    the part's catalog figure (3.125 GB/s per chip) is used, not the GPU default (50 GB/s),
    and the TPU's own DCN step latency replaces the shared scale-out latency."""
    base = dict(
        model="llama2-13b",
        accelerator="TPU-v5e",
        num_accelerators=1024,
        global_batch_size=1024,
        micro_batch_size=1,
        zero_stage=3,
    )
    own = time_model.evaluate(cfg(1, **base))
    stated = time_model.evaluate(cfg(1, **base, scaleout_bw_gbs=3.125))
    gpu_nic = time_model.evaluate(cfg(1, **base, scaleout_bw_gbs=50.0))
    assert own.reason[0] == "" and gpu_nic.reason[0] == ""
    assert own.step_time_s[0] == pytest.approx(stated.step_time_s[0], rel=1e-12)
    assert own.dp_comm_time_s[0] > gpu_nic.dp_comm_time_s[0]
    tpu, gpu = hardware.calibration_for("TPU-v5e"), hardware.calibration_for("H100-SXM")
    assert gpu["scaleout_latency_us"] == hardware.calibration()["shared"]["scaleout_latency_us"]
    assert tpu["scaleout_latency_us"] > gpu["scaleout_latency_us"]
    one_slice = time_model.evaluate(
        cfg(1, **{**base, "num_accelerators": 256, "global_batch_size": 256})
    )
    slow_dcn = time_model.evaluate(cfg(1, **base, scaleout_latency_us=5000.0))
    assert one_slice.reason[0] == ""
    assert slow_dcn.dp_comm_time_s[0] > own.dp_comm_time_s[0] > one_slice.dp_comm_time_s[0]


def test_training_length_laws():
    d = np.array([1e10])
    assert np.isclose(
        training.tokens_to_target(d, np.array([0.0]), np.array([4e6]), np.array([4e6]))[0], 2e10
    )
    n = time_model.evaluate(cfg(1, model="chinchilla-70b")).parameters
    loss = training.chinchilla_loss(n, np.array([1.4e12]))
    assert np.isclose(training.chinchilla_tokens(n, loss)[0], 1.4e12, rtol=1e-6)
    r = time_model.evaluate(
        cfg(
            1,
            model="chinchilla-70b",
            target_loss=float(loss[0]),
            b_noise_tokens=1e12,
            accelerator="H100-SXM",
            num_accelerators=64,
        )
    )
    assert np.isclose(r.tokens_to_train[0], 1.4e12, rtol=0.01)
    # the Kaplan critical batch at that loss is millions of tokens
    assert 1e6 < training.critical_batch_tokens(loss)[0] < 1e8


@pytest.mark.parametrize(
    "model, tokens, batch", [("gpt3-175b", 300e9, 1536), ("llama3-405b", 15.6e12, 2048)]
)
def test_a_run_at_its_stated_batch_trains_exactly_its_tokens(model, tokens, batch):
    base = dict(
        model=model,
        accelerator="H100-SXM",
        num_accelerators=8192,
        tensor_parallel=8,
        pipeline_parallel=16,
        target_tokens=tokens,
        target_batch_size=batch,
    )
    at = time_model.evaluate(cfg(1, global_batch_size=batch, **base))
    assert at.tokens_to_train[0] == pytest.approx(tokens, rel=1e-12)
    seq = {"gpt3-175b": 2048, "llama3-405b": 8192}[model]
    assert at.steps_to_train[0] == pytest.approx(tokens / (batch * seq), rel=1e-12)
    bigger = time_model.evaluate(cfg(1, global_batch_size=4 * batch, **base))
    smaller = time_model.evaluate(cfg(1, global_batch_size=batch // 2, **base))
    # bigger batches take fewer steps but need more tokens; smaller ones the reverse
    assert bigger.tokens_to_train[0] > tokens > smaller.tokens_to_train[0]
    assert bigger.steps_to_train[0] < at.steps_to_train[0] < smaller.steps_to_train[0]


def test_without_a_stated_batch_target_tokens_is_the_small_batch_limit():
    kw = dict(model="gpt-1.3b", target_tokens=2.6e10, b_noise_tokens=2e6, global_batch_size=512)
    r = time_model.evaluate(cfg(1, **kw))
    assert r.tokens_to_train[0] == pytest.approx(2.6e10 * (1 + 512 * 2048 / 2e6))
    stated = time_model.evaluate(cfg(1, target_batch_size=256, **kw))
    assert stated.tokens_to_train[0] == pytest.approx(
        2.6e10 * (1 + 512 * 2048 / 2e6) / (1 + 256 * 2048 / 2e6)
    )


def test_evaluator_handles_many_candidates_and_strings():
    ev = AnalyticEvaluator()
    df = pd.DataFrame(
        {
            "accelerator": ["A100-80GB", "MI300X", "B200"] * 20000,
            "recompute": pd.Series(["full", "none", "selective"] * 20000, dtype="category"),
            "tensor_parallel": [1, 2, 8] * 20000,
        }
    )
    out = ev.evaluate(df)
    assert len(out) == 60000
    assert out["feasible"].iloc[:3].tolist() == [True, True, True]
    assert (out["step_time_s"].iloc[:3] > 0).all()


def test_divisibility_without_fmod_matches_the_remainder():
    from dse.analytic.time.parallelism import _floor_div, indivisible

    rng = np.random.default_rng(0)
    b = rng.integers(1, 4096, 200_000).astype(float)
    a = rng.integers(0, 2**40, 200_000).astype(float)
    a[::3] = b[::3] * rng.integers(0, 10**6, len(a[::3]))
    a = np.concatenate([a, [np.nan, 1, 0, np.inf, 4, 0, -8, -np.inf]])
    b = np.concatenate([b, [2, np.nan, 0, 2, 0, 3, 2, 3]])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(indivisible(a, b), a % b != 0)
        np.testing.assert_array_equal(_floor_div(a, b), a // b)


def test_factorised_text_columns_give_the_same_results_as_object_arrays():
    from dse.analytic.columns import Factorised, factorise

    rng = np.random.default_rng(2)
    n = 500
    c = cfg(n, model="gpt-1.3b", accelerator="H100-SXM")
    c["accelerator"] = rng.choice(
        np.array(["A100-80GB", "H100-SXM", "MI300X", "nope"], dtype=object), n
    )
    c["model"] = rng.choice(np.array(["gpt-1.3b", "llama2-7b", "nope"], dtype=object), n)
    c["recompute"] = rng.choice(np.array(["none", "selective", "full"], dtype=object), n)
    c["tensor_parallel"] = rng.choice([1.0, 2.0, 4.0, 8.0], n)
    coded = {
        k: Factorised(*factorise(v)) if isinstance(v, np.ndarray) and v.dtype == object else v
        for k, v in c.items()
    }
    assert list(np.asarray(coded["accelerator"])) == list(c["accelerator"])
    a, b = time_model.evaluate(c), time_model.evaluate(coded)
    for k in declarations.TIME_METRICS:
        np.testing.assert_array_equal(getattr(a, k.name), getattr(b, k.name), err_msg=k.name)
    np.testing.assert_array_equal(a.reason, b.reason)


def test_rows_with_flash_attention_do_not_depend_on_the_other_rows():
    # the model skips the unfused attention GEMMs when every row uses FlashAttention
    base = dict(model="llama2-7b", accelerator="H100-SXM", num_accelerators=64, tensor_parallel=2)
    mixed = cfg(3, **base)
    mixed["flash_attention"] = np.array([1.0, 0.0, 1.0])
    mixed["recompute"] = np.array(["none", "none", "full"], dtype=object)
    only = {k: v[[0, 2]] for k, v in mixed.items()}
    a, b = time_model.evaluate(mixed), time_model.evaluate(only)
    for k in declarations.TIME_METRICS:
        np.testing.assert_array_equal(
            getattr(a, k.name)[[0, 2]], getattr(b, k.name), err_msg=k.name
        )
    for f in dataclasses.fields(b.breakdown):
        np.testing.assert_array_equal(
            getattr(a.breakdown, f.name)[[0, 2]], getattr(b.breakdown, f.name), err_msg=f.name
        )
    assert a.memory_time_s[1] != a.memory_time_s[0]


def test_where_or_zero_is_np_where_to_the_bit():
    """The multiplication shortcut gives np.where's bits, the sign of zero included, and
    falls back to np.where for values it cannot multiply (NaN, inf, negative, -0.0)."""
    from dse.analytic.rows import where_or_zero

    rng = np.random.default_rng(3)
    mask = rng.random(1000) < 0.5
    plain = rng.uniform(0.0, 5.0, 1000)
    plain[::7] = 0.0
    for x in (plain, np.where(mask, np.nan, 1.0), np.full(1000, np.inf), -plain, -0.0 * plain):
        got, want = where_or_zero(mask, x), np.where(mask, x, 0.0)
        assert got.dtype == want.dtype
        assert np.array_equal(got.view(np.int64), want.view(np.int64))


def test_rows_nan_to_num_is_np_nan_to_num_to_the_bit():
    from dse.analytic.rows import nan_to_num

    rng = np.random.default_rng(5)
    x = rng.normal(0.0, 1e3, 4000)
    x[rng.random(4000) < 0.2] = np.nan
    x[rng.random(4000) < 0.1] = np.inf
    x[rng.random(4000) < 0.1] = -np.inf
    x[:3] = (-0.0, 0.0, -0.0)
    one = np.broadcast_to(np.float64(-np.inf), (50,))
    for values in (x, one, np.arange(5), np.array(np.nan)):
        for fill in (0.0, 1.0):
            got, want = nan_to_num(values, nan=fill), np.nan_to_num(values, nan=fill)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()
    assert nan_to_num(one).strides == (0,)  # one value for every row stays one


def test_rows_where_and_select_are_np_where_and_select_to_the_bit():
    """The bit-picking ``where`` gives np.where's bits and dtype for float arrays and
    numbers, masks of one value, nearly one value and mixed ones (NaN payloads, infinities
    and -0.0 included), and ``select`` np.select's; other dtypes fall back to np.where."""
    from dse.analytic.rows import select, where

    rng = np.random.default_rng(5)
    n = 4096
    x = rng.standard_normal(n)
    x[::7], x[::11], x[::13] = np.nan, -0.0, -np.inf
    y = rng.standard_normal(n)
    y[::5], y[::3] = -0.0, np.float64(np.nan) * -1.0
    for share in (0.0, 0.01, 0.5, 1.0):
        mask = rng.random(n) < share
        for a, b in ((x, y), (x, 0.0), (0.0, y), (x, 1), (2, y), (1.5, -0.0), (x, np.inf)):
            got, want = where(mask, a, b), np.where(mask, a, b)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got.view(np.int64), want.view(np.int64))
        got = select([mask, x > 0], [x, y], -0.0)
        want = np.select([mask, x > 0], [x, y], -0.0)
        assert np.array_equal(got.view(np.int64), want.view(np.int64))
    assert where(x > 0, 1, 2).dtype == np.where(x > 0, 1, 2).dtype  # integers stay integers
    small = where(x[:8] > 0, x[:8], 0.0)  # short arrays: np.where itself
    assert np.array_equal(small, np.where(x[:8] > 0, x[:8], 0.0), equal_nan=True)


def _grid_inputs(clocks: int = 6) -> dict:
    """A grid that repeats each layout at several clocks and power caps (what the front is
    shared over), with rows that do not divide, do not fit or clock outside the range."""
    rows = [
        {
            "model": model,
            "accelerator": acc,
            "num_accelerators": 64,
            "tensor_parallel": tp,
            "pipeline_parallel": pp,
            "global_batch_size": 512,
            "zero_stage": zero,
            "clock_mhz": 600.0 + 250.0 * c,
            "power_cap_w": 250.0 + 100.0 * c,
            "inlet_temp_c": 25.0 + 4.0 * c,
        }
        for model in ("llama2-7b", "gpt3-175b")
        for acc in ("A100-80GB", "H100-SXM")
        for tp in (1, 4, 3)
        for pp in (1, 4)
        for zero in (0, 3)
        for c in range(clocks)
    ]
    return AnalyticEvaluator().to_arrays(pd.DataFrame(rows))


def _same_bits(a, b, where="") -> None:
    """``a`` and ``b`` (arrays, or dataclasses or dicts of them, nested) equal bit for bit."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for name in a:
            _same_bits(a[name], b[name], f"{where}[{name}]")
        return
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same_bits(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
        return
    if hasattr(a, "map_arrays"):  # the network: its arrays
        for name, value in vars(a).items():
            if not name.startswith("_c") and not name.startswith("_k"):
                _same_bits(value, vars(b)[name], f"{where}.{name}")
        return
    if a is None or isinstance(a, bool) or not hasattr(a, "dtype"):
        assert np.all(np.asarray(a == b)), where
        return
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object:
        assert (a == b).all(), where
        return
    assert a.dtype == b.dtype and a.shape == b.shape, where
    assert a.tobytes() == b.tobytes(), where


def test_the_front_shared_by_repeated_layouts_gives_the_same_bits():
    cfg = _grid_inputs()
    shared = time_model.front(cfg)
    assert shared.rows is not None and len(shared.before_clock) * 6 == len(shared.rows)
    alone = time_model.timed(time_model._front(cfg, None), cfg)
    _same_bits(time_model.timed(shared, cfg), alone)
    # and re-timing some rows at other clocks, from the shared front or from their own
    rows = np.array([3, 40, 41, 150, 200])
    clock = np.array([700.0, 900.0, 1100.0, 1300.0, 800.0])
    own = time_model.evaluate({k: v[rows] for k, v in cfg.items()}, clock)
    _same_bits(
        time_model.timed(shared.take(rows), {k: v[rows] for k, v in cfg.items()}, clock), own
    )


def test_the_front_reads_none_of_the_inputs_it_is_not_keyed_on():
    cfg = _grid_inputs(clocks=1)
    before = time_model._front(cfg, None)
    rng = np.random.default_rng(0)
    changed = dict(cfg)
    for name in time_model.NOT_FRONT_INPUTS:
        if declarations.INPUTS[name].kind != "str":
            changed[name] = rng.uniform(0.1, 2000.0, len(cfg["accelerator"]))
    changed["cooling"] = np.array(["liquid"] * len(cfg["accelerator"]), dtype=object)
    _same_bits(time_model._front(changed, None), before)


def test_distinct_rows_tell_apart_every_bit_of_every_input():
    from dse.analytic import rows

    cfg = {
        "a": np.array([1, 1, 2, 1, 2]),
        "x": np.array([0.0, -0.0, 0.5, 0.0, 0.5]),
        "skipped": np.array([1.0, 2.0, 3.0, 4.0, 5.0]),
        "same": np.broadcast_to(np.float64(3.0), (5,)),
    }
    first, inverse = rows.distinct_rows(cfg, frozenset({"skipped"}))
    assert len(first) == 3
    assert inverse[0] == inverse[3] != inverse[1]  # 0.0 and -0.0 differ
    assert inverse[2] == inverse[4]
    for i in range(5):
        j = first[inverse[i]]
        assert cfg["a"][i] == cfg["a"][j] and np.signbit(cfg["x"][i]) == np.signbit(cfg["x"][j])


def test_the_share_of_distinct_rows_is_estimated_from_a_sample():
    from dse.analytic import rows

    rng = np.random.default_rng(1)
    for distinct in (2_000, 16_000, 30_000, 60_000):  # each combination as often (a grid)
        cfg = {"a": rng.permutation(np.arange(60_000) % distinct), "skip": rng.random(60_000)}
        exact = len(rows.distinct_rows(cfg, frozenset({"skip"}))[0]) / 60_000
        estimate = rows.distinct_share(cfg, frozenset({"skip"}))
        assert abs(estimate - exact) < 0.05 * exact + 0.02
