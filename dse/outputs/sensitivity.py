"""Marginal efficiency and sensitivity of one design of a finished run (``dse sensitivity``,
``dse.sensitivity``, the tornado chart of ``dse report``).

**Local.** The design (the knee, the best per objective, or a front candidate named by its
key; with ``where``, of the front of the run's feasible evaluations whose knobs take given
values: one layout's best designs) is evaluated again by the study's evaluator, in this
process, with each knob of the study moved while the others stay put; from the differences
comes the elasticity of each objective (and each constrained metric) to each knob,
``d ln M / d ln x``: the percentage change of M per 1 % of x. How a knob is moved depends
on what the evaluator accepts:

* a real-valued input (``float``): a central difference on ``ln x``, ``x·e^(±h)`` with the
  relative step ``h`` (default 0.1 %), even where the study lists only some values (the
  evaluator takes any value in the input's range); where ``x·e^(±h)`` leaves the input's
  range, the second-order one-sided difference ``(3 M(x) − 4 M(x·e^(∓h)) + M(x·e^(∓2h))) /
  2h`` on the side that stays in range;
* a whole-number input (``int``: accelerator count, batch, parallel degrees): an arc
  elasticity between the study's neighbouring values, ``ln(M₊/M₋) / ln(x₊/x₋)`` (at an end
  of the study's list, between the design and its one neighbour);
* a text or true/false input (accelerator type, cooling): no elasticity; the relative change
  of each metric when the knob takes each of the study's other values instead.

Knobs are ranked by the largest ``|elasticity|`` over the objectives. The energy and time
breakdowns the evaluator reports (:mod:`dse.outputs.selection`) are evaluated at the same
points, so that each knob's elasticity splits into what each component contributes (the
contributions add up to the elasticity of the total).

**Global.** Variance-based (Sobol') indices over the study's whole space, computed with
SALib (Saltelli's sampling scheme; Saltelli et al. 2010's first-order and Jansen 1999's
total-effect estimators, as SALib implements them; ``calc_second_order=False``): first-order
``S1`` (the share of the variance of ``ln M`` a knob explains alone) and total ``ST`` (alone
and with the others), each knob drawn uniformly over its values (a range without step:
uniformly over the interval). ``N`` base samples cost ``N·(k + 2)`` evaluations for ``k``
knobs; the base sample is a power of two (a Sobol' sequence's balance). Blocks of the
scheme with a metric the evaluator could not give (not finite) are left out, and counted.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.checks import canonical_values
from dse.datasets import to_table
from dse.errors import DseError
from dse.evaluators import Evaluator, check_result, load_evaluator
from dse.outputs import selection as sel
from dse.pareto import feasible_mask, infeasibility_summary, objective_matrix
from dse.results import Results, open_results
from dse.space import Parameter, Space
from dse.study import Study

#: the relative step of the central differences: x·e^(±h)
STEP = 1e-3
#: evaluations of the global indices by default, where the evaluator is cheap
#: (:attr:`~dse.evaluators.Evaluator.preview_size` > 0); 0 for the others
GLOBAL_SAMPLES = 10_000
#: the most evaluations of the global indices: Saltelli's sample is held in memory whole
#: (10^12 asked for a 20 TiB array), and 10^6 is a hundred times the default
GLOBAL_SAMPLES_MAX = 1_000_000
#: the energy breakdown of :mod:`dse.outputs.selection`, the power supply's loss named
ENERGY_PARTS = {
    **{k: v for k, v in sel.ENERGY_PARTS.items() if k != "cooling"},
    "power supply": ("energy_power_supply_j",),
    "cooling": sel.ENERGY_PARTS["cooling"],
}
#: the links' energy (bytes x pJ/bit at the link clock) of each fabric, where the evaluator
#: reports it (the analytic evaluator does: docs/model-energy.md, section 2b)
LINK_ENERGY = {
    "scale-up links": "energy_scaleup_links_j",
    "scale-out links": "energy_scaleout_links_j",
}
#: the rest of the network's energy (NICs' and switches' static power): ``energy_network_j``
#: minus the links', a column computed here
NETWORK_REST = "energy_network_rest_j"
#: :data:`ENERGY_PARTS` with its communication split into the links of each fabric and the
#: rest of the network, for an evaluator that reports the links' energy
SPLIT_ENERGY_PARTS: dict[str, tuple[str, ...]] = {}
for _name, _metrics in ENERGY_PARTS.items():
    if _name == "communication":
        SPLIT_ENERGY_PARTS.update({k: (m,) for k, m in LINK_ENERGY.items()})
        SPLIT_ENERGY_PARTS["network, other (NICs, switches)"] = (NETWORK_REST,)
    else:
        SPLIT_ENERGY_PARTS[_name] = _metrics


def energy_parts(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, tuple[str, ...]]]:
    """The components of the energy to train for ``table``: :data:`SPLIT_ENERGY_PARTS`
    (``table`` with the rest of the network's energy added as a column) where the evaluator
    reports the links' energy and the network's, else :data:`ENERGY_PARTS`."""
    network = sel.ENERGY_PARTS["communication"][0]
    links = list(LINK_ENERGY.values())
    if network not in table or not all(m in table for m in links):
        return table, ENERGY_PARTS
    rest = table[network].to_numpy(float) - table[links].to_numpy(float).sum(axis=1)
    return table.assign(**{NETWORK_REST: rest}), SPLIT_ENERGY_PARTS


#: the time breakdown of :mod:`dse.outputs.selection`, communication per collective
#: (tensor, context and expert parallel usually stay within the scale-up domain, data and
#: pipeline parallel cross the scale-out network)
TIME_PARTS = {
    "compute": sel.TIME_PARTS["compute"],
    "memory": sel.TIME_PARTS["memory"],
    "tensor-parallel comm.": ("tp_comm_time_s",),
    "context-parallel comm.": ("cp_comm_time_s",),
    "expert-parallel comm.": ("ep_comm_time_s",),
    "pipeline-parallel comm.": ("pp_comm_time_s",),
    "data-parallel comm.": ("dp_comm_time_s",),
    "bubble": sel.TIME_PARTS["bubble"],
    "optimizer": sel.TIME_PARTS["optimizer"],
}
#: an elasticity below this is the differences' rounding (float64 over a step of 0.1 %:
#: about 1e-13), shown as 0
NOISE = 1e-9
#: what ``--at`` takes besides a key
NAMED = ("knee", "best-energy", "best-time", "best-<objective metric>")


@dataclass(frozen=True)
class Knob:
    """One knob moved: how, and between which values."""

    name: str
    kind: str  # "continuous", "ordinal" or "categorical"
    unit: str
    value: Any  # the design's value
    method: str  # how it was moved, in words
    tried: tuple  # the other values evaluated


@dataclass(frozen=True)
class Breakdown:
    """Where one total goes at the design, and what each knob's elasticity of it is made of."""

    title: str  # "energy to train", "time per iteration"
    total: str  # the metric the components add up to
    unit: str
    parts: pd.Series  # component -> value at the design, in ``unit``
    elasticity: pd.Series  # knob -> d ln total / d ln knob
    contributions: pd.DataFrame  # knob x component: share of that elasticity [1]


@dataclass(frozen=True)
class Local:
    """What :func:`local` finds at one design."""

    elasticity: pd.DataFrame  # numeric knob x metric: d ln M / d ln x, ranked
    alternatives: pd.DataFrame  # (knob, value) x metric: relative change [1]
    alternatives_ok: pd.Series  # (knob, value) -> meets the study
    knobs: tuple[Knob, ...]
    breakdowns: tuple[Breakdown, ...]
    base: pd.Series  # metric -> value at the design
    evaluations: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class GlobalIndices:
    """Sobol' indices of ``ln M`` (or of M where it is not always positive) over the space."""

    first: pd.DataFrame  # knob x metric: S1
    first_conf: pd.DataFrame  # half-width of its 95 % bootstrap interval
    total: pd.DataFrame  # knob x metric: ST
    total_conf: pd.DataFrame
    logarithmic: dict[str, bool]  # metric -> indices of ln M (True) or of M
    evaluations: int
    left_out: int  # evaluations in blocks left out (a metric not finite)
    seconds: float


@dataclass(frozen=True)
class Sensitivity:
    """The local sensitivity of one design (and optionally the global indices of the space)."""

    study: str
    at: str  # what was asked for: "knee", "best-time", a key
    key: int | None  # the design's candidate key in the run (None: a design given directly)
    design: dict[str, Any]  # the design's knob values
    metrics: tuple[str, ...]  # objectives, then the constraints' metrics
    objectives: tuple[str, ...]
    units: dict[str, str]  # metric or knob -> unit
    base: pd.Series  # metric -> value at the design, evaluated now
    knobs: tuple[Knob, ...]  # numeric knobs ranked, then the categorical ones
    elasticity: pd.DataFrame  # numeric knob x metric: d ln M / d ln x, ranked
    alternatives: (
        pd.DataFrame
    )  # (knob, value) x metric: relative change [1] (ordinal: the neighbours)
    alternatives_ok: pd.Series  # (knob, value) -> meets the constraints (and feasible)
    breakdowns: tuple[Breakdown, ...]
    evaluations: int
    seconds: float
    step: float
    notes: tuple[str, ...] = ()
    global_indices: GlobalIndices | None = None
    stored: dict[str, float] = field(default_factory=dict)  # metric -> value the run stored
    display_units: dict[str, str] = field(default_factory=dict)  # the study's: metric -> unit

    def ranking(self, metric: str | None = None) -> list[str]:
        """The numeric knobs, largest ``|elasticity|`` first: of ``metric``, or (None) the
        largest over the objectives."""
        e = self.elasticity.abs()
        score = e[list(self.objectives)].max(axis=1) if metric is None else e[metric]
        return list(score.fillna(-1.0).sort_values(ascending=False, kind="stable").index)

    def change_per_percent(self) -> pd.DataFrame:
        """knob x metric: the change of the metric, in its unit, for +1 % of the knob."""
        return self.elasticity * self.base * 0.01

    def to_dataset(self):
        """The result as an :class:`xarray.Dataset` with units."""
        import xarray as xr

        knobs = list(self.elasticity.index)
        data = {
            "elasticity": xr.DataArray(
                self.elasticity.to_numpy(float),
                dims=("knob", "metric"),
                attrs={"units": "1", "long_name": "d ln metric / d ln knob at the design"},
            ),
            "value": xr.DataArray(
                self.base.to_numpy(float),
                dims=("metric",),
                attrs={"long_name": "metric at the design (units: the metric_units coordinate)"},
            ),
        }
        coords = {
            "knob": knobs,
            "metric": list(self.metrics),
            "metric_units": ("metric", [self.units.get(m, "") for m in self.metrics]),
            "method": ("knob", [{k.name: k.method for k in self.knobs}[n] for n in knobs]),
        }
        g = self.global_indices
        if g is not None:
            for name, table, long in (
                ("sobol_first", g.first, "first-order Sobol' index"),
                ("sobol_total", g.total, "total Sobol' index"),
            ):
                data[name] = xr.DataArray(
                    table.to_numpy(float),
                    dims=("global_knob", "objective"),
                    attrs={"units": "1", "long_name": long},
                )
            coords["global_knob"] = list(g.first.index)
            coords["objective"] = list(g.first.columns)
        return xr.Dataset(
            data,
            coords=coords,
            attrs={
                "study": self.study,
                "at": self.at,
                "key": -1 if self.key is None else self.key,
                "design": ", ".join(f"{k}={v}" for k, v in self.design.items()),
                "step": self.step,
            },
        )


# -- choosing the design ----------------------------------------------------------------------
def pick(front: pd.DataFrame, study: Study, at: str | int) -> int:
    """Row of ``front`` that ``at`` names: ``knee``, ``best-energy``, ``best-time``,
    ``best-<objective metric>`` or a candidate's key (``dse export``'s key column)."""
    text = str(at).strip()
    objectives = [o.metric for o in study.objectives]
    best = sel.best_per_objective(front, study)
    aliases = {
        alias: next((m for m in objectives if m.startswith(stem)), stem)
        for alias, stem in (("best-energy", "energy_to_train"), ("best-time", "time_to_train"))
    }
    if text == "knee":
        return sel.knee(objective_matrix(front, study))
    if text.startswith("best-"):
        metric = aliases.get(text, text[len("best-") :])
        if metric in best:
            return best[metric]
    elif text.lstrip("-").isdigit() and "key" in front:
        rows = np.flatnonzero(front["key"].to_numpy(np.int64) == int(text))
        if len(rows):
            return int(rows[0])
    keys = front["key"].astype(str).tolist() if "key" in front else []
    shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
    raise DseError(
        "no such design on the front",
        field="--at",
        value=text,
        allowed="knee"
        + (", best-energy" if aliases["best-energy"] in objectives else "")
        + (", best-time" if aliases["best-time"] in objectives else "")
        + f", {', '.join(f'best-{m}' for m in objectives)}"
        + (f", or a front candidate's key ({shown})" if keys else ""),
    )


def _same(value: Any, raw: Any) -> bool:
    """Whether ``raw`` (a value, or from the command line its text) names ``value``."""
    if str(value).lower() == str(raw).strip().lower():
        return True
    numeric = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if not numeric or isinstance(raw, bool):
        return False
    try:
        return math.isclose(float(raw), float(value), rel_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _matches(column: pd.Series, p: Parameter, raw: Any) -> tuple[np.ndarray, Any]:
    """Rows of ``column`` (parameter ``p``'s values) equal to ``raw``, and the value; None
    for a value the study does not offer."""
    if p.values is not None:
        same = [v for v in p.values if _same(v, raw)]
        if not same:
            return np.zeros(len(column), bool), None
        if isinstance(same[0], float):  # as the study's grid spelled it, or within rounding
            return np.isclose(column.to_numpy(float), same[0], rtol=1e-9, atol=0), same[0]
        return (column == same[0]).to_numpy(bool), same[0]
    try:
        x = float(raw)
    except (TypeError, ValueError):
        return np.zeros(len(column), bool), None
    if not p.low <= x <= p.high:
        return np.zeros(len(column), bool), None
    return np.isclose(column.to_numpy(float), x, rtol=1e-12, atol=0), x


def front_where(run: Results, where: dict[str, Any], space: Space | None = None) -> pd.DataFrame:
    """The Pareto front of the run's feasible evaluations whose knobs take the values
    ``where`` names (``{parameter: value}``; from the command line the value's text): the
    best designs of one layout, say, when the run's front holds none of it. ``space``: the
    study's, its values as the evaluator spells them (:func:`evaluator_and_space`)."""
    from moocore import is_nondominated

    study = run.study
    params = {p.name: p for p in (space or Space.from_study(study)).parameters}
    table = to_table(run.evaluations)
    chosen = np.ones(len(table), bool)
    for name, raw in where.items():
        p = params.get(name)
        if p is None or name not in table:
            raise DseError(
                "not a parameter of the study's space",
                field="--where",
                value=f"{name}={raw}",
                allowed="NAME=VALUE with NAME one of " + ", ".join(params),
            )
        rows, value = _matches(table[name], p, raw)
        if value is None:
            offered = (
                ", ".join(map(str, p.values))
                if p.values is not None
                else f"a number from {p.low:g} to {p.high:g}"
            )
            raise DseError(
                f"not a value of {name} in the study",
                field="--where",
                value=f"{name}={raw}",
                allowed=offered,
            )
        chosen &= rows
    ok = chosen & feasible_mask(table, study)
    if not ok.any():
        said = ", ".join(f"{k}={v}" for k, v in where.items())
        why = "; ".join(f"{r} ({n})" for r, n in infeasibility_summary(table[chosen], study))
        raise DseError(
            f"{run.path}: no feasible evaluation with {said} ({int(chosen.sum())} kept with "
            f"these values{', ruled out: ' + why if why else ''}; `dse export {run.path} "
            "--all` writes them with their metrics)",
            field="--where",
            value=said,
        )
    sub = table[ok].reset_index(drop=True)
    return sub[is_nondominated(objective_matrix(sub, study), keep_weakly=True)].reset_index(
        drop=True
    )


# -- evaluating ---------------------------------------------------------------------------------
@dataclass
class _Plan:
    """The rows to evaluate: the design first, then each knob's moved copies."""

    design: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    knobs: list[tuple[Knob, list[int], list[float]]] = field(default_factory=list)

    def add(self, changes: dict[str, Any]) -> int:
        self.rows.append({**self.design, **changes})
        return len(self.rows) - 1


def _numeric_steps(x: float, step: float, low: float | None, high: float | None):
    """``(method, offsets on ln x, weights)``: the difference quotient on ln x that stays
    within [low, high] (``weights``: of the design's value, then of each offset's); None
    when none does."""
    up_ok = high is None or x * math.exp(2 * step) <= high
    down_ok = low is None or x * math.exp(-2 * step) >= low
    centred = (high is None or x * math.exp(step) <= high) and (
        low is None or x * math.exp(-step) >= low
    )
    pct = f"{100 * step:.3g} %"  # the methods' short names; the module's docstring says more
    w = 1 / (2 * step)
    if centred:
        return f"central ±{pct}", [step, -step], [0.0, w, -w]
    if down_ok:  # at the top of the input's range: (3 M(x) − 4 M(x−) + M(x−−)) / 2h
        return (
            f"one-sided −{pct} (input's max.)",
            [-step, -2 * step],
            [3 * w, -4 * w, w],
        )
    if up_ok:  # at the bottom: (−3 M(x) + 4 M(x+) − M(x++)) / 2h
        return (
            f"one-sided +{pct} (input's min.)",
            [step, 2 * step],
            [-3 * w, 4 * w, -w],
        )
    return None


def _plan(
    design: dict[str, Any], space: Space, ev: Evaluator, step: float, extra: list[str]
) -> tuple[_Plan, list[str]]:
    plan, notes = _Plan(dict(design)), []
    plan.add({})
    params = {p.name: p for p in space.parameters}
    inputs = ev.inputs
    for name in [*params, *extra]:
        p, inp, x = params.get(name), inputs.get(name), design[name]
        unit = inp.unit if inp is not None else ""
        kind = inp.kind if inp is not None else None
        numeric = isinstance(x, int | float | np.number) and not isinstance(x, bool | np.bool_)
        if kind == "float" or (kind is None and numeric and p is not None and p.kind == "real"):
            if not numeric or not math.isfinite(float(x)) or float(x) <= 0:
                notes.append(f"{name} = {x}: no elasticity at a value that is not positive")
                continue
            x = float(x)
            how = _numeric_steps(
                x, step, None if inp is None else inp.minimum, None if inp is None else inp.maximum
            )
            if how is None:
                notes.append(f"{name}: the input's range is too narrow for a step of {step:g}")
                continue
            method, offsets, weights = how
            values = [x * math.exp(o) for o in offsets]
            rows = [plan.add({name: v}) for v in values]
            plan.knobs.append(
                (Knob(name, "continuous", unit, x, method, tuple(values)), rows, weights)
            )
        elif p is not None and p.values is not None and len(p.values) > 1:
            values = list(p.values)
            i = values.index(x) if x in values else None
            if i is None:
                notes.append(f"{name} = {x!r} is not one of the study's values")
                continue
            if p.kind == "categorical" or kind in ("str", "bool"):
                others = [v for v in values if v != x]
                rows = [plan.add({name: v}) for v in others]
                method = f"the study's {len(others)} other value{'s' if len(others) > 1 else ''}"
                plan.knobs.append(
                    (Knob(name, "categorical", unit, x, method, tuple(others)), rows, [])
                )
            else:  # neighbours by value (a study may list them in any order)
                values = sorted(values)
                i = values.index(x)
                near = values[max(i - 1, 0) : i] + values[i + 1 : i + 2]
                rows = [plan.add({name: v}) for v in near]
                method = "arc " + " ↔ ".join(str(v) for v in sorted([*near, x]))
                plan.knobs.append((Knob(name, "ordinal", unit, x, method, tuple(near)), rows, []))
        elif p is not None:
            notes.append(f"{name}: one value in the study, nothing to compare it with")
    return plan, notes


def _evaluate(ev: Evaluator, space: Space, rows: pd.DataFrame) -> pd.DataFrame:
    """The evaluator's table for ``rows`` (the study's fixed values added), in this process."""
    table = space.with_fixed(rows)
    try:
        return check_result(ev, table, ev.evaluate(table))
    except DseError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plug-in's failure, told in one line
        raise DseError(
            f"evaluator '{ev.name}' failed on {len(table)} designs of the sensitivity analysis: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _elasticity(v0: float, values: np.ndarray, knob: Knob, weights: list[float]) -> float:
    """d ln M / d ln x from the design's value and the moved ones."""
    if not np.isfinite(v0) or not np.all(np.isfinite(values)) or v0 == 0:
        return float("nan")
    if knob.kind == "continuous":
        e = float((weights[0] * v0 + values @ np.asarray(weights[1:])) / v0)
        return 0.0 if abs(e) < NOISE else e
    x = float(knob.value)
    pts = [(float(t), float(v)) for t, v in zip(knob.tried, values, strict=True)]
    if len(pts) == 2:
        (xa, va), (xb, vb) = pts
    else:
        (xa, va), (xb, vb) = (x, v0), pts[0]
    if min(xa, xb) <= 0 or xa == xb:
        return float("nan")
    if min(va, vb) > 0:
        return math.log(vb / va) / math.log(xb / xa)
    return (vb - va) / (abs(v0) * math.log(xb / xa))


def local(
    ev: Evaluator,
    space: Space,
    study: Study,
    design: dict[str, Any],
    *,
    step: float = STEP,
    extra: tuple[str, ...] = (),
) -> Local:
    """The elasticities of a design given directly (see the module's docstring):
    ``design`` holds a value for every parameter of ``space`` and for each name of
    ``extra`` (a real-valued input moved too)."""
    plan, notes = _plan(design, space, ev, step, list(extra))
    result = _evaluate(ev, space, pd.DataFrame(plan.rows))
    table = pd.concat([pd.DataFrame(plan.rows), result.reset_index(drop=True)], axis=1)
    objectives = [o.metric for o in study.objectives]
    metrics = list(dict.fromkeys([*objectives, *(c.metric for c in study.constraints)]))
    ok = feasible_mask(table, study)
    if not ok[0]:
        reason = str(table["reason"].iloc[0]) if "reason" in table else ""
        notes.append(
            "the design does not meet the study now"
            + (f" ({reason})" if reason else "")
            + ": its elasticities describe the evaluator there all the same"
        )
    base = table[metrics].iloc[0].astype(float)
    table, energy = energy_parts(table)
    parts = [
        (title, total, unit, sel.breakdown(table, p, total))
        for title, p, total, unit in (
            ("energy to train", energy, sel.ENERGY_TOTAL, "J"),
            ("time per iteration", TIME_PARTS, sel.TIME_TOTAL, "s"),
        )
        if total in table
    ]
    elastic, alternatives, alt_ok, knobs = {}, {}, {}, []
    contributions = {title: {} for title, *_ in parts}
    elasticity_of = {title: {} for title, *_ in parts}
    for knob, rows, weights in plan.knobs:
        if knob.kind == "categorical" or knob.kind == "ordinal":
            for r, v in zip(rows, knob.tried, strict=True):
                alternatives[(knob.name, str(v))] = (
                    table[metrics].iloc[r].astype(float) / base - 1
                ).where(base != 0)
                alt_ok[(knob.name, str(v))] = bool(ok[r])
        if knob.kind == "ordinal":
            knob, rows = _valued_neighbours(knob, rows, table[metrics])
        knobs.append(knob)
        if knob.kind == "categorical":
            continue
        elastic[knob.name] = {
            m: _elasticity(base[m], table[m].to_numpy(float)[rows], knob, weights) for m in metrics
        }
        for title, total, _, comp in parts:
            t0 = float(table[total].iloc[0])
            e = _elasticity(t0, table[total].to_numpy(float)[rows], knob, weights)
            elasticity_of[title][knob.name] = e
            if comp is None:
                continue
            delta = _spread(comp.to_numpy(float), rows, knob, weights)
            whole = float(delta.sum())
            share = delta / whole * e if abs(whole) > 1e-12 * abs(t0) else delta / t0
            contributions[title][knob.name] = pd.Series(share, index=comp.columns)
    order = _ranked(pd.DataFrame.from_dict(elastic, orient="index", columns=metrics), objectives)
    breakdowns = [
        Breakdown(
            title,
            total,
            unit,
            comp.iloc[0],
            pd.Series(elasticity_of[title], dtype=float),
            pd.DataFrame.from_dict(contributions[title], orient="index"),
        )
        for title, total, unit, comp in parts
        if comp is not None
    ]
    alt = pd.DataFrame.from_dict(alternatives, orient="index", columns=metrics)
    if len(alt):
        alt.index = pd.MultiIndex.from_tuples(alt.index, names=["knob", "value"])
    return Local(
        order,
        alt,
        pd.Series(alt_ok, dtype=bool),
        tuple(knobs),
        tuple(breakdowns),
        base,
        len(plan.rows),
        tuple(notes),
    )


def _valued_neighbours(knob: Knob, rows: list[int], values: pd.DataFrame) -> tuple[Knob, list]:
    """An ordinal knob without the neighbours the evaluator gives no value (it refuses them:
    a layout that does not divide, a design that does not fit): the arc runs from the design
    to the other neighbour. Unchanged where both have values, or neither."""
    kept = [i for i, r in enumerate(rows) if np.isfinite(values.iloc[r].to_numpy(float)).all()]
    if not kept or len(kept) == len(rows):
        return knob, rows
    tried = tuple(knob.tried[i] for i in kept)
    dropped = ", ".join(str(v) for v in knob.tried if v not in tried)
    method = "arc " + " ↔ ".join(str(v) for v in sorted([*tried, knob.value]))
    method += f" ({dropped}: refused by the evaluator)"
    return replace(knob, method=method, tried=tried), [rows[i] for i in kept]


def _spread(values: np.ndarray, rows: list[int], knob: Knob, weights: list[float]) -> np.ndarray:
    """Each component's change across the knob's moved points (on the scale of a difference
    quotient: only the shares among components matter, see :func:`local`)."""
    v0, moved = values[0], values[rows]
    if knob.kind == "continuous":
        return weights[0] * v0 + np.tensordot(np.asarray(weights[1:]), moved, axes=1)
    if len(rows) == 2:
        return moved[1] - moved[0]
    return moved[0] - v0


# -- global --------------------------------------------------------------------------------------
def global_indices(
    ev: Evaluator, space: Space, study: Study, evaluations: int, *, seed: int = 0
) -> GlobalIndices | None:
    """Sobol' indices of the objectives over ``space`` from at least ``evaluations``
    evaluations (None when the space has no knob of more than one value)."""
    knobs = [p for p in space.parameters if p.values is None or len(p.values) > 1]
    if not knobs or evaluations <= 0:
        return None
    from SALib.analyze import sobol as analyze  # ~1.7 s the first time: only when needed
    from SALib.sample import sobol as sample

    start = time.perf_counter()
    k = len(knobs)
    base_n = 1 << max(1, math.ceil(math.log2(max(evaluations, 1) / (k + 2))))
    problem = {"num_vars": k, "names": [p.name for p in knobs], "bounds": [[0.0, 1.0]] * k}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SALib's notes on sample sizes
        u = sample.sample(problem, base_n, calc_second_order=False, seed=seed)
    columns = {}
    for j, p in enumerate(knobs):
        if p.values is None:
            columns[p.name] = p.low + u[:, j] * (p.high - p.low)
        else:
            idx = np.minimum((u[:, j] * len(p.values)).astype(np.int64), len(p.values) - 1)
            columns[p.name] = space._values(p).take(idx)
    single = {
        p.name: p.values[0] for p in space.parameters if p.values is not None and len(p.values) == 1
    }
    table = pd.DataFrame(columns)
    for name, v in single.items():
        table[name] = v
    result = _evaluate(ev, space, table)
    objectives = [o.metric for o in study.objectives]
    y = result[objectives].to_numpy(float).reshape(base_n, k + 2, len(objectives))
    keep = np.isfinite(y).all(axis=(1, 2))
    logarithmic = {}
    first, first_c, total, total_c = {}, {}, {}, {}
    for m, name in enumerate(objectives):
        v = y[keep, :, m]
        log = bool(len(v) and (v > 0).all())
        logarithmic[name] = log
        values = (np.log(v) if log else v).reshape(-1)
        if keep.sum() < 2 or np.ptp(values) == 0:
            nan = np.full(k, np.nan)
            first[name], first_c[name], total[name], total_c[name] = nan, nan, nan, nan
            continue
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            s = analyze.analyze(
                problem, values, calc_second_order=False, num_resamples=100, seed=seed
            )
        first[name], first_c[name] = s["S1"], s["S1_conf"]
        total[name], total_c[name] = s["ST"], s["ST_conf"]
    names = [p.name for p in knobs]

    def frame(d):
        return pd.DataFrame(d, index=names)

    return GlobalIndices(
        frame(first),
        frame(first_c),
        frame(total),
        frame(total_c),
        logarithmic,
        len(table),
        int((~keep).sum()) * (k + 2),
        time.perf_counter() - start,
    )


# -- the run's design ----------------------------------------------------------------------------
def evaluator_and_space(study: Study) -> tuple[Evaluator, Space, Study]:
    """The study's evaluator, built in this process, and its space (values as it spells them)."""
    ev = load_evaluator(study.evaluator)
    study = canonical_values(study, ev)
    return ev, Space.from_study(study), study


def sensitivity(
    results: str | Path | Results,
    at: str | int = "knee",
    *,
    global_samples: int | None = None,
    step: float = STEP,
    include_fixed: bool = False,
    seed: int = 0,
    where: dict[str, Any] | None = None,
) -> Sensitivity:
    """The sensitivity of one design of a finished run's front (see the module's docstring).

    ``at``: ``knee``, ``best-energy``, ``best-time``, ``best-<objective metric>``, or a
    front candidate's key. ``global_samples``: evaluations of the global indices at least
    (0: none; None: :data:`GLOBAL_SAMPLES` where the evaluator is cheap, else none).
    ``include_fixed``: the study's fixed real-valued inputs are knobs too. ``where``
    (``{parameter: value}``): ``at`` is taken on the front of the run's feasible evaluations
    with these values instead (:func:`front_where`)."""
    if not (isinstance(step, int | float) and 0 < step <= 0.1):
        raise DseError(
            "expected a relative step", field="--step", value=step, allowed="0 < step <= 0.1"
        )
    if global_samples is not None and not 0 <= global_samples <= GLOBAL_SAMPLES_MAX:
        raise DseError(
            "expected a number of evaluations",
            field="--global",
            value=global_samples,
            allowed=f"0 to {GLOBAL_SAMPLES_MAX:,}",
        )
    start = time.perf_counter()
    run = results if isinstance(results, Results) else open_results(results)
    front = None if where else to_table(run.feasible_front())
    ev, space, study = evaluator_and_space(run.study)
    if where:
        front = front_where(run, where, space)
    row = pick(front, run.study, at)
    design = {p.name: _plain(front[p.name].iloc[row]) for p in space.parameters}
    extra = ()
    if include_fixed:
        extra = tuple(
            n
            for n, v in space.fixed.items()
            if n in ev.inputs and ev.inputs[n].kind == "float" and n not in design
        )
        design.update({n: _plain(space.fixed[n]) for n in extra})
    found = local(ev, space, study, design, step=step, extra=extra)
    base, notes = found.base, list(found.notes)
    stored = {m: float(front[m].iloc[row]) for m in base.index if m in front}
    for m, v in stored.items():
        now = float(base[m])
        if np.isfinite(v) and not math.isclose(now, v, rel_tol=1e-6, abs_tol=1e-12):
            notes.append(
                f"the evaluator now gives {m} = {now:.6g}, the run stored {v:.6g} "
                f"(evaluator {ev.name} {ev.version} now, {run.meta.evaluator_version} in the run)"
            )
    if global_samples is None:
        global_samples = GLOBAL_SAMPLES if ev.preview_size > 0 else 0
    g = global_indices(ev, space, study, int(global_samples), seed=seed)
    units = {m: ev.metrics[m].unit if m in ev.metrics else "" for m in base.index}
    units.update({k.name: k.unit for k in found.knobs})
    order = {name: i for i, name in enumerate(found.elasticity.index)}
    knobs = sorted(found.knobs, key=lambda k: (k.kind == "categorical", order.get(k.name, 0)))
    key = int(front["key"].iloc[row]) if "key" in front else None
    return Sensitivity(
        study=study.name,
        at=str(at) + (" where " + ", ".join(f"{k}={v}" for k, v in where.items()) if where else ""),
        key=key,
        design=design,
        metrics=tuple(base.index),
        objectives=tuple(o.metric for o in study.objectives),
        units=units,
        base=base,
        knobs=tuple(knobs),
        elasticity=found.elasticity,
        alternatives=found.alternatives,
        alternatives_ok=found.alternatives_ok,
        breakdowns=found.breakdowns,
        evaluations=found.evaluations + (g.evaluations if g is not None else 0),
        seconds=time.perf_counter() - start,
        step=step,
        notes=tuple(notes),
        global_indices=g,
        stored=stored,
        display_units=dict(study.display_units),
    )


def at_the_knee(run: Results) -> tuple[Sensitivity | None, str]:
    """The local sensitivity at the knee for ``dse report`` (no global indices), or None and
    why not: only an evaluator that declares itself cheap and free of side effects (it
    allows a preview, :attr:`~dse.evaluators.Evaluator.preview_size`) is run again for a
    page; any other is left to ``dse sensitivity``."""
    from dse.evaluators import evaluator_class

    try:
        cls = evaluator_class(run.study.evaluator.name)
        if cls.preview_size <= 0:
            return None, (
                f"Evaluator '{run.study.evaluator.name}' does not declare itself cheap (it "
                f"allows no preview), so the page does not run it again: `dse sensitivity "
                f"{run.path}` does."
            )
        return sensitivity(run, "knee", global_samples=0), ""
    except (DseError, KeyError, ValueError) as exc:  # the page stands without this section
        return None, f"The sensitivity at the knee could not be computed: {exc}"


def _ranked(elastic: pd.DataFrame, objectives: list[str]) -> pd.DataFrame:
    if not len(elastic):
        return elastic
    score = elastic[objectives].abs().max(axis=1).fillna(-1.0)
    return elastic.loc[score.sort_values(ascending=False, kind="stable").index]


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


# -- the terminal -------------------------------------------------------------------------------
def _quantity(value: float, unit: str, wanted: str | None = None) -> str:
    """``value`` in ``wanted`` (the study's display unit) or a readable unit (J → MJ, s → h),
    with its unit (:func:`dse.units.quantity`)."""
    from dse.units import quantity

    return quantity(value, unit, wanted) if np.isfinite(value) else "n/a"


def _signed(value: float, digits: str = ".3f") -> str:
    if not np.isfinite(value):
        return "n/a"
    shown = f"{value:+{digits}}"
    return shown.replace("-", "+") if float(shown) == 0 else shown  # no "-0.000"


def print_sensitivity(s: Sensitivity, console, *, top: int = 5) -> None:
    """``s`` as rich tables: the design, the ranked elasticities, the other values of the
    discrete knobs, the breakdowns and what each knob's elasticity is made of, the global
    indices; every number with its unit. A table wider than the terminal is printed as
    several, each of its leading (key) columns and as many whole columns as fit, as
    ``dse show`` splits the front (column names and values are never cut)."""
    from rich.table import Table
    from rich.text import Text

    from dse.errors import printable
    from dse.outputs.show import print_split

    def table(title: str) -> Table:
        return Table(title=Text(printable(title)), title_justify="left")

    def header(text: str) -> Text:
        return Text(printable(text, keep="\n"), justify="right")

    def value(text: str) -> dict:  # a value column's arguments: its name and unit never cut
        least = max(map(len, text.split("\n")))
        return {"header": header(text), "justify": "right", "no_wrap": True, "min_width": least}

    where = s.at if s.key is None or s.at == str(s.key) else f"{s.at} (key {s.key})"
    t = table(f"{s.study}: the design at {where}")
    t.add_column("knob or metric")
    t.add_column(**value("value"))
    for name, v in s.design.items():
        unit = s.units.get(name, "")
        shown = _quantity(float(v), unit) if isinstance(v, int | float) else str(v)
        t.add_row(Text(printable(name)), Text(printable(shown)))
    for m in s.metrics:
        t.add_row(
            Text(printable(m), style="cyan"),
            Text(_quantity(float(s.base[m]), s.units[m], s.display_units.get(m))),
        )
    console.print(t)

    if len(s.elasticity):
        methods = {k.name: k.method for k in s.knobs}
        change = s.change_per_percent()

        def elasticities(knob: str, metrics: list[str]) -> list[str]:
            """A knob's elasticity of each metric, then what +1 % of it changes each by."""
            return [
                *(_signed(float(s.elasticity.loc[knob, m])) for m in metrics),
                *(
                    ("+" if change.loc[knob, m] > 0 else "")
                    + _quantity(float(change.loc[knob, m]), s.units[m], s.display_units.get(m))
                    for m in metrics
                ),
            ]

        print_split(
            console,
            "elasticities of the objectives, d ln(objective) / d ln(knob): % change per +1 % of "
            "the knob, ranked by the largest",
            [
                {"header": "#", "justify": "right", "style": "dim", "no_wrap": True},
                {"header": "knob", "no_wrap": True},
                {"header": "how", "min_width": 14},
            ],
            [value(f"{m}\n[1]") for m in s.objectives]
            + [value(f"+1 % knob:\nΔ {m}") for m in s.objectives],
            [
                [
                    str(i),
                    Text(printable(knob)),
                    Text(printable(methods[knob])),
                    *elasticities(knob, s.objectives),
                ]
                for i, knob in enumerate(s.elasticity.index, start=1)
            ],
        )
        constrained = [m for m in s.metrics if m not in s.objectives]
        if constrained:
            print_split(
                console,
                "elasticities of the constrained metrics, d ln(metric) / d ln(knob)",
                [{"header": "knob", "no_wrap": True}],
                [value(f"{m}\n[1]") for m in constrained]
                + [value(f"+1 % knob:\nΔ {m}") for m in constrained],
                [
                    [
                        Text(printable(knob)),
                        *elasticities(knob, constrained),
                    ]
                    for knob in s.elasticity.index
                ],
            )

    if len(s.alternatives):
        print_split(
            console,
            "the discrete knobs' other values (ordinal: the neighbours the arc elasticity uses): "
            "change of each metric against the design",
            [{"header": "knob", "no_wrap": True}, {"header": "value", "no_wrap": True}],
            [value(f"Δ {m}\n[%]") for m in s.metrics] + [value("meets the\nstudy")],
            [
                [
                    Text(printable(knob)),
                    Text(printable(v)),
                    *(_signed(100 * float(row[m]), ".2f") for m in s.metrics),
                    "yes" if s.alternatives_ok[(knob, v)] else "no",
                ]
                for (knob, v), row in s.alternatives.iterrows()
            ],
        )

    for b in s.breakdowns:
        knobs = list(b.elasticity.abs().sort_values(ascending=False).index[:top])
        total = float(b.parts.sum())
        rows = [
            [
                Text(printable(comp)),
                _quantity(float(part), b.unit, s.display_units.get(b.total)),
                f"{100 * part / total:.1f}" if total else "n/a",
                *(_signed(float(b.contributions.loc[k, comp])) for k in knobs),
            ]
            for comp, part in b.parts.items()
        ]
        rows.append(
            [
                Text("elasticity of the total", style="bold"),
                _quantity(total, b.unit, s.display_units.get(b.total)),
                "100.0",
                *(_signed(float(b.elasticity[k])) for k in knobs),
            ]
        )
        print_split(
            console,
            f"{b.title} ({b.total}): where it goes at the design, and what each knob's "
            "elasticity of it is made of (the columns add up to the elasticity in the last row)",
            [{"header": "component"}],
            [value("at the design"), value("share\n[%]"), *(value(f"{k}\n[1]") for k in knobs)],
            rows,
        )

    g = s.global_indices
    if g is not None:
        scale = {m: "ln " if g.logarithmic.get(m) else "" for m in g.first.columns}
        order = g.total.max(axis=1).sort_values(ascending=False).index
        rows = []
        for knob in order:
            cells = []
            for m in g.first.columns:
                cells += [
                    f"{g.first.loc[knob, m]:.3f} ± {g.first_conf.loc[knob, m]:.3f}",
                    f"{g.total.loc[knob, m]:.3f} ± {g.total_conf.loc[knob, m]:.3f}",
                ]
            rows.append([Text(printable(knob)), *cells])
        print_split(
            console,
            f"variance-based (Sobol') indices over the study's space: {g.evaluations:,} "
            f"evaluations in {g.seconds:.2f} s (SALib; S1: alone, ST: with the others; "
            "± the 95 % bootstrap half-width)",
            [{"header": "knob", "no_wrap": True}],
            [value(f"{i} of {scale[m]}{m}\n[1]") for m in g.first.columns for i in ("S1", "ST")],
            rows,
        )
        if g.left_out:
            console.print(
                f"{g.left_out:,} evaluations left out (blocks of the scheme with an objective "
                "the evaluator could not give)",
                highlight=False,
            )
    for note in s.notes:
        console.print(Text(printable(f"note: {note}")))
    console.print(
        Text(
            f"{s.evaluations:,} evaluations in {s.seconds:.2f} s, in this process; "
            f"step {100 * s.step:.3g} % (ln x)"
        ),
        highlight=False,
    )
