"""Row selection over the model's containers: dataclasses and dicts of per-candidate arrays."""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace

import numpy as np
import pandas as pd

from dse.analytic.columns import one_value, repeat_one


def take(obj, rows: np.ndarray):
    """``obj`` (an array, a dict or a dataclass of them, nested) at ``rows`` only (a
    read-only broadcast of one value stays one)."""
    return _map_arrays(obj, lambda x: _at(np.asarray(x), rows))


def _at(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``x[rows]``; a 1-D read-only broadcast of one value stays a broadcast."""
    if x.ndim == 1 and np.ndim(rows) == 1:
        if one_value(x):
            return repeat_one(x[:1], _count(rows))
        if rows.dtype.kind in "iu":  # (take: the same values, ~1.5x faster than x[rows])
            return x.take(rows)
    return x[rows]


#: the largest float64, which :func:`nan_to_num` gives for +inf (and its negative for -inf)
_BIGGEST = float(np.finfo(np.float64).max)


def nan_to_num(x, nan: float = 0.0) -> np.ndarray:
    """``np.nan_to_num(x, nan=nan)``, bit for bit, for a 1-D float64 array in three array
    passes (numpy's takes about ten: its tests for each infinity take three), and one value
    for every row (a read-only broadcast) stays one; anything else is ``np.nan_to_num``
    itself. 131,072 rows: 0.27 against 0.61 ms."""
    x = np.asarray(x)
    if x.dtype != np.float64 or x.ndim != 1:
        return np.nan_to_num(x, nan=nan)
    if one_value(x):
        return repeat_one(nan_to_num(x[:1].copy(), nan), len(x))
    out = np.where(np.isnan(x), nan, x)
    return np.clip(out, -_BIGGEST, _BIGGEST, out=out)


def _count(rows: np.ndarray) -> int:
    """Rows an index array or a boolean mask picks."""
    rows = np.asarray(rows)
    return int(np.count_nonzero(rows)) if rows.dtype == np.bool_ else len(rows)


def spread(obj, rows: np.ndarray):
    """:func:`take` for ``rows`` that repeat a few rows many times (one value per distinct
    combination of inputs, spread back to the candidates): an array whose values are all
    the same (bit for bit) is filled with that value instead of picked row by row, and a
    read-only broadcast stays one."""

    def pick(x):
        x = np.asarray(x)
        if x.strides == (0,):
            return repeat_one(x[:1], len(rows))
        first = x[:1]
        bits = x.view(np.int64) if x.dtype == np.float64 else x
        if (bits == bits[0]).all():
            out = np.empty(len(rows), dtype=x.dtype)
            out[...] = first
            return out
        return x[rows]

    return _map_arrays(obj, pick)


def _map_arrays(obj, fn):
    """``obj`` (an array, a dict or a dataclass of them, nested) with ``fn`` applied to each
    per-candidate array."""
    if is_dataclass(obj):
        return replace(obj, **{f.name: _map_arrays(getattr(obj, f.name), fn) for f in fields(obj)})
    if isinstance(obj, dict):
        return {k: _map_arrays(v, fn) for k, v in obj.items()}
    if hasattr(obj, "map_arrays"):  # a class that maps its own arrays (time.collectives.Network)
        return obj.map_arrays(fn)
    if obj is None or isinstance(obj, bool) or np.ndim(obj) == 0:
        return obj  # absent, a flag of the whole block or a number every row shares
    return fn(obj)


def put(base, rows: np.ndarray, sub, *, inplace: bool = False):
    """A copy of ``base`` (an array, a dict or a dataclass of them, nested) with ``sub``'s
    values at ``rows``; ``sub`` holds those rows only. ``base`` is not modified, unless
    ``inplace`` (for a ``base`` the caller owns): then its arrays take ``sub``'s values where
    their dtype can hold them, and only the others are copied."""
    if is_dataclass(base):
        return replace(
            base,
            **{
                f.name: put(getattr(base, f.name), rows, getattr(sub, f.name), inplace=inplace)
                for f in fields(base)
            },
        )
    if isinstance(base, dict):
        return {k: put(v, rows, sub[k], inplace=inplace) for k, v in base.items()}
    if base is None:
        return None
    dtype = np.result_type(base, sub)
    if (
        inplace
        and isinstance(base, np.ndarray)
        and base.dtype == dtype
        and base.ndim
        and base.flags.writeable
    ):
        base[rows] = sub
        return base
    out = np.array(base, dtype=dtype)
    out[rows] = sub
    return out


def take_inputs(cfg: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The inputs (name -> array, or a scalar shared by every row) of the candidates
    ``rows`` (an index array) only."""
    return {k: _input_at(v, rows) for k, v in cfg.items()}


def _input_at(v, rows: np.ndarray):
    """One input of :func:`take_inputs` at ``rows``: a read-only broadcast of one value (a
    column the table did not give: its default) stays one, a Factorised column's too
    (:meth:`~dse.analytic.columns.Factorised.__getitem__`)."""
    if not np.ndim(v):
        return v
    if hasattr(v, "codes"):  # a Factorised column keeps its own broadcast
        return v[rows]
    return _at(np.asarray(v), rows)


#: combined keys up to this many distinct values are looked up in a table (no sort)
_TABLE_KEYS = 1 << 22


def distinct_rows(cfg: dict, skip: frozenset = frozenset()) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)``: one row of each distinct combination of the inputs in ``cfg``
    (name -> array, :class:`~dse.analytic.columns.Factorised` column or a value every row
    shares) other than ``skip``, and each row's index into ``first``: rows ``i`` and
    ``first[inverse[i]]`` agree in every such input, bit for bit (``0.0`` and ``-0.0``, NaNs
    with other payloads count as different). A text column's codes and a whole-number
    column's values are the key's digits as they are; other numbers are factorised."""
    n = len(next(v for v in cfg.values() if np.ndim(v)))
    key, size = np.zeros(n, dtype=np.int64), 1
    for name, col in cfg.items():
        if name in skip:
            continue
        digits, radix = _digits(col)
        if radix <= 1:
            continue
        if size * radix >= 1 << 62:  # renumber the key so far: fewer distinct values than rows
            uniq, key = np.unique(key, return_inverse=True)
            size = len(uniq)
        key = key * radix + digits if size > 1 else digits.astype(np.int64, copy=True)
        size *= radix
    if size <= min(_TABLE_KEYS, 8 * n):
        seen = np.zeros(size, dtype=bool)
        seen[key] = True
        used = np.flatnonzero(seen)
        number = np.zeros(size, dtype=np.intp)
        number[used] = np.arange(len(used))
        inverse = number[key]
    else:
        used, inverse = np.unique(key, return_inverse=True)
    first = np.empty(len(used), dtype=np.intp)
    first[inverse] = np.arange(n)  # any of a combination's rows: they agree in every input
    return first, inverse


def distinct_share(cfg: dict, skip: frozenset = frozenset(), sample: int = 4096) -> float:
    """The share of rows of ``cfg`` that :func:`distinct_rows` would keep (1: every row
    distinct), estimated from ``sample`` rows drawn at random (fixed seed) when there are
    many more: a combination of ``n / u`` rows is drawn at least once with probability
    ``1 - exp(-sample / u)``, so the sample's distinct count ``d`` gives ``u``. Exact in
    expectation where every combination has as
    many rows (a grid); low where some have many more rows than others (the caller then
    counts them exactly before sharing)."""
    n = len(next(v for v in cfg.values() if np.ndim(v)))
    if n <= 4 * sample:
        return len(distinct_rows(cfg, skip)[0]) / max(n, 1)
    at = np.random.default_rng(0).integers(0, n, sample)
    varying = {k: v[at] for k, v in cfg.items() if k not in skip and not _constant(v)}
    if not varying:
        return 1.0 / n
    d = len(distinct_rows(varying)[0])
    if d >= sample:
        return 1.0
    lo, hi = float(d), float(n)  # u(1 - exp(-sample/u)) = d: increasing in u
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if mid * -np.expm1(-sample / mid) < d:
            lo = mid
        else:
            hi = mid
    return min(hi / n, 1.0)


def _constant(col) -> bool:
    """Whether ``col`` is one value for every row (a number or a read-only broadcast)."""
    codes = getattr(col, "codes", col)
    return np.ndim(codes) == 0 or np.asarray(codes).strides == (0,)


def _digits(col) -> tuple[np.ndarray | None, int]:
    """A column as non-negative integer digits and their count (1: one value in every row,
    digits None)."""
    codes = getattr(col, "codes", None)  # a Factorised text column: its codes (-1: missing)
    if codes is not None:
        if codes.strides == (0,):
            return None, 1
        return codes + 1, len(col.uniques) + 2
    col = np.asarray(col)
    if col.ndim == 0 or col.strides == (0,):
        return None, 1
    if col.dtype.kind in "OUS":  # text (or other objects) as they are
        codes, uniq = pd.factorize(col.reshape(-1), use_na_sentinel=False)
        return codes, len(uniq)
    if col.dtype.kind in "iub":
        lo, hi = int(col.min()), int(col.max())
        if hi - lo < _TABLE_KEYS:
            return col - lo if lo else col, hi - lo + 1
        uniq, inverse = np.unique(col, return_inverse=True)
        return inverse, len(uniq)
    col = np.asarray(col, dtype=np.float64)
    if np.isfinite(col).all():  # whole numbers from 0 (no -0.0): the values are the digits
        lo, hi = col.min(), col.max()
        if lo >= 0.0 and hi < _TABLE_KEYS:
            whole = col.astype(np.int64)
            if (whole == col).all() and not np.signbit(col).any():
                return whole, int(hi) + 1
    bits = np.ascontiguousarray(col).view(np.int64)
    uniq, inverse = np.unique(bits, return_inverse=True)
    return inverse, len(uniq)


def where_or_zero(mask: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``np.where(mask, x, 0.0)``, bit for bit, for a float array ``x``: ``x * mask`` where
    every value of ``x`` is finite and not negative (no sign bit: -0.0 would stay -0.0),
    which holds for times and bytes, else ``np.where``. With a mask that varies from row to
    row, ``np.where`` branches on every element (~5x the time of a multiplication)."""
    x = np.asarray(x)
    if x.dtype == np.float64 and np.shape(mask) == x.shape:
        if np.isfinite(x).all() and not np.signbit(x).any():
            return x * mask
    return np.where(mask, x, 0.0)


#: a mask whose rows differ this little (the rarer value in fewer than one row in this many)
#: is left to ``np.where``, whose branch per element the CPU then predicts
_RARE = 16
#: arrays shorter than this are left to ``np.where`` (the bit operations' fixed cost)
_SHORT = 512


def where(mask, a, b) -> np.ndarray:
    """``np.where(mask, a, b)``, bit for bit, faster where ``mask`` varies from row to row.

    ``np.where`` branches on every element, and with a mask of mixed values the CPU
    mispredicts about half of them (~8 ns a row against ~1 ns for an addition; measured
    on 131,072 rows: 1.07 ms against 0.36 ms here). For float64 values (arrays, or Python
    numbers where the other one is a float64 array or a float) this picks each row's
    bits with integer operations instead, ``b ^ ((a ^ b) & -mask)``, which copies the
    chosen value exactly (-0.0 and NaN payloads included); a mask of one value copies
    that operand; anything else (other dtypes, short arrays, a mask that is nearly all
    one value) is ``np.where`` itself. :class:`Choice` picks several pairs by one mask."""
    return Choice(mask)(a, b)


class Choice:
    """:func:`where` by one ``mask`` for several pairs of values: the mask's count and its
    integer form are made once."""

    __slots__ = ("mask", "_plain", "_true", "_bits")

    def __init__(self, mask) -> None:
        self.mask = mask
        # np.where itself: not a long boolean array
        self._plain = not (
            isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.size >= _SHORT
        )
        self._true = -1 if self._plain else np.count_nonzero(mask)
        self._bits = None  # all ones where the mask is true, zero elsewhere (int64)

    def __call__(self, a, b) -> np.ndarray:
        """``np.where(self.mask, a, b)``, bit for bit."""
        mask, true = self.mask, self._true
        if self._plain:
            return np.where(mask, a, b)
        xa, xb = _float_bits(a), _float_bits(b)
        if xa is None or xb is None or (xa[1] and xb[1]):  # not float64, or both Python ints
            return np.where(mask, a, b)
        shape = mask.shape  # each value the mask's shape or one number, else np.where
        if xa[0].shape not in (shape, ()) or xb[0].shape not in (shape, ()):
            return np.where(mask, a, b)
        if true == mask.size or true == 0:
            out = np.empty(mask.shape)
            out[...] = xa[0] if true else xb[0]
            return out
        if min(true, mask.size - true) * _RARE < mask.size:
            return np.where(mask, a, b)
        if self._bits is None:
            self._bits = mask.astype(np.int64)
            np.negative(self._bits, out=self._bits)
        ia, ib = xa[0].view(np.int64), xb[0].view(np.int64)
        if ib.ndim == 0 and not ib.any():  # b is +0.0: a's bits where a, else zero
            return np.bitwise_and(ia, self._bits).view(np.float64)
        out = np.bitwise_xor(ia, ib)
        if out.shape != mask.shape:
            out = np.bitwise_and(out, self._bits)
        else:
            out &= self._bits
        out ^= ib
        return out.view(np.float64)


def select(conditions, choices, default) -> np.ndarray:
    """``np.select(conditions, choices, default)`` (the first true condition's choice)
    through :func:`where`, bit for bit, for float64 choices."""
    if not len(conditions):  # (np.select refuses an empty list; the default, as a copy)
        return np.array(default, dtype=float)
    out = default
    for cond, choice in zip(reversed(conditions), reversed(choices), strict=True):
        out = where(cond, choice, out)
    return np.asarray(out)


def _float_bits(x) -> tuple[np.ndarray, bool] | None:
    """(``x`` as a float64 array, whether it was a Python int), or None where ``np.where``
    would not give a float64 result from it unchanged (another dtype, a bool)."""
    if isinstance(x, np.ndarray):
        return (x, False) if x.dtype == np.float64 else None
    if isinstance(x, bool | np.bool_):
        return None
    if isinstance(x, float | np.float64):
        return np.asarray(x, dtype=np.float64), False
    if isinstance(x, int):
        return np.asarray(float(x), dtype=np.float64), True
    return None


def once(fn, *args):
    """``fn(*args)`` for an element-wise ``fn`` of per-candidate arrays, computed once where
    every array among ``args`` holds one value for every row (a read-only broadcast, as an
    input a study leaves at its default is; numbers pass as they are): ``fn`` of their first
    rows, as a read-only broadcast of the rows (the same bits as ``fn`` of the whole arrays,
    which does the same arithmetic on each row). Anything else is ``fn(*args)`` itself."""
    n = None
    for a in args:
        if isinstance(a, np.ndarray) and a.ndim:
            if not one_value(a):
                return fn(*args)
            n = len(a)
    if n is None:
        return fn(*args)
    out = np.asarray(fn(*(a[:1] if isinstance(a, np.ndarray) and a.ndim else a for a in args)))
    return repeat_one(out, n) if out.shape == (1,) else fn(*args)


def where_shared(mask, a, b) -> np.ndarray:
    """:func:`where`'s values, but ``a`` (``b``) itself where ``mask`` picks it in every row
    and it is a float64 array of the mask's shape, as the result would be (the other a
    float64 array or a Python number): no copy, for a value nobody writes to."""
    if isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.ndim:
        true = np.count_nonzero(mask)
        if true in (0, mask.size):
            keep, other = (a, b) if true else (b, a)
            if (
                isinstance(keep, np.ndarray)
                and keep.dtype == np.float64
                and keep.shape == mask.shape
                and (
                    isinstance(other, float | int)
                    and not isinstance(other, bool)
                    or isinstance(other, np.ndarray)
                    and other.dtype == np.float64
                    and other.ndim <= keep.ndim
                )
            ):
                return keep
    return where(mask, a, b)
