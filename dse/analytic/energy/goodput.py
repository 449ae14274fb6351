"""Goodput at scale: interruptions, restarts, lost work and the optimum checkpoint interval.

A job of ``N`` accelerators is interrupted at ``lambda N`` per hour (``lambda``: failures per
accelerator-hour; Poisson, as Young 1974 and Daly 2006 assume). Every interruption costs a
restart (``R``: detect, reschedule, re-initialise, reload) and the work since the last
checkpoint. With ``tau`` seconds of training between checkpoints that each block the job
for ``delta`` seconds and ``M = 1 / (lambda N)`` the job's mean time between interruptions,
the expected wall time of ``T_s`` seconds of training is Daly's (2006, "A higher order
estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3), section 3)

    T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau,

which is ``T_s (tau + delta) / tau`` (checkpoints only) as ``M -> inf``. Its optimum
interval, to within 0.2% of the solution time (Daly's eq. 37),

    tau_opt = sqrt(2 delta M) (1 + sqrt(delta/(2M))/3 + delta/(18 M)) - delta   (delta < 2M; else M),

reproduces Daly's validation cases (M = 24 h, delta = 5 min: 117 min; M = 6 h: 57 min;
M = 15 min: 9.1 min) and reduces to Young's ``sqrt(2 delta M)`` for small ``delta / M``.
Goodput is ``T_s / T_w``: the share of the wall time spent on training that is kept
(Llama 3's "effective training time", Dubey et al. 2024, section 3.3.4; the ETTR of
Kokolis et al. 2025).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.columns import one_value, repeat_one
from dse.analytic.rows import once, where, where_shared


@dataclass(frozen=True, slots=True)
class Goodput:
    """The expected run with interruptions (per candidate)."""

    wall_s: np.ndarray  # expected wall time of the run
    interruptions: np.ndarray  # expected interruptions over the run
    restart_s: np.ndarray  # time spent restarting (accelerators idle)
    rework_s: np.ndarray  # time spent redoing lost work (training as usual)
    goodput: np.ndarray  # training time kept / wall time


def job_mtbf_s(failures_per_accelerator_hour, n) -> np.ndarray:
    """The job's mean time between interruptions ``M`` (s); inf where no failures."""
    f = np.asarray(failures_per_accelerator_hour, dtype=float)
    if one_value(f) and not (f[0] > 0 or f[0] < 0):  # (the default: 0) rate 0 or NaN: M inf
        return _filled(np.inf, f, n)
    rate = f * n / 3600.0
    with np.errstate(divide="ignore"):
        return where_shared(rate > 0, 1.0 / where_shared(rate > 0, rate, 1.0), np.inf)


def optimum_interval_s(delta_s, mtbf_s) -> np.ndarray:
    """Daly's eq. 37 optimum training time between checkpoints (inf when ``M`` is)."""
    delta = np.asarray(delta_s, dtype=float)
    if one_value(mtbf_s) and not np.isfinite(mtbf_s[0]):  # inf in every row: no optimum
        return _filled(np.inf, delta, mtbf_s)
    with np.errstate(invalid="ignore"):  # delta 0 with M inf: no checkpoints anyway
        x = delta / (2.0 * mtbf_s)
        tau = np.sqrt(2.0 * delta * mtbf_s) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - delta
    return where_shared(
        np.isfinite(mtbf_s), where_shared(delta < 2.0 * mtbf_s, tau, mtbf_s), np.inf
    )


def checkpoint_interval_s(interval_in, delta_s, mtbf_s, step_s) -> np.ndarray:
    """The training time between checkpoints: the input where given (0: none), else the
    optimum where the job fails (at least one iteration), else none (0)."""
    given = np.asarray(interval_in, dtype=float)
    shapes = (np.shape(given), np.shape(delta_s), np.shape(mtbf_s), np.shape(step_s))
    if one_value(mtbf_s) and not np.isfinite(mtbf_s[0]):  # no row fails: the optimum unused
        return once(_given_or_none, np.broadcast_to(given, np.broadcast_shapes(*shapes)))
    opt = np.maximum(optimum_interval_s(delta_s, mtbf_s), step_s)
    return where_shared(np.isfinite(given), given, where_shared(np.isfinite(mtbf_s), opt, 0.0))


def expected_run(
    train_s, with_checkpoints_s, interval_s, delta_s, on, mtbf_s, restart_s
) -> Goodput:
    """The expected run: ``train_s`` of training whose failure-free time with checkpoints is
    ``with_checkpoints_s``; ``on`` where checkpoints are taken every ``interval_s`` for
    ``delta_s``, else the whole run is one segment. Where no failures (``M`` inf) the wall
    time is ``with_checkpoints_s`` exactly and nothing is lost."""
    fails = np.isfinite(mtbf_s)
    if not fails.any():
        zero = np.zeros_like(np.asarray(train_s, dtype=float))
        return Goodput(
            wall_s=with_checkpoints_s,
            interruptions=zero,
            restart_s=zero,
            rework_s=zero,
            goodput=_ratio(train_s, with_checkpoints_s),
        )
    m = where_shared(fails, mtbf_s, 1.0)
    tau = where_shared(on, interval_s, train_s)
    delta = where_shared(on, delta_s, 0.0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # inf: no expected end
        wall = m * np.exp(restart_s / m) * np.expm1((tau + delta) / m) * train_s / tau
        wall = where_shared(fails, wall, with_checkpoints_s)
        interruptions = where_shared(fails, wall / m, 0.0)
        restart = interruptions * restart_s
        rework = np.maximum(wall - with_checkpoints_s - restart, 0.0)
    return Goodput(
        wall_s=wall,
        interruptions=interruptions,
        restart_s=restart,
        rework_s=rework,
        goodput=_ratio(train_s, wall),
    )


def _given_or_none(given) -> np.ndarray:
    """The interval where given, else none (0): :func:`checkpoint_interval_s` where no row fails."""
    return where(np.isfinite(given), given, 0.0)


def _filled(value: float, *like) -> np.ndarray:
    """``value`` in every row of the arrays ``like`` broadcast together (read-only)."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in like))
    return repeat_one(np.full(1, value), shape[0]) if len(shape) == 1 else np.full(shape, value)


def _ratio(a, b) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        positive = b > 0
        return where_shared(positive, a / where_shared(positive, b, 1.0), np.nan)
