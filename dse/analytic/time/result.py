"""What the time half hands to the energy half: :class:`TimeResult`."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from dse.analytic import rows as _rows
from dse.analytic.time.hardware import Hardware
from dse.analytic.time.memory import MemoryBreakdown
from dse.analytic.time.reasons import REASON_TEXT
from dse.analytic.time.step import StepBreakdown

#: the public time metrics, in output order (the fields of :class:`TimeResult` they name)
METRIC_FIELDS = (
    "time_to_train_s",
    "step_time_s",
    "compute_time_s",
    "memory_time_s",
    "tp_comm_time_s",
    "cp_comm_time_s",
    "ep_comm_time_s",
    "pp_comm_time_s",
    "dp_comm_time_s",
    "bubble_time_s",
    "optimizer_time_s",
    "steps_to_train",
    "tokens_to_train",
    "min_tokens_to_train",
    "tokens_per_s",
    "mfu",
    "memory_per_accelerator_gib",
    "weights_memory_gib",
    "gradients_memory_gib",
    "optimizer_memory_gib",
    "activations_memory_gib",
    "parameters",
    "active_parameters",
    "data_parallel",
)


@dataclass(frozen=True, slots=True)
class TimeResult:
    """The time model's answer for a set of candidates (one value per candidate per array).

    The first fields are the public time metrics (:data:`METRIC_FIELDS`; units as their
    names say, declared in :mod:`dse.analytic.declarations`); the rest is what the energy
    half needs: the hardware arrays, the clock the step was timed at, the step-time
    breakdown, the memory breakdown, the accelerator count, the model FLOPs and the
    micro-batches per iteration and the scale-up domain size the network had.
    """

    time_to_train_s: np.ndarray  # s, steps x step time (no checkpoints)
    step_time_s: np.ndarray  # s per iteration
    compute_time_s: np.ndarray  # s per iteration
    memory_time_s: np.ndarray  # s per iteration
    tp_comm_time_s: np.ndarray  # s per iteration
    cp_comm_time_s: np.ndarray  # s per iteration
    ep_comm_time_s: np.ndarray  # s per iteration
    pp_comm_time_s: np.ndarray  # s per iteration
    dp_comm_time_s: np.ndarray  # s per iteration
    bubble_time_s: np.ndarray  # s per iteration
    optimizer_time_s: np.ndarray  # s per iteration
    steps_to_train: np.ndarray  # optimizer steps
    tokens_to_train: np.ndarray  # tokens
    min_tokens_to_train: np.ndarray  # tokens, E_min: the target's tokens at the small-batch limit
    tokens_per_s: np.ndarray  # tokens/s
    mfu: np.ndarray  # 1
    memory_per_accelerator_gib: np.ndarray  # GiB
    weights_memory_gib: np.ndarray  # GiB
    gradients_memory_gib: np.ndarray  # GiB
    optimizer_memory_gib: np.ndarray  # GiB
    activations_memory_gib: np.ndarray  # GiB
    parameters: np.ndarray  # 1, every parameter (all experts)
    active_parameters: np.ndarray  # 1, the parameters one token uses (= parameters when dense)
    data_parallel: np.ndarray  # 1
    reason_code: np.ndarray  # int8 index into time.reasons.REASONS (0: feasible)
    hw: Hardware  # catalog and calibration arrays
    clock_mhz: np.ndarray  # MHz, the clock the step was timed at
    breakdown: StepBreakdown  # s and bytes per iteration
    memory: MemoryBreakdown  # bytes per accelerator
    num_accelerators: np.ndarray  # accelerators in the job
    model_flops: np.ndarray  # FLOP per iteration (no recomputation)
    micro_batches: np.ndarray  # micro-batches per iteration and pipeline
    scaleup_size: np.ndarray  # accelerators per scale-up domain (input or catalog)

    @property
    def reason(self) -> np.ndarray:
        """The reasons as text, "" where feasible (from ``reason_code``, made when asked:
        re-timing and picking rows move the integer codes only)."""
        return REASON_TEXT[self.reason_code]

    def metrics(self) -> dict[str, np.ndarray]:
        """The public time metrics by name, in output order."""
        return {name: getattr(self, name) for name in METRIC_FIELDS}

    def with_rows(self, rows: np.ndarray, sub: TimeResult, *, inplace: bool = False) -> TimeResult:
        """A copy with the clock-dependent fields (:data:`CLOCK_FIELDS`) replaced at ``rows``
        by ``sub``'s, the result for those rows only re-timed at another clock; the other
        fields depend on the inputs alone, so ``self``'s arrays serve (shared, not copied).
        ``self`` is not modified, unless ``inplace`` (for a result whose clock-dependent
        arrays the caller made, e.g. by an earlier ``with_rows``)."""
        return replace(
            self,
            **{
                name: _rows.put(getattr(self, name), rows, getattr(sub, name), inplace=inplace)
                for name in CLOCK_FIELDS
            },
        )


assert tuple(f.name for f in fields(TimeResult))[: len(METRIC_FIELDS)] == METRIC_FIELDS

#: the fields of :class:`TimeResult` that change with the clock (the rest, catalog arrays,
#: memory, parameters, layout, training length, depend on the inputs alone); the reasons
#: are among them because a re-timed clock is in the accelerator's range
CLOCK_FIELDS = (
    "time_to_train_s",
    "step_time_s",
    "compute_time_s",
    "memory_time_s",
    "tp_comm_time_s",
    "cp_comm_time_s",
    "ep_comm_time_s",
    "pp_comm_time_s",
    "dp_comm_time_s",
    "bubble_time_s",
    "optimizer_time_s",
    "tokens_per_s",
    "mfu",
    "reason_code",
    "clock_mhz",
    "breakdown",
)

#: the time metrics known before the step (the memory, the model's size, the run's length):
#: a candidate the time model refuses gets these, and NaN for the metrics of its step
FRONT_METRICS = tuple(name for name in METRIC_FIELDS if name not in CLOCK_FIELDS)
