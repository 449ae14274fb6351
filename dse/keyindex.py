"""Which candidates are stored, and where: a compact index of ``int64`` keys.

A log-structured set of sorted runs of ``(key, location)`` pairs: adding a batch sorts it
into a new run and merges runs of similar size (so there are O(log n) runs and every key
is moved O(log n) times); a lookup is a binary search in each run. 10**7 keys take 160 MB
(two ``int64`` arrays) instead of a Python dict of strings. A location is any ``int64``
the caller chooses (the store packs a file number and a row).
"""

from __future__ import annotations

import numpy as np


class KeyIndex:
    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (sorted keys, their locations)

    def __len__(self) -> int:
        return sum(len(k) for k, _ in self._runs)

    def add(self, keys: np.ndarray, locations: np.ndarray) -> None:
        """Add keys not yet in the index (a key added twice keeps both entries; lookups
        return one of them)."""
        keys = np.asarray(keys, dtype=np.int64)
        if len(keys) == 0:
            return
        order = np.argsort(keys, kind="stable")
        self._runs.append((keys[order], np.asarray(locations, dtype=np.int64)[order]))
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            (k2, l2), (k1, l1) = self._runs.pop(), self._runs.pop()
            keys = np.concatenate([k1, k2])
            order = np.argsort(keys, kind="stable")  # two sorted runs: timsort merges them in O(n)
            self._runs.append((keys[order], np.concatenate([l1, l2])[order]))

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The location of every key, -1 where it is not in the index."""
        keys = np.asarray(keys, dtype=np.int64)
        out = np.full(len(keys), -1, dtype=np.int64)
        for run_keys, run_locs in self._runs:
            pos = np.searchsorted(run_keys, keys)
            pos = np.minimum(pos, len(run_keys) - 1)
            hit = (run_keys[pos] == keys) & (out < 0)
            out[hit] = run_locs[pos[hit]]
        return out
