"""The ppwtop Textual app: polls a :class:`~ppwtop.tui.feed.SnapshotFeed` from two worker
threads and renders what it delivers (live, detail and compare screens).

``ppwtop-engine`` calls ``feed.next_snapshot()`` (which may take seconds: the engine runs in
it) and leaves the newest snapshot in a one-slot mailbox.  ``ppwtop-tick`` wakes at 10 Hz,
reads ``power_trace()`` and ``connected`` and posts one :class:`SnapshotReady` (with the
mailbox's snapshot, if any) when something changed.  The next tick waits until the UI has
rendered the previous one, so a slow screen never piles up messages, the UI never blocks on
the feed, and a long attribution never stalls the 10 Hz power graph.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen

from attribution.snapshot import KernelRow, Snapshot
from ppwtop.fileio import write_atomic
from ppwtop.snapshot_io import dumps
from ppwtop.tui.compare import CompareScreen
from ppwtop.tui.detail import DetailScreen
from ppwtop.tui.feed import PowerTrace, SnapshotFeed
from ppwtop.tui.live import SORT_KEYS, LiveScreen

POLL_PERIOD_S = 0.1  # the engine thread's wait when the feed has nothing new
TICK_S = 0.02  # the tick thread looks five times per 100 ms sensor period ...
MIN_POST_S = 0.08  # ... and posts at most 12.5 times a second (10 Hz sensor + jitter)


class SnapshotReady(Message):
    """A new snapshot (or a connection change) from the feed threads."""

    def __init__(self, snapshot: Snapshot | None, power: PowerTrace, connected: bool,
                 error: str | None = None) -> None:
        super().__init__()
        self.error = error
        self.snapshot = snapshot
        self.power = power
        self.connected = connected
        self.posted_s = time.monotonic()


def export_snapshot(snap: Snapshot, directory: Path) -> Path:
    """Write ``snap`` as ``ppwtop-snapshot-<time>.json`` in ``directory``; returns the path."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = directory / f"ppwtop-snapshot-{stamp}.json"
    n = 1
    while path.exists():
        n += 1
        path = directory / f"ppwtop-snapshot-{stamp}-{n}.json"
    write_atomic(path, dumps(snap))  # (snapshot_io's form: names that are not UTF-8 too)
    return path


class PpwtopApp(App[None]):
    TITLE = "ppwtop"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),  # as in top
        Binding("question_mark,f1", "show_help_panel", "keys", show=False),
        Binding("space", "pause", "pause"),
        Binding("s", "cycle_sort", "sort"),
        Binding("slash", "filter", "filter"),
        Binding("e", "export", "export"),
        Binding("b", "baseline", "baseline"),
        Binding("c", "compare", "compare"),
        Binding("g", "switch_gpu", "GPU"),
    ]

    def __init__(self, feed: SnapshotFeed, *, export_dir: Path | None = None,
                 baseline: Snapshot | None = None, start_compare: bool = False,
                 names: tuple[str, str] = ("baseline", "current")) -> None:
        super().__init__()
        self.feed = feed
        self.label = feed.label
        self.export_dir = export_dir if export_dir is not None else Path.cwd()
        self.baseline = baseline
        self.start_compare = start_compare
        self.compare_names = names
        self.snapshot: Snapshot | None = None
        self.connected = True
        self.paused = False
        self.sort_key = SORT_KEYS[0]
        self.name_filter = ""
        self.gpu: int | None = None  # None: all GPUs
        self.ticks = 0
        self.renders = 0
        self._stop = threading.Event()
        self._rendered = threading.Event()
        self._rendered.set()
        self.live = LiveScreen()
        self.ended_by: signal.Signals | None = None
        """SIGTERM or SIGHUP, where one ended the app (it exits as on ``q``)."""

    # ------------------------------------------------------------------ feed thread

    def on_mount(self) -> None:
        # SIGTERM (kill, timeout, a scheduler) and SIGHUP (the terminal closed) end the app as
        # 'q' does, so the terminal is restored and a session's recording closed properly
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, self._signalled, sig)
        self.push_screen(self.live)
        self._mailbox: Snapshot | None = None
        self._feed_error: str | None = None
        self._feed_ok = True
        self._lock = threading.Lock()
        self._engine_thread = threading.Thread(target=self._pull_snapshots,
                                               name="ppwtop-engine", daemon=True)
        self._thread = threading.Thread(target=self._tick, name="ppwtop-tick", daemon=True)
        self._engine_thread.start()
        self._thread.start()
        if self.start_compare:
            self.call_after_refresh(self.action_compare)

    def on_unmount(self) -> None:
        self._stop.set()

    def _signalled(self, sig: signal.Signals) -> None:
        self.ended_by = sig
        self.exit()

    def run_for_status(self) -> int:
        """Run the app; what the command returns then: 128 + N where signal N ended it, 2
        where it stopped on an exception (Textual has shown it; never 0)."""
        self.run()
        if self.ended_by is not None:
            return 128 + int(self.ended_by)
        return 2 if self.return_code else 0

    def _pull_snapshots(self) -> None:
        """Engine thread: next_snapshot() into the one-slot mailbox (newest wins)."""
        while not self._stop.is_set():
            with self._lock:
                full = self._mailbox is not None
            if self.paused or full:
                self._stop.wait(POLL_PERIOD_S / 2)
                continue
            try:
                snap = self.feed.next_snapshot()
                ok = True
            except Exception as e:  # a feed failure is a disconnect, said once
                snap, ok = None, False
                with self._lock:
                    if self._feed_ok:
                        self._feed_error = f"feed error: {e}"
            with self._lock:
                self._feed_ok = ok
                if snap is not None:
                    self._mailbox = snap
            if snap is None:
                self._stop.wait(POLL_PERIOD_S)

    def _tick(self) -> None:
        """Tick thread: power trace + connection state + the mailbox, one message at a time,
        posted when something changed (a new power reading: up to 10 Hz)."""
        was_connected = True
        last_power_t = None
        last_post = 0.0
        power: PowerTrace = self.live._power
        while not self._stop.is_set():
            t0 = time.monotonic()
            if self._rendered.is_set() and not self.paused and t0 - last_post >= MIN_POST_S:
                try:
                    power = self.feed.power_trace()
                    connected = bool(self.feed.connected)
                except Exception:
                    connected = False
                with self._lock:
                    snap, self._mailbox = self._mailbox, None
                    connected = connected and self._feed_ok
                    error, self._feed_error = self._feed_error, None
                power_t = int(power[0][-1]) if len(power[0]) else None
                if (snap is not None or connected != was_connected or power_t != last_power_t
                        or error):
                    was_connected = connected
                    last_power_t = power_t
                    last_post = t0
                    self._rendered.clear()
                    self.post_message(SnapshotReady(snap, power, connected, error))
            self._stop.wait(max(0.0, TICK_S - (time.monotonic() - t0)))

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        try:
            if message.snapshot is not None:
                self.snapshot = message.snapshot
                self.ticks += 1
            self.connected = message.connected
            if message.error:
                self.notify(message.error, severity="error", markup=False, timeout=8)
            self.live.show_snapshot(message.snapshot, message.power)
            if message.snapshot is not None and isinstance(self.screen, DetailScreen):
                self.screen.follow(message.snapshot)
        finally:
            self.renders += 1
            self._rendered.set()

    # ------------------------------------------------------------------ actions

    LIVE_ONLY: ClassVar[frozenset[str]] = frozenset({"cycle_sort", "filter", "switch_gpu"})
    """Actions on the live screen's tables: hidden from the footer (and inert) elsewhere."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in self.LIVE_ONLY and self.screen is not self.live)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.live.refresh_view()

    def action_cycle_sort(self) -> None:
        i = SORT_KEYS.index(self.sort_key)
        self.sort_key = SORT_KEYS[(i + 1) % len(SORT_KEYS)]
        self.live.refresh_view()

    def action_switch_gpu(self) -> None:
        """Cycle the GPU shown: all → 0 → 1 → … → all (only with more than one GPU)."""
        from ppwtop.tui.live import gpus_of

        gpus = gpus_of(self.snapshot)
        if len(gpus) < 2:
            self.gpu = None
            self.notify("only one GPU in this snapshot")
        else:
            order: list[int | None] = [None, *gpus]
            i = order.index(self.gpu) if self.gpu in order else 0
            self.gpu = order[(i + 1) % len(order)]
            self.notify("showing all GPUs" if self.gpu is None else f"showing GPU {self.gpu}")
        self.live.refresh_view()

    def action_filter(self) -> None:
        if self.screen is self.live:
            self.live.open_filter()

    def action_export(self) -> None:
        if self.snapshot is None:
            self.notify("nothing to export yet", severity="warning")
            return
        try:
            path = export_snapshot(self.snapshot, self.export_dir)
        except OSError as e:
            self.notify(f"export failed: {e}", severity="error", markup=False)
            return
        self.last_export = path
        self.notify(f"snapshot written to {path}", markup=False)

    def action_baseline(self) -> None:
        if self.snapshot is None:
            self.notify("no snapshot to mark yet", severity="warning")
            return
        self.baseline = self.snapshot
        # the marked snapshot is the current one: the left side's name says when it was taken
        # (it kept the first file's name, e.g. after 'ppwtop compare A B')
        at = self.snapshot.window.end_ns / 1e9
        self.compare_names = (f"{self.label} at {datetime.fromtimestamp(at):%H:%M:%S}",
                              self.compare_names[1])
        self.notify("baseline marked")

    def action_compare(self) -> None:
        if self.baseline is None or self.snapshot is None:
            self.notify("mark a baseline first (b)", severity="warning")
            return
        if isinstance(self.screen, CompareScreen):
            return
        self.push_screen(CompareScreen(self.baseline, self.snapshot, self.compare_names))

    def action_detail(self) -> None:
        if self.screen is not self.live:
            return
        row = self.live.selected_row()
        if row is None:
            self.notify("no row selected", severity="warning")
            return
        self.push_screen(DetailScreen(row, self.snapshot))

    def selected_kernel(self) -> KernelRow | None:
        row = self.live.selected_row()
        return row if isinstance(row, KernelRow) else None

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause / resume", "freeze the display (space)", self.action_pause)
        yield SystemCommand("Cycle sort key", "energy, time, calls, name (s)",
                            self.action_cycle_sort)
        yield SystemCommand("Filter by name", "show kernels whose name contains… (/)",
                            self.action_filter)
        yield SystemCommand("Export snapshot", "write ppwtop-snapshot-<time>.json (e)",
                            self.action_export)
        yield SystemCommand("Mark baseline", "remember the current snapshot (b)",
                            self.action_baseline)
        yield SystemCommand("Compare with baseline", "side by side deltas (c)",
                            self.action_compare)
        yield SystemCommand("Detail of selected row", "one class in full (d / enter)",
                            self.action_detail)
        yield SystemCommand("Switch GPU", "all GPUs, then each GPU in turn (g)",
                            self.action_switch_gpu)
