"""Readable units for figures: an axis of joules up to 3e11 is drawn in GJ, one of
seconds up to 6.5e4 in hours, so that ticks read "120 GJ" and "18 h", not "1.2 × 1e11"."""

from __future__ import annotations

import math

#: SI prefixes for the units that span many decades in a study (energy, power)
_PREFIXED = ("J", "W", "Wh", "B", "FLOP")
_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
#: larger units of time, used from twice their length
_TIMES = ((86_400.0, "days"), (3_600.0, "h"), (60.0, "min"))


def readable(unit: str, largest: float) -> tuple[float, str]:
    """``(factor, unit)``: divide values in ``unit`` by ``factor`` to show them in the
    returned unit, chosen for the ``largest`` absolute value shown. Units other than
    joules, watts, bytes, FLOP and seconds are left as they are (factor 1)."""
    if not math.isfinite(largest) or largest <= 0:
        return 1.0, unit
    if unit == "s":
        for factor, name in _TIMES:
            if largest >= 2 * factor:
                return factor, name
        return 1.0, unit
    if unit in _PREFIXED:
        for factor, prefix in _PREFIXES:
            if largest >= factor:
                return factor, prefix + unit
    return 1.0, unit
