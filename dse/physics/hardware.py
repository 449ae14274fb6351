"""Hardware catalog (``dse/data/hardware.yaml``) and its vectorised lookup."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import numpy as np
import yaml


@cache
def catalog() -> dict[str, dict]:
    """Accelerator name -> its datasheet entry (see the YAML file for sources)."""
    return yaml.safe_load(files("dse.data").joinpath("hardware.yaml").read_text())


def accelerator_names() -> tuple[str, ...]:
    return tuple(catalog())


def lookup(names: np.ndarray, precision: np.ndarray) -> dict[str, np.ndarray]:
    """Per-candidate hardware arrays for accelerator ``names`` at the given ``precision``.

    Returns ``peak_flops`` (FLOP/s at the maximum clock), ``hbm_bw_bps`` (B/s),
    ``hbm_bytes``, ``clock_max_mhz``, ``clock_min_mhz``, ``tdp_w``, ``idle_w`` and
    ``scaleup_bw_bps`` (B/s per direction).
    """
    cat = catalog()
    names = np.asarray(names).astype(str)
    precision = np.broadcast_to(np.asarray(precision).astype(str), names.shape)
    keys, inverse = np.unique(np.char.add(np.char.add(names, "|"), precision), return_inverse=True)
    rows = []
    for key in keys:
        name, prec = key.split("|")
        hw = cat[name]
        rows.append(
            (
                hw["peak_tflops"][prec] * 1e12,
                hw["hbm_bw_gbs"] * 1e9,
                hw["hbm_gb"] * 1e9,
                hw["clock_max_mhz"],
                hw["clock_min_mhz"],
                hw["tdp_w"],
                hw["idle_w"],
                hw["scaleup_bw_gbs"] * 1e9,
            )
        )
    table = np.asarray(rows, dtype=np.float64)[inverse]
    fields = ("peak_flops", "hbm_bw_bps", "hbm_bytes", "clock_max_mhz", "clock_min_mhz", "tdp_w",
              "idle_w", "scaleup_bw_bps")
    return {f: table[:, i] for i, f in enumerate(fields)}
