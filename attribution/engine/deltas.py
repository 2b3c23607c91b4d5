"""What a live collector delivers between two moments, cut from a whole trace.

Owns :class:`Deltas`: records ordered once by completion (CUPTI hands a record over when it
ends) and readings by their time, so ``between(after_ns, end_ns)`` is two ``searchsorted``
per batch.  The demo and replay feeds, the live-tick benchmark and the live engine's tests
all feed :class:`attribution.engine.live.LiveEngine` through it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attribution.model import Trace

GPU_ITEMS = ("kernels", "copies", "memsets")
"""The batches of work on a GPU (what a launch call puts there, and what
:func:`attribution.engine.activity.items_for_device` reads)."""
ITEMS = (*GPU_ITEMS, "apis", "markers")
SAMPLES = ("power", "energy", "clocks")


class Deltas:
    """``trace`` cut into deltas: records that ended, readings taken, in ``(after, end]``."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._by_time: dict[str, tuple[Any, Any]] = {}
        for name in (*ITEMS, *SAMPLES):
            b = getattr(trace, name)
            key = b.end_ns if name in ITEMS else b.t_ns
            order = np.argsort(key, kind="stable")
            self._by_time[name] = (key[order], b.take(order))

    def between(self, after_ns: int, end_ns: int) -> Trace:
        parts: dict[str, Any] = {}
        for name, (key, batch) in self._by_time.items():
            i0, i1 = np.searchsorted(key, [after_ns, end_ns], side="right")
            parts[name] = batch.take(slice(int(i0), int(i1)))
        return Trace(strings=self.trace.strings, devices=list(self.trace.devices),
                     meta=dict(self.trace.meta), **parts)
