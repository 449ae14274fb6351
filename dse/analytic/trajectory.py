"""The loss trajectory of a candidate's run: loss, batch, time and energy against the tokens
consumed (docs/model.md, section 8b).

The progress toward the target is counted in the target's small-batch-limit tokens ``u``
(``min_tokens_to_train`` at the end), as the training length is computed: a constant batch
(section 8's closed form, one noise scale) progresses in proportion to the tokens it
consumes; a ramped batch follows the integration of the critical-batch law that gave its
tokens (:func:`.time.training.progress_path`), read between its points linearly. The loss
after ``u`` is the Chinchilla fit at ``u · D_ref / E_min`` tokens (at most the untrained
loss), so the last point is the target's loss. Time and energy accrue at each phase's rate
per token (its time and energy over its tokens: checkpoints and interruptions spread
evenly), so the last point is the run's ``tokens_to_train``, ``time_to_train_s`` and
``energy_to_train_j``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic import fleet, model, schedule
from dse.analytic.columns import choice_codes
from dse.analytic.rows import take_inputs
from dse.analytic.time import training
from dse.analytic.time.adapters import ADAPTERS

#: the trajectory's columns: unit and description (every name carries its unit)
COLUMNS = {
    "candidate": ("1", "the candidate's row, from 0, in the order given"),
    "tokens": ("tokens", "tokens consumed"),
    "min_tokens": ("tokens", "progress: the tokens the same loss takes at the small-batch limit"),
    "loss_nats": (
        "nats per token",
        "loss reached (Chinchilla fit, docs/model.md section 8; empty for a LoRA fine-tuning "
        "run, which starts from a trained model: the fit is a pre-training loss)",
    ),
    "batch_sequences": ("sequences", "global batch at this point"),
    "batch_tokens": ("tokens", "global batch at this point"),
    "time_s": ("s", "time since the start"),
    "energy_j": ("J", "facility energy since the start"),
}


@dataclass(frozen=True, slots=True)
class Knots:
    """One run's trajectory at the points the model knows it (increasing ``tokens``), read
    linearly in between; ``share``: progress as a share of the target's (0 to 1). The run's
    phases: the tokens where each ends (``phase_end_tokens``) and its batch (sequences)."""

    tokens: np.ndarray
    share: np.ndarray
    time_s: np.ndarray
    energy_j: np.ndarray
    phase_end_tokens: np.ndarray
    phase_batch: np.ndarray


def trajectory(cfg, points: int) -> dict[str, np.ndarray]:
    """The columns of :data:`COLUMNS` at ``points`` evenly spaced token counts from 0 to each
    candidate's ``tokens_to_train`` (``cfg``: every declared input, as the model takes it),
    candidate by candidate; NaN where the candidate's run has no length."""
    totals = model.evaluate(cfg)
    n = len(totals["tokens_to_train"])
    ramp = schedule.ramp_rows(cfg) & ~fleet.mixed_rows(cfg)
    params = np.asarray(totals["active_parameters"], dtype=float)
    d_ref, _ = training.resolve_target(
        params, _f(cfg, "target_tokens"), _f(cfg, "target_loss"), _f(cfg, "b_noise_tokens")
    )
    e_min = np.asarray(totals["min_tokens_to_train"], dtype=float)
    seq = totals["tokens_to_train"] / (totals["steps_to_train"] * _f(cfg, "global_batch_size"))
    batch = _f(cfg, "global_batch_size")
    knots: list[Knots] = [_constant(totals, batch, i) for i in range(n)]
    rows = np.flatnonzero(ramp)
    if len(rows):
        phases = model.ramp_phases(take_inputs(cfg, rows))
        last = phases.results[-1]
        seq[rows] = last["tokens_to_train"] / (last["steps_to_train"] * phases.batches[:, -1])
        for j, i in enumerate(rows):
            knots[i] = _ramped(phases, j, totals, i)
    # a LoRA run fine-tunes a trained model: no pre-training loss to trace
    fine_tuned = choice_codes(cfg["adapter"], ADAPTERS) == ADAPTERS.index("lora")
    columns: dict[str, list[np.ndarray]] = {name: [] for name in COLUMNS}
    for i, k in enumerate(knots):
        at = _sample(k, points)
        if fine_tuned[i]:
            at["loss_nats"] = np.full(points, np.nan)
        else:
            loss = training.chinchilla_loss(params[i], np.maximum(at["share"] * d_ref[i], 1.0))
            at["loss_nats"] = np.minimum(loss, training.UNTRAINED_LOSS)
        at["min_tokens"] = at.pop("share") * e_min[i]
        at["batch_tokens"] = at["batch_sequences"] * seq[i]
        at["candidate"] = np.full(points, i)
        for name in COLUMNS:
            columns[name].append(at[name])
    return {name: np.concatenate(parts) for name, parts in columns.items()}


def _f(cfg, name):
    return np.asarray(cfg[name], dtype=float)


def _constant(totals, batch: np.ndarray, i: int) -> Knots:
    """A run at one batch: progress in proportion to the tokens."""
    end = float(totals["tokens_to_train"][i])
    return Knots(
        tokens=np.array([0.0, end]),
        share=np.array([0.0, 1.0]),
        time_s=np.array([0.0, float(totals["time_to_train_s"][i])]),
        energy_j=np.array([0.0, float(totals["energy_to_train_j"][i])]),
        phase_end_tokens=np.array([end]),
        phase_batch=np.array([float(batch[i])]),
    )


def _ramped(phases: schedule.Phases, j: int, totals, i: int) -> Knots:
    """Row ``j`` of a schedule's phases (row ``i`` of the run's ``totals``): through each
    phase, the integration's points, with the tokens, time and energy the phase's evaluation
    took (an empty phase adds nothing, as in the run's totals)."""
    path, results = phases.path, phases.results
    e_min = float(phases.progress.e_min[j])
    tokens, share, time_s, energy_j = [0.0], [0.0], [0.0], [0.0]
    ends, batches = [], []
    last_k = len(results) - 1
    for k, res in enumerate(results):
        consumed = float(path.tokens[j, k])
        if k < last_k:
            d, u = path.ramp_d[j, k, 1:], path.ramp_u[j, k, 1:]
        else:
            d, u = path.final_d[j, 1:], path.final_u[j, 1:]
        if consumed <= 0:  # an empty phase: no tokens, time or energy (the run's totals)
            continue
        frac = d / consumed
        t0, s0, e0 = tokens[-1], time_s[-1], energy_j[-1]
        tokens.extend(t0 + frac * float(res["tokens_to_train"][j]))
        time_s.extend(s0 + frac * float(res["time_to_train_s"][j]))
        energy_j.extend(e0 + frac * float(res["energy_to_train_j"][j]))
        share.extend(u / e_min)
        ends.append(tokens[-1])
        batches.append(float(phases.batches[j, k]))
    if not ends or not np.isfinite(e_min):  # no run (the target unreachable)
        nan = np.full(1, np.nan)
        return Knots(nan, nan, nan, nan, nan, nan)
    # the run's end: its totals, and the target reached (the integration's last point, to
    # rounding)
    tokens[-1] = float(totals["tokens_to_train"][i])
    time_s[-1] = float(totals["time_to_train_s"][i])
    energy_j[-1] = float(totals["energy_to_train_j"][i])
    share[-1] = 1.0
    ends[-1] = tokens[-1]
    return Knots(
        tokens=np.array(tokens),
        share=np.maximum.accumulate(np.array(share)),
        time_s=np.array(time_s),
        energy_j=np.array(energy_j),
        phase_end_tokens=np.array(ends),
        phase_batch=np.array(batches),
    )


def _sample(k: Knots, points: int) -> dict[str, np.ndarray]:
    """The run at ``points`` token counts from 0 to its end (NaN where it has no end)."""
    end = k.tokens[-1]
    if not (np.isfinite(end) and np.all(np.isfinite(k.tokens))):
        nan = np.full(points, np.nan)
        return {n: nan.copy() for n in ("tokens", "share", "time_s", "energy_j", "batch_sequences")}
    at = np.linspace(0.0, end, points)
    at[-1] = end
    phase = np.minimum(np.searchsorted(k.phase_end_tokens, at), len(k.phase_batch) - 1)
    return {
        "tokens": at,
        "share": np.interp(at, k.tokens, k.share),
        "time_s": np.interp(at, k.tokens, k.time_s),
        "energy_j": np.interp(at, k.tokens, k.energy_j),
        "batch_sequences": k.phase_batch[phase],
    }
