from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.analytic import declarations
from dse.analytic.time import memory
from dse.analytic.time import model as time_model


def test_korthikanti_activation_formulas():
    s, b, h, a, t = 2048.0, 1.0, 12288.0, 96.0, 8.0
    sbh = s * b * h
    none = memory.activation_bytes_per_layer(s, b, h, a, t, 0.0, 0, 0.0)
    assert np.isclose(none, sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    sel_sp = memory.activation_bytes_per_layer(s, b, h, a, t, 1.0, 1, 0.0)
    assert np.isclose(sel_sp, sbh * 34 / t)
    full = memory.activation_bytes_per_layer(s, b, h, a, t, 0.0, 2, 0.0)
    assert np.isclose(full, 2 * sbh)


def test_activations_follow_the_shape_of_attention_and_feed_forward():
    """Korthikanti et al.'s 24 sbh/t is the GPT layer's (q = k = v = o = h, f = 4h, GeLU);
    grouped key-value heads, a gated 3.5h MLP or MLA's heads change it, from the widths."""
    from dse.analytic.time import workload

    def split(name):
        shape = workload.resolve_shape(np.array([name], dtype=object), {})
        none, selective, replicated = memory.split_bytes_per_hidden(shape)
        return float(none[0]), float(selective[0]), float(replicated[0])

    assert split("gpt3-175b") == (24.0, 24.0, 0.0)
    # Llama 3 70B: 64 query heads, 8 key-value heads of 128; SwiGLU of 28,672 (Llama Team 2024)
    assert split("llama3-70b") == (
        *(2 * (8192 + 1024 + 1024 + 8192) / 8192 + 6 * 28672 / 8192,) * 2,
        0.0,
    )
    # DeepSeek-V3's MLA (128 heads of 192-wide queries and keys, 128-wide values; latents
    # 1,536 + 512 + 64; DeepSeek-AI 2024): the latents on every rank, the expanded heads only
    # without selective recomputation
    none, selective, replicated = split("deepseek-v3")
    assert replicated == pytest.approx(2 * (1536 + 512 + 64) / 7168)
    assert none - selective == pytest.approx(2 * (2 * 128 * 192 + 128 * 128) / 7168)


def cfg(n=1, **kw):
    base = {i.name: i.default for i in declarations.TIME_INPUTS}
    base.update(kw)
    out = {}
    for k, v in base.items():
        if isinstance(v, str) or (v is None and k in ("scaleup_topology",)):
            out[k] = np.full(n, v, dtype=object)
        else:
            out[k] = np.full(n, np.nan if v is None else float(v))
    return out


def test_does_not_fit_is_a_reason():
    r = time_model.evaluate(
        cfg(
            model="gpt3-175b",
            accelerator="A100-80GB",
            num_accelerators=8,
            tensor_parallel=8,
            global_batch_size=8,
            recompute="full",
        )
    )
    assert r.reason[0] == "does not fit in accelerator memory"
    assert r.memory_per_accelerator_gib[0] > 80


def test_zero_shards_optimizer_and_recompute_saves_memory():
    base = dict(
        model="llama2-7b", accelerator="H100-SXM", num_accelerators=64, global_batch_size=512
    )
    z0 = time_model.evaluate(cfg(**base, zero_stage=0))
    z1 = time_model.evaluate(cfg(**base, zero_stage=1))
    z3 = time_model.evaluate(cfg(**base, zero_stage=3))
    assert np.isclose(z1.optimizer_memory_gib[0] * 64, z0.optimizer_memory_gib[0])
    assert z3.weights_memory_gib[0] < z1.weights_memory_gib[0]
    mem = {
        r: time_model.evaluate(
            cfg(**base, recompute=r, flash_attention=False)
        ).activations_memory_gib[0]
        for r in ("none", "selective", "full")
    }
    assert mem["none"] > mem["selective"] > mem["full"]


def test_capacity_is_read_in_gib_as_vendors_size_hbm():
    """An "80 GB" H100 holds 80 GiB (81,920 MiB in nvidia-smi): 85.9e9 bytes, not 80e9."""
    from dse.analytic.time import hardware

    hw = hardware.lookup(
        np.array(["H100-SXM", "MI300X"], dtype=object), np.array(["bf16", "bf16"], dtype=object)
    )
    assert hw.hbm_capacity_bytes[0] == 80 * 2**30 and hw.hbm_capacity_bytes[1] == 192 * 2**30


def test_the_memory_outputs_are_in_the_unit_of_the_capacity_they_are_checked_against():
    """A candidate fits exactly when memory_per_accelerator_gib <= the part's hbm_gb (both
    GiB): a study's `memory_per_accelerator_gib <= 80` is "fits an 80 GB card" (in 10^9 B, a
    candidate of 85 GB was feasible on an H100 and the constraint refused it)."""
    from dse.analytic.evaluator import AnalyticEvaluator
    from dse.analytic.time import hardware

    rng = np.random.default_rng(3)
    n = 4000
    table = pd.DataFrame(
        {
            "model": rng.choice(["llama2-7b", "llama2-13b", "llama3-70b", "gpt3-175b"], n),
            "accelerator": rng.choice(["A100-80GB", "H100-SXM", "MI300X"], n),
            "num_accelerators": 64,
            "tensor_parallel": rng.choice([1, 2, 4, 8], n),
            "pipeline_parallel": rng.choice([1, 2, 4, 8], n),
            "micro_batch_size": rng.choice([1, 2, 4, 8], n),
            "global_batch_size": 512,
            "recompute": rng.choice(["none", "selective", "full"], n),
            "zero_stage": rng.choice([0, 1], n),
        }
    )
    out = AnalyticEvaluator().evaluate(table)
    assert AnalyticEvaluator().metrics["memory_per_accelerator_gib"].unit == "GiB"
    capacity = {a: hardware.catalog()[a]["hbm_gb"] for a in ("A100-80GB", "H100-SXM", "MI300X")}
    cap = table["accelerator"].map(capacity).to_numpy()
    memory_only = out["reason"].isin(["", "does not fit in accelerator memory"]).to_numpy()
    fits = out["memory_per_accelerator_gib"].to_numpy() <= cap
    assert memory_only.sum() > 1000 and 0.1 < fits[memory_only].mean() < 0.9
    np.testing.assert_array_equal(out["feasible"].to_numpy()[memory_only], fits[memory_only])


LLAMA8 = dict(
    model="llama3-8b",
    accelerator="H100-SXM",
    num_accelerators=8,
    global_batch_size=16,
    micro_batch_size=2,
    framework="megatron-core",
    activation_offload="off",  # the formulas without offloading (auto would fit the 80 GB part)
)


def test_op_level_recompute_keeps_less_than_selective_and_more_than_full():
    """torchtitan's op-level SAC keeps every second matmul output (wq, wv, w1, w2), the SDPA
    output and the block input: 2 (h + g h) + 2 (q + v + o + f) bytes per token (Llama 3 8B:
    15.5 h), fewer than Korthikanti's selective, more than full recomputation."""
    act = {
        p: time_model.evaluate(cfg(**LLAMA8, recompute=p)).activations_memory_gib[0]
        for p in ("selective", "op", "full", "minimal", "offload")
    }
    assert act["full"] < act["op"] < act["selective"]
    assert act["full"] < act["minimal"] < act["selective"]
    assert act["offload"] < act["minimal"]
    from dse.analytic.time import workload

    shape = workload.resolve_shape(np.array(["llama3-8b"], dtype=object), {})
    (op_rep, op_split), _, _ = memory.policy_bytes_per_token(shape)
    assert (op_rep + op_split)[0] / 4096 == pytest.approx(15.5)


def test_transformer_engine_fp8_keeps_one_byte_gemm_inputs():
    """megatron-core keeps fp8 GEMM inputs as 1-byte casts: h + f bytes per token and layer
    fewer than bf16 (without recomputation); torchtitan (torchao Float8) keeps 16-bit."""
    kw = dict(LLAMA8, recompute="none")
    bf16 = time_model.evaluate(cfg(**kw, precision="bf16")).activations_memory_gib[0]
    fp8 = time_model.evaluate(cfg(**kw, precision="fp8")).activations_memory_gib[0]
    tokens, layers = 2 * 8192, 32
    assert (bf16 - fp8) * 2**30 == pytest.approx(tokens * layers * (4096 + 14336), rel=1e-6)
    tt = dict(kw, framework="torchtitan")
    assert time_model.evaluate(cfg(**tt, precision="fp8")).activations_memory_gib[
        0
    ] == pytest.approx(time_model.evaluate(cfg(**tt, precision="bf16")).activations_memory_gib[0])


def test_activation_offloading_keeps_the_rest_on_the_device():
    kw = dict(LLAMA8, recompute="none")
    act = [
        time_model.evaluate(cfg(**kw, activation_offload_layers=n)).activations_memory_gib[0]
        for n in (0, 16, 31)
    ]
    assert act[2] < act[1] < act[0]
    assert act[1] < 0.6 * act[0]


def test_the_loss_peak_follows_the_stack():
    """torchtitan's eager fp32 cross entropy holds 12 B per logit, 4 B compiled; TE's fused
    cross entropy (megatron-bridge) 2 B."""
    kw = dict(LLAMA8, recompute="full", framework="torchtitan")
    eager = time_model.evaluate(cfg(**kw)).activations_memory_gib[0]
    compiled = time_model.evaluate(cfg(**kw, compiled_loss=True)).activations_memory_gib[0]
    logits = 2 * 8192 * 128256
    assert (eager - compiled) * 2**30 == pytest.approx(8 * logits * 1.10, rel=1e-6)


def test_maxtext_shards_activations_over_the_tensor_axis():
    kw = dict(LLAMA8, tensor_parallel=8, recompute="full", precision="bf16")
    mt = time_model.evaluate(cfg(**{**kw, "framework": "maxtext"})).activations_memory_gib[0]
    mc = time_model.evaluate(cfg(**kw)).activations_memory_gib[0]
    assert mt < mc


def test_offload_copies_hide_behind_compute_until_the_link_is_too_slow():
    """Activation offloading's copies run asynchronously: the forward's behind a third of a
    micro-batch's busy time, the backward's behind two thirds; only the excess is exposed."""
    from dse.analytic.time.step import offload_time

    link = 64e9
    busy = np.array([3.0, 3.0, 3.0])
    sent = np.array([0.0, 64e9 * 0.5, 64e9 * 1.5])  # 0 s, 0.5 s and 1.5 s each way
    exposed = offload_time(sent, link, busy)
    assert exposed[0] == 0.0 and exposed[1] == 0.0
    assert exposed[2] == pytest.approx(1.5 - 1.0)  # forward window 1 s, backward 2 s
    assert offload_time(np.array([1e9]), 0.0, np.array([1.0]))[0] == np.inf  # no link


def test_bad_activation_offload_value_is_refused_with_its_choices(tmp_path):
    """dse validate and dse run refuse the same bad value (one check, plan_run)."""
    from dse.checks import plan_run
    from dse.errors import DseError
    from dse.study import load_study

    text = (Path(__file__).parent.parent / "studies" / "quickstart.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("fixed:\n", "fixed:\n  activation_offload: sometimes\n", 1))
    with pytest.raises(DseError, match="activation_offload.*allowed: auto, off"):
        plan_run(load_study(bad), workers=0)


def test_torchtitan_sequence_parallel_saves_the_gathered_linear_inputs():
    """torchtitan's DTensor plan all-gathers the attention's and the MLP's inputs before the
    column-parallel linears, which save the gathered tensor: 2 h (w - 2/t) bytes per token
    and layer more than Megatron's shard, w = 2 in 16 bits, 1 with Float8 (gathered in fp8)."""
    kw = dict(
        model="llama3-70b",
        accelerator="H100-SXM-96GB",
        num_accelerators=64,
        tensor_parallel=8,
        sequence_parallel=True,
        global_batch_size=8,
        micro_batch_size=1,
        recompute="none",
        framework="torchtitan",
        activation_offload="off",
    )
    act = {
        p: time_model.evaluate(cfg(**kw, precision=p)).memory.activations_bytes[0]
        for p in ("bf16", "fp8")
    }
    tokens, layers, h, reserve = 8192, 80, 8192, 1.10  # torchtitan's allocator reserve
    assert act["bf16"] - act["fp8"] == pytest.approx(layers * tokens * 2 * h * reserve, rel=1e-9)
    mc = time_model.evaluate(cfg(**{**kw, "framework": "megatron-core"}, precision="bf16"))
    assert mc.memory.activations_bytes[0] < act["bf16"]  # Megatron keeps the shard


def test_torchtitan_context_parallel_holds_the_ring_attentions_backward_buffers():
    """PyTorch's ring attention (torchtitan) holds, per local token in a layer's backward,
    the exchanged K/V at the query heads' width (all c chunks all-gathered, 2 on a ring) and
    fp32 gradients: (4 c + 30) w or 38 w bytes; with a small vocabulary the loss does not
    hide them. Megatron-Core gets no such buffers, and without CP there are none."""
    kw = dict(
        model="llama3-8b",
        vocab=1024,  # the loss's logits far below the ring's buffers
        seq_len=65536,
        accelerator="H100-SXM-96GB",
        num_accelerators=8,
        context_parallel=8,
        global_batch_size=1,
        micro_batch_size=1,
        recompute="full",
        framework="torchtitan",
        activation_offload="off",
    )

    def act(**over):
        return time_model.evaluate(cfg(**{**kw, **over})).memory.activations_bytes[0]

    gathered, ring = act(context_parallel_algorithm="all_gather"), act()
    tokens, width, c, reserve = 65536 / 8, 4096, 8, 1.10  # torchtitan's allocator reserve
    assert gathered - ring == pytest.approx((4 * c - 8) * width * tokens * reserve, rel=1e-9)
    megatron = dict(framework="megatron-core")
    assert act(**megatron, context_parallel_algorithm="all_gather") == pytest.approx(
        act(**megatron)
    )
    # the larger of the loss's peak and the ring's buffers: a full vocabulary's eager loss
    # (12 B per logit, 8,192 x 128,256 of them) hides them on the one stage
    full_vocab = dict(vocab=128256, context_parallel_algorithm="all_gather")
    assert act(**full_vocab) == pytest.approx(act(**full_vocab, framework="torchtitan-compile"))


def test_torchtitan_cp_rows_grow_where_no_loss_hides_the_ring_buffers():
    """torchtitan's published CP tables: the 405B's peaks (TP 8, PP 8) grow with the CP degree
    at the same tokens per rank (the first and middle stages hold the ring's buffers); the 8B's
    (one stage, eager loss) stay flat; both as the published peaks do."""
    from dse.analytic import validation

    path = Path(__file__).parent.parent / "dse/analytic/data/reference/torchtitan.csv"
    out = validation.predict(validation.read_table(path), file=str(path)).set_index("id")
    big = out.loc[[f"tt-405b-512-cp{c}-{k}k" for c, k in ((1, 32), (2, 64), (4, 128), (8, 256))]]
    small = out.loc[[f"tt-8b-8-cp{c}-{k}k" for c, k in ((1, 32), (2, 64), (4, 128), (8, 256))]]
    assert np.all(np.diff(big["memory_gib"]) > 0)
    assert np.all(np.diff(big["published_memory_gib"]) > 0)
    assert np.ptp(small["memory_gib"]) < 0.01
    err = out["memory_gib"] / out["published_memory_gib"] - 1
    assert (err.dropna().abs() <= 0.15).all()
