"""Junction temperature: a two-term Foster RC network from junction to coolant inlet.

Each term i has a resistance R_i (K/W) and a time constant tau_i = R_i C_i and obeys
d(theta_i)/dt = (R_i P - theta_i) / tau_i, i.e. C_i dtheta_i/dt = P - theta_i / R_i: the
seed's dT/dt = (P - P_cooling) / C with P_cooling = theta / R (seed 000). The junction
temperature is T_j = T_inlet + sum_i theta_i. In steady state T_j = T_inlet + R P.

A training step is a square wave: a busy phase (compute, memory-bound work and the
fine-grained tensor/pipeline communication interleaved with it, at its mean power
P_hi for t_hi) and a blocked phase (pipeline bubble and exposed data-parallel
communication, P_lo for t_lo). The periodic steady state of a first-order term under
that wave peaks at the end of the busy phase:
    theta_max = R (P_lo + (P_hi - P_lo) (1 - e^{-t_hi/tau}) / (1 - e^{-T/tau}))
    theta_min = R (P_lo + (P_hi - P_lo) (1 - e^{-t_hi/tau}) e^{-t_lo/tau} / (1 - e^{-T/tau}))
with T = t_hi + t_lo; the largest rates of change are at the phase switches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.energy import power
from dse.analytic.rows import Choice, where, where_or_zero, where_shared

KELVIN = 273.15


def _is_liquid(cooling: np.ndarray) -> np.ndarray:
    c = np.asarray(cooling)
    return c if c.dtype == bool else c == "liquid"


#: junction-to-inlet resistance (K/W) of a part without a catalog value: this many kelvin
#: at its TDP, air or liquid cooled (docs/model-energy.md, section 3)
AIR_RISE_AT_TDP_K = 52.0
LIQUID_RISE_AT_TDP_K = 30.0


def air_and_total_k_per_w(
    cooling: np.ndarray, pw: power.PowerParameters, tdp_w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(the air-cooled resistance, the junction-to-inlet resistance) per candidate: each the
    catalog value, else 52 K (air) or 30 K (liquid) per TDP; the first computed once for both
    (the leakage model's reference is the part's air-cooled one). ``cooling`` holds cooling
    type names or a boolean "is liquid" mask."""
    liquid = _is_liquid(cooling)
    r_air = where_shared(np.isfinite(pw.r_air_k_per_w), pw.r_air_k_per_w, AIR_RISE_AT_TDP_K / tdp_w)
    if not np.any(liquid) and np.shape(r_air) == np.shape(liquid):
        return r_air, r_air  # every candidate air-cooled
    r_liq = where_shared(
        np.isfinite(pw.r_liquid_k_per_w), pw.r_liquid_k_per_w, LIQUID_RISE_AT_TDP_K / tdp_w
    )
    return r_air, where(liquid, r_liq, r_air)


def foster_terms(
    cooling: np.ndarray, r_total: np.ndarray, tau_fast_s=None, tau_slow_s=None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The two (R_i, tau_i) terms of the network for each candidate's cooling type; a
    finite ``tau_fast_s``/``tau_slow_s`` (the inputs) replaces that term's time constant."""
    air, cold_plate = power.cooling_path("air"), power.cooling_path("liquid")
    liquid = _is_liquid(cooling)
    frac = where(liquid, cold_plate.fast_fraction, air.fast_fraction)
    tau_fast = where(liquid, cold_plate.tau_fast_s, air.tau_fast_s)
    tau_slow = where(liquid, cold_plate.tau_slow_s, air.tau_slow_s)
    if tau_fast_s is not None:
        tau_fast = where(np.isfinite(tau_fast_s), tau_fast_s, tau_fast)
    if tau_slow_s is not None:
        tau_slow = where(np.isfinite(tau_slow_s), tau_slow_s, tau_slow)
    return [(r_total * frac, tau_fast), (r_total * (1.0 - frac), tau_slow)]


def steady_junction_temp_c(
    power_w: np.ndarray, inlet_c: np.ndarray, r_total: np.ndarray
) -> np.ndarray:
    """Steady-state junction temperature: T_j = T_inlet + R_ja * P."""
    return inlet_c + r_total * power_w


def peak_junction_c(p_hi, t_hi, p_lo, t_lo, inlet_c, terms) -> np.ndarray:
    """The ``peak_c`` of :func:`periodic_response` alone (same arithmetic; for the clock search).

    ``t_hi``/``t_lo`` must already be non-negative and finite (as periodic_response makes them).
    """
    period = np.maximum(t_hi + t_lo, 1e-12)
    hi = np.add(0.0, inlet_c, out=np.empty(np.shape(p_hi)))
    choose = Choice(t_lo > 0)
    neg_hi, neg_period, span = -t_hi, -period, p_hi - p_lo  # (the same in every term)
    for r, tau in terms:
        a = -np.expm1(neg_hi / tau)
        denom = np.maximum(-np.expm1(neg_period / tau), 1e-300)
        th_max = r * (p_lo + span * a / denom)
        hi = hi + choose(th_max, r * p_hi)
    return hi


def _not_negative(t) -> np.ndarray:
    """``np.maximum(np.nan_to_num(t, nan=0.0), 0.0)`` (NaN and negative times 0, +inf the
    largest float), bit for bit; without ``nan_to_num``'s passes where every time is finite."""
    if np.isfinite(t).all():
        return np.maximum(t, 0.0)
    return np.maximum(np.nan_to_num(t, nan=0.0), 0.0)


#: float64 e^x is +0.0 below ln(2.5e-324) = -745.13 (half the smallest subnormal), so
#: below this for any exp within a few ulp; numpy's exp takes a slow path for such
#: arguments (~10x; a blocked phase hundreds of times the fast term's time constant)
EXP_ZERO_BELOW = -750.0


def _exp(x: np.ndarray) -> np.ndarray:
    """``np.exp(x)``, bit for bit, with the arguments whose value is +0.0 left out of the
    exponential (they are set to 0 after it): fast where many are far below zero."""
    zero = x < EXP_ZERO_BELOW
    if not zero.any():
        return np.exp(x)
    out = np.exp(where(zero, 0.0, x))
    out[zero] = 0.0
    return out


@dataclass(frozen=True, slots=True)
class ThermalResponse:
    """The junction's periodic response to one iteration's busy/blocked square wave."""

    peak_c: np.ndarray  # degC, at the end of the busy phase
    min_c: np.ndarray  # degC, at the end of the blocked phase
    max_rate_c_per_s: np.ndarray  # degC/s, largest |dT/dt| (at a phase switch)


def periodic_response(p_hi, t_hi, p_lo, t_lo, inlet_c, terms) -> ThermalResponse:
    """Peak, trough and largest |dT/dt| of the junction under the busy/blocked square wave."""
    t_hi, t_lo = _not_negative(t_hi), _not_negative(t_lo)
    period = np.maximum(t_hi + t_lo, 1e-12)
    hi = np.add(0.0, inlet_c, out=np.empty(np.shape(p_hi)))
    lo = hi.copy()
    rate_up = rate_down = 0.0  # (0.0 + the first term: as from arrays of zeros)
    blocked = t_lo > 0
    choose = Choice(blocked)
    # the same in every term: each term's arithmetic as written out in the module docstring
    neg_hi, neg_period, neg_lo, span = -t_hi, -period, -t_lo, p_hi - p_lo
    for r, tau in terms:
        a = -np.expm1(neg_hi / tau)  # 1 - e^{-t_hi/tau}
        denom = np.maximum(-np.expm1(neg_period / tau), 1e-300)
        rise = span * a
        th_max = r * (p_lo + rise / denom)
        th_min = r * (p_lo + rise * _exp(neg_lo / tau) / denom)
        # with no blocked phase the response is flat at R P_hi
        flat = r * p_hi
        th_max = choose(th_max, flat)
        th_min = choose(th_min, flat)
        hi = hi + th_max
        lo = lo + th_min
        rate_up = rate_up + (flat - th_min) / tau
        rate_down = rate_down + (r * p_lo - th_max) / tau
    rate = where_or_zero(blocked, np.maximum(np.abs(rate_up), np.abs(rate_down)))
    return ThermalResponse(peak_c=hi, min_c=lo, max_rate_c_per_s=rate)
