"""Whether a power log's clock is off from the trace's by more than the lag search reaches.

Owns :func:`log_shift`.  The engine fits the sensor's lag over ``timebase.LAG_GRID_MS``
(−20…+60 ms): a power log stamped by another clock (nvidia-smi on another host, a clock
stepped by NTP, a hand-edited CSV) that is seconds off gives readings that do not follow the
trace's activity, and the fit then splits noise — with a 5 s shift the simulator's copies
came out 3.5× their truth and nothing said so.  The check slides the readings against the
trace's total activity (its mean over ``SMOOTH_MS`` before each stamp) over ±``MAX_SHIFT_S``
and compares the best correlation with the best within the lag search's reach.  A workload
that repeats (a training step) correlates as well one period off as at the right shift, so
only a shift that is clearly better than every near one is reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from attribution.model import F64, I64

MAX_SHIFT_S = 30.0
"""How far the readings are slid against the trace, each way."""
STEP_MS = 100.0
"""The slide's step (the activity is smoothed over ``SMOOTH_MS``, so finer adds nothing)."""
SMOOTH_MS = 200.0
"""The activity's averaging window (at least the sensor's): a coarse picture of the load."""
NEAR_S = 0.2
"""Shifts the engine's own lag search covers (−20…+60 ms), with a step's margin."""
MIN_BEST_R = 0.45
"""The best shift must follow the activity at least this well (Pearson r; the simulator's
suite as logged, seeds 7 and 3 at 60 s and seed 11 at 20 s, 216 runs: 0.51-0.99, but for
phase_locked_step on the v100, whose readings do not follow the activity, 0.15-0.25)."""
MIN_GAIN_R = 0.25
"""... and by this much better than the best near shift.  The same 216 runs as logged: 0.00-
0.05 (none told); shifted by 2 to 10 s either way: told on 213 of 216 (not the v100's
phase_locked_step); by 1 s on 64 of 72; by 0.5 s on 1 of 72 (the activity's own
correlation over half a second hides it)."""
MAX_READINGS = 1000
"""Readings used (evenly thinned): the correlation does not need more."""


@dataclasses.dataclass(frozen=True)
class LogShift:
    """The readings' correlation with the trace's activity, as logged and at the best shift."""

    shift_s: float
    """How late the log's stamps run against the trace at the best fit (subtract it from
    them to align; negative: early)."""
    r_best: float
    r_near: float
    """The best correlation within ``NEAR_S`` of the stamps as logged."""

    @property
    def off(self) -> bool:
        """The log's clock is off: the best shift is far and clearly better."""
        return (abs(self.shift_s) > NEAR_S and self.r_best >= MIN_BEST_R
                and self.r_best - self.r_near >= MIN_GAIN_R)


def _corr_rows(a: F64, y: F64) -> F64:
    """Pearson r of ``y`` with each row of ``a`` (0 where a row is constant)."""
    ac = a - a.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    den = np.sqrt((ac * ac).sum(axis=1) * float(yc @ yc))
    num = ac @ yc
    return np.asarray(np.divide(num, den, out=np.zeros_like(num), where=den > 0), np.float64)


def log_shift(busy: Callable[[I64], F64], t_ns: I64, power_w: F64, win: tuple[int, int]
              ) -> LogShift | None:
    """Slide the readings (stamps ``t_ns``, values ``power_w``) against the trace's total
    activity (``busy``: cumulative busy seconds per group at given times, as
    ``activity.BusyFunction``) inside ``win`` ± ``MAX_SHIFT_S``; None where there are too
    few readings or no activity to compare with."""
    reach = int(MAX_SHIFT_S * 1e9)
    keep = (t_ns >= win[0] - reach) & (t_ns <= win[1] + reach) & np.isfinite(power_w)
    t, y = t_ns[keep], power_w[keep]
    if len(t) < 16 or float(np.ptp(y)) <= 0:
        return None
    if len(t) > MAX_READINGS:
        pick = np.linspace(0, len(t) - 1, MAX_READINGS).astype(np.int64)
        t, y = t[pick], y[pick]
    step = int(STEP_MS * 1e6)
    smooth = int(SMOOTH_MS * 1e6)
    # total busy seconds on a grid covering every (stamp − shift) and its smoothing window
    lo = int(t.min()) - reach - smooth - step
    hi = int(t.max()) + reach + step
    grid = lo + np.arange((hi - lo) // step + 2, dtype=np.int64) * step
    b = np.asarray(busy(grid), np.float64)
    cum = b.sum(axis=1) if b.ndim == 2 else b
    if float(np.ptp(cum)) <= 0:
        return None
    shifts = np.arange(-round(MAX_SHIFT_S * 1e3 / STEP_MS), round(MAX_SHIFT_S * 1e3 / STEP_MS)
                       + 1) * step
    # reading i at shift s sees the activity over [t_i − s − smooth, t_i − s]: on the grid
    end = (t[None, :] - shifts[:, None] - lo).astype(np.float64) / step
    k = smooth // step
    i = np.clip(np.rint(end).astype(np.int64), k, len(grid) - 1)
    act = (cum[i] - cum[i - k]) / (smooth * 1e-9)
    r = _corr_rows(act, y)
    near = np.abs(shifts) <= NEAR_S * 1e9
    best = int(np.argmax(r))
    return LogShift(float(shifts[best]) * 1e-9, float(r[best]), float(r[near].max()))


def shift_warning(device: int, s: LogShift) -> str:
    """The snapshot's line for a log whose clock is off (:attr:`LogShift.off`)."""
    return (f"GPU {device}: the power readings follow the trace's activity far better "
            f"{s.shift_s:+.1f} s off (correlation {s.r_best:.2f}, against {s.r_near:.2f} as "
            "logged): the power log's clock looks off from the trace's; the split is not to be "
            "trusted (every class flagged) until the clocks agree")
