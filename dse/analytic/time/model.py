"""Time and memory model: workload, parallel layout, memory fit, step time, training length.

``evaluate(cfg, clock_mhz=None)`` returns a :class:`~dse.analytic.time.result.TimeResult`:
the time metrics, the infeasibility reasons and what the energy model needs (hardware,
clock, the step-time breakdown, traffic). ``cfg`` maps every declared input to an array,
missing values already filled with the declared defaults
(:func:`dse.analytic.declarations.complete`); NaN is left only where an input has no
default and NaN means "take it from the catalog". Every equation and its source is in
docs/model.md.
"""

from __future__ import annotations

import numpy as np

from dse.analytic.columns import choice_codes
from dse.analytic.time import (
    experts,
    frameworks,
    hardware,
    memory,
    parallelism,
    step,
    training,
    workload,
)
from dse.analytic.time.collectives import (
    CP_ALGORITHMS,
    MOE_DISPATCHERS,
    SCALEOUT_FABRICS,
    SCALEUP_TOPOLOGIES,
    Network,
)
from dse.analytic.time.reasons import REASON_TEXT, Reasons
from dse.analytic.time.result import TimeResult

#: internal inputs with which :mod:`dse.analytic.fleet` times one part of a mixed pipeline:
#: the layers on its first, most loaded middle and last stage, its stage count, the
#: pipeline rank of its first stage, and whether it holds the input embedding and the
#: output layer (:class:`~dse.analytic.time.parallelism.Stages`)
PART_STAGES = ("_stage_first", "_stage_middle", "_stage_last", "_stage_count", "_stage_rank0", "_stage_embedding",
               "_stage_output")


def evaluate(cfg: dict[str, np.ndarray], clock_mhz: np.ndarray | None = None) -> TimeResult:
    """Time metrics for every candidate in ``cfg`` (input name -> array).

    ``clock_mhz`` overrides the study's clock (the energy model uses it for power caps
    and thermal throttling). Infeasible candidates get a reason and may have NaN metrics.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _evaluate(cfg, clock_mhz)


def _f(cfg, name: str) -> np.ndarray:
    """Input ``name`` as a float array (integer and boolean columns converted)."""
    return np.asarray(cfg[name], dtype=float)


def _evaluate(cfg, clock_mhz) -> TimeResult:
    n_rows = len(cfg["accelerator"])
    reasons = Reasons()
    shape = workload.resolve_shape(cfg["model"], cfg)
    hw = hardware.lookup(cfg["accelerator"], cfg["precision"])
    stack = frameworks.lookup(cfg["framework"])
    reasons.flag(~np.isfinite(hw.hbm_capacity_bytes), "unknown accelerator")
    reasons.flag(~np.isfinite(shape.layers + shape.hidden + shape.heads + shape.seq_len + shape.vocab),
                 "unknown model preset and incomplete shape")
    reasons.flag(hw.precision_ok == 0, "precision not supported by the accelerator")
    p = _parallel_inputs(cfg, stack)
    reasons.flag(~stack.offers(p["zero"]), "the training stack does not offer this sharding (ZeRO) stage")
    reasons.flag((p["vi"] > 1) & (stack.interleaved_schedule == 0), "the training stack has no interleaved pipeline schedule")
    lay, stages, checks = parallelism.layout(p["n"], p["tp"], p["cp"], p["pp"], p["gb"], p["mb"], shape.layers,
                                             shape.heads, shape.kv_heads, p["vi"], p["sp"], shape.seq_len)
    ex, expert_checks = experts.layout(shape, _f(cfg, "expert_parallel"), _f(cfg, "expert_tensor_parallel"),
                                       _f(cfg, "capacity_factor"), _f(cfg, "moe_a2a_overlap"),
                                       choice_codes(cfg["moe_dispatcher"], MOE_DISPATCHERS) == 1, p["tp"], p["cp"],
                                       lay["data_parallel"])
    for mask, reason in (*checks, *expert_checks):
        reasons.flag(mask, reason)
    if ex.on:  # Megatron's argument check: MoE with tensor parallelism runs sequence-parallel
        reasons.flag((ex.frac > 0) & (p["tp"] > 1) & (p["sp"] == 0) & (stack.moe_tp_needs_sp == 1),
                     "the training stack needs sequence parallelism for a mixture-of-experts model with tensor "
                     "parallelism")
    if PART_STAGES[0] in cfg:  # a part of a mixed fleet's pipeline (dse.analytic.fleet)
        stages = parallelism.Stages(*(_f(cfg, k) for k in PART_STAGES[:3]), units=stages.units, part=True,
                                    **{k[7:]: _f(cfg, k) for k in PART_STAGES[3:]})
    clock = _clock(cfg, hw, clock_mhz, reasons)
    layer_params = workload.layer_parameters(shape)
    embed_params = workload.embedding_parameters(shape)
    tokens_iter = p["gb"] * shape.seq_len
    moe_memory = None
    if ex.on:
        T = p["mb"] * shape.seq_len / p["cp"]
        moe_memory = (ex.params, ex.ep * ex.etp, np.where(ex.frac > 0, ex.edp, 1.0),
                      ex.frac * experts.activation_bytes(shape, ex, p["tp"], T))
    mem = memory.memory_breakdown(
        layer_params=layer_params, embed_params=embed_params, stages=stages, tp=p["tp"], cp=p["cp"], pp=p["pp"],
        dp=lay["data_parallel"], interleave=lay["interleave"], zero_stage=p["zero"], micro_batch=p["mb"],
        micro_batches=lay["micro_batches"], seq_len=shape.seq_len, hidden=shape.hidden,
        heads=shape.heads, vocab=shape.vocab, sp=p["sp"], recompute=p["recompute"],
        reserved=hw.reserved_bytes, flash=p["flash"], experts=moe_memory, tied=shape.tied_embeddings,
        split=memory.split_bytes_per_hidden(shape))
    reasons.flag(mem.total_bytes > hw.hbm_capacity_bytes, "does not fit in accelerator memory")
    net = _network(cfg, hw)
    t = step.step_time(shape=shape, tp=p["tp"], cp=p["cp"], pp=p["pp"], dp=lay["data_parallel"], v=lay["interleave"],
                       m=lay["micro_batches"], b=p["mb"], sp=p["sp"], recompute=p["recompute"], zero=p["zero"],
                       hw=hw, stack=stack, clock_ratio=clock / hw.clock_max_mhz, net=net,
                       layer_params=layer_params, embed_params=embed_params, flash=p["flash"], stages=stages,
                       ex=ex, cp_overlap=p["cp_overlap"])
    params = workload.parameter_count(shape, layer_params)
    active = workload.active_parameter_count(shape, layer_params, params)
    # the training-length law takes the parameters a token uses (Chinchilla at N = N_active)
    d_ref, b_noise = training.resolve_target(active, _f(cfg, "target_tokens"), _f(cfg, "target_loss"),
                                             _f(cfg, "b_noise_tokens"))
    reasons.flag(~np.isfinite(d_ref), "target loss unreachable at this model size (Chinchilla fit)")
    ref_batch_tokens = np.nan_to_num(_f(cfg, "target_batch_size") * shape.seq_len, nan=0.0)
    steps = training.steps_to_target(d_ref, ref_batch_tokens, tokens_iter, b_noise)
    codes = reasons.codes(n_rows)
    return _result(t, mem, hw, steps, tokens_iter, workload.model_flops_per_iteration(shape, tokens_iter),
                   p["n"], (params, active), lay, clock, codes, net.size)


def _parallel_inputs(cfg, stack) -> dict[str, np.ndarray]:
    """The layout inputs as float arrays: accelerators ``n``, tensor/context/pipeline
    degrees, global and micro batch, interleave ``vi``, sequence parallelism ``sp`` (only
    with tensor parallelism), ZeRO stage (the stack's default where not given), recompute
    code (index into ``memory.RECOMPUTE``), FlashAttention and whether the context-parallel
    exchange overlaps the attention (1 for ring attention, 0 for all-gather attention)."""
    tp = _f(cfg, "tensor_parallel")
    zero = _f(cfg, "zero_stage")
    return {"n": _f(cfg, "num_accelerators"), "tp": tp, "cp": _f(cfg, "context_parallel"),
            "pp": _f(cfg, "pipeline_parallel"), "gb": _f(cfg, "global_batch_size"), "mb": _f(cfg, "micro_batch_size"),
            "vi": _f(cfg, "interleave"), "sp": np.where(tp > 1, _f(cfg, "sequence_parallel"), 0.0),
            "zero": np.where(np.isfinite(zero), zero, stack.default_zero_stage),
            "recompute": choice_codes(cfg["recompute"], memory.RECOMPUTE), "flash": _f(cfg, "flash_attention"),
            "cp_overlap": (choice_codes(cfg["context_parallel_algorithm"], CP_ALGORITHMS) != 1).astype(float)}


def _clock(cfg, hw, clock_mhz, reasons: Reasons) -> np.ndarray:
    """The SM clock (MHz): ``clock_mhz`` if given (the energy model's re-timing), else the
    input clock, else ``clock_fraction`` of the maximum, else the maximum; flagged when
    outside the accelerator's range, then clipped to it."""
    clock = _f(cfg, "clock_mhz") if clock_mhz is None else np.asarray(clock_mhz, dtype=float)
    fraction = _f(cfg, "clock_fraction")
    clock = np.where(np.isfinite(clock), clock,
                     np.where(np.isfinite(fraction), fraction * hw.clock_max_mhz, hw.clock_max_mhz))
    reasons.flag((clock > hw.clock_max_mhz * (1 + 1e-9)) | (clock < hw.clock_min_mhz * (1 - 1e-9)),
                 "clock outside the accelerator's range")
    return np.clip(clock, hw.clock_min_mhz, hw.clock_max_mhz)


def _network(cfg, hw) -> Network:
    """The candidate's network: the inputs where given (finite), else the catalog's
    scale-up domain size, bandwidth and topology and the calibrated latencies."""
    up_bw = _f(cfg, "scaleup_bw_gbs") * 1e9
    up_bw = np.where(np.isfinite(up_bw), up_bw, hw.scaleup_bw_bps)
    up_lat = _f(cfg, "scaleup_latency_us")
    up_lat = np.where(np.isfinite(up_lat), up_lat, hw.collective_latency_us) * 1e-6
    out_lat = _f(cfg, "scaleout_latency_us")
    out_lat = np.where(np.isfinite(out_lat), out_lat, hw.scaleout_latency_us) * 1e-6
    up_topo = choice_codes(cfg["scaleup_topology"], SCALEUP_TOPOLOGIES)
    up_topo = np.where(up_topo < 0, hw.scaleup_topology, up_topo)
    size = _f(cfg, "scaleup_size")
    size = np.where(np.isfinite(size), size, hw.scaleup_domain)
    return Network(size=size, up_bw=up_bw, up_lat=up_lat, up_topo=up_topo,
                   out_bw=_f(cfg, "scaleout_bw_gbs") * 1e9, out_lat=out_lat,
                   out_fabric=choice_codes(cfg["scaleout_fabric"], SCALEOUT_FABRICS), eff=hw.collective_eff,
                   call_lat=hw.collective_call_us * 1e-6)


def _result(t, mem, hw, steps, tokens_iter, model_flops, n, params, lay, clock, codes, scaleup_size) -> TimeResult:
    """The :class:`TimeResult`: the public metrics from the breakdowns, and the hand-over."""
    time_to_train_s = steps * t.step_s
    return TimeResult(
        time_to_train_s=time_to_train_s, time_to_train_days=time_to_train_s / 86400.0,
        step_time_s=t.step_s, compute_time_s=t.compute_s, memory_time_s=t.memory_s,
        tp_comm_time_s=np.maximum(t.tp_comm_s - (t.cp_comm_s + t.ep_comm_s), 0.0), cp_comm_time_s=t.cp_comm_s,
        ep_comm_time_s=t.ep_comm_s, pp_comm_time_s=t.pp_comm_s, dp_comm_time_s=t.dp_comm_s,
        bubble_time_s=t.bubble_s, optimizer_time_s=t.optimizer_s, steps_to_train=steps,
        tokens_to_train=steps * tokens_iter, tokens_per_s=tokens_iter / t.step_s,
        mfu=model_flops / (t.step_s * n * hw.peak_flops),
        # GiB, as the capacity (hardware.GIB) and as nvidia-smi and PyTorch count
        memory_per_accelerator_gb=mem.total_bytes / hardware.GIB, weights_memory_gb=mem.weights_bytes / hardware.GIB,
        gradients_memory_gb=mem.gradients_bytes / hardware.GIB, optimizer_memory_gb=mem.optimizer_bytes / hardware.GIB,
        activations_memory_gb=mem.activations_bytes / hardware.GIB, parameters=params[0], active_parameters=params[1],
        data_parallel=lay["data_parallel"], reason=REASON_TEXT[codes], reason_code=codes, hw=hw,
        clock_mhz=clock, breakdown=t, memory=mem, num_accelerators=n, model_flops=model_flops,
        micro_batches=lay["micro_batches"], scaleup_size=scaleup_size)
