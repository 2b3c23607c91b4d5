"""The live screen's panels: ``attribution.panels`` series, the busy band and clocks strip,
the width-fitted header, the GPU switch, the detail histogram and the compare mechanisms."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from rich.text import Text
from textual.widgets import DataTable, Static

from attribution.model import (
    CLOCK_REASON_SW_POWER_CAP,
    ClockBatch,
    KernelBatch,
    StringTable,
    Trace,
)
from attribution.panels import BUSY_BIN_NS, HIST_MIN_NS, panel_data, with_panels
from attribution.snapshot import GpuInfo, IdleRow, SensorInfo, Snapshot
from ppwtop.tui.app import PpwtopApp
from ppwtop.tui.compare import CompareScreen
from ppwtop.tui.detail import DetailScreen
from ppwtop.tui.feed import StaticFeed
from ppwtop.tui.live import header_text
from tests.test_tui import FakeFeed, kernel, make_snapshot, wait_for

T0 = 1_000_000_000_000


def tiny_trace() -> Trace:
    """Two kernels names on GPU 0: 'a' busy [0, 50 ms) + [40, 60 ms) (overlap counted once),
    'b' 3 launches of 3 µs in the 2nd bin; clocks clamped by the power cap in the last one."""
    st = StringTable(["a", "b"])
    ms = 1_000_000
    start = np.array([0, 40 * ms, 120 * ms, 130 * ms, 140 * ms], dtype=np.int64) + T0
    end = start + np.array([50 * ms, 20 * ms, 3000, 3000, 3000])
    k = KernelBatch.from_columns({"start_ns": start, "end_ns": end, "device": np.zeros(5),
                                  "name_id": np.array([0, 0, 1, 1, 1])})
    ck = ClockBatch.from_columns({
        "t_ns": T0 + np.array([0, 100, 190]) * ms, "device": np.zeros(3),
        "sm_mhz": np.array([1980, 1980, 1500]), "mem_mhz": np.full(3, 2619),
        "temp_c": np.array([60.0, 70.0, 65.0]),
        "clock_reasons": np.array([0, 0, CLOCK_REASON_SW_POWER_CAP], dtype=np.uint64)})
    return Trace(strings=st, kernels=k, clocks=ck)


def test_panel_data_busy_histogram_clocks() -> None:
    p = panel_data(tiny_trace(), T0, T0 + 200_000_000)
    busy = p["busy"][0]
    assert busy["bin_ns"] == BUSY_BIN_NS and busy["t0_ns"] == T0
    # bin 0: union [0, 60 ms) = 0.6; bin 1: 3 x 3 µs
    assert busy["fraction"][0] == pytest.approx(0.6)
    assert busy["fraction"][1] == pytest.approx(9e-5, abs=1e-3)
    a, b = p["classes"]["0:a"], p["classes"]["0:b"]
    # 'b': 3 µs launches fall in [2, 4) µs: bin 2 with 1 µs first edge
    assert b["hist_min_ns"] == HIST_MIN_NS and b["hist_counts"][2] == 3
    assert sum(b["hist_counts"]) == 3 and sum(a["hist_counts"]) == 2
    assert sum(b["launches"]) == 3 and sum(a["launches"]) == 2
    assert b["launches"][0] == 0  # none in the first 5 ms bin
    ck = p["clocks"][0]
    assert ck["sm_mhz"] == 1500 and ck["sm_mhz_max"] == 1980 and ck["temp_c_max"] == 70.0
    assert ck["clamped_now"] == ["sw_power_cap"]
    assert ck["clamped_share"] == pytest.approx(1 / 3)


def test_panels_survive_snapshot_round_trip() -> None:
    snap = dataclasses.replace(make_snapshot(), window=dataclasses.replace(
        make_snapshot().window, start_ns=T0, end_ns=T0 + 200_000_000))
    s2 = with_panels(snap, tiny_trace())
    back = Snapshot.from_dict(s2.to_dict())
    assert back.extra["panels"]["classes"]["0:b"]["hist_counts"][2] == 3
    assert back.kernels == snap.kernels  # contract keys untouched


def test_header_fits_width_and_keeps_the_essentials() -> None:
    base = make_snapshot()
    assert base.steps is not None
    st = dataclasses.replace(base.steps, items_per_j=12.5, sla_ms=70.0, sla_compliance=0.93)
    snap = dataclasses.replace(base, steps=st,
                               meta={"recording": "/tmp/run.ppw", "dropped_records": 42,
                                     "energy_so_far_j": 5000.0, "elapsed_s": 60.0})
    power = (np.array([1, 2], dtype=np.int64), np.array([250.0, 312.0]))
    wide = header_text(snap, "python train.py --epochs 3", connected=False, paused=True,
                       power=power, width=200)
    plain = Text.from_markup(wide).plain
    for want in ("target disconnected", "paused", "312 W now", "5000 J so far",
                 "closure +1.0%", "items/J", "vs SLA 70.0 ms", "93% in", "rec run.ppw",
                 "dropped 42", "J/step", "p99 77.0"):
        assert want in plain, want
    for width in (80, 100):
        narrow = Text.from_markup(header_text(
            snap, "python train.py --epochs 3 " * 4, connected=False, paused=True,
            power=power, width=width)).plain.split("\n")
        assert len(narrow) == 3
        assert all(len(line) <= width - 2 for line in narrow), narrow
        # what matters most survives: the state flags, power now, J/step
        assert "target disconnected" in narrow[0] and "312 W now" in narrow[1]
        assert "J/step" in narrow[2]


def two_gpu_snapshot() -> Snapshot:
    s = make_snapshot()
    k1 = dataclasses.replace(kernel("gpu1_only_kernel", 80.0, 0.2, 50), gpu=1)
    gpus = (*s.gpus, GpuInfo(1, "NVIDIA H100 (1)", "h100", SensorInfo("instant", 100, 25, 1)))
    return dataclasses.replace(s, kernels=(*s.kernels, k1), gpus=gpus)


async def test_gpu_switch_cycles_all_then_each() -> None:
    app = PpwtopApp(StaticFeed(two_gpu_snapshot()))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        t = app.live.query_one("#kernels", DataTable)
        assert t.row_count == 4
        await pilot.press("g")
        assert app.gpu == 0 and t.row_count == 3 and "GPU 0" in str(t.border_title)
        await pilot.press("g")
        assert app.gpu == 1 and t.row_count == 1
        assert "GPU 1/2" in str(app.live.query_one("#header", Static).render())
        await pilot.press("g")
        assert app.gpu is None and t.row_count == 4
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Switch GPU" in titles


async def test_80x24_header_three_lines_band_and_clocks() -> None:
    snap = dataclasses.replace(make_snapshot(), window=dataclasses.replace(
        make_snapshot().window, start_ns=T0, end_ns=T0 + 200_000_000))
    snap = with_panels(snap, tiny_trace())
    power = (T0 + np.arange(0, 200_000_000, 10_000_000, dtype=np.int64), np.full(20, 200.0))
    app = PpwtopApp(StaticFeed(snap, label="a-rather-long-label-for-an-80-column-screen",
                               power=power))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        header = app.live.query_one("#header", Static)
        assert header.size.height == 3
        lines = str(header.render()).split("\n")
        assert len(lines) == 3 and all(len(x) <= 78 for x in lines)
        band = str(app.live.query_one("#busy", Static).render())
        assert band.startswith("busy ") and "▅" in band  # 0.6 busy in the first 100 ms
        clocks = str(app.live.query_one("#clocks", Static).render())
        assert "1500 MHz" in clocks and "clamped: sw_power_cap" in clocks
        assert app.live.has_class("-narrow") and app.live.has_class("-short")
        await pilot.press("d")  # kernel gemm_bf16_big has no panel series: said so
        assert isinstance(app.screen, DetailScreen)
        assert "not in this snapshot" in str(app.screen.query_one("#detail", Static).render())


async def test_detail_shows_histogram_and_launches() -> None:
    snap = make_snapshot({"b": (10.0, 0.1, 3)})
    snap = dataclasses.replace(snap, window=dataclasses.replace(
        snap.window, start_ns=T0, end_ns=T0 + 200_000_000))
    app = PpwtopApp(StaticFeed(with_panels(snap, tiny_trace())))
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("d")
        text = str(app.screen.query_one("#detail", Static).render())
        assert "launch durations" in text and "2 µs–4 µs" in text
        # 3 launches 10 ms apart in 5 ms bins: three separate bars of one launch each
        assert "launches over the window (40 bins of 5 ms, peak 1)" in text
        assert text.rsplit("\n", maxsplit=1)[-1].count("█") == 3


async def test_compare_shows_mechanisms() -> None:
    a = make_snapshot()
    b = make_snapshot(idle_j=140.0)
    app = PpwtopApp(StaticFeed(b), baseline=a, start_compare=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen))
        await pilot.pause()
        mech = str(app.screen.query_one("#mechanisms", Static).render())
        assert "idle.host_stall" in mech.split("\n", maxsplit=1)[0]  # the largest |Δ| comes first
        assert mech.split("\n", maxsplit=1)[0].lstrip().startswith("+")


async def test_detail_follows_live_numbers() -> None:
    feed = FakeFeed()
    feed.push(make_snapshot())
    app = PpwtopApp(feed)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.ticks == 1)
        await pilot.press("d")  # gemm_bf16_big, 300 J
        assert isinstance(app.screen, DetailScreen)
        assert "300 J" in str(app.screen.query_one("#detail", Static).render())
        feed.push(make_snapshot({"gemm_bf16_big": (444.0, 0.5, 100)}))
        await wait_for(pilot, lambda: app.ticks == 2)
        await pilot.pause()
        text = str(app.screen.query_one("#detail", Static).render())
        assert "444 J" in text and "300 J" not in text


def test_panel_feed_adds_panels_from_the_same_records() -> None:
    from ppwtop.demo_feed import DemoFeed
    from ppwtop.panel_feed import PanelFeed

    class Clock:
        t = 0.0

        def __call__(self) -> float:
            return self.t

    inner = DemoFeed("demo", "h100", 4.0, horizon_s=2.0, refresh_s=0.0, clock=Clock())
    feed = PanelFeed(inner)
    snap = feed.next_snapshot()
    assert snap is not None and feed.label == inner.label and feed.connected
    panels = snap.extra["panels"]
    # every kernel row of the snapshot has its series, with as many launches as calls
    for k in snap.kernels:
        series = panels["classes"][f"{k.gpu}:{k.name}"]
        assert sum(series["launches"]) == k.calls
        assert sum(series["hist_counts"]) == k.calls
    busy = panels["busy"][0]["fraction"]
    assert 0.0 < float(np.mean(busy)) <= 1.0
    assert panels["clocks"][0]["samples"] > 0
    assert len(feed.power_trace()[0]) > 0


def test_with_sla_judges_steps_and_demo_headless_exports_it(tmp_path: Path) -> None:
    import orjson

    from ppwtop.cli.main import main
    from ppwtop.panel_feed import with_sla

    base = make_snapshot()
    assert base.steps is not None
    st = dataclasses.replace(base.steps, step_latency_ms=(10.0, 20.0, 30.0, 40.0))
    snap = with_sla(dataclasses.replace(base, steps=st), 25.0)
    assert snap.steps is not None and snap.steps.sla_ms == 25.0
    assert snap.steps.sla_compliance == pytest.approx(0.5)
    assert with_sla(base, None) is base  # no SLA asked: untouched
    out = tmp_path / "s.json"
    assert main(["demo", "--headless", "--seconds", "3", "--sla-ms", "40",
                 "--export", str(out)]) == 0
    steps = orjson.loads(out.read_bytes())["steps"]
    lat = np.asarray(steps["step_latency_ms"])
    assert steps["sla_ms"] == 40.0
    assert steps["sla_compliance"] == pytest.approx(float(np.mean(lat <= 40.0)))


def _random_pieces(rng: np.random.Generator, n_pieces: int) -> list[Trace]:
    """Pieces as a live session receives them: per stream and flush, so pieces of two
    streams overlap in time; two GPUs, several names, copies too, some long kernels."""
    from attribution.model import CopyBatch

    st = StringTable([f"k{i}" for i in range(7)])
    out = []
    for p in range(n_pieces):
        n = int(rng.integers(0, 60))
        base = T0 + (p // 2) * 40_000_000 + int(rng.integers(0, 30_000_000))
        start = base + np.sort(rng.integers(0, 40_000_000, n))
        dur = rng.integers(500, 2_000_000, n) * np.where(rng.random(n) < 0.05, 50, 1)
        k = KernelBatch.from_columns({"start_ns": start, "end_ns": start + dur,
                                      "device": rng.integers(0, 2, n),
                                      "name_id": rng.integers(0, 7, n)}, n)
        nc = int(rng.integers(0, 3))
        cs = base + rng.integers(0, 40_000_000, nc)
        c = CopyBatch.from_columns({"start_ns": cs, "end_ns": cs + 100_000,
                                    "device": np.zeros(nc)}, nc)
        ck = ClockBatch.from_columns({"t_ns": [base], "device": [0], "sm_mhz": [1980],
                                      "mem_mhz": [2619], "temp_c": [60.0],
                                      "clock_reasons": np.zeros(1, np.uint64)}, 1)
        out.append(Trace(strings=st, kernels=k, copies=c, clocks=ck))
    return out


def test_panel_cache_equals_panel_data_over_sliding_windows() -> None:
    from attribution.panel_cache import PanelCache

    rng = np.random.default_rng(9)
    pieces = _random_pieces(rng, 120)
    cache = PanelCache()
    for first, start, span in ((0, T0, 2_400_000_000), (10, T0 + 123_456_789, 2_000_000_000),
                               (11, T0 + 200_000_000, 2_000_000_007), (40, T0, 10)):
        window = pieces[first:]
        got = cache.panel_data(window, start, start + span)
        assert got == panel_data(window, start, start + span)
        assert got["busy"] and got["classes"]
    assert cache.panel_data([], T0, T0 + 1) == panel_data([], T0, T0 + 1)


async def test_one_gpu_of_several_has_its_own_header_figures_and_shares() -> None:
    """With GPU 1 selected the header's energy, average and P_idle are GPU 1's (its rows
    partition its energy) and shares are of GPU 1's energy, not the run's; with all GPUs
    shown, the copies and idle rows say their GPU, as the kernels do."""
    s = two_gpu_snapshot()
    idle1 = IdleRow(cause="host_stall", gpu=1, time_s=0.5, energy_j=20.0, count=3)
    snap = dataclasses.replace(s, idle=(*s.idle, idle1))
    app = PpwtopApp(StaticFeed(snap))
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        other = app.live.query_one("#other", DataTable)
        names = {other.get_row_at(i)[0].text for i in range(other.row_count)}
        assert "1│idle host_stall" in names and "0│idle host_stall" in names
        await pilot.press("g", "g")
        assert app.gpu == 1
        head = Text.from_markup(str(app.live.query_one("#header", Static).render())).plain
        assert "100 J in 2.00 s" in head and "50.0 W avg" in head and "P_idle 40.0 W" in head
        assert "now" not in head  # no power trace (a snapshot file): no "W now" to show
        assert "closure" not in head  # the counter's closure is the run's
        t = app.live.query_one("#kernels", DataTable)
        assert t.get_cell("k:1:gpu1_only_kernel", "share").text.strip() == "80.0%"
        assert "all GPUs" in str(app.live.query_one("#ineff", Static).border_title)


async def test_compare_shows_whole_delta_columns_and_folded_mechanism_names() -> None:
    """At 120 columns the Δ% column is whole (the table was one cell too narrow: '+8.' and a
    scrollbar), and the mechanisms' C++ kernel names are folded as in the tables, one line
    each (they wrapped over 5-10 lines, leaving room for one or two of the six)."""
    long = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::"
            "BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, float*)")
    a = make_snapshot({long: (100.0, 0.5, 10), "gemm": (300.0, 0.5, 100)})
    b = make_snapshot({long: (108.4, 0.5, 10), "gemm": (330.0, 0.5, 100)})
    app = PpwtopApp(StaticFeed(b), baseline=a, start_compare=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen))
        await pilot.pause()
        t = app.screen.query_one("#deltas", DataTable)
        assert t.virtual_size.width <= t.scrollable_content_region.width
        assert t.get_cell(f"kernel:{long}", "p").text == "+8.4%"
        mech = str(app.screen.query_one("#mechanisms", Static).render())
        assert "vectorized_layer_norm_kernel<…>" in mech and "c10::BFloat16 const*" not in mech


def test_the_busy_band_stretches_as_the_power_graph_does() -> None:
    """With fewer readings than columns Sparkline stretches each reading over several
    columns; the band's cells must follow (they were left-packed, so a band column sat under
    another time than its bar), one value per cell, in order, the last one at the end."""
    from textual.renderables.sparkline import Sparkline as Spark

    from ppwtop.tui.live import bucket_means

    vals = np.arange(7, dtype=np.float64)
    cells = bucket_means(vals, 20)
    assert len(cells) == 20 and cells[0] == 0 and cells[-1] == 6
    assert np.all(np.diff(cells) >= 0) and set(cells) == set(vals)
    # the same cell → value map as the power graph's renderable
    buckets = tuple(Spark._buckets(list(vals), num_buckets=20))
    step = len(buckets) / 20
    assert [buckets[int(i * step)][0] for i in range(20)] == list(cells)
    # more readings than columns: means of Sparkline's buckets, as before
    many = np.arange(100, dtype=np.float64)
    assert list(bucket_means(many, 10)) == [b.mean() for b in np.split(many, 10)]


@pytest.mark.parametrize(("size", "dropped"), [((80, 24), "w"), ((120, 40), "ci"),
                                              ((160, 48), None)])
async def test_the_copies_and_idle_table_fits_its_width(size: tuple[int, int],
                                                        dropped: str | None) -> None:
    """The copies & idle table's columns fit the room it has at each breakpoint, so no
    horizontal scrollbar takes one of its few rows (at 80x24 it did, and the interval was
    cut; at 120 the interval sat behind the edge): under 110 columns the average W is left
    out, from 110 to 149 the interval, from 150 nothing."""
    app = PpwtopApp(StaticFeed(make_snapshot()))
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        o = app.live.query_one("#other", DataTable)
        keys = [c.value for c in o.columns]
        assert (dropped is None and len(keys) == 7) or (dropped not in keys and len(keys) == 6)
        assert o.virtual_size.width <= o.scrollable_content_region.width
        assert o.row_count == 3


def test_a_kernel_whose_name_was_lost_keeps_its_gpu_in_the_classes() -> None:
    # a damaged recording reads lost names as -1: the "<gpu>:<name>" key borrowed 1 from the
    # GPU ("0:" became "-1:") and the name lookup failed
    from attribution.model import UNKNOWN_NAME
    from attribution.panel_cache import PanelCache

    t = tiny_trace()
    cols = t.kernels.columns()
    cols["name_id"] = np.array([0, 0, -1, -1, -1], dtype=np.int32)
    t = dataclasses.replace(t, kernels=KernelBatch(**cols))
    classes = panel_data(t, T0, T0 + 200_000_000)["classes"]
    assert set(classes) == {"0:a", f"0:{UNKNOWN_NAME}"}
    assert PanelCache().panel_data([t], T0, T0 + 200_000_000)["classes"] == classes
