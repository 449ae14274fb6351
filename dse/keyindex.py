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
        if len(keys) < 2 or not (consecutive(keys) and consecutive(locations)):
            return False
        return self._insert_interval(int(keys[0]), len(keys), int(locations[0]))

    def add_range(self, first: int, n: int, at: int) -> None:
        """:meth:`add` of the keys ``first .. first+n-1`` at the locations ``at .. at+n-1``
        (a log file of an enumeration's chunk, whose keys the run knows by the first) without
        making either array, nor checking that they are consecutive (two passes each): an
        interval where none of its keys is in another one, else what :meth:`add` makes of
        the arrays (the same index either way)."""
        if n >= 2 and self._insert_interval(first, n, at):
            return
        self.add(np.arange(first, first + n, dtype=np.int64), np.arange(at, at + n, dtype=np.int64))

    def _insert_interval(self, lo: int, n: int, at: int) -> bool:
        """Keep the keys ``lo .. lo+n-1`` at locations ``at ..`` as an interval unless one of
        them is in another interval (a binary search); False: one is (nothing is kept)."""
        end = lo + n
        i = int(np.searchsorted(self._first, end))  # intervals that start before this one ends
        if i > 0 and self._first[i - 1] + self._size[i - 1] > lo:  # the latest ends the latest
            return False
        self._first = np.insert(self._first, i, lo)
        self._size = np.insert(self._size, i, n)
        self._at = np.insert(self._at, i, at)
        return True

    def holds_any(self, lo: int, end: int) -> bool:
        """Whether any of the keys ``lo .. end-1`` is in the index, by a binary search in the
        intervals and in each run: an enumeration's batch, all new but on resume, needs no
        lookup per key (:meth:`find` fills and returns an array of ``end - lo`` locations)."""
        i = int(np.searchsorted(self._first, end))  # as in _insert_interval
        if i > 0 and self._first[i - 1] + self._size[i - 1] > lo:
            return True
        for run_keys, _ in self._runs:
            s = int(np.searchsorted(run_keys, lo))
            if s < len(run_keys) and run_keys[s] < end:
                return True
        return False

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The location of every key, -1 where it is not in the index."""
        keys = np.asarray(keys, dtype=np.int64)
        if consecutive(keys):
            found = self._find_range(int(keys[0]), len(keys))
            if found is not None:
                return found
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

    def _find_range(self, lo: int, n: int) -> np.ndarray | None:
        """:meth:`find` of the keys ``lo .. lo+n-1`` (an enumeration's batch), by slices
        instead of a search per key (a quarter of the run loop's own CPU at 10**7
        candidates); None where more than :data:`RANGE_INTERVALS` intervals overlap them
        (the caller searches per key)."""
        out = np.full(n, -1, dtype=np.int64)
        end = lo + n
        i = max(int(np.searchsorted(self._first, lo, side="right")) - 1, 0)
        j = int(np.searchsorted(self._first, end))
        if j - i > RANGE_INTERVALS:
            return None
        for first, size, at in zip(
            self._first[i:j].tolist(), self._size[i:j].tolist(), self._at[i:j].tolist(), strict=True
        ):
            a, b = max(first, lo), min(first + size, end)
            if a < b:
                out[a - lo : b - lo] = np.arange(at + a - first, at + b - first, dtype=np.int64)
        for run_keys, run_locs in self._runs:  # the intervals' locations come first, as above
            s, e = np.searchsorted(run_keys, [lo, end])
            if s < e:
                at = run_keys[s:e] - lo
                free = out[at] < 0  # reversed: of a key added twice, the first, as above
                out[at[free][::-1]] = run_locs[s:e][free][::-1]
        return out


#: the most intervals :meth:`KeyIndex.find` walks one by one for a range of keys
RANGE_INTERVALS = 64


def consecutive(keys: np.ndarray) -> bool:
    """Whether ``keys`` are ``k, k+1, .., k+n-1`` (an enumeration's batch): a look at the
    ends, then one vectorised pass only where they fit."""
    n = len(keys)
    # (Python integers: a run of hashed keys spans the whole int64 range)
    if n < 2 or int(keys[-1]) - int(keys[0]) != n - 1:
        return n == 1
    # n integers rising strictly over a span of n - 1 are each one more than the last
    return bool((keys[1:] > keys[:-1]).all())


def _ascending(keys: np.ndarray) -> bool:
    """Whether ``keys`` are sorted (ties allowed): one vectorised pass."""
    return bool(len(keys) < 2 or (keys[1:] >= keys[:-1]).all())
