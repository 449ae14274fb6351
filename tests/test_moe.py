"""Mixture-of-experts, latent attention, long context, and the rack-scale and TPU parts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import hardware, training, workload
from dse.analytic.time.collectives import Network


def shape_of(name, **overrides):
    return workload.resolve_shape(
        np.array([name], dtype=object), {k: np.array([float(v)]) for k, v in overrides.items()}
    )


@pytest.mark.parametrize(
    "name, total, active",
    [
        ("mixtral-8x7b", 46.7e9, 12.9e9),
        ("mixtral-8x22b", 141e9, 39e9),
        ("deepseek-v3", 671e9, 37e9),
        ("qwen3-30b-a3b", 30.5e9, 3.3e9),
        ("qwen3-235b-a22b", 235e9, 22e9),
        ("dbrx-132b", 132e9, 36e9),
        ("llama4-scout", 109e9, 17e9),
        ("llama4-maverick", 400e9, 17e9),
    ],
)
def test_moe_presets_reproduce_the_published_total_and_active_parameters(name, total, active):
    s = shape_of(name)
    # Llama 4's published totals include the vision encoder (~1.5B): 3% allowed
    assert workload.parameter_count(s)[0] == pytest.approx(total, rel=0.03)
    assert workload.active_parameter_count(s)[0] == pytest.approx(active, rel=0.03)
    assert workload.presets()[name]["source"]


def test_model_flops_count_the_active_parameters():
    s = shape_of("deepseek-v3")
    flops = workload.model_flops_per_iteration(s, np.array([1.0]))[0]
    active = workload.active_parameter_count(s)[0]
    # 6 N_active per token plus attention (4K tokens, MLA's 192/128-wide heads) and the output layer
    assert 6 * active < flops < 1.3 * 6 * active
    dense = shape_of("llama3-70b")
    assert workload.active_parameter_count(dense)[0] == workload.parameter_count(dense)[0]


def test_the_training_length_law_takes_the_active_parameters():
    s = shape_of("mixtral-8x7b")
    active = workload.active_parameter_count(s)
    r = run(
        model="mixtral-8x7b",
        seq_len=4096,
        target_loss=2.0,
        expert_parallel=8,
        num_accelerators=64,
        global_batch_size=512,
        target_batch_size=512,
        micro_batch_size=1,
    )
    # Chinchilla's L(N, D) at N = N_active, inverted for D (Hoffmann et al. 2022, eq. 10)
    assert r["tokens_to_train"][0] == pytest.approx(
        training.chinchilla_tokens(active, np.array([2.0]))[0], rel=1e-9
    )
    assert r["active_parameters"][0] == pytest.approx(active[0])


def test_mla_attention_is_smaller_than_multi_head_attention_of_the_same_heads():
    mla = workload.attention_parameters(shape_of("deepseek-v3"))[0]
    mha = workload.attention_parameters(
        shape_of("deepseek-v3", kv_lora_rank=0, q_lora_rank=0, rope_head_dim=0)
    )[0]
    assert mla == pytest.approx(187.1e6, rel=0.01)  # 1536/512/64-wide latents, 128 heads of 128
    assert mha > 2 * mla


def run(**cols) -> pd.DataFrame:
    n = max([len(v) for v in cols.values() if isinstance(v, list)] or [1])
    base = {"framework": "megatron-core", "recompute": "selective", "sequence_parallel": True}
    return AnalyticEvaluator().evaluate(
        pd.DataFrame(
            {k: v if isinstance(v, list) else [v] * n for k, v in {**base, **cols}.items()}
        )
    )


@pytest.mark.parametrize(
    "kw, reason",
    [
        (
            dict(model="llama2-7b", expert_parallel=2),
            "expert parallelism needs a mixture-of-experts model",
        ),
        (
            dict(model="mixtral-8x7b", expert_parallel=16, num_accelerators=16),
            "expert parallel degree does not divide the experts",
        ),
        (
            dict(
                model="mixtral-8x7b",
                expert_parallel=8,
                expert_tensor_parallel=2,
                num_accelerators=8,
            ),
            "expert x expert-tensor parallel does not divide the tensor x context x data-parallel ranks",
        ),
        (dict(model="mixtral-8x7b", experts_per_token=9), "more experts per token than experts"),
        (
            dict(
                model="mixtral-8x7b",
                tensor_parallel=2,
                expert_parallel=4,
                num_accelerators=8,
                sequence_parallel=False,
            ),
            "the training stack needs sequence parallelism for a mixture-of-experts model with tensor parallelism",
        ),
    ],
)
def test_expert_layouts_that_cannot_run(kw, reason):
    assert run(accelerator="H100-SXM", global_batch_size=64, **kw)["reason"][0] == reason


def test_expert_parallelism_shards_the_experts_and_pays_an_all_to_all():
    r = run(
        model="mixtral-8x7b",
        seq_len=4096,
        accelerator="H100-SXM",
        num_accelerators=64,
        global_batch_size=256,
        tensor_parallel=1,
        pipeline_parallel=4,
        expert_parallel=[1, 4, 8, 8],
        scaleup_size=[8, 8, 8, 4],
        precision="bf16",
        recompute="full",
        micro_batch_size=1,
    )
    assert r["feasible"].all()
    # expert weights and their optimizer state split EP ways (dense weights are not)
    assert r["weights_memory_gib"][0] > r["weights_memory_gib"][1] > r["weights_memory_gib"][2]
    # ZeRO-1 shards the optimizer state over the expert-data-parallel ranks: EP x EDP = the
    # 16 data-parallel ranks either way, so the optimizer state per rank does not change
    assert r["optimizer_memory_gib"][1] == pytest.approx(r["optimizer_memory_gib"][0], rel=1e-9)
    # EP 8 over two domains of 4: half the dispatch crosses InfiniBand
    assert r["ep_comm_time_s"][3] > 2 * r["ep_comm_time_s"][2] > 0
    assert r["ep_comm_time_s"][0] == pytest.approx(0.0, abs=1e-12)
    assert (r["tp_comm_time_s"] == 0).all() and (
        r["cp_comm_time_s"] == 0
    ).all()  # no tensor or context ranks


def test_capacity_factor_overlap_and_dispatcher():
    kw = dict(
        model="qwen3-235b-a22b",
        accelerator="H100-SXM",
        precision="bf16",
        num_accelerators=256,
        global_batch_size=2048,
        tensor_parallel=2,
        pipeline_parallel=8,
        interleave=4,
        expert_parallel=32,
        expert_tensor_parallel=1,
    )
    base, padded, overlap, deepep = run(
        **kw,
        capacity_factor=[1.0, 1.25, 1.0, 1.0],
        moe_a2a_overlap=[False, False, True, False],
        moe_dispatcher=["alltoall", "alltoall", "alltoall", "deepep"],
    ).iloc
    assert (
        padded["step_time_s"] > base["step_time_s"]
        and padded["compute_time_s"] > base["compute_time_s"]
    )
    assert overlap["ep_comm_time_s"] < base["ep_comm_time_s"]
    assert overlap["tp_comm_time_s"] > 0 and base["tp_comm_time_s"] > 0
    # one copy per destination node over InfiniBand (DeepEP): fewer scale-out bytes than one per expert
    assert deepep["ep_comm_time_s"] < 0.7 * base["ep_comm_time_s"]
    assert deepep["energy_network_j"] < base["energy_network_j"]


def test_sequence_parallelism_is_required_with_moe_and_tensor_parallelism_only_where_the_stack_says():
    """Megatron-LM's argument check refuses MoE with tensor parallelism and no sequence
    parallelism; DeepSpeed and FSDP have no such rule, and a dense model is not concerned."""
    r = run(
        model=["mixtral-8x7b"] * 4 + ["llama2-7b"],
        accelerator="H100-SXM",
        num_accelerators=8,
        global_batch_size=64,
        tensor_parallel=2,
        expert_parallel=[4, 4, 4, 4, 1],
        sequence_parallel=[False, True, False, False, False],
        framework=["megatron-core", "megatron-core", "deepspeed", "megatron", "megatron-core"],
    )
    rule = "the training stack needs sequence parallelism for a mixture-of-experts model with tensor parallelism"
    assert list(r["reason"] == rule) == [True, False, False, True, False]


def test_the_all_to_all_overlap_needs_another_micro_batch():
    """The overlap hides one micro-batch's dispatch behind another's compute: with one
    micro-batch there is nothing to hide behind; with m, the first forward and the last
    backward have no partner."""
    kw = dict(
        model="mixtral-8x7b",
        accelerator="H100-SXM",
        num_accelerators=64,
        tensor_parallel=1,
        pipeline_parallel=1,
        expert_parallel=8,
        micro_batch_size=1,
        seq_len=4096,
        recompute="full",
    )
    one = run(**kw, global_batch_size=64, moe_a2a_overlap=[False, True])
    assert one["feasible"].all()
    assert one["ep_comm_time_s"][1] == pytest.approx(one["ep_comm_time_s"][0], rel=1e-12)
    two, eight = (
        run(**kw, global_batch_size=64 * m, moe_a2a_overlap=[False, True]) for m in (2, 8)
    )
    saved = [
        (r["ep_comm_time_s"][0] - r["ep_comm_time_s"][1]) / r["ep_comm_time_s"][0]
        for r in (two, eight)
    ]
    assert 0 < saved[0] < saved[1]
    # a slow fabric: the all-to-all outlasts the window; 2 micro-batches hide (2-1)/2 of what
    # 8 hide per micro-batch, (8-1)/8 (the window is full either way)
    slow = {**kw, "scaleup_size": 1, "scaleout_bw_gbs": 5}
    two, eight = (
        run(**slow, global_batch_size=64 * m, moe_a2a_overlap=[False, True]) for m in (2, 8)
    )
    hidden = [
        (r["ep_comm_time_s"][0] - r["ep_comm_time_s"][1]) / m for r, m in ((two, 2), (eight, 8))
    ]
    assert hidden[0] / hidden[1] == pytest.approx((1 / 2) / (7 / 8), rel=1e-6)


def test_overlapped_collectives_share_the_compute_they_hide_behind():
    # slow NVLink: the tensor-parallel traffic alone fills the dense GEMMs' window, so the
    # expert all-to-all has nothing left to hide behind (it used to hide behind it again)
    kw = dict(
        model="mixtral-8x7b",
        accelerator="H100-SXM",
        num_accelerators=64,
        global_batch_size=256,
        tensor_parallel=2,
        pipeline_parallel=4,
        expert_parallel=8,
        micro_batch_size=1,
        scaleup_bw_gbs=10,
        seq_len=4096,
    )
    exposed_all, tp_hidden, both_hidden = run(
        **kw,
        sequence_parallel=[True, True, True],
        framework=["megatron", "megatron-core", "megatron-core"],
        moe_a2a_overlap=[False, False, True],
    ).iloc

    def layer_comm(r):
        return r["tp_comm_time_s"] + r["ep_comm_time_s"]

    hidden_by_tp = exposed_all["tp_comm_time_s"] - tp_hidden["tp_comm_time_s"]
    assert hidden_by_tp > 0.5 * tp_hidden["compute_time_s"]
    assert tp_hidden["ep_comm_time_s"] == exposed_all["ep_comm_time_s"] > 0
    assert layer_comm(both_hidden) >= layer_comm(tp_hidden) - 0.5 * tp_hidden["compute_time_s"]
    total_hidden = layer_comm(exposed_all) - layer_comm(both_hidden)
    assert 0 < total_hidden < both_hidden["compute_time_s"]


def test_an_nvl72_domain_keeps_wide_expert_parallelism_on_nvlink():
    kw = dict(
        model="deepseek-v3",
        layers=62,
        precision="fp8",
        num_accelerators=256,
        global_batch_size=2048,
        tensor_parallel=1,
        pipeline_parallel=4,
        interleave=4,
        expert_parallel=64,
        expert_tensor_parallel=1,
        sequence_parallel=False,
    )
    b200, gb200, b200_72 = run(
        **kw, accelerator=["B200", "GB200", "B200"], scaleup_size=[np.nan, np.nan, 72]
    ).iloc
    assert hardware.catalog()["GB200"]["scaleup_domain"] == 72
    assert gb200["feasible"] and b200["feasible"]
    # EP 64 spans 8 HGX nodes on B200 but one NVLink domain on GB200 NVL72
    assert gb200["ep_comm_time_s"] < 0.25 * b200["ep_comm_time_s"]
    assert b200_72["ep_comm_time_s"] < 0.25 * b200["ep_comm_time_s"]


def test_torus_collectives_and_tpu_parts():
    def net(topology):  # a 64-chip pod: a 4 x 4 x 4 torus (topology 4) or a switch (0)
        return Network(
            size=np.array([64.0]),
            up_bw=np.array([600e9]),
            up_lat=np.array([1e-6]),
            up_topo=np.array([float(topology)]),
            out_bw=np.array([6e9]),
            out_lat=np.array([5e-6]),
            out_fabric=np.array([1.0]),
            eff=np.array([1.0]),
        )

    torus, switch = net(4), net(0)
    one, v = np.array([1.0]), np.array([1e9])
    # a group of 4 on one axis uses 2 of the 6 links: a third of a switch's bandwidth
    g4 = np.array([4.0])
    assert torus.reduce_scatter(v, g4, one)[0] == pytest.approx(
        3 * switch.reduce_scatter(v, g4, one)[0], rel=0.02
    )
    # the whole 4 x 4 x 4 all-to-all is bisection-bound: V n D / (4 B) = 3 V / B, against ~V / B on a switch
    g64 = np.array([64.0])
    assert torus.all_to_all(v, g64, one)[0] == pytest.approx(3 * 1e9 / 600e9, rel=0.02)
    assert switch.all_to_all(v, g64, one)[0] == pytest.approx(63 / 64 * 1e9 / 600e9, rel=0.02)
    r = run(
        model="llama3-8b",
        accelerator=["TPU-v5p", "TPU-v6e", "TPU-v5e"],
        num_accelerators=256,
        global_batch_size=512,
        tensor_parallel=4,
        framework="fsdp",
        zero_stage=3,
        recompute="full",
        sequence_parallel=False,
    )
    assert r["feasible"][:2].all()
    # TPU v5p's MXU efficiency is fitted on MaxText's tables (issue 32), shared with v5e
    assert (
        not hardware.is_estimated("TPU-v5p")
        and hardware.catalog()["TPU-v5p"]["scaleup_topology"] == "torus_3d"
    )
    # no user clock control on Cloud TPUs: a lower clock is infeasible
    low = run(
        model="llama3-8b",
        accelerator="TPU-v5p",
        num_accelerators=64,
        global_batch_size=256,
        clock_fraction=0.8,
        framework="fsdp",
        recompute="full",
        sequence_parallel=False,
    )
    assert low["reason"][0] == "clock outside the accelerator's range"


def test_long_context_attention_and_context_parallelism():
    kw = dict(
        model="llama3-8b",
        accelerator="H100-SXM",
        num_accelerators=64,
        tensor_parallel=8,
        global_batch_size=64,
        recompute="selective",
        precision="bf16",
    )
    seqs = [8192, 32768, 131072]
    r = run(**kw, seq_len=seqs, context_parallel=[1, 4, 8])
    assert r["feasible"].all()
    # attention FLOPs grow with s (per token: 4 s a d), so MFU's FLOPs per token do too
    per_token = [
        workload.layer_forward_flops_per_token(shape_of("llama3-8b", seq_len=s))[0] for s in seqs
    ]
    assert per_token[2] - per_token[1] == pytest.approx(4 * (131072 - 32768) * 4096, rel=1e-9)
    # FlashAttention keeps no s x s scores: activations per token stay flat as s grows with c
    act = r["activations_memory_gib"] / (np.array(seqs) / np.array([1, 4, 8]))
    assert act.max() / act.min() < 1.05
    ring, gather = run(
        **kw, seq_len=131072, context_parallel=8, context_parallel_algorithm=["ring", "all_gather"]
    ).iloc
    assert (
        ring["cp_comm_time_s"] < gather["cp_comm_time_s"]
    )  # the ring hides its exchange behind attention
    # the same tensor-parallel time (to rounding: it is the layer's total less the exchange)
    assert ring["tp_comm_time_s"] == pytest.approx(gather["tp_comm_time_s"], rel=1e-12)
    assert ring["tp_comm_time_s"] > 0
    assert ring["compute_time_s"] == gather["compute_time_s"]


def test_a_dense_row_gives_the_same_results_beside_mixture_of_experts_rows():
    # a block with an MoE row computes the expert terms for every row, weighted by the MoE
    # share (0 for a dense model): a dense row's experts-per-rank was 0 and its results NaN
    dense = pd.DataFrame(
        {
            "model": ["llama3-8b", "gpt3-175b"],
            "accelerator": "H100-SXM",
            "num_accelerators": 64,
            "global_batch_size": 256,
            "micro_batch_size": 1,
            "tensor_parallel": [1, 8],
            "pipeline_parallel": [1, 8],
        }
    )
    moe = dense.assign(model=["mixtral-8x7b", "deepseek-v3"], expert_parallel=8)
    ev = AnalyticEvaluator()
    alone = ev.evaluate(dense)
    beside = ev.evaluate(pd.concat([dense, moe], ignore_index=True)).head(2)
    assert alone["feasible"].all() and np.isfinite(alone["energy_to_train_j"]).all()
    pd.testing.assert_frame_equal(beside, alone)


def test_tensor_context_and_expert_traffic_are_reported_apart_and_sum_to_the_step():
    """The layer's exposed communication is split into its tensor-parallel collectives, the
    context-parallel exchange and the experts' traffic; with the other phases they make the
    iteration time, and a candidate without context ranks or experts has none of either."""
    r = run(
        model=["mixtral-8x7b", "mixtral-8x7b", "llama3-8b"],
        accelerator="H100-SXM",
        num_accelerators=64,
        global_batch_size=128,
        tensor_parallel=2,
        context_parallel=[2, 1, 1],
        pipeline_parallel=2,
        expert_parallel=[4, 4, 1],
        seq_len=16384,
        sequence_parallel=True,
        recompute="full",
        precision="bf16",
    )
    assert r["feasible"].all()
    parts = [
        "compute_time_s",
        "memory_time_s",
        "tp_comm_time_s",
        "cp_comm_time_s",
        "ep_comm_time_s",
        "pp_comm_time_s",
        "dp_comm_time_s",
        "bubble_time_s",
        "optimizer_time_s",
    ]
    assert np.allclose(r[parts].sum(axis=1), r["step_time_s"], rtol=1e-12)
    assert (r["tp_comm_time_s"] > 0).all()
    assert r["cp_comm_time_s"][0] > 0 and r["cp_comm_time_s"][1] == r["cp_comm_time_s"][2] == 0
    assert r["ep_comm_time_s"][0] > 0 and r["ep_comm_time_s"][1] > 0 and r["ep_comm_time_s"][2] == 0


@pytest.mark.parametrize(
    "name, kv_width",
    [
        ("llama3-8b", 2 * 8 * 128),  # 8 key-value heads of 128: 1,024 each for K and V
        ("qwen3-30b-a3b", 2 * 4 * 128),  # heads of 128 although hidden / heads = 64
        (
            "deepseek-v3",
            128 * (128 + 64) + 128 * 128,
        ),  # MLA: expanded per-head keys (with RoPE) and values
    ],
)
def test_context_parallel_exchange_moves_the_attentions_own_keys_and_values(name, kv_width):
    from dse.analytic.time import tensor_parallel

    s = shape_of(name)
    one = np.array([1.0])
    seq = s.seq_len[0]
    # forward gather, backward gather + gradient reduce-scatter, 16-bit, one sequence, one tensor rank
    expected = 3 * 2 * seq * kv_width
    got = tensor_parallel.cp_bytes(s, one, one, np.array([2.0]), np.array([0]))[0]
    assert got == pytest.approx(expected, rel=1e-12)


def test_deduplicated_dispatch_moves_nothing_inside_a_domain_holding_one_expert_rank():
    """EP 2 at TP 8: each 8-GPU domain holds one expert rank, so DeepEP's copies cross the
    fabric and land on their expert's rank; nothing is forwarded over the (fully connected)
    scale-up links, whose share toward a non-member is zero (it gave steps of 1e19 s)."""
    r = run(
        model="mixtral-8x7b",
        accelerator=["MI300X", "MI300X", "H100-SXM"],
        num_accelerators=16,
        global_batch_size=64,
        tensor_parallel=8,
        expert_parallel=2,
        sequence_parallel=True,
        framework="megatron-core",
        seq_len=4096,
        moe_dispatcher=["alltoall", "deepep", "deepep"],
        failures_per_accelerator_hour=0,
    )
    assert r["feasible"].all()
    assert (r["ep_comm_time_s"] < 10).all() and (r["step_time_s"] < 60).all()
    assert r["ep_comm_time_s"][1] <= r["ep_comm_time_s"][0]


def test_a_higher_clock_never_makes_the_step_slower():
    """The window that hides tensor- and expert-parallel traffic is the GEMMs' whole time: a
    GEMM that turns memory-bound at a higher clock still runs beside the traffic (with the
    clock-bound time alone, the traffic came out of hiding and the step got slower)."""
    fractions = np.linspace(0.4, 1.0, 13)
    r = run(
        model="qwen3-30b-a3b",
        accelerator="H800",
        num_accelerators=128,
        framework="megatron-core",
        global_batch_size=64,
        tensor_parallel=2,
        pipeline_parallel=2,
        sequence_parallel=True,
        interleave=2,
        recompute="none",
        capacity_factor=1.25,
        failures_per_accelerator_hour=0,
        clock_fraction=list(fractions),
    )
    assert r["feasible"].all()
    assert (np.diff(r["step_time_s"].to_numpy()) <= 1e-12).all(), r["step_time_s"].to_numpy()


def _step_inputs(**kw):
    """The per-candidate step inputs the time model builds for one candidate (its front)."""
    from test_memory import cfg

    from dse.analytic.time import model as time_model

    return time_model.front(cfg(**kw), share=False).per_candidate().inputs


def test_the_experts_grouped_gemm_pays_a_kernels_fixed_cost_per_expert_on_a_stream(monkeypatch):
    """Transformer Engine's grouped GEMM is one cuBLAS kernel per local expert over 4
    streams: ceil(E/EP / 4) fixed costs lie on a stream's path, where one batched kernel
    would pay one."""
    from dse.analytic.time import experts, gemm

    x = _step_inputs(
        model="qwen3-30b-a3b",
        accelerator="B200",
        num_accelerators=8,
        global_batch_size=64,
        expert_parallel=8,
        precision="fp8",
    )
    g = gemm.roofline(x.hw, np.ones(1))
    m, n, k = np.full(1, 2048.0), np.full(1, 1536.0), np.full(1, 2048.0)
    one = gemm.compute_time(m, n, k, np.full(1, 16.0), g)
    # one kernel's fixed cost unless told otherwise, to the bit
    assert gemm.compute_time(m, n, k, np.full(1, 16.0), g, kernels=1.0).tobytes() == one.tobytes()
    each = [gemm.compute_time(m, n, k, np.full(1, 16.0), g, kernels=float(s)) for s in (1, 2, 3, 4)]
    steps = np.diff(np.concatenate(each))
    assert (steps > 0).all() and steps == pytest.approx(np.full(3, steps[0]), rel=1e-12)

    # 128 experts over EP 8: 16 per rank, 4 kernels on each of the 4 streams
    T = np.full(1, 4096.0)
    tiles = np.ceil(T / gemm.TILE)
    with np.errstate(divide="ignore", invalid="ignore"):  # no shared experts: 0-wide GEMMs
        grouped = experts.ffn_gemms(x.shape, x.ex, x.layout.tp, T, tiles, g)[0]
        monkeypatch.setattr(experts, "GROUPED_GEMM_STREAMS", 16.0)  # as if all 16 ran at once
        batched = experts.ffn_gemms(x.shape, x.ex, x.layout.tp, T, tiles, g)[0]
    assert grouped > batched


def test_fp8_casts_the_experts_dispatched_copies_of_each_token():
    """fp8 casts every GEMM input: an MoE layer's FC1 input is each token's k dispatched
    copies (h wide) and its FC2 input k rows of f_e, so the cast bytes grow by 3 B x (h + f_e)
    per token for each further expert a token is routed to; a dense MLP casts T h and
    T f / t as before."""
    from dse.analytic.time import layer

    def cast_bytes(**kw):
        x = _step_inputs(accelerator="H100-SXM", num_accelerators=8, global_batch_size=64, **kw)
        T = x.layout.micro_batch * x.shape.seq_len / x.layout.cp
        on, off = (
            layer.elementwise_bytes(x.shape, x.layout, T, np.full(1, f), 1.0, x.ex)[0]
            for f in (1.0, 0.0)
        )
        return on - off, x.shape, T

    moe = dict(model="qwen3-30b-a3b", expert_parallel=8, precision="fp8")
    four, s, T = cast_bytes(experts_per_token=4, **moe)
    eight, _, _ = cast_bytes(experts_per_token=8, **moe)
    per_copy = 3.0 * T * (s.hidden + s.expert_ffn_hidden)
    assert eight - four == pytest.approx(4 * per_copy, rel=1e-12)

    dense, d, Td = cast_bytes(model="llama3-8b", precision="fp8")
    assert dense == pytest.approx(3.0 * Td * (2 * d.hidden + d.hidden + d.ffn_hidden), rel=1e-12)
