"""Accelerator power from clock and activity (DVFS): P = P_idle + a * C * V(f)^2 * f."""

from __future__ import annotations

import numpy as np

# Fraction of the maximum voltage at the minimum clock; a linear V(f) between them is
# the usual first-order DVFS model (Mittal 2014; Guerreiro et al. 2019 measured V-f
# curves of V100/A100 that are close to linear above ~900 MHz).
V_MIN_FRACTION = 0.65
# Activity factors relative to a compute-bound GEMM at the maximum clock.
ACTIVITY = {"compute": 1.0, "memory": 0.55, "communication": 0.25, "waiting": 0.10}


def voltage_ratio(clock_mhz: np.ndarray, clock_min_mhz: np.ndarray, clock_max_mhz: np.ndarray) -> np.ndarray:
    """V(f)/V(f_max) on a linear voltage-frequency curve."""
    x = np.clip((clock_mhz - clock_min_mhz) / (clock_max_mhz - clock_min_mhz), 0.0, 1.0)
    return V_MIN_FRACTION + (1.0 - V_MIN_FRACTION) * x


def dynamic_scale(clock_mhz, clock_min_mhz, clock_max_mhz) -> np.ndarray:
    """C V^2 f relative to its value at the maximum clock."""
    return (clock_mhz / clock_max_mhz) * voltage_ratio(clock_mhz, clock_min_mhz, clock_max_mhz) ** 2


def phase_power_w(activity: float | np.ndarray, clock_mhz, clock_min_mhz, clock_max_mhz, idle_w, tdp_w) -> np.ndarray:
    """Power of one accelerator in a phase of the given activity, at ``clock_mhz``."""
    return idle_w + (tdp_w - idle_w) * activity * dynamic_scale(clock_mhz, clock_min_mhz, clock_max_mhz)
