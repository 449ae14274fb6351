"""Fine-tuning with LoRA adapters beside frozen weights, and packed documents masked apart
(docs/model.md, section 1b): what each changes in the time, memory and energy model."""

import numpy as np
import pandas as pd
import pytest
from test_memory import cfg

from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import adapters
from dse.analytic.time import model as time_model
from dse.analytic.time.workload import resolve_shape

#: one 8-GPU H100 node fine-tuning Llama 2 7B, data-parallel (NeMo's LoRA recipe layout)
NODE = dict(
    model="llama2-7b",
    accelerator="H100-SXM",
    framework="megatron-core",
    precision="bf16",
    num_accelerators=8,
    tensor_parallel=1,
    pipeline_parallel=1,
    global_batch_size=32,
    micro_batch_size=1,
    target_tokens=1e9,
)


def _evaluate(rows: list[dict]) -> pd.DataFrame:
    return AnalyticEvaluator().evaluate(pd.DataFrame(rows))


def test_lora_skips_the_frozen_weights_gradients_and_optimizer():
    full, lora = _evaluate([NODE, {**NODE, "adapter": "lora"}]).to_dict("records")
    assert full["feasible"] and lora["feasible"]
    # the frozen GEMMs lose their weight-gradient pass (a third of their FLOPs); the
    # attention core and the element-wise kernels keep every pass
    assert 2 / 3 < lora["compute_time_s"] / full["compute_time_s"] < 1
    assert lora["step_time_s"] < full["step_time_s"]
    assert lora["tokens_per_s"] > full["tokens_per_s"]
    # no gradient reduction of the frozen weights
    assert lora["dp_comm_time_s"] < 0.1 * full["dp_comm_time_s"]
    # gradients and optimizer state are the adapters' only (rank 32 on every linear layer of
    # a 7B model: ~40M parameters, under 1% of 6.7B)
    for state in ("gradients_memory_gib", "optimizer_memory_gib"):
        assert 0 < lora[state] < 0.01 * full[state]
    # the frozen weights keep their 16-bit copy, the adapters add theirs
    assert (
        full["weights_memory_gib"] < lora["weights_memory_gib"] < 1.01 * full["weights_memory_gib"]
    )
    assert lora["memory_per_accelerator_gib"] < full["memory_per_accelerator_gib"]
    # the same tokens at a faster step: less energy
    assert lora["energy_to_train_j"] < full["energy_to_train_j"]


def test_lora_model_flops_are_about_four_per_parameter_and_token():
    c = cfg(1, **NODE)
    full = time_model.evaluate(c)
    lora = time_model.evaluate({**c, "adapter": np.array(["lora"], dtype=object)})
    ratio = lora.model_flops[0] / full.model_flops[0]
    # 4 N of 6 N for the weights, the attention's 3 passes kept, the adapters' 6 per parameter
    assert 2 / 3 < ratio < 0.75


def test_lora_fits_a_layout_whose_full_training_does_not():
    layout = dict(NODE, model="llama2-70b", tensor_parallel=8, global_batch_size=8)
    full, lora = _evaluate([layout, {**layout, "adapter": "lora"}]).to_dict("records")
    assert full["reason"] == "does not fit in accelerator memory"
    assert lora["feasible"], lora["reason"]


def test_more_targets_train_more_adapter_parameters():
    shape = resolve_shape(np.array(["llama2-7b"], dtype=object), {})
    rank = np.array([32.0])
    counts = [
        adapters.parameters_per_layer(
            shape, rank, np.array([float(adapters.LORA_TARGETS.index(t))])
        )[0]
        for t in ("qkv", "attention", "all")
    ]
    # QKV: r (h + 3h); the output projection: r (h + h); FC1 and FC2 (gated): r (h + 2f) + r (f + h)
    h, f = 4096, 11008
    assert counts == [32 * (h + 3 * h), 32 * (h + 3 * h + 2 * h), 32 * (6 * h + 2 * h + 3 * f)]
    rows = [{**NODE, "adapter": "lora", "lora_targets": t} for t in ("qkv", "attention", "all")]
    out = _evaluate(rows)
    assert out["optimizer_memory_gib"].is_monotonic_increasing
    assert out["step_time_s"].is_monotonic_increasing


def test_lora_is_refused_where_it_is_not_modelled():
    rows = [
        {**NODE, "adapter": "lora", "model": "mixtral-8x7b", "num_accelerators": 8},
        {
            **{k: v for k, v in NODE.items() if k != "target_tokens"},
            "adapter": "lora",
            "target_loss": 2.2,
        },
    ]
    out = _evaluate(rows)
    assert not out["feasible"].any()
    assert out["reason"].iloc[0].startswith("LoRA adapters on a mixture-of-experts")
    assert out["reason"].iloc[1].startswith("a target loss is a pre-training loss")


def test_documents_masked_apart_shorten_the_attention_only():
    long = dict(NODE, model="llama3-8b", tensor_parallel=2)  # 8,192 tokens a sequence
    rows = [long, {**long, "document_tokens": 1024}, {**long, "document_tokens": 8192}]
    whole, packed, one_document = _evaluate(rows).to_dict("records")
    assert packed["step_time_s"] < whole["step_time_s"]
    assert packed["memory_per_accelerator_gib"] == whole["memory_per_accelerator_gib"]
    # a document as long as the sequence is the whole sequence, bit for bit
    assert one_document["step_time_s"] == whole["step_time_s"]
    assert one_document["energy_to_train_j"] == whole["energy_to_train_j"]


def test_nemo_lora_runs_are_predicted_within_15_percent():
    # NeMo 24.07's published LoRA fine-tuning throughput on H100 (7B, 13B on 8 GPUs, 70B at
    # TP 2 PP 4), a check never fitted (heldout/nemo_finetune.csv, validation.CHECK_TABLES)
    from pathlib import Path

    from dse.analytic import validation

    table = Path(__file__).parents[1] / "dse/analytic/data/reference/heldout/nemo_finetune.csv"
    rows = validation.predict(validation.read_table(table))
    lora = rows[rows["id"].str.contains("-lora-")]
    assert len(lora) == 3 and lora["reason"].eq("").all()
    assert (lora["error"].abs() < 0.15).all()


def test_model_flops_count_the_attention_within_documents():
    # NVIDIA's published model FLOPs of packed fine-tuning count attention within the
    # packed samples: Llama 2 7B SFT 682 TFLOP/s at 17,120 tokens/s/GPU is 3.98e10 FLOPs a
    # token, ~6 N, where Megatron's count over 4,096 tokens is 4.6e10
    c = cfg(1, **dict(NODE, model="llama2-7b"))
    whole = time_model.evaluate(c).model_flops[0]
    packed = time_model.evaluate({**c, "document_tokens": np.array([250.0])}).model_flops[0]
    one = time_model.evaluate({**c, "document_tokens": np.array([4096.0])}).model_flops[0]
    tokens = 32 * 4096
    assert one == whole
    assert 4.5e10 < whole / tokens < 4.7e10
    assert 3.9e10 < packed / tokens < 4.2e10


def test_a_lora_run_has_no_pre_training_loss_trajectory():
    out = AnalyticEvaluator().trajectory(pd.DataFrame([NODE, {**NODE, "adapter": "lora"}]), 3)
    full, lora = out[out["candidate"] == 0], out[out["candidate"] == 1]
    assert full["loss_nats"].notna().all()
    assert lora["loss_nats"].isna().all()
    # time and energy accrue as for any run, to the run's own totals
    assert (lora["time_s"].diff().dropna() > 0).all()
    assert lora["time_s"].iloc[-1] < full["time_s"].iloc[-1]


def test_lora_takes_its_tokens_as_given_at_any_batch():
    # the critical-batch law's default noise scale is a pre-training one: a LoRA run's
    # target_tokens are its tokens whatever the batch, unless b_noise_tokens is stated
    rows = [{**NODE, "adapter": "lora", "global_batch_size": b} for b in (32, 128)]
    rows.append({**NODE, "adapter": "lora", "global_batch_size": 128, "b_noise_tokens": 1e6})
    small, large, stated = _evaluate(rows).to_dict("records")
    assert small["tokens_to_train"] == large["tokens_to_train"] == NODE["target_tokens"]
    assert stated["tokens_to_train"] > NODE["target_tokens"]
    full = _evaluate([{**NODE, "global_batch_size": 128}]).iloc[0]
    assert full["tokens_to_train"] > NODE["target_tokens"]  # pre-training: the law applies


def test_lora_refuses_a_rank_above_the_width_and_a_batch_ramp():
    rows = [
        {**NODE, "adapter": "lora", "lora_rank": 8192},
        {
            **NODE,
            "adapter": "lora",
            "batch_schedule": "linear",
            "batch_ramp_start_size": 8,
            "batch_ramp_tokens": 1e8,
        },
    ]
    out = _evaluate(rows)
    assert out["reason"].iloc[0].startswith("LoRA rank above the model width")
    assert out["reason"].iloc[1].startswith("a batch-size schedule follows")


def test_lora_adapters_split_over_tensor_ranks_and_gather_beside_row_parallel_layers():
    layout = dict(NODE, model="llama2-13b", sequence_parallel=True, adapter="lora")
    tp2, tp4 = _evaluate([{**layout, "tensor_parallel": t} for t in (2, 4)]).to_dict("records")
    # every adapter matrix split over the ranks (NeMo's ParallelLinearAdapter)
    assert tp4["gradients_memory_gib"] / tp2["gradients_memory_gib"] == pytest.approx(0.5)
    # B's output gathered beside the output projection and FC2: more tensor-parallel time
    # with those adapted than with QKV's alone
    qkv, everything = _evaluate(
        [{**layout, "tensor_parallel": 4, "lora_targets": t} for t in ("qkv", "all")]
    ).to_dict("records")
    assert everything["tp_comm_time_s"] > qkv["tp_comm_time_s"]


def test_lora_frees_the_frozen_embedding_and_gradients_a_pipeline_keeps():
    # a tied embedding's gradient reduction between the first and last stage: none when frozen
    tied = dict(NODE, model="gpt-1.3b", pipeline_parallel=2)
    full, lora = _evaluate([tied, {**tied, "adapter": "lora"}]).to_dict("records")
    assert lora["pp_comm_time_s"] < full["pp_comm_time_s"]
    # torchtitan's FSDP with a pipeline keeps the stage's fp32 gradients unsharded: a frozen
    # weight has none
    titan = dict(
        NODE,
        model="llama3-8b",
        framework="torchtitan",
        zero_stage=3,
        pipeline_parallel=2,
        num_accelerators=16,
    )
    full, lora = _evaluate([titan, {**titan, "adapter": "lora"}]).to_dict("records")
    assert lora["activations_memory_gib"] < full["activations_memory_gib"]


def test_on_a_host_paced_model_the_adapters_operations_lengthen_the_step():
    # gpt-350m on H100s: the host's dispatch paces the step; each adapter adds 4 of a
    # layer's ~30 Python-level operations, so more targets take longer, and LoRA on every
    # linear layer is slower than training every weight
    small = dict(NODE, model="gpt-350m", target_batch_size=32)
    rows = [small, *({**small, "adapter": "lora", "lora_targets": t} for t in ("qkv", "all"))]
    full, qkv, everything = _evaluate(rows)["step_time_s"]
    assert full < qkv < everything


def test_the_adapters_scale_addition_and_input_gradient_sum_move_activation_sized_bytes():
    # NeMo 24.07's adapter path: the scale (read, write) and the addition to the base layer's
    # output (read 2, write 1) over B's output in the forward; the scale's backward (read,
    # write) and the input gradient summed into the base layer's (read 2, write 1) in the
    # backward; a fully recomputed layer runs the forward's again
    shape = resolve_shape(np.array(["llama2-7b"], dtype=object), {})
    one = np.array([1.0])
    ad = adapters.of(np.array(["lora"]), 32 * one, np.array(["qkv"]), shape)
    T, h = 4096.0, 4096.0
    qkv_out = T * 3 * h  # Llama 2 7B: as many key-value as query heads
    counted = adapters.elementwise_bytes(shape, ad, one, T, 0.0)
    assert counted == pytest.approx(2.0 * ((2 + 3) * qkv_out + 2 * qkv_out + 3 * T * h))
    recomputed = adapters.elementwise_bytes(shape, ad, one, T, 1.0)
    assert recomputed - counted == pytest.approx(2.0 * (2 + 3) * qkv_out)
    # over tensor ranks, the outputs are split and the gathered input is not
    tp2 = adapters.elementwise_bytes(shape, ad, 2.0 * one, T, 0.0)
    assert tp2 == pytest.approx(2.0 * ((5 + 2) * qkv_out / 2 + 3 * T * h))
    # every linear layer adapted moves more than QKV alone
    everything = adapters.of(np.array(["lora"]), 32 * one, np.array(["all"]), shape)
    assert adapters.elementwise_bytes(shape, everything, one, T, 0.0) > counted
    # none without adapters
    mixed = adapters.of(np.array(["none", "lora"]), 32 * one, np.array(["qkv", "qkv"]), shape)
    assert adapters.elementwise_bytes(shape, mixed, one, T, 0.0)[0] == 0.0
