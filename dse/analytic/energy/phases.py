"""The phases of a training step as the power model sees them, and their estimate at another clock.

compute: clock-scaled work; memory: memory-bound work and the optimizer step;
fine_wait: exposed tensor- and pipeline-parallel communication and the GPU's waits for its
host's kernel launches (interleaved with the busy phase at sub-millisecond grain); blocked:
pipeline bubble and exposed data-parallel communication (one contiguous low-power phase per
iteration). See docs/model-energy.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.rows import where


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
    # exposed offloading copies: the GPU waits on a link, as for a layer's collectives
    fine = b.layer_comm_s + b.pp_comm_s + b.offload_s + host
    blocked = b.bubble_s + b.dp_comm_s
    busy = np.maximum(step - blocked, 0.0)
    return PhaseTimes(
        step=step, compute=b.compute_s, memory=t_m, fine_wait=fine, blocked=blocked, busy=busy
    )


class ClockScaling:
    """The phases of the breakdown ``b`` (timed at ``clock_from``) estimated at another clock
    without the time model, with the clock-independent terms computed once (the clock search
    evaluates it at many clocks).

    Compute time scales with 1/f, and what it grows by first fills the time the GPU waited
    for its host (``host_idle_s``, part of the memory time); the bubble (pipeline slots of
    compute, memory and tensor-parallel time) scales with the slot; the rest is
    clock-independent. The final times come from the time model (``retime``).
    """

    def __init__(self, b, clock_from: np.ndarray) -> None:
        self.step = np.asarray(b.step_s, dtype=float)
        self.compute = b.compute_s
        self.slot = b.compute_s + b.memory_s + b.layer_comm_s
        self.slot_positive = self.slot > 0
        self.every_slot = bool(self.slot_positive.all())  # then no selection to make
        self.slot_divisor = (
            self.slot if self.every_slot else where(self.slot_positive, self.slot, 1.0)
        )
        self.host_idle = np.zeros_like(self.step) if b.host_idle_s is None else b.host_idle_s
        self.bubble, self.dp_comm = b.bubble_s, b.dp_comm_s
        self.memory, self.optimizer = b.memory_s, b.optimizer_s
        self.fine = b.layer_comm_s + b.pp_comm_s + b.offload_s
        self.clock_from = clock_from

    def times(self, clock_mhz: np.ndarray) -> PhaseTimes:
        """The phase durations (s) estimated at ``clock_mhz``; :func:`phase_times` of the
        breakdown with its compute, memory, host wait, bubble and step scaled."""
        t_c = self.compute
        new_c = t_c * (self.clock_from / clock_mhz)
        more = new_c - t_c
        # longer compute first fills the time the GPU waited for its host (inside memory_s)
        filled = np.minimum(self.host_idle, np.maximum(more, 0.0))
        grown = more - filled
        scale = (self.slot + grown) / self.slot_divisor
        if not self.every_slot:
            scale = where(self.slot_positive, scale, 1.0)
        new_bubble = self.bubble * scale
        step = self.step + grown + (new_bubble - self.bubble)
        blocked = new_bubble + self.dp_comm
        host = self.host_idle - filled
        return PhaseTimes(
            step=step,
            compute=new_c,
            memory=(self.memory - filled) + self.optimizer - host,
            fine_wait=self.fine + host,
            blocked=blocked,
            busy=np.maximum(step - blocked, 0.0),
        )
