"""Fit the time model's calibration parameters for A100-80GB on the vTrain reference runs.

Run once: ``python benchmarks/fit_calibration.py`` prints the fitted parameters (to be
copied into dse/data/calibration.yaml) and the resulting errors. The objective is a
robust (soft-L1) least-squares fit of log(predicted / measured) over all 1,549 rows, the
multi-node rows weighted so that both tables count equally. Parameters are bounded to
physically meaningful ranges.
"""

from __future__ import annotations

import sys
from importlib.resources import files

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dse import validation
from dse.physics import hardware

NAMES = ["matmul_eff_max", "matmul_half_gflop", "memory_eff", "kernel_overhead_us", "collective_eff",
         "collective_latency_us", "dp_overlap"]
LO = [0.3, 0.01, 0.3, 0.0, 0.2, 0.5, 0.0]
HI = [0.95, 1000.0, 1.0, 2000.0, 1.0, 500.0, 1.0]


def load():
    ref = files("dse.data").joinpath("reference")
    return (pd.read_csv(ref.joinpath("vtrain_multi_node.csv")), pd.read_csv(ref.joinpath("vtrain_single_node.csv")))


def errors(x, tables, fixed=None):
    cal = dict(zip(NAMES, x, strict=True))
    if fixed:
        cal.update(fixed)
    orig = hardware.calibration_for
    hardware.calibration_for = lambda name: {**orig(name), **cal}
    try:
        return [validation.predict(t) for t in tables]
    finally:
        hardware.calibration_for = orig


def main(argv=None):
    multi, single = load()
    x0 = [hardware.calibration_for("A100-80GB")[k] for k in NAMES]
    w_multi = np.sqrt(len(single) / len(multi))

    def resid(x):
        rm, rs = errors(x, (multi, single))
        r = np.concatenate([w_multi * np.log1p(rm["error"].to_numpy()), np.log1p(rs["error"].to_numpy())])
        return np.nan_to_num(r, nan=5.0)

    fit = least_squares(resid, x0, bounds=(LO, HI), loss="soft_l1", f_scale=0.05, x_scale="jac",
                        diff_step=1e-3, max_nfev=400)
    for k, v in zip(NAMES, fit.x, strict=True):
        print(f"  {k}: {v:.4g}")
    rm, rs = errors(fit.x, (multi, single))
    print("multi ", validation.summary(rm))
    print("single", validation.summary(rs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
