"""Hardware catalog (``dse/analytic/data/hardware.yaml``), calibration and their vectorised lookup."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib.resources import files

import numpy as np

from dse.analytic import profiles
from dse.analytic.columns import factorise, take_fields
from dse.analytic.rows import where
from dse.analytic.time import software
from dse.analytic.time.collectives import SCALEUP_TOPOLOGIES
from dse.errors import DseError
from dse.yamlfile import load_packaged

#: fitted per accelerator (calibration.yaml ``fitted``; by :func:`estimated_efficiencies` elsewhere)
ACCELERATOR_FIELDS = ("matmul_eff_max", "fp8_matmul_ratio", "memory_eff", "collective_eff")
#: one value for every accelerator and stack (calibration.yaml ``shared``)
SHARED_FIELDS = (
    "matmul_half_gflop",
    "matmul_half_k",
    "kernel_overhead_us",
    "host_dispatch_us",
    "collective_call_us",
    "collective_latency_us",
    "scaleout_latency_us",
    "attention_eff",
    "overlap_tax",
    "eager_elementwise_factor",
    "maturity_deficit",
    "maturity_months",
)
CALIBRATION_FIELDS = (*ACCELERATOR_FIELDS, *SHARED_FIELDS)
#: shared fields a part's fitted entry may replace with its own: the per-step latency of a
#: part's own scale-out network (a TPU's DCN, whose transfers go through the hosts: Cloud TPU
#: "Profiling Multislice environments", send / recv interrupt the host to start a DMA)
PART_OVERRIDES = ("scaleout_latency_us",)
#: bytes per "GB" of an accelerator's memory capacity: vendors size HBM in GiB (an "80 GB" A100
#: or H100 holds 80 GiB, 81,920 MiB in nvidia-smi; MI300X's "192 GB" is 192 GiB in rocm-smi),
#: unlike bandwidths, whose GB/s are 1e9 B/s
GIB = float(2**30)


@cache
def catalog() -> dict[str, dict]:
    """Accelerator name -> its datasheet entry (see the YAML file for sources)."""
    return load_packaged(files("dse.analytic.data").joinpath("hardware.yaml").read_text())


@cache
def catalog_notes() -> dict[str, dict[str, str]]:
    """Accelerator name -> field -> the comment on that field's line of the catalog (where a
    number comes from: a datasheet, a measurement, or "assumed"); ``dse describe`` shows it."""
    notes: dict[str, dict[str, str]] = {}
    part = None
    for line in files("dse.analytic.data").joinpath("hardware.yaml").read_text().splitlines():
        if (
            line
            and not line[0].isspace()
            and not line.startswith("#")
            and line.rstrip().endswith(":")
        ):
            part = line.rstrip()[:-1]
            notes[part] = {}
        elif (
            part
            and line.startswith("  ")
            and not line.startswith("   ")
            and "#" in line
            and ":" in line
        ):
            field, _, rest = line.strip().partition(":")
            comment = rest.partition(" #")[2].strip()
            if comment:
                notes[part][field] = comment
    return notes


@cache
def calibration() -> dict[str, dict]:
    """The fitted parameters: ``shared`` (one value for all) and ``fitted`` (accelerator name
    -> its own efficiencies), see the YAML file."""
    return load_packaged(files("dse.analytic.data").joinpath("calibration.yaml").read_text())


def mamf_efficiency(name: str, precision: str = "bf16") -> float | None:
    """Published maximum achievable matmul throughput as a fraction of the datasheet peak
    (catalog ``mamf_tflops``), or None where none is published."""
    hw = catalog()[name]
    mamf, peak = (hw.get("mamf_tflops") or {}).get(precision), hw["peak_tflops"].get(precision)
    return None if mamf is None or not peak else mamf / peak


def estimated_efficiencies(name: str, fitted: dict[str, dict] | None = None) -> dict[str, float]:
    """The documented rule for an accelerator without training measurements.

    ``matmul_eff_max``: its published matmul efficiency (MAMF / peak) times the mean ratio
    of fitted to published efficiency over the fitted accelerators (how much of the matmul
    benchmark a training GEMM reaches); where no MAMF is published, the median published
    efficiency of the catalog. ``fp8_matmul_ratio``: its published fp8 over bf16 MAMF
    efficiency, else the mean fitted ratio of fitted parts with fp8 units. ``memory_eff`` and
    ``collective_eff``: the mean over the fitted accelerators (same kernels, same NCCL).
    """
    fitted = calibration()["fitted"] if fitted is None else fitted
    fits = list(
        {id(v): (k, v) for k, v in fitted.items()}.values()
    )  # a YAML alias (same die) counts once
    ratios = [v["matmul_eff_max"] / mamf_efficiency(k) for k, v in fits if mamf_efficiency(k)]
    published = [e for e in (mamf_efficiency(k) for k in catalog()) if e is not None]
    own = mamf_efficiency(name)
    eff = (own if own is not None else float(np.median(published))) * float(np.mean(ratios))
    own8 = mamf_efficiency(name, "fp8")
    fp8_fits = [v["fp8_matmul_ratio"] for k, v in fits if mamf_efficiency(k, "fp8")]
    if own8 is not None and own is not None:  # the part's own published fp8 / 16-bit ratio
        fp8 = own8 / own
    elif fp8_fits:  # else the fitted parts' mean
        fp8 = float(np.mean(fp8_fits))
    else:
        fp8 = 1.0
    return {
        "matmul_eff_max": min(eff, 0.95),
        "fp8_matmul_ratio": fp8,
        "memory_eff": float(np.mean([v["memory_eff"] for _, v in fits])),
        "collective_eff": float(np.mean([v["collective_eff"] for _, v in fits])),
    }


def is_estimated(name: str) -> bool:
    """True for an accelerator whose efficiencies come from the rule, not from a fit."""
    return name not in calibration()["fitted"]


def fitted_on(name: str) -> str | None:
    """The part whose training runs ``name``'s fitted efficiencies come from when they are
    another part's (the same die: A100-40GB takes A100-80GB's, H800 H100-SXM's), else None."""
    fitted = calibration()["fitted"]
    own = fitted.get(name)
    first = next((k for k, v in fitted.items() if v is own), name) if own is not None else name
    return None if first == name else first


def calibration_for(name: str) -> dict[str, float]:
    """Every calibration field for accelerator ``name``: the shared values and its fitted
    efficiencies, or the estimated ones (:func:`estimated_efficiencies`); a fitted entry's
    :data:`PART_OVERRIDES` replace the shared values."""
    cal = calibration()
    own = cal["fitted"].get(name) or estimated_efficiencies(name)
    return {
        **cal["shared"],
        **{k: own[k] for k in ACCELERATOR_FIELDS},
        **{k: own[k] for k in PART_OVERRIDES if k in own},
    }


def accelerator_names() -> tuple[str, ...]:
    return tuple(catalog())


def canonical_accelerator(name) -> str | None:
    """The catalog name ``name`` means, ignoring case, spaces, hyphens and underscores
    (``a100-80gb``, ``H100 SXM``); None when it means none."""

    def key(text):
        return "".join(ch for ch in str(text).lower() if ch.isalnum())

    return {key(n): n for n in accelerator_names()}.get(key(name))


def _training_stack(name: str) -> str | None:
    """The catalog ``training_stack`` of part ``name`` (or of a profile's base part); None
    where it has none or is unknown (``dse validate`` reports an unknown part)."""
    try:
        found = entry(name)
    except (DseError, OSError):
        return None
    return None if found is None else found[0].get("training_stack")


def training_stacks(names) -> tuple[np.ndarray, list[str]] | None:
    """Per candidate, the one training stack its part is trained with (catalog
    ``training_stack``: a TPU is trained only through XLA, the ``maxtext`` stack), as codes
    into a list of stack names (-1 where the part leaves the stack to the ``framework``
    input); None when no part in the column names one (one lookup per distinct name)."""
    codes, uniq = factorise(names)
    own = [_training_stack(str(u)) for u in uniq]
    if not any(own):
        return None
    stacks = sorted({o for o in own if o})
    table = np.array([stacks.index(o) if o else -1 for o in own] + [-1], dtype=np.int64)
    return table[where(np.asarray(codes) < 0, len(own), codes)], stacks


FIELDS = (
    "peak_flops",
    "peak16_flops",
    "hbm_bw_bps",
    "hbm_capacity_bytes",
    "clock_max_mhz",
    "clock_min_mhz",
    "tdp_w",
    "power_limit_w",
    "idle_w",
    "scaleup_bw_bps",
    "scaleup_topology",
    "scaleup_domain",
    "compute_units",
    "reserved_bytes",
    "precision_ok",
    "fp8",
    "fa2_peak_fraction",
    "host_link_bps",
    "host_memory_bytes",
    "scaleout_bw_bps",
    "architecture_shipped_month",
    *CALIBRATION_FIELDS,
)


def entry(name: str) -> tuple[dict, dict] | None:
    """(datasheet entry, calibration fields) of accelerator ``name``: a catalog part, or an
    accelerator profile by path or by name (:mod:`dse.analytic.profiles`); None if unknown."""
    hw = catalog().get(name)
    if hw is not None:
        return hw, calibration_for(name)
    prof = profiles.find(name)
    if prof is None:
        return None
    # a field the catalog gained after the profile was written comes from its base part
    return {**catalog().get(prof.base, {}), **prof.hardware}, {
        **calibration()["shared"],
        **prof.calibration,
    }


def _row(name: str, prec: str) -> tuple[float, ...]:
    """The :data:`FIELDS` of one (accelerator, precision) pair; NaN for an unknown accelerator
    (or a profile file that cannot be read: ``dse validate`` reports why)."""
    if name in catalog():
        return _row_of(name, prec, None)
    try:
        return _row_of(name, prec, profiles.key(name))
    except (DseError, OSError):
        return (np.nan,) * len(FIELDS)


@cache
def _row_of(name: str, prec: str, version: tuple | None) -> tuple[float, ...]:
    """:func:`_row` cached per profile file version (``version``: None for a catalog part)."""
    del version  # part of the cache key only
    found = entry(name)
    if found is None:
        return (np.nan,) * len(FIELDS)
    hw, cal = found
    peak = hw["peak_tflops"].get(prec)
    # attention and the output layer stay 16-bit in fp8 training (Transformer Engine casts the
    # linear layers only); fp16 where the part has no bf16 units
    peak16 = hw["peak_tflops"].get("bf16") or hw["peak_tflops"].get("fp16")
    if prec not in ("fp8", "bf16", "fp16"):
        peak16 = peak
    return (
        np.nan if peak is None else peak * 1e12,
        np.nan if peak is None or peak16 is None else peak16 * 1e12,
        hw["hbm_bw_gbs"] * 1e9,
        hw["hbm_gb"] * GIB,
        hw["clock_max_mhz"],
        hw["clock_min_mhz"],
        hw["tdp_w"],
        # a board limited below its die's full-clock draw (default: the TDP)
        hw.get("power_limit_w", hw["tdp_w"]),
        hw["idle_w"],
        hw["scaleup_bw_gbs"] * 1e9,
        SCALEUP_TOPOLOGIES.index(hw["scaleup_topology"]),
        hw["scaleup_domain"],
        hw["compute_units"],
        hw["memory_reserved_gb"] * GIB,
        0.0 if peak is None else 1.0,
        1.0 if prec == "fp8" else 0.0,
        # FlashAttention-2's ceiling on the part (share of the 16-bit peak; none: inf)
        float(hw.get("fa2_peak_fraction") or np.inf),
        # the host link (per direction) and host memory per accelerator activation
        # offloading uses (catalog host_link_gbs, host_memory_gb; 0: not given, no offloading)
        float(hw.get("host_link_gbs") or 0.0) * 1e9,
        float(hw.get("host_memory_gb") or 0.0) * GIB,
        # the part's own scale-out network (catalog scaleout_bw_gbs, per direction; NaN: none,
        # the input's default applies)
        float(hw.get("scaleout_bw_gbs") or np.nan) * 1e9,
        # when the part's architecture first shipped (catalog architecture_shipped, YYYY-MM,
        # as months since year 0; NaN: not given, its kernels are taken as mature)
        software.month_number(hw.get("architecture_shipped")),
        *(float(cal[f]) for f in CALIBRATION_FIELDS),
    )


def _missing_last(codes: np.ndarray, uniques: list) -> tuple[np.ndarray, list]:
    codes = np.asarray(codes)
    if len(codes) and codes.min() < 0:
        return where(codes < 0, len(uniques), codes), [*uniques, None]
    return codes, uniques


@dataclass(frozen=True, slots=True)
class Hardware:
    """Per-candidate hardware arrays (one value per candidate in each field).

    From the catalog: ``peak_flops`` (dense FLOP/s at the maximum clock at the candidate's
    precision; NaN where unsupported, with ``precision_ok`` 0), ``peak16_flops`` (the 16-bit
    peak that attention and the output layer run at; the precision's own peak for tf32),
    ``fp8`` (1 for fp8 candidates), ``hbm_bw_bps`` (B/s),
    ``hbm_capacity_bytes``, ``clock_max_mhz``, ``clock_min_mhz``, ``tdp_w`` (the draw of compute-bound
    work at the maximum clock: the power model's scale), ``power_limit_w`` (the board's
    default power limit, the TDP unless the catalog gives a lower one), ``idle_w``,
    ``scaleup_bw_bps`` (B/s per direction), ``scaleup_topology`` (index into
    :data:`SCALEUP_TOPOLOGIES`), ``scaleup_domain`` (accelerators per scale-up domain),
    ``compute_units``, ``reserved_bytes``, ``fa2_peak_fraction`` (the share of the 16-bit
    peak FlashAttention-2 reaches on the part, where it is published below what the fitted
    attention efficiency gives; inf elsewhere), ``host_link_bps`` (B/s per direction between
    the accelerator and its host's memory) and ``host_memory_bytes`` (host memory per
    accelerator; both 0 where the catalog gives none: no activation offloading),
    ``scaleout_bw_bps`` (B/s per direction of the part's own scale-out network, a TPU's DCN;
    NaN where the catalog gives none), ``architecture_shipped_month`` (when the part's
    architecture first shipped, months since year 0: :mod:`~dse.analytic.time.software`;
    NaN where the catalog gives none); from the
    calibration: the fields of :data:`CALIBRATION_FIELDS` (see docs/model.md, section 7).
    Unknown accelerators have NaN everywhere.
    """

    peak_flops: np.ndarray
    peak16_flops: np.ndarray
    hbm_bw_bps: np.ndarray
    hbm_capacity_bytes: np.ndarray
    clock_max_mhz: np.ndarray
    clock_min_mhz: np.ndarray
    tdp_w: np.ndarray
    power_limit_w: np.ndarray
    idle_w: np.ndarray
    scaleup_bw_bps: np.ndarray
    scaleup_topology: np.ndarray
    scaleup_domain: np.ndarray
    compute_units: np.ndarray
    reserved_bytes: np.ndarray
    precision_ok: np.ndarray
    fp8: np.ndarray
    fa2_peak_fraction: np.ndarray
    host_link_bps: np.ndarray
    host_memory_bytes: np.ndarray
    scaleout_bw_bps: np.ndarray
    architecture_shipped_month: np.ndarray
    matmul_eff_max: np.ndarray
    fp8_matmul_ratio: np.ndarray
    memory_eff: np.ndarray
    collective_eff: np.ndarray
    matmul_half_gflop: np.ndarray
    matmul_half_k: np.ndarray
    kernel_overhead_us: np.ndarray
    host_dispatch_us: np.ndarray
    collective_call_us: np.ndarray
    collective_latency_us: np.ndarray
    scaleout_latency_us: np.ndarray
    attention_eff: np.ndarray
    overlap_tax: np.ndarray
    eager_elementwise_factor: np.ndarray
    maturity_deficit: np.ndarray
    maturity_months: np.ndarray


assert tuple(f.name for f in fields(Hardware)) == FIELDS  # _row's order is the dataclass's


def lookup(names: np.ndarray, precision: np.ndarray) -> Hardware:
    """Per-candidate hardware arrays for accelerator ``names`` at the given ``precision``.

    Strings are factorised once (one dictionary lookup per distinct pair, not per candidate).
    """
    n_codes, n_uniq = factorise(names)
    if np.ndim(precision) == 0:
        p_codes, p_uniq = np.zeros(1, dtype=np.int64), [precision]
    else:
        p_codes, p_uniq = factorise(precision)
    # a missing value (code -1) is looked up as the name "None": unknown, NaN fields
    n_codes, n_uniq = _missing_last(n_codes, n_uniq)
    p_codes, p_uniq = _missing_last(p_codes, p_uniq)
    # one catalog row per (name, precision) pair; each field's column taken by pair code
    table = np.array([_row(str(n), str(p)) for n in n_uniq for p in p_uniq], dtype=np.float64)
    table = np.ascontiguousarray(table.reshape(-1, len(FIELDS)).T)
    pair = (np.asarray(n_codes) * len(p_uniq) + np.asarray(p_codes)).reshape(-1)
    return Hardware(*take_fields(table, pair))
