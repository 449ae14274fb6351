"""Batch-size schedules: a run whose global batch ramps up over its first tokens, or follows the
critical batch as the loss falls (docs/model.md, section 8a).

``batch_schedule`` ``constant`` (the default) trains at ``global_batch_size`` throughout
(:mod:`.time.training`'s closed form). ``linear`` and ``steps`` ramp the batch from
``batch_ramp_start_size`` to ``global_batch_size`` over the first ``batch_ramp_tokens``
consumed tokens, in ``batch_ramp_steps`` phases of equal tokens (``steps``: the batch
at the start of each step, as Megatron-LM's ``--rampup-batch-size`` raises it; ``linear``:
the linear ramp taken at each phase's middle). ``critical`` follows
``critical_batch_multiple`` times the critical batch at the loss reached (Kaplan et al. 2020's
law, the model's noise scale), in ``batch_ramp_steps`` geometric levels from
``batch_ramp_start_size`` up to ``global_batch_size``, each phase ending at the progress where
the multiple passes the geometric mean of its level and the next. The layout stays: each
phase's batch is a whole number of micro-batches per data-parallel replica (at least one),
so a phase changes the gradient accumulation only.

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
BATCH_SCHEDULES = ("constant", "linear", "steps", "critical")
#: the code of ``critical`` (the batch follows a multiple of the critical batch)
CRITICAL = BATCH_SCHEDULES.index("critical")

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
    """True for candidates whose batch changes (``batch_schedule`` linear, steps or critical)."""
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
    micro-batches, at least one each. A ``critical`` schedule's phases are the levels of
    :func:`critical_levels` (their tokens, 0 here, follow from the loss:
    :func:`critical_ends`)."""
    final = _f(cfg, "global_batch_size")
    unit = np.maximum(replicas * _f(cfg, "micro_batch_size"), 1.0)
    start = _f(cfg, "batch_ramp_start_size")
    start = np.where(np.isfinite(start), start, unit)
    steps = np.maximum(np.nan_to_num(_f(cfg, "batch_ramp_steps"), nan=1.0), 1.0)
    k_max = int(steps.max()) if len(steps) else 1
    codes = choice_codes(cfg["batch_schedule"], BATCH_SCHEDULES)
    linear = codes == 1
    critical = codes == CRITICAL
    k = np.arange(k_max)[None, :]
    at = np.where(linear[:, None], k + 0.5, k) / steps[:, None]
    batch = start[:, None] + (final - start)[:, None] * np.minimum(at, 1.0)
    batch = np.where(critical[:, None], critical_levels(start, final, at), batch)
    batch = np.maximum(np.round(batch / unit[:, None]), 1.0) * unit[:, None]
    batch = np.where(critical[:, None], np.minimum(batch, final[:, None]), batch)
    inside = k < steps[:, None]
    batch = np.where(inside, batch, final[:, None])
    ramp = np.where(critical, 0.0, _f(cfg, "batch_ramp_tokens"))
    tokens = np.where(inside, (ramp / steps)[:, None], 0.0)
    return np.column_stack([batch, final]), tokens


def critical_levels(smallest: np.ndarray, final: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The batch levels of a ``critical`` schedule at ``at`` (k / batch_ramp_steps, (R, K)):
    geometric from ``smallest`` (at most ``final``) to ``final``, before rounding to whole
    micro-batches per replica."""
    low = np.minimum(smallest, final)
    with np.errstate(divide="ignore", invalid="ignore"):
        return low[:, None] * (final / low)[:, None] ** np.minimum(at, 1.0)


def critical_ends(
    multiple: np.ndarray, progress: training.Progress, batch_tokens: np.ndarray, steps: np.ndarray
) -> np.ndarray:
    """Where each phase ``k < K`` of a ``critical`` schedule ends, in progress (small-batch-
    limit tokens, (R, K)): where ``critical_batch_multiple`` times the critical batch
    (the noise scale at the loss reached, :meth:`~.time.training.Progress.noise_scale`)
    passes the geometric mean of the phase's batch and the next's, so that each phase runs
    the level nearest (in ratio) to the multiple of the critical batch; phases past a
    candidate's ``batch_ramp_steps``, and one whose level the next repeats, are empty. ``multiple``: ``critical_batch_multiple``;
    ``batch_tokens``: (R, K+1)."""
    switch = np.sqrt(batch_tokens[:, :-1] * batch_tokens[:, 1:]) / multiple[:, None]
    ends = training.progress_at_noise_scale(progress, switch)
    # a phase whose level is the next one's (rounding) or past the candidate's levels is empty
    grows = batch_tokens[:, :-1] < batch_tokens[:, 1:]
    ends = np.where((np.arange(ends.shape[1])[None, :] < steps[:, None]) & grows, ends, 0.0)
    return np.minimum(np.maximum.accumulate(ends, axis=1), progress.e_min[:, None])


def evaluate(cfg, run: Callable[[dict], dict]) -> dict[str, np.ndarray]:
    """All metrics, ``feasible`` and ``reason`` for candidates that ramp their batch (every
    row; every declared input present); ``run(cfg)`` evaluates constant-batch candidates."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _evaluate(cfg, run)


def _evaluate(cfg, run):
    ph = run_phases(cfg, run)
    out = _combine(ph.results, ph.progress.e_min, ph.path.tokens > 0)
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
    path = _path(cfg, progress, batches * seq[:, None], ramp_tokens)
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


def _path(cfg, progress, batch_tokens, ramp_tokens) -> training.ProgressPath:
    """The integration of every row's schedule: ramps by their tokens
    (:func:`~.time.training.progress_path`), ``critical`` rows by the progress where each
    phase ends (:func:`~.time.training.progress_path_to`)."""
    critical = choice_codes(cfg["batch_schedule"], BATCH_SCHEDULES) == CRITICAL
    if not critical.any():
        return training.progress_path(progress, batch_tokens, ramp_tokens)
    steps = np.maximum(np.nan_to_num(_f(cfg, "batch_ramp_steps"), nan=1.0), 1.0)
    multiple = _f(cfg, "critical_batch_multiple")
    ramp_rows_, crit_rows = np.flatnonzero(~critical), np.flatnonzero(critical)
    ramp_p, crit_p = _progress_rows(progress, ramp_rows_), _progress_rows(progress, crit_rows)
    ramped = training.progress_path(ramp_p, batch_tokens[ramp_rows_], ramp_tokens[ramp_rows_])
    ends = critical_ends(multiple[crit_rows], crit_p, batch_tokens[crit_rows], steps[crit_rows])
    followed = training.progress_path_to(crit_p, batch_tokens[crit_rows], ends)
    fields = ("tokens", "ramp_d", "ramp_u", "final_d", "final_u")
    merged = {}
    for name in fields:
        a, b = getattr(ramped, name), getattr(followed, name)
        if a.ndim == 3:  # the phases' points: a ramp's fewer repeat their last (no progress)
            width = max(a.shape[2], b.shape[2])
            a, b = (
                np.pad(x, ((0, 0), (0, 0), (0, width - x.shape[2])), mode="edge") for x in (a, b)
            )
        col = np.empty((len(critical), *a.shape[1:]))
        col[ramp_rows_], col[crit_rows] = a, b
        merged[name] = col
    return training.ProgressPath(**merged)


def _progress_rows(p: training.Progress, rows: np.ndarray) -> training.Progress:
    """The candidates ``rows`` of ``p``."""
    return training.Progress(
        e_min=p.e_min[rows],
        d_ref=p.d_ref[rows],
        loss_target=p.loss_target[rows],
        b_noise_target=p.b_noise_target[rows],
        params=p.params[rows],
    )


def _combine(phases: list[dict], e_min: np.ndarray, used: np.ndarray) -> dict[str, np.ndarray]:
    """The run's metrics from its phases' (the rules above), the efficiency ratios
    recomputed for the whole run against the target's ``e_min``. ``used`` (R, K+1): the
    phases that consume tokens; an empty one (evaluated as a run of one token) adds nothing,
    so a candidate's result does not depend on how many phases its neighbours have."""
    last = phases[-1]
    out = dict(last)
    on = [used[:, k] for k in range(len(phases))]
    time_k = np.array(
        [np.where(w, p["time_to_train_s"], 0.0) for p, w in zip(phases, on, strict=True)]
    )
    total_t = time_k.sum(axis=0)
    for name in ADDED:
        out[name] = np.sum(
            [np.where(w, p[name], 0.0) for p, w in zip(phases, on, strict=True)], axis=0
        )
    for name in LARGEST:  # over the phases run (the last one's where none is)
        run_max = np.max(
            [np.where(w, p[name], -np.inf) for p, w in zip(phases, on, strict=True)], axis=0
        )
        out[name] = np.where(np.isfinite(run_max), run_max, last[name])
    for name in TIME_MEANS:
        out[name] = np.sum([p[name] * t for p, t in zip(phases, time_k, strict=True)], axis=0)
        out[name] = out[name] / total_t
    for name in ANY:
        out[name] = np.any(
            [np.asarray(p[name], dtype=bool) & w for p, w in zip(phases, on, strict=True)], axis=0
        )
    energy = out["energy_to_train_j"]
    out["energy_utilisation_factor"] = (
        np.sum(
            [
                np.where(w, p["energy_utilisation_factor"] * p["energy_to_train_j"], 0.0)
                for p, w in zip(phases, on, strict=True)
            ],
            axis=0,
        )
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
