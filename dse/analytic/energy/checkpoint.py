"""Checkpoint phases: the job stops while each accelerator writes its state to storage.

Bytes per accelerator per checkpoint: its share of the training state written once (the
time model's memory breakdown, ``checkpoint_bytes``: mixed-precision Adam's weights and
optimizer state, 2 + 12 B per parameter, each tensor written once with the write of a
replicated one spread over its data-parallel copies, as Megatron-Core's fully parallel
save and PyTorch's distributed checkpoint do). The default write bandwidth is declared,
with its source (Llama 3's storage), in :mod:`dse.analytic.declarations`. See
docs/model-energy.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.columns import repeat_one
from dse.analytic.energy import transfer
from dse.analytic.rows import once, where_shared


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """Checkpoint phases per candidate (see :func:`checkpoint_phases`)."""

    on: np.ndarray  # bool: a positive, finite interval
    interval_s: np.ndarray  # s of training between checkpoints
    bytes: np.ndarray  # bytes each accelerator writes per checkpoint
    duration_s: np.ndarray  # s one checkpoint blocks the job
    per_step_s: np.ndarray  # s of checkpoint time each iteration carries (0 where off)


def checkpoint_phases(memory, step_s, interval_s, write_gbs, duration_s) -> Checkpoints:
    """Checkpoint phases from the memory breakdown and the inputs.

    One checkpoint blocks the job for ``duration_s = bytes / write_gbs`` (or the given
    ``duration_s`` where finite); one is taken every ``interval_s`` of training, so the run
    takes ``time_to_train / interval`` of them (a continuous count) and each iteration
    carries ``per_step_s = step_s * duration_s / interval`` of checkpoint time. ``on``: rows
    with a positive, finite interval; ``per_step_s`` is exactly 0 elsewhere.
    """
    interval = np.asarray(interval_s, dtype=float)
    on = once(_taken, interval)
    state_b, duration = write_time_s(memory, write_gbs, duration_s)
    if not on.any():  # (no failures, no interval given: the default) exactly 0 in every row
        per_step = np.zeros(np.broadcast_shapes(on.shape, np.shape(step_s), duration.shape))
    else:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            per_step = where_shared(on, step_s * duration / where_shared(on, interval, 1.0), 0.0)
    return Checkpoints(
        on=on, interval_s=interval, bytes=state_b, duration_s=duration, per_step_s=per_step
    )


def _taken(interval: np.ndarray) -> np.ndarray:
    """Whether checkpoints are taken: a positive, finite interval."""
    return np.isfinite(interval) & (interval > 0)


def write_time_s(memory, write_gbs, duration_s) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes, duration_s)`` of one checkpoint per accelerator: its share of the weights
    and optimizer state, written at ``write_gbs`` (or the given ``duration_s`` where finite)."""
    state_b = np.asarray(memory.checkpoint_bytes, dtype=float)
    given = np.asarray(duration_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return state_b, where_shared(
            np.isfinite(given), given, state_b / once(_write_bps, write_gbs)
        )


def _write_bps(write_gbs) -> np.ndarray:
    """The write bandwidth in bytes/s, NaN where not positive."""
    write_bps = np.asarray(write_gbs, dtype=float) * 1e9
    return where_shared(write_bps > 0, write_bps, np.nan)


@dataclass(frozen=True, slots=True)
class CheckpointEnergy:
    """Checkpoint energy per accelerator and iteration (J), by component."""

    idle_j: np.ndarray  # the accelerator's static power while it writes
    waiting_j: np.ndarray  # its parked power above that
    network_j: np.ndarray  # NIC and switch static power, and the bytes over the scale-out fabric
    host_j: np.ndarray  # the host's share
    links_j: np.ndarray  # the bytes over the scale-out fabric alone (part of network_j)


def checkpoint_energy(
    ck: Checkpoints, step_s, idle_w, p_parked, p_net_static, p_host, scaleout_pj_per_bit
) -> CheckpointEnergy:
    """Checkpoint energy per accelerator and iteration (amortised over ``ck.per_step_s``),
    J by component: the accelerator parked at ``p_parked`` (its CUDA context held, no kernel
    running; ``idle`` and ``waiting`` above idle), host and network static power on, and the bytes over the scale-out fabric
    (``links``, in ``network``). Zero (not 0 x NaN) where checkpointing is off, so every
    other output is unchanged to the last bit."""
    on, t_ck = ck.on, ck.per_step_s
    if not on.any():  # none taken: every part exactly 0
        shape = np.broadcast_shapes(on.shape, np.shape(t_ck), np.shape(step_s))
        zero = repeat_one(np.zeros(1), shape[0]) if len(shape) == 1 else np.zeros(shape)
        return CheckpointEnergy(
            idle_j=zero, waiting_j=zero, network_j=zero, host_j=zero, links_j=zero
        )
    links = where_shared(
        on,
        transfer.network_energy_j(0.0, ck.bytes, 0.0, scaleout_pj_per_bit)
        * step_s
        / where_shared(on, ck.interval_s, 1.0),
        0.0,
    )
    return CheckpointEnergy(
        idle_j=where_shared(on, idle_w * t_ck, 0.0),
        waiting_j=where_shared(on, (p_parked - idle_w) * t_ck, 0.0),
        network_j=where_shared(on, p_net_static * t_ck, 0.0) + links,
        host_j=where_shared(on, p_host * t_ck, 0.0),
        links_j=links,
    )
