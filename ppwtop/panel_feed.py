"""``PanelFeed``: a replay feed whose snapshots carry the live UI's display series.

Wraps a :class:`~ppwtop.demo_feed.TraceFeed` (demo, replay) or a
:class:`~ppwtop.live.feed.LiveFeed` (run, attach) and adds
``extra["panels"]`` (:mod:`attribution.panels`: GPU-busy band, clocks/temperature/clamp strip,
per-class duration histograms and launches over time) to each snapshot it hands out, from
the same records the snapshot was attributed from (over a live feed's window pieces through
:class:`~attribution.panel_cache.PanelCache`, which summarises each piece once).  With
``sla_ms`` it also fills the steps' SLA fields (``sla_ms``, ``sla_compliance``: the share of
steps within it) from the per-step latencies when the engine left them empty.  Everything
else is delegated, so the wrapped feed's engine path is untouched.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from attribution.model import Trace
from attribution.panel_cache import PanelCache
from attribution.panels import with_panels
from attribution.snapshot import Snapshot
from ppwtop.demo_feed import TraceFeed
from ppwtop.tui.feed import PowerTrace

PANEL_EVERY_S = 2.0
"""The display series are recomputed at most this often (the snapshot numbers every tick)."""


class _Windowed(Protocol):
    def next_snapshot(self) -> Snapshot | None: ...
    def power_trace(self) -> PowerTrace: ...
    @property
    def connected(self) -> bool: ...
    @property
    def label(self) -> str: ...
    def window_between(self, start_ns: int, end_ns: int) -> Trace: ...


class PanelFeed:
    """A :class:`~ppwtop.tui.feed.SnapshotFeed` over ``inner`` with panel data added."""

    def __init__(self, inner: TraceFeed | _Windowed, *, sla_ms: float | None = None,
                 every_s: float = PANEL_EVERY_S, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.inner = inner
        self.sla_ms = sla_ms
        self.every_s = every_s
        self._clock = clock
        self._panels: object = None
        self._panels_at = -math.inf
        self._cache = PanelCache()

    def next_snapshot(self) -> Snapshot | None:
        snap = self.inner.next_snapshot()
        if snap is None:
            return None
        now = self._clock()
        if self._panels is None or now - self._panels_at >= self.every_s:
            w = snap.window
            pieces = getattr(self.inner, "window_pieces", None)
            if pieces is not None:  # a live window: each received piece summarised once
                panels = self._cache.panel_data(pieces(w.start_ns, w.end_ns), w.start_ns,
                                                w.end_ns)
                snap = dataclasses.replace(snap, extra={**snap.extra, "panels": panels})
            else:
                snap = with_panels(snap, self.inner.window_between(w.start_ns, w.end_ns))
            self._panels, self._panels_at = snap.extra.get("panels"), now
        else:  # plot-heavy series refresh at most every ``every_s`` (a full pass each)
            snap = dataclasses.replace(snap, extra={**snap.extra, "panels": self._panels})
        return with_sla(snap, self.sla_ms)

    def power_trace(self) -> PowerTrace:
        return self.inner.power_trace()

    @property
    def connected(self) -> bool:
        return self.inner.connected

    @property
    def label(self) -> str:
        return self.inner.label


def with_sla(snap: Snapshot, sla_ms: float | None) -> Snapshot:
    """``snap`` with its steps judged against ``sla_ms`` (unchanged without steps, without an
    SLA, or when the engine already set one)."""
    st = snap.steps
    if sla_ms is None or st is None or st.sla_ms is not None or not st.step_latency_ms:
        return snap
    lat = np.asarray(st.step_latency_ms, dtype=np.float64)
    steps = dataclasses.replace(st, sla_ms=sla_ms,
                                sla_compliance=float(np.mean(lat <= sla_ms)))
    return dataclasses.replace(snap, steps=steps)
