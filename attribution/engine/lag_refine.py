"""Sub-grid refinement of the fitted sensor lag, its uncertainty, and a lag at the search's edge.

Owns :func:`refine_lag` (and :func:`refine_grid_lag`, the lag search's refinement both
engines run), :func:`lag_profile_ms` / :func:`slack_from_profile` (the lag's measured
uncertainty, and the lag term of the intervals it gives), both read off the residual as a
function of the lag near its minimum, and :func:`lag_reach_ms` (how far the residual itself
stays within that uncertainty's bound, where it is no parabola).  The lag search
(``timebase``) steps 0.25 ms, yet a short class next to busy/idle edges moves by tens of per
cent of its energy per 0.25 ms: on fixed_mix/a100 (seed 7) the pinned HtoD copy was −58 % at
the grid's best lag and −1 % at the residual's minimum 0.1 ms away, and the short kernels it
trades energy with +6…+25 % against +1…+12 %.  Between grid points the residual is smooth and
close to a parabola, so its vertex through the best point and its two neighbours finds the
minimum; a second pass at half the step refines it; its curvature there bounds the lag.  The
residual is the caller's (the same ridge fit the grid search scores with).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from attribution.engine.timebase import LAG_COARSE_MS, LAG_FINE_MS, LAG_GRID_MS
from attribution.model import F64, B

MAX_WALK = 4
"""Steps the search may walk when a neighbour of the starting lag scores lower."""
RESOLUTION_DECIMALS = 3
"""The refined lag is rounded to 10⁻³ ms."""
LAG_SLACK_MS = 0.5
"""Least lag uncertainty folded into the intervals (timestamp skew, board response shape);
:func:`slack_from_profile` widens it where the residual measures more."""



Scores = Callable[[Sequence[float]], list[float]]
"""The residual at several lags at once (one pass over the busy functions for all of them)."""


def _one_by_one(score: Callable[[float], float]) -> Scores:
    return lambda lags: [score(d) for d in lags]


def refine_lag(score: Callable[[float], float], lag_ms: float, step_ms: float, *,
               passes: int = 2, bounds_ms: tuple[float, float] = (-math.inf, math.inf),
               scores: Scores | None = None) -> float:
    """The lag near ``lag_ms`` minimising ``score`` (a residual as a function of the lag, ms):
    walk to the lowest of each point and its ±``step_ms`` neighbours (at most ``MAX_WALK``
    steps), then take the vertex of the parabola through the three, clipped to ±step/2;
    ``passes`` times, halving the step each time.  The result stays inside ``bounds_ms`` (the
    lag search's range: a best lag on its edge is not a minimum to refine) and is rounded to
    1 µs.  ``scores``: ``score`` at several lags in one call (the same values), used for the
    points each pass asks for together."""
    many = scores if scores is not None else _one_by_one(score)
    lo, hi = bounds_ms
    if not lo < lag_ms < hi:
        return lag_ms
    h = step_ms
    best = lag_ms
    r0, rm, rp = many([best, best - h, best + h])
    for i in range(passes):
        if i:
            rm, rp = many([best - h, best + h])
        for _ in range(MAX_WALK):
            if rm < r0 and rm <= rp:
                best, rp, r0 = best - h, r0, rm
                rm = score(best - h)
            elif rp < r0:
                best, rm, r0 = best + h, r0, rp
                rp = score(best + h)
            else:
                break
        curv = rm - 2.0 * r0 + rp
        if curv > 0.0:
            off = 0.5 * h * (rm - rp) / curv
            best += max(-0.5 * h, min(0.5 * h, off))
            if i < passes - 1:  # the next pass's centre (after the last, nothing reads it)
                r0 = score(best)
        h *= 0.5
    # to 1 µs: finer is below any clock's meaning, and equivalent residuals that differ in
    # the last bits (another busy-time implementation) then give the same lag
    return round(min(max(best, lo), hi), RESOLUTION_DECIMALS)


def refine_grid_lag(scores: Scores, lag_ms: float) -> float:
    """The lag search's best (``timebase``'s ``LAG_FINE_MS`` grid inside ``LAG_GRID_MS``)
    refined between its points by :func:`refine_lag`; ``scores``: the residual at several lags
    in one call.  Both engines' lag: the batch engine's fit and the live engine's refit."""
    return refine_lag(lambda d: scores([d])[0], lag_ms, LAG_FINE_MS, bounds_ms=LAG_GRID_MS,
                      scores=scores)


CHI2_90_1 = 2.706
"""The χ² (1 degree of freedom) 90 % point: a residual rise of this many σ² bounds the lag."""


def slack_lags(lag_ms: float) -> list[float]:
    """The lags :func:`lag_profile_ms` reads the residual at, besides ``lag_ms`` itself."""
    return [lag_ms - LAG_FINE_MS, lag_ms + LAG_FINE_MS]


def residual_rise(r_0: float, *, n_readings: int, n_params: int, block: float) -> float:
    """The residual rise that bounds the lag at 90 %: ``CHI2_90_1`` σ², σ² from the residual
    ``r_0`` over ``n_readings / block`` effective readings (residuals within a bootstrap block
    move together); inf where the readings leave no degree of freedom."""
    if n_readings <= n_params or not math.isfinite(r_0):
        return math.inf
    return CHI2_90_1 * (r_0 / (n_readings - n_params) * block)


def lag_profile_ms(score: Callable[[float], float], lag_ms: float, *, n_readings: int,
                   n_params: int, block: int, at_lag: float | None = None,
                   scores: Scores | None = None) -> float:
    """The lag's 90 % profile half-width from the residual's curvature at the fitted lag
    (``score(d)`` = the residual sum of squares at lag d, ms): where the parabola through
    it rises by :func:`residual_rise`; inf where the readings resolve no minimum.  With the
    sensor's own timestamps it stays far below 0.5 ms; poll-stamped readings (nvidia-smi
    logs) flatten the residual and widen it (docs/attribution.md).  ``at_lag``:
    ``score(lag_ms)`` when the caller has it already; ``scores``: as :func:`refine_lag`'s."""
    h = LAG_FINE_MS
    r_0 = score(lag_ms) if at_lag is None else at_lag
    r_m, r_p = (scores if scores is not None else _one_by_one(score))(slack_lags(lag_ms))
    curv = r_m - 2.0 * r_0 + r_p
    if not (curv > 0.0 and n_readings > n_params and np.isfinite(curv)):
        return math.inf
    rise = residual_rise(r_0, n_readings=n_readings, n_params=n_params, block=block)
    return h * float(np.sqrt(2.0 * rise / curv))


def slack_from_profile(profile_ms: float) -> float:
    """The lag term of the intervals: the profile half-width (:func:`lag_profile_ms`), never
    below ``LAG_SLACK_MS`` (timestamp skew, the board's response shape) nor above
    ``LAG_COARSE_MS`` (the lag search's coarse step: a residual flatter than that --
    seconds-long kernels -- says the readings hardly depend on the lag, and so hardly do the
    estimates; unbounded, the parabola put real square-wave runs' lag at ± 10⁷ ms)."""
    return min(LAG_COARSE_MS, max(LAG_SLACK_MS, profile_ms))


WALK_MS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
"""Offsets from the fitted lag at which :func:`lag_reach_ms` reads the residual, each way."""


def seen_rise(resid_w: F64, seen: B, *, n_params: int, block: int) -> float:
    """:func:`residual_rise` over the readings whose windows see work (``seen``) alone: their
    residual variance, and as many of them per block as share a block.  Only those readings
    move with the lag, and where most windows are idle (a 1–2 s step with a few tens of ms of
    work) the idle readings' near-zero residuals set σ² far below theirs and the bound too
    tight: phase_locked_step/a100 at a 2 s step (seed 0) kept a GEMM resolvable at −12 % at a
    notch 13 % below a plateau the all-readings bound (9.8 %) called significant, with ~15
    of 279 readings seeing any work.  Where every window sees work (in whole blocks) it is
    :func:`residual_rise` itself; inf where fewer readings see work than the fit has
    parameters."""
    k = int(np.count_nonzero(seen))
    if k <= n_params:
        return math.inf
    blocks = np.unique(np.flatnonzero(seen) // max(block, 1))
    per_block = k / len(blocks)
    return residual_rise(float(np.sum(resid_w[seen] ** 2)), n_readings=k, n_params=n_params,
                         block=per_block)


SEEN_FRACTION = 1e-9
"""A window whose activity sums to more than this sees work (:func:`lag_rise`)."""


def lag_rise(resid_w: F64, x: F64, *, block: int) -> float:
    """The residual rise that bounds the lag at 90 % for a fit with residuals ``resid_w`` on
    the activity ``x`` (readings × groups): :func:`residual_rise` over every reading, or
    :func:`seen_rise` over those whose windows see work where that is wider (both engines)."""
    n_params = x.shape[1] + 1
    r_0 = float(resid_w @ resid_w)
    return max(residual_rise(r_0, n_readings=len(resid_w), n_params=n_params, block=block),
               seen_rise(resid_w, x.sum(axis=1) > SEEN_FRACTION, n_params=n_params,
                         block=block))


def lag_reach_ms(scores: Scores, lag_ms: float, *, r_0: float, rise: float
                 ) -> tuple[float, float]:
    """How far the lag may move below and above ``lag_ms`` with the residual still within
    ``rise`` of ``r_0`` (its value at the lag): the 90 % profile set read directly, where
    :func:`lag_profile_ms`'s parabola reads it off the curvature.  Reads the residual at every
    ``WALK_MS`` offset each way (inside ``LAG_GRID_MS``, all in one call) and takes the
    furthest within the bound, then halves the gap to the next offset once (where it is 1 ms
    or more).  Every offset, not a walk that stops at the first rise: a notch a few tenths
    of a ms wide can sit on a plateau just above the bound.

    The two agree where the residual is a parabola.  Readings locked to a periodic job's
    phase are not: their residual has a sharp notch on a plateau (phase_locked_step/a100 at
    a 1 s step, seed 9: the curvature gave ±1.0 ms, the residual stayed within the bound
    from −10.3 to +0.3 ms, and the GEMM fitted at −30 % was called resolvable)."""
    lo_grid, hi_grid = LAG_GRID_MS
    offs = [(sign, off) for sign in (-1.0, 1.0) for off in WALK_MS
            if lo_grid <= lag_ms + sign * off <= hi_grid]
    got = dict(zip(offs, scores([lag_ms + sign * off for sign, off in offs]), strict=True))
    reach: list[float] = []
    for sign in (-1.0, 1.0):
        mine = [off for s, off in offs if s == sign]
        inside = max((off for off in mine if got[sign, off] <= r_0 + rise), default=0.0)
        beyond = [off for off in mine if off > inside]
        if inside >= 1.0 and beyond:  # halve the gap to the next offset once
            mid = 0.5 * (inside + beyond[0])
            if scores([lag_ms + sign * mid])[0] <= r_0 + rise:
                inside = mid
        reach.append(inside)
    return reach[0], reach[1]


def lag_ends_ms(slack_ms: float, reach_ms: tuple[float, float]) -> tuple[float, float]:
    """How far below and above the fitted lag the interval's two refits sit: the slack
    (:func:`slack_from_profile`; the live engine's ``LAG_SLACK_MS``) or the residual's own
    reach (:func:`lag_reach_ms`), whichever is further, each way."""
    return max(slack_ms, reach_ms[0]), max(slack_ms, reach_ms[1])


EDGE_MS = 0.5
"""A fitted lag (plus its response time) within this of an end of ``LAG_GRID_MS`` sits at
the search's edge (:func:`lag_at_edge`)."""


def lag_at_edge(lag_ms: float, tau_ms: float = 0.0) -> bool:
    """The fitted lag sits at an end of the search (``LAG_GRID_MS``): the true lag may lie
    beyond it, and the split made at the edge is then wrong (found by an audit, 2026-12-05: a
    trace clock 30 ms ahead of the power log fitted −24 ms, and on varied_mix/v100 the GEMM was
    called resolvable at −24 % and the pinned copy at +2 460 %, with no word).  Not applied
    where a consumer board's slow response stage refitted the lag, which moves it past the
    grid on purpose."""
    centre = lag_ms + tau_ms  # the τ = 0 lag the grid searched
    return centre <= LAG_GRID_MS[0] + EDGE_MS or centre >= LAG_GRID_MS[1] - EDGE_MS


def _lag_said(lag_ms: float, tau_ms: float) -> str:
    """The fitted lag as the search saw it: the grid searches lag + the board's response
    time, so a lag of −24 ms with a 4 ms response sits at the −20 ms end (an audit read
    "−24 ms, the edge of −20 to +60 ms" as a contradiction)."""
    if abs(tau_ms) < 0.05:
        return f"{lag_ms:+.1f} ms"
    return f"{lag_ms:+.1f} ms ({lag_ms + tau_ms:+.1f} ms with the board's {tau_ms:.1f} ms response)"


def lag_edge_why(lag_ms: float, tau_ms: float = 0.0) -> str:
    """A flagged class's reason when the lag sits at the search's edge."""
    return (f"the sensor's lag fitted at the edge of its search ({_lag_said(lag_ms, tau_ms)}): "
            "the trace's and the power log's clocks may be tens of ms apart, or the sensor's "
            "delay lies beyond the search")


def lag_edge_warning(device: int, lag_ms: float, tau_ms: float = 0.0) -> str:
    """The device's line when the lag sits at the search's edge."""
    lo, hi = LAG_GRID_MS
    return (f"GPU {device}: the sensor's lag fitted at {_lag_said(lag_ms, tau_ms)}, the edge of "
            f"its search ({lo:+.0f} to {hi:+.0f} ms): the trace's clock and the power log's may "
            "be tens of ms apart (another host's clock, a CUPTI clock not aligned), or this "
            "sensor's delay lies beyond the search; a split at the wrong lag moves energy "
            "between classes, so every class is flagged. Where the clocks may differ, align "
            "them (or record with ppwtop record, which pairs them)")
