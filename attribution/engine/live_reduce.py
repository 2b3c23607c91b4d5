"""The live engine's reduction of settled time: which records a reduction reads, and what it
makes of them.

Owns

* :class:`ChunkBuffer`: the records the live engine was handed, one chunk per update, each
  with the earliest start among its records, so a reduction reads only the chunks that can
  touch its span (``recent``: records ending after a bound, skipping the chunks of the settle
  window that start after the span) instead of everything since the span's context;
* :func:`reduce_slab`: settled time ``[a, b)`` → a :class:`~attribution.engine.live_ring.Slab`
  (per-class calls, busy time, busy-time share and bytes; idle time and gaps per cause);
* :func:`busy_from`: the busy-time function a reduction's reading rows and steps are read
  from, built only from the records that can change a difference ``B(hi) − B(lo)`` over
  the windows asked for (those ending after the earliest window start);
* :func:`row_reach_ns` and :func:`reading_rows`: how far before a reading its windows reach,
  and its activity fractions at the lag and at lag ± ``LAG_SLACK_MS``;
* :func:`random_window_ends`: windows placed at random in a slab, whose busy fractions'
  sums (``aliasing.random_sums``) are the reference the horizon's phase-lock test compares
  the readings' spread with (``aliasing.spread_ratio_sums``).

The engine itself (:mod:`attribution.engine.live`) decides when to reduce and keeps the
results in its rings (:mod:`attribution.engine.live_ring`).  A reduction reads each record a
bounded number of times (its own span plus ``LOOKBACK_NS`` of context), whatever the settle
delay and however often the engine is polled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.columns import Columns
from attribution.engine.activity import COPY, MEMSET, Items, idle_share_s
from attribution.engine.aliasing import RANDOM_WINDOWS
from attribution.engine.deltas import GPU_ITEMS, ITEMS
from attribution.engine.lag_refine import LAG_SLACK_MS
from attribution.engine.live_ring import N_CAUSES, Slab
from attribution.engine.timebase import TAU_GRID_MS, TAU_POINTS
from attribution.idle import STALL_NS, idle_intervals
from attribution.model import BATCH_TYPES, F64, I64, StringTable, Trace

LOOKBACK_NS = 100_000_000
"""Idle gaps are classified with this much context before the slab (gap length rules)."""
LOOKAHEAD_NS = STALL_NS + 1_000_000
"""... and this much after it: a gap the slab's end cuts is classified whole (by the record
that ends it and that record's launch call) when it ends within this, and as the host stall
it is when it does not; without it, the two parts of a cut gap took different causes
depending on where the poll cadence put the cut."""
RANDOM_MIN_PER_S = 20.0
"""Random windows per second of settled time at least (``random_rate_per_s``): twice the
readings of a 100 ms sensor.  100 a second on every horizon cost the 300 s demo/h100 live
tick +9 % (p50 5.1 → 5.6 ms, median per-tick ratio 1.09, lockstep A/B); 20 a second: 0.98."""
RANDOM_SEED = 7
"""The random windows' seed (with the slab's offset from the engine's start, so a slab gets
the same windows on the same data, wherever the timeline sits)."""


_BATCHES: dict[str, type[Columns]] = {f: BATCH_TYPES[f] for f in ITEMS}
_KIND_COL = {f: i for i, f in enumerate(_BATCHES)}
_NEVER = np.iinfo(np.int64).max


def _first_start_ns(tr: Trace, kinds: tuple[str, ...]) -> int:
    firsts = [int(getattr(tr, f).start_ns.min()) for f in kinds if len(getattr(tr, f))]
    return min(firsts) if firsts else _NEVER


class _Rows:
    """One record batch's rows of every chunk held, in chunk order, in growable columns.

    Rows are numbered from the first ever appended (``base`` is the number of the arrays'
    first row), so a chunk's rows keep their numbers across compaction.  Appending writes past
    the last row (a full array is replaced by a new one, twice the live rows, holding only the
    live rows: amortised O(1) per row); pruning advances ``lo``.  An array is never written
    where a row was already written, so the read-only views ``take`` hands out stay valid."""

    def __init__(self, batch: type[Columns]) -> None:
        self.batch = batch
        self.cols = {k: np.empty(0, d) for k, d in batch.DTYPES.items()}
        self.ro = {k: _read_only(c) for k, c in self.cols.items()}  # what take slices
        self.base = 0
        self.lo = 0
        self.hi = 0

    @property
    def end(self) -> int:
        """The number the next row appended gets."""
        return self.base + self.hi

    def append(self, rows: Columns) -> None:
        n = len(rows)
        if not n:
            return
        cap = len(next(iter(self.cols.values())))
        if self.hi + n > cap:
            live = self.hi - self.lo
            size = max(2 * (live + n), 1024)
            for k, col in self.cols.items():
                new = np.empty(size, col.dtype)
                new[:live] = col[self.lo:self.hi]
                self.cols[k] = new
                self.ro[k] = _read_only(new)
            self.base += self.lo
            self.lo, self.hi = 0, live
        for k, col in self.cols.items():
            col[self.hi:self.hi + n] = getattr(rows, k)
        self.hi += n

    def drop_before(self, row: int) -> None:
        self.lo = max(self.lo, min(row - self.base, self.hi))

    def take(self, first: int, last: int, keep: npt.NDArray[np.bool_] | None = None) -> Any:
        """Rows ``[first, last)`` (less those where ``keep`` is False), as one batch; read-only
        views of the columns when nothing is left out."""
        a, b = first - self.base, last - self.base
        if keep is None:
            return self.batch(**{k: col[a:b] for k, col in self.ro.items()})
        return self.batch(**{k: col[a:b][keep] for k, col in self.ro.items()})


def _read_only(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    v = a.view()
    v.flags.writeable = False
    return v


class ChunkBuffer:
    """The update deltas the engine still needs, oldest first: per update, the records that
    ended up to its ``end_ns`` (the engine's ``now``, non-decreasing), with the earliest start
    among its GPU items and among its API calls and markers.

    Each record batch is kept in one set of growable columns (:class:`_Rows`) with each chunk's
    first row number, so ``recent`` hands out views of the rows it selects (a gather only
    when a chunk it skips lies between two it reads) instead of concatenating chunks."""

    def __init__(self) -> None:
        self._strings = Trace().strings
        self._reset()

    def _reset(self) -> None:
        self._rows = {f: _Rows(b) for f, b in _BATCHES.items()}
        # per chunk (a row of _meta[_c0:_c1]): end_ns, the earliest GPU item start and the
        # earliest API call or marker start (_NEVER when none), then per batch kind the
        # number of its first row; the row after a chunk's last is the next chunk's first
        self._meta = np.empty((64, 3 + len(_BATCHES)), np.int64)
        self._c0 = self._c1 = 0
        self._chunk_strings: list[StringTable] = []

    @property
    def _end(self) -> I64:
        return self._meta[self._c0:self._c1, 0]

    def _off(self, f: str) -> I64:
        """First row of each chunk of kind ``f``, and the row after the last chunk's."""
        out = np.empty(len(self) + 1, np.int64)
        out[:-1] = self._meta[self._c0:self._c1, 3 + _KIND_COL[f]]
        out[-1] = self._rows[f].end
        return out

    def __len__(self) -> int:
        return self._c1 - self._c0

    def __iter__(self) -> Iterator[tuple[int, Trace]]:
        for i in range(len(self)):
            yield int(self._end[i]), self._trace(np.array([i]), ITEMS)

    def append(self, end_ns: int, items: Trace) -> None:
        if self._c1 == len(self._meta):  # full: the live chunks to the front, grown if half full
            live = self._meta[self._c0:self._c1]
            if 2 * len(live) > len(self._meta):
                self._meta = np.empty((2 * len(self._meta), self._meta.shape[1]), np.int64)
            self._meta[:len(live)] = live.copy()
            self._c0, self._c1 = 0, len(live)
        self._meta[self._c1] = (end_ns, _first_start_ns(items, GPU_ITEMS),
                                _first_start_ns(items, ("apis", "markers")),
                                *(rows.end for rows in self._rows.values()))
        self._c1 += 1
        for f, rows in self._rows.items():
            rows.append(getattr(items, f))
        self._chunk_strings.append(items.strings)
        self._strings = items.strings

    def clear(self) -> None:
        self._reset()

    def prune(self, keep_from_ns: int, *, apis_from_ns: int | None = None) -> None:
        """Drop the chunks handed over before ``keep_from_ns`` (the leading ones that ended
        before it), and with ``apis_from_ns`` (later) the API calls of the chunks handed over
        before that: only a reduction's idle gaps read API calls, from its own short context,
        while the GPU items and markers serve a lag refit's ``fit_span`` (at 1 M kernels/s
        the launch calls of 20 s are ~1 GB)."""
        late = self._end >= keep_from_ns
        cut = int(np.argmax(late)) if bool(late.any()) else len(late)
        if cut:
            self._c0 += cut
            for f, rows in self._rows.items():
                rows.drop_before(int(self._off(f)[0]))
            del self._chunk_strings[:cut]
        if apis_from_ns is not None and len(self):
            late = self._end >= apis_from_ns
            i = int(np.argmax(late)) if bool(late.any()) else len(late)
            self._rows["apis"].drop_before(int(self._off("apis")[i]))

    def markers(self) -> Trace:
        """Every marker the buffer holds (steps may be longer than a reduction's context)."""
        rows = self._rows["markers"]
        return Trace(strings=self._strings, markers=rows.take(rows.base + rows.lo, rows.end))

    def recent(self, since_ns: int, start_before_ns: int | None = None, *,
               kinds: tuple[str, ...] = ITEMS) -> Trace:
        """The chunks whose records may end at or after ``since_ns``, as one trace; with
        ``start_before_ns``, less the chunks whose GPU items all start at or after it and that
        hold no API call or marker starting before it (they cannot touch time before it).
        ``kinds``: the record batches gathered (``GPU_ITEMS``: what ``items_for_device``
        reads; the others are left empty)."""
        meta = self._meta[self._c0:self._c1]
        take = meta[:, 0] >= since_ns
        if start_before_ns is not None:
            take &= (meta[:, 1] < start_before_ns) | (meta[:, 2] < start_before_ns)
        idx = np.flatnonzero(take)
        if not len(idx):
            return Trace()
        return self._trace(idx, kinds)

    def _trace(self, idx: npt.NDArray[np.intp], kinds: tuple[str, ...]) -> Trace:
        """The rows of chunks ``idx`` (ascending), in chunk order."""
        i0, i1 = int(idx[0]), int(idx[-1]) + 1
        parts: dict[str, Any] = dict(_EMPTY)
        for f in kinds:
            rows = self._rows[f]
            # rows a kind dropped on its own (API calls: ``prune(apis_from_ns=...)``) are gone
            off = np.maximum(self._off(f), rows.base + rows.lo)
            first, last = int(off[i0]), int(off[i1])
            if len(idx) == i1 - i0:  # every chunk between the first and the last
                parts[f] = rows.take(first, last)
                continue
            counts = np.diff(off[i0:i1 + 1])
            inside = np.zeros(i1 - i0, bool)
            inside[idx - i0] = True
            if int(counts[inside].sum()) == last - first:  # the chunks skipped hold none
                parts[f] = rows.take(first, last)
            else:
                parts[f] = rows.take(first, last, np.repeat(inside, counts))
        return Trace(strings=self._chunk_strings[i1 - 1], **parts)


_EMPTY: dict[str, Columns] = {f: b.empty() for f, b in BATCH_TYPES.items()}
"""Shared empty batches for the kinds a ``recent`` trace leaves out (length 0: immutable)."""


def _fsum(idx: npt.NDArray[np.integer[Any]], weights: F64, n: int) -> F64:
    return np.asarray(np.bincount(idx, weights=weights, minlength=n), np.float64)


def reduce_slab(sub: Trace, it: Items, cls: I64, n_cls: int, span: tuple[int, int]) -> Slab:
    """Settled time ``span = [a, b)`` of ``it`` (one device's items of ``sub``, classes
    ``cls`` in the engine's table of ``n_cls``) reduced to per-class and per-cause sums.
    ``sub`` must hold every record ending at or after ``a − LOOKBACK_NS`` that starts
    before ``b + LOOKAHEAD_NS`` (the gaps are classified over that stretch, then clipped to
    the span)."""
    a, b = span
    s = np.clip(it.start_ns, a, b)
    e = np.clip(it.end_ns, a, b)
    inside = e > s
    dur = (e - s).astype(np.float64) * 1e-9
    share = np.zeros(len(it))
    share[inside] = idle_share_s(s[inside], e[inside], a)
    started = (it.start_ns >= a) & (it.start_ns < b)
    running = (it.start_ns < a) & (it.end_ns > a)
    nbytes = np.zeros(len(it))
    for src, batch in ((COPY, sub.copies), (MEMSET, sub.memsets)):
        m = it.source == src
        if bool(m.any()):
            nbytes[m] = batch.bytes[it.row[m]]
    iv = idle_intervals(sub, a - LOOKBACK_NS, b + LOOKAHEAD_NS, [it.device])
    gs, ge = np.maximum(iv.start_ns, a), np.minimum(iv.end_ns, b)
    gm = ge > gs
    return Slab(
        a, b,
        calls=np.bincount(cls[started], minlength=n_cls).astype(np.int64),
        time_s=_fsum(cls, dur, n_cls),
        share_s=_fsum(cls, share, n_cls),
        bytes=np.bincount(cls[started], weights=nbytes[started],
                          minlength=n_cls).astype(np.int64),
        idle_s=_fsum(iv.cause[gm], (ge - gs)[gm] * 1e-9, N_CAUSES),
        idle_n=np.bincount(iv.cause[gm & (iv.start_ns >= a)],
                           minlength=N_CAUSES).astype(np.int64),
        open_calls=np.bincount(cls[running], minlength=n_cls).astype(np.int64),
        open_bytes=np.bincount(cls[running], weights=nbytes[running],
                               minlength=n_cls).astype(np.int64))


def random_rate_per_s(horizon_s: float) -> float:
    """Random windows a second for a horizon of ``horizon_s``: as the batch engine, at least
    ``aliasing.RANDOM_WINDOWS`` over the span (a 5 s horizon ~100 a second), and never below
    ``RANDOM_MIN_PER_S``."""
    return max(RANDOM_MIN_PER_S, RANDOM_WINDOWS / max(horizon_s, 1e-3))


def random_window_ends(a_ns: int, b_ns: int, first_ns: int, window_ms: float,
                       per_s: float) -> I64:
    """Sorted ends of windows placed uniformly at random in settled time ``[a, b)``, about
    ``per_s`` a second (the count rounded at random, so short slabs keep the rate), none
    starting before the engine's first settled time ``first_ns`` (as the readings)."""
    lo = max(a_ns, first_ns + int(np.ceil(window_ms * 1e6)))
    if b_ns <= lo:
        return np.empty(0, np.int64)
    rng = np.random.default_rng([RANDOM_SEED, max(0, a_ns - first_ns)])
    mean = per_s * (b_ns - lo) * 1e-9
    n = int(mean) + int(rng.random() < mean - int(mean))
    return np.sort(rng.integers(lo, b_ns, size=n, dtype=np.int64))


def row_reach_ns(lag_ms: float, window_ms: float, slow_ms: float = 0.0,
                 above_ms: float = LAG_SLACK_MS) -> int:
    """How far before a reading its windows start, at the lag and ``above_ms`` past it (the
    interval's upper refit: ``LAG_SLACK_MS``, or the residual's reach), any board response on
    the grid and a consumer board's slow stage reaching ``slow_ms`` further back (plus 1 ms
    for rounding)."""
    return int(np.ceil((lag_ms + max(above_ms, LAG_SLACK_MS) + window_ms
                        + 3.0 * TAU_GRID_MS[-1] + slow_ms + 1.0) * 1e6))


DENSE_CELLS = 32_768
"""Up to this many (query × class) cells a reduction reads busy time off the dense table of
cumulative sums (:meth:`QueryBusy.__call__`: a few passes over the cells, exact, and the
fewest steps when classes are few); above it, off the (interval, record) overlaps
(:meth:`QueryBusy.overlaps`: cost in the pairs that meet, not in the classes)."""


class QueryBusy:
    """``B_c(t)`` up to a constant per class, evaluated only at the times asked, without
    sorting the items: the same differences ``B(hi) − B(lo)`` as
    :class:`~attribution.engine.activity.BusyFunction` for ``lo`` at or after
    ``need_from_ns`` (an item that ended before it adds the same to both ends), in integer
    nanoseconds, so exact.

    For sorted distinct query times ``q_k``, an item ``[s, e)`` adds its whole duration to
    every ``q_k ≥ e`` and ``q_k − s`` to every ``s < q_k < e``: two ``searchsorted`` of the
    items into the queries (a second only for the few items a query falls inside) and
    ``bincount`` + ``cumsum`` over (class, query) cells.
    A reduction asks a few dozen times (its readings' window edges at three lags, its steps'
    edges) of tens of thousands of items, where building ``BusyFunction`` sorts them all.
    """

    def __init__(self, start_ns: I64, end_ns: I64, cls: I64, n_cls: int, *,
                 need_from_ns: int, spans: tuple[I64, I64] | None = None) -> None:
        self._spans = spans  # (start, end) of the spans :meth:`span_busy` answers
        self._span_edges: F64 | None = None
        m = end_ns > need_from_ns
        self.start_ns = start_ns[m]
        self.dur_ns = np.maximum(end_ns[m] - self.start_ns, 0)
        self.cls = cls[m].astype(np.int64)
        self.n_cls = n_cls
        self._by_bin: list[tuple[I64, I64, I64, int]] | None = None

    def __call__(self, t_ns: I64) -> F64:
        """``B`` at ``t_ns`` (queries × classes), up to a constant per class.  The first
        call also answers the edges of the spans given at construction, if they are to be
        read off this table (one pass over the records for both)."""
        if self._spans is not None and self._span_edges is None and self._spans_dense():
            both = self._table(np.concatenate([t_ns, *self._spans]))
            self._span_edges = both[len(t_ns):]
            return both[:len(t_ns)]
        return self._table(t_ns)

    def table_fits(self, queries: int) -> bool:
        """Whether ``queries`` times are best read off the dense table (``DENSE_CELLS``)."""
        return queries * self.n_cls <= DENSE_CELLS

    def _spans_dense(self) -> bool:
        return self._spans is not None and self.table_fits(2 * len(self._spans[0]))

    def span_busy(self) -> F64:
        """Busy seconds per class inside each span given at construction (a reduction's
        steps): the difference of the table at its edges (asked with the first query, or
        now), or with many classes the overlaps."""
        assert self._spans is not None
        start, end = self._spans
        k = len(start)
        if self._spans_dense():
            b = self._span_edges
            if b is None:
                b = self._span_edges = self._table(np.concatenate([start, end]))
            return np.asarray(b[k:] - b[:k], np.float64)
        return self.overlaps(start, end, np.arange(k), k, np.ones(k))

    def _table(self, t_ns: I64) -> F64:
        q, inv = np.unique(t_ns, return_inverse=True)
        k, n = len(q), self.n_cls
        if not (len(self.start_ns) and k):
            return np.zeros((len(t_ns), n), np.float64)
        base = int(q[0])
        s = self.start_ns - base
        qq = q - base
        js = np.searchsorted(qq, s, side="right")  # first query after the start
        # B(q_j) = Σ_{je ≤ j} dur + Σ_{js ≤ j < je} (q_j − s) = A_j + N_j q_j with the running
        # sums A (−s at js, +e at je) and N (+1 at js, −1 at je), je the first query at or
        # after the end: bincounts over (query, class) cells laid out query-major, so the rows
        # come out without a transpose.  Most items lie between two queries (je = js): they
        # add their duration at js and nothing to N, so A takes every item's duration at js
        # and only the items a query falls inside are searched for je and corrected (−e at
        # js, +e at je) and counted in N: one binary search of the items, not two.  Every
        # term is an integer below 2**53 in float64, so the sums are exact in any order and
        # B is the same float as summing the −s and +e terms item by item.
        size = (k + 1) * n
        at_s = js * n + self.cls
        a = np.bincount(at_s, weights=self.dur_ns.astype(np.float64), minlength=size)
        nxt = np.append(qq, np.iinfo(np.int64).max)[js]  # the first query after each start
        sp = np.flatnonzero(s + self.dur_ns > nxt)  # ... falls inside the item
        if len(sp):
            e = s[sp] + self.dur_ns[sp]
            at_e = np.searchsorted(qq, e, side="left") * n + self.cls[sp]
            ef = e.astype(np.float64)
            a -= np.bincount(at_s[sp], weights=ef, minlength=size)
            a += np.bincount(at_e, weights=ef, minlength=size)
            c = np.bincount(at_s[sp], minlength=size) - np.bincount(at_e, minlength=size)
        else:
            c = np.zeros(size, np.int64)
        busy: F64 = np.cumsum(a.reshape(k + 1, n)[:k], axis=0)
        busy += np.cumsum(c.reshape(k + 1, n)[:k], axis=0) * qq[:, None].astype(np.float64)
        np.multiply(busy, 1e-9, out=busy)
        return np.ascontiguousarray(busy[inv.reshape(-1)])

    def overlaps(self, lo_ns: I64, hi_ns: I64, cell: I64, n_cells: int,
                 weight: F64) -> F64:
        """``Σ_j weight_j × |[s_i, e_i) ∩ [lo_j, hi_j)|`` in seconds, summed per (``cell_j``,
        class of item i): shape (``n_cells``, classes).  The intervals start at or after
        ``need_from_ns``.

        ``B(hi) − B(lo)`` per interval, without the dense (queries × classes) table that
        :meth:`__call__` builds: only the (interval, item) pairs that can overlap are
        visited.  The items are binned by duration (powers of two); within a bin, sorted by
        start, the items that can reach an interval start after ``lo − longest`` and before
        ``hi`` (one range per interval, at most about twice the items that do reach it).
        Each overlap is exact in integer nanoseconds; the weighted sum is in float64 (the
        differences of cumulative sums it replaces cancelled to ~1e-13 of a window's value).
        """
        n = self.n_cls
        if not (len(self.start_ns) and len(lo_ns)):
            return np.zeros((n_cells, n))
        keys, terms = [], []
        for s, e, c, longest in self._bins():
            i0 = np.searchsorted(s, lo_ns - longest, side="right")
            i1 = np.searchsorted(s, hi_ns, side="left")
            cnt = np.maximum(i1 - i0, 0)
            total = int(cnt.sum())
            if not total:
                continue
            j = np.repeat(np.arange(len(lo_ns)), cnt)
            i = np.arange(total) + np.repeat(i0 - (np.cumsum(cnt) - cnt), cnt)
            ov = np.minimum(e[i], hi_ns[j]) - np.maximum(s[i], lo_ns[j])
            hit = ov > 0
            keys.append(cell[j[hit]] * n + c[i[hit]])
            terms.append(ov[hit] * weight[j[hit]])
        if not keys:
            return np.zeros((n_cells, n))
        out: F64 = np.bincount(np.concatenate(keys), weights=np.concatenate(terms),
                               minlength=n_cells * n).astype(np.float64, copy=False)
        out *= 1e-9
        return out.reshape(n_cells, n)

    def _bins(self) -> list[tuple[I64, I64, I64, int]]:
        """The items binned by duration (⌊log2⌋, zero-length items left out): per bin its
        starts (sorted), ends, classes and longest duration; built on first use."""
        if self._by_bin is None:
            d = self.dur_ns
            pos = np.flatnonzero(d > 0)
            b = np.frexp(d[pos].astype(np.float64))[1]
            by = np.lexsort((self.start_ns[pos], b))
            order, b = pos[by], b[by]
            edges = np.flatnonzero(np.diff(b)) + 1
            self._by_bin = []
            for sel in np.split(order, edges):
                if len(sel):
                    s = self.start_ns[sel]
                    dd = self.dur_ns[sel]
                    self._by_bin.append((s, s + dd, self.cls[sel], int(dd.max())))
        return self._by_bin


def busy_from(it: Items, cls: I64, n_cls: int, need_from_ns: int,
              spans: tuple[I64, I64] | None = None) -> QueryBusy:
    """The busy-time function of a reduction (see :class:`QueryBusy`), with the spans (its
    steps) whose busy time it is to answer."""
    return QueryBusy(it.start_ns, it.end_ns, cls, n_cls, need_from_ns=need_from_ns,
                     spans=spans)


def reading_rows(busy: QueryBusy, t_ns: I64, window_ms: float, lag_ms: float,
                 tau_ms: float, *,
                 ends_ms: tuple[float, float] = (LAG_SLACK_MS, LAG_SLACK_MS)
                 ) -> tuple[F64, F64, F64]:
    """Per-class activity fractions over each reading's window at the lag, at lag − and at
    lag + ``ends_ms`` (the interval's refits, ``LAG_SLACK_MS`` each way unless the residual
    reaches further: the ``RowRing`` columns ``x, x_lo, x_hi``):
    :func:`~attribution.engine.timebase.window_fractions` at the three lags (the mean over
    the response's delay points of each window's busy fraction), from one busy-time query
    for all of them, or with many classes from the (window, record) overlaps."""
    n = len(t_ns)
    q = -np.log1p(-(np.arange(TAU_POINTS) + 0.5) / TAU_POINTS)
    u = tau_ms * q if tau_ms > 0 else np.zeros(1)
    # windows laid out (lag, delay point, reading)
    hi = np.concatenate([(t_ns[None, :] - np.rint(((lag_ms + d) + u[:, None]) * 1e6)
                          .astype(np.int64)).reshape(-1)
                         for d in (0.0, -ends_ms[0], ends_ms[1])])
    lo = hi - np.int64(round(window_ms * 1e6))
    if busy.table_fits(2 * len(hi)):
        both = busy(np.concatenate([lo, hi]))
        m = len(hi)
        frac = (both[m:] - both[:m]) / (window_ms * 1e-3)
        per_lag = frac.reshape(3, len(u), n, -1)
        wt = np.full(len(u), 1.0 / len(u))
        x, xl, xh = (np.asarray(np.tensordot(wt, per_lag[i], axes=1), np.float64)
                     for i in range(3))
        return x, xl, xh
    # each window adds into its (lag, reading) row
    cell = (np.arange(3)[:, None, None] * n + np.arange(n)[None, None, :]
            + np.zeros((1, len(u), 1), np.int64)).reshape(-1)
    weight = np.full(len(hi), 1.0 / (len(u) * window_ms * 1e-3))
    rows = busy.overlaps(lo, hi, cell, 3 * n, weight).reshape(3, n, -1)
    return rows[0], rows[1], rows[2]
