"""Batch-size schedules: a run whose global batch ramps up over its first tokens (docs/model.md,
section 8a).

``batch_schedule`` ``constant`` (the default) trains at ``global_batch_size`` throughout
(:mod:`.time.training`'s closed form). ``linear`` and ``steps`` ramp the batch from
``batch_ramp_start_size`` to ``global_batch_size`` over the first ``batch_ramp_tokens``
consumed tokens, in ``batch_ramp_steps`` phases of equal tokens (``steps``: the batch
at the start of each step, as Megatron-LM's ``--rampup-batch-size`` raises it; ``linear``:
the linear ramp taken at each phase's middle). The layout stays: each phase's batch is a
whole number of micro-batches per data-parallel replica (at least one), so a phase changes
the gradient accumulation only.

Tokens: the progress the target needs (its tokens at the small-batch limit, ``E_min``) is
integrated over the schedule, each phase's tokens counting ``1 / (1 + B / B_noise)``, with
the noise scale growing as the loss falls (:func:`.time.training.phase_tokens`). Time and
energy: each phase is evaluated as a run of its tokens at its batch (the whole model: step
time, power, checkpoints, interruptions), and the phases are added up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dse.analytic.columns import choice_codes
from dse.analytic.time import training

#: the ``batch_schedule`` input's choices
BATCH_SCHEDULES = ("constant", "linear", "steps")

#: metrics added over the phases (extensive: the run's totals)
ADDED = (
    "time_to_train_s",
    "steps_to_train",
    "tokens_to_train",
    "checkpoint_time_s",
    "interruptions",
    "lost_time_s",
    "energy_to_train_j",
    "it_energy_to_train_j",
    "energy_compute_j",
    "energy_memory_j",
    "energy_network_j",
    "energy_idle_j",
    "energy_waiting_j",
    "energy_host_j",
    "energy_power_supply_j",
    "energy_facility_overhead_j",
    "cost_usd",
    "energy_cost_usd",
    "carbon_kg",
)
#: the largest over the phases (peaks and limits)
LARGEST = (
    "memory_per_accelerator_gib",
    "peak_power_per_accelerator_w",
    "node_peak_power_w",
    "facility_peak_power_w",
    "facility_power_swing_w",
    "facility_power_ramp_w_per_s",
    "peak_junction_temp_c",
    "junction_temp_swing_c",
    "max_junction_temp_rate_c_per_s",
)
#: means over the phases weighted by their time
TIME_MEANS = (
    "avg_power_per_accelerator_w",
    "node_avg_power_w",
    "mean_junction_temp_c",
    "goodput",
    "checkpoint_overhead",
)
#: true when true in any phase
ANY = ("power_capped", "throttled")
# every other metric is the last phase's (at global_batch_size): the iteration's (step time
# and its breakdown, MFU, throughput, energy per step), the model's and the layout's


def ramp_rows(cfg) -> np.ndarray:
    """True for candidates whose batch ramps (``batch_schedule`` linear or steps)."""
    col = cfg.get("batch_schedule")
    if col is None:
        return np.zeros(len(cfg["accelerator"]), dtype=bool)
    return choice_codes(col, BATCH_SCHEDULES) > 0


def _f(cfg, name):
    return np.asarray(cfg[name], dtype=float)


def phase_batches(cfg, replicas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate, the batch (sequences) of each phase, shape (R, K+1) (the last is
    ``global_batch_size``), and the tokens each ramp phase consumes, (R, K); ``K`` the most
    phases of any candidate (a candidate with fewer has empty phases at its final batch).
    ``replicas``: data-parallel replicas; a phase's batch is a multiple of their
    micro-batches, at least one each."""
    final = _f(cfg, "global_batch_size")
    unit = np.maximum(replicas * _f(cfg, "micro_batch_size"), 1.0)
    start = _f(cfg, "batch_ramp_start_size")
    start = np.where(np.isfinite(start), start, unit)
    steps = np.maximum(np.nan_to_num(_f(cfg, "batch_ramp_steps"), nan=1.0), 1.0)
    k_max = int(steps.max()) if len(steps) else 1
    linear = choice_codes(cfg["batch_schedule"], BATCH_SCHEDULES) == 1
    k = np.arange(k_max)[None, :]
    at = np.where(linear[:, None], k + 0.5, k) / steps[:, None]
    batch = start[:, None] + (final - start)[:, None] * np.minimum(at, 1.0)
    batch = np.maximum(np.round(batch / unit[:, None]), 1.0) * unit[:, None]
    inside = k < steps[:, None]
    batch = np.where(inside, batch, final[:, None])
    ramp = _f(cfg, "batch_ramp_tokens")
    tokens = np.where(inside, (ramp / steps)[:, None], 0.0)
    return np.column_stack([batch, final]), tokens


def evaluate(cfg, run: Callable[[dict], dict]) -> dict[str, np.ndarray]:
    """All metrics, ``feasible`` and ``reason`` for candidates that ramp their batch (every
    row; every declared input present); ``run(cfg)`` evaluates constant-batch candidates."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _evaluate(cfg, run)


def _evaluate(cfg, run):
    ph = run_phases(cfg, run)
    out = _combine(ph.results, ph.progress.e_min)
    # the target's own reason (a loss unreachable at this size, as the run at the final batch
    # says), which the phases, each given its tokens, do not see: no run, no totals
    unreachable = ~np.isfinite(ph.progress.e_min)
    if unreachable.any():
        out["feasible"] = out["feasible"] & ~unreachable
        fill = unreachable & (out["reason"] == "")
        out["reason"][fill] = np.asarray(ph.final["reason"], dtype=object)[fill]
        for name in (*ADDED, "tokens_per_j", "energy_time_product_js", "facility_avg_power_w"):
            out[name] = np.where(unreachable, np.nan, out[name])
    return out


@dataclass(frozen=True, slots=True)
class Phases:
    """A schedule's phases: each one's metrics (``results``, K+1 tables), the run at the
    final batch to the target (``final``, section 8's closed form), each phase's batch
    (``batches``, sequences, (R, K+1)), the target's :class:`~.time.training.Progress` and
    the integration's :class:`~.time.training.ProgressPath`."""

    results: list[dict]
    final: dict
    batches: np.ndarray
    progress: training.Progress
    path: training.ProgressPath


def run_phases(cfg, run: Callable[[dict], dict]) -> Phases:
    """The phases of candidates that ramp their batch, each evaluated by ``run``."""
    final = run(cfg)
    seq = final["tokens_to_train"] / (final["steps_to_train"] * _f(cfg, "global_batch_size"))
    ref = np.nan_to_num(_f(cfg, "target_batch_size") * seq, nan=0.0)
    progress = training.progress_of(
        np.asarray(final["active_parameters"], dtype=float),
        _f(cfg, "target_tokens"),
        _f(cfg, "target_loss"),
        _f(cfg, "b_noise_tokens"),
        ref,
    )
    batches, ramp_tokens = phase_batches(cfg, np.asarray(final["data_parallel"], dtype=float))
    path = training.progress_path(progress, batches * seq[:, None], ramp_tokens)
    tokens = path.tokens
    phases = []
    nan = np.full(len(seq), np.nan)
    for k in range(batches.shape[1]):
        phase = {
            **cfg,
            "global_batch_size": batches[:, k],
            "target_batch_size": batches[:, k],
            "target_tokens": np.maximum(np.nan_to_num(tokens[:, k], nan=1.0), 1.0),
            "target_loss": nan,
        }
        phases.append(run(phase))
    return Phases(phases, final, batches, progress, path)


def _combine(phases: list[dict], e_min: np.ndarray) -> dict[str, np.ndarray]:
    """The run's metrics from its phases' (the rules above), the efficiency ratios
    recomputed for the whole run against the target's ``e_min``."""
    last = phases[-1]
    out = dict(last)
    time_k = np.array([p["time_to_train_s"] for p in phases])
    total_t = time_k.sum(axis=0)
    for name in ADDED:
        out[name] = np.sum([p[name] for p in phases], axis=0)
    for name in LARGEST:
        out[name] = np.max([p[name] for p in phases], axis=0)
    for name in TIME_MEANS:
        out[name] = np.sum([p[name] * t for p, t in zip(phases, time_k, strict=True)], axis=0)
        out[name] = out[name] / total_t
    for name in ANY:
        out[name] = np.any([p[name] for p in phases], axis=0)
    energy = out["energy_to_train_j"]
    out["energy_utilisation_factor"] = (
        np.sum([p["energy_utilisation_factor"] * p["energy_to_train_j"] for p in phases], axis=0)
        / energy
    )
    out["facility_avg_power_w"] = energy / total_t
    out["min_tokens_to_train"] = e_min
    out["tokens_per_j"] = out["tokens_to_train"] / energy
    out["energy_time_product_js"] = energy * total_t
    bound = last["landauer_bound_j"] * e_min / last["min_tokens_to_train"]
    out["landauer_bound_j"] = bound
    out["landauer_ratio"] = energy / bound
    # the useful share of peak over the run: the model FLOPs of e_min tokens over its time
    useful = last["mfu"] * e_min / (last["tokens_per_s"] * total_t)
    out["energy_efficiency_index"] = useful * bound / energy
    feasible = np.all([p["feasible"] for p in phases], axis=0)
    reason = np.full(len(e_min), "", dtype=object)
    for p in phases:
        fill = (reason == "") & (np.asarray(p["reason"], dtype=object) != "")
        reason[fill] = np.asarray(p["reason"], dtype=object)[fill]
    out["feasible"] = feasible
    out["reason"] = reason
    return out
