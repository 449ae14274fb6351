"""Energy-versus-clock validation against the Perseus A100 GPT-3 stage profile.

Perseus (Chung et al., SOSP 2024; profile in the ml-energy/zeus repository) measured
the time and energy of one pipeline stage of GPT-3 175B (bf16, A100 SXM) for one
forward and one backward pass at SM clocks from 1410 down to 855 MHz. The counter's
scope (one GPU or more) is not stated, so only *relative* energy and time (to the
row at the highest clock) are compared.

The stage is one accelerator running back-to-back kernels (no bubble, no exposed
communication). Its time at clock f is split, at the maximum clock, into a
clock-bound part (a fraction ``c`` of the time, scaling with f_max / f) and a
clock-independent part (memory-bound kernels, launch gaps: 1 - c), i.e. the time
model's compute/memory roofline split; ``c`` is a property of this workload and is
fitted here, together with the A100's V-f curve (floor voltage and knee clock), once by
a grid search (``fit_perseus`` in the git history up to 3f2a01e). The power and energy then come from the *same* functions the
energy model uses for every candidate (:func:`dse.analytic.energy.accelerator.accelerator_energy`).
The stage is set up from this split rather than through the time model so that the
check does not move when the time model is re-calibrated; the time model's own split
for a GPT-3 stage is reported next to it for comparison.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from dse.analytic.energy import power
from dse.analytic.energy.accelerator import accelerator_energy
from dse.analytic.time import hardware
from dse.analytic.time.step import StepBreakdown

PERSEUS_FILE = "perseus_a100_gpt3_stage.csv"
ACCELERATOR = "A100-80GB"
# Fitted once by a grid search, minimax relative error over all rows (validate_energy.fit_perseus,
# removed after its one use; in git history up to 3f2a01e):
STAGE_COMPUTE_FRACTION = 0.76  # share of the stage's time at f_max that scales with 1/f
HBM_EFFICIENCY = 0.7  # achieved share of peak HBM bandwidth in memory-bound kernels


def perseus_path() -> Path:
    """The packaged copy of the Perseus table, else ../shared/reference next to the repo."""
    pkg = Path(__file__).resolve().parent / "data" / "reference" / PERSEUS_FILE
    if pkg.exists():
        return pkg
    for base in (Path(__file__).resolve().parents[2], Path.cwd()):
        p = base.parent / "shared" / "reference" / PERSEUS_FILE
        if p.exists():
            return p
    return pkg


def _hw(n: int, accelerator: str = ACCELERATOR) -> tuple[hardware.Hardware, power.PowerParameters]:
    names = np.full(n, accelerator, dtype=object)
    return hardware.lookup(names, np.full(n, "bf16", dtype=object)), power.lookup(names)


def stage_energy(
    clock_mhz,
    compute_fraction=STAGE_COMPUTE_FRACTION,
    vf_x=None,
    vf_v=None,
    accelerator: str = ACCELERATOR,
) -> tuple[np.ndarray, np.ndarray]:
    """(time, energy) of the stage at ``clock_mhz``, in units of its time at f_max.

    All arguments broadcast; ``vf_x``/``vf_v`` override the catalog's V-f points
    (shape (n, K)) for fitting.
    """
    clock, c = np.broadcast_arrays(
        np.asarray(clock_mhz, dtype=float), np.asarray(compute_fraction, dtype=float)
    )
    clock, c = clock.ravel(), c.ravel()
    n = clock.size
    hw, pw = _hw(n, accelerator)
    if vf_x is not None:
        pw = replace(
            pw,
            vf_x=np.broadcast_to(vf_x, (n, np.shape(vf_x)[-1])),
            vf_v=np.broadcast_to(vf_v, (n, np.shape(vf_v)[-1])),
        )
    fmax = hw.clock_max_mhz
    memory_s = 1.0 - c
    compute_s = c * fmax / clock
    b = StepBreakdown.one_accelerator(
        compute_s, memory_s, memory_s * hw.hbm_bw_bps * HBM_EFFICIENCY
    )
    acc = accelerator_energy(b, clock / fmax, pw, hw.idle_w, hw.tdp_w, np.full(n, np.nan))
    return b.step_s, acc.total_j


def _table(path: Path) -> pd.DataFrame:
    """The clock sweep as one row per clock (highest first): ``sm_clock_mhz``, ``time_ms``
    and ``energy_j`` of the stage (forward + backward), from the validate-model format
    (``stage_time_s`` and ``stage_energy_j`` rows at ``clock_mhz``)."""
    df = pd.read_csv(path)
    wide = df.pivot_table(
        index="clock_mhz", columns="measured_quantity", values="measured_value", aggfunc="first"
    )
    out = pd.DataFrame(
        {
            "sm_clock_mhz": wide.index.to_numpy(dtype=float),
            "time_ms": wide["stage_time_s"].to_numpy(dtype=float) * 1e3,
            "energy_j": wide["stage_energy_j"].to_numpy(dtype=float),
        }
    )
    return out.sort_values("sm_clock_mhz", ascending=False).reset_index(drop=True)


def relative_stage(
    sources, quantities, clock_mhz, measured, accelerators=None
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted stage time or energy, in the measured row's unit: the model's ratio to the
    same source's (and quantity's) highest clock times the measurement there, and its error
    (validate-model's stage rows; the counter's scope is not stated, so only ratios are
    compared and the highest clock's row is exact by construction)."""
    pred = np.full(len(measured), np.nan)
    err = np.full(len(measured), np.nan)
    keys = pd.Series(list(zip(sources, quantities, strict=True)))
    for _, idx in keys.groupby(keys).groups.items():
        i = np.asarray(idx)
        acc = (
            ACCELERATOR
            if accelerators is None or accelerators[i[0]] is None
            else str(accelerators[i[0]])
        )
        t, e = stage_energy(clock_mhz[i], accelerator=acc)
        model = t if quantities[i[0]] == "stage_time_s" else e
        top = int(np.argmax(clock_mhz[i]))
        pred[i] = model / model[top] * measured[i][top]
        err[i] = pred[i] / measured[i] - 1.0
    return pred, err


def time_model_compute_fraction() -> float | None:
    """The time model's clock-bound share for a GPT-3 175B stage on A100 (for comparison)."""
    try:
        from dse.analytic.evaluator import AnalyticEvaluator
        from dse.analytic.time import model as time_model

        ev = AnalyticEvaluator()
        row = pd.DataFrame(
            [
                {
                    "model": "gpt3-175b",
                    "accelerator": ACCELERATOR,
                    "num_accelerators": 8,
                    "tensor_parallel": 8,
                    "pipeline_parallel": 1,
                    "global_batch_size": 8,
                    "micro_batch_size": 1,
                    "recompute": "none",
                    "flash_attention": False,
                }
            ]
        )
        table = ev.with_defaults(row)
        cfg = {
            name: (
                table[name].astype(str).to_numpy(dtype=object)
                if inp.kind == "str"
                else pd.to_numeric(table[name], errors="coerce").to_numpy(dtype=np.float64)
            )
            for name, inp in ev.inputs.items()
        }
        with np.errstate(all="ignore"):
            b = time_model.evaluate(cfg).breakdown
        c, m = float(b.compute_s[0]), float(b.memory_s[0])
        return c / (c + m) if c + m > 0 else None
    except Exception:  # the comparison is informative only
        return None


def perseus_report(path: Path | None = None) -> dict:
    """Predicted versus measured relative energy and time per SM clock.

    Returns ``rows`` (per clock: measured and predicted relative time and energy of the
    stage, forward + backward, and their relative errors), ``max_abs_error_energy``,
    ``max_abs_error_time``, ``median_abs_error_energy``, ``median_abs_error_time``,
    the measured and predicted energy-optimal clocks, and the fitted parameters.
    """
    path = Path(path) if path is not None else perseus_path()
    df = _table(path)
    f = df["sm_clock_mhz"].to_numpy(dtype=float)
    t, e = stage_energy(f)
    rt_pred, re_pred = t / t[0], e / e[0]
    rt_meas = (df["time_ms"] / df["time_ms"].iloc[0]).to_numpy()
    re_meas = (df["energy_j"] / df["energy_j"].iloc[0]).to_numpy()
    err_t = rt_pred / rt_meas - 1.0
    err_e = re_pred / re_meas - 1.0
    rows = [
        {
            "sm_clock_mhz": float(f[i]),
            "time_measured": float(rt_meas[i]),
            "time_predicted": float(rt_pred[i]),
            "time_error": float(err_t[i]),
            "energy_measured": float(re_meas[i]),
            "energy_predicted": float(re_pred[i]),
            "energy_error": float(err_e[i]),
        }
        for i in range(len(f))
    ]
    pw = power.lookup(np.array([ACCELERATOR], dtype=object))
    return {
        "source": str(path),
        "accelerator": ACCELERATOR,
        "quantity": "relative to the highest clock; one forward + one backward pass of the stage",
        "rows": rows,
        "max_abs_error_time": float(np.max(np.abs(err_t))),
        "max_abs_error_energy": float(np.max(np.abs(err_e))),
        "median_abs_error_time": float(np.median(np.abs(err_t))),
        "median_abs_error_energy": float(np.median(np.abs(err_e))),
        "energy_optimal_clock_measured_mhz": float(f[np.argmin(re_meas)]),
        "energy_optimal_clock_predicted_mhz": float(f[np.argmin(re_pred)]),
        "parameters": {
            "stage_compute_fraction": STAGE_COMPUTE_FRACTION,
            "vf_curve": np.c_[pw.vf_x[0], pw.vf_v[0]].tolist(),
            "activity": {"compute": float(pw.a_compute[0]), "memory": float(pw.a_memory[0])},
        },
        "time_model_compute_fraction": time_model_compute_fraction(),
    }


# Perseus's GPT-3 175B pipeline on A100 SXM (ml-energy/zeus, sosp24_data/emulation/
# stage_profile/gpt3-175b+a100_sxm_bf16.csv at 1410 MHz): 8 stages, stages 0-6 50.16 ms
# forward and 92.95 ms backward per micro-batch, the last stage (output layer and loss)
# 54.03 and 98.86 ms; 12 micro-batches (iteration_time_energy/a100_sxm/gpt3-175b_bf16_mb12.csv).
PERSEUS_STAGES = 8
PERSEUS_MICRO_BATCHES = 12
PERSEUS_FORWARD_S = (0.05016,) * 7 + (0.05403,)
PERSEUS_BACKWARD_S = (0.09295,) * 7 + (0.09886,)
# Its published iteration-time/energy frontier (same repository, ..._mb12.csv): the fastest
# point 2.818 s and 6,212.8 J, the minimum-energy point 3.186 s and 5,656.1 J.
PERSEUS_FASTEST = (2.818, 6212.8)
PERSEUS_LEAST_ENERGY = (3.186, 5656.1)
#: the clock grid of a plan: A100's 15 MHz steps from 1410 MHz down to 855 MHz (Perseus's range)
PERSEUS_CLOCKS_MHZ = np.arange(1410.0, 854.0, -15.0)


def stage_curve(clock_mhz, accelerator: str = ACCELERATOR):
    """:class:`~dse.analytic.energy.stage_plan.StageCurve` of a pass of the Perseus stage
    (:func:`stage_energy`: the fitted clock-bound share, the catalog's power) on the grid
    ``clock_mhz``, with the accelerator's power while blocked in a pipeline bubble
    (P_idle + a_waiting (TDP - P_idle) s(f), the energy model's)."""
    from dse.analytic.energy.stage_plan import StageCurve

    clock = np.asarray(clock_mhz, dtype=float)
    t, e = stage_energy(clock, accelerator=accelerator)
    hw, pw = _hw(len(clock), accelerator)
    ratio = clock / hw.clock_max_mhz
    blocked = power.phase_power_w(
        pw.a_waiting, power.dynamic_scale(ratio, pw.vf_x, pw.vf_v), hw.idle_w, hw.tdp_w
    )
    return StageCurve(clock_mhz=clock, time_factor=t, energy_j_per_s=e / t[0], blocked_w=blocked)


#: Perseus's measured blocking power of an A100 waiting on a pipeline transfer (W): lowtime's
#: ``scripts/perseus.py`` and the artifact's ``evaluation.ipynb`` (ml-energy/zeus, SOSP'24
#: artifact); the check's default is the model's own blocked power, this one is a sensitivity
PERSEUS_BLOCKING_W = 83.64


def perseus_frontier_report(
    clock_mhz=None, granularities=("stage", "phase", "pass"), blocked_w: float | None = None
) -> dict:
    """The model's one-clock and planned frontiers (a clock per stage, per stage and phase:
    :func:`~dse.analytic.energy.stage_plan.planned_frontier`; per pass:
    :func:`~dse.analytic.energy.stage_plan.pass_frontier`) on Perseus's GPT-3 175B A100
    pipeline against the published frontier: the minimum-energy point's energy and time
    relative to the fastest point's (the counter's scope is not stated, so only ratios).
    ``clock_mhz``: the plans' clock grid (default :data:`PERSEUS_CLOCKS_MHZ`).

    Perseus's accounting (ml-energy/zeus, lowtime ``scripts/perseus.py``): the pipeline's
    energy per iteration is every pass's energy plus one blocking power for every stage over
    the rest of the iteration. ``blocked_w``: that power (W); default the model's blocked
    power at the grid's top clock (94 W on A100), for every frontier here."""
    from dse.analytic.energy import stage_plan

    work = stage_plan.StageWork(
        forward_s=np.array(PERSEUS_FORWARD_S),
        backward_s=np.array(PERSEUS_BACKWARD_S),
        micro_batches=PERSEUS_MICRO_BATCHES,
    )
    curve = stage_curve(PERSEUS_CLOCKS_MHZ if clock_mhz is None else clock_mhz)
    held_w = float(curve.blocked_w[0]) if blocked_w is None else float(blocked_w)
    curve = replace(curve, blocked_w=np.full_like(curve.blocked_w, held_w))
    one = stage_plan.one_clock_frontier(work, curve)
    planned = {
        g: (
            stage_plan.pass_frontier(work, curve, one.time_s)
            if g == "pass"
            else stage_plan.planned_frontier(work, curve, g)
        )
        for g in granularities
    }

    def summary(fr):
        fast, low = fr.fastest(), fr.least_energy()
        return {
            "fastest_time_s": float(fr.time_s[fast]),
            "fastest_energy_j": float(fr.energy_j[fast]),
            "least_energy_time_s": float(fr.time_s[low]),
            "least_energy_j": float(fr.energy_j[low]),
            "time_change": float(fr.time_s[low] / fr.time_s[fast] - 1.0),
            "energy_change": float(fr.energy_j[low] / fr.energy_j[fast] - 1.0),
            "least_energy_clocks_mhz": fr.clock_mhz[low].tolist(),
            "fastest_clocks_mhz": fr.clock_mhz[fast].tolist(),
        }

    (t0, e0), (t1, e1) = PERSEUS_FASTEST, PERSEUS_LEAST_ENERGY
    return {
        "published": {"time_change": t1 / t0 - 1.0, "energy_change": e1 / e0 - 1.0},
        "blocked_w": held_w,
        "one_clock": summary(one),
        **{f"planned_{g}": summary(fr) for g, fr in planned.items()},
        "planned_never_above": {
            g: bool(np.all(fr.energy_at_j(one.time_s) <= one.energy_j * (1 + 1e-12)))
            for g, fr in planned.items()
        },
        "frontiers": {"one_clock": one, **{f"planned_{g}": fr for g, fr in planned.items()}},
    }
