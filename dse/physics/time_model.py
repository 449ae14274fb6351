"""Time and memory model: workload, parallel layout, memory fit, step time, training length.

``evaluate(cfg, clock_mhz=None)`` returns the time metrics, a ``reason`` array (empty
where feasible) and, under keys starting with ``_``, the intermediate arrays the energy
model needs (hardware, clock, the step-time breakdown, traffic).
"""

from __future__ import annotations

import numpy as np

from dse.evaluators.base import Input, Metric
from dse.physics import hardware, memory, parallelism, timing, training, workload

_ACCELERATORS = hardware.accelerator_names()
_MODELS = tuple(workload.presets())

INPUTS: list[Input] = [
    Input("model", "str", "", "model preset name (shape fields override it)", "gpt-1.3b", _MODELS, group="workload"),
    Input("layers", "int", "", "transformer layers (overrides the preset)", None, minimum=1, group="workload"),
    Input("hidden", "int", "", "hidden size (overrides the preset)", None, minimum=1, group="workload"),
    Input("ffn_hidden", "int", "", "feed-forward hidden size (overrides the preset)", None, minimum=1, group="workload"),
    Input("heads", "int", "", "attention heads (overrides the preset)", None, minimum=1, group="workload"),
    Input("kv_heads", "int", "", "key-value heads (overrides the preset)", None, minimum=1, group="workload"),
    Input("seq_len", "int", "tokens", "sequence length (overrides the preset)", None, minimum=1, group="workload"),
    Input("vocab", "int", "tokens", "vocabulary size (overrides the preset)", None, minimum=1, group="workload"),
    Input("target_tokens", "float", "tokens", "tokens needed in the small-batch limit (D_min)", 2.6e10, minimum=1, group="workload"),
    Input("b_noise_tokens", "float", "tokens", "gradient noise scale B_noise (McCandlish et al. 2018)", 4e6, minimum=1, group="workload"),
    Input("precision", "str", "", "matrix-multiply precision", "bf16", ("bf16", "fp16", "fp8", "tf32"), group="workload"),
    Input("accelerator", "str", "", "accelerator type (hardware catalog)", "H100-SXM", _ACCELERATORS, group="hardware"),
    Input("num_accelerators", "int", "", "accelerators in the job", 8, minimum=1, group="hardware"),
    Input("clock_mhz", "float", "MHz", "SM clock (default: the accelerator's maximum)", None, minimum=1, group="hardware"),
    Input("scaleup_size", "int", "", "accelerators per scale-up domain (e.g. NVLink)", 8, minimum=1, group="network"),
    Input("scaleup_bw_gbs", "float", "GB/s", "scale-up bandwidth per accelerator per direction (default: catalog)", None, minimum=0.001, group="network"),
    Input("scaleout_bw_gbs", "float", "GB/s", "scale-out bandwidth per accelerator per direction", 50.0, minimum=0.001, group="network"),
    Input("global_batch_size", "int", "sequences", "global batch size", 512, minimum=1, group="parallelism"),
    Input("micro_batch_size", "int", "sequences", "micro-batch size", 1, minimum=1, group="parallelism"),
    Input("tensor_parallel", "int", "", "tensor-parallel degree", 1, minimum=1, group="parallelism"),
    Input("pipeline_parallel", "int", "", "pipeline-parallel degree", 1, minimum=1, group="parallelism"),
    Input("zero_stage", "int", "", "sharded optimizer (ZeRO) stage", 1, minimum=0, maximum=3, group="parallelism"),
    Input("recompute", "str", "", "activation recomputation", "selective", ("none", "selective", "full"), group="parallelism"),
]

METRICS: list[Metric] = [
    Metric("time_to_train_s", "s", "time to train"),
    Metric("time_to_train_days", "days", "time to train"),
    Metric("step_time_s", "s", "iteration time"),
    Metric("compute_time_s", "s", "compute-bound time per iteration"),
    Metric("memory_time_s", "s", "memory-bound time per iteration"),
    Metric("tp_comm_time_s", "s", "exposed tensor-parallel communication per iteration"),
    Metric("pp_comm_time_s", "s", "pipeline point-to-point communication per iteration"),
    Metric("dp_comm_time_s", "s", "exposed data-parallel communication per iteration"),
    Metric("bubble_time_s", "s", "pipeline bubble per iteration"),
    Metric("optimizer_time_s", "s", "optimizer step per iteration"),
    Metric("steps_to_train", "steps", "optimizer steps to reach the target"),
    Metric("tokens_to_train", "tokens", "tokens needed to reach the target"),
    Metric("tokens_per_s", "tokens/s", "training throughput"),
    Metric("mfu", "1", "model FLOPs utilisation"),
    Metric("memory_per_accelerator_gb", "GB", "memory per accelerator"),
    Metric("parameters", "1", "model parameters"),
    Metric("data_parallel", "1", "data-parallel degree"),
]


def _flag(reasons: np.ndarray, mask: np.ndarray, reason: str) -> None:
    """Record ``reason`` for rows in ``mask`` that have no reason yet."""
    mask = np.asarray(mask, dtype=bool) & (reasons == "")
    reasons[mask] = reason


def evaluate(cfg: dict[str, np.ndarray], clock_mhz: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Time metrics for every candidate in ``cfg`` (input name -> array).

    ``clock_mhz`` overrides the study's clock (the energy model uses it for power caps
    and thermal throttling).
    """
    n_rows = len(cfg["accelerator"])
    reasons = np.full(n_rows, "", dtype=object)
    shape = workload.resolve_shape(cfg["model"], cfg)
    hw = hardware.lookup(cfg["accelerator"], cfg["precision"])
    n = cfg["num_accelerators"].astype(np.int64)
    tp = cfg["tensor_parallel"].astype(np.int64)
    pp = cfg["pipeline_parallel"].astype(np.int64)
    gb = cfg["global_batch_size"].astype(np.int64)
    mb = cfg["micro_batch_size"].astype(np.int64)
    lay, checks = parallelism.layout(n, tp, pp, gb, mb, shape["layers"].astype(np.int64),
                                     shape["heads"].astype(np.int64))
    for mask, reason in checks:
        _flag(reasons, mask, reason)
    dp, m = lay["data_parallel"], lay["micro_batches"]

    clock = cfg["clock_mhz"] if clock_mhz is None else np.asarray(clock_mhz, dtype=float)
    clock = np.where(np.isfinite(clock), clock, hw["clock_max_mhz"])
    _flag(reasons, (clock > hw["clock_max_mhz"]) | (clock < hw["clock_min_mhz"]),
          "clock outside the accelerator's range")
    clock = np.clip(clock, hw["clock_min_mhz"], hw["clock_max_mhz"])

    params = workload.parameter_count(shape)
    tokens_iter = gb * shape["seq_len"]
    model_flops = workload.model_flops_per_iteration(shape, tokens_iter)
    recompute_factor = np.where(cfg["recompute"] == "full", 4.0 / 3.0, 1.0)

    mem = memory.memory_breakdown(params, tp, pp, dp, cfg["zero_stage"], mb, shape["seq_len"],
                                  shape["hidden"], shape["layers"], cfg["recompute"])
    _flag(reasons, mem["total"] > hw["hbm_bytes"], "does not fit in accelerator memory")

    scaleup_bw = np.where(np.isfinite(cfg["scaleup_bw_gbs"]), cfg["scaleup_bw_gbs"] * 1e9,
                          hw["scaleup_bw_bps"])
    timing_args = dict(
        model_flops=model_flops, recompute_factor=recompute_factor, tokens_per_iteration=tokens_iter,
        n=n, tp=tp, pp=pp, dp=dp, micro_batches=m, micro_batch=mb, seq_len=shape["seq_len"],
        hidden=shape["hidden"], layers=shape["layers"], params=params, peak_flops=hw["peak_flops"],
        hbm_bw_bps=hw["hbm_bw_bps"], scaleup_size=cfg["scaleup_size"], scaleup_bw_bps=scaleup_bw,
        scaleout_bw_bps=cfg["scaleout_bw_gbs"] * 1e9,
        scaleup_latency_s=np.full(n_rows, 2e-6), scaleout_latency_s=np.full(n_rows, 5e-6),
    )
    t = timing.step_time(clock_ratio=clock / hw["clock_max_mhz"], **timing_args)
    steps = training.steps_to_target(cfg["target_tokens"], tokens_iter, cfg["b_noise_tokens"])
    time_to_train_s = steps * t["step_s"]
    return {
        "time_to_train_s": time_to_train_s,
        "time_to_train_days": time_to_train_s / 86400.0,
        "step_time_s": t["step_s"],
        "compute_time_s": t["compute_s"],
        "memory_time_s": t["memory_s"],
        "tp_comm_time_s": t["tp_comm_s"],
        "pp_comm_time_s": t["pp_comm_s"],
        "dp_comm_time_s": t["dp_comm_s"],
        "bubble_time_s": t["bubble_s"],
        "optimizer_time_s": t["optimizer_s"],
        "steps_to_train": steps,
        "tokens_to_train": steps * tokens_iter,
        "tokens_per_s": tokens_iter / t["step_s"],
        "mfu": model_flops / (t["step_s"] * n * hw["peak_flops"]),
        "memory_per_accelerator_gb": mem["total"] / 1e9,
        "parameters": params,
        "data_parallel": dp.astype(np.int64),
        "reason": reasons,
        "_hw": hw, "_clock_mhz": clock, "_breakdown": t, "_steps": steps, "_n": n,
    }

