"""Fit the time model's few physical parameters on every reference source together, and
measure how well they generalise: leave-one-source-out and a held-out set never fitted.

``python benchmarks/fit_calibration.py`` (about 15 minutes on 2 idle cores: 14 on 2026-11-29) prints these tables and
changes nothing on disk:

1. in-sample: the parameters fitted on all sources, and each source's error with them;
2. leave-one-source-out (LOSO): for each source, the parameters fitted on the *other*
   sources from the same data-independent start, and the error on the source left out;
3. held-out: the published runs in ``dse/analytic/data/reference/heldout/`` (never used
   in any fit, here or anywhere), predicted with the in-sample parameters, per source and
   per training stack.

``--write`` writes the in-sample parameters to ``dse/analytic/data/calibration.yaml``.
``--scan host_dispatch_us=300,600,900 --leave vtrain-single-node`` shows what the other
sources know about one parameter (docs/model.md, section 7).

Sources are the ``source`` column of the time-model rows of the reference tables
(``dse/analytic/data/reference/*.csv``: vTrain multi- and single-node, llm-foundry,
NeMo 24.07, torchtitan; the Perseus rows are a clock sweep for the energy model and take
no part, and the tables in ``validation.CHECK_TABLES``, the published mixture-of-experts
throughput, are a check that is never fitted). The parameters (:data:`SHARED`, and :data:`PER_ACCELERATOR` for each fitted
accelerator family) are physical constants shared by every row of every source: no
per-row, per-model or per-source term. The objective is a robust (soft-L1) least-squares
fit of ``log(predicted / measured iteration time)`` in which every source weighs the same
(its rows weighted ``1 / sqrt(rows)``), plus weak priors that pull each parameter towards
its published or physically typical value (:data:`PRIOR`; a parameter no remaining source
constrains, e.g. the fp8 efficiency when NeMo is left out, stays near it). Every fit
starts from the priors, not from the shipped values.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

from dse.analytic import model as analytic_model
from dse.analytic import validation
from dse.analytic.time import hardware, workload
from dse.analytic.time import model as time_model

REFERENCE = Path(str(files("dse.analytic.data").joinpath("reference")))
HELDOUT = REFERENCE / "heldout"
#: accelerator families with measurements: the parameters of the first name serve all
FAMILIES = {
    "A100": ("A100-80GB", "A100-40GB"),
    "H100": ("H100-SXM", "H800", "H100-SXM-96GB"),
    # the 2024-26 tables (NEW_TABLES): one MXU efficiency for TPU v5e and v5p (the same XLA
    # compiler and MXU design; MaxText's own tables), one fp8 efficiency ratio for the
    # Blackwell die (B200 and GB200: the same die, NeMo / Megatron-Bridge tables)
    "TPU": ("TPU-v5e", "TPU-v5p"),
    "Blackwell": ("B200", "GB200"),
}
#: the 2024-26 tables (issue 32): their parts' parameters (NEW_FAMILIES) are fitted on them
#: in a second stage with every first-stage parameter held (the A100 / H100 fit unchanged)
NEW_TABLES = ("maxtext_tpu.csv", "nemo_megatron_bridge.csv", "olmo_core.csv", "torchtitan.csv")
NEW_FAMILIES = ("TPU", "Blackwell")
SHARED = (
    "matmul_half_gflop",
    "matmul_half_k",
    "kernel_overhead_us",
    "host_dispatch_us",
    "collective_call_us",
    "collective_latency_us",
    "attention_eff",
    "overlap_tax",
    "eager_elementwise_factor",
)
#: shared by every part, fitted in the second stage: only the 2024-26 tables state their
#: software's release (``software_release``), and only there do releases come within months of
#: an architecture's first shipments (B200 and GB200 in NeMo 25.02-25.07)
NEW_SHARED = ("maturity_deficit", "maturity_months")
PER_ACCELERATOR = {
    "A100": ("matmul_eff_max", "memory_eff", "collective_eff"),
    "H100": ("matmul_eff_max", "fp8_matmul_ratio", "memory_eff", "collective_eff"),
    # bf16 only; no TPU matmul benchmark is published. scaleout_latency_us: the per-step
    # latency of the DCN between slices (transfers through the hosts; no figure published),
    # identified by the MaxText v5e rows at 1 to 32 slices (docs/model.md, section 7)
    "TPU": ("matmul_eff_max", "scaleout_latency_us"),
    "Blackwell": ("fp8_matmul_ratio",),  # every Blackwell row is fp8: its bf16 is not identified
}
# (prior value, prior scale (in e-folds for a log-space prior), lower bound, upper bound,
# log-space prior); sources in docs/model.md, section 7
PRIOR = {
    "matmul_half_gflop": (
        10.0,
        1.0,
        0.01,
        1000.0,
        True,
    ),  # a few-GFLOP GEMM loses half to prologue/tail
    "matmul_half_k": (32.0, 1.0, 1.0, 4096.0, True),  # a 128x128 tile streams K in 32-64-wide steps
    "kernel_overhead_us": (10.0, 1.0, 0.01, 2000.0, True),  # ~10 us launch and sync per layer pass
    "host_dispatch_us": (
        600.0,
        1.0,
        1.0,
        20000.0,
        True,
    ),  # ~35 eager ops per layer pass at ~10-25 us each
    "collective_call_us": (10.0, 1.0, 0.1, 500.0, True),  # NCCL kernel launch and setup, ~10 us
    "collective_latency_us": (
        2.0,
        1.0,
        0.1,
        500.0,
        True,
    ),  # NCCL per-step latency over NVLink, ~1-2 us
    "attention_eff": (
        0.75,
        0.2,
        0.3,
        1.0,
        False,
    ),  # FlashAttention-2: 50-73% of A100 peak vs ~87% GEMM
    "overlap_tax": (0.2, 0.2, 0.0, 1.0, False),  # overlapped NCCL kernels slow GEMMs ~10-30%
    "eager_elementwise_factor": (
        1.5,
        0.5,
        1.0,
        4.0,
        False,
    ),  # unfused norm, activation, residual kernels
    "matmul_eff_max": (None, 0.1, 0.3, 0.95, False),  # prior: the accelerator's MAMF / peak
    "fp8_matmul_ratio": (None, 0.1, 0.5, 1.0, False),  # prior: its fp8 / bf16 MAMF efficiency
    "memory_eff": (0.85, 0.15, 0.3, 1.0, False),  # ~90% of peak HBM bandwidth in streaming kernels
    "collective_eff": (
        0.75,
        0.2,
        0.2,
        1.0,
        False,
    ),  # NCCL bus bandwidth / link rate: 0.77 NVLink3, 0.86 HDR
    # a host-mediated scale-out step (assumed ~100 us: a TCP round trip between hosts plus
    # the host interrupt and DMA of each send / recv; the InfiniBand NCCL step is 5 us). No
    # figure is published: a weak prior (scale 10 in log space), the rows set it
    "scaleout_latency_us": (100.0, 10.0, 1.0, 20000.0, True),
    # early software on a new architecture (dse/analytic/time/software.py): a weak prior of a
    # 10% GEMM shortfall when the parts ship, falling by e in 6 months (the same B200 recipe
    # gained 15% from NeMo 25.02 to 25.11, nine months; the tables set both)
    "maturity_deficit": (0.1, 0.1, 0.0, 0.5, False),
    "maturity_months": (6.0, 1.0, 0.5, 60.0, True),
}
PRIOR_WEIGHT = 0.05
#: log-ratio size (about 5%) above which a row's residual counts linearly, not quadratically
ROBUST_SCALE = 0.05
#: typical size of a change in each parameter (the optimizer's variable scaling)
SCALE = {
    "matmul_half_gflop": 5.0,
    "matmul_half_k": 20.0,
    "kernel_overhead_us": 10.0,
    "host_dispatch_us": 200.0,
    "collective_call_us": 5.0,
    "collective_latency_us": 2.0,
    "attention_eff": 0.1,
    "overlap_tax": 0.1,
    "eager_elementwise_factor": 0.3,
    "matmul_eff_max": 0.05,
    "fp8_matmul_ratio": 0.05,
    "memory_eff": 0.1,
    "collective_eff": 0.1,
    "scaleout_latency_us": 100.0,
    "maturity_deficit": 0.05,
    "maturity_months": 3.0,
}
MAX_NFEV = 300
#: starting host dispatch times, as multiples of its prior (see :func:`fit`)
HOST_STARTS = (1.0, 1.5, 2.0)
#: starting DCN step latencies of the TPU family, as multiples of its prior
DCN_STARTS = (1.0, 10.0)
#: relative step of the finite-difference Jacobian
DIFF_STEP = 1e-2


def names() -> list[str]:
    """The fitted parameters, in vector order: shared, then per accelerator family."""
    return [
        *SHARED,
        *NEW_SHARED,
        *(f"{fam}.{p}" for fam, ps in PER_ACCELERATOR.items() for p in ps),
    ]


def second_stage(name: str) -> bool:
    """Whether parameter ``name`` is fitted in the second stage, on the 2024-26 tables."""
    return name in NEW_SHARED or name.rpartition(".")[0] in NEW_FAMILIES


def prior(name: str) -> tuple[float, float, float, float, bool]:
    fam, _, param = name.rpartition(".")
    mu, scale, lo, hi, log = PRIOR[param]
    if mu is None:  # from the published matmul benchmark of the family's first part
        part = FAMILIES[fam][0]
        if hardware.mamf_efficiency(part) is None:  # none published: the estimated rule,
            mu, scale = hardware.estimated_efficiencies(part)[param], 3.0 * scale  # held weakly
        else:
            mu = (
                hardware.mamf_efficiency(part)
                if param == "matmul_eff_max"
                else hardware.mamf_efficiency(part, "fp8") / hardware.mamf_efficiency(part)
            )
    return mu, scale, lo, hi, log


def to_calibration(x) -> dict:
    """The calibration.yaml content for parameter vector ``x``."""
    values = dict(zip(names(), (float(v) for v in x), strict=True))
    shipped = hardware.calibration()["shared"]
    shared = {k: values[k] if k in values else shipped[k] for k in hardware.SHARED_FIELDS}
    fitted = {}
    for fam, parts in FAMILIES.items():
        own = {p: values[f"{fam}.{p}"] for p in PER_ACCELERATOR[fam]}
        for part in parts:
            if fam in NEW_FAMILIES:  # the fields not fitted: the estimated rule's
                rule = hardware.estimated_efficiencies(part)
                fitted[part] = {
                    **{k: own.get(k, round(rule[k], 4)) for k in hardware.ACCELERATOR_FIELDS},
                    **{k: own[k] for k in hardware.PART_OVERRIDES if k in own},
                }
            else:
                fitted[part] = {**own, "fp8_matmul_ratio": own.get("fp8_matmul_ratio", 1.0)}
    return {"shared": shared, "fitted": fitted}


@contextmanager
def calibrated(x):
    """The model evaluates with the calibration of vector ``x`` inside the block."""
    original = hardware.calibration
    cal = to_calibration(x)
    hardware.calibration = lambda: cal
    hardware._row_of.cache_clear()  # rows are cached with the calibration in them
    try:
        yield
    finally:
        hardware.calibration = original
        hardware._row_of.cache_clear()


class Source:
    """The time-model rows of one source, converted to model inputs once."""

    def __init__(self, name: str, rows: pd.DataFrame, file: str) -> None:
        self.name, self.rows = name, rows.reset_index(drop=True)
        self.file = Path(file).name
        self.cfg = validation.table_to_config(self.rows, file=file)
        seq = workload.resolve_shape(self.cfg["model"], self.cfg).seq_len
        self.tokens = self.cfg["global_batch_size"] * seq
        self.quantity = self.rows["measured_quantity"].to_numpy(dtype=object)
        self.measured = pd.to_numeric(self.rows["measured_value"]).to_numpy(dtype=float)
        # a row run under a power limit (its power_cap_w, or a part whose board limit is
        # below its die's full-clock draw) is timed at the clock the limit allows: the whole
        # evaluator, as validate-model and a study time it; the rest by the time model alone
        # (the same step at the maximum clock, faster)
        parts = hardware.catalog()
        limited = [
            parts.get(a, {}).get("power_limit_w", np.inf) < parts.get(a, {}).get("tdp_w", 0.0)
            for a in self.cfg["accelerator"]
        ]
        self.capped = bool(np.isfinite(self.cfg["power_cap_w"]).any() or any(limited))

    def log_ratio(self) -> np.ndarray:
        """log(predicted / measured iteration time) per row (NaN where infeasible)."""
        with np.errstate(all="ignore"):
            if self.capped:
                res = analytic_model.evaluate(self.cfg)
                step, mfu = res["step_time_s"], res["mfu"]
                ok = np.asarray(res["feasible"], dtype=bool)
            else:
                r = time_model.evaluate(self.cfg)
                step, mfu, ok = r.step_time_s, r.mfu, r.reason_code == 0
            measured_step = np.where(
                self.quantity == "iteration_time_s",
                self.measured,
                np.where(
                    self.quantity == "tokens_per_s_per_gpu",
                    self.tokens / (self.measured * self.cfg["num_accelerators"]),
                    step * mfu / self.measured,
                ),
            )
            return np.where(ok, np.log(step / measured_step), np.nan)


def load_sources(folder: Path) -> list[Source]:
    out = []
    for path in sorted(folder.glob("*.csv")):
        if path.name in validation.CHECK_TABLES:  # checks of the model, never fitted
            continue
        df = validation.read_table(path)
        df = df[df["measured_quantity"].isin(validation.TIME_QUANTITIES)]
        for name, rows in df.groupby("source", sort=False):
            out.append(Source(str(name), rows, str(path)))
    return out


def robust(r: np.ndarray, n: int) -> np.ndarray:
    """Residuals whose squares sum, over a source's ``n`` rows, to the source's mean soft-L1
    loss of the log ratios ``r``: quadratic below :data:`ROBUST_SCALE`, linear above, so an
    outlier row pulls no harder than its size and every source weighs the same."""
    c = ROBUST_SCALE
    return np.sign(r) * np.sqrt(2.0 * c * c * (np.sqrt(1.0 + (r / c) ** 2) - 1.0) / n)


def source_residuals(s: Source) -> np.ndarray:
    """A source's robust residuals (an infeasible row counts as a large miss)."""
    return robust(np.nan_to_num(s.log_ratio(), nan=1.0), len(s.rows))


def fit(
    sources: list[Source], max_nfev: int = MAX_NFEV, pinned: dict[str, float] | None = None
) -> np.ndarray:
    """Robust least squares over ``sources`` (each weighs the same) with weak priors;
    ``pinned`` parameters are held at the given values."""
    ps = [prior(n) for n in names()]
    for name, value in (pinned or {}).items():  # held: its bounds closed around the value
        ps[names().index(name)] = (value, 1.0, value * (1 - 1e-6), value * (1 + 1e-6), True)
    x0 = np.array([p[0] for p in ps])
    lo, hi = np.array([p[2] for p in ps]), np.array([p[3] for p in ps])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)

    def resid(x):
        with calibrated(x):
            parts = [source_residuals(s) for s in sources]
        pri = [
            PRIOR_WEIGHT * ((np.log(v) - np.log(mu)) / scale if log else (v - mu) / scale)
            for v, (mu, scale, _, _, log) in zip(x, ps, strict=True)
        ]
        return np.concatenate([*parts, np.array(pri)])

    # the host floor is a max(): its kink hides from a local derivative, so the fit starts from
    # several host dispatch times (the prior times HOST_STARTS) and keeps the best; finite
    # differences of DIFF_STEP (relative) see the kink. The DCN step latency is flat near its
    # prior (hidden behind compute until the slices are many): it starts from DCN_STARTS too
    best = None
    starts = [
        (names().index(n), factor)
        for n, factors in (
            ("host_dispatch_us", HOST_STARTS),
            ("TPU.scaleout_latency_us", DCN_STARTS),
        )
        if n not in (pinned or {})
        for factor in factors
    ] or [(0, 1.0)]
    for i_start, factor in starts:
        start = x0.copy()
        start[i_start] = np.clip(x0[i_start] * factor, lo[i_start] + 1e-9, hi[i_start] - 1e-9)
        res = least_squares(
            resid,
            start,
            bounds=(lo, hi),
            x_scale=np.array([SCALE[n.rpartition(".")[2]] for n in names()]),
            max_nfev=max_nfev,
            diff_step=DIFF_STEP,
        )
        if best is None or res.cost < best.cost:
            best = res
    return best.x


def scan(
    sources: list[Source], left_out: str, param: str, values: list[float], max_nfev: int
) -> str:
    """What the other sources know about ``param``: for each value, the fit of the sources
    but ``left_out`` with ``param`` held there, its loss per source (flat: the sources carry
    no information on it, so a leave-one-source-out prediction of ``left_out`` follows the
    prior) and the error on ``left_out``."""
    rest = [s for s in sources if s.name != left_out]
    held = [s for s in sources if s.name == left_out]
    if not held or len(rest) == len(sources) or param not in names():
        raise SystemExit(
            f"--scan: no source {left_out!r} or no parameter {param!r} ({', '.join(names())})"
        )
    lines = [
        f"{param} held, fitted without {left_out}",
        "| value | "
        + " | ".join(f"loss {s.name}" for s in rest)
        + f" | {left_out} median / median signed |",
        "|---:|" + "---:|" * (len(rest) + 1),
    ]
    for v in values:
        x = fit(rest, max_nfev, pinned={param: v})
        with calibrated(x):
            loss = [float((source_residuals(s) ** 2).sum()) for s in rest]
        err = errors(x, held)[left_out] * 100
        err = err[np.isfinite(err)]
        lines.append(
            f"| {v:g} | "
            + " | ".join(f"{c * 1e4:.2f}e-4" for c in loss)
            + f" | {np.median(np.abs(err)):.1f}% / {np.median(err):+.1f}% |"
        )
    return "\n".join(lines)


def fit_second(x, new: list[Source], max_nfev: int = MAX_NFEV) -> np.ndarray:
    """The new parts' parameters (:data:`NEW_FAMILIES`) and :data:`NEW_SHARED` fitted on the
    ``new`` sources with every other parameter held at ``x``'s value."""
    keep = {n: float(v) for n, v in zip(names(), x, strict=True) if not second_stage(n)}
    return fit(new, max_nfev, pinned=keep)


def fit_staged(old: list[Source], new: list[Source], max_nfev: int = MAX_NFEV) -> np.ndarray:
    """First the shared and A100 / H100 parameters on the ``old`` sources (the second
    stage's held at their priors: no old row runs on the new parts or states its software's
    release), then :func:`fit_second`."""
    pin = {n: prior(n)[0] for n in names() if second_stage(n)}
    x = fit(old, max_nfev, pinned=pin)
    return fit_second(x, new, max_nfev) if new else x


#: accelerator-count bins of the signed-error table (issue 32)
COUNT_BINS = (
    (0, 64, "<= 64"),
    (65, 512, "65-512"),
    (513, 2048, "513-2,048"),
    (2049, 1e12, "> 2,048"),
)


def signed_tables(x, sources: list[Source], what: str) -> str:
    """Signed error (predicted / measured time - 1; + too slow) by accelerator count and
    by accelerator over ``sources``' feasible rows: rows, signed mean, median |error|."""
    err = errors(x, sources)
    e = np.concatenate([err[s.name] for s in sources])
    n = np.concatenate([np.asarray(s.cfg["num_accelerators"], dtype=float) for s in sources])
    acc = np.concatenate([np.asarray(s.cfg["accelerator"], dtype=object) for s in sources])
    lines = [
        f"signed error by accelerator count and by accelerator ({what}, in-sample)",
        "| group | rows | signed mean | median abs |",
        "|---|---:|---:|---:|",
    ]

    def row(label, mask):
        v = e[mask & np.isfinite(e)] * 100
        if len(v):
            lines.append(f"| {label} | {len(v)} | {v.mean():+.1f}% | {np.median(np.abs(v)):.1f}% |")

    for lo, hi, label in COUNT_BINS:
        row(f"{label} accelerators", (n >= lo) & (n <= hi))
    for name in dict.fromkeys(acc):
        row(str(name), acc == name)
    return "\n".join(lines) + "\n"


def errors(x, sources: list[Source]) -> dict[str, np.ndarray]:
    """Per source: predicted / measured iteration time - 1 per feasible row."""
    with calibrated(x):
        return {s.name: np.expm1(s.log_ratio()) for s in sources}


def stats(err: np.ndarray) -> tuple[int, float, float, float]:
    a = np.abs(err[np.isfinite(err)]) * 100
    return (
        (len(a), float(np.median(a)), float(a.mean()), float(a.max()))
        if len(a)
        else (0, np.nan, np.nan, np.nan)
    )


def table(title: str, rows: dict[str, np.ndarray]) -> str:
    lines = [title, "| source | rows | median | mean | max |", "|---|---:|---:|---:|---:|"]
    for name, err in rows.items():
        n, med, mean, mx = stats(err)
        lines.append(f"| {name} | {n} | {med:.1f}% | {mean:.1f}% | {mx:.1f}% |")
    n, med, mean, mx = stats(np.concatenate(list(rows.values())))
    lines.append(f"| **pooled** | {n} | {med:.1f}% | {mean:.1f}% | {mx:.1f}% |")
    return "\n".join(lines)


def main(argv=None) -> int | str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--write", action="store_true", help="write the in-sample fit to calibration.yaml"
    )
    ap.add_argument("--no-loso", action="store_true", help="skip the leave-one-source-out fits")
    ap.add_argument(
        "--max-nfev", type=int, default=MAX_NFEV, help=f"optimizer evaluation cap ({MAX_NFEV})"
    )
    ap.add_argument(
        "--scan",
        metavar="PARAM=V1,V2,...",
        help="only this: hold PARAM at each value, fit the "
        "sources but --leave, print their losses and the left-out source's error",
    )
    ap.add_argument(
        "--leave",
        default="vtrain-single-node",
        help="the source --scan leaves out (vtrain-single-node)",
    )
    args = ap.parse_args(argv)
    sources = load_sources(REFERENCE)
    if args.scan:
        param, _, values = args.scan.partition("=")
        print(
            scan(sources, args.leave, param, [float(v) for v in values.split(",")], args.max_nfev)
        )
        return 0
    heldout = load_sources(HELDOUT)
    if not sources or not heldout:
        return f"no reference tables under {REFERENCE} or {HELDOUT} (is dse installed with its package data?)"
    new = [s for s in sources if s.file in NEW_TABLES]
    old = [s for s in sources if s.file not in NEW_TABLES]
    x = fit_staged(old, new, args.max_nfev)
    print("fitted on all sources (prior in brackets):")
    for n, v in zip(names(), x, strict=True):
        print(f"  {n:34s} {v:9.4g}   [{prior(n)[0]:.4g}]")
    print()
    print(table("in-sample (fitted on every source)", errors(x, sources)))
    print()
    if not args.no_loso:
        loso = {}
        for i, s in enumerate(old):  # the first stage's sources: refit without the source
            xi = fit_staged(old[:i] + old[i + 1 :], new, args.max_nfev)
            loso[s.name] = errors(xi, [s])[s.name]
        for i, s in enumerate(new):  # the new parts' parameters refitted without the source
            xi = fit_second(x, new[:i] + new[i + 1 :], args.max_nfev)
            loso[s.name] = errors(xi, [s])[s.name]
        print(
            table("leave-one-source-out (fitted on the other sources, predicting this one)", loso)
        )
        print()
        print(
            table(
                "leave-one-source-out, the 2024-26 tables alone",
                {s.name: loso[s.name] for s in new},
            )
        )
        print()
    print(signed_tables(x, new, "the 2024-26 tables"))
    print(signed_tables(x, sources, "every reference table"))
    held = errors(x, heldout)
    print(table("held-out published runs (never fitted; in-sample parameters)", held))
    print()
    by_stack = {}
    for src in heldout:
        stacks = np.asarray(src.cfg["framework"])
        for stack in dict.fromkeys(stacks):
            by_stack.setdefault(stack, []).append(held[src.name][stacks == stack])
    print(
        table(
            "held-out runs by training stack", {k: np.concatenate(v) for k, v in by_stack.items()}
        )
    )
    if args.write:
        path = Path(str(files("dse.analytic.data").joinpath("calibration.yaml")))
        text = path.read_text()
        header = text[: text.index("\nshared:") + 1]
        cal = to_calibration([float(f"{v:.4g}") for v in x])
        body = yaml.safe_dump(cal, sort_keys=False, default_flow_style=False)
        path.write_text(header + body)
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
