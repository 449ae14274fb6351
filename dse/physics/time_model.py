"""Time and memory model: workload, parallel layout, memory fit, step time, training length.

``evaluate(cfg, clock_mhz=None)`` returns the time metrics, a ``reason`` array (empty
where feasible) and, under keys starting with ``_``, the intermediate arrays the energy
model needs (hardware, clock, the step-time breakdown, traffic). Every equation and its
source is in docs/model.md.
"""

from __future__ import annotations

import numpy as np

from dse.evaluators.base import Input, Metric
from dse.physics import hardware, memory, parallelism, timing, training, workload
from dse.physics.collectives import SCALEOUT_FABRICS, SCALEUP_TOPOLOGIES, Network

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
    Input("target_loss", "float", "nats/token", "target loss; overrides target_tokens through the Chinchilla fit L(N, D)", None, minimum=0.01, group="workload"),
    Input("b_noise_tokens", "float", "tokens", "gradient noise scale B_noise (McCandlish et al. 2018); default: Kaplan et al. 2020 B_crit(L)", None, minimum=1, group="workload"),
    Input("precision", "str", "", "matrix-multiply precision", "bf16", ("bf16", "fp16", "fp8", "tf32"), group="workload"),
    Input("accelerator", "str", "", "accelerator type (hardware catalog)", "H100-SXM", _ACCELERATORS, group="hardware"),
    Input("num_accelerators", "int", "", "accelerators in the job", 8, minimum=1, group="hardware"),
    Input("clock_mhz", "float", "MHz", "SM clock (default: the accelerator's maximum)", None, minimum=1, group="hardware"),
    Input("clock_fraction", "float", "1", "SM clock as a fraction of the accelerator's maximum (used where clock_mhz is not given; suits studies over several accelerators)", None, minimum=0.05, maximum=1.0, group="hardware"),
    Input("scaleup_size", "int", "", "accelerators per scale-up domain (e.g. NVLink)", 8, minimum=1, group="network"),
    Input("scaleup_bw_gbs", "float", "GB/s", "scale-up bandwidth per accelerator per direction (default: catalog)", None, minimum=0.001, group="network"),
    Input("scaleup_topology", "str", "", "scale-up topology (default: catalog)", None, SCALEUP_TOPOLOGIES, group="network"),
    Input("scaleup_latency_us", "float", "us", "scale-up per-step collective latency (default: calibration)", None, minimum=0, group="network"),
    Input("scaleout_bw_gbs", "float", "GB/s", "scale-out bandwidth per accelerator per direction", 50.0, minimum=0.001, group="network"),
    Input("scaleout_fabric", "str", "", "scale-out fabric", "rail_optimized", SCALEOUT_FABRICS, group="network"),
    Input("scaleout_latency_us", "float", "us", "scale-out per-step collective latency (default: calibration)", None, minimum=0, group="network"),
    Input("global_batch_size", "int", "sequences", "global batch size", 512, minimum=1, group="parallelism"),
    Input("micro_batch_size", "int", "sequences", "micro-batch size", 1, minimum=1, group="parallelism"),
    Input("tensor_parallel", "int", "", "tensor-parallel degree", 1, minimum=1, group="parallelism"),
    Input("sequence_parallel", "bool", "", "sequence parallelism with tensor parallelism (Korthikanti et al. 2022)", False, group="parallelism"),
    Input("pipeline_parallel", "int", "", "pipeline-parallel degree", 1, minimum=1, group="parallelism"),
    Input("flash_attention", "bool", "", "fused attention kernel (FlashAttention, Dao et al. 2022)", True, group="parallelism"),
    Input("interleave", "int", "", "model chunks per pipeline stage (1 = 1F1B, >1 = interleaved 1F1B)", 1, minimum=1, group="parallelism"),
    Input("zero_stage", "int", "", "sharded optimizer (ZeRO) stage", 1, minimum=0, maximum=3, group="parallelism"),
    Input("recompute", "str", "", "activation recomputation", "selective", memory.RECOMPUTE, group="parallelism"),
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
    Metric("weights_memory_gb", "GB", "weights per accelerator"),
    Metric("gradients_memory_gb", "GB", "gradients per accelerator"),
    Metric("optimizer_memory_gb", "GB", "optimizer state per accelerator"),
    Metric("activations_memory_gb", "GB", "activations per accelerator"),
    Metric("parameters", "1", "model parameters"),
    Metric("data_parallel", "1", "data-parallel degree"),
]


#: infeasibility reasons, by the integer code the model flags internally (0: feasible)
REASONS = (
    "",
    "unknown accelerator",
    "unknown model preset and incomplete shape",
    "precision not supported by the accelerator",
    "tensor x pipeline parallel does not divide the accelerator count",
    "tensor parallel degree does not divide the attention heads",
    "tensor parallel degree and key-value heads do not divide each other",
    "pipeline parallel x interleave does not divide the layers",
    "data parallel x micro batch does not divide the global batch",
    "interleaved schedule needs pipeline parallelism",
    "interleaved schedule needs micro-batches to be a multiple of the pipeline degree",
    "sequence parallelism needs the tensor parallel degree to divide the sequence length",
    "clock outside the accelerator's range",
    "does not fit in accelerator memory",
    "target loss unreachable at this model size (Chinchilla fit)",
)
_REASON_CODE = {r: i for i, r in enumerate(REASONS)}
_REASON_TEXT = np.array(REASONS, dtype=object)


class _Reasons:
    """Infeasibility flags in the order they are raised; the first raised wins per row."""

    def __init__(self) -> None:
        self.flags: list[tuple[np.ndarray, int]] = []

    def flag(self, mask: np.ndarray, reason: str) -> None:
        self.flags.append((mask, _REASON_CODE[reason]))

    def codes(self, n_rows: int) -> np.ndarray:
        """Reason code per row (0: feasible): later flags first, so earlier ones overwrite."""
        codes = np.zeros(n_rows, dtype=np.int8)
        for mask, code in reversed(self.flags):
            codes = np.where(mask, np.int8(code), codes)
        return codes


def _codes(values, choices: tuple[str, ...], default: np.ndarray | int) -> np.ndarray:
    """Index of each string in ``choices``; ``default`` where missing/unknown."""
    codes, uniq = workload.factorise(values)
    table = np.array([choices.index(u) if isinstance(u, str) and u in choices else -1 for u in uniq] + [-1])
    out = table[codes].astype(float)
    return np.where(out < 0, default, out)


def _num(cfg, name, n_rows, default):
    v = cfg.get(name)
    if v is None:
        return np.full(n_rows, float(default))
    v = np.asarray(v, dtype=float)
    finite = np.isfinite(v)
    return v if finite.all() else np.where(finite, v, default)


def evaluate(cfg: dict[str, np.ndarray], clock_mhz: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Time metrics for every candidate in ``cfg`` (input name -> array).

    ``clock_mhz`` overrides the study's clock (the energy model uses it for power caps
    and thermal throttling). Infeasible candidates get a reason and may have NaN metrics.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _evaluate(cfg, clock_mhz)


def _evaluate(cfg, clock_mhz):
    n_rows = len(cfg["accelerator"])
    reasons = _Reasons()
    shape = workload.resolve_shape(cfg["model"], cfg)
    hw = hardware.lookup(cfg["accelerator"], cfg["precision"])
    reasons.flag(~np.isfinite(hw["hbm_bytes"]), "unknown accelerator")
    reasons.flag(~np.isfinite(shape["layers"] + shape["hidden"] + shape["heads"] + shape["seq_len"] + shape["vocab"]),
          "unknown model preset and incomplete shape")
    reasons.flag(hw["precision_ok"] == 0, "precision not supported by the accelerator")
    n = _num(cfg, "num_accelerators", n_rows, 1)
    tp = _num(cfg, "tensor_parallel", n_rows, 1)
    pp = _num(cfg, "pipeline_parallel", n_rows, 1)
    gb = _num(cfg, "global_batch_size", n_rows, 1)
    mb = _num(cfg, "micro_batch_size", n_rows, 1)
    vi = _num(cfg, "interleave", n_rows, 1)
    sp = _num(cfg, "sequence_parallel", n_rows, 0)
    zero = _num(cfg, "zero_stage", n_rows, 0)
    recompute = _codes(cfg["recompute"], memory.RECOMPUTE, 2) if "recompute" in cfg else np.full(n_rows, 2.0)
    sp = np.where(tp > 1, sp, 0.0)
    flash = _num(cfg, "flash_attention", n_rows, 1)
    lay, checks = parallelism.layout(n, tp, pp, gb, mb, shape["layers"], shape["heads"], shape["kv_heads"],
                                     vi, sp, shape["seq_len"])
    for mask, reason in checks:
        reasons.flag(mask, reason)
    dp, m, v = lay["data_parallel"], lay["micro_batches"], lay["interleave"]

    clock = _num(cfg, "clock_mhz", n_rows, np.nan) if clock_mhz is None else np.asarray(clock_mhz, dtype=float)
    fraction = _num(cfg, "clock_fraction", n_rows, np.nan)
    clock = np.where(np.isfinite(clock), clock,
                     np.where(np.isfinite(fraction), fraction * hw["clock_max_mhz"], hw["clock_max_mhz"]))
    reasons.flag((clock > hw["clock_max_mhz"] * (1 + 1e-9)) | (clock < hw["clock_min_mhz"] * (1 - 1e-9)),
          "clock outside the accelerator's range")
    clock = np.clip(clock, hw["clock_min_mhz"], hw["clock_max_mhz"])

    layer_params = workload.layer_parameters(shape)
    embed_params = workload.embedding_parameters(shape)
    params = workload.parameter_count(shape)
    tokens_iter = gb * shape["seq_len"]
    model_flops = workload.model_flops_per_iteration(shape, tokens_iter)

    mem = memory.memory_breakdown(
        layer_params=layer_params, embed_params=embed_params, layers=shape["layers"], tp=tp, pp=pp,
        dp=dp, interleave=v, zero_stage=zero, micro_batch=mb, micro_batches=m,
        seq_len=shape["seq_len"], hidden=shape["hidden"], heads=shape["heads"], vocab=shape["vocab"],
        sp=sp, recompute=recompute, reserved=hw["reserved_bytes"], flash=flash)
    reasons.flag(mem["total"] > hw["hbm_bytes"], "does not fit in accelerator memory")

    up_bw = _num(cfg, "scaleup_bw_gbs", n_rows, np.nan) * 1e9
    up_bw = np.where(np.isfinite(up_bw), up_bw, hw["scaleup_bw_bps"])
    up_lat = _num(cfg, "scaleup_latency_us", n_rows, np.nan)
    up_lat = np.where(np.isfinite(up_lat), up_lat, hw["collective_latency_us"]) * 1e-6
    out_lat = _num(cfg, "scaleout_latency_us", n_rows, np.nan)
    out_lat = np.where(np.isfinite(out_lat), out_lat, hw["scaleout_latency_us"]) * 1e-6
    up_topo = (_codes(cfg["scaleup_topology"], SCALEUP_TOPOLOGIES, hw["scaleup_topology"])
               if "scaleup_topology" in cfg else hw["scaleup_topology"])
    fabric = _codes(cfg["scaleout_fabric"], SCALEOUT_FABRICS, 1) if "scaleout_fabric" in cfg else np.full(n_rows, 1.0)
    net = Network(size=_num(cfg, "scaleup_size", n_rows, 8), up_bw=up_bw, up_lat=up_lat, up_topo=up_topo,
                  out_bw=_num(cfg, "scaleout_bw_gbs", n_rows, 50.0) * 1e9, out_lat=out_lat,
                  out_fabric=fabric, eff=hw["collective_eff"])
    t = timing.step_time(shape=shape, tp=tp, pp=pp, dp=dp, v=v, m=m, b=mb, sp=sp, recompute=recompute,
                         zero=zero, hw=hw, clock_ratio=clock / hw["clock_max_mhz"], net=net,
                         layer_params=layer_params, embed_params=embed_params, flash=flash)
    d_min, b_noise = training.resolve_target(params, _num(cfg, "target_tokens", n_rows, 2.6e10),
                                             _num(cfg, "target_loss", n_rows, np.nan),
                                             _num(cfg, "b_noise_tokens", n_rows, np.nan))
    reasons.flag(~np.isfinite(d_min), "target loss unreachable at this model size (Chinchilla fit)")
    steps = training.steps_to_target(d_min, tokens_iter, b_noise)
    time_to_train_s = steps * t["step_s"]
    reason_codes = reasons.codes(n_rows)
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
        "weights_memory_gb": mem["weights"] / 1e9,
        "gradients_memory_gb": mem["gradients"] / 1e9,
        "optimizer_memory_gb": mem["optimizer"] / 1e9,
        "activations_memory_gb": mem["activations"] / 1e9,
        "parameters": params,
        "data_parallel": dp,
        "reason": _REASON_TEXT[reason_codes],
        "_hw": hw, "_clock_mhz": clock, "_breakdown": t, "_steps": steps, "_n": n,
        "_memory": mem, "_model_flops": model_flops, "_micro_batches": m,
        "_reason_code": reason_codes,
    }
