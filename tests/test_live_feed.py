"""LiveFeed: the live session's SnapshotFeed over slices as they arrive."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from attribution.engine.deltas import Deltas
from attribution.model import Trace
from attribution.sim import SCENARIOS, simulate
from attribution.sim.scenarios import LONG_KERNEL, with_long_kernels
from ppwtop.demo_feed import TraceFeed
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


def test_a_recording_session_shows_its_file_and_dropped_records_in_the_header() -> None:
    """The session's summary (``feed.meta``, as ``Session._write_meta`` sets it) puts the
    recording's path and CUPTI's dropped records in the snapshot's meta, which the TUI's
    header shows as "● rec NAME" and "dropped N" (docs/tui.md)."""
    from ppwtop.tui.live import header_text

    tr = simulate("varied_mix", "a100", seconds=8.0, seed=3).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=5.0, n_boot=20)
    feed.devices = list(tr.devices)
    for piece in _slices(tr, 8):
        feed.add(piece)
    plain = feed.snapshot()
    assert plain is not None and "recording" not in plain.meta
    feed.meta = {"session": {"recording": "/runs/job.ppw"}, "decode": {"dropped_records": 7}}
    snap = feed.snapshot()
    assert snap is not None
    assert snap.meta["recording"] == "/runs/job.ppw" and snap.meta["dropped_records"] == 7
    text = header_text(snap, "target", connected=True, paused=False,
                       power=feed.power_trace(), width=160, gpu=None)
    assert "rec job.ppw" in text and "dropped 7" in text


def test_live_feed_ticks_go_through_the_incremental_engine_like_the_batch_one() -> None:
    """Pieces arrive out of completion order (two streams of buffers interleaved); once the
    live engine has settled, snapshots are its own (engine ``regress/1+live``), cost per tick
    stays small, and the horizon's totals agree with the batch engine on the same window."""
    tr = simulate("varied_mix", "a100", seconds=30.0, seed=5).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=10.0, n_boot=20)
    feed.devices = list(tr.devices)
    pieces = _slices(tr, 60)
    # buffers of two streams reach the session half a slice apart: swap neighbours
    for i in range(0, len(pieces) - 1, 2):
        pieces[i], pieces[i + 1] = pieces[i + 1], pieces[i]
    snaps = []
    for piece in pieces:
        feed.add(piece)
        snaps.append(feed.snapshot())
    live = [s for s in snaps if s is not None and s.meta.get("engine", "").endswith("+live")]
    assert feed.live_ticks >= 20 and len(live) == feed.live_ticks
    assert feed.late_records == 0  # a swap within the settle time is not late
    last = live[-1]
    w0, w1 = last.window.start_ns, last.window.end_ns
    batch = TraceFeed(tr, label="batch", gpu="a100", n_boot=20).snapshot_at(w1, w1 - w0)
    assert batch is not None and not batch.meta.get("engine", "").endswith("+live")
    t_live, t_batch = last.totals, batch.totals
    assert abs(t_live.energy_j - t_batch.energy_j) < 0.03 * t_batch.energy_j
    assert abs(t_live.idle_energy_j - t_batch.idle_energy_j) < 0.1 * t_batch.idle_energy_j
    parts = t_live.kernel_energy_j + t_live.copy_energy_j + t_live.idle_energy_j
    assert abs(parts - t_live.energy_j) <= 1e-3 * t_live.energy_j


def test_panel_feed_over_a_live_feed_adds_the_display_series() -> None:
    """run/attach wrap the session's LiveFeed in PanelFeed like demo/replay do: the busy band
    and per-class histograms come from the records the snapshot covers."""
    from ppwtop.panel_feed import PanelFeed

    tr = simulate("varied_mix", "a100", seconds=10.0, seed=2).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=5.0, n_boot=20,
                    refresh_s=0.0)
    feed.devices = list(tr.devices)
    for piece in _slices(tr, 10):
        feed.add(piece)
    snap = PanelFeed(feed).next_snapshot()
    assert snap is not None
    panels = snap.extra["panels"]
    assert panels, "no display series"
    inside = feed.window_between(snap.window.start_ns, snap.window.end_ns)
    assert 0 < len(inside.kernels) < len(tr.kernels)
    assert int(inside.kernels.end_ns.max()) <= snap.window.end_ns


def test_panels_refresh_at_most_every_few_seconds() -> None:
    """The display series are a full pass over the window: PanelFeed recomputes them only
    every ``every_s`` (the snapshot's own numbers are new every time)."""
    from ppwtop.panel_feed import PanelFeed

    tr = simulate("varied_mix", "a100", seconds=12.0, seed=2).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=5.0, n_boot=20,
                    refresh_s=0.0)
    feed.devices = list(tr.devices)
    now = [100.0]
    panels = PanelFeed(feed, every_s=2.0, clock=lambda: now[0])
    pieces = _slices(tr, 12)
    got = []
    for piece in pieces[:9]:
        feed.add(piece)
        feed._next_due = 0.0  # a snapshot on every poll
        snap = panels.next_snapshot()
        assert snap is not None
        got.append((snap.window.end_ns, id(snap.extra["panels"])))
        now[0] += 0.75
    ends = [e for e, _ in got]
    assert len(set(ends)) == len(ends)  # a new window every tick
    ids = [i for _, i in got]
    # 0.75 s apart with a 2 s period: each panel object serves 3 snapshots (2.25 s > 2 s)
    assert len(set(ids)) == 3 and ids[0] == ids[1] == ids[2] and ids[3] != ids[2]


def test_an_engine_that_falls_behind_restarts_with_bounded_backlog() -> None:
    """More than 10 s unattributed (a record rate the engine cannot follow, or no polls): the
    live view restarts from the newest settled seconds instead of swallowing the backlog, and
    says so; then it settles again."""
    from ppwtop.live import feed as feed_mod

    tr = simulate("varied_mix", "a100", seconds=30.0, seed=6).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=10.0, n_boot=20)
    feed.devices = list(tr.devices)
    pieces = _slices(tr, 30)  # one second each
    for piece in pieces[:4]:
        feed.add(piece)
    feed.feed_engine()
    fed_before = feed._fed_ns
    for piece in pieces[4:17]:  # thirteen seconds arrive with no poll in between
        feed.add(piece)
    feed.feed_engine()
    assert feed.engine_restarts == 1
    assert any("fell behind" in n for n in feed.notes)
    assert feed._fed_ns - fed_before > feed_mod.MAX_BACKLOG_NS
    for piece in pieces[17:]:
        feed.add(piece)
        feed.feed_engine()
    assert feed.engine_restarts == 1
    snap = feed.snapshot()
    assert snap is not None and snap.meta.get("engine", "").endswith("+live")
    assert snap.window.start_ns >= int(pieces[13].kernels.end_ns.min())


def test_piecewise_split_at_the_settle_cut_is_the_split_of_the_whole() -> None:
    from ppwtop.live.feed import _concat, _piece_end_ns, _split_at, _split_pieces

    tr = simulate(scenario="two_streams", gpu="a100", seconds=3.0, seed=2).trace
    deltas = Deltas(tr)
    span = tr.gpu_span_ns()
    assert span is not None
    edges = np.linspace(span[0] - 1, span[1], 13).astype(np.int64)
    pieces = [deltas.between(int(a), int(b)) for a, b in itertools.pairwise(edges)]
    pending = [(_piece_end_ns(p), p) for p in pieces]
    for cut in (int(edges[5]), int(edges[5]) + 12_345, int(span[1]) + 1, int(span[0]) - 5):
        ready, rest = _split_pieces(pending, cut)
        whole_ready, whole_rest = _split_at(_concat(pieces, tr.strings, []), cut)
        got = _concat(ready, tr.strings, [])
        for k in ("kernels", "copies", "apis", "power"):
            want = getattr(whole_ready, k).columns()
            for col, v in getattr(got, k).columns().items():
                assert np.array_equal(v, want[col]), (k, col)
        assert sum(len(q.kernels) for _, q in rest) == len(whole_rest.kernels)
        assert all(end == _piece_end_ns(q) for end, q in rest)
        untouched = [p for p in pieces if _piece_end_ns(p) <= cut]
        assert all(any(r is p for r in ready) for p in untouched)  # passed on, not copied


def test_window_pieces_hold_exactly_the_records_that_ended_inside() -> None:
    tr = simulate("two_streams", "a100", seconds=6.0, seed=4).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=5.0, n_boot=20)
    pieces = _slices(tr, 9)
    for piece in pieces:
        feed.add(piece)
    k = tr.kernels
    span = tr.gpu_span_ns()
    assert span is not None
    for lo, hi in ((span[0] + 1_234_567, span[0] + 3_210_000_000), (span[0], span[1]),
                   (span[0] + 2_000_000_000, span[0] + 2_000_000_001)):
        inside = feed.window_pieces(lo, hi)
        got = np.sort(np.concatenate([p.kernels.end_ns for p in inside]))
        want = np.sort(k.end_ns[(k.end_ns >= lo) & (k.end_ns <= hi)])
        assert np.array_equal(got, want)
        from ppwtop.live.feed import _piece_end_ns, _piece_first_end_ns

        whole = [p for p in pieces if _piece_first_end_ns(p) >= lo and _piece_end_ns(p) <= hi]
        assert all(any(p is q for q in inside) for p in whole)  # handed out as is, no copy
        assert len(feed.window_between(lo, hi).kernels) == len(want)


def test_polls_between_snapshots_leave_no_refit_work_to_the_next_update() -> None:
    """A poll before the next snapshot is due hands the records over and then runs the lag
    refit's work the next update would start with (``LiveEngine.background``): after each
    such poll no refit read is pending and a running search or re-reduction has its step for
    the next update done, so the snapshot's update carries none of it."""
    tr = simulate("varied_mix", "a100", seconds=40.0, seed=3).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=10.0, n_boot=20)
    feed.devices = list(tr.devices)
    stepped = 0
    for piece in _slices(tr, 80):  # 0.5 s of records a poll
        feed.add(piece)
        feed._next_due = float("inf")  # not due: a poll between snapshots
        assert feed.next_snapshot() is None
        eng = feed._engine
        if eng is None:
            continue
        for st in eng.dev.values():
            assert st.fit_due is None
            assert st.search is None or st.ahead
            assert st.redo is None or st.redo.complete or st.ahead
            stepped += st.ahead
    assert eng is not None and eng.refits >= 2 and stepped >= 10


def test_live_feed_knows_its_first_power_reading() -> None:
    """Records can arrive before any reading (the sampler starts late): first_power_ns stays
    0 until a reading comes, is then the oldest reading received, even one that arrives
    after newer ones, and never moves later."""
    tr = simulate("varied_mix", "a100", seconds=6.0, seed=3).trace
    feed = LiveFeed(tr.strings, label="target", gpu="a100", horizon_s=5.0, n_boot=20)
    pieces = _slices(tr, 6)
    no_power = [dataclasses.replace(p, power=p.power.take(np.zeros(len(p.power), bool)))
                for p in pieces[:2]]
    for p in no_power:
        feed.add(p)
    assert feed.latest_ns > 0 and feed.first_power_ns == 0 == feed.latest_power_ns
    feed.add(pieces[3])
    assert feed.first_power_ns == int(pieces[3].power.t_ns.min())
    feed.add(pieces[2])  # older readings, late
    assert feed.first_power_ns == int(pieces[2].power.t_ns.min())
    feed.add(pieces[4])
    assert feed.first_power_ns == int(pieces[2].power.t_ns.min())
    assert feed.latest_power_ns == int(pieces[4].power.t_ns.max())


def test_kernels_longer_than_the_settle_time_reach_the_live_view_whole() -> None:
    """A class of ~1.2 s kernels through the feed, each slice's API records delivered after
    its GPU items (another buffer, a flush later): the engine waits on the launches whose
    kernels have not come, so the live view counts every kernel overlapping its window with
    its whole busy time there (before, a kernel running past the 0.5 s settling delay lost
    its call and its time before its record came)."""
    spec = with_long_kernels(SCENARIOS["varied_mix"])
    tr = simulate("varied_mix", "h100", seconds=30.0, seed=2, spec=spec).trace
    feed = LiveFeed(tr.strings, label="target", gpu="h100", horizon_s=12.0, n_boot=20)
    feed.devices = list(tr.devices)
    last = None
    for piece in _slices(tr, 120):
        items = dataclasses.replace(piece, apis=type(piece.apis).empty())
        feed.add(items)
        feed.add(Trace(strings=tr.strings, apis=piece.apis))
        snap = feed.snapshot()
        if snap is not None and snap.meta.get("engine", "").endswith("+live"):
            last = snap
    assert last is not None
    w0, w1 = last.window.start_ns, last.window.end_ns
    k = tr.kernels
    lid = next(i for i in range(len(tr.strings)) if tr.strings[i] == LONG_KERNEL)
    on = (k.name_id == lid) & (k.start_ns < w1) & (k.end_ns > w0)
    row = next(r for r in last.kernels if r.name == LONG_KERNEL)
    assert row.calls == int(on.sum()) >= 5
    busy = np.minimum(k.end_ns[on], w1) - np.maximum(k.start_ns[on], w0)
    assert row.time_s == pytest.approx(float(busy.sum()) * 1e-9, rel=1e-9)


def test_the_feeds_launch_floor_holds_at_every_kernel_still_running() -> None:
    """``serve``'s windows end no later than ``LiveFeed.launch_floor_ns``: at every moment it
    is at or before the launch call of each kernel that has not come yet, with each piece's
    API records arriving a buffer after its items."""
    spec = with_long_kernels(SCENARIOS["varied_mix"])
    tr = simulate("varied_mix", "h100", seconds=20.0, seed=4, spec=spec).trace
    feed = LiveFeed(tr.strings, label="target", gpu="h100", horizon_s=10.0, n_boot=20)
    feed.devices = list(tr.devices)
    assert feed.launch_floor_ns is None  # tracked from here on
    api = {c: (a, b) for c, a, b in zip(tr.apis.correlation.tolist(), tr.apis.start_ns.tolist(),
                                         tr.apis.end_ns.tolist(), strict=True)}
    k = tr.kernels
    held = 0
    for piece in _slices(tr, 80):
        feed.add(dataclasses.replace(piece, apis=type(piece.apis).empty()))
        feed.add(Trace(strings=tr.strings, apis=piece.apis))
        now = feed.latest_ns
        floor = feed.launch_floor_ns
        # kernels not come yet (ending after now) whose launch call's record has come
        waiting = [api[c][0] for c in k.correlation[(k.end_ns > now)].tolist()
                   if c in api and api[c][1] <= now]
        if waiting:
            assert floor is not None and floor <= min(waiting)
            held += int(floor < now - 1_000_000_000)
    assert held >= 3  # long kernels held it back
