"""``engine/quiet_idle``: which readings were taken with the board quiet, and the level they
agree on."""

from __future__ import annotations

import numpy as np

from attribution.engine.quiet_idle import (
    MIN_QUIET,
    QUIET_AFTER_CONSUMER_S,
    QUIET_AFTER_S,
    quiet_after_s,
    quiet_idle,
    quiet_mask,
)

S = 1_000_000_000


def test_a_reading_is_quiet_only_past_the_settling_time_after_work() -> None:
    seg_s, seg_e = np.array([1 * S, 5 * S]), np.array([2 * S, 6 * S])
    t = np.arange(0, 10 * S, S // 10, dtype=np.int64)  # 10 Hz
    q = quiet_mask(t, seg_s, seg_e, lag_ms=0.0, window_ms=100.0, after_s=1.0)
    # quiet: window [t-0.1 s-1 s, t] clear of both segments
    expect = np.array([not ((ts - 1.1 * S) < 2 * S and ts > 1 * S)
                       and not ((ts - 1.1 * S) < 6 * S and ts > 5 * S) for ts in t])
    assert np.array_equal(q, expect)
    assert q[t == int(3.2 * S)][0] and not q[t == int(3.0 * S)][0]
    # a lag moves the window back: a reading 1.05 s after the work's end sees it at +100 ms lag
    late = np.array([int(3.15 * S)])
    assert quiet_mask(late, seg_s, seg_e, lag_ms=0.0, window_ms=100.0, after_s=1.0)[0]
    assert not quiet_mask(late, seg_s, seg_e, lag_ms=100.0, window_ms=100.0, after_s=1.0)[0]
    # a poll's spread widens it the same way
    assert not quiet_mask(late, seg_s, seg_e, lag_ms=0.0, window_ms=100.0, after_s=1.0,
                          spread_ns=np.array([S // 10]))[0]
    # no work at all: every reading quiet
    assert quiet_mask(t, seg_s[:0], seg_e[:0], lag_ms=0.0, window_ms=100.0, after_s=1.0).all()
    assert quiet_after_s(True) == QUIET_AFTER_CONSUMER_S > quiet_after_s(False) == QUIET_AFTER_S


def test_the_level_needs_enough_readings_that_agree() -> None:
    rng = np.random.default_rng(0)
    seg_s, seg_e = np.array([1 * S]), np.array([2 * S])
    t = np.arange(0, 10 * S, S // 10, dtype=np.int64)
    busy = (t > 1 * S) & (t < 5 * S)  # work, then the board settling
    w = np.where(busy, 300.0, 51.6 + rng.normal(0.0, 0.3, len(t)))
    got = quiet_idle(t, w, seg_s, seg_e, lag_ms=0.0, window_ms=100.0, after_s=3.0)
    assert got is not None and abs(got.power_w - 51.6) < 0.2
    # before the work (windows ending by its start) and from 5.1 s (3.1 s back clears it)
    assert got.n == int(np.count_nonzero((t <= 1 * S) | (t - int(3.1 * S) >= 2 * S)))
    assert got.range_w[0] < got.power_w < got.range_w[1] < 60.0
    few = t[11: 11 + 40 + MIN_QUIET - 1]  # from 1.1 s: the first quiet one is at 5.1 s
    assert quiet_idle(few, w[11: 11 + len(few)], seg_s, seg_e, lag_ms=0.0, window_ms=100.0,
                      after_s=3.0) is None
    assert quiet_idle(t[11: 11 + 40 + MIN_QUIET], w[11: 11 + 40 + MIN_QUIET], seg_s, seg_e,
                      lag_ms=0.0, window_ms=100.0, after_s=3.0) is not None
    ramp = np.where(busy, 300.0, np.linspace(80.0, 40.0, len(t)))  # still falling: no level
    assert quiet_idle(t, ramp, seg_s, seg_e, lag_ms=0.0, window_ms=100.0, after_s=3.0) is None
