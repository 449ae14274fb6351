"""Hardware catalog (``dse/analytic/data/hardware.yaml``), calibration and their vectorised lookup."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib.resources import files

import numpy as np
import yaml

from dse.analytic.columns import factorise
from dse.analytic.time.collectives import SCALEUP_TOPOLOGIES

CALIBRATION_FIELDS = ("matmul_eff_max", "matmul_half_gflop", "memory_eff", "kernel_overhead_us",
                      "collective_eff", "collective_latency_us", "scaleout_latency_us", "dp_overlap")


@cache
def catalog() -> dict[str, dict]:
    """Accelerator name -> its datasheet entry (see the YAML file for sources)."""
    return yaml.safe_load(files("dse.analytic.data").joinpath("hardware.yaml").read_text())


@cache
def calibration() -> dict[str, dict]:
    """Accelerator name (or ``default``) -> fitted time-model parameters."""
    return yaml.safe_load(files("dse.analytic.data").joinpath("calibration.yaml").read_text())


def calibration_for(name: str) -> dict[str, float]:
    cal = calibration()
    return {**cal["default"], **cal.get(name, {})}


def accelerator_names() -> tuple[str, ...]:
    return tuple(catalog())


FIELDS = ("peak_flops", "hbm_bw_bps", "hbm_bytes", "clock_max_mhz", "clock_min_mhz", "tdp_w",
          "idle_w", "scaleup_bw_bps", "scaleup_topology", "compute_units", "reserved_bytes",
          "precision_ok", *CALIBRATION_FIELDS)


@cache
def _row(name: str, prec: str) -> tuple[float, ...]:
    hw = catalog().get(name)
    if hw is None:
        return (np.nan,) * len(FIELDS)
    peak = hw["peak_tflops"].get(prec)
    cal = calibration_for(name)
    return (
        np.nan if peak is None else peak * 1e12,
        hw["hbm_bw_gbs"] * 1e9,
        hw["hbm_gb"] * 1e9,
        hw["clock_max_mhz"],
        hw["clock_min_mhz"],
        hw["tdp_w"],
        hw["idle_w"],
        hw["scaleup_bw_gbs"] * 1e9,
        SCALEUP_TOPOLOGIES.index(hw["scaleup_topology"]),
        hw["compute_units"],
        hw["memory_reserved_gb"] * 1e9,
        0.0 if peak is None else 1.0,
        *(float(cal[f]) for f in CALIBRATION_FIELDS),
    )


def _missing_last(codes: np.ndarray, uniques: list) -> tuple[np.ndarray, list]:
    codes = np.asarray(codes)
    if len(codes) and codes.min() < 0:
        return np.where(codes < 0, len(uniques), codes), [*uniques, None]
    return codes, uniques


@dataclass(frozen=True, slots=True)
class Hardware:
    """Per-candidate hardware arrays (one value per candidate in each field).

    From the catalog: ``peak_flops`` (dense FLOP/s at the maximum clock at the candidate's
    precision; NaN where unsupported, with ``precision_ok`` 0), ``hbm_bw_bps`` (B/s),
    ``hbm_bytes``, ``clock_max_mhz``, ``clock_min_mhz``, ``tdp_w``, ``idle_w``,
    ``scaleup_bw_bps`` (B/s per direction), ``scaleup_topology`` (index into
    :data:`SCALEUP_TOPOLOGIES`), ``compute_units``, ``reserved_bytes``; from the
    calibration: the fields of :data:`CALIBRATION_FIELDS` (see docs/model.md, section 7).
    Unknown accelerators have NaN everywhere.
    """

    peak_flops: np.ndarray
    hbm_bw_bps: np.ndarray
    hbm_bytes: np.ndarray
    clock_max_mhz: np.ndarray
    clock_min_mhz: np.ndarray
    tdp_w: np.ndarray
    idle_w: np.ndarray
    scaleup_bw_bps: np.ndarray
    scaleup_topology: np.ndarray
    compute_units: np.ndarray
    reserved_bytes: np.ndarray
    precision_ok: np.ndarray
    matmul_eff_max: np.ndarray
    matmul_half_gflop: np.ndarray
    memory_eff: np.ndarray
    kernel_overhead_us: np.ndarray
    collective_eff: np.ndarray
    collective_latency_us: np.ndarray
    scaleout_latency_us: np.ndarray
    dp_overlap: np.ndarray


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
    return Hardware(*(table[i].take(pair) for i in range(len(FIELDS))))
