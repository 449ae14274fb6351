"""Fit one accelerator's physical parameters to measurements by bounded least squares.

The parameters (:data:`PARAMETERS`) are the model's own: idle power, the activity of
compute-bound, memory-bound, blocked and parked work, the V-f curve's floor voltage and
knee clock, the large-GEMM and HBM efficiencies, and (from temperatures) the junction-to-
inlet thermal resistance. Which of them a fit frees follows from the rows
(:func:`candidates`; a user may narrow it), and a rank-revealing QR of the Jacobian at the
start drops any the rows cannot tell apart, which then keep the base part's value. Per
workload whose make-up is unknown (a pipeline stage) the fit also finds its time at the
maximum clock and its clock-bound share, and per workload whose energy counter covers an
unknown number of GPUs a scale: these describe the measured workload, not the accelerator,
and are reported but not written to the profile.

Residuals are log(predicted / measured) of every time, energy and power a row carries
(scipy ``least_squares``, trust-region reflective with the bounds), plus a weak prior per
freed parameter, :data:`PRIOR_WEIGHT` x (value - base value) / its prior width, so that a
parameter the rows barely constrain stays near the base part's value instead of wandering
(a 1% misfit of one row weighs as much as moving a parameter by its prior width). Uncertainties are the
square roots of the diagonal of s^2 (J^T J)^-1 at the solution, s^2 the residual variance
per degree of freedom. Rows held out (``holdout``) take no part in the fit; they are
predicted with the fitted parameters and reported apart.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dse.analytic import profiles
from dse.analytic.calibration import forward
from dse.analytic.energy import power
from dse.analytic.time import hardware
from dse.errors import DseError, did_you_mean

PRIOR_WEIGHT = 0.01


@dataclass(frozen=True)
class Param:
    """One physical parameter: where it lives in the profile, its unit, bounds and scale."""

    name: str
    path: tuple
    unit: str
    lower: float
    upper: float
    scale: float
    prior: float  # width of the weak prior towards the base part's value (absolute)
    description: str

    def get(self, acc: dict) -> float:
        if self.name in ("v_floor", "knee"):
            return float(_vf(acc)[self.name])
        node = acc
        for k in self.path:
            node = node[k]
        return float(node)

    def set(self, acc: dict, value: float) -> None:
        if self.name in ("v_floor", "knee"):
            vf = _vf(acc)
            vf[self.name] = float(value)
            acc["power"]["vf_curve"] = [
                [0.0, vf["v_floor"]],
                [vf["knee"], vf["v_floor"]],
                [1.0, 1.0],
            ]
            return
        node = acc
        for k in self.path[:-1]:
            node = node[k]
        node[self.path[-1]] = float(value)


def _vf(acc: dict) -> dict[str, float]:
    """Floor voltage and knee of the V-f curve (a curve of another shape is read as its first
    point's voltage and the last point before the rise)."""
    pts = np.asarray(acc["power"]["vf_curve"], dtype=float)
    floor = float(pts[0, 1])
    flat = pts[np.isclose(pts[:, 1], floor)]
    return {
        "v_floor": floor,
        "knee": float(flat[-1, 0]) if len(flat) > 1 and flat[-1, 0] < 1.0 else 0.74,
    }


PARAMETERS: dict[str, Param] = {
    p.name: p
    for p in (
        Param(
            "idle_w",
            ("hardware", "idle_w"),
            "W",
            1.0,
            np.inf,
            5.0,
            20.0,
            "static power (no process on the GPU)",
        ),
        Param(
            "a_compute",
            ("power", "activity", "compute"),
            "1",
            0.05,
            2.0,
            0.05,
            0.3,
            "dynamic power of compute-bound kernels at f_max, per (TDP - idle)",
        ),
        Param(
            "a_memory",
            ("power", "activity", "memory"),
            "1",
            0.0,
            2.0,
            0.05,
            0.3,
            "dynamic power of memory-bound kernels at f_max, per (TDP - idle)",
        ),
        Param(
            "a_waiting",
            ("power", "activity", "waiting"),
            "1",
            0.0,
            2.0,
            0.02,
            0.1,
            "dynamic power while blocked in a collective, per (TDP - idle)",
        ),
        Param(
            "a_parked",
            ("power", "activity", "parked"),
            "1",
            0.0,
            2.0,
            0.02,
            0.1,
            "power above idle with a CUDA context and no kernel, per (TDP - idle)",
        ),
        Param(
            "v_floor",
            ("power", "vf_curve"),
            "1",
            0.3,
            1.0,
            0.02,
            0.1,
            "V/V_max below the knee of the V-f curve",
        ),
        Param(
            "knee",
            ("power", "vf_curve"),
            "1",
            0.1,
            0.98,
            0.02,
            0.1,
            "f/f_max where the voltage starts to rise",
        ),
        Param(
            "matmul_eff_max",
            ("calibration", "matmul_eff_max"),
            "1",
            0.05,
            1.0,
            0.02,
            0.2,
            "achieved fraction of the dense peak in a large GEMM",
        ),
        Param(
            "memory_eff",
            ("calibration", "memory_eff"),
            "1",
            0.05,
            1.0,
            0.02,
            0.2,
            "achieved fraction of the HBM bandwidth in streaming kernels",
        ),
    )
}
#: which rows free which parameter (docs/calibration.md, "What a fit can find")
#: share of a workload's time at the highest clock that scales with 1/f, by its kind, for the
#: fit's starting point (0.5 for a kind that is neither compute- nor memory-bound)
_CLOCK_BOUND_SHARE = {"compute": 1.0, "memory": 0.0}

NEEDS = {
    "idle_w": "idle rows, or energy or power of known scope at 3 or more clocks",
    "a_compute": "compute rows, or stage or training rows with energy of known scope",
    "a_memory": "memory, stage or training rows with energy or power",
    "a_waiting": "blocked rows, or training runs with energy or power",
    "a_parked": "parked rows",
    "v_floor": "energy or power at 3 or more clocks",
    "knee": "energy or power at 3 or more clocks",
    "matmul_eff_max": "compute rows with FLOPs or a GEMM shape, or training runs",
    "memory_eff": "memory rows with bytes, or training runs",
}


#: the power entry's numbers a profile carries (besides the activities)
POWER_NUMBERS = (
    "vf_curve",
    "hbm_pj_per_byte",
    "r_air_k_per_w",
    "r_liquid_k_per_w",
    "slowdown_temp_c",
    "leakage_share",
    "leakage_per_k",
)


def base_accelerator(name: str) -> tuple[dict, dict]:
    """(accelerator in the profile's shape, source of every number) of catalog part or
    profile ``name``."""
    found = hardware.entry(name)
    if found is None and hardware.canonical_accelerator(name) is not None:
        name = hardware.canonical_accelerator(name)  # a100-80gb: A100-80GB
        found = hardware.entry(name)
    if found is None:
        # a profile named by its file, or a misspelt part or profile name (as a study's)
        known = [*hardware.accelerator_names(), *profiles.names()]
        raise DseError(
            f"accelerator profile {name} not found (a relative path is from the folder dse runs in)"
            if profiles.is_path(name) or "/" in name
            else f"unknown accelerator '{name}'{did_you_mean(name, known)}",
            field="--accelerator",
            allowed=", ".join(hardware.accelerator_names()) + ", or an accelerator profile",
        )
    hw, cal = found
    prof = profiles.find(name) if name not in hardware.catalog() else None
    pw = power.entry(name)
    acc = {
        "hardware": copy.deepcopy(dict(hw)),
        "power": {
            k: copy.deepcopy(pw[k]) for k in (*POWER_NUMBERS, "activity", "source") if k in pw
        },
        "calibration": {
            **{k: float(cal[k]) for k in hardware.ACCELERATOR_FIELDS},
            # the part's own values of shared fields (a TPU's DCN step latency)
            **{
                k: float(cal[k])
                for k in hardware.PART_OVERRIDES
                if cal[k] != hardware.calibration()["shared"][k]
            },
        },
    }
    acc["power"].setdefault("source", "")
    if prof is not None:
        return acc, dict(prof.sources)
    hw_src = (
        f"{name} in the hardware catalog (dse/analytic/data/hardware.yaml: {hw.get('source', '')})"
    )
    notes = hardware.catalog_notes().get(
        name, {}
    )  # a field's own note ("assumed", the datasheet line)
    own = (power.parameters().get("accelerators") or {}).get(name, {})
    sources = {
        f"hardware.{k}": (
            f"{name} in the hardware catalog (dse/analytic/data/hardware.yaml): {notes[k]}"
            if k in notes
            else hw_src
        )
        for k in acc["hardware"]
        if k != "source"
    }
    for k in POWER_NUMBERS:
        sources[f"power.{k}"] = (
            f"{name} in dse/analytic/data/power.yaml ({own.get('source', '')})"
            if k in own
            else "dse/analytic/data/power.yaml defaults (see its comments)"
        )
    for k in acc["power"]["activity"]:
        sources[f"power.activity.{k}"] = (
            f"{name} in dse/analytic/data/power.yaml"
            if k in own.get("activity", {})
            else "dse/analytic/data/power.yaml defaults (see its comments)"
        )
    shared = hardware.fitted_on(name)
    how = (
        "estimated by the rule of docs/model.md section 7 (no training measurements)"
        if hardware.is_estimated(name)
        else (f"{shared}'s values (the same die), " if shared else "")
        + "fitted to published training runs (dse/analytic/data/calibration.yaml, benchmarks/fit_calibration.py)"
    )
    sources.update({f"calibration.{k}": f"{name}: {how}" for k in acc["calibration"]})
    return acc, sources


@dataclass
class FitResult:
    """What :func:`fit` found: the fitted accelerator, the parameters, the rows with their
    predictions and errors, the workloads' own fitted numbers and the thermal fit."""

    base: str
    accelerator: dict
    sources: dict
    parameters: pd.DataFrame  # name, unit, base, value, stderr, fitted, note
    rows: pd.DataFrame  # measurements, predictions, errors (%), set: fit | holdout
    workloads: pd.DataFrame  # workload, t_max_s, compute_share, scope
    thermal: dict | None
    files: list[str]
    notes: list[str] = field(default_factory=list)
    cost: float = 0.0


def candidates(rows: pd.DataFrame) -> list[str]:
    """The parameters the (fitted) rows can determine, by :data:`NEEDS`."""
    kind = rows["kind"].to_numpy()
    has_e = np.isfinite(rows["energy_j"].to_numpy()) | np.isfinite(rows["power_w"].to_numpy())
    known = np.isfinite(rows["gpus"].to_numpy())
    clocks = rows.loc[
        has_e & np.isin(kind, ("compute", "memory", "stage", "blocked", "training")), "clock_mhz"
    ]
    n_clocks = len(np.unique(clocks[np.isfinite(clocks)].round(1)))
    out = []
    if (kind == "idle").any() or (has_e & known & (n_clocks >= 3)).any():
        out.append("idle_w")
    if ((kind == "compute") & has_e).any() or (
        np.isin(kind, ("stage", "training")) & has_e & known
    ).any():
        out.append("a_compute")
    if (np.isin(kind, ("memory", "stage", "training")) & has_e).any():
        out.append("a_memory")
    if ((kind == "blocked") | ((kind == "training") & has_e)).any():
        out.append("a_waiting")
    if (kind == "parked").any():
        out.append("a_parked")
    if n_clocks >= 3:
        out += ["v_floor", "knee"]
    flops = np.isfinite(rows["flops"].to_numpy()) | np.isfinite(
        rows[["gemm_m", "gemm_n", "gemm_k"]].sum(axis=1, skipna=False).to_numpy()
    )
    if ((kind == "compute") & flops).any() or (kind == "training").any():
        out.append("matmul_eff_max")
    if ((kind == "memory") & np.isfinite(rows["bytes"].to_numpy())).any() or (
        kind == "training"
    ).any():
        out.append("memory_eff")
    return out


#: how far (relative) a measured setting may be from the --holdout value that names it: a
#: measured mean clock is within a few MHz of the set one, sweep points are 15+ MHz apart
HOLDOUT_TOLERANCE = 0.005


def _nearest(values: np.ndarray, target: float) -> np.ndarray:
    """The rows whose setting is within :data:`HOLDOUT_TOLERANCE` of ``target`` (at least
    0.5 of the unit): every measurement at that set clock or cap, whatever its jitter."""
    dist = np.abs(values - target)
    return np.isfinite(dist) & (dist <= max(0.5, HOLDOUT_TOLERANCE * abs(target)))


def _holdout_mask(rows: pd.DataFrame, holdout: list[str]) -> np.ndarray:
    mask = np.zeros(len(rows), dtype=bool)
    clock, cap = rows["clock_mhz"].to_numpy(dtype=float), rows["power_cap_w"].to_numpy(dtype=float)
    for token in holdout:
        t = token.strip()
        if not t:
            continue
        try:  # within 0.5% (dse profile writes the measured mean clock, 1303.7 for 1305)
            if t.lower().endswith("w"):
                hit = _nearest(cap, float(t[:-1]))
            else:
                hit = _nearest(clock, float(t.lower().removesuffix("mhz")))
        except ValueError:
            hit = rows["workload"].to_numpy() == t
        if not hit.any():
            clocks = ", ".join(f"{c:g}" for c in sorted(set(clock[np.isfinite(clock)])))
            caps = ", ".join(f"{c:g}W" for c in sorted(set(cap[np.isfinite(cap)])))
            raise DseError(
                f"no row to hold out matches '{t}'",
                field="--holdout",
                allowed=f"a clock of the rows in MHz ({clocks or 'none'}), a power cap in W "
                f"({caps or 'none'}) or a workload name: "
                + ", ".join(sorted(set(rows["workload"]))),
            )
        mask |= hit
    return mask


class _Problem:
    """The parameter vector: physical parameters, then per workload its time at f_max
    (log), clock-bound share and energy scale (log) where fitted."""

    def __init__(self, rows: pd.DataFrame, fit_mask: np.ndarray, names: list[str], acc0: dict):
        self.rows, self.fit_mask, self.acc0 = rows, fit_mask, acc0
        self.names = list(names)
        kind = rows["kind"].to_numpy()
        t_k, _ = forward.kernel_times(acc0, forward.KernelRows.of(rows), np.ones(len(rows)))
        needs_t = np.isin(kind, ("compute", "memory", "stage")) & ~np.isfinite(t_k)
        self.t_work = sorted(set(rows.loc[needs_t, "workload"]))
        self.c_work = sorted(set(rows.loc[kind == "stage", "workload"]))
        has_e = np.isfinite(rows["energy_j"].to_numpy()) | np.isfinite(rows["power_w"].to_numpy())
        self.k_work = sorted(
            set(rows.loc[has_e & ~np.isfinite(rows["gpus"].to_numpy()), "workload"])
        )
        fitted = set(rows.loc[fit_mask, "workload"])
        for w in sorted(set(self.t_work + self.c_work + self.k_work) - fitted):
            raise DseError(
                f"workload '{w}' has no rows left to fit: its time at the maximum clock, clock-bound "
                "share or energy scope are fitted from its own rows",
                field="--holdout",
                allowed="hold out some of its clocks, not all",
            )
        for w in self.c_work:
            clocks = rows.loc[
                fit_mask & (rows["workload"] == w).to_numpy(), ["clock_mhz", "power_cap_w"]
            ]
            if len(clocks.round(1).drop_duplicates()) < 2:
                raise DseError(
                    f"workload '{w}' is measured at one setting only: its clock-bound share needs "
                    "two or more clocks or power caps",
                    file=str(rows["file"].iloc[0]),
                )
        self.prior_mu = np.array([PARAMETERS[n].get(acc0) for n in names])
        self.prior_w = np.array([PRIOR_WEIGHT / PARAMETERS[n].prior for n in names])
        self.labels = (
            [*names]
            + [f"{w}: t_max_s" for w in self.t_work]
            + [f"{w}: compute_share" for w in self.c_work]
            + [f"{w}: scope" for w in self.k_work]
        )

    def start(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        rows = self.rows
        x0, lo, hi, sc = [], [], [], []
        for n in self.names:
            p = PARAMETERS[n]
            upper = (
                p.upper if np.isfinite(p.upper) else 0.95 * float(self.acc0["hardware"]["tdp_w"])
            )
            x0.append(np.clip(p.get(self.acc0), p.lower, upper))
            lo.append(p.lower), hi.append(upper), sc.append(p.scale)
        f_max = float(self.acc0["hardware"]["clock_max_mhz"])
        for w in self.t_work:
            r = rows[(rows["workload"] == w).to_numpy() & self.fit_mask]
            top = r.sort_values("clock_mhz", ascending=False, na_position="last").iloc[0]
            ratio = top["clock_mhz"] / f_max if np.isfinite(top["clock_mhz"]) else 1.0
            c = _CLOCK_BOUND_SHARE.get(top["kind"], 0.5)
            (
                x0.append(np.log(top["time_s"] / (c / ratio + 1 - c))),
                lo.append(-np.inf),
                hi.append(np.inf),
                sc.append(0.1),
            )
        for _ in self.c_work:
            x0.append(0.5), lo.append(0.0), hi.append(1.0), sc.append(0.05)
        x0, lo, hi, sc = map(np.array, (x0, lo, hi, sc))
        # energy scale: measured over predicted at the start, per workload
        if self.k_work:
            pred = self.predict(np.concatenate([x0, np.zeros(len(self.k_work))]))
            k0 = []
            for w in self.k_work:
                m = (rows["workload"] == w).to_numpy() & self.fit_mask
                e_m = np.where(np.isfinite(rows["energy_j"]), rows["energy_j"], rows["power_w"])[m]
                e_p = np.where(np.isfinite(rows["energy_j"]), pred["energy_j"], pred["power_w"])[m]
                ok = np.isfinite(e_m / e_p)
                k0.append(np.log(np.median((e_m / e_p)[ok])) if ok.any() else 0.0)
            x0 = np.concatenate([x0, k0])
            lo, hi = (
                np.concatenate([lo, np.full(len(k0), -np.inf)]),
                np.concatenate([hi, np.full(len(k0), np.inf)]),
            )
            sc = np.concatenate([sc, np.full(len(k0), 0.1)])
        return x0, lo, hi, sc

    def accelerator(self, x: np.ndarray) -> dict:
        acc = copy.deepcopy(self.acc0)
        for n, v in zip(self.names, x, strict=False):
            PARAMETERS[n].set(acc, v)
        return acc

    def workload_values(self, x: np.ndarray) -> tuple[dict, dict, dict]:
        i = len(self.names)
        t = dict(zip(self.t_work, np.exp(x[i : i + len(self.t_work)]), strict=True))
        i += len(self.t_work)
        c = dict(zip(self.c_work, x[i : i + len(self.c_work)], strict=True))
        i += len(self.c_work)
        k = dict(zip(self.k_work, np.exp(x[i : i + len(self.k_work)]), strict=True))
        return t, c, k

    def predict(self, x: np.ndarray) -> pd.DataFrame:
        t, c, k = self.workload_values(x)
        w = self.rows["workload"]
        t_max = w.map(t).to_numpy(dtype=float)
        share = w.map(c).to_numpy(dtype=float)
        kinds = self.rows["kind"].to_numpy()
        share = np.where(kinds == "compute", 1.0, np.where(kinds == "memory", 0.0, share))
        gpus = self.rows["gpus"].to_numpy(dtype=float)
        scope = np.where(np.isfinite(gpus), gpus, w.map(k).to_numpy(dtype=float))
        with np.errstate(all="ignore"):
            return forward.predict(
                self.accelerator(x),
                self.rows,
                t_max,
                share,
                np.where(np.isfinite(scope), scope, 1.0),
            )

    def residuals(
        self, x: np.ndarray, mask: np.ndarray | None = None, *, priors: bool = True
    ) -> np.ndarray:
        """Log errors of the measured quantities, then (``priors``) the pull towards the base."""
        mask = self.fit_mask if mask is None else mask
        pred = self.predict(x)
        r = self.rows
        parts = []
        timed = np.isin(r["kind"].to_numpy(), ("compute", "memory", "stage", "training"))
        for q in ("time_s", "energy_j", "power_w"):
            meas = r[q].to_numpy(dtype=float)
            m = mask & np.isfinite(meas) & (timed if q == "time_s" else True)
            with np.errstate(all="ignore"):
                res = np.log(pred[q].to_numpy(dtype=float)[m] / meas[m])
            parts.append(np.where(np.isfinite(res), res, 10.0))
        if priors:
            parts.append(self.prior_w * (x[: len(self.names)] - self.prior_mu))
        return np.concatenate(parts)


def _jacobian(f, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray) -> np.ndarray:
    f0 = f(x)
    cols = []
    for j in range(len(x)):
        h = 1e-6 * scale[j]
        step = h if x[j] + h <= hi[j] else -h
        xj = x.copy()
        xj[j] += step
        cols.append((f(xj) - f0) / step)
    return np.column_stack(cols) if cols else np.zeros((len(f0), 0))


def _identifiable(problem: _Problem, x0, lo, hi, sc) -> list[str]:
    """The physical parameters a rank-revealing QR of the scaled Jacobian of the measured
    quantities (not the priors, which would make every parameter look determined) at the
    start keeps."""
    jac = _jacobian(lambda x: problem.residuals(x, priors=False), x0, lo, hi, sc) * sc
    if jac.shape[1] == 0:
        return []
    # scipy is imported by the fit alone: `dse describe --accelerator` does without it
    from scipy.linalg import qr

    _, r, piv = qr(jac, mode="economic", pivoting=True)
    d = np.abs(np.diag(r))
    rank = int((d > 1e-6 * d[0]).sum()) if len(d) and d[0] > 0 else 0
    kept = set(piv[:rank].tolist())
    n_phys = len(problem.names)
    lost = [problem.labels[j] for j in range(n_phys, len(problem.labels)) if j not in kept]
    if lost:
        raise DseError(
            f"the measurements cannot determine {lost[0]}",
            field="measurements",
            allowed="more clocks or power caps per workload, or its FLOPs/bytes",
        )
    return [problem.names[j] for j in range(n_phys) if j in kept]


def fit(
    rows: pd.DataFrame,
    base: str,
    *,
    holdout: list[str] = (),
    only: list[str] | None = None,
    fix: list[str] = (),
    cooling: str = "air",
) -> FitResult:
    """Fit accelerator ``base``'s parameters to ``rows`` (from :func:`.readers.read`)."""
    rows = _one_gpu_by_default(rows)
    base = hardware.canonical_accelerator(base) or base  # a100-80gb: A100-80GB
    acc0, sources0 = base_accelerator(base)
    _check_against_base(rows, acc0, base)
    held = _holdout_mask(rows, list(holdout))
    fit_mask = ~held
    if not fit_mask.any():
        raise DseError("every row is held out", field="--holdout")
    names = _names_to_fit(rows[fit_mask], only, fix)
    notes = []
    problem = _Problem(rows, fit_mask, names, acc0)
    x0, lo, hi, sc = problem.start()
    kept = _identifiable(problem, x0, lo, hi, sc)
    for n in names:
        if n not in kept:
            notes.append(
                f"{n}: the measurements cannot tell it apart from the others; kept at {base}'s value"
            )
    if kept != names:
        problem = _Problem(rows, fit_mask, kept, acc0)
        x0, lo, hi, sc = problem.start()
    res, stderr = _solve(problem, x0, lo, hi, sc)
    if len(stderr) and not np.isfinite(stderr).all():
        notes.append(
            "no more measured quantities than fitted parameters: no standard errors, and the values "
            f"lean on {base}'s (the priors); measure more clocks, caps or workloads"
        )
    if not res.success:
        notes.append(f"the optimiser stopped: {res.message}")
    x = res.x
    acc = problem.accelerator(x)
    params = _parameter_table(acc0, acc, names, kept, x, lo, hi, stderr, only, fix)
    thermal = _thermal(rows, fit_mask, cooling)
    if thermal is not None and thermal["r_k_per_w"] is None:  # temperatures within noise of flat
        notes.append(
            f"thermal: the temperatures do not rise with the power ({thermal['slope_k_per_w']:.2g} K/W "
            f"over {thermal['rows']} rows, within noise of flat); {base}'s thermal resistance kept"
        )
        thermal = None
    if thermal is not None:
        acc["power"][f"r_{cooling}_k_per_w"] = thermal["r_k_per_w"]
    files = list(dict.fromkeys(rows["file"]))
    sources = _sources(sources0, params, thermal, cooling, files)
    return FitResult(
        base=base,
        accelerator=acc,
        sources=sources,
        parameters=params,
        rows=_rows_with_predictions(rows, held, problem.predict(x)),
        workloads=_workload_table(problem, x),
        thermal=thermal,
        files=files,
        notes=notes,
        cost=float(res.cost),
    )


#: a measured power per accelerator above this many TDPs is taken for a wrong unit or scope
POWER_OVER_TDP = 1.5
#: GPUs a counter of unknown scope may cover at most (a node's) before it is taken for a wrong unit
NODE_GPUS = 8
#: clocks below / above these multiples of the part's lowest / highest clock are taken for a
#: wrong unit (several catalog clock ranges are estimates, so only a gross slip is refused)
CLOCK_SLACK = (0.5, 1.5)


def _check_against_base(rows: pd.DataFrame, acc: dict, base: str) -> None:
    """Refuse rows that cannot be measurements of ``base``: another accelerator named in the
    file, a clock far outside the part's range (:data:`CLOCK_SLACK`), a power per
    accelerator far above its TDP (a wrong unit, or a node's power without its GPU count) or
    a power cap below its idle power; and training runs the model cannot run at all
    (unknown model, a layout that does not divide), which would otherwise be fitted as
    predictions of nothing."""
    hw = acc["hardware"]
    f_min, f_max = float(hw["clock_min_mhz"]), float(hw["clock_max_mhz"])
    tdp, idle = float(hw["tdp_w"]), float(hw["idle_w"])

    def refuse(mask, message, column, values, allowed):
        i = int(np.flatnonzero(mask)[0])
        v = values[i]
        raise DseError(
            message,
            file=str(rows["file"].iloc[i]),
            field=f"line {rows['line'].iloc[i]}, column {column}",
            value=float(f"{v:.4g}") if isinstance(v, float | np.floating) else str(v),
            allowed=allowed,
        )

    names, part = {base}, base
    for _ in range(
        16
    ):  # a profile's base may itself be a profile: every name up to the catalog part
        prof = profiles.find(part) if part not in hardware.catalog() else None
        if prof is None or not prof.base:
            break
        names |= {prof.name, str(prof.base)}
        part = str(prof.base)
    label = (
        rows["accelerator"].fillna("").astype(str).to_numpy()
        if "accelerator" in rows
        else np.full(len(rows), "")
    )
    other = np.array(
        [bool(x) and (hardware.canonical_accelerator(x) or x) not in names for x in label]
    )
    if other.any():
        refuse(
            other,
            f"measured on another accelerator than the one calibrated ({base})",
            "accelerator",
            label,
            f"rows of {base} only (calibrate each part on its own measurements)",
        )
    clock = rows["clock_mhz"].to_numpy(dtype=float)
    outside = np.isfinite(clock) & (
        (clock < CLOCK_SLACK[0] * f_min) | (clock > CLOCK_SLACK[1] * f_max)
    )
    if outside.any():
        refuse(
            outside,
            f"clock far outside {base}'s range ({f_min:g} to {f_max:g} MHz)",
            "clock_mhz",
            clock,
            f"{CLOCK_SLACK[0] * f_min:g} to {CLOCK_SLACK[1] * f_max:g} MHz (a clock in GHz goes in a "
            "clock_ghz column)",
        )
    gpus = rows["gpus"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        energy_w = rows["energy_j"].to_numpy(dtype=float) / rows["time_s"].to_numpy(dtype=float)
    given = rows["power_w"].to_numpy(dtype=float)
    # a counter of unknown scope (an empty gpus cell) is fitted; it may cover a node
    per_gpu = np.where(np.isfinite(given), given, energy_w) / np.where(
        np.isfinite(gpus), gpus, NODE_GPUS
    )
    high = np.isfinite(per_gpu) & (per_gpu > POWER_OVER_TDP * tdp)
    if high.any():
        refuse(
            high,
            f"power per accelerator (W) more than {POWER_OVER_TDP:g} x {base}'s TDP ({tdp:g} W)",
            "power or energy",
            per_gpu,
            "power per accelerator in W or kW; in a sweep, a counter over several GPUs says how many in its "
            "gpus column (empty: the fit estimates it)",
        )
    cap = rows["power_cap_w"].to_numpy(dtype=float)
    low = np.isfinite(cap) & (cap < idle)
    if low.any():
        refuse(
            low,
            f"power cap below {base}'s idle power ({idle:g} W)",
            "power_cap_w",
            cap,
            f"a cap between {idle:g} and {tdp:g} W (a cap in kW goes in a power_cap_kw column)",
        )
    over = np.isfinite(cap) & (
        cap > POWER_OVER_TDP * tdp
    )  # no board takes such a cap: a unit slip (mW)
    if over.any():
        refuse(
            over,
            f"power cap more than {POWER_OVER_TDP:g} x {base}'s TDP ({tdp:g} W)",
            "power_cap_w",
            cap,
            f"a cap between {idle:g} and {tdp:g} W (in W; a cap in kW goes in a power_cap_kw column)",
        )
    train = (rows["kind"] == "training").to_numpy()
    if train.any():
        reason = np.full(len(rows), "", dtype=object)
        reason[train] = (
            forward.training_runs(acc, rows[train])["reason"].fillna("").astype(str).to_numpy()
        )
        cannot = train & (reason != "") & (reason != "does not fit in accelerator memory")
        if cannot.any():
            refuse(
                cannot,
                "the model cannot run this training run",
                "the run's configuration",
                reason,
                "a run the model can evaluate (dse evaluate gives the same reason)",
            )


def _one_gpu_by_default(rows: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``rows`` where a power-state row without a GPU count reads one GPU."""
    rows = rows.reset_index(drop=True).copy()
    for k in ("idle", "parked", "blocked", "training"):
        m = (rows["kind"] == k).to_numpy() & ~np.isfinite(rows["gpus"].to_numpy())
        rows.loc[m, "gpus"] = 1.0  # one GPU's reading unless the row says otherwise
    return rows


def _names_to_fit(fit_rows: pd.DataFrame, only: list[str] | None, fix: list[str]) -> list[str]:
    """The parameters the rows can determine, narrowed to ``only`` and without ``fix``."""
    for name in [*(only or []), *fix]:
        if name not in PARAMETERS:
            raise DseError(
                f"unknown parameter '{name}'", field="--fit/--fix", allowed=", ".join(PARAMETERS)
            )
    both = [n for n in (only or []) if n in fix]
    if both:
        raise DseError(
            f"'{both[0]}' is both fitted (--fit) and fixed (--fix)",
            field="--fix",
            value=both[0],
            allowed="each parameter in one of them",
        )
    names = candidates(fit_rows)
    if only:
        names = [n for n in names if n in only] + [n for n in only if n not in names]
    return [n for n in names if n not in fix]


def _solve(problem: _Problem, x0, lo, hi, sc):
    """Bounded least squares (trust-region reflective) and each parameter's standard error
    from the Jacobian at the solution, scaled by the residual variance."""
    n_res = len(problem.residuals(x0)) - len(problem.names)  # measured quantities, not priors
    if n_res == 0:
        raise DseError("no measured quantity to fit", field="measurements")
    from scipy.optimize import least_squares

    res = least_squares(
        problem.residuals,
        x0,
        bounds=(lo, hi),
        x_scale=sc,
        method="trf",
        max_nfev=200 * len(x0) + 200,
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
    )
    dof = n_res - len(res.x)
    jac = _jacobian(problem.residuals, res.x, lo, hi, sc)
    s2 = 2 * res.cost / dof if dof > 0 else np.nan
    with np.errstate(all="ignore"):
        cov = np.linalg.pinv(jac.T @ jac) * s2
    stderr = np.sqrt(np.clip(np.diag(cov), 0, None)) if len(res.x) else np.array([])
    return res, stderr


def _parameter_table(
    acc0: dict,
    acc: dict,
    names: list[str],
    kept: list[str],
    x,
    lo,
    hi,
    stderr,
    only: list[str] | None = None,
    fix: list[str] = (),
) -> pd.DataFrame:
    """One row per parameter: its base and fitted value, unit, standard error and a note
    (why one is not fitted: held by --fix, left out by --fit, or what rows it needs)."""
    table = []
    for n, p in PARAMETERS.items():
        i = kept.index(n) if n in kept else None
        at_bound = i is not None and (np.isclose(x[i], lo[i]) or np.isclose(x[i], hi[i]))
        table.append(
            {
                "name": n,
                "unit": p.unit,
                "base": p.get(acc0),
                "value": p.get(acc),
                "stderr": float(stderr[i]) if i is not None else np.nan,
                "fitted": i is not None,
                "note": _parameter_note(n, i is not None, at_bound, names, only, fix),
            }
        )
    return pd.DataFrame(table)


def _parameter_note(name: str, fitted: bool, at_bound: bool, names, only, fix) -> str:
    """Why parameter ``name`` is or is not fitted, for :func:`_parameter_table`'s note."""
    if fitted:
        return "at its bound" if at_bound else ""
    if name in fix:
        return "held at the base value (--fix)"
    if only and name not in only:
        return "not asked for (--fit)"
    if name in names:
        return "not determined by these rows"
    return f"needs {NEEDS[name]}"


def _rows_with_predictions(
    rows: pd.DataFrame, held: np.ndarray, pred: pd.DataFrame
) -> pd.DataFrame:
    """The measured rows with their set (fit or holdout), predictions and errors (%)."""
    out = rows.drop(columns=["config"]).copy()
    out["set"] = np.where(held, "holdout", "fit")
    for q in ("time_s", "energy_j", "power_w", "clock_mhz"):
        out[f"{q}_pred"] = pred[q].to_numpy()
    with np.errstate(all="ignore"):
        for q in ("time_s", "energy_j", "power_w"):
            out[f"{q}_err_pct"] = (out[f"{q}_pred"] / out[q] - 1.0) * 100
    return out


def _workload_table(problem: _Problem, x) -> pd.DataFrame:
    """Each workload's fitted full-clock time, compute share and counter scope."""
    t, c, k = problem.workload_values(x)
    works = pd.DataFrame({"workload": sorted(set(t) | set(c) | set(k))})
    works["t_max_s"], works["compute_share"], works["scope"] = (
        works["workload"].map(d) for d in (t, c, k)
    )
    return works


#: inlets (degC) a fitted junction-to-inlet line may extrapolate to: chilled water to a hot
#: aisle (ASHRAE's liquid-cooling classes W17-W45 and air classes A1-A4 reach 45 degC)
INLET_RANGE_C = (0.0, 60.0)


def _thermal(rows: pd.DataFrame, fit_mask: np.ndarray, cooling: str) -> dict | None:
    """Steady state T = T_inlet + R P over the rows with a temperature and a power (the
    inlet fitted too unless ``inlet_c`` is given): linear least squares with uncertainties."""
    p = np.where(np.isfinite(rows["power_w"]), rows["power_w"], rows["energy_j"] / rows["time_s"])
    p = p / np.where(np.isfinite(rows["gpus"]), rows["gpus"], 1.0)
    temp, inlet = rows["temp_c"].to_numpy(dtype=float), rows["inlet_c"].to_numpy(dtype=float)
    m = fit_mask & np.isfinite(temp) & np.isfinite(p)
    if m.sum() < 2:
        return None
    known = np.isfinite(inlet[m]).all()
    if known:
        a = p[m][:, None]
        y = temp[m] - inlet[m]
    else:
        a = np.column_stack([p[m], np.ones(m.sum())])
        y = temp[m]
    files = ", ".join(dict.fromkeys(rows["file"][m].astype(str)))
    if np.ptp(p[m]) < 1e-6 and not known:
        raise DseError(
            "temperatures at one power only cannot separate the inlet from the thermal resistance",
            field="temp_c",
            file=files,
            allowed="temperatures at two or more power levels, or an inlet_c column",
        )
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ coef
    dof = len(y) - a.shape[1]
    s2 = float(resid @ resid / dof) if dof > 0 else np.nan
    cov = np.linalg.pinv(a.T @ a) * s2
    if not coef[0] > 1e-6:  # flat or falling: no resistance to report
        if coef[0] < -2 * np.sqrt(
            max(cov[0, 0], 0)
        ):  # clearly falling: not junction temperatures in degC
            raise DseError(
                f"the temperatures fall as the power rises (fitted thermal resistance {coef[0]:.3g} "
                f"K/W over {int(m.sum())} rows)",
                field="temp_c",
                file=files,
                allowed="junction temperatures in degC that rise with the power, or no temp_c column",
            )
        return {"r_k_per_w": None, "rows": int(m.sum()), "slope_k_per_w": float(coef[0])}
    if not known and not INLET_RANGE_C[0] <= coef[1] <= INLET_RANGE_C[1]:
        raise DseError(
            f"the temperatures imply an inlet of {coef[1]:.1f} degC at zero power (thermal resistance "
            f"{coef[0]:.3g} K/W over {int(m.sum())} rows): not an air or coolant inlet",
            field="temp_c",
            file=files,
            allowed=f"junction temperatures that extrapolate to an inlet of {INLET_RANGE_C[0]:g} to "
            f"{INLET_RANGE_C[1]:g} degC, or an inlet_c column",
        )
    return {
        "r_k_per_w": float(coef[0]),
        "r_stderr": float(np.sqrt(max(cov[0, 0], 0))),
        "cooling": cooling,
        "inlet_c": None if known else float(coef[1]),
        "rows": int(m.sum()),
        "rms_c": float(np.sqrt(np.mean(resid**2))),
    }


def _sources(
    base_sources: dict, params: pd.DataFrame, thermal: dict | None, cooling: str, files: list[str]
) -> dict:
    """Where each number of the fitted accelerator comes from: the base's sources, with the
    fitted numbers (value +/- standard error) replaced by the files they were fitted to."""
    out = dict(base_sources)
    where = ", ".join(files)

    def shown(p) -> str:
        err = f" +/- {p['stderr']:.2g}" if np.isfinite(p["stderr"]) else ""
        unit = "" if p["unit"] == "1" else f" {p['unit']}"
        return f"{p['value']:.4g}{err}{unit}"

    vf = []
    for _, p in params[params["fitted"]].iterrows():
        if p["name"] in ("v_floor", "knee"):
            vf.append(f"{p['name']} {shown(p)}")
        else:
            out[".".join(PARAMETERS[p["name"]].path)] = (
                f"fitted by dse calibrate to {where} ({shown(p)})"
            )
    if vf:
        out["power.vf_curve"] = f"fitted by dse calibrate to {where} ({', '.join(vf)})"
    if thermal is not None:
        out[f"power.r_{cooling}_k_per_w"] = (
            f"fitted by dse calibrate to the temperatures in {where} "
            f"({thermal['r_k_per_w']:.4g} +/- {thermal['r_stderr']:.2g} K/W)"
        )
    return out
