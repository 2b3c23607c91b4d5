"""`ppwtop serve`: the Prometheus collector on hand-built snapshots, and end-to-end scrapes
over loopback of `serve --demo` and of `serve -- CMD` on the sim backend."""

from __future__ import annotations

import itertools
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from attribution.snapshot import (
    CopyRow,
    GpuInfo,
    IdleRow,
    KernelRow,
    SensorInfo,
    Snapshot,
    Totals,
    Window,
)
from ppwtop.cli.main import main as cli_main
from ppwtop.cli.serve import MIN_WINDOW_S, SETTLE_S, LiveWindows, parse_hostport
from ppwtop.errors import PpwtopError
from ppwtop.exporters.prometheus import EnergyCollector, clamp_seconds


def _kernel(name: str, e: float, gpu: int = 0) -> KernelRow:
    return KernelRow(name=name, gpu=gpu, calls=3, time_s=0.1, energy_j=e, dynamic_energy_j=e / 2,
                     dynamic_energy_ci_j=(0.0, e), avg_power_w=e / 0.1, resolvable=True,
                     precision="bf16")


def _snap(gemm_j: float, copy_j: float, idle_j: float, *, duration_s: float = 2.0,
          extra: dict[str, object] | None = None) -> Snapshot:
    total = gemm_j + 1.0 + copy_j + idle_j
    return Snapshot(
        gpus=(GpuInfo(0, "NVIDIA H100", "h100", SensorInfo("instant", 100, 25, 1.5)),),
        window=Window(0, int(duration_s * 1e9)),
        totals=Totals(energy_j=total, kernel_energy_j=gemm_j + 1.0, copy_energy_j=copy_j,
                      idle_energy_j=idle_j, active_idle_w=60.0, measured_energy_j=total / 1.02,
                      closure_error=0.02),
        kernels=(_kernel("gemm", gemm_j), _kernel("softmax", 1.0)),
        copies=(CopyRow("HtoD", "pinned", 0, 4, 1 << 20, 0.01, copy_j, copy_j / 2),),
        idle=(IdleRow("launch_gap", 0, 0.2, idle_j, 7),),
        steps=None,
        extra=extra or {},
    )


def _samples(collector: EnergyCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse the collector's exposition text back, keyed by (sample name, sorted labels)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    text = generate_latest(reg).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_collector_values_and_labels() -> None:
    c = EnergyCollector()
    c.update(_snap(10.0, 4.0, 6.0, extra={"clamps": [{"reason": "sw_thermal", "seconds": 0.5}]}))
    s = _samples(c)
    e = "ppwtop_energy_joules_total"
    assert s[_key(e, gpu="0", kind="kernel", **{"class": "gemm"})] == 10.0
    assert s[_key(e, gpu="0", kind="kernel", **{"class": "softmax"})] == 1.0
    assert s[_key(e, gpu="0", kind="copy", **{"class": "HtoD/pinned"})] == 4.0
    assert s[_key(e, gpu="0", kind="idle", **{"class": "launch_gap"})] == 6.0
    assert s[_key("ppwtop_energy_total_joules_total", gpu="0")] == 21.0
    # mean power over the window: 21 J / 2 s
    assert s[_key("ppwtop_power_watts", gpu="0")] == pytest.approx(10.5)
    assert s[_key("ppwtop_active_idle_watts", gpu="0")] == 60.0
    assert s[_key("ppwtop_closure_error", gpu="0")] == pytest.approx(0.02)
    assert s[_key("ppwtop_clamp_seconds", gpu="0", reason="sw_thermal")] == 0.5


def test_counters_accumulate_tumbling_windows() -> None:
    c = EnergyCollector()
    c.update(_snap(10.0, 4.0, 6.0))
    before = _samples(c)
    c.update(_snap(3.0, 0.5, 2.0, duration_s=1.0))
    after = _samples(c)
    e = "ppwtop_energy_joules_total"
    assert after[_key(e, gpu="0", kind="kernel", **{"class": "gemm"})] == 13.0
    assert after[_key(e, gpu="0", kind="idle", **{"class": "launch_gap"})] == 8.0
    assert after[_key("ppwtop_energy_total_joules_total", gpu="0")] == 21.0 + 6.5
    for k, v in before.items():
        if k[0].endswith("_total"):
            assert after[k] >= v, k
    # gauges follow the latest window only: 6.5 J over 1 s
    assert after[_key("ppwtop_power_watts", gpu="0")] == pytest.approx(6.5)


def test_cumulative_mode_never_decreases() -> None:
    c = EnergyCollector()
    c.update(_snap(10.0, 4.0, 6.0), cumulative=True)
    c.update(_snap(9.0, 5.0, 6.0), cumulative=True)  # a slightly lower re-estimate of gemm
    assert c.energy_j("0", "kernel", "gemm") == 10.0
    assert c.energy_j("0", "copy", "HtoD/pinned") == 5.0


def test_negative_energy_adds_nothing_and_power_now_wins() -> None:
    c = EnergyCollector()
    c.update(_snap(10.0, 4.0, 6.0))
    c.update(_snap(-2.0, 0.0, 0.0, extra={"power_now_w": 321.0}))
    assert c.energy_j("0", "kernel", "gemm") == 10.0
    assert _samples(c)[_key("ppwtop_power_watts", gpu="0")] == 321.0


def test_empty_collector_and_missing_clamps() -> None:
    s = _samples(EnergyCollector())
    assert not any(k[0].startswith("ppwtop_energy") for k in s)
    c = EnergyCollector()
    c.update(_snap(1.0, 1.0, 1.0))
    assert not any(k[0] == "ppwtop_clamp_seconds" for k in _samples(c))


def test_clamp_shapes() -> None:
    assert clamp_seconds({"a": 1.5, "b": {"time_s": 2}}) == {"a": 1.5, "b": 2.0}
    assert clamp_seconds([{"reason": "x", "duration_s": 1}, {"reason": "x", "seconds": 2},
                          {"energy_j": 3}, "junk"]) == {"x": 3.0}
    assert clamp_seconds(None) == {} and clamp_seconds("junk") == {}


@pytest.mark.parametrize("text", ["nope", "host:", ":80", "h:0", "h:65536", "h:x"])
def test_bad_hostport(text: str) -> None:
    with pytest.raises(PpwtopError):
        parse_hostport(text)
    assert parse_hostport("[::1]:9464") == ("::1", 9464)


@pytest.mark.parametrize("argv", [
    ["--prometheus", "nope", "--demo"],
    ["--prometheus", "127.0.0.1:9464"],
    ["--prometheus", "127.0.0.1:9464", "--demo", "--", "sleep", "1"],
    ["--prometheus", "127.0.0.1:9464", "--pid", "1", "--", "sleep", "1"],
    ["--prometheus", "127.0.0.1:9464", "--", "no-such-command-ppwtop"],
    ["--prometheus", "127.0.0.1:9464", "--gpu", "nope", "--", "sleep", "1"],
    ["--demo"],
    # before: 1e308 s overflowed the poller's wait, its thread died, serve exited 0
    ["--prometheus", "127.0.0.1:9464", "--demo", "--interval", "1e308", "--seconds", "1"],
    ["--prometheus", "127.0.0.1:9464", "--demo", "--interval", "1e-320", "--seconds", "1"],
])
def test_bad_args_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["serve", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppwtop: error:") and "\n" not in err


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> str:
    url = f"http://127.0.0.1:{port}/metrics"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    with opener.open(url, timeout=2) as r:
        return str(r.read().decode())


LIVE_TARGET = """
import time
for _ in range(60):
    time.sleep(0.1)
"""


@pytest.mark.parametrize("source", ["demo", "run-sim"])
def test_serve_end_to_end(source: str, tmp_path: Path) -> None:
    """Scraped twice over loopback: per-class kernel counters, a board-sized power gauge and
    a total that only grows; the demo's simulated run and a live sim-backend command alike."""
    port = _free_port()
    how = ["--demo"] if source == "demo" else [
        "--backend", "sim", "--", sys.executable, "-c", LIVE_TARGET]
    env = dict(os.environ, PPWTOP_SIM_SECONDS="30")
    env.pop("PPWTOP_SOCKET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ppwtop", "serve", "--prometheus", f"127.0.0.1:{port}",
         "--seconds", "6", "--interval", "1", *how],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        texts: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                text = _scrape(port)
            except OSError:
                time.sleep(0.2)
                continue
            if 'kind="kernel"' in text:
                texts.append(text)
                if len(texts) >= 2:
                    break
            time.sleep(1.2)
        assert len(texts) >= 2, proc.communicate()[1] if proc.poll() is not None else "no data"
        totals = []
        for text in texts:
            fams = {f.name: f for f in text_string_to_metric_families(text)}
            kernels = [s for s in fams["ppwtop_energy_joules"].samples
                       if s.name == "ppwtop_energy_joules_total" and s.labels["kind"] == "kernel"]
            assert kernels and all(s.labels["class"] and s.value > 0 for s in kernels)
            assert any("gemm" in s.labels["class"] for s in kernels)
            totals.append(fams["ppwtop_energy_total_joules"].samples[0].value)
            power = fams["ppwtop_power_watts"].samples[0].value
            assert 20.0 < power < 1000.0  # an H100 board, not joules or milliwatts
        assert totals[1] >= totals[0] > 0
    finally:
        rc = proc.wait(timeout=30)
    assert rc == 0, proc.communicate()[1]


S = 1_000_000_000


class _BurstyFeed:
    """A live feed whose records arrive in bursts and whose readings lag them: what
    :class:`LiveWindows` reads (``latest_ns``, ``first_power_ns``, ``latest_power_ns``,
    ``connected``, ``keep_ns``) and the windows it asks for."""

    def __init__(self) -> None:
        self.latest_ns = 0
        self.first_power_ns = 0
        self.latest_power_ns = 0
        self.connected = True
        self.keep_ns = 20 * S
        self.launch_floor_ns: int | None = None
        self.asked: list[tuple[int, int]] = []

    def snapshot_between(self, start_ns: int, end_ns: int, n_boot: int) -> tuple[int, int]:
        self.asked.append((start_ns, end_ns))
        return start_ns, end_ns


def test_live_windows_close_only_where_readings_cover_them() -> None:
    """Records arrive in bursts (the agent's flushes) and readings every 100 ms behind them; a
    window used to be cut wherever the newest record was, and one 26 ms long between two
    readings was attributed with no power (its kernels' counters got 0 J).  A window now ends
    no later than the newest reading and lasts at least MIN_WINDOW_S while the target runs;
    once it is gone the last window runs to the newest record.  (Readings here lag the
    records by up to 1.5 s, more than SETTLE_S.)"""
    feed = _BurstyFeed()
    win = LiveWindows(feed)
    t = 30 * S
    rng = random.Random(3)
    for _ in range(200):
        t += rng.choice([5, 26, 120, 400, 900]) * 1_000_000  # bursty record ends
        feed.latest_ns = t
        feed.latest_power_ns = (t - rng.randint(0, 1500) * 1_000_000) // (S // 10) * (S // 10)
        feed.first_power_ns = feed.first_power_ns or feed.latest_power_ns
        got = win.next_window()
        if got is not None:
            end = got[1]
            assert end <= feed.latest_power_ns and end <= feed.latest_ns - int(SETTLE_S * S)
    assert len(feed.asked) > 20
    for (_, e0), (s1, _) in zip(feed.asked, feed.asked[1:], strict=False):
        assert s1 == e0  # tumbling: no gap, no overlap
    assert all(e - s >= int(MIN_WINDOW_S * S) for s, e in feed.asked)
    feed.connected = False  # the target is gone: the rest, up to the newest record
    _, end = win.next_window()
    assert end == feed.latest_ns and win.done


def test_no_live_window_closes_before_the_first_reading() -> None:
    """The sampler's first reading came seconds after the first records (CI, 2 cores): the
    first window was cut on records alone, held no reading, and its kernel got 0 J in the
    counters for good.  Now no window closes before a reading arrives, the first starts at
    it, and a session without a sampler still closes windows on records alone."""
    feed = _BurstyFeed()
    win = LiveWindows(feed)
    for t in range(5, 40):  # records every 0.1 s from 0.5 s on, no reading yet
        feed.latest_ns = t * S // 10
        assert win.next_window() is None
    feed.first_power_ns = feed.latest_power_ns = 38 * S // 10  # the first reading
    feed.latest_ns = 50 * S // 10
    assert win.next_window() is None  # it covers too little yet
    feed.latest_power_ns = feed.latest_ns = 60 * S // 10
    start, end = win.next_window()
    assert start >= feed.first_power_ns - 1 and end == 50 * S // 10
    no_sampler = _BurstyFeed()
    win = LiveWindows(no_sampler, power=False)
    no_sampler.latest_ns = 40 * S // 10
    start, end = win.next_window()
    assert start == end - no_sampler.keep_ns and end == no_sampler.latest_ns - int(SETTLE_S * S)


def test_no_live_window_ends_past_a_launch_whose_item_has_not_come() -> None:
    """A kernel still running when a window closes has not come yet (records come when an
    item completes): the window ends no later than its launch call, so the item is cut
    into this window and the next rather than missed by both."""
    feed = _BurstyFeed()
    win = LiveWindows(feed)
    feed.first_power_ns = 10 * S
    held: list[int] = []
    after: list[int] = []
    for t in range(11, 60):
        feed.latest_ns = feed.latest_power_ns = t * S
        feed.launch_floor_ns = 30 * S if 31 <= t < 45 else None  # a 14 s kernel from 30 s
        got = win.next_window()
        if got is not None:
            (held if feed.launch_floor_ns is not None else after).append(got[1])
    assert held and max(held) <= 30 * S  # held at the call while the kernel ran
    assert after[-1] > 45 * S  # and moved on once it came
    starts = [a for a, _ in feed.asked]
    assert all(s1 == e0 for (_, e0), s1 in zip(feed.asked, starts[1:], strict=False))


def test_tumbling_windows_count_items_running_across_their_edges() -> None:
    """Tumbling windows took the records that started and ended inside them, so an item
    running across an edge counted in neither (a 1–4 s kernel at most edges of 5 s windows).
    Each window now takes its part of it: the windows' busy time per class adds up to the
    run's."""
    import numpy as np

    from attribution.sim import SCENARIOS, simulate
    from attribution.sim.scenarios import with_long_kernels
    from ppwtop.demo_feed import TraceFeed

    spec = with_long_kernels(SCENARIOS["varied_mix"], 1500.0, 0.4)
    tr = simulate("varied_mix", "h100", 30.0, seed=3, spec=spec).trace
    feed = TraceFeed(tr, label="t", gpu="h100", horizon_s=5.0, n_boot=5)
    k = tr.kernels
    edges = [*range(feed.start_ns, feed.end_ns, 5 * S), feed.end_ns]
    got: dict[str, float] = {}
    for a, b in itertools.pairwise(edges):
        snap = feed.snapshot_at(b, b - a, 5, clip=True)
        assert snap is not None
        for r in snap.kernels:
            got[r.name] = got.get(r.name, 0.0) + r.time_s
    cut = sum(int(((k.start_ns < e) & (k.end_ns > e)).sum()) for e in edges[1:-1])
    assert cut >= 2  # edges cut long kernels (the case)
    names = {i: tr.strings[i] for i in np.unique(k.name_id).tolist()}
    for i, name in names.items():
        want = float((k.end_ns - k.start_ns)[k.name_id == i].sum()) * 1e-9
        assert got[name] == pytest.approx(want, rel=1e-9, abs=1e-9), name
