"""The preview of a new run (``dse validate``, ``dse run``, ``dse.run``): does any candidate of
the space meet the study?

An evaluator that is cheap declares :attr:`~dse.evaluators.Evaluator.preview_size`; the
check of a new run (:func:`dse.checks.check_new_run`) then evaluates, in its own process,
the whole space when it has at most that many candidates (so that it refuses what a run
would end with "no feasible candidate") or a seeded sample of that many, and reports what
ruled the candidates out. It runs before every new run: ``preview_size`` promises that
it costs a fraction of a second (the analytic evaluator: 4,096 candidates in ~20 ms).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from dse.evaluators import ContractError, Evaluator, check_result
from dse.pareto import feasible_mask, infeasibility_summary
from dse.space import Space
from dse.study import Study

#: the sample is the same on every validate of a study
SEED = 0


@dataclass(frozen=True)
class Preview:
    evaluated: int
    feasible: int  # feasible, within every constraint, finite objectives
    whole_space: bool  # every candidate of the space was evaluated
    ruled_out: list[tuple[str, int]]  # what ruled them out, most frequent first
    failed: str = ""  # why the evaluator's call failed ("" when it did not)
    contract: bool = False  # it failed by the form of its table (every call would)
    breach: bool = False  # its table broke the contract (a call that does fails whole)
    #: the wall time of the evaluator's call (0 when it failed): the run's first tasks are
    #: sized from it (:meth:`dse.execution.base.ChunkSizer.observe`) instead of probing
    seconds: float = 0.0


def preview(ev: Evaluator, space: Space, study: Study) -> Preview | None:
    """Evaluate the space (or a sample of it) when the evaluator allows a preview; None when
    it does not. When the evaluator's call fails the preview says why (``failed``), and
    whether the form of its table broke the contract (``contract``: every call of a run
    would; a value that breaks it may do so for some candidates only)."""
    n = ev.preview_size
    if n <= 0:
        return None
    whole = space.indexable and space.size <= n
    candidates = (
        space.from_indices(space.indices_of(np.arange(int(space.size))))
        if whole
        else space.sample(np.random.default_rng(SEED), n)
    )
    table = space.with_fixed(candidates)
    started = time.perf_counter()
    try:
        result = check_result(ev, table, ev.evaluate(table))
    except ContractError as exc:  # a value may break it for some candidates only: then a warning
        return Preview(
            len(table), 0, whole, [], failed=str(exc), contract=exc.structural, breach=True
        )
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a run splits failing calls, keeps the rows that work
        return Preview(len(table), 0, whole, [], failed=f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - started
    ok = feasible_mask(result, study)
    return Preview(
        len(table),
        int(ok.sum()),
        whole,
        infeasibility_summary(result[~ok], study),
        seconds=seconds,
    )
