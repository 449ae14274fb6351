"""Junction temperature from a lumped thermal resistance per cooling type."""

from __future__ import annotations

import numpy as np

# Junction-to-inlet thermal resistance (K/W). Chosen so that a 700 W H100 SXM reaches
# ~85 C with 30 C air and ~62 C with liquid cooling at 30 C inlet, in line with the
# operating ranges NVIDIA publishes for HGX H100 (air) and direct-to-chip liquid systems.
R_JUNCTION_K_PER_W = {"air": 0.08, "liquid": 0.046}


def junction_temp_c(power_w: np.ndarray, inlet_c: np.ndarray, cooling: np.ndarray) -> np.ndarray:
    """Steady-state junction temperature: T_j = T_inlet + R_ja * P."""
    r = np.where(np.asarray(cooling) == "liquid", R_JUNCTION_K_PER_W["liquid"], R_JUNCTION_K_PER_W["air"])
    return inlet_c + r * power_w
