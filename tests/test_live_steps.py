"""`engine.live_steps`: the incremental step statistics equal a recomputation from scratch.

The step ring's index (sorted latencies) is driven through random appends and
expiries, duplicates and single steps included, and after each its statistics must equal
:func:`attribution.steps.step_times` / :func:`summarize` over the ring's steps, to the bit;
the quantiles read off the sorted latencies must equal ``np.percentile``'s.  End to end, a
live snapshot's steps equal ``summarize`` over the same ring arrays and energies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attribution.engine.deltas import Deltas
from attribution.engine.live import LiveEngine
from attribution.engine.live_ring import DENSE_STEP_UNITS, SparseRows, StepRing
from attribution.engine.live_solve import CI_Q
from attribution.quantiles import median, percentiles, sorted_percentiles
from attribution.sim import simulate
from attribution.steps import step_times, summarize, with_energy


def _as_dense(dot: Callable[[np.ndarray], np.ndarray], cols: int) -> np.ndarray:
    """The (rows × ``cols``) matrix behind a product, column by column (a unit vector picks
    one column's values exactly: the other terms add 0)."""
    return np.column_stack([dot(np.eye(cols)[j]) for j in range(cols)])


def _same_times(ring: StepRing) -> None:
    start_ns, dur_s, items = ring.view()
    # the busy rows stay in step with the ring (each step's first column holds its start)
    np.testing.assert_array_equal(_as_dense(ring.busy_dot, 2)[:, 0],
                                  start_ns.astype(np.float64))
    got = ring.times()
    want = step_times(dur_s, items, sla_ms=None, source=ring.source)
    for f in dataclasses.fields(want):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if isinstance(b, np.ndarray):
            assert np.array_equal(a, b), f.name
        else:
            assert a == b, f.name
    energy_j = dur_s * 300.0 + np.arange(len(dur_s)) * 1e-3
    assert with_energy(got, energy_j) == summarize(dur_s, energy_j, items, sla_ms=None,
                                                   source=ring.source)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=1, max_size=300),
       st.integers(0, 10))
def test_sorted_percentiles_equal_numpy(values: list[float], dup: int) -> None:
    v = np.array(values + values[:dup])
    got = sorted_percentiles(np.sort(v))
    assert np.array_equal(got, np.percentile(v, [50, 95, 99]))
    # unsorted, by one partition (what the per-step energies take every tick)
    np.random.default_rng(dup).shuffle(v)
    assert np.array_equal(percentiles(v), np.percentile(v, [50, 95, 99]))
    # the live interval's 5/95 % of the bootstrap pool's P_idle
    assert np.array_equal(percentiles(v, CI_Q), np.percentile(v, [5, 95]))


def test_percentiles_with_nan_or_nothing_are_numpys() -> None:
    v = np.array([3.0, np.nan, 1.0])
    assert np.isnan(percentiles(v)).all()
    with pytest.raises(IndexError):  # as numpy's
        percentiles(np.empty(0))



@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=80), st.integers(0, 3))
def test_median_is_np_median(values: list[int], scale: int) -> None:
    """``quantiles.median`` (the idle candidates' median gap) gives ``np.median``'s bits,
    odd and even lengths, ties; ``overwrite`` leaves the same values, reordered."""
    a = np.array(values, np.int64).astype(np.float64) * [1e-9, 0.1, 1.0, 3.7][scale]
    want = float(np.median(a))
    assert repr(median(a)) == repr(want)
    b = a.copy()
    assert repr(median(b, overwrite=True)) == repr(want)
    assert sorted(b.tolist()) == sorted(a.tolist())
    big = np.asarray(
        np.random.default_rng(len(values)).integers(0, 2_000_000, 10_001 + scale) * 1e-9,
        np.float64)
    assert repr(median(big)) == repr(float(np.median(big)))

@pytest.mark.parametrize("seed", range(6))
def test_ring_statistics_equal_from_scratch_after_appends_and_expiry(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ring = StepRing()
    t_ns = 0
    with_items = seed % 2 == 0
    for _ in range(40):
        k = int(rng.integers(0, 30))
        starts = t_ns + np.sort(rng.integers(0, 1_000_000, k)).astype(np.int64)
        t_ns += 1_000_000
        # few distinct durations: many equal latencies to insert and remove
        dur_s = rng.choice([0.012, 0.013, 0.0131, 0.02], k) + (
            rng.normal(0, 1e-4, k) if seed % 3 == 0 else 0.0)
        items = np.where(rng.random(k) < 0.8, rng.integers(1, 64, k), np.nan) \
            if with_items else np.full(k, np.nan)
        busy = np.c_[starts.astype(np.float64), np.zeros(k)]
        ring.append(starts, dur_s, busy, items.astype(np.float64))
        if rng.random() < 0.6:
            ring.expire(t_ns - int(rng.integers(2, 8)) * 1_000_000)
        if len(ring):
            _same_times(ring)
        # per-tick cost independent of the run: the index holds the live steps only
        assert len(ring.index) == len(ring)
    ring.expire(t_ns + 1)  # everything expired, then steps again
    assert len(ring) == 0 and len(ring.index) == 0
    ring.append(np.array([t_ns + 5]), np.array([0.01]), np.array([[t_ns + 5.0, 0.0]]),
                np.array([3.0]))
    _same_times(ring)


def test_live_snapshot_steps_equal_summarize() -> None:
    tr = simulate(scenario="demo", gpu="h100", seconds=24.0, seed=3).trace
    span = tr.gpu_span_ns()
    assert span is not None
    deltas = Deltas(tr)
    eng = LiveEngine(devices=tr.devices, horizon_s=8.0, n_boot=20)
    prev, now, checked = span[0] - 1, span[0], 0
    while now < span[1]:
        now = min(now + 500_000_000, span[1])
        eng.update(deltas.between(prev, now), now)
        snap = eng.snapshot()
        prev = now
        if snap is None or snap.steps is None:
            continue
        st_ = next(iter(eng.dev.values()))
        start, dur_s, items = st_.steps.view()
        keep = start >= snap.window.start_ns
        assert snap.steps.count == int(keep.sum())
        # the energies the snapshot used are its own output; the rest must match a recompute
        energy_j = np.array(snap.steps.step_energy_j)
        want = summarize(dur_s[keep], energy_j, items[keep], sla_ms=None,
                         source=st_.steps.source)
        assert snap.steps == want
        checked += 1
    assert checked > 10


@pytest.mark.parametrize("seed", range(4))
def test_sparse_rows_equal_dense_after_appends_and_expiry(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = SparseRows()
    dense = np.zeros((0, 0))
    for _ in range(60):
        k, cols = int(rng.integers(0, 12)), int(rng.integers(1, 40))
        x = np.where(rng.random((k, cols)) < 0.1, rng.random((k, cols)), 0.0)
        x[rng.random((k, cols)) < 0.02] = -1e-18  # rounding below zero is kept, not dropped
        rows.append(x)
        width = max(dense.shape[1], cols)
        dense = np.vstack([np.pad(dense, ((0, 0), (0, width - dense.shape[1]))),
                           np.pad(x, ((0, 0), (0, width - cols)))])
        if rng.random() < 0.4:
            drop = int(rng.integers(0, len(dense) + 2))
            rows.expire(drop)
            dense = dense[drop:]
        assert len(rows) == len(dense)
        assert rows.nnz == int(np.count_nonzero(dense))
        np.testing.assert_array_equal(_as_dense(rows.dot, dense.shape[1]), dense)
        w = rng.normal(size=dense.shape[1] + 3)
        np.testing.assert_allclose(rows.dot(w), dense @ w[:dense.shape[1]], rtol=1e-12,
                                   atol=1e-15)


def test_step_ring_busy_moves_to_sparse_rows_when_units_grow() -> None:
    """A ring that starts with few units and grows past DENSE_STEP_UNITS keeps every step's
    busy time, before and after the move, through expiry."""
    rng = np.random.default_rng(9)
    ring = StepRing()
    dense = np.zeros((0, 1))
    starts = np.empty(0, np.int64)
    for i, cols in enumerate([3, 3, 10, DENSE_STEP_UNITS, DENSE_STEP_UNITS + 5, 90, 90]):
        k = 7
        x = np.where(rng.random((k, cols)) < 0.3, rng.random((k, cols)), 0.0)
        t = i * 100 + np.arange(k, dtype=np.int64)
        ring.append(t, np.full(k, 0.01), x, np.full(k, np.nan))
        width = max(dense.shape[1], cols)
        dense = np.vstack([np.pad(dense, ((0, 0), (0, width - dense.shape[1]))),
                           np.pad(x, ((0, 0), (0, width - cols)))])
        starts = np.r_[starts, t]
        if i == 5:
            ring.expire(250)
            dense, starts = dense[starts >= 250], starts[starts >= 250]
        np.testing.assert_array_equal(_as_dense(ring.busy_dot, width), dense)
        w = rng.normal(size=width)
        np.testing.assert_allclose(ring.busy_dot(w), dense @ w, rtol=1e-12, atol=1e-15)
    assert ring._sparse is not None and ring._dense is None  # the wide form was taken
