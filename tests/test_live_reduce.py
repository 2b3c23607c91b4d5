"""The live engine's reduction helpers against recomputing from scratch: the query-driven busy
function against ``BusyFunction``, the record buffer's chunk selection against reading every
chunk, and the panels' counted unique against numpy's."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import pytest

from attribution.columns import Columns
from attribution.engine.activity import BusyFunction
from attribution.engine.deltas import ITEMS
from attribution.engine.live_reduce import ChunkBuffer, QueryBusy
from attribution.intsets import unique_inverse
from attribution.model import (
    ApiBatch,
    CopyBatch,
    KernelBatch,
    MarkerBatch,
    MemsetBatch,
    Trace,
)

C = TypeVar("C", bound=Columns)


def _items(rng: np.random.Generator, n: int, n_cls: int) -> tuple[np.ndarray, ...]:
    s = rng.integers(0, 10**9, n)
    d = rng.integers(0, 10**8, n) * (rng.random(n) < 0.9)  # some zero-length items
    return s, s + d, rng.integers(0, n_cls, n)


def test_query_busy_differences_are_busy_function_differences() -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        n, n_cls = int(rng.integers(0, 400)), int(rng.integers(1, 7))
        s, e, g = _items(rng, n, n_cls)
        lo = rng.integers(2 * 10**8, 10**9, 25)
        if n >= 4:  # queries exactly at item edges, and repeated queries
            lo = np.r_[lo, s[:2], e[:2], lo[:3]]
        hi = lo + rng.integers(0, 10**8, len(lo))
        ref = BusyFunction(s, e, g.astype(np.int32), n_cls, origin_ns=0)(np.r_[lo, hi])
        got = QueryBusy(s, e, g, n_cls, need_from_ns=int(lo.min()) - 1)(np.r_[lo, hi])
        m = len(lo)
        assert got.shape == ref.shape
        assert np.allclose(got[m:] - got[:m], ref[m:] - ref[:m], rtol=0, atol=1e-12)
        # busy time inside a window never exceeds the window times the instances
        assert np.all(got[m:] - got[:m] >= -1e-15)


def _query_busy_apart(qb: QueryBusy, t_ns: np.ndarray) -> np.ndarray:
    """``QueryBusy`` as first written: whole durations, open counts and open starts summed
    apart per (class, query) cell, then combined."""
    q, inv = np.unique(t_ns, return_inverse=True)
    k, n = len(q), qb.n_cls
    out = np.zeros((n, k + 1), np.float64)
    if len(qb.start_ns) and k:
        s = qb.start_ns - int(q[0])
        qq = q - int(q[0])
        js = np.searchsorted(qq, s, side="right")
        je = np.maximum(np.searchsorted(qq, s + qb.dur_ns, side="left"), js)
        cell, size = qb.cls * (k + 1), n * (k + 1)
        full = np.bincount(cell + je, weights=qb.dur_ns.astype(np.float64), minlength=size)
        open_n = np.bincount(cell + js, minlength=size) - np.bincount(cell + je, minlength=size)
        open_s = (np.bincount(cell + js, weights=s.astype(np.float64), minlength=size)
                  - np.bincount(cell + je, weights=s.astype(np.float64), minlength=size))
        out = (np.cumsum(full.reshape(n, k + 1), axis=1)
               + np.cumsum(open_n.reshape(n, k + 1), axis=1) * np.r_[qq, 0]
               - np.cumsum(open_s.reshape(n, k + 1), axis=1)) * 1e-9
    return np.ascontiguousarray(out[:, :k].T[inv.reshape(-1)])


def test_query_busy_is_bit_identical_to_summing_the_terms_apart() -> None:
    """Two running sums instead of three give the same floats (every term is an integer
    below 2**53): epoch-scale times, items before and after every query, repeated and
    edge-aligned queries, empty inputs."""
    rng = np.random.default_rng(23)
    for _ in range(200):
        n, n_cls = int(rng.integers(0, 2000)), int(rng.integers(1, 20))
        base = 1_764_000_000_000_000_000 + int(rng.integers(0, 10**12))
        s = base + rng.integers(0, 30 * 10**9, n)
        e = s + rng.integers(0, 10**8, n) * (rng.random(n) < 0.9)
        qb = QueryBusy(s, e, rng.integers(0, n_cls, n), n_cls,
                       need_from_ns=base + int(rng.integers(0, 10**10)))
        t = base + rng.integers(5 * 10**9, 31 * 10**9, int(rng.integers(0, 400)))
        t = np.r_[t, s[:5], e[:5], t[:3]]
        got = qb(t)
        assert got.shape == (len(t), n_cls)
        assert np.array_equal(got, _query_busy_apart(qb, t))


def test_query_busy_ignores_items_that_ended_before_it_is_asked() -> None:
    s = np.array([0, 100, 250], np.int64)
    e = np.array([50, 300, 260], np.int64)
    busy = QueryBusy(s, e, np.zeros(3, np.int64), 1, need_from_ns=60)
    b = busy(np.array([60, 200, 255, 400], np.int64))[:, 0] * 1e9
    # [60, 200]: 100 ns of the second item; [200, 400]: 100 + 10 ns
    assert b[1] - b[0] == pytest.approx(100.0)
    assert b[3] - b[1] == pytest.approx(110.0)
    assert b[2] - b[1] == pytest.approx(60.0)  # 55 of the second + 5 of the third


def _chunk(start: np.ndarray, end: np.ndarray) -> Trace:
    n = len(start)
    return Trace(kernels=KernelBatch.from_columns({"start_ns": start, "end_ns": end,
                                                   "device": np.zeros(n)}, n))


def test_chunk_buffer_skips_only_chunks_that_cannot_touch_the_span() -> None:
    rng = np.random.default_rng(3)
    buf = ChunkBuffer()
    ends = []
    for k in range(40):
        e = np.sort(rng.integers(k * 1000, (k + 1) * 1000, 50))
        s = e - rng.integers(0, 2500, 50)  # some items longer than a chunk
        buf.append(int((k + 1) * 1000), _chunk(s, e))
        ends.append((s, e))
    all_s = np.concatenate([s for s, _ in ends])
    all_e = np.concatenate([e for _, e in ends])
    for since, before in ((5000, 9000), (12_345, 12_346), (0, 40_000), (30_000, 31_000)):
        got = buf.recent(since, start_before_ns=before).kernels
        want = (all_e >= since) & (all_s < before)
        # every record that ends after `since` and starts before `before` is in; a chunk is
        # dropped only when none of its records qualify
        pairs = set(zip(got.start_ns.tolist(), got.end_ns.tolist(), strict=True))
        assert set(zip(all_s[want].tolist(), all_e[want].tolist(), strict=True)) <= pairs
        assert len(got) < len(buf.recent(since).kernels) or before >= 40_000
    buf.prune(20_000)
    assert min(end for end, _ in buf) >= 20_000 and len(buf) == 21


def test_chunk_buffer_keeps_a_chunk_whose_markers_start_before_the_span() -> None:
    buf = ChunkBuffer()
    late = _chunk(np.array([5000]), np.array([5100]))
    late.markers = MarkerBatch.from_columns({"start_ns": [100], "end_ns": [5050]}, 1)
    buf.append(6000, late)
    assert len(buf.recent(0, start_before_ns=1000).markers) == 1
    assert len(buf.markers().markers) == 1


def _old_recent(chunks: list[tuple[int, Trace]], since: int, before: int | None,
                kinds: tuple[str, ...], apis_from: int | None = None) -> Trace:
    """The buffer's selection as it was first written: chunk by chunk, then concatenated
    (less the API calls of the chunks that ended before ``apis_from``)."""
    parts = []
    for end, tr in chunks:
        firsts = [int(getattr(tr, f).start_ns.min())
                  for f in ("kernels", "copies", "memsets") if len(getattr(tr, f))]
        first = min(firsts) if firsts else np.iinfo(np.int64).max
        if end < since:
            continue
        if before is not None and first >= before and not any(
                len(b) and int(b.start_ns.min()) < before for b in (tr.apis, tr.markers)):
            continue
        if apis_from is not None and end < apis_from:
            parts.append(Trace(strings=tr.strings, kernels=tr.kernels, copies=tr.copies,
                               memsets=tr.memsets, markers=tr.markers))
        else:
            parts.append(tr)
    out = Trace(strings=parts[-1].strings) if parts else Trace()
    for f in kinds:
        setattr(out, f, type(getattr(out, f)).concat([getattr(p, f) for p in parts]))
    return out


def _random_chunk(rng: np.random.Generator, k: int) -> Trace:
    """Chunk k of a stream: 0-60 kernels ending in [k, k+1) ms, some long; now and then a
    chunk whose items all start late (so a selection skips it between two it reads), API
    calls, markers, copies, or nothing at all."""
    def batch(cls: type[C], n: int, late: bool) -> C:
        e = np.sort(rng.integers(k * 1000, (k + 1) * 1000, n))
        s = e - (rng.integers(0, 50, n) if late else rng.integers(0, 4000, n))
        return cls.from_columns({"start_ns": s, "end_ns": e, "device": rng.integers(0, 2, n),
                                 "name_id": rng.integers(0, 5, n), "bytes": rng.integers(
                                     0, 99, n)}, n)
    late = rng.random() < 0.3
    n = 0 if rng.random() < 0.1 else int(rng.integers(1, 60))
    return Trace(kernels=batch(KernelBatch, n, late),
                 copies=batch(CopyBatch, int(rng.integers(0, 3)) * (rng.random() < 0.5), late),
                 memsets=batch(MemsetBatch, int(rng.random() < 0.2), late),
                 apis=batch(ApiBatch, int(rng.integers(0, 4)) * (rng.random() < 0.3), False),
                 markers=batch(MarkerBatch, int(rng.random() < 0.15), False))


def _same_trace(got: Trace, want: Trace, kinds: tuple[str, ...]) -> None:
    assert got.strings is want.strings or (len(got.strings) == len(want.strings) == 0)
    for f in ("kernels", "copies", "memsets", "apis", "markers"):
        g, w = getattr(got, f), getattr(want, f)
        if f not in kinds:
            assert len(g) == 0
            continue
        for c in g.DTYPES:
            assert np.array_equal(getattr(g, c), getattr(w, c), equal_nan=True), (f, c)


def test_chunk_buffer_selects_what_concatenating_the_chunks_selected() -> None:
    """Views of the growable columns hold exactly the records, in the same order, that
    concatenating the chosen chunks gave: spans that skip chunks in their middle, after
    pruning (API calls pruned further than the rest, too), and across the columns'
    compaction (views handed out before it stay valid)."""
    rng = np.random.default_rng(7)
    strings = Trace().strings
    buf, chunks = ChunkBuffer(), []
    held: list[tuple[Trace, Trace]] = []
    gathered = 0
    apis_from: int | None = None
    for k in range(300):
        tr = _random_chunk(rng, k)
        tr.strings = strings
        buf.append((k + 1) * 1000, tr)
        chunks.append(((k + 1) * 1000, tr))
        if k % 7 == 3 and k > 100:  # a bounded span (after growing past 64 chunks)
            keep = (k + 1 - int(rng.integers(5, 40))) * 1000
            if rng.random() < 0.5:  # API calls kept for a shorter stretch than the rest
                apis_from = max(apis_from or 0, keep + int(rng.integers(0, 20)) * 1000)
            buf.prune(keep, apis_from_ns=apis_from)
            while chunks and chunks[0][0] < keep:
                chunks.pop(0)
        assert len(buf) == len(chunks)
        for _ in range(3):
            since = (k - int(rng.integers(-1, 45))) * 1000 + int(rng.integers(0, 1000))
            before = None if rng.random() < 0.3 else since + int(rng.integers(0, 30_000))
            kinds = ("kernels", "copies", "memsets") if rng.random() < 0.3 else ITEMS
            got = buf.recent(since, before, kinds=kinds)
            want = _old_recent(chunks, since, before, kinds, apis_from)
            _same_trace(got, want, kinds)
            if len(got.kernels) and got.kernels.start_ns.base is None:
                gathered += 1
            if rng.random() < 0.05:
                held.append((got, want))
        _same_trace(buf.markers(), Trace(strings=strings, markers=MarkerBatch.concat(
            [tr.markers for _, tr in chunks])), ("markers",))
    for got, want in held:  # appends and compactions since did not touch them
        _same_trace(got, want, ITEMS)
    assert gathered  # some selections skipped a chunk between two they read
    assert [end for end, _ in buf] == [end for end, _ in chunks]
    buf.clear()
    assert len(buf) == 0 and len(buf.recent(0).kernels) == 0


def test_panel_key_unique_is_numpys() -> None:
    """The panels' (device, name) key look-up counts dense ids; same answer as np.unique."""
    from attribution.panels import _unique_keys
    rng = np.random.default_rng(5)
    for n, names in ((0, 3), (1, 1), (1000, 5), (5000, 300), (3000, 70_000), (100, 10**9)):
        key = (rng.integers(0, 3, n).astype(np.int64) << 32) | rng.integers(0, names, n)
        u, inv = _unique_keys(key)
        ru, rinv = np.unique(key, return_inverse=True)
        assert np.array_equal(u, ru) and np.array_equal(inv, rinv.reshape(-1))
    ids = np.array([3, -1, 3, 0], np.int32)
    assert np.array_equal(unique_inverse(ids)[0], np.unique(ids))


@pytest.mark.parametrize("tau_ms", [0.0, 1.2])
@pytest.mark.parametrize("n_cls", [4, 300])  # the dense table, then the overlaps
def test_reading_rows_are_window_fractions_at_three_lags(tau_ms: float, n_cls: int) -> None:
    from attribution.engine.lag_refine import LAG_SLACK_MS
    from attribution.engine.live_reduce import reading_rows
    from attribution.engine.timebase import window_fractions

    rng = np.random.default_rng(2)
    s, e, g = _items(rng, 3000, n_cls)
    t = np.sort(rng.integers(3 * 10**8, 9 * 10**8, 40))
    ref_busy = BusyFunction(s, e, g.astype(np.int32), n_cls, origin_ns=0)
    got = reading_rows(QueryBusy(s, e, g, n_cls, need_from_ns=2 * 10**8), t, 25.0, 3.5,
                       tau_ms)
    for x, d in zip(got, (0.0, -LAG_SLACK_MS, LAG_SLACK_MS), strict=True):
        want = window_fractions(ref_busy, t, 25.0, 3.5 + d, tau_ms)
        assert x.shape == want.shape == (40, n_cls)
        assert np.allclose(x, want, rtol=0, atol=1e-9)
        assert np.all(x.sum(axis=1) > 0)


def test_overlaps_are_busy_differences_summed_per_cell() -> None:
    """``QueryBusy.overlaps``: the weighted sum of each interval's busy time per (cell,
    class) equals ``B(hi) − B(lo)`` from the dense query, for long and short items, zero-
    length ones, items that ended before the bound, intervals sharing a cell and intervals
    no item reaches; the overlaps are the exact ones (integer nanoseconds)."""
    rng = np.random.default_rng(5)
    for trial in range(60):
        n, n_cls = int(rng.integers(0, 3000)), int(rng.integers(1, 9))
        s = rng.integers(0, 10**9, n)
        # durations over six orders of magnitude (the duration bins), some zero
        d = (10 ** rng.uniform(2, 8.5, n)).astype(np.int64) * (rng.random(n) < 0.95)
        g = rng.integers(0, n_cls, n)
        bound = 2 * 10**8
        qb = QueryBusy(s, s + d, g, n_cls, need_from_ns=bound)
        k = int(rng.integers(0, 120))
        lo = rng.integers(bound, 10**9, k)
        if n >= 2 and k >= 2:
            lo[:2] = np.maximum(s[:2], bound)  # intervals starting at an item's start
        hi = lo + (10 ** rng.uniform(0, 8, k)).astype(np.int64)
        if trial % 7 == 0:
            hi = lo + 1  # one nanosecond
        n_cells = max(1, k // 3)
        cell = rng.integers(0, n_cells, k)
        w = rng.uniform(0.1, 3.0, k)
        got = qb.overlaps(lo, hi, cell, n_cells, w)
        b = qb(np.r_[lo, hi])
        want = np.zeros((n_cells, n_cls))
        np.add.at(want, cell, (b[k:] - b[:k]) * w[:, None])
        assert got.shape == (n_cells, n_cls)
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12)
        assert np.all(got >= 0)
    # exact: one item, intervals inside, across each edge, covering it, and outside
    one = QueryBusy(np.array([100]), np.array([200]), np.array([0]), 1, need_from_ns=0)
    lo = np.array([120, 50, 150, 0, 200, 300])
    hi = np.array([130, 110, 260, 400, 250, 301])
    got = one.overlaps(lo, hi, np.arange(6), 6, np.ones(6))[:, 0] * 1e9
    assert np.allclose(got, [10, 10, 50, 100, 0, 0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("n_cls", [3, 400])  # the dense table, then the overlaps
def test_span_busy_is_busy_time_inside_each_span(n_cls: int) -> None:
    """A reduction's steps: busy time per class inside each span, whether their edges ride
    on the first query (to the bit the same as asked alone) or are asked alone."""
    rng = np.random.default_rng(4)
    s, e, g = _items(rng, 2000, n_cls)
    lo = np.sort(rng.integers(2 * 10**8, 9 * 10**8, 60))
    hi = lo + rng.integers(0, 5 * 10**7, 60)
    alone = QueryBusy(s, e, g, n_cls, need_from_ns=2 * 10**8, spans=(lo, hi))
    got = alone.span_busy()
    # item by item: the overlap of each item with each span, summed per class
    ov = np.clip(np.minimum(e[None, :], hi[:, None]) - np.maximum(s[None, :], lo[:, None]),
                 0, None) * 1e-9
    want = np.stack([ov[:, g == c].sum(axis=1) for c in range(n_cls)], axis=1)
    assert got.shape == (60, n_cls)
    assert np.allclose(got, want, rtol=1e-9, atol=1e-12)
    rides = QueryBusy(s, e, g, n_cls, need_from_ns=2 * 10**8, spans=(lo, hi))
    rows = np.sort(rng.integers(3 * 10**8, 9 * 10**8, 30))
    assert np.array_equal(rides(rows), QueryBusy(s, e, g, n_cls,
                                                  need_from_ns=2 * 10**8)(rows))
    assert np.array_equal(rides.span_busy(), got)
