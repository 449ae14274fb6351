"""Power outside the accelerators and at the facility: host and network static power, server
fans and power-supply losses (the node at the wall), the facility overhead (PUE or cooling COP), and facility power over the step (average, peak,
the busy/blocked swing and its ramp rate).

Every function is vectorised over candidates; powers are watts per accelerator unless
the name says facility.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.rows import where, where_or_zero, where_shared


def host_power_w(host_power_w, accelerators_per_node) -> np.ndarray:
    """A node's host power (CPUs, DRAM, storage, fans) shared by its accelerators."""
    return host_power_w / np.maximum(accelerators_per_node, 1.0)


def wall_factor(fan_power_fraction, psu_efficiency) -> np.ndarray:
    """Power at the wall per watt of DC power in the node (accelerators, host, NICs and
    switch shares): the server fans draw ``fan_power_fraction`` on top (they move the heat of
    that power; a first-order rule, fan power following the heat load), and the power
    supplies deliver it all at ``psu_efficiency`` (AC at the wall to DC, 80 PLUS levels:
    CLEAResult, 80 PLUS program): ``(1 + fans) / psu_efficiency``."""
    return (1.0 + np.asarray(fan_power_fraction, dtype=float)) / np.asarray(
        psu_efficiency, dtype=float
    )


def network_static_power_w(
    nic_w, scaleup_switch_w, scaleout_switch_w, n, scaleup_size
) -> np.ndarray:
    """NIC and switch static power per accelerator; the scale-out switches count only for
    jobs beyond one scale-up domain."""
    return nic_w + scaleup_switch_w + where_or_zero(n > scaleup_size, scaleout_switch_w)


def facility_overhead_factor(pue: np.ndarray, cooling_cop: np.ndarray) -> np.ndarray:
    """Facility energy per unit of IT energy minus one.

    With a cooling coefficient of performance (finite ``cooling_cop``) the overhead is the
    cooling plant's electricity, IT heat / COP (seed 000: E_cooling = Q_thermal / CoP;
    all IT power ends up as heat); otherwise PUE - 1 (The Green Grid, PUE definition).
    """
    cop = np.asarray(cooling_cop, dtype=float)
    return where(np.isfinite(cop) & (cop > 0), 1.0 / where(cop > 0, cop, 1.0), pue - 1.0)


@dataclass(frozen=True, slots=True)
class FacilityPower:
    """The facility's power over the run (W) and its largest ramp (W/s)."""

    avg_w: np.ndarray
    peak_w: np.ndarray
    swing_w: np.ndarray
    ramp_w_per_s: np.ndarray


def facility_power_w(
    *, facility_j, time_s, n, p_busy, p_wait, p_other, overhead, low_phase, transition_s
) -> FacilityPower:
    """Facility power: ``avg`` (energy / time), ``peak`` (every accelerator busy, with its
    share of host and network power ``p_other``, scaled by the overhead), ``swing`` (the IT
    step between the busy and the blocked phase, synchronised over all ``n``
    accelerators, where a low phase exists; the cooling plant does not follow sub-second
    swings, so no overhead on it) and ``ramp`` (the swing over the transition time, W/s).
    The powers are at the wall (the caller scales them by :func:`wall_factor`)."""
    avg = facility_j / where_shared(time_s > 0, time_s, np.nan)
    peak = n * (p_busy + p_other) * (1.0 + overhead)
    swing = where_or_zero(low_phase, n * np.maximum(p_busy - p_wait, 0.0))
    return FacilityPower(avg_w=avg, peak_w=peak, swing_w=swing, ramp_w_per_s=swing / transition_s)
