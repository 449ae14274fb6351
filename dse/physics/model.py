"""The analytic model: the time model, then the energy model on its breakdown."""

from __future__ import annotations

import numpy as np

from dse.physics import energy_model, time_model

INPUTS = [*time_model.INPUTS, *energy_model.INPUTS]
METRICS = [*time_model.METRICS, *energy_model.METRICS]


def evaluate(cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """All metrics plus ``feasible`` and ``reason`` for the candidates in ``cfg``."""
    perf = time_model.evaluate(cfg)
    # The energy model may change the clock (power cap, thermal throttling); it re-times
    # through this callback and returns the time metrics at the final clock, which win.
    energy = energy_model.evaluate(cfg, perf, retime=lambda clock_mhz: time_model.evaluate(cfg, clock_mhz))
    reasons = perf["reason"]
    out = {k: v for k, v in perf.items() if not k.startswith("_") and k != "reason"}
    out.update(energy)
    out["feasible"] = reasons == ""
    out["reason"] = reasons
    return out
