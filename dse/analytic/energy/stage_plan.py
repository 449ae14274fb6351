"""Per-stage clock plans for a pipeline (Perseus: Chung et al., "Perseus: Reducing Energy
Bloat in Large Model Training", SOSP 2024).

In a 1F1B pipeline (Narayanan et al. 2021) not every stage is on the critical path all the
time: a stage lighter than the pace stage waits for it every slot, and the warm-up and
cool-down leave gaps. A stage off the critical path can run at a lower clock and fill the
gap it would have waited in, for less energy at the same iteration time. A **one-clock**
plan runs every stage at the same clock; a **per-stage** plan gives each stage its own
clock, the lowest-energy one that keeps the iteration within a target time.

The schedule is emulated exactly: every forward and backward pass of every micro-batch on
every stage, in 1F1B order (stage ``s`` runs ``min(P - s - 1, M)`` warm-up forwards, then
alternates one forward and one backward, then the cool-down backwards), a forward after
the previous stage's, a backward after the next stage's; the iteration ends with the first
stage's last backward. Vectorised over plans (rows): one pass over the ``2 P M`` passes.

Energy of a stage: its passes' energy at its clock (:class:`StageCurve`, from the energy
model's accelerator power) plus its blocked power for the rest of the iteration.

The planner (:func:`planned_frontier`): for every target time (the one-clock plan's times),
start from the one-clock plan that meets it and lower each stage in turn to the
lowest-energy clock of the grid that keeps the emulated iteration within the target, over
a few passes; energy never rises, so the planned frontier is never above the one-clock
one. Perseus plans every forward and backward pass separately: :func:`plan_passes` does
so exactly, as a linear program over every pass's duration (:func:`pass_costs`: each pass's
clocks as a convex cost, the waits at one blocked power, Perseus's accounting), and
:func:`pass_frontier` traces its frontier; docs/model-energy.md, section 7a, compares the
frontiers with Perseus's published one.

The evaluator (``clock_plan: per_stage``) uses a closed form of the per-pass plan at the
candidate's one-clock iteration time (:func:`pass_plan_saving_j`), checked against
:func:`plan_passes`; :func:`steady_state_saving_j` (the steady state alone, checked on the
emulation) serves pipelines with fewer micro-batches than stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from dse.analytic.rows import where

#: the ``clock_plan`` input's choices
CLOCK_PLANS = ("one", "per_stage")
#: clocks a candidate's plan chooses from: this many, from its clock down to 0.6 of the
#: maximum (below the A100 and H100 energy-optimal clocks, ~0.74 f_max; docs/model-energy.md)
PLAN_CLOCKS = 24
PLAN_LOWEST = 0.6
#: coordinate-descent passes over the stages (a third changed nothing on the Perseus pipeline)
PASSES = 2
#: share of the time between a stage's bubbles beyond its steady-state slots' own slack that
#: the closed form of a clock per pass gives its steady-state passes (:func:`pass_plan_saving_j`;
#: the linear program shares it with the bubbles' chains): chosen against :func:`plan_passes`
#: on 13 of the hardest pipelines (largest deviation 0.6 points with 1/2, 1.4 with all of it,
#: 1.0 with a quarter; docs/model-energy.md, section 7a)
STEADY_EXTRA_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class StageWork:
    """The pipeline's passes: per stage (shape (P,)), one micro-batch's forward and
    backward time at the maximum clock (s), and the micro-batches per iteration."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    micro_batches: int


@dataclass(frozen=True, slots=True)
class StageCurve:
    """A pass at each clock of a grid (shape (C,), highest first): its time as a multiple
    of its time at the maximum clock, its energy per second of work at the maximum clock
    (J/s, i.e. W at f_max), and the accelerator's power while blocked at that clock (W)."""

    clock_mhz: np.ndarray
    time_factor: np.ndarray
    energy_j_per_s: np.ndarray
    blocked_w: np.ndarray


@dataclass(frozen=True, slots=True)
class Frontier:
    """Plans of iteration time against energy: per plan, the iteration time (s), the
    pipeline's energy per iteration (J, every stage's accelerator) and each stage's clock
    (MHz, shape (plans, P))."""

    time_s: np.ndarray
    energy_j: np.ndarray
    clock_mhz: np.ndarray

    def fastest(self) -> int:
        """Index of the fastest plan (the least energy among equally fast ones)."""
        t = self.time_s
        fast = np.flatnonzero(t <= t.min() * (1 + 1e-9))
        return int(fast[np.argmin(self.energy_j[fast])])

    def least_energy(self) -> int:
        """Index of the minimum-energy plan."""
        return int(np.argmin(self.energy_j))

    def energy_at_j(self, time_s: np.ndarray) -> np.ndarray:
        """The least energy of a plan no slower than each of ``time_s`` (inf where none is)."""
        order = np.argsort(self.time_s)
        best = np.minimum.accumulate(self.energy_j[order])
        i = np.searchsorted(self.time_s[order], np.asarray(time_s) * (1 + 1e-9), side="right")
        return where(i > 0, best[np.maximum(i - 1, 0)], np.inf)


@cache
def _order(stages: int, micro_batches: int) -> tuple[tuple[int, int, int], ...]:
    """The passes ``(stage, 0 forward / 1 backward, micro-batch)`` in an order where each
    comes after its dependencies and after the previous pass on its stage (1F1B)."""
    lists = []
    for s in range(stages):
        warm = min(stages - s - 1, micro_batches)
        ops = [(s, 0, k) for k in range(warm)]
        for i in range(micro_batches - warm):
            ops += [(s, 0, warm + i), (s, 1, i)]
        ops += [(s, 1, k) for k in range(micro_batches - warm, micro_batches)]
        lists.append(ops)
    done_f = np.zeros((stages, micro_batches), dtype=bool)
    done_b = np.zeros((stages, micro_batches), dtype=bool)
    nxt = [0] * stages
    out: list[tuple[int, int, int]] = []
    total = 2 * stages * micro_batches
    while len(out) < total:
        moved = False
        for s in range(stages):
            while nxt[s] < len(lists[s]):
                _, kind, k = lists[s][nxt[s]]
                if kind == 0:
                    ready = s == 0 or done_f[s - 1, k]
                else:
                    ready = done_b[s + 1, k] if s < stages - 1 else done_f[s, k]
                if not ready:
                    break
                (done_f if kind == 0 else done_b)[s, k] = True
                out.append(lists[s][nxt[s]])
                nxt[s] += 1
                moved = True
        if not moved:  # cannot happen for 1F1B; guards the loop
            raise RuntimeError("1F1B order has a cycle")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Schedule:
    """The passes of a 1F1B iteration in dependency order: per pass its stage, whether it
    is a backward, its micro-batch, the index of the pass it waits for (-1: none besides
    its stage's previous pass) and its group (``stage * 4 + phase``; phases: 0 warm-up
    forwards, 1 steady-state forwards and backwards (one clock: they alternate), 3
    cool-down backwards; 2 unused)."""

    stage: np.ndarray
    backward: np.ndarray
    dep: np.ndarray
    group: np.ndarray


@cache
def _schedule(stages: int, micro_batches: int) -> _Schedule:
    order = _order(stages, micro_batches)
    pos = {op: i for i, op in enumerate(order)}
    dep, group = [], []
    for s, kind, k in order:
        warm = min(stages - s - 1, micro_batches)
        if kind == 0:
            dep.append(pos[(s - 1, 0, k)] if s > 0 else -1)
            phase = 0 if k < warm else 1
        else:
            dep.append(pos[(s + 1, 1, k)] if s < stages - 1 else pos[(s, 0, k)])
            phase = 1 if k < micro_batches - warm else 3  # steady: with its forwards
        group.append(4 * s + phase)
    return _Schedule(
        stage=np.array([op[0] for op in order]),
        backward=np.array([op[1] for op in order], dtype=bool),
        dep=np.array(dep),
        group=np.array(group),
    )


def iteration_time_s(duration_s: np.ndarray, sched: _Schedule, stages: int) -> np.ndarray:
    """The 1F1B iteration time (s, shape (K,)) of ``K`` plans given every pass's duration
    (shape (K, passes), in the schedule's order)."""
    k_rows = duration_s.shape[0]
    free = np.zeros((k_rows, stages))
    end = np.zeros((k_rows, len(sched.stage)))
    for i, (s, d) in enumerate(zip(sched.stage.tolist(), sched.dep.tolist(), strict=True)):
        start = free[:, s] if d < 0 else np.maximum(free[:, s], end[:, d])
        end[:, i] = start + duration_s[:, i]
        free[:, s] = end[:, i]
    return free.max(axis=1)


#: plan granularities: one clock per stage, or one per stage and phase of the 1F1B schedule
GRANULARITIES = ("stage", "phase")


def _groups(work: StageWork, granularity: str) -> tuple[_Schedule, np.ndarray, int]:
    """The schedule, each pass's plan variable and the number of variables."""
    stages = np.shape(work.forward_s)[-1]
    sched = _schedule(stages, work.micro_batches)
    if granularity == "stage":
        return sched, sched.stage, stages
    return sched, sched.group, 4 * stages


def evaluate_plans(
    work: StageWork, curve: StageCurve, clock_index: np.ndarray, granularity="stage"
):
    """(iteration time s, energy J), each of shape (R, n), of plans given as each plan
    variable's index into the clock grid, shape (R, n, variables) (a variable is a stage, or a
    stage's phase: ``granularity``). ``work``'s arrays are (P,) or one row per plan row (R, P),
    ``curve``'s (C,) or (R, C)."""
    sched, var, _ = _groups(work, granularity)
    r_rows, n, _ = clock_index.shape
    stages = np.shape(work.forward_s)[-1]
    fwd = np.broadcast_to(np.asarray(work.forward_s, dtype=float), (r_rows, stages))
    bwd = np.broadcast_to(np.asarray(work.backward_s, dtype=float), (r_rows, stages))
    base = where(sched.backward, bwd[:, sched.stage], fwd[:, sched.stage])[:, None, :]
    idx = clock_index[:, :, var]  # (R, n, passes)

    def at(values):  # a curve's values at each pass's planned clock, (R, n, passes)
        v = np.asarray(values, dtype=float)
        if v.ndim == 1:
            return v[idx]
        return np.take_along_axis(v[:, None, :], idx.reshape(r_rows, 1, -1), axis=2).reshape(
            idx.shape
        )

    dur = base * at(curve.time_factor)
    time_s = iteration_time_s(dur.reshape(r_rows * n, -1), sched, stages).reshape(r_rows, n)
    energy = (at(curve.energy_j_per_s) * base).sum(axis=2)
    # blocked: each stage's idle time at the power of its highest planned clock (the clock
    # it holds while it waits; the most blocked power of its plan, a conservative choice)
    blocked_w = at(curve.blocked_w)
    for s in range(stages):
        on = sched.stage == s
        busy = dur[:, :, on].sum(axis=2)
        energy = energy + blocked_w[:, :, on].max(axis=2) * np.maximum(time_s - busy, 0.0)
    return time_s, energy


def plan(
    work: StageWork, curve: StageCurve, start: np.ndarray, target_s: np.ndarray, granularity="stage"
):
    """Plans (R, variables: grid indices) from ``start`` within ``target_s`` (R,): each
    variable in turn set to the lowest-energy clock of the grid that keeps the emulated
    iteration within its target (:data:`PASSES` passes); with the energy of each (R,).
    Energy never rises from ``start``'s."""
    _, var, n_var = _groups(work, granularity)
    n_clocks = np.shape(curve.clock_mhz)[-1]
    current = np.array(start, dtype=np.int64)
    r_rows = current.shape[0]
    _, energy = evaluate_plans(work, curve, current[:, None, :], granularity)
    energy = energy[:, 0]
    limit = np.asarray(target_s, dtype=float) * (1 + 1e-9)
    choices = np.arange(n_clocks)
    rows = np.arange(r_rows)
    for _ in range(PASSES):
        for v in np.unique(var):
            trial = np.repeat(current[:, None, :], n_clocks, axis=1)  # (R, clocks, variables)
            trial[:, :, v] = choices[None, :]
            t, e = evaluate_plans(work, curve, trial, granularity)
            e = where(t <= limit[:, None], e, np.inf)
            best = np.argmin(e, axis=1)
            better = e[rows, best] < energy
            current[better, v] = best[better]
            energy = where(better, e[rows, best], energy)
    return current, energy


def one_clock_frontier(work: StageWork, curve: StageCurve) -> Frontier:
    """Every stage at the same clock, for every clock of the grid (``curve`` of shape (C,))."""
    stages = np.shape(work.forward_s)[-1]
    idx = np.repeat(np.arange(len(curve.clock_mhz))[:, None], stages, axis=1)
    t, e = evaluate_plans(work, curve, idx[None])
    return Frontier(time_s=t[0], energy_j=e[0], clock_mhz=curve.clock_mhz[idx])


def planned_frontier(work: StageWork, curve: StageCurve, granularity: str = "stage") -> Frontier:
    """A clock per stage (``granularity`` "stage") or per stage and phase ("phase") for each
    of the one-clock plans' times as the target, planned from that one-clock plan
    (:func:`plan`; the phases from the per-stage plan): never above the one-clock frontier. ``clock_mhz`` holds each stage's
    lowest planned clock."""
    stages, n_clocks = len(work.forward_s), len(curve.clock_mhz)
    one = one_clock_frontier(work, curve)
    start = np.repeat(np.arange(n_clocks)[:, None], stages, axis=1)
    best, _ = plan(work, curve, start, one.time_s, "stage")
    if granularity == "phase":  # from the per-stage plan, each stage's phases apart
        best, _ = plan(work, curve, np.repeat(best, 4, axis=1), one.time_s, "phase")
    t, e = evaluate_plans(work, curve, best[None], granularity)
    per_stage = best if granularity == "stage" else best.reshape(n_clocks, stages, 4).max(axis=2)
    return Frontier(time_s=t[0], energy_j=e[0], clock_mhz=curve.clock_mhz[per_stage])


def steady_state_saving_j(slots_s, micro_batches, curve_of) -> np.ndarray:
    """Energy (J per accelerator per iteration) a per-stage plan saves on candidates'
    pipelines at their one-clock iteration time, in closed form: in 1F1B's steady state a
    stage lighter than the pace stage waits for it every slot, so its steady-state passes
    (``M - (P - 1 - s)`` forwards and as many backwards on stage ``s``) run at the
    lowest-energy clock of the grid at which a slot's work still fits the pace stage's slot
    (its waits shrink to match); the warm-up and cool-down passes, on the critical path,
    keep the clock. What :func:`plan` finds on the emulated schedule, without emulating it
    (``tests/test_stage_plan.py`` compares the two).

    ``slots_s``: (R, P) one micro-batch's time per stage at the candidates' clocks;
    ``micro_batches`` (R,); ``curve_of()`` -> (time factor, energy J/s, blocked W), each
    (R, G), of a pass at a grid of clocks from the candidate's (index 0) down."""
    tf, e_per_s, blocked = curve_of()
    r_rows, stages = slots_s.shape
    pace = slots_s.max(axis=1)
    m = np.asarray(micro_batches, dtype=float)
    out = np.zeros(r_rows)
    for s in range(stages):
        t = slots_s[:, s][:, None]
        steady = np.maximum(m - (stages - 1 - s), 0.0)
        fits = t * tf <= pace[:, None] * (1 + 1e-12)
        slot_j = e_per_s * t + blocked * np.maximum(pace[:, None] - t * tf, 0.0)
        best = where(fits, slot_j, np.inf).min(axis=1)
        out += steady * np.maximum(slot_j[:, 0] - best, 0.0)
    return out / stages


def _bubble_factors(fwd_s, bwd_s, top):
    """The warm-up triangle's time factors (shape (R, P), column ``k`` at index ``k``; index 0
    unused): the forwards ``k >= 1`` of the first ``P - k`` stages run at one factor per
    column, the largest whose longest chain (stage 0's first ``k`` forwards, then column
    ``k`` down to stage ``P - 1 - k``) ends by the time stage ``P - 1 - k`` starts its first
    backward, ``sum(f) + sum(b[P - k:])`` (the first micro-batch's forward and backward
    chain, critical); at most ``top``. The cool-down is the same triangle of the pipeline
    run backwards in time (forwards and backwards swapped)."""
    r_rows, stages = fwd_s.shape
    x = np.ones((r_rows, stages))
    done = np.zeros(r_rows)  # sum of x over the columns before k
    below = np.cumsum(fwd_s, axis=1)  # forwards of stages 0..s
    total = below[:, -1]
    for k in range(1, stages):
        last = stages - 1 - k
        deadline = total + bwd_s[:, last + 1 :].sum(axis=1)
        room = deadline - fwd_s[:, 0] * (1.0 + done)
        x[:, k] = np.clip(room / below[:, last], 1.0, top)
        done += x[:, k]
    return x


def pass_plan_saving_j(slots_s, micro_batches, curve_of, backward_share=2.0 / 3.0) -> np.ndarray:
    """Energy (J per accelerator per iteration) a clock per pass (Perseus's plan,
    :func:`plan_passes`) saves on candidates' 1F1B pipelines at their one-clock iteration
    time, in closed form, without the linear program. The passes off the critical path are
    in three parts: the warm-up triangle (stage ``s``'s forwards 1 to ``P - 1 - s``, before
    its first backward, which the first micro-batch's chain pins), the cool-down triangle
    (the same, backwards in time) and the steady state between them. Each triangle's
    columns run at the factor its longest chain allows (:func:`_bubble_factors`); a stage's
    steady-state passes (``M - P + s`` forwards and as many backwards) share the time
    between its triangles evenly (where the last stage sets the pace: the first
    micro-batch's chain and the last's pin the triangles' ends; elsewhere the pace stage's
    slots). A pass at time factor ``x`` saves ``e(1) - e(x) + P_blocked (x - 1)`` per second
    of its work (``e`` the energy per second of work, linear between the grid's clocks, the
    grid cut at its lowest-energy clock; the waits at the blocked power of the candidate's
    clock, Perseus's accounting). Within 1 percentage point of :func:`plan_passes` over
    2-16 stages, P-16P micro-batches, balanced and last-heavier stages
    (``tests/test_stage_plan.py``). Rows with fewer micro-batches than stages keep
    :func:`steady_state_saving_j`.

    ``slots_s``: (R, P) one micro-batch's time (forward + backward) per stage at the
    candidates' clocks, the backward ``backward_share`` of it; ``micro_batches`` (R,);
    ``curve_of()`` -> (time factor, energy J/s, blocked W), each (R, G), of a pass at a grid
    of clocks from the candidate's (index 0) down."""
    grid = curve_of()
    tf, e_per_s, blocked = grid
    slots_s = np.asarray(slots_s, dtype=float)
    r_rows, stages = slots_s.shape
    m = np.asarray(micro_batches, dtype=float)
    # the grid up to its lowest-energy clock (slower and dearer below it)
    lowest = np.argmin(e_per_s, axis=1)
    cols = np.arange(tf.shape[1])[None, :]
    tf = where(cols <= lowest[:, None], tf, np.inf)
    rows = np.arange(r_rows)
    top = tf[rows, lowest]
    e0, p_blocked = e_per_s[:, 0], blocked[:, 0]

    def gain(x):  # J saved per second of work at time factor x (R,)
        j = np.clip((tf <= x[:, None]).sum(axis=1) - 1, 0, tf.shape[1] - 2)
        t0, t1 = tf[rows, j], tf[rows, j + 1]
        w = where(np.isfinite(t1), (x - t0) / where(np.isfinite(t1), t1 - t0, 1.0), 0.0)
        e = e_per_s[rows, j] + np.clip(w, 0.0, 1.0) * (e_per_s[rows, j + 1] - e_per_s[rows, j])
        e = where(np.isfinite(t1), e, e_per_s[rows, j])
        return e0 - e + p_blocked * (x - 1.0)

    bwd = backward_share * slots_s
    fwd = slots_s - bwd
    warm = _bubble_factors(fwd, bwd, top)
    cool = _bubble_factors(bwd, fwd, top)  # the pipeline backwards in time
    out = np.zeros(r_rows)
    for k in range(1, stages):
        on = slice(0, stages - k)
        out += gain(warm[:, k]) * fwd[:, on].sum(axis=1) + gain(cool[:, k]) * bwd[:, on].sum(axis=1)
    pace = slots_s.max(axis=1)
    last_paces = slots_s[:, -1] >= pace
    # one-clock iteration time with the last stage at the pace; the triangles' ends
    time_s = slots_s[:, :-1].sum(axis=1) + m * slots_s[:, -1]
    for s in range(stages):
        n = m - stages + s
        between = time_s - fwd.sum(axis=1) - bwd.sum(axis=1) - slots_s[:, s + 1 :].sum(axis=1)
        extra = STEADY_EXTRA_SHARE * (between - n * pace)
        window = where(last_paces, n * pace + extra, n * pace)
        x = np.clip(window / np.maximum(n * slots_s[:, s], 1e-300), 1.0, top)
        out += np.maximum(n, 0.0) * slots_s[:, s] * gain(x)
    few = np.flatnonzero(m < stages)
    if len(few):
        part = tuple(g[few] for g in grid)
        out[few] = steady_state_saving_j(slots_s[few], m[few], lambda: part) * stages
    return np.maximum(out, 0.0) / stages


# --- a clock per pass (Perseus's plan) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PassCosts:
    """Each pass's choices as a convex piecewise-linear cost: per pass (shape (N,), in the
    schedule's order) its shortest and longest duration (s), and the cost lines (shape
    (N, K): slope J/s, intercept J; padded with copies) whose maximum is its effective
    energy ``e(d) - P_blocked d`` (J) at duration ``d``; with each stage's blocked power (W)."""

    shortest_s: np.ndarray
    longest_s: np.ndarray
    slope_j_per_s: np.ndarray
    intercept_j: np.ndarray
    blocked_w: np.ndarray


def _lower_hull(t: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lower convex hull's vertices of points (t, c), t ascending (Andrew's monotone chain)."""
    order = np.lexsort((c, t))
    hull: list[int] = []
    for i in order.tolist():
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (t[b] - t[a]) * (c[i] - c[a]) - (c[b] - c[a]) * (t[i] - t[a]) <= 0:
                hull.pop()
            else:
                break
        hull.append(i)
    return t[hull], c[hull]


def pass_costs(work: StageWork, curve: StageCurve) -> PassCosts:
    """Per pass of the 1F1B schedule: its clocks from the highest of ``curve`` (1-D) down to
    the pass's lowest-energy clock (below it a pass is slower for more energy; Perseus keeps
    the same set, its profile's Pareto-optimal frequencies), with its energy less the blocked power over its duration
    (the blocked power a stage draws while it waits: the curve's highest, that of the top
    clock, held while blocked; Perseus counts one measured blocking power the same way).
    Between two clocks a pass can run part at each (a clock change within the pass), so its
    cost is the lower convex hull of its clocks' points."""
    sched = _schedule(len(work.forward_s), work.micro_batches)
    blocked_w = float(np.max(curve.blocked_w))
    lowest = int(np.argmin(curve.energy_j_per_s))  # the same for every pass (a common curve)
    tf, e_per_s = curve.time_factor[: lowest + 1], curve.energy_j_per_s[: lowest + 1]
    kinds: dict[float, tuple[float, float, np.ndarray, np.ndarray]] = {}
    rows = []
    for s, b in zip(sched.stage.tolist(), sched.backward.tolist(), strict=True):
        base = float(work.backward_s[s] if b else work.forward_s[s])
        if base not in kinds:
            t = base * tf
            ht, hc = _lower_hull(t, e_per_s * base - blocked_w * t)
            slope = np.diff(hc) / np.diff(ht) if len(ht) > 1 else np.zeros(1)
            icpt = hc[:-1] - slope * ht[:-1] if len(ht) > 1 else hc[:1]
            kinds[base] = (float(t.min()), float(t.max()), slope, icpt)
        rows.append(kinds[base])
    k = max(len(r[2]) for r in rows)

    def padded(i):  # repeat a pass's last line: the same maximum
        return np.array([np.pad(r[i], (0, k - len(r[i])), mode="edge") for r in rows])

    return PassCosts(
        shortest_s=np.array([r[0] for r in rows]),
        longest_s=np.array([r[1] for r in rows]),
        slope_j_per_s=padded(2),
        intercept_j=padded(3),
        blocked_w=np.full(len(work.forward_s), blocked_w),
    )


@dataclass(frozen=True, slots=True)
class PassPlan:
    """A plan with a duration for every pass (s, shape (N,), the schedule's order): the
    iteration time it is planned for (s) and the pipeline's energy per iteration (J)."""

    time_s: float
    energy_j: float
    duration_s: np.ndarray


def plan_passes(work: StageWork, costs: PassCosts, target_s: float | None) -> PassPlan:
    """The least-energy duration of every pass whose 1F1B iteration ends within
    ``target_s`` (None: at whatever time needs the least energy), exactly, as a linear
    program: minimise the passes' effective energy plus every stage's blocked power over the
    whole iteration, subject to each pass starting after its stage's previous pass and the
    pass it depends on. The energy is the passes' own plus the blocked power over each
    stage's waits (the same as :func:`evaluate_plans` counts, at a constant blocked power)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    stages = len(work.forward_s)
    sched = _schedule(stages, work.micro_batches)
    n = len(sched.stage)
    # variables: start (n), duration (n), effective energy (n), iteration time (1)
    x_d, x_z, x_t = n, 2 * n, 3 * n
    rows, cols, vals, rhs = [], [], [], []

    def block(coefs, bound):  # one row per element of the index arrays
        base = sum(len(b) for b in rhs)
        for c, v in coefs:
            rows.append(base + np.arange(len(c)))
            cols.append(np.asarray(c))
            vals.append(np.broadcast_to(np.asarray(v, dtype=float), np.shape(c)))
        rhs.append(np.broadcast_to(np.asarray(bound, dtype=float), np.shape(coefs[0][0])))

    idx = np.arange(n)
    prev = np.full(n, -1)
    last = {}
    for i, s in enumerate(sched.stage.tolist()):
        prev[i] = last.get(s, -1)
        last[s] = i
    for before in (prev, sched.dep):  # start_i >= start_j + duration_j
        i = idx[before >= 0]
        j = before[before >= 0]
        block([(j, 1.0), (x_d + j, 1.0), (i, -1.0)], 0.0)
    block([(idx, 1.0), (x_d + idx, 1.0), (np.full(n, x_t), -1.0)], 0.0)  # within T
    for k in range(costs.slope_j_per_s.shape[1]):  # z_i >= slope d_i + intercept
        block([(x_d + idx, costs.slope_j_per_s[:, k]), (x_z + idx, -1.0)], -costs.intercept_j[:, k])
    a = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(sum(len(b) for b in rhs), 3 * n + 1),
    )
    cost = np.zeros(3 * n + 1)
    cost[x_z : x_z + n] = 1.0
    cost[x_t] = float(np.sum(costs.blocked_w))
    t_bound = (0.0, None) if target_s is None else (target_s, target_s)
    bounds = (
        [(0.0, None)] * n
        + list(zip(costs.shortest_s.tolist(), costs.longest_s.tolist(), strict=True))
        + [(None, None)] * n
        + [t_bound]
    )
    res = linprog(cost, A_ub=a.tocsr(), b_ub=np.concatenate(rhs), bounds=bounds, method="highs")
    if res.status != 0:
        raise ValueError(f"no plan within {target_s} s: {res.message}")
    return PassPlan(
        time_s=float(res.x[x_t]), energy_j=float(res.fun), duration_s=res.x[x_d : x_d + n]
    )


def pass_frontier(work: StageWork, curve: StageCurve, targets_s: np.ndarray) -> Frontier:
    """A duration per pass (:func:`plan_passes`) for each of ``targets_s`` shorter than the
    least-energy plan's time, and that plan: the frontier of a clock per pass. ``clock_mhz``
    holds each stage's lowest clock (its slowest pass's time factor on ``curve``; a pass
    between two clocks runs part at each)."""
    costs = pass_costs(work, curve)
    least = plan_passes(work, costs, None)
    plans = [plan_passes(work, costs, float(t)) for t in np.sort(targets_s) if t < least.time_s]
    plans.append(least)
    sched = _schedule(len(work.forward_s), work.micro_batches)
    base = where(sched.backward, work.backward_s[sched.stage], work.forward_s[sched.stage])
    clocks = []
    for p in plans:
        factor = p.duration_s / base
        slowest = np.array([factor[sched.stage == s].max() for s in range(len(work.forward_s))])
        # the curve's time factor rises as the clock falls (ascending, as np.interp needs)
        clocks.append(np.interp(slowest, curve.time_factor, curve.clock_mhz))
    return Frontier(
        time_s=np.array([p.time_s for p in plans]),
        energy_j=np.array([p.energy_j for p in plans]),
        clock_mhz=np.array(clocks),
    )
