"""Which candidates are stored, and where: a compact index of ``int64`` keys.

A log-structured set of sorted runs of ``(key, location)`` pairs: adding a batch sorts it
into a new run and merges runs of similar size (so there are O(log n) runs and every key
is moved O(log n) times); a lookup is a binary search in each run. 10**7 keys take 160 MB
(two ``int64`` arrays) instead of a Python dict of strings. A location is any ``int64``
the caller chooses (the store packs a file number and a row).

Consecutive keys at consecutive locations (an enumeration's chunk, written as one log file:
grid positions ``k .. k+n-1`` at rows ``0 .. n-1``) are kept as one interval, three numbers
instead of ``16 n`` bytes: an exhaustive run of 10**7 candidates indexes them in a few
hundred intervals, with no copy nor merge of its keys.
"""

from __future__ import annotations

import numpy as np


class KeyIndex:
    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (sorted keys, their locations)
        # disjoint intervals, by first key: keys first .. first+size-1 at locations at ..
        self._first = np.empty(0, np.int64)
        self._size = np.empty(0, np.int64)
        self._at = np.empty(0, np.int64)

    def __len__(self) -> int:
        return sum(len(k) for k, _ in self._runs) + int(self._size.sum())

    def add(self, keys: np.ndarray, locations: np.ndarray) -> None:
        """Add keys not yet in the index (a key added twice keeps both entries; lookups
        return one of them). Keys that come sorted (a grid enumeration's, a chunk's) are not
        sorted again, and a run whose keys all follow the previous run's is merged by
        concatenation: an enumeration's index grows by copies, with no sort at all."""
        keys = np.asarray(keys, dtype=np.int64)
        if len(keys) == 0:
            return
        locations = np.asarray(locations, dtype=np.int64)
        if self._add_interval(keys, locations):
            return
        if not _ascending(keys):
            order = np.argsort(keys, kind="stable")
            keys, locations = keys[order], locations[order]
        self._runs.append((keys, locations))
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            (k2, l2), (k1, l1) = self._runs.pop(), self._runs.pop()
            keys, locs = np.concatenate([k1, k2]), np.concatenate([l1, l2])
            if k1[-1] > k2[0]:  # interleaved: two sorted runs, which timsort merges in O(n)
                order = np.argsort(keys, kind="stable")
                keys, locs = keys[order], locs[order]
            self._runs.append((keys, locs))

    def _add_interval(self, keys: np.ndarray, locations: np.ndarray) -> bool:
        """Keep ``keys`` as an interval when they and their locations are consecutive and no
        key of the interval is in another one (one vectorised pass, then a binary search);
        False: they are not (the caller adds them as a run)."""
        if len(keys) < 2 or keys[-1] - keys[0] != len(keys) - 1:
            return False
        if locations[-1] - locations[0] != len(keys) - 1:
            return False
        if not ((np.diff(keys) == 1).all() and (np.diff(locations) == 1).all()):
            return False
        lo, end = int(keys[0]), int(keys[-1]) + 1
        i = int(np.searchsorted(self._first, end))  # intervals that start before this one ends
        if i > 0 and self._first[i - 1] + self._size[i - 1] > lo:  # the latest ends the latest
            return False
        self._first = np.insert(self._first, i, lo)
        self._size = np.insert(self._size, i, end - lo)
        self._at = np.insert(self._at, i, locations[0])
        return True

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The location of every key, -1 where it is not in the index."""
        keys = np.asarray(keys, dtype=np.int64)
        out = np.full(len(keys), -1, dtype=np.int64)
        if len(self._first):
            i = np.maximum(np.searchsorted(self._first, keys, side="right") - 1, 0)
            offset = keys - self._first[i]
            hit = (offset >= 0) & (offset < self._size[i])
            out[hit] = self._at[i[hit]] + offset[hit]
        for run_keys, run_locs in self._runs:
            pos = np.searchsorted(run_keys, keys)
            pos = np.minimum(pos, len(run_keys) - 1)
            hit = (run_keys[pos] == keys) & (out < 0)
            out[hit] = run_locs[pos[hit]]
        return out


def _ascending(keys: np.ndarray) -> bool:
    """Whether ``keys`` are sorted (ties allowed): one vectorised pass."""
    return bool(len(keys) < 2 or (keys[1:] >= keys[:-1]).all())
