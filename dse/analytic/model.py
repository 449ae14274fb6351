"""The analytic model: the time half, then the energy half on its :class:`TimeResult`;
candidates whose job is split over two accelerator types go to :mod:`.fleet`."""

from __future__ import annotations

import numpy as np

from dse.analytic import fleet, schedule
from dse.analytic import rows as _rows
from dse.analytic.energy import model as energy_model
from dse.analytic.time import model as time_model
from dse.analytic.time import reasons as time_reasons
from dse.analytic.time.result import FRONT_METRICS

take_rows = _rows.take_inputs  # the inputs of the candidates ``rows`` only

#: every reason a candidate of one accelerator type may get, by the integer code
#: :func:`evaluate` marks it with when asked for codes: the time model's
#: (:data:`.time.reasons.REASONS`, the same codes), then the energy half's
#: (:data:`.energy.model.REASONS` but its empty first, each its code plus
#: :data:`_ENERGY_CODES`); 0 is no reason
REASONS = (*time_reasons.REASONS, *energy_model.REASONS[1:])
REASON_TEXT = np.array(REASONS, dtype=object)
_ENERGY_CODES = len(time_reasons.REASONS) - 1
assert len(REASONS) <= np.iinfo(np.int8).max


def evaluate(cfg: dict[str, np.ndarray], *, reason_codes: bool = False) -> dict[str, np.ndarray]:
    """All metrics plus ``feasible`` and ``reason`` for the candidates in ``cfg`` (every
    declared input present: :func:`dse.analytic.declarations.complete`). Candidates whose job
    is split over two accelerator types go to :mod:`.fleet`, those whose batch ramps to
    :mod:`.schedule` (on one type), the rest are evaluated here.

    ``reason`` is text ("" where none), unless ``reason_codes`` and every candidate is
    evaluated here: then the int8 codes into :data:`REASONS` (the evaluator turns them into
    its text column without a Python string per row)."""
    mixed = fleet.mixed_rows(cfg)
    ramp = schedule.ramp_rows(cfg) & ~mixed
    if not mixed.any() and not ramp.any():
        return _evaluate_one_type(cfg, reason_codes=reason_codes)
    groups = [
        (mixed, fleet.evaluate),
        (ramp, lambda c: schedule.evaluate(c, _evaluate_one_type)),
        (~mixed & ~ramp, _evaluate_one_type),
    ]
    parts = [(m, fn(take_rows(cfg, np.flatnonzero(m)))) for m, fn in groups if m.any()]
    if len(parts) == 1:
        return parts[0][1]
    return _merge(parts, len(mixed))


def ramp_phases(cfg: dict[str, np.ndarray]) -> schedule.Phases:
    """The phases of candidates whose batch ramps (on one accelerator type), each evaluated
    as :func:`evaluate` evaluates them (:func:`.schedule.run_phases`)."""
    return schedule.run_phases(cfg, _evaluate_one_type)


def _merge(parts: list[tuple[np.ndarray, dict]], n: int) -> dict:
    """One output table from the groups' tables (each for the rows of its mask)."""
    out = {}
    for k in parts[0][1]:
        cols = [p[k] for _, p in parts]
        dtype = object if any(c.dtype == object for c in cols) else np.result_type(*cols)
        col = np.empty(n, dtype=dtype)
        for (mask, _), c in zip(parts, cols, strict=True):
            col[mask] = c
        out[k] = col
    return out


def _evaluate_one_type(
    cfg: dict[str, np.ndarray], *, reason_codes: bool = False
) -> dict[str, np.ndarray]:
    """:func:`evaluate` for candidates on one accelerator type. A candidate the time model
    refuses before its step (its layout, memory, precision, target or clock) is not timed:
    it gets its reason, the metrics known before the step (memory, size, run length:
    :data:`.time.result.FRONT_METRICS`) and NaN for the others (docs/model.md, section 10).
    ``reason_codes``: ``reason`` as its codes into :data:`REASONS`, not text."""
    out = _coded_one_type(cfg)
    if not reason_codes:
        out["reason"] = REASON_TEXT[out["reason"]]
    return out


def _coded_one_type(cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:func:`_evaluate_one_type` with ``reason`` as codes into :data:`REASONS`."""
    # the clock-independent part once (shared by candidates that differ only in the clock
    # or the energy half's inputs: then re-timing a row re-runs only the step at its new
    # clock)
    front = time_model.front(cfg)
    codes = front.reason_codes(cfg)
    refused = codes != 0
    if not refused.any():
        perf, shared = _timed(front, cfg)
        del front  # (its arrays freed before the energy half: see _timed)
        return _powered(cfg, perf, shared)
    out = front.metrics()
    n = len(codes)
    out["feasible"] = np.zeros(n, dtype=bool)
    out["reason"] = codes.copy()  # (the accepted rows' codes are set in it)
    out["second_accelerators"] = np.zeros(n)
    rows = np.flatnonzero(~refused)
    # none accepted: the outputs' names and types from one candidate, whose values are not used
    timing = rows if len(rows) else np.arange(1)
    live_cfg = take_rows(cfg, timing)
    perf, shared = _timed(front.of_candidates(timing, live_cfg), live_cfg)
    del front
    live = _powered(live_cfg, perf, shared)
    if not len(rows):
        live = {name: values[:0] for name, values in live.items()}
    return _with_refused(out, rows, live)


def _with_refused(refused: dict, rows: np.ndarray, live: dict) -> dict:
    """Every candidate's outputs, in ``live``'s order: ``live``'s (the outputs of the
    candidates ``rows``) at ``rows``; elsewhere ``refused``'s (the reason, the metrics known
    before the step), NaN for the other metrics and False for a flag.

    A column of ``live`` alone is picked, not filled then scattered: each candidate's place
    in ``live``'s rows, or one past them where refused, picks from the column with its fill
    value appended (one pass that writes the column once: 15 against 19-22 ms for 60
    columns of 131,072 rows, 57% accepted, from memory the caches do not hold)."""
    n, m = len(refused["reason"]), len(rows)
    at = np.full(n, m, dtype=np.intp)
    at[rows] = np.arange(m)
    out = {}
    for name, values in live.items():
        if name in FRONT_METRICS:  # the same values, computed for every candidate
            out[name] = refused[name]
            continue
        if name in refused:
            col = refused[name]
            col[rows] = values
            out[name] = col
            continue
        ext = np.empty(m + 1, dtype=values.dtype)
        ext[:m] = values
        ext[m] = np.nan if values.dtype.kind == "f" else 0
        out[name] = ext.take(at)
    return out


def _timed(front: time_model.Front, cfg: dict[str, np.ndarray]):
    """(the candidates' time result at their clock, their front where it is shared, else
    None). A front of one row per candidate (~130 block-sized arrays) is not kept for the
    energy half, and the caller drops its own before it: holding it cost more CPU time than
    re-timing's rows re-running the time model (docs/model.md, section 10)."""
    return time_model.timed(front, cfg), (front if front.rows is not None else None)


def _among(rows: np.ndarray, earlier: np.ndarray) -> np.ndarray | None:
    """Where each of ``rows`` is in ``earlier`` (both increasing index arrays), or None when
    some are not there."""
    if len(rows) > len(earlier):
        return None
    at = np.searchsorted(earlier, rows)
    if len(at) and (at[-1] >= len(earlier) or not np.array_equal(earlier[at], rows)):
        return None
    return at


def _powered(cfg: dict[str, np.ndarray], perf, shared: time_model.Front | None) -> dict:
    """The outputs of candidates ``cfg`` from their time result at their clock: the energy
    half, which may lower the clock and re-time (from their ``shared`` front, where there is
    one, else from their inputs)."""

    # the front of the rows re-timed last (index array, front), where there is no shared one:
    # the clock search's later passes re-time some of the same rows again
    held: list = []

    def retime(clock_mhz: np.ndarray, rows: np.ndarray):
        clock_inputs = {k: np.asarray(cfg[k])[rows] for k in time_model.CLOCK_INPUTS}
        if shared is not None:
            front = shared.take(rows)
        else:
            at = _among(rows, held[0][0]) if held else None
            if at is None:
                held[:] = [(rows, time_model.front(take_rows(cfg, rows), share=False))]
            front = held[0][1] if at is None else held[0][1].take(at)
        return time_model.timed(front, clock_inputs, clock_mhz)

    # The energy model may change the clock (power cap, thermal throttling); it re-times
    # the affected rows and hands back the time result at the final clock, which wins.
    energy = energy_model.evaluate(cfg, perf, retime)
    time_ok = perf.reason_code == 0  # no time-side reason (integer codes: no string compares)
    out = energy.timing.metrics()
    out.update(energy.metrics)
    energy_ok = energy.reason_code == 0
    out["feasible"] = time_ok & energy_ok
    # the time model's reason where it has one, else the energy half's (codes into REASONS)
    energy_code = energy.reason_code.astype(np.int8)
    energy_code[~energy_ok] += _ENERGY_CODES
    out["reason"] = np.where(time_ok, energy_code, perf.reason_code).astype(np.int8, copy=False)
    out["second_accelerators"] = np.zeros(len(time_ok))
    return out
