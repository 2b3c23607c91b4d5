"""The live engine's step statistics kept up to date as steps are appended and expire.

Owns :class:`StepIndex`: beside the step ring (``live_ring.StepRing``) it keeps the steps'
latencies sorted, so a snapshot reads the latency quantiles by index instead of a quantile
pass over every step of the horizon each tick; the contract's per-step latency and item
series are handed out as :class:`~attribution.snapshot.FloatSeries` of the ring's columns
(no Python float per step per tick).  The statistics are :func:`attribution.steps.step_times`'s,
to the bit (tested against it after appends and expiries); its cost per tick is that of the
steps appended or expired plus a copy of two columns (the per-step energy follows the fit
and is computed every tick).
"""

from __future__ import annotations

import numpy as np

from attribution.model import F64
from attribution.quantiles import sorted_percentiles
from attribution.snapshot import FloatSeries, Quantiles
from attribution.steps import StepTimes


class StepIndex:
    """The ring's step latencies, sorted; ``append`` and ``expire`` mirror the ring's."""

    def __init__(self) -> None:
        self._sorted: F64 = np.empty(0, np.float64)

    def __len__(self) -> int:
        return len(self._sorted)

    def append(self, dur_s: F64) -> None:
        new = np.sort(dur_s * 1e3)
        self._sorted = np.insert(self._sorted, np.searchsorted(self._sorted, new), new)

    def expire(self, dur_s: F64) -> None:
        """Drop the steps of durations ``dur_s`` (the oldest ones, leaving the ring)."""
        k = len(dur_s)
        if k == 0:
            return
        old = np.sort(dur_s * 1e3)
        # equal latencies: the j-th copy of a value goes to the j-th equal slot
        pos = (np.searchsorted(self._sorted, old)
               + np.arange(k) - np.searchsorted(old, old))
        self._sorted = np.delete(self._sorted, pos)

    def times(self, dur_s: F64, items: F64, source: str) -> StepTimes:
        """:func:`attribution.steps.step_times` of the ring's steps (``dur_s``, ``items``: the
        ring's columns, which this index mirrors), without an SLA."""
        lat_ms = dur_s * 1e3
        has = np.isfinite(items)
        any_items = bool(has.any())
        p = sorted_percentiles(self._sorted)
        return StepTimes(
            lat_ms=lat_ms,
            latency_ms=Quantiles(float(np.mean(lat_ms)), float(p[0]), float(p[1]), float(p[2])),
            has=has, any_items=any_items, items_sum=np.float64(items[has].sum()), ok=None,
            units_ok_sum=np.float64(0.0), step_latency_ms=FloatSeries(lat_ms),
            step_items=FloatSeries(np.where(has, items, 0.0)) if any_items else (),
            sla_ms=None, source=source)
