"""Pilot tests of the TUI on hand-built snapshots (StaticFeed and a scripted fake feed)."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from textual.coordinate import Coordinate
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Sparkline, Static
from textual.widgets.data_table import RowKey

from attribution.snapshot import (
    CopyRow,
    GpuInfo,
    IdleRow,
    Inefficiency,
    KernelRow,
    Quantiles,
    SensorInfo,
    Snapshot,
    Steps,
    Totals,
    Window,
)
from ppwtop.tui.app import PpwtopApp
from ppwtop.tui.compare import CompareScreen, deltas
from ppwtop.tui.detail import DetailScreen
from ppwtop.tui.feed import PowerTrace, SnapshotFeed, StaticFeed
from ppwtop.tui.widgets import NOT_RESOLVABLE

SIZE = (120, 40)


def kernel(name: str, energy_j: float, time_s: float, calls: int,
           resolvable: bool = True) -> KernelRow:
    return KernelRow(name=name, gpu=0, calls=calls, time_s=time_s, energy_j=energy_j,
                     dynamic_energy_j=energy_j * 0.6,
                     dynamic_energy_ci_j=(energy_j * 0.5, energy_j * 0.7),
                     avg_power_w=energy_j / time_s, resolvable=resolvable, precision="bf16",
                     why="" if resolvable else "fixed mix with gemm_b")


def make_snapshot(kernels: dict[str, tuple[float, float, int]] | None = None,
                  steps: bool = True, idle_j: float = 40.0) -> Snapshot:
    kernels = kernels if kernels is not None else {
        "gemm_bf16_big": (300.0, 0.5, 100),
        "layernorm_fwd": (50.0, 0.4, 900),
        "softmax_tiny": (20.0, 0.1, 5000),
    }
    krows = tuple(kernel(n, e, t, c, resolvable=(n != "softmax_tiny"))
                  for n, (e, t, c) in kernels.items())
    copies = (CopyRow(kind="HtoD", memory="pageable", gpu=0, calls=10, bytes=2_000_000_000,
                      time_s=0.2, energy_j=15.0, dynamic_energy_j=5.0),)
    idle = (IdleRow(cause="host_stall", gpu=0, time_s=0.4, energy_j=idle_j, count=12),
            IdleRow(cause="launch_gap", gpu=0, time_s=0.1, energy_j=idle_j / 4, count=300))
    e_total = sum(k.energy_j for k in krows) + 15.0 + idle_j * 1.25
    st = None
    if steps:
        st = Steps(count=20, energy_j=Quantiles(mean=e_total / 20, p50=1.0, p95=2.0, p99=3.0),
                   latency_ms=Quantiles(mean=50.0, p50=48.0, p95=61.0, p99=77.0),
                   items_per_j=None)
    ineff = (Inefficiency(rank=1, mechanism="idle.host_stall", energy_j=idle_j, share=0.1,
                          evidence="12 stalls", fix="overlap data loading", owner="data team",
                          validation="rerun"),)
    return Snapshot(
        gpus=(GpuInfo(0, "NVIDIA H100 80GB HBM3", "h100",
                      SensorInfo("instant", 100.0, 25.0, 1.5)),),
        window=Window(0, 2_000_000_000),
        totals=Totals(energy_j=e_total, kernel_energy_j=sum(k.energy_j for k in krows),
                      copy_energy_j=15.0, idle_energy_j=idle_j * 1.25, active_idle_w=70.0,
                      measured_energy_j=e_total * 0.99, closure_error=0.0101),
        kernels=krows, copies=copies, idle=idle, steps=st, inefficiencies=ineff,
    )


class FakeFeed:
    """A feed the test scripts: snapshots queued with push(), connection switchable."""

    def __init__(self) -> None:
        self.queue: deque[Snapshot] = deque()
        self.is_connected = True
        self.calls = 0

    def push(self, s: Snapshot) -> None:
        self.queue.append(s)

    def next_snapshot(self) -> Snapshot | None:
        self.calls += 1
        return self.queue.popleft() if self.queue else None

    def power_trace(self) -> PowerTrace:
        t = np.arange(50, dtype=np.int64) * 100_000_000
        return t, 200.0 + 50.0 * np.sin(t / 1e9)

    @property
    def connected(self) -> bool:
        return self.is_connected

    @property
    def label(self) -> str:
        return "fake"


async def wait_for(pilot: Pilot[Any], cond: Callable[[], object], timeout_s: float = 3.0
                   ) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError("condition not reached")
        await pilot.pause(0.05)


def _key(key: RowKey) -> str:
    """A row key's value: every row of these tables is added with one."""
    assert key.value is not None
    return key.value


def kernel_order(app: PpwtopApp) -> list[str]:
    t = app.live.query_one("#kernels", DataTable)
    return [_key(t.coordinate_to_cell_key(Coordinate(i, 0)).row_key).split(":", 2)[2]
            for i in range(t.row_count)]


def header(app: PpwtopApp) -> str:
    return str(app.live.query_one("#header", Static).render())


def test_feeds_satisfy_protocol() -> None:
    assert isinstance(StaticFeed(make_snapshot()), SnapshotFeed)
    assert isinstance(FakeFeed(), SnapshotFeed)
    f = StaticFeed(make_snapshot())
    assert f.next_snapshot() is not None and f.next_snapshot() is None


async def test_show_renders_ranked_kernels_and_header() -> None:
    app = PpwtopApp(StaticFeed(make_snapshot(), label="snap.json"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        assert kernel_order(app) == ["gemm_bf16_big", "layernorm_fwd", "softmax_tiny"]
        h = header(app)
        assert "snap.json" in h and "H100" in h and "instant" in h
        assert "J/step" in h and "p95 61" in h and "p99 77" in h and "closure +1.0%" in h
        t = app.live.query_one("#kernels", DataTable)
        assert t.get_cell("k:0:softmax_tiny", "ci").text == NOT_RESOLVABLE
        assert t.get_cell("k:0:gemm_bf16_big", "ci").text == "[150, 210]"  # 0.5/0.7 x 300 J
        other = app.live.query_one("#other", DataTable)
        assert [other.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value
                for i in range(3)] == [
            "i:0:host_stall", "c:0:HtoD/pageable", "i:0:launch_gap"]
        ineff = str(app.live.query_one("#ineff", Static).render())
        assert "idle.host_stall" in ineff and "overlap data loading" in ineff
        assert "data team" in ineff


async def test_sort_cycles_energy_time_calls_name() -> None:
    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("s")
        assert app.sort_key == "time"
        assert kernel_order(app) == ["gemm_bf16_big", "layernorm_fwd", "softmax_tiny"]
        await pilot.press("s")
        assert app.sort_key == "calls"
        assert kernel_order(app) == ["softmax_tiny", "layernorm_fwd", "gemm_bf16_big"]
        await pilot.press("s")
        assert app.sort_key == "name"
        assert kernel_order(app) == ["gemm_bf16_big", "layernorm_fwd", "softmax_tiny"]
        await pilot.press("s")
        assert app.sort_key == "energy"


async def test_a_snapshot_without_power_sorts_by_time_under_the_energy_key() -> None:
    """Every energy 0 (a trace attributed with no power log): "sort: energy" put the rows in
    name order; it sorts by time then, and the title says why."""
    s = make_snapshot({"a_short": (0.0, 0.1, 10), "b_long": (0.0, 0.9, 10),
                       "c_mid": (0.0, 0.4, 10)})
    none = (dataclasses.replace(s.gpus[0], sensor=SensorInfo("none", 0.0, 0.0, 0.0)),)
    s = dataclasses.replace(s, gpus=none, totals=dataclasses.replace(s.totals, energy_j=0.0))
    app = PpwtopApp(StaticFeed(s))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert app.sort_key == "energy"
        assert kernel_order(app) == ["b_long", "c_mid", "a_short"]
        title = str(app.live.query_one("#kernels", DataTable).border_title)
        assert "sort: time (no power readings)" in title


async def test_filter_by_name_then_clear() -> None:
    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("slash")
        assert app.live.query_one("#filter", Input).has_focus
        await pilot.press("n", "o", "r", "m")
        assert kernel_order(app) == ["layernorm_fwd"]
        await pilot.press("enter")
        assert kernel_order(app) == ["layernorm_fwd"]
        assert "filter: norm" in str(app.live.query_one("#kernels", DataTable).border_title)
        await pilot.press("escape")
        assert len(kernel_order(app)) == 3


async def test_export_writes_valid_snapshot(tmp_path: Path) -> None:
    snap = make_snapshot()
    app = PpwtopApp(StaticFeed(snap), export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("e")
        await pilot.pause()
    files = list(tmp_path.glob("ppwtop-snapshot-*.json"))
    assert len(files) == 1
    back = Snapshot.from_dict(orjson.loads(files[0].read_bytes()))
    assert back.kernels == snap.kernels and back.totals == snap.totals


async def test_pause_stops_taking_snapshots() -> None:
    feed = FakeFeed()
    feed.push(make_snapshot())
    app = PpwtopApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ticks == 1)
        await pilot.press("space")
        assert app.paused and "paused" in header(app)
        feed.push(make_snapshot(idle_j=99.0))
        await pilot.pause(0.4)
        assert app.ticks == 1 and len(feed.queue) == 1
        await pilot.press("space")
        await wait_for(pilot, lambda: app.ticks == 2)
        assert app.snapshot is not None and app.snapshot.idle[0].energy_j == 99.0


async def test_keyed_updates_keep_cursor_on_same_kernel() -> None:
    feed = FakeFeed()
    feed.push(make_snapshot())
    app = PpwtopApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ticks == 1)
        t = app.live.query_one("#kernels", DataTable)
        await pilot.press("down")  # cursor on layernorm_fwd (row 1)
        assert t.cursor_row == 1
        # layernorm now tops the ranking, a new kernel appears, softmax_tiny disappears
        feed.push(make_snapshot({"gemm_bf16_big": (100.0, 0.5, 100),
                                 "layernorm_fwd": (500.0, 0.4, 900),
                                 "new_kernel": (200.0, 0.3, 10)}))
        await wait_for(pilot, lambda: app.ticks == 2)
        await pilot.pause()
        assert kernel_order(app) == ["layernorm_fwd", "new_kernel", "gemm_bf16_big"]
        assert t.cursor_row == 0
        selected = app.selected_kernel()
        assert selected is not None
        assert selected.name == "layernorm_fwd"
        assert t.get_cell("k:0:layernorm_fwd", "e").text == "500"


async def test_disconnected_keeps_last_data() -> None:
    feed = FakeFeed()
    feed.push(make_snapshot())
    app = PpwtopApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ticks == 1)
        assert "disconnected" not in header(app)
        feed.is_connected = False
        await wait_for(pilot, lambda: not app.connected)
        await pilot.pause()
        assert "target disconnected" in header(app)
        assert len(kernel_order(app)) == 3


async def test_feed_error_is_a_disconnect_not_a_crash() -> None:
    feed = FakeFeed()
    feed.push(make_snapshot())
    app = PpwtopApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ticks == 1)

        def boom() -> Snapshot | None:
            raise OSError("socket closed")

        feed.next_snapshot = boom  # type: ignore[method-assign]
        await wait_for(pilot, lambda: not app.connected)
        await pilot.pause()
        assert "target disconnected" in header(app) and len(kernel_order(app)) == 3
        assert any("socket closed" in str(n.message) for n in app._notifications)


async def test_detail_by_key_and_enter() -> None:
    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("down", "down", "d")
        detail = app.screen  # a local: app.screen itself changes on the next key
        assert isinstance(detail, DetailScreen)
        text = str(detail.query_one("#detail", Static).render())
        assert "softmax_tiny" in text and "not resolvable" in text and "fixed mix" in text
        assert "5000" in text  # calls
        await pilot.press("escape")
        assert app.screen is app.live
        await pilot.press("up", "up", "enter")
        assert isinstance(app.screen, DetailScreen)
        assert "gemm_bf16_big" in str(app.screen.query_one("#detail", Static).render())
        await pilot.press("escape", "tab", "d")  # the copies & idle table, top row
        assert isinstance(app.screen, DetailScreen)
        text = str(app.screen.query_one("#detail", Static).render())
        assert "idle host_stall" in text and "12" in text  # gaps


async def test_baseline_then_compare() -> None:
    feed = FakeFeed()
    feed.push(make_snapshot())
    app = PpwtopApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ticks == 1)
        await pilot.press("c")
        assert app.screen is app.live  # no baseline yet
        await pilot.press("b")
        feed.push(make_snapshot(idle_j=140.0))
        await wait_for(pilot, lambda: app.ticks == 2)
        await pilot.press("c")
        assert isinstance(app.screen, CompareScreen)
        t = app.screen.query_one("#deltas", DataTable)
        first = t.coordinate_to_cell_key(Coordinate(0, 0)).row_key.value
        assert first == "idle.host_stall"  # +100 J, the largest |ΔJ|
        assert "verdict" in str(app.screen.query_one("#verdict", Static).render())
        await pilot.press("escape")
        assert app.screen is app.live


async def test_a_baseline_marked_in_compare_is_named_for_the_snapshot_it_took() -> None:
    """After `ppwtop compare A B`, 'b' marks the current snapshot (B) as the baseline: the
    left side no longer carries A's name (it did, over a Δ of 0 against B itself)."""
    a, b = make_snapshot(), make_snapshot(idle_j=140.0)
    app = PpwtopApp(StaticFeed(b, label="b.json"), baseline=a, names=("a.json", "b.json"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert app.compare_names == ("a.json", "b.json")
        await pilot.press("b")
        assert app.baseline is app.snapshot
        left, right = app.compare_names
        assert left.startswith("b.json at ") and right == "b.json"


async def test_markup_in_names_is_shown_literally() -> None:
    name = "void f<float>[with T=[b]x[/b]]"
    app = PpwtopApp(StaticFeed(make_snapshot({name: (10.0, 0.1, 3)}), label="[red]lbl"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert "[red]lbl" in header(app)
        await pilot.press("d")
        assert isinstance(app.screen, DetailScreen)
        assert name in str(app.screen.query_one("#detail", Static).render())


def test_deltas_sorted_by_abs_delta() -> None:
    a = make_snapshot()
    b = make_snapshot({"gemm_bf16_big": (250.0, 0.5, 100), "layernorm_fwd": (52.0, 0.4, 900),
                       "softmax_tiny": (20.0, 0.1, 5000)})
    unit, rows = deltas(a, b)  # both have 20 steps: per step
    assert unit == "J/step"
    assert rows[0][0] == "kernel:gemm_bf16_big" and rows[0][3] == pytest.approx(-50.0 / 20)
    assert rows[1][0] == "kernel:layernorm_fwd" and rows[1][3] == pytest.approx(2.0 / 20)
    # without steps: per second, so a window twice as long with the same power is no change
    a2 = dataclasses.replace(make_snapshot(steps=False), window=Window(0, 1_000_000_000))
    b2 = make_snapshot(steps=False)  # 2 s window, same joules: half the J/s
    unit, rows = deltas(a2, b2)
    assert unit == "J/s"
    top = rows[0]
    assert top[0] == "kernel:gemm_bf16_big"
    assert top[1] == pytest.approx(300.0) and top[2] == pytest.approx(150.0)


async def test_command_palette_lists_actions() -> None:
    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        titles = {c.title for c in app.get_system_commands(app.screen)}
    for want in ("Pause / resume", "Cycle sort key", "Filter by name", "Export snapshot",
                 "Mark baseline", "Compare with baseline", "Detail of selected row", "Quit"):
        assert want in titles


async def test_quit() -> None:
    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert not app._thread.is_alive() or app._stop.is_set()


def test_show_cli_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ppwtop.cli.main import main

    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "ppwtop.snapshot/1"}')
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppwtop: error:") and "bad.json" in err and "missing key" in err
    assert main(["compare", str(tmp_path / "nope.json"), str(bad)]) == 2
    assert "nope.json" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_tmux_show_at_100x30(tmp_path: Path) -> None:
    snap_path = tmp_path / "s.json"
    snap_path.write_bytes(orjson.dumps(make_snapshot().to_dict()))
    session = f"ppwtop-test-{time.monotonic_ns()}"
    cmd = f"{sys.executable} -m ppwtop show {snap_path}"
    root = str(Path(__file__).resolve().parent.parent)
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "30",
                    "-c", root, cmd], check=True)
    try:
        screen = ""
        for _ in range(60):
            time.sleep(0.25)
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                    capture_output=True, text=True, check=False).stdout
            if "softmax_tiny" in screen:
                break
        assert "gemm_bf16_big" in screen and "layernorm_fwd" in screen
        assert "softmax_tiny" in screen and "host_stall" in screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        for _ in range(40):
            time.sleep(0.1)
            alive = subprocess.run(["tmux", "has-session", "-t", session],
                                   capture_output=True, check=False).returncode == 0
            if not alive:
                break
        assert not alive, "q did not quit"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, check=False)


_ = asyncio  # pytest-asyncio runs the async tests (asyncio_mode=auto)


# ---------------------------------------------------------------------- demo feed and CLI


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def demo_feed_parts() -> tuple[object, FakeClock]:
    from ppwtop.demo_feed import DemoFeed

    clock = FakeClock()
    feed = DemoFeed("demo", "h100", 6.0, horizon_s=2.0, refresh_s=0.5, clock=clock)
    return feed, clock


def test_demo_feed_replays_in_wall_clock_time(demo_feed_parts: tuple[object, FakeClock]) -> None:
    from ppwtop.demo_feed import HEAD_START_S, DemoFeed

    feed, clock = demo_feed_parts
    assert isinstance(feed, DemoFeed) and isinstance(feed, SnapshotFeed)
    s1 = feed.next_snapshot()
    assert s1 is not None
    now1 = feed.start_ns + int(HEAD_START_S * 1e9)
    assert feed.sim_now_ns() == now1
    # only records that completed by "now", within the 2 s horizon
    assert s1.window.end_ns <= now1 and s1.window.start_ns >= now1 - 2_000_000_000
    assert feed.next_snapshot() is None  # same wall time: nothing new
    clock.t += 0.2
    assert feed.next_snapshot() is None  # under refresh_s (0.5 s)
    assert feed.last_cost_s > 0
    step_s = max(1.3, 3.0 * feed.last_cost_s)  # past both refresh_s and 3 x the tick's cost
    clock.t += step_s  # wall time = sim time (speed 1)
    s2 = feed.next_snapshot()
    assert s2 is not None
    now2 = now1 + round((0.2 + step_s) * 1e9)
    assert abs(feed.sim_now_ns() - now2) < 1000
    assert now2 - 2_000_000_000 <= s2.window.start_ns and s2.window.end_ns <= now2
    assert s2.window.end_ns > s1.window.end_ns
    t_ns, p_w = feed.power_trace()
    assert len(t_ns) > 10 and t_ns[-1] <= now2 and bool(np.all(np.diff(t_ns) > 0))
    assert float(p_w.min()) > 30.0 and float(p_w.max()) < 1000.0
    assert feed.connected
    # the energy counter from the start of the run: ~2 s at a plausible H100 board power
    so_far = s1.meta["energy_so_far_j"]
    assert 60.0 * 1.5 < so_far < 700.0 * 2.5
    clock.t += 100.0
    assert not feed.connected and feed.sim_now_ns() == feed.end_ns
    assert "demo" in feed.label


def test_the_tui_commands_refuse_to_draw_into_a_pipe(tmp_path: Path) -> None:
    """Redirected, the TUI used to write escape codes into the file and wait for keys
    forever; now each TUI command says what to use instead, once its arguments are checked."""
    snap = tmp_path / "s.json"
    made = subprocess.run([sys.executable, "-m", "ppwtop", "demo", "--headless", "--seconds",
                           "2", "--export", str(snap)], capture_output=True, check=False)
    assert made.returncode == 0
    for argv, instead in ((["show", str(snap)], "ppwtop report"),
                          (["compare", str(snap), str(snap)], "ppwtop diff"),
                          (["demo", "--seconds", "2"], "--headless"),
                          (["run", "--backend", "sim", "--", sys.executable, "-c", "0"],
                           "--headless --record")):
        r = subprocess.run([sys.executable, "-m", "ppwtop", *argv], capture_output=True,
                           text=True, stdin=subprocess.DEVNULL, timeout=60, check=False)
        assert r.returncode == 2, argv
        assert r.stderr.count("\n") == 1 and "needs a terminal" in r.stderr
        assert instead in r.stderr and r.stdout == ""
    # a bad argument is still told first
    r = subprocess.run([sys.executable, "-m", "ppwtop", "show", str(tmp_path / "none.json")],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
                       check=False)
    assert r.returncode == 2 and "none.json" in r.stderr


def test_demo_headless_exports_snapshot(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from ppwtop.cli.main import main

    out = tmp_path / "last.json"
    assert main(["demo", "--headless", "--seconds", "4", "--export", str(out)]) == 0
    snap = Snapshot.from_dict(orjson.loads(out.read_bytes()))
    parts = (sum(k.energy_j for k in snap.kernels) + sum(c.energy_j for c in snap.copies)
             + sum(i.energy_j for i in snap.idle))
    assert parts == pytest.approx(snap.totals.energy_j, rel=1e-3)
    assert snap.window.duration_s == pytest.approx(4.0, abs=0.6)
    text = capsys.readouterr().out
    top = max(snap.kernels, key=lambda k: k.energy_j)
    assert "top kernels" in text and top.name in text and "idle causes" in text
    assert main(["demo", "--headless", "--scenario", "nope"]) == 2
    assert "unknown scenario" in capsys.readouterr().err
    # the demo simulates its whole run up front: a huge or endless one is refused, not tried
    for bad in ("inf", "1e9", "20000", "nan"):
        assert main(["demo", "--headless", "--seconds", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ppwtop: error:") and "--seconds" in err[0]
    assert main(["demo", "--headless", "--seed", "-3"]) == 2
    assert "--seed" in capsys.readouterr().err


async def test_app_on_demo_feed() -> None:
    from ppwtop.demo_feed import DemoFeed

    clock = FakeClock()
    feed = DemoFeed("demo", "h100", 4.0, horizon_s=2.0, refresh_s=0.0, clock=clock)
    app = PpwtopApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ticks >= 1, timeout_s=10.0)
        assert len(kernel_order(app)) >= 3
        power = app.live.query_one("#power", Sparkline).data
        assert power is not None and len(power) > 5
        assert "J so far" in header(app)
        clock.t += 100.0  # past the end of the run
        await wait_for(pilot, lambda: not app.connected, timeout_s=10.0)
        await pilot.pause()
        assert "target disconnected" in header(app)
        assert len(kernel_order(app)) >= 3


def test_short_name_folds_cpp_noise() -> None:
    from ppwtop.tui.widgets import short_name

    assert short_name("void at::native::(anonymous namespace)::k<float, 4, true, false>"
                      "(float*, int)") == "at::native::k<…>"
    assert short_name("k<int>(int)") == "k<int>"  # short templates are kept
    assert short_name("ampere_sgemm_128x64_tn") == "ampere_sgemm_128x64_tn"
    assert short_name("(weird)") == "(weird)"
    from ppwtop.tui.widgets import short_class

    assert short_class("kernel:void k<float, 4, true, false, 8, 16, 32>(float*)") == "kernel:k<…>"
    assert short_class("copy:HtoD/pinned") == "copy:HtoD/pinned"  # only kernels are C++


def test_svg_live_screen_100x30(snap_compare: Callable[..., bool]) -> None:
    """The live screen at the smallest supported size (SVG in tests/__snapshots__/)."""
    app = PpwtopApp(StaticFeed(make_snapshot(), label="snap.json"))

    async def loaded(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 30), run_before=loaded)


def test_svg_live_screen_80x24(snap_compare: Callable[..., bool]) -> None:
    """The live screen on a classic 80x24 terminal: the narrow, short layout."""
    app = PpwtopApp(StaticFeed(make_snapshot(), label="snap.json"))

    async def loaded(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=loaded)


def test_svg_compare_screen(snap_compare: Callable[..., bool]) -> None:
    a = make_snapshot()
    b = make_snapshot({"gemm_bf16_big": (250.0, 0.5, 100), "layernorm_fwd": (52.0, 0.4, 900),
                       "softmax_tiny": (20.0, 0.1, 5000)}, idle_j=60.0)
    app = PpwtopApp(StaticFeed(b, label="b.json"), baseline=a, start_compare=True,
                    names=("a.json", "b.json"))

    async def loaded(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen))
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 30), run_before=loaded)


async def test_the_kernel_name_column_follows_the_terminal_width() -> None:
    """Shrinking the terminal narrows the name column so the numbers stay on screen; growing
    it widens the name again (it was fixed at the width the screen opened with)."""
    from ppwtop.tui.live import name_width

    def name_col() -> tuple[int, int]:
        t = app.live.query_one("#kernels", DataTable)
        col = next(c for c in t.columns.values() if c.key.value == "name")
        return col.width, t.row_count

    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        assert name_col() == (name_width(160), 3) and name_width(160) > 80
        await pilot.resize_terminal(90, 30)
        await wait_for(pilot, lambda: name_col() == (name_width(90), 3))
        t = app.live.query_one("#kernels", DataTable)
        assert t.virtual_size.width <= 90  # the interval column on screen, no scrolling
        await pilot.resize_terminal(150, 40)
        await wait_for(pilot, lambda: name_col() == (name_width(150), 3))


def test_fit_name_drops_namespaces_only_when_the_column_is_too_narrow() -> None:
    from ppwtop.tui.widgets import fit_name

    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<"
            "c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<"
            "c10::BFloat16>, at::detail::Array<char*, 3>)")
    assert fit_name(name, 60) == "at::native::vectorized_elementwise_kernel<…>"
    assert fit_name(name, 13) == "vectorized_elementwise_kernel<…>"
    # qualifiers inside the template arguments are not the kernel's own namespace
    assert fit_name("k<a::b>", 3) == "k<a::b>"
    assert fit_name("ampere_sgemm_128x64_tn", 5) == "ampere_sgemm_128x64_tn"


PYTORCH_KERNELS = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>(int)",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
    "float>(int, float, c10::BFloat16 const*, float*)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<4> >(at::native::(anonymous namespace)::"
    "TensorListMetadata<4>)",
)


async def test_pytorch_kernels_read_apart_on_an_80_column_screen() -> None:
    """At 80x24 the name column is about 13 cells: every at::native kernel read
    ``at::native::…`` alike until the namespace was dropped for narrow columns."""
    snap = make_snapshot({n: (100.0 - 10 * i, 0.2, 50) for i, n in enumerate(PYTORCH_KERNELS)})
    app = PpwtopApp(StaticFeed(snap))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        t = app.live.query_one("#kernels", DataTable)
        col = next(c for c in t.columns.values() if c.key.value == "name")
        shown = [str(t.get_cell_at(Coordinate(i, 0)).text)[:col.width]
                 for i in range(t.row_count)]
        assert len(shown) == len(PYTORCH_KERNELS)
        assert col.width < 20 and len(set(shown)) == len(shown), shown


async def test_question_mark_opens_the_keys_panel() -> None:
    """'?' (or F1) shows the keys panel, as a user of top expects; it was only reachable
    through the command palette."""
    from textual.widgets import HelpPanel

    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert not app.screen.query(HelpPanel)
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.query(HelpPanel)


async def test_the_live_tables_keys_are_not_offered_on_the_detail_screen() -> None:
    """'s', '/' and 'g' act on the live screen's tables: the detail screen's footer does not
    list them (it did, and they did nothing there); back on the live screen they are."""
    from textual.widgets import Footer

    def footer_keys() -> set[str]:
        return {b.action for active in app.screen.active_bindings.values()
                for b in [active.binding] if b.show} if app.screen.query(Footer) else set()

    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert {"cycle_sort", "filter", "switch_gpu"} <= footer_keys()
        await pilot.press("d")
        assert isinstance(app.screen, DetailScreen)
        assert not {"cycle_sort", "filter", "switch_gpu"} & footer_keys()
        await pilot.press("s")
        assert app.sort_key == "energy"  # inert there
        await pilot.press("escape")
        assert "cycle_sort" in footer_keys()


async def test_a_snapshot_with_repeated_rows_and_non_text_warnings_is_shown() -> None:
    """A file the reader accepts: two kernel rows of one name and GPU, warnings [1, 2, null]
    (before: DuplicateKey and esc() on an int crashed the TUI)."""
    d = make_snapshot().to_dict()
    d["kernels"].append(dict(d["kernels"][0]))
    d["copies"].append(dict(d["copies"][0]))
    d["warnings"] = [1, 2, None]
    snap = Snapshot.from_dict(d)
    assert snap.warnings == ("1", "2")
    app = PpwtopApp(StaticFeed(snap))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert app.live.query_one("#kernels", DataTable).row_count == 4
        assert "⚠ 2: 1" in header(app)
        await pilot.press("j", "j", "j", "d")
        assert isinstance(app.screen, DetailScreen)
    with pytest.raises(ValueError, match="warnings is a int"):
        Snapshot.from_dict({**d, "warnings": 5})


def test_a_tui_that_stops_on_an_exception_does_not_exit_0() -> None:
    class Crashing(PpwtopApp):
        def run(self, *args: Any, **kwargs: Any) -> Any:
            self._return_code = 1  # what Textual sets in _handle_exception
            return None

    assert Crashing(StaticFeed(make_snapshot())).run_for_status() == 2
