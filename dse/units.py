"""The units layer: every quantity a person reads (the report, the PNG figures, ``dse
show``, the run's progress lines and ``dse status``, ``dse compare``, the sensitivity
tables) is converted here from the unit it is stored in to the unit it is shown in, and a
study's units (``display_units``, a constraint's bound) are checked and converted here.

Metrics are stored once, in SI units (J, s, W; memory in GiB, clocks in MHz, temperatures
in degC, as their names say). A study may name the unit a metric is shown in
(``display_units: {energy_to_train_j: MWh}``), and may write a constraint's bound in any
unit of the metric's kind (``energy_to_train_j <= 50 MWh``); otherwise a readable unit is
chosen for the largest value shown: an axis of joules up to 3e11 is drawn in GJ, one of
seconds up to 6.5e4 in hours, so that ticks read "120 GJ" and "18 h", not "1.2 × 1e11".

The table of units is small and closed on purpose (the kinds of quantity the evaluators
report): a unit outside it is refused by name with the list of those known, where a general
units library would accept spellings the rest of the tool cannot show or export."""

from __future__ import annotations

import math

#: each unit a study may name: the unit metrics of its kind are stored in, and how many of
#: those one of it is (``MWh``: 3.6e9 J)
UNITS: dict[str, tuple[str, float]] = {
    # energy, stored in joules
    **{p + "J": ("J", f) for p, f in (("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9))},
    **{p + "J": ("J", f) for p, f in (("T", 1e12), ("P", 1e15))},
    **{p + "Wh": ("J", 3600.0 * f) for p, f in (("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9))},
    # time, stored in seconds
    "ms": ("s", 1e-3),
    "s": ("s", 1.0),
    "min": ("s", 60.0),
    "h": ("s", 3600.0),
    "days": ("s", 86_400.0),
    "weeks": ("s", 604_800.0),
    # power, stored in watts
    **{p + "W": ("W", f) for p, f in (("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9))},
    # memory, stored in GiB (2^30 bytes, as a part's capacity is counted)
    **{u: ("GiB", 2.0 ** (10 * k - 30)) for k, u in enumerate(("B", "KiB", "MiB", "GiB", "TiB"))},
    **{u: ("GiB", 10.0 ** (3 * k) / 2.0**30) for k, u in enumerate(("B", "kB", "MB", "GB", "TB"))},
    # clock, stored in MHz
    "Hz": ("MHz", 1e-6),
    "kHz": ("MHz", 1e-3),
    "MHz": ("MHz", 1.0),
    "GHz": ("MHz", 1e3),
    # mass (emissions), stored in kg
    "g": ("kg", 1e-3),
    "kg": ("kg", 1.0),
    "t": ("kg", 1e3),
    # temperature, stored in degC (as ``dse show`` heads its column): a bound may name it
    "degC": ("degC", 1.0),
}
#: other spellings of a unit in :data:`UNITS`
ALIASES = {
    "day": "days",
    "d": "days",
    "week": "weeks",
    "hour": "h",
    "hours": "h",
    "hr": "h",
    "hrs": "h",
    "minute": "min",
    "minutes": "min",
    "mins": "min",
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "°C": "degC",
}

#: SI prefixes for the units that span many decades in a study (energy, power)
_PREFIXED = ("J", "W", "Wh", "B", "FLOP")
_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
#: larger units of time, used from twice their length
_TIMES = ((86_400.0, "days"), (3_600.0, "h"), (60.0, "min"))


def canonical(unit: str) -> str:
    """``unit`` as :data:`UNITS` spells it (``day`` is ``days``)."""
    return ALIASES.get(unit, unit)


def unit_problem(unit: str) -> str | None:
    """Why ``unit`` cannot be named in a study (None: it can)."""
    if canonical(unit) in UNITS:
        return None
    same = [u for u in (*UNITS, *ALIASES) if u.lower() == str(unit).lower()]
    hint = f" (did you mean '{same[0]}'?)" if same else ""  # MWH, kwh: the case is wrong
    return f"unknown unit '{unit}'{hint}; known: {', '.join(UNITS)}"


def factor(stored: str, shown: str) -> float | None:
    """The divisor that turns values in ``stored`` into values in ``shown`` (``J`` to
    ``MWh``: 3.6e9), or None when they are not units of one kind this layer knows."""
    stored, shown = canonical(stored), canonical(shown)
    if stored == shown:
        return 1.0
    a, b = UNITS.get(stored), UNITS.get(shown)
    if a is None or b is None or a[0] != b[0]:
        return None
    return b[1] / a[1]


def kinds_of(stored: str) -> list[str]:
    """The units a value stored in ``stored`` can be shown in (empty: none known)."""
    base = UNITS.get(canonical(stored))
    return [u for u, (b, _) in UNITS.items() if base and b == base[0]]


def readable(unit: str, largest: float) -> tuple[float, str]:
    """``(factor, unit)``: divide values in ``unit`` by ``factor`` to show them in the
    returned unit, chosen for the ``largest`` absolute value shown. Units other than
    joules, watts, bytes, FLOP and seconds are left as they are (factor 1)."""
    if not math.isfinite(largest) or largest <= 0:
        return 1.0, unit
    if unit == "s":
        for f, name in _TIMES:
            if largest >= 2 * f:
                return f, name
        return 1.0, unit
    if unit in _PREFIXED:
        for f, prefix in _PREFIXES:
            if largest >= f:
                return f, prefix + unit
    return 1.0, unit


def shown(unit: str, largest: float, wanted: str | None = None) -> tuple[float, str]:
    """``(factor, unit)`` a quantity stored in ``unit`` is shown in: ``wanted`` (a study's
    ``display_units``) when given and of the same kind, else :func:`readable` for the
    ``largest`` absolute value shown."""
    if wanted:
        f = factor(unit, wanted)
        if f is not None:
            return f, canonical(wanted)
    return readable(unit, largest)


def quantity(value: float, unit: str, wanted: str | None = None) -> str:
    """``value`` (in ``unit``) as text in the unit it is shown in: ``"41.7 MWh"``."""
    if not math.isfinite(value):
        return f"{value} {unit}".rstrip()
    f, u = shown(unit, abs(value), wanted)
    return f"{value / f:.4g} {u if u not in ('1', 'bool') else ''}".rstrip()
