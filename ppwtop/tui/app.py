"""The ppwtop Textual app: polls a :class:`~ppwtop.tui.feed.SnapshotFeed` from a worker
thread at 10 Hz and renders the Snapshots it delivers (live, detail and compare screens).

The worker posts one :class:`SnapshotReady` message at a time (the next poll waits until the
UI has rendered the previous one), so a slow screen never piles up snapshots and the UI never
blocks on the feed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import ClassVar

import orjson
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen

from attribution.snapshot import KernelRow, Snapshot
from ppwtop.tui.compare import CompareScreen
from ppwtop.tui.detail import DetailScreen
from ppwtop.tui.feed import PowerTrace, SnapshotFeed
from ppwtop.tui.live import SORT_KEYS, LiveScreen

POLL_PERIOD_S = 0.1


class SnapshotReady(Message):
    """A new snapshot (or a connection change) from the feed thread."""

    def __init__(self, snapshot: Snapshot | None, power: PowerTrace, connected: bool,
                 error: str | None = None) -> None:
        super().__init__()
        self.error = error
        self.snapshot = snapshot
        self.power = power
        self.connected = connected


def export_snapshot(snap: Snapshot, directory: Path) -> Path:
    """Write ``snap`` as ``ppwtop-snapshot-<time>.json`` in ``directory``; returns the path."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = directory / f"ppwtop-snapshot-{stamp}.json"
    n = 1
    while path.exists():
        n += 1
        path = directory / f"ppwtop-snapshot-{stamp}-{n}.json"
    path.write_bytes(orjson.dumps(snap.to_dict(), option=orjson.OPT_INDENT_2
                                  | orjson.OPT_SERIALIZE_NUMPY))
    return path


class PpwtopApp(App[None]):
    TITLE = "ppwtop"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("space", "pause", "pause"),
        Binding("s", "cycle_sort", "sort"),
        Binding("slash", "filter", "filter"),
        Binding("e", "export", "export"),
        Binding("b", "baseline", "baseline"),
        Binding("c", "compare", "compare"),
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
        self.ticks = 0
        self._stop = threading.Event()
        self._rendered = threading.Event()
        self._rendered.set()
        self.live = LiveScreen()

    # ------------------------------------------------------------------ feed thread

    def on_mount(self) -> None:
        self.push_screen(self.live)
        self._thread = threading.Thread(target=self._poll, name="ppwtop-feed", daemon=True)
        self._thread.start()
        if self.start_compare:
            self.call_after_refresh(self.action_compare)

    def on_unmount(self) -> None:
        self._stop.set()

    def _poll(self) -> None:
        was_connected = True
        last_power_t = None
        while not self._stop.is_set():
            t0 = time.monotonic()
            if self._rendered.is_set() and not self.paused:
                error = None
                try:
                    snap = self.feed.next_snapshot()
                    connected = bool(self.feed.connected)
                    power = self.feed.power_trace()
                except Exception as e:  # a feed failure is a disconnect, said once
                    snap, connected, power = None, False, self.live._power
                    error = f"feed error: {e}" if was_connected else None
                power_t = int(power[0][-1]) if len(power[0]) else None
                if snap is not None or connected != was_connected or power_t != last_power_t:
                    was_connected = connected
                    last_power_t = power_t
                    self._rendered.clear()
                    self.post_message(SnapshotReady(snap, power, connected, error))
            self._stop.wait(max(0.0, POLL_PERIOD_S - (time.monotonic() - t0)))

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        try:
            if message.snapshot is not None:
                self.snapshot = message.snapshot
                self.ticks += 1
            self.connected = message.connected
            if message.error:
                self.notify(message.error, severity="error", markup=False, timeout=8)
            self.live.show_snapshot(message.snapshot, message.power)
        finally:
            self._rendered.set()

    # ------------------------------------------------------------------ actions

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.live.refresh_view()

    def action_cycle_sort(self) -> None:
        i = SORT_KEYS.index(self.sort_key)
        self.sort_key = SORT_KEYS[(i + 1) % len(SORT_KEYS)]
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
