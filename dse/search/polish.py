"""The front polish: a local search around the Pareto front of a discrete space.

After a search (any driver) the front it found is polished: the candidates one move away
from a front point (one index step along an ordered parameter, any other value of a
categorical one), or two such moves on two parameters at once, that were never evaluated
are asked; the front is updated from the results, and the neighbours of new front points
join the queue, until no front point has an unevaluated neighbour (the front is a local
optimum of both neighbourhoods) or the budget is spent.

Which neighbours go first: every move (a parameter and a direction or a category offset, or
a pair of them) has a rate, how often it led from a front point to another front point
among the candidates already evaluated by any driver, shrunk towards the rate of all moves
of its order. Each batch draws every move's rate from its Beta posterior (Thompson
sampling: moves seldom tried are tried now and then, which is how pairs that join two
separate groups of front points get found) and ranks a neighbour by the chance that one of
the moves reaching it from a front point finds a front point. Everything is computed from
the grid positions evaluated and the current front, plain data (:meth:`FrontPolish.state`),
and the draws are seeded by the caller, so a resumed run asks what the uninterrupted one
asks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.space import Space

PRIOR = 2.0  # weight (in tries) of the pooled rate of a move's order in its own rate
ORDERS = (1, 2)  # neighbourhoods: one move, two moves on two parameters


class FrontPolish:
    """The running front of a discrete space, the positions evaluated, and the next
    neighbours to evaluate."""

    def __init__(self, space: Space, n_objectives: int) -> None:
        self.space = space
        self.n_objectives = n_objectives
        moves = [space.moves(order) for order in ORDERS]
        self._moves = np.vstack(moves)
        self._order = np.concatenate(
            [np.full(len(m), o) for o, m in zip(ORDERS, moves, strict=True)]
        )
        self.evaluated = np.empty(0, np.int64)  # grid positions told, sorted
        self.front_keys = np.empty(0, np.int64)
        self.front_f = np.empty((0, n_objectives))

    def is_evaluated(self, keys: np.ndarray) -> np.ndarray:
        """Mask of the grid positions already told."""
        if len(self.evaluated) == 0:
            return np.zeros(np.shape(keys), bool)
        pos = np.minimum(np.searchsorted(self.evaluated, keys), len(self.evaluated) - 1)
        return self.evaluated[pos] == keys

    # -- results ---------------------------------------------------------------------------
    def record(self, keys: np.ndarray, objectives: np.ndarray, feasible: np.ndarray) -> None:
        """Fold told results into the evaluated set and the front."""
        import moocore

        keys = np.asarray(keys, np.int64)
        self.evaluated = np.union1d(self.evaluated, keys)
        new = feasible & ~np.isin(keys, self.front_keys)
        _, first = np.unique(keys[new], return_index=True)  # a key told twice counts once
        pick = np.flatnonzero(new)[np.sort(first)]
        if len(pick) == 0:
            return
        k = np.concatenate([self.front_keys, keys[pick]])
        f = np.vstack([self.front_f, np.asarray(objectives, float)[pick]])
        keep = moocore.is_nondominated(f, keep_weakly=True)
        self.front_keys, self.front_f = k[keep], f[keep]

    # -- proposals -------------------------------------------------------------------------
    def propose(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Up to ``n`` unevaluated neighbours of the front, most promising first (grid
        positions); empty when the front is a local optimum of every neighbourhood."""
        keys, score = self._candidates(rng)
        best = np.lexsort((keys, -score))[:n]  # ties: grid order
        return keys[best]

    def _candidates(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Every unevaluated neighbour of the front and its score: the chance, under rates
        drawn from the moves' posteriors, that it is a front point."""
        moves, order = self._moves, self._order
        if len(self.front_keys) == 0 or len(moves) == 0:
            return np.empty(0, np.int64), np.empty(0)
        idx = self.space.indices_of(self.front_keys)
        nb, valid = self.space.neighbours(idx, moves)  # (front point, move)
        seen = self.is_evaluated(nb)
        open_ = valid & ~seen
        if not open_.any():
            return np.empty(0, np.int64), np.empty(0)
        hits = (np.isin(nb, self.front_keys) & valid).sum(axis=0).astype(float)
        tries = (valid & seen).sum(axis=0).astype(float)
        # per move: how often it led from a front point to a front point, shrunk towards
        # the rate of all moves of its order (the prior of a move never tried), drawn
        pooled = np.array(
            [
                (hits[order == o].sum() + 1.0) / (tries[order == o].sum() + 2.0)
                for o in range(max(ORDERS) + 1)
            ]
        )[order]
        rate = rng.beta(hits + PRIOR * pooled, tries - hits + PRIOR * (1 - pooled))
        keys = nb[open_]
        miss = np.log1p(-np.broadcast_to(rate, nb.shape)[open_])  # log P(not a front point)
        uniq, inverse = np.unique(keys, return_inverse=True)
        score = -np.expm1(np.bincount(inverse, weights=miss, minlength=len(uniq)))
        return uniq, score

    # -- plain-data state ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "evaluated": self.evaluated.tolist(),
            "front": {"keys": self.front_keys.tolist(), "F": self.front_f.tolist()},
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.evaluated = np.unique(np.asarray(state["evaluated"], np.int64))
        self.front_keys = np.array(state["front"]["keys"], np.int64)
        self.front_f = np.array(state["front"]["F"], float).reshape(-1, self.n_objectives)
