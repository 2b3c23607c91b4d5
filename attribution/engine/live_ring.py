"""The live engine's state over the horizon: classes, slabs, reading rows and steps.

Owns the storage of :mod:`attribution.engine.live`: ``Classes`` (the class table across
updates), ``SlabRing`` (per-class and per-cause sums of settled time, kept as running totals
so a tick never re-sums the horizon), ``RowRing`` (the per-reading activity rows in one
growable buffer with a moving head, so a tick appends the new rows and drops the expired ones
without re-concatenating the horizon) and ``StepRing`` (settled ProfilerSteps, their busy
time per unit as ``SparseRows``).
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from attribution.engine.live_steps import StepIndex
from attribution.model import F64, I64
from attribution.snapshot import IDLE_CAUSES
from attribution.steps import StepTimes

N_CAUSES = len(IDLE_CAUSES)


class Classes:
    """The engine's class table across updates (labels in first-seen order)."""

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.source: list[int] = []
        self.key: list[tuple[str, str]] = []
        self._index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.labels)

    def lut(self, labels: tuple[str, ...], sources: tuple[int, ...],
            keys: tuple[tuple[str, str], ...]) -> I64:
        out = np.empty(len(labels), np.int64)
        for i, (lab, src, key) in enumerate(zip(labels, sources, keys, strict=True)):
            j = self._index.get(lab)
            if j is None:
                j = len(self.labels)
                self._index[lab] = j
                self.labels.append(lab)
                self.source.append(src)
                self.key.append(key)
            out[i] = j
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Slab:
    """Settled time ``[start_ns, end_ns)`` reduced to per-class and per-cause sums."""

    start_ns: int
    end_ns: int
    calls: I64
    time_s: F64
    share_s: F64
    bytes: I64
    idle_s: F64  # per cause
    idle_n: I64
    # random windows in the slab (``live_reduce.random_window_ends``): their count (one
    # element) and the per-unit sums of their busy fractions and of their squares, from which
    # the horizon's phase-lock test reads the workload's spread (``aliasing``)
    rand_n: F64 = dataclasses.field(default_factory=lambda: np.zeros(1))
    rand_x: F64 = dataclasses.field(default_factory=lambda: np.zeros(0))
    rand_xx: F64 = dataclasses.field(default_factory=lambda: np.zeros(0))
    # per class: the items running across ``start_ns`` (started before it, ending after) and
    # their bytes; counted only where the slab is the horizon's first, so a horizon's calls
    # are the items that overlap it (``SlabRing.head_open``)
    open_calls: I64 = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    open_bytes: I64 = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))


SUMS = ("calls", "time_s", "share_s", "bytes", "idle_s", "idle_n")
"""The slab sums a snapshot reads per class or cause."""
RANDOM_SUMS = ("rand_n", "rand_x", "rand_xx")
"""The slab sums of the random windows (the phase-lock test's reference)."""


class SlabRing:
    """The slabs over the horizon and their running sums (add on append, subtract on expiry;
    re-summed from scratch every ``RESUM`` expiries so float drift cannot build up)."""

    RESUM = 1000

    def __init__(self) -> None:
        self.slabs: deque[Slab] = deque()
        self.sums: dict[str, F64] = {k: np.zeros(N_CAUSES if k.startswith("idle") else 0)
                                     for k in SUMS + RANDOM_SUMS}
        self._expired = 0

    def __len__(self) -> int:
        return len(self.slabs)

    def _add(self, slab: Slab, sign: float) -> None:
        for k in SUMS + RANDOM_SUMS:
            v = np.asarray(getattr(slab, k), np.float64)
            cur = self.sums[k]
            if len(v) > len(cur):
                cur = np.pad(cur, (0, len(v) - len(cur)))
            cur[:len(v)] += sign * v
            self.sums[k] = cur

    def append(self, slab: Slab) -> None:
        self.slabs.append(slab)
        self._add(slab, 1.0)

    def expire(self, before_ns: int) -> None:
        """Drop the slabs that start before ``before_ns``."""
        dropped = False
        while self.slabs and self.slabs[0].start_ns < before_ns:
            self._add(self.slabs.popleft(), -1.0)
            self._expired += 1
            dropped = True
        if dropped and self._expired >= self.RESUM:
            self._expired = 0
            n = {k: len(v) for k, v in self.sums.items()}
            self.sums = {k: np.zeros(n[k]) for k in SUMS + RANDOM_SUMS}
            for sl in self.slabs:
                self._add(sl, 1.0)

    def total(self, key: str, n: int) -> F64:
        v = self.sums[key]
        return np.pad(v, (0, n - len(v))) if len(v) < n else v.copy()

    def head_open(self, n: int) -> tuple[F64, F64]:
        """Per class (``n``): the calls and bytes of the items running across the first
        slab's start. Slabs count an item where it starts, so a horizon whose start cuts a
        long kernel would show its time with no call; these are added to the sums."""
        if not self.slabs:
            return np.zeros(n), np.zeros(n)
        first = self.slabs[0]
        return (np.pad(first.open_calls.astype(np.float64), (0, n - len(first.open_calls))),
                np.pad(first.open_bytes.astype(np.float64), (0, n - len(first.open_bytes))))


class RowRing:
    """Reading rows ``(t, y, x, x_lo, x_hi)`` over the horizon, oldest first.

    ``x*`` have one column per class; classes first seen later add zero columns.  Storage is
    one buffer per field with capacity doubling; ``view()`` returns the live rows without a
    copy; ``expire`` moves the head; ``append`` compacts when the tail is full.  The ``x*``
    buffers are held class-major (a class's values over the rows contiguous; the views are
    their transposes), so the fit's gather of a few dozen class columns out of hundreds reads
    only those columns.
    """

    def __init__(self) -> None:
        self.n_cls = 0
        self._t = np.empty(0, np.int64)
        self._y = np.empty(0, np.float64)
        self._x = [np.empty((0, 0), np.float64) for _ in range(3)]  # (classes, rows)
        self._head = 0
        self._end = 0

    def __len__(self) -> int:
        return self._end - self._head

    def _realloc(self, rows: int, cols: int) -> None:
        n = len(self)
        t = np.empty(rows, np.int64)
        y = np.empty(rows, np.float64)
        t[:n] = self._t[self._head:self._end]
        y[:n] = self._y[self._head:self._end]
        xs = []
        for x in self._x:
            nx = np.zeros((cols, rows), np.float64)
            nx[:self.n_cls, :n] = x[:self.n_cls, self._head:self._end]
            xs.append(nx)
        self._t, self._y, self._x = t, y, xs
        self._head, self._end, self.n_cls = 0, n, cols

    def append(self, t: I64, y: F64, xs: tuple[F64, F64, F64]) -> None:
        k, cols = len(t), max(self.n_cls, xs[0].shape[1])
        if self._end + k > len(self._t) or cols > self._x[0].shape[0]:
            need = len(self) + k
            cap = len(self._t) if need <= len(self._t) // 2 else max(2 * need, 64)
            self._realloc(cap, max(cols, self._x[0].shape[0]))
        self.n_cls = cols
        sl = slice(self._end, self._end + k)
        self._t[sl], self._y[sl] = t, y
        for buf, x in zip(self._x, xs, strict=True):
            buf[:x.shape[1], sl] = x.T
            buf[x.shape[1]:, sl] = 0.0
        self._end += k

    def expire(self, before_ns: int) -> None:
        """Drop the rows taken before ``before_ns``."""
        self._head += int(np.searchsorted(self._t[self._head:self._end], before_ns))

    def view(self) -> tuple[I64, F64, F64, F64, F64]:
        """The live rows ``(t, y, x, x_lo, x_hi)`` (views, ``x*`` (rows × classes) with the
        classes' values contiguous: do not keep across appends)."""
        sl = slice(self._head, self._end)
        x, xl, xh = (b[:self.n_cls, sl].T for b in self._x)
        return self._t[sl], self._y[sl], x, xl, xh


class SparseRows:
    """Rows of per-unit values kept as their nonzero entries, oldest row first (compressed
    rows: each row's entries are one run of ``(column, value)``): a step's busy time per
    unit, where a step runs a few dozen of hundreds of units (a dense (steps × units) matrix
    was ~95 % zeros and 80 MB at 20 k steps × 480 units).  ``append`` adds rows, ``expire``
    drops the oldest, :meth:`dot` is the matrix-vector product (each row's products summed
    in column order)."""

    def __init__(self) -> None:
        self._col = np.empty(0, np.intp)
        self._val = np.empty(0, np.float64)
        self._e0 = 0  # entries: buffer positions [_e0, _e1)
        self._e1 = 0
        self._ebase = 0  # entries dropped or moved out of the buffer's front
        self._start = np.empty(0, np.int64)  # each row's first entry, counted from the first
        self._r0 = 0  # rows: buffer positions [_r0, _r1)
        self._r1 = 0

    def __len__(self) -> int:
        return self._r1 - self._r0

    @property
    def nnz(self) -> int:
        return self._e1 - self._e0

    def append(self, x: F64) -> None:
        """Append the rows of ``x`` (rows × columns; its nonzero entries are kept)."""
        r, c = np.nonzero(x)
        k, rows = len(r), x.shape[0]
        if self._e1 + k > len(self._col):
            n = self.nnz
            cap = len(self._col) if n + k <= len(self._col) // 2 else max(2 * (n + k), 256)
            col, val = np.empty(cap, np.intp), np.empty(cap, np.float64)
            col[:n], val[:n] = self._col[self._e0:self._e1], self._val[self._e0:self._e1]
            self._col, self._val = col, val
            self._ebase += self._e0
            self._e0, self._e1 = 0, n
        if self._r1 + rows > len(self._start):
            n = len(self)
            cap = (len(self._start) if n + rows <= len(self._start) // 2
                   else max(2 * (n + rows), 64))
            start = np.empty(cap, np.int64)
            start[:n] = self._start[self._r0:self._r1]
            self._start, self._r0, self._r1 = start, 0, n
        first = self._ebase + self._e1
        self._start[self._r1:self._r1 + rows] = first + np.searchsorted(r, np.arange(rows))
        self._r1 += rows
        sl = slice(self._e1, self._e1 + k)
        self._col[sl] = c
        self._val[sl] = x[r, c]
        self._e1 += k

    def expire(self, rows: int) -> None:
        """Drop the ``rows`` oldest rows."""
        self._r0 = min(self._r0 + rows, self._r1)
        self._e0 = (int(self._start[self._r0]) - self._ebase if self._r0 < self._r1
                    else self._e1)

    def _starts(self) -> I64:
        """Each live row's first entry as a position in the live entries."""
        return self._start[self._r0:self._r1] - (self._ebase + self._e0)

    def dot(self, w: F64) -> F64:
        """``dense @ w`` (``w``: one value per column, at least as many as any row uses)."""
        out = np.zeros(len(self))
        if not self.nnz:
            return out
        terms = np.take(w, self._col[self._e0:self._e1])
        terms *= self._val[self._e0:self._e1]
        starts = self._starts()
        ran = starts < np.r_[starts[1:], self.nnz]  # rows with entries
        out[ran] = np.add.reduceat(terms, starts[ran])
        return out


DENSE_STEP_UNITS = 64
"""Up to this many units a step ring keeps its busy time as dense rows (a product over
them is the cheapest); wider, as :class:`SparseRows` (a step runs few of them)."""


class StepRing:
    """Settled steps ``(start, duration, busy per unit, items)`` over the horizon: the
    duration and the items (NaN = none given) in two :class:`RowRing`; the busy time per
    unit in a third while units are few, as :class:`SparseRows` once they are more than
    :data:`DENSE_STEP_UNITS`."""

    def __init__(self) -> None:
        self._ring = RowRing()
        self._items = RowRing()
        self._dense: RowRing | None = RowRing()
        self._sparse: SparseRows | None = None
        self.index = StepIndex()  # the sorted latencies, in step with it
        self.source = "ProfilerStep"

    def __len__(self) -> int:
        return len(self._ring)

    def append(self, start_ns: I64, dur_s: F64, busy_s: F64, items: F64) -> None:
        none = np.zeros((len(start_ns), 0))
        self._ring.append(start_ns, dur_s, (none, none, none))
        self._items.append(start_ns, items, (none, none, none))
        if self._dense is not None and busy_s.shape[1] > DENSE_STEP_UNITS:
            self._sparse = SparseRows()  # wide from now on: the rows so far move over
            self._sparse.append(self._dense.view()[2])
            self._dense = None
        if self._dense is not None:
            self._dense.append(start_ns, dur_s, (busy_s, none, none))
        else:
            assert self._sparse is not None
            self._sparse.append(busy_s)
        self.index.append(dur_s)

    def expire(self, before_ns: int) -> None:
        """Drop the steps that started before ``before_ns``."""
        d = self._ring.view()[1]
        n = len(d)
        self._ring.expire(before_ns)
        self._items.expire(before_ns)
        if self._dense is not None:
            self._dense.expire(before_ns)
        else:
            assert self._sparse is not None
            self._sparse.expire(n - len(self._ring))
        self.index.expire(d[:n - len(self._ring)])  # a view: the ring writes only at its end

    def busy_dot(self, w: F64) -> F64:
        """Each step's busy time per unit times ``w`` (one value per unit), summed."""
        if self._dense is not None:
            x = self._dense.view()[2]
            return np.asarray(x @ w[:x.shape[1]], np.float64)
        assert self._sparse is not None
        return self._sparse.dot(w)

    def times(self) -> StepTimes:
        """The energy-independent step statistics of every step in the ring
        (:func:`attribution.steps.step_times`, from the incremental index)."""
        _, d, _, _, _ = self._ring.view()
        return self.index.times(d, self._items.view()[1], self.source)

    def view(self) -> tuple[I64, F64, F64]:
        """``(start_ns, dur_s, items)`` of the live steps (views: do not keep across
        appends)."""
        t, d, _, _, _ = self._ring.view()
        return t, d, self._items.view()[1]
