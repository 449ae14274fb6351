"""The pace of a run in words: evaluations per second, time left, failures, best values
(the progress display and ``dse status`` say it alike)."""

from __future__ import annotations

import math

from dse.units import quantity


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def progress_lines(record: dict) -> tuple[str, str]:
    """The pace (evaluations per second, time left, failures) and the best value of each
    objective, as the progress display and ``dse status`` show them."""
    rate = record.get("rate_per_s")
    pace = (
        f"{'?' if rate is None else f'{rate:,.1f}'} evaluations/s · {_duration(record.get('eta_s'))} left"
        f" · failed {record.get('failed', 0):,} · feasible {record.get('feasible', 0):,}"
        f" · front {record.get('front_size', 0):,}"
    )
    units = record.get("best_units") or {}  # metric -> [stored unit, the study's display unit]
    best = " · ".join(
        f"{metric} {quantity(value, *units.get(metric, ['']))}"
        for metric, value in (record.get("best") or {}).items()
    )
    return pace, f"best: {best}" if best else "best: (no feasible candidate yet)"
