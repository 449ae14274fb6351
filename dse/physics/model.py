"""The analytic model: the time model, then the energy model on its breakdown."""

from __future__ import annotations

import numpy as np

from dse.physics import energy_model, time_model

INPUTS = [*time_model.INPUTS, *energy_model.INPUTS]
METRICS = [*time_model.METRICS, *energy_model.METRICS]


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
    """All metrics plus ``feasible`` and ``reason`` for the candidates in ``cfg``."""
    perf = time_model.evaluate(cfg)
    # The energy model may change the clock (power cap, thermal throttling); it re-times
    # the affected rows through this callback and returns the time metrics at the final
    # clock, which win.
    energy = energy_model.evaluate(
        cfg, perf, retime=lambda clock_mhz, rows: time_model.evaluate(take_rows(cfg, rows), clock_mhz))
    time_ok = perf["_reason_code"] == 0  # no time-side reason (integer codes: no string compares)
    energy_reasons = energy.pop("reason")
    reasons = merge_reasons(perf["reason"], energy_reasons, first_empty=time_ok)
    out = {k: v for k, v in perf.items() if not k.startswith("_") and k != "reason"}
    out.update(energy)
    out["feasible"] = time_ok & (energy_reasons == "")
    out["reason"] = reasons
    return out
