"""LiveFeed: the live session's SnapshotFeed over slices as they arrive."""

from __future__ import annotations

import itertools

import numpy as np

from attribution.model import Trace
from attribution.sim import simulate
from ppwtop.live.feed import LiveFeed


def _slices(tr: Trace, n: int) -> list[Trace]:
    t0, t1 = tr.gpu_span_ns() or (0, 0)
    edges = np.linspace(t0, t1 + 1, n + 1).astype(np.int64)
    out = []
    for a, b in itertools.pairwise(edges):
        parts = {}
        for k in ("kernels", "copies", "memsets", "apis", "markers"):
            x = getattr(tr, k)
            parts[k] = x.take((x.end_ns >= a) & (x.end_ns < b))
        for k in ("power", "energy", "clocks"):
            x = getattr(tr, k)
            parts[k] = x.take((x.t_ns >= a) & (x.t_ns < b))
        out.append(Trace(strings=tr.strings, **parts))
    return out


def test_live_feed_attributes_the_recent_horizon_and_shows_session_notes() -> None:
    tr = simulate("varied_mix", "a100", seconds=12.0, seed=3).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=5.0, n_boot=20)
    feed.devices = list(tr.devices)
    assert feed.next_snapshot() is None  # nothing yet
    for piece in _slices(tr, 12):
        feed.add(piece)
    feed.notes.append("late attach: missing NVTX ranges")
    snap = feed.snapshot()
    assert snap is not None
    assert snap.warnings[0] == "late attach: missing NVTX ranges"
    # the window is the last 5 s, not the whole run
    assert 4.0 < snap.window.duration_s < 6.0
    # energy so far: the counter from the first to the last reading kept
    t0, t1 = tr.gpu_span_ns() or (0, 0)
    e = tr.energy.sorted_by("t_ns")
    e = e.take((e.t_ns >= t0) & (e.t_ns <= t1))
    want = (int(e.energy_mj[-1]) - int(e.energy_mj[0])) / 1000.0
    assert abs(snap.meta["energy_so_far_j"] - want) < 0.01 * want
    t, w = feed.power_trace()
    assert len(t) > 10 and np.all(np.diff(t) > 0) and np.all(w > 0)
    feed.set_connected(False)
    assert feed.connected is False
