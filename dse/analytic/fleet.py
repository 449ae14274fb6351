"""Mixed fleets: one job's pipeline split over two accelerator types (docs/model.md, section 11).

The first ``pipeline_parallel - second_pipeline_stages`` stages run on ``accelerator``, the
last ``second_pipeline_stages`` on ``second_accelerator``; tensor, context and data
parallelism are the same on both. The layers are divided by each part's speed as in the
seed's workload distribution ``W_i = W_total (P_i / P_total)^alpha``: a stage of part ``i``
holds ``L P_i^alpha / sum_j(p_j P_j^alpha)`` layers (``p_j`` stages of part ``j``), rounded
to whole layers (the first part's stages rounded, the rest spread over the second's), with
``P_i`` the part's large-GEMM throughput (dense peak at the study's precision times its
``matmul_eff_max``, early software's shortfall included: :func:`.time.model.hardware_of`) and ``alpha`` = ``split_alpha`` (1 by default: stage times equal where
the layers are compute-bound; a study can sweep it). Each part is timed as a pipeline
part (:class:`~dse.analytic.time.parallelism.Stages` with ``part`` set): its stages, the
embedding on the first part and the output layer on the second. The slowest stage of
either part sets the 1F1B pace; the bubble is ``(p - 1)`` slots of the mean stage over
both parts; the data-parallel reduction and the optimizer step of the slower part end the
iteration. Each part waits (a blocked, low-power phase) for the rest of the iteration.
Power and energy are each part's own (its accelerators, host share, network, cooling)
summed (each metric's ``mixed_fleet`` rule, :mod:`dse.analytic.declarations`, says how the
job's value comes from the parts'); the job fails at the rate of all its accelerators and a checkpoint blocks it for
the slower part's write.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dse.analytic import declarations
from dse.analytic import rows as _rows
from dse.analytic.columns import Factorised, factorise
from dse.analytic.energy import economics
from dse.analytic.energy import model as energy_model
from dse.analytic.energy.checkpoint import write_time_s
from dse.analytic.time import model as time_model
from dse.analytic.time import workload
from dse.analytic.time.parallelism import Stages
from dse.analytic.time.result import TimeResult

NONE = "none"

SPLIT_REASON = "a mixed fleet needs 1 to pipeline_parallel - 1 stages on the second accelerator"
INTERLEAVE_REASON = "a mixed fleet runs a plain 1F1B pipeline (interleave 1)"
EMPTY_REASON = "the split leaves a pipeline stage without layers"


def mixed_rows(cfg) -> np.ndarray:
    """True for candidates with a second accelerator type."""
    col = cfg.get("second_accelerator")
    if col is None:
        return np.zeros(len(cfg["accelerator"]), dtype=bool)
    return Factorised(*factorise(col)).map(lambda v: v is not None and v != NONE, dtype=bool)


def split_layers(layers, pp, pp_b, speed_a, speed_b, alpha) -> tuple[Stages, Stages, np.ndarray]:
    """The :class:`~dse.analytic.time.parallelism.Stages` of each part (layers per stage
    ``W_i ∝ P_i^alpha``; the first part starts the pipeline with the input embedding, the
    second ends it with the output layer), and where the split leaves a stage empty."""
    pp_a = pp - pp_b
    wa, wb = speed_a**alpha, speed_b**alpha
    x_a = layers * wa / (pp_a * wa + pp_b * wb)
    l_a = np.clip(
        np.round(x_a), 1.0, np.maximum(np.floor((layers - pp_b) / np.maximum(pp_a, 1.0)), 1.0)
    )
    rest = layers - pp_a * l_a
    q = np.floor(rest / np.maximum(pp_b, 1.0))
    extra = rest - q * pp_b
    one_b = pp_b == 1
    one = np.ones(np.shape(l_a))
    a = Stages(
        first=l_a,
        middle=np.where(pp_a >= 3, l_a, 0.0),
        last=l_a,
        units=None,
        part=True,
        count=pp_a,
        rank0=0.0 * one,
        embedding=one,
        output=0.0 * one,
    )
    b = Stages(
        first=np.where(one_b, rest, q + (extra >= 1)),
        middle=np.where(pp_b >= 3, q + (extra >= 2), 0.0),
        last=np.where(one_b, rest, q),
        units=None,
        part=True,
        count=pp_b,
        rank0=pp_a,
        embedding=0.0 * one,
        output=one,
    )
    return a, b, (l_a < 1) | (q < 1)


def evaluate(cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """All metrics plus ``feasible`` and ``reason`` for mixed-fleet candidates (every row has
    a second accelerator; every declared input present)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _evaluate(cfg)


def _f(cfg, name):
    return np.asarray(cfg[name], dtype=float)


def _evaluate(cfg):
    shape = workload.resolve_shape(cfg["model"], cfg)
    pp, pp_b = _f(cfg, "pipeline_parallel"), _f(cfg, "second_pipeline_stages")
    second = Factorised(*factorise(cfg["second_accelerator"]))
    cfg_a, cfg_b = dict(cfg), {**cfg, "accelerator": second}
    # each part's speed as the time model runs it (its software_release included)
    hw_a, hw_b = time_model.hardware_of(cfg_a), time_model.hardware_of(cfg_b)
    stages_a, stages_b, empty = split_layers(
        shape.layers,
        pp,
        pp_b,
        hw_a.peak_flops * hw_a.matmul_eff_max,
        hw_b.peak_flops * hw_b.matmul_eff_max,
        _f(cfg, "split_alpha"),
    )
    pp_a = stages_a.count
    ta, tb = time_model.evaluate(cfg_a, part=stages_a), time_model.evaluate(cfg_b, part=stages_b)
    # the job: all its accelerators fail, a checkpoint blocks it for the slower part's write
    n_total = _f(cfg, "num_accelerators")
    n_a, n_b = n_total * pp_a / pp, n_total * pp_b / pp
    given = _f(cfg, "checkpoint_duration_s")
    write = np.maximum(
        write_time_s(ta.memory, _f(cfg, "checkpoint_write_gbs"), given)[1],
        write_time_s(tb.memory, _f(cfg, "checkpoint_write_gbs"), given)[1],
    )
    rate = _f(cfg, "failures_per_accelerator_hour")
    for part, n_i in ((cfg_a, n_a), (cfg_b, n_b)):
        part["failures_per_accelerator_hour"] = rate * n_total / n_i
        part["checkpoint_duration_s"] = write
    ta, tb = replace(ta, num_accelerators=n_a), replace(tb, num_accelerators=n_b)

    def retimer(cfg_i, stages_i, n_i, other):
        def retime(clock_mhz, rows):
            sub = time_model.evaluate(
                _rows.take_inputs(cfg_i, rows), clock_mhz, part=_rows.take(stages_i, rows)
            )
            sub = replace(sub, num_accelerators=n_i[rows])
            return compose(sub, _rows.take(other, rows), pp[rows])[0]

        return retime

    # the first part's clock search against the second at its set clock, then the second's
    # against the first's result; a final pass (no clock moves: waiting longer only lowers
    # power and temperature) gives both parts' energy at the composed iteration
    pa, pb = compose(ta, tb, pp)
    ea = energy_model.evaluate(cfg_a, pa, retimer(cfg_a, stages_a, n_a, pb))
    pb, pa = compose(tb, ea.timing, pp)
    eb = energy_model.evaluate(cfg_b, pb, retimer(cfg_b, stages_b, n_b, pa))
    pa, pb = compose(ea.timing, eb.timing, pp)
    ea = energy_model.evaluate(cfg_a, pa, retimer(cfg_a, stages_a, n_a, pb))
    eb = energy_model.evaluate(cfg_b, pb, retimer(cfg_b, stages_b, n_b, pa))
    out = _combine(ea, eb, n_a, n_b)
    reasons = _reasons(cfg, empty, pp_b, ea, eb)
    out["feasible"] = reasons == ""
    out["reason"] = reasons
    out["second_accelerators"] = n_b
    return out


def compose(a: TimeResult, b: TimeResult, pp) -> tuple[TimeResult, TimeResult]:
    """Both parts' results at the job's iteration: ``m`` slots of the slower part's pace
    stage, a bubble of ``p - 1`` mean stages over both parts, the slower pipeline sends,
    and the slower data-parallel reduction and optimizer step; each part blocked for the
    time it does not work (returned in ``a``, ``b`` order)."""
    ba, bb = a.breakdown, b.breakdown
    m = a.micro_batches
    pace = np.maximum(ba.slot_s, bb.slot_s)
    bubble = (pp - 1.0) * (ba.work_s + bb.work_s) / pp
    p2p = np.maximum(ba.pp_comm_s, bb.pp_comm_s)
    tail = np.maximum(ba.dp_comm_s + ba.optimizer_s, bb.dp_comm_s + bb.optimizer_s)
    step = m * pace + bubble + p2p + tail
    return _at_step(a, step), _at_step(b, step)


def _at_step(r: TimeResult, step) -> TimeResult:
    """``r`` at the job's iteration ``step``: the part waits (``bubble_s``) for the rest."""
    b = r.breakdown
    busy = (
        b.compute_s + b.memory_s + b.layer_comm_s + b.pp_comm_s + b.dp_comm_s + b.optimizer_s
    ) + b.offload_s
    wait = np.maximum(step - busy, 0.0)
    breakdown = replace(b, bubble_s=wait, step_s=busy + wait)
    steps = r.steps_to_train
    tokens_iter = r.tokens_to_train / steps
    return replace(
        r,
        breakdown=breakdown,
        step_time_s=breakdown.step_s,
        bubble_time_s=wait,
        time_to_train_s=steps * breakdown.step_s,
        tokens_per_s=tokens_iter / breakdown.step_s,
    )


def _combine(ea, eb, n_a, n_b) -> dict[str, np.ndarray]:
    """The job's metrics from both parts', each by the rule its declaration names
    (``Metric.mixed_fleet``; :data:`dse.analytic.declarations.MIXED_FLEET_RULES`)."""
    ta, tb = ea.timing, eb.timing
    ma, mb = {**ta.metrics(), **ea.metrics}, {**tb.metrics(), **eb.metrics}
    b_paces = tb.breakdown.slot_s > ta.breakdown.slot_s
    b_fuller = mb["memory_per_accelerator_gib"] > ma["memory_per_accelerator_gib"]
    n = n_a + n_b
    energy = ma["energy_to_train_j"] + mb["energy_to_train_j"]
    out = dict(ma)
    for name, a in ma.items():
        b = mb[name]
        rule = declarations.METRICS[name].mixed_fleet
        if rule == declarations.SUM:
            out[name] = a + b
        elif rule == declarations.MAX:
            out[name] = np.maximum(a, b)
        elif rule == declarations.ANY:
            out[name] = a | b
        elif rule == declarations.MIN:
            out[name] = np.minimum(a, b)
        elif rule == declarations.PACE:
            out[name] = np.where(b_paces, b, a)
        elif rule == declarations.FULLER:
            out[name] = np.where(b_fuller, b, a)
        elif rule == declarations.ACCELERATOR_MEAN:
            out[name] = (n_a * a + n_b * b) / n
        elif rule == declarations.ENERGY_MEAN:
            out[name] = (a * ma["energy_to_train_j"] + b * mb["energy_to_train_j"]) / energy
        elif rule not in (declarations.SAME, declarations.FIRST_TYPE, declarations.JOB):
            raise ValueError(f"metric {name}: no mixed-fleet rule {rule!r}")
    # the job's own (JOB): from the combined metrics
    out["mfu"] = ta.model_flops / (
        ta.step_time_s * (n_a * ta.hw.peak_flops + n_b * tb.hw.peak_flops)
    )
    time_s = out["time_to_train_s"]
    out["tokens_per_j"] = ma["tokens_to_train"] / energy
    out["energy_time_product_js"] = energy * time_s
    useful = economics.useful_utilisation(
        out["mfu"], ma["min_tokens_to_train"], ma["tokens_to_train"], ta.time_to_train_s, time_s
    )
    out["energy_efficiency_index"] = economics.efficiency_index(
        useful, ma["landauer_bound_j"], energy
    )
    out["landauer_ratio"] = energy / ma["landauer_bound_j"]
    return out


def _reasons(cfg, empty, pp_b, ea, eb) -> np.ndarray:
    """The first reason per row: the split, then the first part's time and energy reasons,
    then the second's."""
    n = len(pp_b)
    out = np.full(n, "", dtype=object)
    candidates = [
        np.where((pp_b < 1) | (pp_b >= _f(cfg, "pipeline_parallel")), SPLIT_REASON, ""),
        np.where(_f(cfg, "interleave") > 1, INTERLEAVE_REASON, ""),
        np.where(empty, EMPTY_REASON, ""),
        ea.timing.reason,
        ea.reason,
        eb.timing.reason,
        eb.reason,
    ]
    for reason in candidates:
        reason = np.asarray(reason, dtype=object)
        fill = (out == "") & (reason != "")
        out[fill] = reason[fill]
    return out
