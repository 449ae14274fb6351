"""The front polish: a local search around the Pareto front of a discrete space.

After a search (any driver) the front it found is polished: the candidates one move away
from a front point (one index step along an ordered parameter, any other value of a
categorical one; then two such moves at once) that were never evaluated are asked, the
front is updated from the results, and the neighbours of the new front points follow,
until no front point has an unevaluated neighbour (the front is a local optimum: no
single or double move from it finds a better or new point) or the budget is spent.

Which neighbours go first: each move (a parameter and a direction, or a pair of them) is
scored by how often it led from a front point to another front point among the candidates
already evaluated (a Laplace estimate, over everything evaluated, by any driver); a
neighbour's score combines the moves that reach it from every front point. Everything is
computed from the evaluated grid positions and the current front, which are plain data
(:meth:`FrontPolish.state`): the next batch is a function of the state, so a resumed run
asks what the uninterrupted one asks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.space import Space

PRIOR = 2.0  # weight (in tries) of the pooled rate of a move's order in its own rate


class FrontPolish:
    """The running front of a discrete space, the positions evaluated, and the next
    neighbours to evaluate."""

    def __init__(self, space: Space, n_objectives: int, *, max_order: int = 2) -> None:
        self.space = space
        self.n_objectives = n_objectives
        self.max_order = max_order
        moves = [space.moves(order) for order in range(1, max_order + 1)]
        self._moves = np.vstack(moves)
        self._order = np.concatenate([np.full(len(m), o) for o, m in enumerate(moves, start=1)])
        self.evaluated: set[int] = set()
        self.front_keys = np.empty(0, np.int64)
        self.front_f = np.empty((0, n_objectives))

    # -- results ---------------------------------------------------------------------------
    def record(self, keys: np.ndarray, objectives: np.ndarray, feasible: np.ndarray) -> int:
        """Fold told results into the evaluated set and the front; the number of new front
        points (candidates that entered the front)."""
        import moocore

        keys = np.asarray(keys, np.int64)
        self.evaluated.update(keys.tolist())
        known = set(self.front_keys.tolist())
        new = feasible & np.fromiter((k not in known for k in keys.tolist()), bool, len(keys))
        _, first = np.unique(keys[new], return_index=True)  # a key told twice counts once
        pick = np.flatnonzero(new)[np.sort(first)]
        if len(pick) == 0:
            return 0
        k = np.concatenate([self.front_keys, keys[pick]])
        f = np.vstack([self.front_f, np.asarray(objectives, float)[pick]])
        keep = moocore.is_nondominated(f, keep_weakly=True)
        self.front_keys, self.front_f = k[keep], f[keep]
        return int(keep[len(known):].sum())

    # -- proposals -------------------------------------------------------------------------
    def propose(self, n: int) -> np.ndarray:
        """Up to ``n`` unevaluated neighbours of the front, most promising first (grid
        positions); empty when the front is a local optimum of every neighbourhood."""
        keys, score = self._candidates()
        best = np.lexsort((keys, -score))[:n]  # ties: grid order
        return keys[best]

    def _candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """Every unevaluated neighbour of the front and the chance that it is a front point."""
        moves, order = self._moves, self._order
        if len(self.front_keys) == 0 or len(moves) == 0:
            return np.empty(0, np.int64), np.empty(0)
        idx = self.space.indices_of(self.front_keys)
        nb, valid = self.space.neighbours(idx, moves)  # (front point, move)
        flat = nb.ravel()
        seen = np.fromiter((k in self.evaluated for k in flat.tolist()), bool, flat.size).reshape(nb.shape)
        open_ = valid & ~seen
        if not open_.any():
            return np.empty(0, np.int64), np.empty(0)
        hits = (np.isin(nb, self.front_keys) & valid).sum(axis=0).astype(float)
        tries = (valid & seen).sum(axis=0).astype(float)
        # per move: how often it led from a front point to a front point, shrunk towards
        # the rate of all moves of its order (a move never tried gets its order's rate)
        pooled = np.array([(hits[order == o].sum() + 1.0) / (tries[order == o].sum() + 2.0)
                           for o in range(self.max_order + 1)])[order]
        rate = (hits + PRIOR * pooled) / (tries + PRIOR)
        keys = nb[open_]
        miss = np.log1p(-np.broadcast_to(rate, nb.shape)[open_])  # log P(not a front point)
        uniq, inverse = np.unique(keys, return_inverse=True)
        score = -np.expm1(np.bincount(inverse, weights=miss, minlength=len(uniq)))
        return uniq, score

    # -- plain-data state ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"evaluated": sorted(self.evaluated),
                "front": {"keys": self.front_keys.tolist(), "F": self.front_f.tolist()}}

    def restore(self, state: dict[str, Any]) -> None:
        self.evaluated = set(int(k) for k in state["evaluated"])
        self.front_keys = np.array(state["front"]["keys"], np.int64)
        self.front_f = np.array(state["front"]["F"], float).reshape(-1, self.n_objectives)
