"""Set operations on integer columns in linear time when their values span a small range.

Owns the ``np.unique``-equivalents of integer id columns (device indices, name ids, class
ids: the engine's common case is a range not much larger than the column):
:func:`distinct_ints` (sorted distinct values), :func:`unique_inverse` (and each entry's
index among them), :func:`value_counts` and :func:`counts` (how many of each), computed with
one comparison per value when the range holds only a few values, one ``bincount`` when it is
small, and ``np.unique`` otherwise; :func:`relabel` (each entry's label, given one label per
distinct value) by one gather through a table indexed by the id; and
:func:`indices_by_value` (``np.flatnonzero(a == v)`` for every v, in two passes or one
stable sort).
"""

from __future__ import annotations

import numpy as np

from attribution.model import I64

SPAN_PER_VALUE = 4
"""Use a bincount when the value range is at most this many times the column length."""


FEW_VALUES = 12
"""A range of at most this many values is scanned once per value (a comparison pass, ≈ 0.15
ms per value at 1 M entries) instead of by a ``bincount`` (its cast and scattered counts,
2–3 ms)."""


def _span(a: np.ndarray) -> tuple[int, int] | None:
    lo, hi = int(a.min()), int(a.max())
    return (lo, hi) if hi - lo <= SPAN_PER_VALUE * len(a) + 1024 else None


def distinct_ints(a: np.ndarray) -> I64:
    """``np.unique(a)`` of an integer column, as int64."""
    if len(a) == 0:
        return np.empty(0, np.int64)
    span = _span(a)
    if span is None:
        return np.unique(a).astype(np.int64)
    lo, hi = span
    if hi - lo < FEW_VALUES:
        return np.array([v for v in range(lo, hi + 1)
                         if v in (lo, hi) or bool(np.any(a == v))], np.int64)
    return np.flatnonzero(np.bincount(a.astype(np.intp) - lo, minlength=hi - lo + 1)) + lo


def counts(a: np.ndarray, n: int) -> I64:
    """``np.bincount(a, minlength=n)[:n]`` as int64: how many entries hold each of 0 … n − 1
    (``a`` non-negative)."""
    if n <= FEW_VALUES:
        return np.array([np.count_nonzero(a == v) for v in range(n)], np.int64)
    return np.bincount(a, minlength=n)[:n].astype(np.int64, copy=False)


def relabel(a: np.ndarray, distinct: I64, label: np.ndarray, *, out: np.ndarray) -> None:
    """``out[i] = label[j]`` where ``distinct[j] == a[i]`` (``distinct``: :func:`distinct_ints`
    of ``a``): one gather through a table indexed by the value itself when the values are
    non-negative and span a small range, else a search among the distinct values."""
    if len(a) == 0:
        return
    if int(distinct[0]) >= 0 and int(distinct[-1]) <= SPAN_PER_VALUE * len(a) + 1024:
        table = np.zeros(int(distinct[-1]) + 1, out.dtype)
        table[distinct] = label
        np.take(table, a, out=out)
    else:
        np.take(label, np.searchsorted(distinct, a), out=out)


def indices_by_value(a: np.ndarray, n: int) -> list[I64]:
    """``[np.flatnonzero(a == v) for v in range(n)]`` for a column of small non-negative
    codes (codes ≥ n are in no list), each list in column order.  With few codes: the most
    common code's entries by one pass over the column, the others' among the rest; with more
    (several GPUs × causes), slices of one stable sort of the codes."""
    if len(a) == 0 or n == 0:
        return [np.empty(0, np.int64) for _ in range(n)]
    per = counts(a, n)
    if n > FEW_VALUES:
        key = np.minimum(a, n).astype(np.uint8 if n < 256 else np.int64)  # uint8: radix sort
        order = np.argsort(key, kind="stable")
        bounds = np.r_[0, np.cumsum(per)]
        return [order[bounds[v]:bounds[v + 1]].astype(np.int64, copy=False) for v in range(n)]
    big = int(np.argmax(per))
    out = [np.empty(0, np.int64)] * n
    out[big] = np.flatnonzero(a == big)
    rest = np.flatnonzero(a != big)
    rest_code = a[rest]
    for v in range(n):
        if v != big:
            out[v] = rest[rest_code == v]
    return out


def unique_inverse(a: np.ndarray) -> tuple[I64, I64]:
    """``np.unique(a, return_inverse=True)`` of an integer column: (sorted distinct values as
    int64, index of each entry's value among them)."""
    if len(a) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    span = _span(a)
    if span is None:
        u, inv = np.unique(a, return_inverse=True)
        return u.astype(np.int64), inv.astype(np.int64).reshape(-1)
    lo, hi = span
    if lo == hi:
        return np.array([lo], np.int64), np.zeros(len(a), np.int64)
    rel = a.astype(np.intp, copy=False) - lo
    present = np.bincount(rel, minlength=hi - lo + 1) > 0
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present) + lo, rank[rel].astype(np.int64, copy=False)


def value_counts(a: np.ndarray) -> tuple[I64, I64]:
    """``np.unique(a, return_counts=True)`` of an integer column: (sorted distinct values as
    int64, how many times each occurs as int64)."""
    if len(a) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    span = _span(a)
    if span is None:
        u, c = np.unique(a, return_counts=True)
        return u.astype(np.int64), c.astype(np.int64)
    lo, hi = span
    cnt = np.bincount(a.astype(np.intp, copy=False) - lo, minlength=hi - lo + 1)
    at = np.flatnonzero(cnt)
    return at + lo, cnt[at].astype(np.int64, copy=False)
