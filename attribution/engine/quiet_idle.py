"""Readings taken while the board was quiet: active idle read off the log, not off the table.

Owns :func:`quiet_idle`.  Where the fit cannot place P_idle (``idle_place.judge_idle`` holds
it), both the fit and the board table's value can be far from what the board drew while
nothing ran.  Found by an audit on the real transient-response run of an RTX 4090: one 6 s
kernel, then 6 s of host stall whose last 3 s read 51.6 W ± 0.3 W on the board's own sensor.
The fit put P_idle at 46 W (its boost tail and P_idle trade on a single falling edge, and the
edge's misfit, 47 W RMS, swamps the standard error), so it was held at the table's 30 W: idle
180 J where the readings integrate to 310 J, the total 9 % under the log's own integral.

A reading is *quiet* when its sensor window (``[t − lag − W, t − lag]``), widened backwards by
``after_s``, holds no kernel, copy or memset: the board's response to the last work has died
away (the data-centre boards' few-ms response: :data:`QUIET_AFTER_S`; the consumer boards'
boost tail and slow stage, which the real RTX 3090/4090 logs show settling within 2–3 s:
:data:`QUIET_AFTER_CONSUMER_S`).  At least :data:`MIN_QUIET` of them, agreeing to
:data:`MAX_QUIET_SPREAD`, read P_idle directly; their median is then what a held P_idle is
held at.  Nothing here changes a fit that places P_idle itself.

Assumption: the board stays in the state it idles in between the run's kernels.  A board that
drops to a lower power state in a long stall (P8 after some seconds on many cards) reads lower
there than between kernels; the held value is then the long stalls' level.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attribution.model import F64, I64

QUIET_AFTER_S = 0.2
"""A data-centre board's response to the last work is gone this long after it (τ ≤ 10 ms)."""
QUIET_AFTER_CONSUMER_S = 3.0
"""A consumer board's boost tail and slow stage are gone this long after the last work
(the real RTX 3090/4090 transient runs settle within 2–3 s)."""
MIN_QUIET = 8
"""Fewer quiet readings than this do not read P_idle (``idle_place.MIN_JUDGED``'s count)."""
MAX_QUIET_SPREAD = 0.1
"""Quiet readings whose interquartile range exceeds this share of their median do not agree
on one idle level (a clock ramping down, another process's work): not used."""


@dataclasses.dataclass(frozen=True, slots=True)
class QuietIdle:
    """The quiet readings' level: median, count, and the 5–95 % range of their values."""

    power_w: float
    n: int
    range_w: tuple[float, float]


def quiet_mask(t_ns: I64, seg_s: I64, seg_e: I64, *, lag_ms: float, window_ms: float,
               after_s: float, spread_ns: I64 | None = None) -> np.ndarray:
    """Each reading's quietness (see the module doc): no segment of work (``seg_s``/``seg_e``:
    sorted, disjoint, as ``attribution.idle.union_segments`` gives) meets its window widened
    back by ``after_s`` (and by its poll spread, ``spread_ns``: an nvidia-smi log's reading was
    published some time inside it)."""
    end = t_ns - np.int64(round(lag_ms * 1e6))
    start = end - np.int64(round(window_ms * 1e6)) - np.int64(round(after_s * 1e9))
    if spread_ns is not None:
        start = start - spread_ns
    if len(seg_s) == 0:
        return np.ones(len(t_ns), bool)
    k = np.searchsorted(seg_s, end, side="left") - 1  # the last segment starting before end
    met = (k >= 0) & (seg_e[np.clip(k, 0, None)] > start)
    return np.asarray(~met, bool)


def quiet_idle(t_ns: I64, power_w: F64, seg_s: I64, seg_e: I64, *, lag_ms: float,
               window_ms: float, after_s: float, spread_ns: I64 | None = None
               ) -> QuietIdle | None:
    """The level the quiet readings agree on, or None (too few, or they disagree)."""
    quiet = power_w[quiet_mask(t_ns, seg_s, seg_e, lag_ms=lag_ms, window_ms=window_ms,
                               after_s=after_s, spread_ns=spread_ns)]
    if len(quiet) < MIN_QUIET:
        return None
    q25, med, q75 = (float(v) for v in np.percentile(quiet, [25.0, 50.0, 75.0]))
    if not med > 0 or (q75 - q25) > MAX_QUIET_SPREAD * med:
        return None
    lo, hi = (float(v) for v in np.percentile(quiet, [5.0, 95.0]))
    return QuietIdle(med, len(quiet), (lo, hi))


def quiet_after_s(consumer: bool) -> float:
    """How long after the last work a reading's window must start to be quiet."""
    return QUIET_AFTER_CONSUMER_S if consumer else QUIET_AFTER_S


def quiet_warning(device: int, fitted_w: float, board_w: float | None, q: QuietIdle) -> str:
    """The device's line when a held P_idle is held at the quiet readings' level."""
    table = "" if board_w is None else f" (the board table's {board_w:.0f} W)"
    return (f"GPU {device}: active idle fitted at {fitted_w:.0f} W, which the readings do not "
            f"pin as a fit; held at {q.power_w:.1f} W, the median of {q.n} readings taken "
            f"with nothing running (their 5–95 % range {q.range_w[0]:.1f}–{q.range_w[1]:.1f} "
            f"W){table}; every class flagged, as the split still rests on a held value")
