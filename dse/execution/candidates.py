"""What an executor evaluates: a table of full evaluator inputs, or the grid positions of
candidates of a discrete space, turned into that table where the chunk is evaluated.

A chunk of grid positions travels as 8 bytes per candidate (and the space, under a
kilobyte) instead of a pickled DataFrame of every input column (about 140 bytes per
candidate through the dask scheduler), and the main process no longer builds the inputs.
Consecutive positions (an enumeration's chunk) travel as their first and their count: a
local cluster's scheduler runs in the main process, which read and wrote every byte of a
task again (a chunk of 131,072 positions: 1 MB, over TLS).
Both kinds offer the same three operations (:func:`count`, :func:`part`, :func:`frame`),
and :func:`frame` gives the same table either way: the candidate's values from the space,
the fixed values, indexed by key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dse.keyindex import consecutive
from dse.space import Space


@dataclass(frozen=True)
class GridCandidates:
    """Candidates of an indexable space (:attr:`Space.indexable`) by grid position, which
    is also their key (:meth:`Space.keys`)."""

    space: Space
    #: int64 grid positions; or a ``range`` of consecutive ones (a chunk as it is unpickled:
    #: made an array only where it is evaluated; a local cluster's scheduler, in the run's
    #: process, unpickles every task it is given, and made each chunk's 1 MB array there)
    keys: np.ndarray | range
    #: ``keys`` are known to be consecutive (the run checked its batch once): each chunk is
    #: pickled as its first and count without checking its keys again (a pass over them)
    known_consecutive: bool = False

    def key_array(self) -> np.ndarray:
        """The grid positions as an int64 array."""
        keys = self.keys
        if isinstance(keys, range):
            return np.arange(keys.start, keys.stop, dtype=np.int64)
        return keys

    def frame(self) -> pd.DataFrame:
        """The full evaluator inputs (the fixed values included), indexed by key."""
        space, keys = self.space, self.key_array()
        table = space.with_fixed(space.from_indices(space.indices_of(keys)), copy=False)
        return table.set_axis(pd.Index(keys, dtype=np.int64), axis=0)

    def __reduce__(self):
        keys = self.keys
        if isinstance(keys, range):
            return _consecutive, (self.space, keys.start, len(keys))
        if len(keys) > 1 and (self.known_consecutive or consecutive(keys)):
            return _consecutive, (self.space, int(keys[0]), len(keys))
        return GridCandidates, (self.space, keys)


def _consecutive(space: Space, first: int, n: int) -> GridCandidates:
    """Grid positions ``first .. first + n - 1`` (how a chunk of them is pickled)."""
    return GridCandidates(space, range(first, first + n), known_consecutive=True)


Candidates = pd.DataFrame | GridCandidates


def count(candidates: Candidates) -> int:
    return len(candidates.keys) if isinstance(candidates, GridCandidates) else len(candidates)


def part(candidates: Candidates, lo: int, hi: int) -> Candidates:
    """Rows ``lo`` to ``hi`` (exclusive), of the same kind."""
    if isinstance(candidates, GridCandidates):
        return GridCandidates(
            candidates.space, candidates.keys[lo:hi], candidates.known_consecutive
        )
    return candidates.iloc[lo:hi]


def frame(candidates: Candidates) -> pd.DataFrame:
    """The evaluator's input table."""
    return candidates.frame() if isinstance(candidates, GridCandidates) else candidates
