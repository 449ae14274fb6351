"""The training stack as a design input, per-accelerator efficiencies, context parallelism
and fp8 (docs/model.md, sections 5 to 7)."""

import numpy as np
import pandas as pd
import pytest
from test_memory import cfg

from dse.analytic import declarations, model, validation
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import frameworks, hardware, layer, workload
from dse.analytic.time import model as time_model
from dse.analytic.time.collectives import exposed

BASE = dict(
    model="llama2-7b",
    accelerator="H100-SXM",
    num_accelerators=64,
    global_batch_size=512,
    micro_batch_size=2,
    recompute="selective",
)


def run(**kw):
    r = time_model.evaluate(cfg(1, **{**BASE, **kw}))
    assert r.reason[0] == "", r.reason[0]
    return r


def test_every_stack_documents_every_behaviour_with_a_source():
    fields = {
        "description",
        "source",
        "zero_stages",
        "default_zero_stage",
        "grad_bytes",
        "tp_overlap",
        "grad_overlap",
        "gather_overlap",
        "step_gather_overlap",
        "p2p_overlap",
        "fused_kernels",
        "p2p_scatter_gather",
        "interleaved_schedule",
        "zero3_calls_per_layer",
        "per_rank_copies",
        "moe_tp_needs_sp",
    }
    assert {
        "megatron",
        "megatron-core",
        "megatron-bridge",
        "megatron-fsdp",
        "deepspeed",
        "fsdp",
        "torchtitan",
        "torchtitan-compile",
        "olmo-core",
        "maxtext",
    } <= set(frameworks.catalog())
    for name, stack in frameworks.catalog().items():  # the optional fields have defaults
        assert fields <= set(stack) <= fields | set(frameworks.OPTIONAL), name
        assert stack["default_zero_stage"] in stack["zero_stages"]
        assert stack["source"]


def test_each_stack_shards_by_its_own_default():
    small = dict(model="gpt-1.3b")
    fsdp, ds = run(framework="fsdp", **small), run(framework="deepspeed", **small)
    assert np.isclose(
        fsdp.weights_memory_gib[0] * 64, ds.weights_memory_gib[0], rtol=1e-9
    )  # FULL_SHARD
    zero0 = run(framework="deepspeed", zero_stage=0, **small)
    assert np.isclose(ds.optimizer_memory_gib[0] * 64, zero0.optimizer_memory_gib[0])  # ZeRO-1


@pytest.mark.parametrize(
    "kw, reason",
    [
        (
            dict(framework="fsdp", zero_stage=1),
            "the training stack does not offer this sharding (ZeRO) stage",
        ),
        (
            dict(framework="megatron", zero_stage=3),
            "the training stack does not offer this sharding (ZeRO) stage",
        ),
        (
            dict(
                framework="deepspeed",
                pipeline_parallel=4,
                interleave=2,
                model="gpt3-175b",
                tensor_parallel=8,
                num_accelerators=256,
            ),
            "the training stack has no interleaved pipeline schedule",
        ),
    ],
)
def test_what_a_stack_does_not_offer_is_infeasible(kw, reason):
    assert time_model.evaluate(cfg(1, **{**BASE, **kw})).reason[0] == reason


def test_overlapped_communication_costs_only_its_tax_up_to_the_window():
    comm, window = np.array([1.0, 1.0, 3.0]), np.array([2.0, 2.0, 2.0])
    np.testing.assert_allclose(
        exposed(comm, np.array([0.0, 1.0, 1.0]), window, 0.25), [1.0, 0.25, 1.5]
    )


def test_overlapping_stacks_expose_less_communication():
    kw = dict(
        model="gpt3-175b",
        tensor_parallel=8,
        pipeline_parallel=8,
        num_accelerators=1024,
        sequence_parallel=True,
        interleave=2,
        global_batch_size=1024,
        micro_batch_size=1,
        zero_stage=1,
    )
    sync, overlapped = run(framework="megatron", **kw), run(framework="megatron-core", **kw)
    assert overlapped.tp_comm_time_s[0] < sync.tp_comm_time_s[0]
    assert overlapped.pp_comm_time_s[0] < sync.pp_comm_time_s[0]
    assert overlapped.step_time_s[0] < sync.step_time_s[0]


def test_eager_kernels_move_more_bytes_than_fused_ones():
    # full recomputation on both: each stack's own `selective` recomputes different work
    kw = {"zero_stage": 3, "recompute": "full"}
    fused, eager = run(framework="deepspeed", **kw), run(framework="fsdp", **kw)
    assert eager.memory_time_s[0] > fused.memory_time_s[0]
    assert eager.compute_time_s[0] == pytest.approx(fused.compute_time_s[0])


def test_sharded_weights_are_gathered_every_micro_batch():
    four, one = run(framework="fsdp", micro_batch_size=4), run(framework="fsdp", micro_batch_size=1)
    # same tokens per iteration, 4x the micro-batches: FULL_SHARD gathers the weights twice and
    # reduce-scatters the gradients once per micro-batch
    assert one.breakdown.scaleout_bytes[0] == pytest.approx(4 * four.breakdown.scaleout_bytes[0])


def test_a_study_can_sweep_the_framework():
    ev = AnalyticEvaluator()
    table = pd.DataFrame(
        {
            "framework": ["megatron", "megatron-core", "deepspeed", "fsdp"],
            "model": "llama2-7b",
            "accelerator": "A100-80GB",
            "num_accelerators": 64,
            "global_batch_size": 512,
        }
    )
    out = ev.evaluate(table)
    assert out["feasible"].all()
    assert (
        out["step_time_s"].nunique() >= 3
    )  # megatron and deepspeed agree here: same sharding, no overlap


def test_fitted_and_estimated_accelerators():
    attrs = AnalyticEvaluator().attributes()
    fitted = [n.split(" (")[0] for n in attrs["analytic_efficiencies_fitted"].split(", ")]
    # a part that takes another's fitted values says whose
    assert "H800 (H100-SXM's: same die)" in attrs["analytic_efficiencies_fitted"]
    estimated = attrs["analytic_efficiencies_estimated"].split(", ")
    # fitted on the 2024-26 tables (issue 32): TPU v5e / v5p, B200 / GB200
    assert {
        "A100-80GB",
        "A100-40GB",
        "H100-SXM",
        "H800",
        "H100-SXM-96GB",
        "TPU-v5e",
        "TPU-v5p",
        "B200",
        "GB200",
    } == set(fitted)
    assert {
        "H200",
        "MI300X",
        "MI250X",
        "V100-SXM2",
        "MI325X",
        "MI355X",
        "TPU-v6e",
    } == set(estimated)
    assert all(hardware.is_estimated(n) for n in estimated) and not any(
        hardware.is_estimated(n) for n in fitted
    )


def test_h800_is_an_h100_with_a_narrower_nvlink():
    cat, cal = hardware.catalog(), hardware.calibration()["fitted"]
    h100, h800 = cat["H100-SXM"], cat["H800"]
    assert {k for k in h100 if h100[k] != h800[k]} == {"scaleup_bw_gbs", "source"}
    assert h800["scaleup_bw_gbs"] < h100["scaleup_bw_gbs"] / 2 and cal["H800"] == cal["H100-SXM"]
    r = AnalyticEvaluator().evaluate(
        pd.DataFrame(
            {
                "accelerator": ["H100-SXM", "H800"],
                "model": "llama3-70b",
                "num_accelerators": 64,
                "tensor_parallel": 8,
                "pipeline_parallel": 4,
                "global_batch_size": 512,
                "micro_batch_size": 1,
            }
        )
    )
    assert (
        r["compute_time_s"][0] == r["compute_time_s"][1]
        and r["tp_comm_time_s"][1] > r["tp_comm_time_s"][0]
    )


def test_estimated_efficiency_follows_the_published_matmul_benchmark():
    fitted = hardware.calibration()["fitted"]
    ratio = np.mean(  # over the fitted dies with a published matmul benchmark
        [
            fitted[n]["matmul_eff_max"] / hardware.mamf_efficiency(n)
            for n in (
                "A100-80GB",
                "H100-SXM",
                "GB200",
            )  # an alias group counts once (its last name)
        ]
    )
    for name in ("MI300X", "H200"):
        est = hardware.calibration_for(name)
        assert est["matmul_eff_max"] == pytest.approx(hardware.mamf_efficiency(name) * ratio)
    # MI300X's published matmul efficiency (60% of its peak) is far below B200's (78%)
    assert (
        hardware.calibration_for("MI300X")["matmul_eff_max"]
        < hardware.calibration_for("B200")["matmul_eff_max"]
    )


def test_context_parallelism_splits_the_sequence():
    kw = dict(
        model="llama3-8b",
        num_accelerators=64,
        tensor_parallel=1,
        micro_batch_size=1,
        recompute="none",
    )
    one, two = run(**kw), run(context_parallel=2, **kw)
    assert two.data_parallel[0] == one.data_parallel[0] / 2
    assert two.activations_memory_gib[0] < 0.6 * one.activations_memory_gib[0]
    assert two.cp_comm_time_s[0] > 0 == one.cp_comm_time_s[0] == two.tp_comm_time_s[0]
    bad = time_model.evaluate(cfg(1, **{**BASE, **kw, "context_parallel": 2, "seq_len": 4098}))
    assert bad.reason[0] == "context parallelism needs 2 x its degree to divide the sequence length"


def test_fp8_speeds_up_the_linear_layers_only():
    kw = dict(
        model="llama3-70b",
        num_accelerators=64,
        tensor_parallel=8,
        pipeline_parallel=2,
        sequence_parallel=True,
        micro_batch_size=1,
        global_batch_size=64,
    )
    bf16, fp8 = run(**kw), run(precision="fp8", **kw)
    assert 1.2 < bf16.step_time_s[0] / fp8.step_time_s[0] < 2.0


@pytest.mark.parametrize(
    "accelerator, reason",
    [
        ("A100-80GB", "no fp8 units on this accelerator"),
        ("A100-40GB", "no fp8 units on this accelerator"),
        ("MI250X", "no fp8 units on this accelerator"),
        ("TPU-v5p", "no fp8 units on this accelerator"),
        ("H100-SXM", ""),
        ("MI300X", ""),
    ],
)
def test_fp8_is_refused_by_one_catalog_rule_on_parts_without_fp8_units(accelerator, reason):
    """fp8 is a candidate only where the catalog's peak_tflops.fp8 is a number (the part's
    datasheet lists fp8 matrix units); null refuses it, the same rule for every vendor, in
    the evaluator and in dse validate-model (which runs the same evaluator)."""
    assert (hardware.catalog()[accelerator]["peak_tflops"]["fp8"] is None) == bool(reason)
    kw = dict(model="gpt-1.3b", num_accelerators=8, global_batch_size=64, micro_batch_size=1)
    r = time_model.evaluate(
        cfg(1, **{**BASE, **kw, "accelerator": accelerator, "precision": "fp8"})
    )
    assert r.reason[0] == reason
    row = pd.DataFrame(
        [
            {
                "id": accelerator,
                "source": "t",
                "measured_quantity": "iteration_time_s",
                "measured_value": "1.0",
                "accelerator": accelerator,
                "precision": "fp8",
                "tensor_parallel": "1",
                "pipeline_parallel": "1",
                **{k: str(v) for k, v in kw.items()},
            }
        ]
    )
    assert validation.predict(row)["reason"].iloc[0] == reason
    one = {**BASE, **kw, "accelerator": accelerator, "precision": "fp8"}
    out = model.evaluate(declarations.complete({k: np.array([v]) for k, v in one.items()}, 1))
    assert out["reason"][0] == reason and bool(out["feasible"][0]) == (reason == "")


def test_mfu_stays_below_the_best_published_for_measured_parts():
    """docs/model.md, section 7: no A100 or H100 candidate above the best MFU published for
    the part: A100 72% (FlashAttention-2, Dao 2023), H100 bf16 62.1% (NVIDIA dgxc Nemotron-4
    15B), H100 fp8 42.5% of the fp8 peak (NeMo 24.07 GPT-3 175B, from its tokens/s)."""
    rng = np.random.default_rng(1)
    n = 60000
    pick = lambda xs: rng.choice(np.asarray(xs, dtype=object), n)  # noqa: E731
    table = pd.DataFrame(
        {
            "model": pd.Series(
                pick(
                    ["gpt-1.3b", "llama2-7b", "llama3-8b", "llama2-13b", "llama3-70b", "gpt3-175b"]
                ),
                dtype="str",
            ),
            "accelerator": pd.Series(pick(["A100-80GB", "H100-SXM"]), dtype="str"),
            "framework": pd.Series(pick(frameworks.framework_names()), dtype="str"),
            "precision": pd.Series(pick(["bf16", "bf16", "fp8"]), dtype="str"),
            "num_accelerators": rng.choice([8, 16, 64, 256, 1024], n),
            "tensor_parallel": rng.choice([1, 2, 4, 8], n),
            "pipeline_parallel": rng.choice([1, 2, 4, 8], n),
            "micro_batch_size": rng.choice([1, 2, 4, 8, 16], n),
            "global_batch_size": rng.choice([512, 1024, 4096], n),
            "recompute": pd.Series(pick(["none", "selective", "full"]), dtype="str"),
            "sequence_parallel": rng.choice([False, True], n),
            "interleave": rng.choice([1, 2], n),
            "flash_attention": rng.choice([False, True], n),
            "zero_stage": rng.choice([0, 1, 2, 3], n),
        }
    )
    out = AnalyticEvaluator().evaluate(table)
    ok = out["feasible"].to_numpy()
    assert ok.sum() > 5000
    mfu = out["mfu"].to_numpy()
    acc, prec = table["accelerator"].to_numpy(), table["precision"].to_numpy()
    assert mfu[ok & (acc == "A100-80GB")].max() <= 0.72
    assert mfu[ok & (acc == "H100-SXM") & (prec == "bf16")].max() <= 0.621
    assert mfu[ok & (acc == "H100-SXM") & (prec == "fp8")].max() <= 0.425


def test_chunked_dp_overlap_hides_more_at_more_virtual_stages():
    """Megatron-Core's distributed optimizer exposes one chunk (a virtual stage's layers):
    more virtual stages, smaller chunks, more of the reduction hidden (issue 32)."""
    from dse.analytic.time.data_parallel import chunked

    comm, window = np.array([1.0]), np.array([10.0])
    exposed_2, exposed_8 = (
        chunked(comm, 1.0, window, 2.0, 0.3),
        chunked(comm, 1.0, window, 8.0, 0.3),
    )
    assert exposed_8[0] < exposed_2[0] < comm[0]
    assert exposed_8[0] == pytest.approx(1.0 / 8 + 0.3 * 7 / 8)
    kw = dict(
        framework="megatron-core",
        model="llama3-70b",
        accelerator="H100-SXM",
        num_accelerators=512,
        tensor_parallel=8,
        pipeline_parallel=8,
        global_batch_size=512,
        micro_batch_size=1,
        sequence_parallel=True,
        recompute="full",
    )
    dp = [run(**kw, interleave=v).dp_comm_time_s[0] for v in (2, 5)]
    assert dp[1] < dp[0]


def test_fsdp_with_a_pipeline_gathers_once_in_torchtitan():
    """torchtitan keeps the stage unsharded with PP (reshard_after_forward False): one
    gather and one reduce-scatter per iteration, not per micro-batch; and more memory."""
    kw = dict(
        model="llama3-70b",
        accelerator="H100-SXM",
        num_accelerators=256,
        tensor_parallel=8,
        pipeline_parallel=4,
        global_batch_size=256,
        micro_batch_size=1,
        sequence_parallel=True,
        recompute="full",
        precision="bf16",
    )
    fsdp, tt = run(framework="fsdp", **kw), run(framework="torchtitan", **kw)
    assert tt.dp_comm_time_s[0] < fsdp.dp_comm_time_s[0] / 4
    assert tt.memory_per_accelerator_gib[0] > fsdp.memory_per_accelerator_gib[0]


def test_flashattention2_runs_at_its_published_ceiling_on_hopper_only():
    """A stack whose fused attention is FlashAttention-2 (torchtitan: PyTorch SDPA's flash
    backend) runs it at most at 35% of the 16-bit peak on Hopper (Shah et al. 2024), below
    what the fitted attention efficiency gives there; Transformer Engine's fused attention
    (megatron-core) is not held to it, nor is FlashAttention-2 on A100 (no ceiling in the
    catalog): the ceiling slows the long-sequence step by the attention's share."""
    kw = dict(
        model="llama3-8b",
        num_accelerators=8,
        global_batch_size=8,
        micro_batch_size=1,
        seq_len=16384,
        recompute="full",
        precision="bf16",
        zero_stage=3,
    )
    cal = hardware.calibration_for("H100-SXM")
    assert cal["matmul_eff_max"] * cal["attention_eff"] > 0.35  # the ceiling binds on H100
    assert hardware.catalog()["H100-SXM"]["fa2_peak_fraction"] == 0.35
    assert "fa2_peak_fraction" not in hardware.catalog()["A100-80GB"]
    assert frameworks.catalog()["torchtitan"]["fa2_attention"] == 1
    assert frameworks.catalog()["megatron-fsdp"].get("fa2_attention", 0) == 0
    h100_fa2 = run(framework="torchtitan", accelerator="H100-SXM", **kw)
    h100_te = run(framework="megatron-fsdp", accelerator="H100-SXM", **kw)
    a100_fa2 = run(framework="torchtitan", accelerator="A100-80GB", **kw)
    a100_te = run(framework="megatron-fsdp", accelerator="A100-80GB", **kw)
    # same GEMMs, same attention FLOPs: on A100 both stacks' compute is the same, on H100
    # FlashAttention-2's is longer (attention is much of a 16k-token step's compute)
    assert a100_fa2.compute_time_s[0] == pytest.approx(a100_te.compute_time_s[0], rel=1e-9)
    slower = h100_fa2.compute_time_s[0] / h100_te.compute_time_s[0]
    ceiling = cal["matmul_eff_max"] * cal["attention_eff"] / 0.35
    assert 1.05 < slower < ceiling


def test_maxtext_overlaps_its_tensor_parallel_collectives_as_sequence_parallel():
    """MaxText splits every activation over the tensor axis (activations_tp_sharded): its
    tensor-parallel collectives are all-gather / reduce-scatter pairs that XLA overlaps,
    whether or not a table says sequence_parallel; a stack without that sharding needs it."""
    kw = dict(
        model="llama2-13b",
        accelerator="TPU-v5p",
        num_accelerators=64,
        tensor_parallel=4,
        global_batch_size=256,
        micro_batch_size=4,
        precision="bf16",
        zero_stage=3,
    )
    plain = run(framework="maxtext", sequence_parallel=False, **kw)
    sp = run(framework="maxtext", sequence_parallel=True, **kw)
    assert plain.tp_comm_time_s[0] == pytest.approx(sp.tp_comm_time_s[0], rel=1e-12)
    # (on a GPU: on a TPU every stack label is evaluated as MaxText, the part's one stack)
    gpu = {**kw, "accelerator": "H100-SXM", "zero_stage": 1}
    mc_plain = run(framework="megatron-core", **gpu, sequence_parallel=False)
    mc_sp = run(framework="megatron-core", **gpu, sequence_parallel=True)
    assert mc_plain.tp_comm_time_s[0] > mc_sp.tp_comm_time_s[0]


TPU_ROW = dict(
    model="llama2-13b",
    accelerator="TPU-v5p",
    num_accelerators=64,
    tensor_parallel=4,
    global_batch_size=384,
    micro_batch_size=24,
    precision="bf16",
    zero_stage=3,
    seq_len=2048,
)


def test_a_tpu_is_evaluated_with_its_one_stack_whatever_framework_names():
    """A TPU trains only through XLA (catalog ``training_stack: maxtext``): a candidate
    labelled with another stack (the shared tables write MaxText's sharding as ``fsdp``) is
    the MaxText candidate, time and memory; on a GPU the label still chooses the stack."""
    assert hardware.catalog()["TPU-v5p"]["training_stack"] == "maxtext"
    assert "training_stack" not in hardware.catalog()["H100-SXM"]
    own = run(framework="maxtext", **TPU_ROW)
    for label in ("fsdp", "megatron-core"):
        other = run(framework=label, **TPU_ROW)
        assert other.step_time_s[0] == pytest.approx(own.step_time_s[0], rel=1e-12)
        assert other.memory.total_bytes[0] == pytest.approx(own.memory.total_bytes[0], rel=1e-12)
    gpu = {**TPU_ROW, "accelerator": "H100-SXM"}
    assert run(framework="fsdp", **gpu).memory.total_bytes[0] != pytest.approx(
        run(framework="maxtext", **gpu).memory.total_bytes[0], rel=1e-6
    )


def test_selective_is_each_stacks_own_selective_policy():
    """``recompute: selective`` keeps what the stack's selective keeps (frameworks.yaml
    ``selective_policy``): MaxText's ``minimal``, PyTorch's op-level SAC for fsdp and
    torchtitan, Korthikanti's for the Megatron stacks; the time is costed as selective
    for all of them."""
    gpu = {**TPU_ROW, "accelerator": "H100-SXM", "micro_batch_size": 4, "global_batch_size": 64}
    for stack, policy in (("maxtext", "minimal"), ("fsdp", "op"), ("torchtitan", "op")):
        row = TPU_ROW if stack == "maxtext" else gpu
        sel, own = (run(framework=stack, recompute=r, **row) for r in ("selective", policy))
        assert sel.memory.total_bytes[0] == pytest.approx(own.memory.total_bytes[0], rel=1e-12)
        assert sel.step_time_s[0] == pytest.approx(own.step_time_s[0], rel=1e-12)
        # the stack's selective is not the no-recompute count (FlashAttention made Korthikanti's
        # selective keep what none keeps)
        none = run(framework=stack, recompute="none", **row)
        assert sel.memory.activations_bytes[0] < none.memory.activations_bytes[0]
    mc = {**gpu, "zero_stage": 1, "sequence_parallel": True}
    korthikanti = run(framework="megatron-core", recompute="selective", **mc)
    op = run(framework="megatron-core", recompute="op", **mc)
    assert korthikanti.memory.activations_bytes[0] > op.memory.activations_bytes[0]


GB200_70B = {
    **BASE,
    "model": "llama3-70b",
    "accelerator": "GB200",
    "framework": "fsdp",
    "precision": "fp8",
    "num_accelerators": 64,
    "tensor_parallel": 1,
    "global_batch_size": 128,
    "micro_batch_size": 2,
    "recompute": "none",
    "zero_stage": 3,
}


def test_a_layout_that_cannot_fit_is_still_refused_on_its_stack():
    """The rules change which stack and policy a label means, not the limit: a 70B model at
    micro-batch 8 with MaxText's selective (``minimal``) on 16 GB TPU v5e chips, and PyTorch
    FSDP without recomputation for Llama 3 70B on 64 GB200s (the shared tables' Megatron-FSDP
    rows typed as ``fsdp``), still do not fit."""
    r = time_model.evaluate(
        cfg(
            1,
            **{
                **BASE,
                "model": "llama3-70b",
                "accelerator": "TPU-v5e",
                "framework": "fsdp",
                "num_accelerators": 256,
                "tensor_parallel": 16,
                "global_batch_size": 256,
                "micro_batch_size": 16,
                "zero_stage": 3,
            },
        )
    )
    assert r.reason[0] == "does not fit in accelerator memory"
    r = time_model.evaluate(cfg(1, **GB200_70B, activation_offload="off"))
    assert r.reason[0] == "does not fit in accelerator memory"


def test_auto_offload_fits_just_enough_layers_and_memory_stays_a_limit():
    """``activation_offload: auto`` (the default) lets a stack that offloads move just enough
    whole layers to host memory to fit (the Megatron-FSDP GB200 rows the shared tables type
    as ``fsdp``); one layer fewer would not fit. A layout whose offloaded activations exceed
    the host's memory, or whose state alone exceeds the part, is still refused."""
    r = time_model.evaluate(cfg(1, **GB200_70B))
    assert r.reason[0] == ""
    layers = r.memory.offload_layers[0]
    assert 0 < layers < 80 and layers == int(layers)
    cap = r.hw.hbm_capacity_bytes[0]
    assert r.memory.total_bytes[0] <= cap
    fewer = time_model.evaluate(
        cfg(1, **GB200_70B, activation_offload="off", activation_offload_layers=layers - 1)
    )
    assert fewer.memory.total_bytes[0] > cap
    assert 0 < r.memory.host_bytes[0] <= r.hw.host_memory_bytes[0]
    # four times the micro-batch: more than the host holds
    big = time_model.evaluate(
        cfg(1, **{**GB200_70B, "micro_batch_size": 8, "global_batch_size": 512})
    )
    assert big.reason[0] in (
        "offloaded activations do not fit in host memory",
        "does not fit in accelerator memory",
    )
    # a part without host fields in the catalog (A100) offloads nothing
    a100 = time_model.evaluate(
        cfg(1, **{**GB200_70B, "accelerator": "A100-80GB", "precision": "bf16"})
    )
    assert a100.reason[0] == "does not fit in accelerator memory"


def test_fp8_runs_gather_their_weights_in_fp8_where_the_stack_or_the_run_says_so():
    kw = {"framework": "torchtitan", "zero_stage": 3, "recompute": "full"}
    plain = run(precision="fp8", **kw)
    fp8_gather = run(precision="fp8", fp8_param_gather=True, **kw)
    # half the bytes in each weight all-gather: less data-parallel time, the same kernels
    assert fp8_gather.dp_comm_time_s[0] < plain.dp_comm_time_s[0]
    assert fp8_gather.compute_time_s[0] == pytest.approx(plain.compute_time_s[0])
    # a 16-bit run gathers 16-bit weights whatever the flag says
    bf16 = run(precision="bf16", **kw)
    assert run(precision="bf16", fp8_param_gather=True, **kw).dp_comm_time_s[0] == pytest.approx(
        bf16.dp_comm_time_s[0]
    )
    # the Megatron-Bridge recipes gather fp8 weights always (fp8_param_gather in the catalog)
    assert frameworks.catalog()["megatron-bridge"]["fp8_param_gather"] == 1
    mb = {"framework": "megatron-bridge", "precision": "fp8", "recompute": "full"}
    assert run(fp8_param_gather=True, **mb).dp_comm_time_s[0] == pytest.approx(
        run(**mb).dp_comm_time_s[0]
    )


def test_op_level_checkpointing_recomputes_every_second_matmul_not_the_attention():
    kw = {"framework": "torchtitan", "precision": "bf16"}
    none, op, full = (run(recompute=r, **kw) for r in ("none", "op", "full"))
    assert none.compute_time_s[0] < op.compute_time_s[0] < full.compute_time_s[0]
    # Llama 2 7B (MHA, gated MLP): wk and wo of the four h x h projections, w3 of the three
    # h x f matrices (torchtitan _apply_ac_to_transformer_block: every second mm recomputed)
    h, f = 4096.0, 11008.0
    share = (2 * h * h + h * f) / (4 * h * h + 3 * h * f)
    shape = workload.resolve_shape(np.array(["llama2-7b"]), cfg(1, **BASE))
    assert layer.op_recompute_share(shape)[0] == pytest.approx(share)


def test_squared_relu_runs_as_eager_ops_unless_the_stack_compiles_its_blocks():
    # Nemotron-4's relu(x)^2 has no fused kernel in Megatron-Core (only GeLU and SwiGLU):
    # 28 B per feed-forward activation over forward and backward where a fused one moves 12
    kw = dict(model="nemotron4-15b", recompute="none", micro_batch_size=2)
    sq, gelu = (
        run(framework="megatron-core", **kw),
        run(framework="megatron-core", **kw, squared_relu=0),
    )
    assert sq.compute_time_s[0] == pytest.approx(gelu.compute_time_s[0])
    shape = workload.presets()["nemotron4-15b"]
    tokens = 2 * shape["seq_len"]  # one micro-batch, no tensor parallelism
    micro_batches = BASE["global_batch_size"] / (2 * BASE["num_accelerators"])
    extra_bytes = (28 - 12) * tokens * shape["ffn_hidden"] * shape["layers"] * micro_batches
    hbm = sq.hw.hbm_bw_bps[0] * sq.hw.memory_eff[0]
    assert sq.memory_time_s[0] - gelu.memory_time_s[0] == pytest.approx(extra_bytes / hbm)
    # a compiled stack fuses the activation whatever it is
    kw.update(framework="torchtitan-compile", recompute="full")
    assert run(**kw).memory_time_s[0] == pytest.approx(run(**kw, squared_relu=0).memory_time_s[0])
