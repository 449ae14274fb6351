"""The analytic model: the time half, then the energy half on its :class:`TimeResult`."""

from __future__ import annotations

import numpy as np

from dse.analytic.energy import model as energy_model
from dse.analytic.time import model as time_model


def take_rows(cfg: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The inputs of the candidates ``rows`` (an index array) only."""
    return {k: (v[rows] if np.ndim(v) else v) for k, v in cfg.items()}


def merge_reasons(first: np.ndarray, then: np.ndarray, first_empty: np.ndarray | None = None) -> np.ndarray:
    """Per row, the first non-empty reason: ``first`` where it has one, else ``then``.
    ``first_empty``: where ``first`` is empty, when the caller knows it already."""
    out = np.array(first, dtype=object)
    fill = (out == "" if first_empty is None else first_empty) & (then != "")
    out[fill] = then[fill]
    return out


def evaluate(cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """All metrics plus ``feasible`` and ``reason`` for the candidates in ``cfg`` (every
    declared input present: :func:`dse.analytic.declarations.complete`)."""
    perf = time_model.evaluate(cfg)

    def retime(clock_mhz: np.ndarray, rows: np.ndarray):
        return time_model.evaluate(take_rows(cfg, rows), clock_mhz)

    # The energy model may change the clock (power cap, thermal throttling); it re-times
    # the affected rows and hands back the time result at the final clock, which wins.
    energy = energy_model.evaluate(cfg, perf, retime)
    time_ok = perf.reason_code == 0  # no time-side reason (integer codes: no string compares)
    out = energy.timing.metrics()
    out.update(energy.metrics)
    out["feasible"] = time_ok & (energy.reason == "")
    out["reason"] = merge_reasons(perf.reason, energy.reason, first_empty=time_ok)
    return out
