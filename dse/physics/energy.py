"""Energy accounting: accelerators by phase, network per bit, host, facility overhead."""

from __future__ import annotations

import numpy as np

# Network energy per bit moved (seed 004, AstraWattch case study: scale-up 2 pJ/bit,
# scale-out 25 pJ/bit).
SCALEUP_PJ_PER_BIT = 2.0
SCALEOUT_PJ_PER_BIT = 25.0


def network_energy_j(scaleup_bytes: np.ndarray, scaleout_bytes: np.ndarray) -> np.ndarray:
    """Energy of moving bytes over the two fabrics, per accelerator."""
    return (scaleup_bytes * SCALEUP_PJ_PER_BIT + scaleout_bytes * SCALEOUT_PJ_PER_BIT) * 8 * 1e-12
