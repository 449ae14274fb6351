"""Text input columns as integer codes into their distinct values.

The evaluator factorises each text column once for the whole table; the physics then
looks each distinct value up once (catalog row, preset, choice index) instead of hashing
a string per candidate.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


class Factorised:
    """A text column as integer ``codes`` into its distinct values ``uniques``.

    What :func:`pandas.factorize` returns, kept together so that the physics looks each
    distinct value up once instead of hashing a string per candidate (the evaluator
    factorises each text column once for the whole table). Sliced like an array
    (``col[i:j]``, ``col[idx]``); ``np.asarray(col)`` gives the object array of strings.
    """

    __slots__ = ("codes", "uniques")
    ndim = 1

    def __init__(self, codes: np.ndarray, uniques) -> None:
        self.codes = np.asarray(codes)
        self.uniques = list(uniques)

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.codes.shape

    def __getitem__(self, rows) -> Factorised:
        codes = self.codes
        if codes.strides == (0,) and len(codes) and isinstance(rows, np.ndarray) and rows.ndim == 1:
            # one value in every row (an input left at its default): still one broadcast
            n = int(np.count_nonzero(rows)) if rows.dtype == np.bool_ else len(rows)
            return Factorised(repeat_one(codes[:1], n), self.uniques)
        return Factorised(codes[rows], self.uniques)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        table = np.empty(len(self.uniques), dtype=object)
        table[:] = self.uniques
        return table[self.codes] if dtype is None else table[self.codes].astype(dtype)

    def map(self, fn, dtype=float) -> np.ndarray:
        """``fn(value)`` per candidate, computed once per distinct value (``fn(None)`` for
        a missing value, code -1)."""
        return np.array([fn(u) for u in self.uniques] + [fn(None)], dtype=dtype)[self.codes]


def factorise(values) -> tuple[np.ndarray, list]:
    """Integer codes and distinct values of an array (fast for object/string arrays;
    free for a :class:`Factorised` column)."""
    if isinstance(values, Factorised):
        return values.codes, values.uniques
    codes, uniques = pd.factorize(np.asarray(values, dtype=object).reshape(-1))
    return codes.astype(np.int64), list(uniques)


def choice_codes(values, choices: tuple[str, ...]) -> np.ndarray:
    """Index of each string in ``choices`` as floats; -1 where missing or not a choice.

    The evaluator replaces values that are not a choice by the input's declared default
    (:func:`dse.analytic.declarations.complete`), so -1 means "no value given" here.
    """
    codes, uniq = factorise(values)
    table = np.array(
        [choices.index(u) if isinstance(u, str) and u in choices else -1 for u in uniq] + [-1]
    )
    codes = np.asarray(codes)
    table = table.astype(float)  # (the few distinct values converted, not every row)
    if one_value(codes):  # (a default column)
        return repeat_one(table[codes[:1]], len(codes))
    return table.take(codes)


def take_fields(table: np.ndarray, codes: np.ndarray) -> list[np.ndarray]:
    """Each row of ``table`` (fields x distinct values, float64) at ``codes`` (non-negative
    integers, one per candidate): ``table[i].take(codes)``, except that a field whose value
    is the same, bit for bit, at every code present is a read-only broadcast of that value
    (no per-candidate copy: a block of one accelerator type, one training stack)."""
    codes = np.asarray(codes).reshape(-1)
    if not len(codes) or codes.min() < 0:
        return [np.ascontiguousarray(row).take(codes) for row in table]
    used = np.flatnonzero(np.bincount(codes, minlength=table.shape[1]))
    bits = np.ascontiguousarray(table[:, used]).view(np.int64)
    same = (bits == bits[:, :1]).all(axis=1)
    n = len(codes)
    return [
        repeat_one(table[i, used[:1]], n) if same[i] else np.ascontiguousarray(table[i]).take(codes)
        for i in range(len(table))
    ]


def one_value(x) -> bool:
    """Whether ``x`` is a 1-D read-only broadcast of one value (:func:`repeat_one`'s kind: an
    input a study leaves at its default), not empty."""
    return isinstance(x, np.ndarray) and x.ndim == 1 and x.strides == (0,) and len(x) > 0


def repeat_one(one: np.ndarray, n: int) -> np.ndarray:
    """A read-only view of ``n`` rows that all hold the value of ``one`` (an array of one
    element): ``np.broadcast_to(one, (n,))``, without its ~10 us of Python per call."""
    out = np.ndarray((n,), dtype=one.dtype, buffer=np.ascontiguousarray(one), strides=(0,))
    out.flags.writeable = False
    return out
