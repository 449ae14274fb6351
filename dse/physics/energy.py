"""Energy accounting outside the accelerator core: HBM, network, host, facility, bounds, cost.

Every function is vectorised over candidates; energies are joules, powers watts.
"""

from __future__ import annotations

import numpy as np

# Network energy per bit moved (seed 004, AstraWattch case study: scale-up 2 pJ/bit,
# scale-out 25 pJ/bit).
SCALEUP_PJ_PER_BIT = 2.0
SCALEOUT_PJ_PER_BIT = 25.0
BOLTZMANN_J_PER_K = 1.380649e-23
J_PER_KWH = 3.6e6
J_PER_MWH = 3.6e9


def hbm_energy_j(hbm_bytes: np.ndarray, pj_per_byte: np.ndarray) -> np.ndarray:
    """Energy of HBM traffic: bytes x pJ/B."""
    return hbm_bytes * pj_per_byte * 1e-12


def network_energy_j(scaleup_bytes, scaleout_bytes, scaleup_pj_per_bit=SCALEUP_PJ_PER_BIT,
                     scaleout_pj_per_bit=SCALEOUT_PJ_PER_BIT) -> np.ndarray:
    """Energy of moving bytes over the two fabrics, per accelerator (dynamic link energy)."""
    return (scaleup_bytes * scaleup_pj_per_bit + scaleout_bytes * scaleout_pj_per_bit) * 8e-12


def facility_overhead_factor(pue: np.ndarray, cooling_cop: np.ndarray) -> np.ndarray:
    """Facility energy per unit of IT energy minus one.

    With a cooling coefficient of performance (finite ``cooling_cop``) the overhead is the
    cooling plant's electricity, IT heat / COP (seed 000: E_cooling = Q_thermal / CoP;
    all IT power ends up as heat); otherwise PUE - 1 (The Green Grid, PUE definition).
    """
    cop = np.asarray(cooling_cop, dtype=float)
    return np.where(np.isfinite(cop) & (cop > 0), 1.0 / np.where(cop > 0, cop, 1.0), pue - 1.0)


def landauer_bound_j(n_params, tokens, bits_per_token, temperature_k) -> np.ndarray:
    """Seed 001's bound E_min = k_B T ln2 N_params H_data, H_data = tokens x bits/token."""
    return BOLTZMANN_J_PER_K * temperature_k * np.log(2.0) * n_params * tokens * bits_per_token


def cost_usd(n, time_s, facility_j, accelerator_hour_price, energy_price_per_kwh) -> dict[str, np.ndarray]:
    """Rental (accelerator-hours x price) and energy (facility kWh x price) cost."""
    hardware = n * time_s / 3600.0 * accelerator_hour_price
    energy_cost = facility_j / J_PER_KWH * energy_price_per_kwh
    return {"hardware": hardware, "energy": energy_cost, "total": hardware + energy_cost}


def carbon_kg(facility_j, grid_carbon_kg_per_kwh) -> np.ndarray:
    """Operational emissions: facility kWh x grid carbon intensity (kg CO2e/kWh)."""
    return facility_j / J_PER_KWH * grid_carbon_kg_per_kwh
