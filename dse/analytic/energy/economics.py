"""What the energy costs: money, carbon, and how far it is from the Landauer bound.

Every function is vectorised over candidates; energies are joules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BOLTZMANN_J_PER_K = 1.380649e-23
J_PER_KWH = 3.6e6


def landauer_bound_j(n_params, tokens, bits_per_token, temperature_k) -> np.ndarray:
    """Seed 001's bound E_min = k_B T ln2 N_params H_data, H_data = tokens x bits/token.

    ``tokens`` is the information the target loss requires: the tokens it needs at the
    small-batch limit (McCandlish et al. 2018's E_min), not the tokens a run consumes, so
    that a batch which spends more tokens on the same loss does not raise the bound."""
    return BOLTZMANN_J_PER_K * temperature_k * np.log(2.0) * n_params * tokens * bits_per_token


def useful_utilisation(mfu, min_tokens, tokens, compute_time_s, wall_time_s) -> np.ndarray:
    """The achieved share of peak throughput that reaches the target: the model FLOPs of the
    ``min_tokens`` the target needs (E_min) over the time to train (``wall_time_s``, with
    checkpoints and interruptions), as a share of the job's peak. ``mfu`` is the step's
    (every consumed token over ``compute_time_s`` = steps x step time)."""
    return mfu * (min_tokens / tokens) * (compute_time_s / wall_time_s)


def efficiency_index(useful, bound_j, energy_j) -> np.ndarray:
    """Seed 000's EEI = (T_achieved / T_theoretical)(E_min / E_actual), with T_achieved the
    useful throughput (:func:`useful_utilisation`) and E_min the Landauer bound of the
    information the target requires: on one job size and accelerator it is proportional to
    1 / (energy x time to train), so it ranks as the energy-time product does."""
    return useful * bound_j / energy_j


@dataclass(frozen=True, slots=True)
class Cost:
    """Training cost (USD) by kind."""

    hardware_usd: np.ndarray
    energy_usd: np.ndarray
    total_usd: np.ndarray


def cost_usd(n, time_s, facility_j, accelerator_hour_price, energy_price_per_kwh) -> Cost:
    """Rental (accelerator-hours x price) and energy (facility kWh x price) cost."""
    hardware = n * time_s / 3600.0 * accelerator_hour_price
    energy_cost = facility_j / J_PER_KWH * energy_price_per_kwh
    return Cost(hardware_usd=hardware, energy_usd=energy_cost, total_usd=hardware + energy_cost)


def carbon_kg(facility_j, grid_carbon_kg_per_kwh) -> np.ndarray:
    """Operational emissions: facility kWh x grid carbon intensity (kg CO2e/kWh)."""
    return facility_j / J_PER_KWH * grid_carbon_kg_per_kwh
