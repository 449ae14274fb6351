"""The phases of a training step as the power model sees them, and the step at another clock.

compute: clock-scaled work; memory: memory-bound work and the optimizer step;
fine_wait: exposed tensor- and pipeline-parallel communication and the GPU's waits for its
host's kernel launches (interleaved with the busy phase at sub-millisecond grain); blocked:
pipeline bubble and exposed data-parallel communication (one contiguous low-power phase per
iteration). See docs/model-energy.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True, slots=True)
class PhaseTimes:
    """Per-iteration phase durations (s)."""

    step: np.ndarray
    compute: np.ndarray
    memory: np.ndarray
    fine_wait: np.ndarray
    blocked: np.ndarray
    busy: np.ndarray


def phase_times(b) -> PhaseTimes:
    """Per-iteration phase durations from the time model's breakdown ``b``
    (a :class:`~dse.analytic.time.step.StepBreakdown`)."""
    step = np.asarray(b.step_s, dtype=float)
    # the host wait is inside memory_s in the time model; the GPU idles through it
    host = 0.0 if b.host_idle_s is None else b.host_idle_s
    t_m = b.memory_s + b.optimizer_s - host
    fine = b.tp_comm_s + b.pp_comm_s + host
    blocked = b.bubble_s + b.dp_comm_s
    busy = np.maximum(step - blocked, 0.0)
    return PhaseTimes(step=step, compute=b.compute_s, memory=t_m, fine_wait=fine, blocked=blocked, busy=busy)


def scaled_breakdown(b, clock_from: np.ndarray, clock_to: np.ndarray):
    """The breakdown ``b`` estimated at another clock without the time model.

    Compute time scales with 1/f, and what it grows by first fills the time the GPU waited
    for its host (``host_idle_s``, part of the memory time); the bubble (pipeline slots of
    compute, memory and tensor-parallel time) scales with the slot; the rest is
    clock-independent. This is the estimate the cap/throttle search
    (:class:`~dse.analytic.energy.clock_search.LimitCheck`) makes; the final times come
    from the time model (``retime``).
    """
    step = np.asarray(b.step_s, dtype=float)
    ratio = clock_from / clock_to
    t_c = b.compute_s
    slot = t_c + b.memory_s + b.tp_comm_s
    new_c = t_c * ratio
    # longer compute first fills the time the GPU waited for its host (inside memory_s)
    idle = np.zeros_like(step) if b.host_idle_s is None else b.host_idle_s
    filled = np.minimum(idle, np.maximum(new_c - t_c, 0.0))
    grown = new_c - t_c - filled
    new_slot = slot + grown
    bubble = b.bubble_s
    new_bubble = bubble * np.where(slot > 0, new_slot / np.where(slot > 0, slot, 1.0), 1.0)
    return replace(b, compute_s=new_c, memory_s=b.memory_s - filled, bubble_s=new_bubble,
                   host_idle_s=idle - filled, step_s=step + grown + (new_bubble - bubble))
