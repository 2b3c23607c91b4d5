"""``PanelFeed``: a replay feed whose snapshots carry the live UI's display series.

Wraps a :class:`~ppwtop.demo_feed.TraceFeed` (demo, replay) and adds
``extra["panels"]`` (:mod:`attribution.panels`: GPU-busy band, clocks/temperature/clamp strip,
per-class duration histograms and launches over time) to each snapshot it hands out, from
the same records the snapshot was attributed from.  Everything else is delegated, so the
wrapped feed's engine path is untouched.
"""

from __future__ import annotations

from attribution.panels import with_panels
from attribution.snapshot import Snapshot
from ppwtop.demo_feed import TraceFeed
from ppwtop.tui.feed import PowerTrace


class PanelFeed:
    """A :class:`~ppwtop.tui.feed.SnapshotFeed` over ``inner`` with panel data added."""

    def __init__(self, inner: TraceFeed) -> None:
        self.inner = inner

    def next_snapshot(self) -> Snapshot | None:
        snap = self.inner.next_snapshot()
        if snap is None:
            return None
        w = snap.window
        return with_panels(snap, self.inner.window(w.end_ns, w.end_ns - w.start_ns + 1))

    def power_trace(self) -> PowerTrace:
        return self.inner.power_trace()

    @property
    def connected(self) -> bool:
        return self.inner.connected

    @property
    def label(self) -> str:
        return self.inner.label
