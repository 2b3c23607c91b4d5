"""The live TUI under load: the app fed at 200k and 1M kernel records/s, side by side.

Owns the TUI load benchmark (issue #5).  Each rate runs in its own process (so CPU and memory
are that process's alone): :class:`benchmarks.load_source.LoadFeed` generates records at the
rate on a collector thread into a ring of ``--horizon`` seconds and runs the real engine on
it (duty-cycled like the demo feed); the real :class:`ppwtop.tui.app.PpwtopApp` renders it
headless (Textual's ``run_test``, 120x40).  Measured per rate, after a warm-up of one horizon:

* refresh rate: messages rendered per second (power graph + header; goal >= 9 Hz at 200k/s),
* tick latency: from the tick thread posting a message to the screen refresh after it
  (p50 / p99),
* snapshot rate and engine cost per attribution (the engine's own thread),
* CPU of the process (user + system seconds per wall second; goal < 1 core),
* RSS at the end of the warm-up and at the end, and its slope per minute (bounded: no growth
  with run length).

Run: ``python benchmarks/tui_load.py [--seconds 55] [--horizon 15] [--rates 200000,1000000]``;
``--no-engine`` is the control run (collection and UI only), which separates what the TUI
costs from what the engine's CPU takes from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attribution.snapshot import Snapshot
    from ppwtop.tui.feed import PowerTrace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pct(v: list[float], q: float) -> float:
    if not v:
        return float("nan")
    s = sorted(v)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


async def run_worker(rate: float, seconds: float, horizon_s: float, engine: bool = True
                     ) -> dict[str, Any]:
    from load_source import LoadFeed

    from ppwtop.tui.app import PpwtopApp, SnapshotReady

    latencies: list[tuple[float, float]] = []  # (when, latency_s)

    class Measured(PpwtopApp):
        def on_snapshot_ready(self, message: SnapshotReady) -> None:
            posted = message.posted_s

            def done() -> None:
                now = time.monotonic()
                latencies.append((now, now - posted))

            # Textual also runs PpwtopApp.on_snapshot_ready itself (handlers are called per
            # class along the MRO), so no super() call here
            self.call_after_refresh(done)

    feed = LoadFeed(rate, horizon_s=horizon_s, engine=engine)
    app = Measured(feed)
    render_s: list[float] = []
    show = app.live.show_snapshot

    def timed_show(snap: Snapshot | None, power: PowerTrace) -> None:
        t0 = time.perf_counter()  # the UI thread's own work per message
        show(snap, power)
        render_s.append(time.perf_counter() - t0)

    app.live.show_snapshot = timed_show  # type: ignore[method-assign]
    rss: list[tuple[float, float]] = []
    async with app.run_test(size=(120, 40)) as pilot:
        t_start = time.monotonic()
        warm_at = t_start + horizon_s + 2.0
        cpu0 = wall0 = None
        renders0 = snaps0 = 0
        while (now := time.monotonic()) < t_start + seconds:
            await pilot.pause(0.5)
            rss.append((now - t_start, rss_mb()))
            if cpu0 is None and now >= warm_at:
                cpu0, wall0 = cpu_s(), now
                renders0, snaps0 = app.renders, app.ticks
        cpu1, wall1 = cpu_s(), time.monotonic()
        renders1, snaps1 = app.renders, app.ticks
        ring = feed.ring_records()
    feed.close()
    assert cpu0 is not None and wall0 is not None, "--seconds must exceed the horizon + 2 s"
    span = wall1 - wall0
    lat = [d for t, d in latencies if t >= wall0]
    warm_rss = [m for t, m in rss if t >= warm_at - t_start]
    slope = float("nan")
    if len(warm_rss) > 4:
        ts = [t for t, _ in rss if t >= warm_at - t_start]
        tm, mm = statistics.fmean(ts), statistics.fmean(warm_rss)
        slope = (sum((t - tm) * (m - mm) for t, m in zip(ts, warm_rss, strict=True))
                 / sum((t - tm) ** 2 for t in ts)) * 60.0
    eng = feed.engine_s
    gaps = [b - a for a, b in zip(feed.snapshot_at, feed.snapshot_at[1:], strict=False)]
    half = wall0 - t_start + span / 2
    first = [m for t, m in rss if warm_at - t_start <= t < half]
    second = [m for t, m in rss if t >= half]
    return {
        "rate": rate, "seconds": seconds, "horizon_s": horizon_s, "measured_s": span,
        "refresh_hz": (renders1 - renders0) / span,
        "snapshots_per_s": (snaps1 - snaps0) / span,
        "tick_p50_ms": pct(lat, 50) * 1e3, "tick_p99_ms": pct(lat, 99) * 1e3,
        "tick_max_ms": max(lat, default=float("nan")) * 1e3,
        "engine_median_s": statistics.median(eng) if eng else float("nan"),
        "engine_n": len(eng),
        "engine_max_s": max(eng, default=float("nan")),
        "snapshot_gap_max_s": max(gaps, default=float("nan")),
        "render_p50_ms": pct(render_s, 50) * 1e3, "render_p99_ms": pct(render_s, 99) * 1e3,
        "rss_max_first_half_mb": max(first, default=float("nan")),
        "rss_max_second_half_mb": max(second, default=float("nan")),
        "cpu_cores": (cpu1 - cpu0) / span,
        "generate_cores": feed.generate_s / (wall1 - t_start),
        "records_in_ring": ring, "collector_behind_s": feed.behind_s,
        "rss_warm_mb": warm_rss[0] if warm_rss else float("nan"),
        "rss_end_mb": rss[-1][1], "rss_max_mb": max(m for _, m in rss),
        "rss_slope_mb_per_min": slope,
        "live_ticks": feed.live.live_ticks, "engine_restarts": feed.live.engine_restarts,
        "feed_cost_ms": feed.live.feed_cost_s * 1e3,
    }


ROWS = [
    ("refresh_hz", "refresh rate (Hz)", "{:.1f}"),
    ("tick_p50_ms", "tick latency p50 (ms)", "{:.0f}"),
    ("tick_p99_ms", "tick latency p99 (ms)", "{:.0f}"),
    ("tick_max_ms", "tick latency max (ms)", "{:.0f}"),
    ("snapshots_per_s", "snapshots/s", "{:.3f}"),
    ("render_p50_ms", "UI work per message p50 (ms)", "{:.1f}"),
    ("render_p99_ms", "UI work per message p99 (ms)", "{:.1f}"),
    ("engine_median_s", "engine per attribution, median (s)", "{:.2f}"),
    ("engine_max_s", "engine per attribution, max (s)", "{:.2f}"),
    ("snapshot_gap_max_s", "longest gap between snapshots (s)", "{:.1f}"),
    ("records_in_ring", "kernel records in the horizon", "{:,.0f}"),
    ("cpu_cores", "CPU of the process (cores)", "{:.2f}"),
    ("generate_cores", "record generation, wall share (incl. GIL waits)", "{:.2f}"),
    ("rss_warm_mb", "RSS after warm-up (MB)", "{:.0f}"),
    ("rss_end_mb", "RSS at the end (MB)", "{:.0f}"),
    ("rss_max_first_half_mb", "RSS max, 1st half after warm-up (MB)", "{:.0f}"),
    ("rss_max_second_half_mb", "RSS max, 2nd half (MB)", "{:.0f}"),
    ("rss_slope_mb_per_min", "RSS slope after warm-up (MB/min)", "{:+.1f}"),
    ("collector_behind_s", "collector behind real time at the end (s)", "{:.2f}"),
    ("live_ticks", "snapshots from the live engine (whole run)", "{:.0f}"),
    ("engine_restarts", "live engine restarts (fell > 10 s behind)", "{:.0f}"),
    ("feed_cost_ms", "last hand-over of records to the engine (ms)", "{:.0f}"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--rates", default="200000,1000000")
    ap.add_argument("--seconds", type=float, default=55.0, help="per rate (default 55)")
    ap.add_argument("--horizon", type=float, default=15.0, help="engine horizon s (default 15)")
    ap.add_argument("--no-engine", action="store_true",
                    help="control run: collection and UI only, the engine never runs")
    ap.add_argument("--worker", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.worker is not None:
        res = asyncio.run(run_worker(args.worker, args.seconds, args.horizon,
                                     engine=not args.no_engine))
        out = json.dumps(res)
        if args.json:
            args.json.write_text(out)
        print(out)
        return 0
    rates = [float(r) for r in args.rates.split(",")]
    load0 = os.getloadavg()[0]
    results = []
    for rate in rates:
        p = subprocess.run([sys.executable, __file__, "--worker", str(rate), "--seconds",
                            str(args.seconds), "--horizon", str(args.horizon),
                            *(["--no-engine"] if args.no_engine else [])],
                           capture_output=True, text=True, check=False,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
            return 1
        results.append(json.loads(p.stdout.strip().splitlines()[-1]))
    head = ["", *[f"{r / 1e3:,.0f}k/s" for r in rates]]
    if len(rates) == 2:
        head.append("ratio")
    control = " (control: no engine)" if args.no_engine else ""
    print(f"TUI load{control}, horizon {args.horizon:g} s, {args.seconds:g} s per rate "
          f"(measured after a {args.horizon + 2:g} s warm-up); load average before: "
          f"{load0:.1f}, after: {os.getloadavg()[0]:.1f}, on {os.cpu_count()} CPUs")
    print(f"{head[0]:48s}" + "".join(f"{h:>12s}" for h in head[1:]))
    for key, label, fmt in ROWS:
        vals = [r[key] for r in results]
        line = f"{label:48s}" + "".join(f"{fmt.format(v):>12s}" for v in vals)
        if len(vals) == 2:
            ratio = vals[1] / vals[0] if vals[0] else float("nan")
            line += f"{ratio:>11.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
