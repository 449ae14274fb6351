"""Energy of moving bytes: HBM traffic and the network links (dynamic, per byte or bit).

Every function is vectorised over candidates; energies are joules. The default pJ/bit of
the links are declared (with their source) in :mod:`dse.analytic.declarations`.
"""

from __future__ import annotations

import numpy as np


def hbm_energy_j(hbm_traffic_bytes: np.ndarray, pj_per_byte: np.ndarray) -> np.ndarray:
    """Energy of HBM traffic: bytes x pJ/B."""
    return hbm_traffic_bytes * pj_per_byte * 1e-12


def network_energy_j(
    scaleup_bytes, scaleout_bytes, scaleup_pj_per_bit, scaleout_pj_per_bit
) -> np.ndarray:
    """Energy of moving bytes over the two fabrics, per accelerator (dynamic link energy)."""
    return (scaleup_bytes * scaleup_pj_per_bit + scaleout_bytes * scaleout_pj_per_bit) * 8e-12
