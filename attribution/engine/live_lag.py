"""The lag and board-response search of ``timebase.fit_lag_response``, spread over ticks.

Owns :class:`LagSearch`: it evaluates ``timebase.lag_response_plan`` (the grids and
tie-breaking ``fit_lag_response`` runs) a few grid points per call, so a live refit never
stalls one tick.  Run to completion it returns exactly what ``fit_lag_response`` returns on
the same inputs (tested).
"""

from __future__ import annotations

import math

from attribution.engine import regress
from attribution.engine.timebase import (
    DEFAULT_LAG,
    MIN_LAG_READINGS,
    TAU_POINTS,
    ActivityFn,
    iter_window_fractions,
    lag_response_plan,
)
from attribution.model import F64, I64


class LagSearch:
    """An interruptible ``fit_lag_response``; ``step(n)`` until it returns the result."""

    def __init__(self, busy: ActivityFn, t_ns: I64, y: F64, window_ms: float) -> None:
        self._busy, self._t, self._y, self._w = busy, t_ns, y, window_ms
        self._plan = lag_response_plan()
        self._todo = next(self._plan)
        self._done: list[float] = []
        self.evaluations = 0
        self.result: tuple[float, float] | None = (
            None if len(t_ns) >= MIN_LAG_READINGS else DEFAULT_LAG)

    def step(self, units: float = math.inf) -> tuple[float, float] | None:
        """Evaluate grid points worth up to ``units`` (a τ = 0 point costs 1, a τ > 0 point
        ``TAU_POINTS``, as many activity matrices; at least one point per call; a count, not
        a time, so the result never depends on machine load); (lag, τ) once done.  The points
        a call affords within a grid stage are evaluated in one
        :func:`timebase.iter_window_fractions` call (bit-identical to one call each, cheaper:
        one busy-function query for all their window edges)."""
        left = units
        while self.result is None and left > 0:
            first = j = len(self._done)
            while j < len(self._todo) and left > 0:
                left -= TAU_POINTS if self._todo[j][1] > 0 else 1
                j += 1
            specs = self._todo[first:j]
            self.evaluations += len(specs)
            self._done += [regress.quick_rss(x, self._y) for x in iter_window_fractions(
                self._busy, self._t, self._w, specs)]
            if len(self._done) == len(self._todo):  # the stage is complete: the next one
                try:
                    self._todo, self._done = self._plan.send(self._done), []
                except StopIteration as done:
                    self.result = done.value
        return self.result
