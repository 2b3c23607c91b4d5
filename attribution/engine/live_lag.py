"""The lag and board-response search of ``timebase.fit_lag_response``, spread over ticks.

Owns :class:`LagSearch`: the same grids (coarse lag grid, fine grid around the best, then for
each response time constant τ a fine grid around ``lag₀ − τ``), the same residual
(:func:`regress.quick_rss` of :func:`timebase.window_fractions`) and the same tie-breaking
(first minimum; a τ wins only when strictly better), but evaluated a few grid points per call,
so a live refit never stalls one tick.  Run to completion it returns
exactly what ``fit_lag_response`` returns on the same inputs (tested).
"""

from __future__ import annotations

import math

import numpy as np

from attribution.engine import regress
from attribution.engine.timebase import (
    LAG_COARSE_MS,
    LAG_FINE_MS,
    LAG_GRID_MS,
    TAU_GRID_MS,
    TAU_POINTS,
    ActivityFn,
    iter_window_fractions,
)
from attribution.model import F64, I64


class LagSearch:
    """An interruptible ``fit_lag_response``; ``step(n)`` until it returns the result."""

    def __init__(self, busy: ActivityFn, t_ns: I64, y: F64, window_ms: float) -> None:
        self._busy, self._t, self._y, self._w = busy, t_ns, y, window_ms
        lo, hi = LAG_GRID_MS
        self._stage = 0
        self._todo: list[tuple[float, float]] = [
            (float(d), 0.0) for d in np.arange(lo, hi + 1e-9, LAG_COARSE_MS)]
        self._done: list[float] = []
        self._best = (math.inf, 1.5, 0.0)
        self.evaluations = 0
        self.result: tuple[float, float] | None = None if len(t_ns) >= 4 else (1.5, 0.0)

    def step(self, units: float = math.inf) -> tuple[float, float] | None:
        """Evaluate grid points worth up to ``units`` (a τ = 0 point costs 1, a τ > 0 point
        ``TAU_POINTS``, as many activity matrices; at least one point per call; a count, not
        a time, so the result never depends on machine load); (lag, τ) once done.  The points
        a call affords within a grid stage are evaluated in one
        :func:`timebase.iter_window_fractions` call (bit-identical to one call each, cheaper:
        one busy-function query for all their window edges)."""
        left = units
        while self.result is None and left > 0:
            if len(self._done) < len(self._todo):
                first = j = len(self._done)
                while j < len(self._todo) and left > 0:
                    left -= TAU_POINTS if self._todo[j][1] > 0 else 1
                    j += 1
                specs = self._todo[first:j]
                self.evaluations += len(specs)
                self._done += [regress.quick_rss(x, self._y) for x in iter_window_fractions(
                    self._busy, self._t, self._w, specs)]
            else:
                self._advance()
        if self.result is None and len(self._done) == len(self._todo) and self._stage == 2:
            self._advance()
        return self.result

    def _advance(self) -> None:
        lo, hi = LAG_GRID_MS
        scores, plan = self._done, self._todo
        if self._stage == 0:  # coarse → fine around the best coarse lag
            c = plan[int(np.argmin(scores))][0]
            fine = np.arange(max(lo, c - LAG_COARSE_MS), min(hi, c + LAG_COARSE_MS) + 1e-9,
                             LAG_FINE_MS)
            self._todo, self._done, self._stage = [(float(d), 0.0) for d in fine], [], 1
        elif self._stage == 1:  # best τ = 0 lag → for each τ, lags around lag₀ − τ
            i = int(np.argmin(scores))
            lag0 = plan[i][0]
            self._best = (float(scores[i]), lag0, 0.0)
            todo = []
            for tau in TAU_GRID_MS[1:]:
                grid = np.arange(lag0 - tau - 1.0, lag0 - tau + 1.0 + 1e-9, LAG_FINE_MS)
                todo += [(float(d), float(tau)) for d in grid]
            self._todo, self._done, self._stage = todo, [], 2
        else:
            best = self._best
            for tau in TAU_GRID_MS[1:]:
                idx = [k for k, (_, tk) in enumerate(plan) if tk == float(tau)]
                j = idx[int(np.argmin([scores[k] for k in idx]))]
                if scores[j] < best[0]:
                    best = (float(scores[j]), plan[j][0], float(tau))
            self.result = (best[1], best[2])
