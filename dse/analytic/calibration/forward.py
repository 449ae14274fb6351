"""What the analytic model predicts for each measurement row, for given accelerator parameters.

``acc`` is an accelerator in the profile's shape (``hardware``, ``power``, ``calibration``
dicts, :mod:`dse.analytic.profiles`). Kernel and stage rows go through the energy model's
own functions (:func:`~dse.analytic.energy.accelerator.accelerator_energy` on a one-GPU step
of back-to-back kernels, :func:`~dse.analytic.time.gemm.compute_time` for a GEMM of known
shape); training rows through the whole evaluator with ``acc`` registered as a temporary
profile. Per row, the workload's time at the maximum clock ``t_max_s`` and its clock-bound
share ``compute_share`` (stage rows: fitted; kernels of known FLOPs or bytes: from the
efficiencies) and the energy counter's scope ``scope`` (GPUs it covers) are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dse.analytic import profiles
from dse.analytic.energy import power
from dse.analytic.energy.accelerator import accelerator_energy
from dse.analytic.time import gemm
from dse.analytic.time.hardware import calibration as shipped_calibration
from dse.analytic.time.step import StepBreakdown

TRIAL_NAME = "calibration-trial"
CAP_STEPS = (
    40  # bisection steps for the clock that meets a power cap (resolution 2^-40 of the range)
)


def profile_of(acc: dict, name: str = TRIAL_NAME) -> profiles.Profile:
    return profiles.Profile(
        name=name,
        path=Path(name),
        base="",
        hardware=acc["hardware"],
        power=acc["power"],
        calibration=acc["calibration"],
        sources={},
        fit={},
    )


def peak_flops(acc: dict, precision: np.ndarray) -> np.ndarray:
    """Dense peak FLOP/s per row at its precision (NaN where the part has no such units)."""
    peaks = acc["hardware"]["peak_tflops"]
    return np.array(
        [np.nan if peaks.get(p) is None else peaks[p] * 1e12 for p in precision], dtype=float
    )


@dataclass(frozen=True, slots=True)
class KernelRows:
    """The columns of kernel and stage rows the time model reads, as arrays: read from the
    table once, not at every clock the fit or a power cap's bisection tries."""

    kind: np.ndarray
    precision: np.ndarray
    gemm_m: np.ndarray
    gemm_n: np.ndarray
    gemm_k: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray

    @classmethod
    def of(cls, rows: pd.DataFrame) -> KernelRows:
        return cls(
            kind=rows["kind"].to_numpy(),
            precision=rows["precision"].to_numpy(),
            **{
                c: rows[c].to_numpy(dtype=float)
                for c in ("gemm_m", "gemm_n", "gemm_k", "flops", "bytes")
            },
        )


def kernel_times(acc: dict, rows: KernelRows, ratio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(time at ``ratio`` = f/f_max, clock-bound share) of compute rows with a GEMM shape or
    FLOPs and memory rows with bytes, from the efficiencies; NaN where neither is known."""
    hw, cal = acc["hardware"], acc["calibration"]
    n = len(rows.kind)
    t, share = np.full(n, np.nan), np.full(n, np.nan)
    comp = rows.kind == "compute"
    if comp.any():
        peak = peak_flops(acc, rows.precision)
        eff = cal["matmul_eff_max"] * np.where(
            rows.precision == "fp8", cal["fp8_matmul_ratio"], 1.0
        )
        m, nn, k = rows.gemm_m, rows.gemm_n, rows.gemm_k
        shaped = comp & np.isfinite(m + nn + k)
        with np.errstate(all="ignore"):
            sh = shipped_calibration()["shared"]
            r = gemm.Roofline(
                peak_flops=peak,
                clock_ratio=ratio,
                compute_units=float(hw["compute_units"]),
                eff_max=eff,
                half_flops=sh["matmul_half_gflop"] * 1e9,
                half_k=sh["matmul_half_k"],
                hbm_bw_bps=np.nan,
            )
            t_shape = gemm.compute_time(m, nn, k, None, r)
            t_flops = rows.flops / (peak * ratio * eff)
        t = np.where(shaped, t_shape, np.where(comp, t_flops, t))
        share = np.where(comp, 1.0, share)
    mem = rows.kind == "memory"
    if mem.any():
        bw = hw["hbm_bw_gbs"] * 1e9 * cal["memory_eff"]
        t = np.where(mem, rows.bytes / bw, t)
        share = np.where(mem, 0.0, share)
    return t, share


def stage_energy(
    acc: dict, ratio, t_max_s, compute_share, hbm_traffic_bytes
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, energy, busy power) of one GPU running a workload back to back at ``ratio``:
    clock-bound time ``t_max_s * compute_share / ratio``, memory-bound time
    ``t_max_s * (1 - compute_share)`` moving ``hbm_traffic_bytes``."""
    ratio = np.asarray(ratio, dtype=float)
    n = ratio.size
    hw = acc["hardware"]
    compute_s = t_max_s * compute_share / ratio
    memory_s = t_max_s * (1.0 - compute_share)
    b = StepBreakdown.one_accelerator(
        np.broadcast_to(compute_s, n), np.broadcast_to(memory_s, n), hbm_traffic_bytes
    )
    e = accelerator_energy(
        b,
        ratio,
        power.PowerParameters.of_entry(acc["power"], n),
        np.full(n, float(hw["idle_w"])),
        np.full(n, float(hw["tdp_w"])),
        np.full(n, np.nan),
    )
    return b.step_s, e.total_j, e.busy_w


def predict(
    acc: dict, rows: pd.DataFrame, t_max_s: np.ndarray, compute_share: np.ndarray, scope: np.ndarray
) -> pd.DataFrame:
    """Predicted ``time_s``, ``energy_j`` (over the counter's ``scope`` GPUs), ``power_w`` (the
    same scope) and ``clock_mhz`` for every row of ``rows``: kernels and stages, power states
    and whole training runs, each kind by its own helper."""
    n = len(rows)
    kind = rows["kind"].to_numpy()
    out = {k: np.full(n, np.nan) for k in ("time_s", "energy_j", "power_w", "clock_mhz")}
    work = np.isin(kind, ("compute", "memory", "stage"))
    if work.any():
        t, e, f = _work_rows(acc, rows[work], t_max_s[work], compute_share[work])
        s = scope[work]
        out["time_s"][work], out["energy_j"][work], out["clock_mhz"][work] = t, e * s, f
        out["power_w"][work] = e * s / t
    _power_state_rows(acc, rows, kind, scope, out)
    train = kind == "training"
    if train.any():
        res = training_runs(acc, rows[train])
        out["time_s"][train] = res["step_time_s"]
        out["power_w"][train] = res["avg_power_per_accelerator_w"] * scope[train]
        out["energy_j"][train] = out["power_w"][train] * res["step_time_s"]
        out["clock_mhz"][train] = res["effective_clock_mhz"]
    return pd.DataFrame(out, index=rows.index)


def _work_rows(acc: dict, r: pd.DataFrame, t_max_s: np.ndarray, compute_share: np.ndarray):
    """Time (s), one GPU's energy (J) and clock (MHz) of kernel and stage rows ``r``, at their
    measured clock, or, under a power cap without one, at the highest clock whose busy power
    meets the cap (bisection, :data:`CAP_STEPS` steps)."""
    hw = acc["hardware"]
    f_max, f_min = float(hw["clock_max_mhz"]), float(hw["clock_min_mhz"])
    cap = r["power_cap_w"].to_numpy(dtype=float)
    f = r["clock_mhz"].to_numpy(dtype=float)
    kernels = KernelRows.of(r)
    given = kernels.bytes
    bw = hw["hbm_bw_gbs"] * 1e9 * acc["calibration"]["memory_eff"]

    def at(ratio):
        t_k, share_k = kernel_times(acc, kernels, ratio)
        t1 = np.where(np.isfinite(t_k), t_k * ratio**share_k, t_max_s)  # time at f_max
        share = np.where(np.isfinite(share_k), share_k, compute_share)
        hbm = np.where(np.isfinite(given), given, t1 * (1.0 - share) * bw)
        return stage_energy(acc, ratio, t1, share, hbm)

    solve = ~np.isfinite(f) & np.isfinite(cap)
    if solve.any():
        lo, hi = np.full(len(r), f_min / f_max), np.ones(len(r))
        for _ in range(CAP_STEPS):
            mid = 0.5 * (lo + hi)
            ok = at(mid)[2] <= cap
            lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
        f = np.where(solve, np.where(at(np.ones_like(lo))[2] <= cap, f_max, lo * f_max), f)
    f = np.where(np.isfinite(f), f, f_max)
    t, e, _ = at(f / f_max)
    return t, e, f


def _power_state_rows(
    acc: dict, rows: pd.DataFrame, kind: np.ndarray, scope: np.ndarray, out: dict
) -> None:
    """Fill ``out`` for the idle, parked and blocked rows: their power over the measuring
    window (which is the row's own time, not a prediction)."""
    hw = acc["hardware"]
    n = len(rows)
    idle, tdp = float(hw["idle_w"]), float(hw["tdp_w"])
    clock = rows["clock_mhz"].to_numpy(dtype=float)
    ratio = np.where(np.isfinite(clock), clock / float(hw["clock_max_mhz"]), 1.0)
    pw = power.PowerParameters.of_entry(acc["power"], n)
    dyn = power.dynamic_scale(ratio, pw.vf_x, pw.vf_v)
    for k, p in (
        ("idle", np.full(n, idle)),
        ("parked", power.parked_power_w(pw.a_parked, idle, tdp, np.full(n, np.nan))),
        ("blocked", power.phase_power_w(pw.a_waiting, dyn, idle, tdp)),
    ):
        m = kind == k
        out["power_w"][m] = p[m] * scope[m]
        out["time_s"][m] = rows["time_s"].to_numpy(dtype=float)[m]
        out["energy_j"][m] = p[m] * scope[m] * out["time_s"][m]
        out["clock_mhz"][m] = clock[m]


def training_runs(acc: dict, rows: pd.DataFrame) -> pd.DataFrame:
    """The whole model for the runs of ``rows`` (their ``config``) on accelerator ``acc``."""
    from dse.analytic.evaluator import AnalyticEvaluator

    table = pd.DataFrame(list(rows["config"]))
    table["accelerator"] = TRIAL_NAME
    table["checkpoint_interval_s"] = 0.0
    clock = rows["clock_mhz"].to_numpy(dtype=float)
    if "clock_mhz" in table.columns:  # telemetry's measured clock where the run set none
        table["clock_mhz"] = np.where(
            np.isfinite(table["clock_mhz"].astype(float)), table["clock_mhz"], clock
        )
    with profiles.registered(profile_of(acc)):
        return AnalyticEvaluator().evaluate(table)
