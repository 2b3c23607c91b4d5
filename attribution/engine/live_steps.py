"""The live engine's step statistics kept up to date as steps are appended and expire.

Owns :class:`StepIndex`: beside the step ring (``live_ring.StepRing``) it keeps the steps'
latencies sorted and the contract's per-step latency and item lists as Python floats, so a
snapshot reads the latency quantiles by index and builds the two tuples by a pointer copy
instead of a quantile pass and a ``tolist`` over every step of the horizon each tick (the
per-step energy follows the fit and is still computed every tick).  The statistics are
:func:`attribution.steps.step_times`'s, to the bit (tested against it after appends and
expiries); its cost per tick is that of the steps appended or expired plus one pointer copy.
"""

from __future__ import annotations

import numpy as np

from attribution.model import F64
from attribution.quantiles import sorted_percentiles
from attribution.snapshot import Quantiles
from attribution.steps import StepTimes


class StepIndex:
    """Latencies (sorted, and in ring order as floats) and items (NaN as 0) of the ring's
    steps, oldest first; ``append`` and ``expire`` mirror the ring's."""

    def __init__(self) -> None:
        self._lat: list[float] = []
        self._items: list[float] = []
        self._head = 0
        self._sorted: F64 = np.empty(0, np.float64)

    def __len__(self) -> int:
        return len(self._lat) - self._head

    def append(self, dur_s: F64, items: F64) -> None:
        lat_ms = dur_s * 1e3
        self._lat += lat_ms.tolist()
        self._items += np.where(np.isfinite(items), items, 0.0).tolist()
        new = np.sort(lat_ms)
        self._sorted = np.insert(self._sorted, np.searchsorted(self._sorted, new), new)

    def expire(self, k: int) -> None:
        """Drop the ``k`` oldest steps."""
        if k <= 0:
            return
        old = np.sort(np.array(self._lat[self._head:self._head + k], np.float64))
        # equal latencies: the j-th copy of a value goes to the j-th equal slot
        pos = (np.searchsorted(self._sorted, old)
               + np.arange(k) - np.searchsorted(old, old))
        self._sorted = np.delete(self._sorted, pos)
        self._head += k
        if self._head > len(self._lat) // 2:
            del self._lat[:self._head], self._items[:self._head]
            self._head = 0

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
            units_ok_sum=np.float64(0.0), step_latency_ms=tuple(self._lat[self._head:]),
            step_items=tuple(self._items[self._head:]) if any_items else (),
            sla_ms=None, source=source)
