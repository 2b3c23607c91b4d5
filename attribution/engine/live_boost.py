"""The consumer-board boost model in the live engine: the slow second response stage and the boost
tail, fitted with the lag and applied to every reading row.

Owns :class:`Boost` (the fitted model: slow stage (τ₂, w) and tail (min_gap, τ_t)),
:class:`ResponseSearch` (the live lag search -- on data-centre boards refined between its
grid points as the batch engine refines it -- then on consumer boards
``timebase.fit_slow_response`` spread over ticks (:class:`SlowSearch`, driving its generator
``timebase.slow_response_steps``) and the tail scan on the same span, one min_gap a step
(:class:`TailSteps`, driving ``tail.scan_tail_steps`` on ``tail.LIVE_MIN_GAP_GRID_MS``)) and
:func:`row_columns` (a batch of reading rows' activity at lag and at the interval's two
refits -- lag ∓ ``LAG_SLACK_MS``, or as far as the residual reaches -- with the slow stage,
and the tail column at the same lags). The tail column of a row needs the idle gap
its window sits in: the gap starts at the last busy end before it, which may lie before the
records the engine still holds, so the caller passes the last busy end it has seen
(``prev_end_ns``), and the gap in progress at the settle line is closed at ``now`` (a record
still running then is the live engine's "long record" approximation).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Generator, Sequence

import numpy as np

from attribution.engine import regress, stepping
from attribution.engine.aliasing import spread_ratio
from attribution.engine.lag_refine import (
    LAG_SLACK_MS,
    lag_ends_ms,
    lag_reach_ms,
    lag_rise,
    refine_grid_lag,
)
from attribution.engine.live_lag import LagSearch
from attribution.engine.live_reduce import QueryBusy, reading_rows
from attribution.engine.tail import (
    LIVE_MIN_GAP_GRID_MS,
    TailScan,
    idle_gaps,
    scan_tail_steps,
    tail_fractions,
)
from attribution.engine.timebase import (
    MIN_LAG_READINGS,
    ActivityFn,
    LagMatrices,
    slow_response_steps,
    window_fractions,
)
from attribution.model import F64, I64

SLOW_REACH = 3.5
"""The slow stage's delay quantiles reach 3.47 τ₂ back (``TAU_POINTS`` quantiles of Exp)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Boost:
    """The consumer-board model: slow stage (τ₂ ms, w) and tail (min_gap ms, τ_t s)."""

    slow: tuple[float, float] = (0.0, 0.0)
    tail: tuple[float, float] | None = None
    modelled: bool = False  # fitted (a consumer board), even if neither part was kept
    tail_unplaced: bool = False
    """No tail candidate could be told from the constant (``tail.TailScan.unplaced``)."""

    def reach_ms(self) -> float:
        """How far before a window the slow stage reads busy time."""
        return SLOW_REACH * self.slow[0] if self.slow[1] > 0 else 0.0


class SlowSearch:
    """An interruptible ``timebase.fit_slow_response`` (its generator,
    ``timebase.slow_response_steps``, one activity matrix at a time)."""

    def __init__(self, busy: ActivityFn, t_ns: I64, y: F64, window_ms: float, *,
                 lag_ms: float, tau_ms: float) -> None:
        self.result: tuple[float, tuple[float, float]] | None = None
        self._gen = slow_response_steps(busy, t_ns, y, window_ms, lag_ms=lag_ms,
                                        tau_ms=tau_ms, rss=regress.quick_rss, batched=False)

    def step(self, units: float = math.inf) -> tuple[float, tuple[float, float]] | None:
        """Evaluate activity matrices worth up to ``units`` (at least one); the result once
        done."""
        left = units
        while self.result is None and left > 0:
            try:
                left -= next(self._gen)
            except StopIteration as done:
                self.result = done.value
        return self.result


class ResponseSearch:
    """The lag/response search (``live_lag.LagSearch``), then on consumer boards the slow
    stage and the tail on the same readings; ``step(units)`` until it returns
    ``(lag, τ, Boost)``."""

    def __init__(self, busy: ActivityFn, t_ns: I64, y: F64, window_ms: float, *,
                 consumer: bool, start_ns: I64, end_ns: I64, block: int = 1) -> None:
        self._busy, self._t, self._y, self._w = busy, t_ns, y, window_ms
        self._block = block  # readings whose residuals move together (the bootstrap's block)
        self._consumer = consumer
        self._items = (start_ns, end_ns)
        self._lag = LagSearch(busy, t_ns, y, window_ms)
        self._fast: tuple[float, float] | None = None
        self._slow: SlowSearch | None = None
        self._tail: TailSteps | None = None  # the tail scan, once the slow stage is in
        self.result: tuple[float, float, Boost] | None = None
        self.spread = 1.0
        """The search's readings' activity spread ratio at the result (``aliasing
        .spread_ratio``): phase-locked readings do not place the lag (the engine then keeps
        the one it has)."""
        self.lag_ends_ms = (LAG_SLACK_MS, LAG_SLACK_MS)
        """How far below and above the lag the interval's refits sit (``lag_refine
        .lag_ends_ms``: the residual's own reach where it stays within its 90 % bound past
        ``LAG_SLACK_MS``, as the batch engine; data-centre boards)."""

    def step(self, units: float = math.inf) -> tuple[float, float, Boost] | None:
        if self.result is not None:
            return self.result
        if self._fast is None:
            self._fast = self._lag.step(units)
            if self._fast is None:
                return None
            if not self._consumer:
                lag, tau = self._fast
                act = LagMatrices(self._busy, self._t, self._w, tau)

                def rss_at(lags: Sequence[float]) -> list[float]:
                    return [regress.quick_rss(m, self._y) for m in act.at(lags)]
                x = act.at([lag])[0]
                if len(self._t) >= MIN_LAG_READINGS:  # between the grid's points, as batch
                    lag = refine_grid_lag(rss_at, lag)
                    x = act.at([lag])[0]
                    resid = regress.quick_resid(x, self._y)
                    act.release()  # the walk's matrices are read once each
                    self.lag_ends_ms = lag_ends_ms(LAG_SLACK_MS, lag_reach_ms(
                        rss_at, lag, r_0=float(resid @ resid),
                        rise=lag_rise(resid, x, block=self._block)))
                self.spread = spread_ratio(self._busy, self._t, x, self._w,
                                           lag_ms=lag, tau_ms=tau)
                self.result = (lag, tau, Boost())
                return self.result
            self._slow = SlowSearch(self._busy, self._t, self._y, self._w,
                                    lag_ms=self._fast[0], tau_ms=self._fast[1])
            if not math.isinf(units):
                return None  # the slow stage starts on the next call
        if self._tail is None:
            assert self._slow is not None
            res = self._slow.step(units)
            if res is None:
                return None
            lag, slow = res
            x = window_fractions(self._busy, self._t, self._w, lag, self._fast[1], slow=slow)
            self._tail = TailSteps(x, lag, slow, scan_tail_steps(
                x, self._y, *self._items, self._t, window_ms=self._w, lag_ms=lag,
                rss=regress.quick_rss, gaps_ms=LIVE_MIN_GAP_GRID_MS))
            if not math.isinf(units):
                return None  # the tail scan starts on the next call
        t = self._tail
        scan = t.step(one=not math.isinf(units))  # one min_gap's candidates a call
        if scan is None:
            return None
        tau = self._fast[1]
        self.spread = spread_ratio(self._busy, self._t, t.x, self._w, lag_ms=t.lag_ms,
                                   tau_ms=tau, slow=t.slow)
        self.result = (t.lag_ms, tau, Boost(t.slow, scan.params, True, scan.unplaced))
        return self.result


class TailSteps:
    """The boost tail's scan (``tail.scan_tail_steps``) at the fitted lag and stage, stepped
    one min_gap's candidates at a time."""

    def __init__(self, x: F64, lag_ms: float, slow: tuple[float, float],
                 gen: Generator[None, None, TailScan]) -> None:
        self.x, self.lag_ms, self.slow = x, lag_ms, slow
        self._gen = gen

    def step(self, *, one: bool) -> TailScan | None:
        """Scan the next min_gap (``one``) or all that are left; the result once done."""
        return stepping.step(self._gen)[1] if one else stepping.finish(self._gen)


def row_columns(busy: QueryBusy, t_ns: I64, *, window_ms: float, lag_ms: float,
                tau_ms: float, boost: Boost, start_ns: I64, end_ns: I64,
                prev_end_ns: int | None, now_ns: int,
                ends_ms: tuple[float, float] = (LAG_SLACK_MS, LAG_SLACK_MS)
                ) -> tuple[list[F64], list[F64] | None]:
    """Per-unit activity of the rows ``t_ns`` at lag, lag − and lag + ``ends_ms`` (the
    interval's refits: ``LAG_SLACK_MS``, or as far as the residual reaches; with the slow
    stage), and when the board's model has a tail, the tail column at those lags."""
    lags = (lag_ms, lag_ms - ends_ms[0], lag_ms + ends_ms[1])
    if boost.slow[1] > 0:
        xs = [window_fractions(busy, t_ns, window_ms, d, tau_ms, slow=boost.slow) for d in lags]
    else:  # one busy-time query for the three lags
        xs = list(reading_rows(busy, t_ns, window_ms, lag_ms, tau_ms, ends_ms=ends_ms))
    if not boost.modelled:
        return xs, None
    if boost.tail is None or not len(t_ns):
        return xs, [np.zeros((len(t_ns), 1)) for _ in lags]
    s, e = start_ns, end_ns
    if prev_end_ns is not None:  # the gap the first records' windows may sit in
        s = np.r_[np.int64(prev_end_ns - 1), s]
        e = np.r_[np.int64(prev_end_ns), e]
    close = max(now_ns, int(e.max()) + 1 if len(e) else now_ns)  # the gap in progress
    s = np.r_[s, np.int64(close)]
    e = np.r_[e, np.int64(close + 1)]
    gs, ge = idle_gaps(s.astype(np.int64), e.astype(np.int64), round(boost.tail[0] * 1e6))
    hs = [tail_fractions(gs, ge, t_ns, window_ms=window_ms, lag_ms=d,
                         tau_s=boost.tail[1])[:, None] for d in lags]
    return xs, hs
