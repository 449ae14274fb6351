"""Which candidates of a front to look at: the knee, the best per objective, the best for a
weighting of energy against time, and where their energy and time go. Pure functions of
the front as a table; no I/O."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dse.pareto import objective_matrix
from dse.study import Study

#: components of the energy to train and of the iteration time, as the analytic evaluator
#: reports them (``dse describe``); any evaluator reporting metrics of these names gets the
#: breakdown, the others get none. A component is the sum of its metrics.
ENERGY_PARTS = {
    "compute": ("energy_compute_j",),
    "memory": ("energy_memory_j",),
    "communication": ("energy_network_j",),
    "bubble and waiting": ("energy_waiting_j",),
    "idle": ("energy_idle_j",),
    "host": ("energy_host_j",),
    "cooling": ("energy_facility_overhead_j",),
}
ENERGY_TOTAL = "energy_to_train_j"
TIME_PARTS = {
    "compute": ("compute_time_s",),
    "memory": ("memory_time_s",),
    "communication": (
        "tp_comm_time_s",
        "cp_comm_time_s",
        "ep_comm_time_s",
        "pp_comm_time_s",
        "dp_comm_time_s",
    ),
    "bubble": ("bubble_time_s",),
    "optimizer": ("optimizer_time_s",),
}
TIME_TOTAL = "step_time_s"
ENERGY = "energy_to_train_j"
TIME = "time_to_train_s"
PEAK_POWER = "facility_peak_power_w"


def knee(f: np.ndarray) -> int:
    """Row of the knee: the point of the front farthest from the hyperplane through its
    extreme points, towards the ideal point, in objectives scaled to [0, 1] over the front
    (Das 1999, "On characterizing the 'knee' of the Pareto curve based on normal-boundary
    intersection", Struct. Optim. 18:107-115)."""
    lo, span = f.min(axis=0), np.ptp(f, axis=0)
    z = (f - lo) / np.where(span > 0, span, 1)
    extremes = z[np.argmin(z, axis=0)]  # one per objective
    w, *_ = np.linalg.lstsq(extremes, np.ones(len(extremes)), rcond=None)  # plane w.z = 1
    if not np.all(np.isfinite(w)) or np.allclose(w, 0):
        w = np.ones(z.shape[1])
    return int(np.argmin(z @ w))


def best_per_objective(front: pd.DataFrame, study: Study) -> dict[str, int]:
    """Row of the best candidate for each objective."""
    f = objective_matrix(front, study)
    return {o.metric: int(np.argmin(f[:, j])) for j, o in enumerate(study.objectives)}


@dataclass
class Weighting:
    """score(η) = η·a + (1 − η)·b over the front; the lowest score is the choice."""

    a: np.ndarray
    b: np.ndarray
    formula: str  # how a and b were made, for the page

    def best(self, eta: float) -> int:
        return int(np.argmin(eta * self.a + (1 - eta) * self.b))


def weighting(front: pd.DataFrame, study: Study) -> Weighting:
    """η·energy′ + (1 − η)·time′ over the front, each objective scaled to [0, 1] over the
    front (0: its best value there, 1: its worst), so that η from 0 to 1 sweeps the whole
    front, from the fastest point to the most frugal one (weighting the raw values, time
    priced at the peak power, picked the fastest point for every η below 0.5). Without
    energy and time metrics, the first two objectives, scaled alike."""
    if ENERGY in front and TIME in front:
        f = np.column_stack([front[ENERGY].to_numpy(float), front[TIME].to_numpy(float)])
        names = [ENERGY, TIME]
    else:
        f = objective_matrix(front, study)
        f = np.column_stack([f, f]) if f.shape[1] == 1 else f[:, :2]
        names = [o.metric for o in study.objectives] * 2
    span = np.nanmax(f, axis=0) - np.nanmin(f, axis=0) if len(f) else np.ones(2)
    z = (f - np.nanmin(f, axis=0)) / np.where(span > 0, span, 1)
    return Weighting(
        z[:, 0],
        z[:, 1],
        f"η·{names[0]}′ + (1 − η)·{names[1]}′, each scaled to [0, 1] over the front (0 its "
        f"best value there, 1 its worst): η = 1 picks the best {names[0]}, η = 0 the best "
        f"{names[1]}",
    )


#: what the knee is, in one sentence (the report says it beside the star)
KNEE_SENTENCE = (
    "The knee (★) is the front point farthest from the straight line (with more objectives, "
    "the plane) through the best point of each objective, towards better values, each "
    "objective scaled to [0, 1] over the front: the point where a further gain in one "
    "objective starts to cost disproportionately more of another."
)


def tradeoffs(
    front: pd.DataFrame, rows: dict[str, int], metrics: list[str]
) -> dict[tuple[str, str], dict[str, float]]:
    """What each named design gives and takes against each other one, in percent:
    ``{(a, b): {metric: 100 · (a − b) / |b|}}`` (NaN where b's value is 0 or missing)."""
    out = {}
    for a, i in rows.items():
        for b, j in rows.items():
            if a == b:
                continue
            diff = {}
            for m in metrics:
                va, vb = float(front[m].iloc[i]), float(front[m].iloc[j])
                diff[m] = 100 * (va - vb) / abs(vb) if vb != 0 and np.isfinite(vb) else np.nan
            out[(a, b)] = diff
    return out


def breakdown(
    front: pd.DataFrame, parts: dict[str, tuple[str, ...]], total: str
) -> pd.DataFrame | None:
    """Components per candidate (columns in ``parts`` order, plus ``other`` when the parts
    fall short of ``total`` by more than 0.1 %); None when the front has none of them."""
    have = {k: [m for m in ms if m in front] for k, ms in parts.items()}
    if not any(have.values()):
        return None
    out = pd.DataFrame({k: front[ms].to_numpy(float).sum(axis=1) for k, ms in have.items() if ms})
    if total in front:
        rest = front[total].to_numpy(float) - out.sum(axis=1).to_numpy()
        if np.nanmax(np.abs(rest) / np.maximum(front[total].to_numpy(float), 1e-300)) > 1e-3:
            out["other"] = rest
    return out
