"""CPU the live feed path needs per second of data, without the UI and without wall-clock noise.

Owns the engine-side half of the TUI load benchmark (issue #5): the records of
:class:`benchmarks.load_source.RecordSource` at ``--rate`` kernel records/s go into a real
:class:`ppwtop.live.feed.LiveFeed` wrapped in :class:`ppwtop.panel_feed.PanelFeed`, as in
``ppwtop run``, driven in simulated time on one thread: a 50 ms piece at a time, a hand-over
to the live engine every 0.1 s (the app's 10 Hz poll, which also runs a lag
refit's work between snapshots) and a table snapshot every 0.5 s (with the panels every
2 s).  After ``--warmup`` seconds of data it sums the thread's CPU time
(``time.thread_time``: what other jobs on a shared machine cannot inflate much) per part and
prints it per second of data, i.e. the cores the path needs to keep up in real time.

Run: ``python benchmarks/feed_cpu.py [--rate 200000] [--seconds 40] [--warmup 20]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_source import RecordSource

from attribution.model import DeviceInfo, Trace
from ppwtop.live.feed import LiveFeed
from ppwtop.panel_feed import PanelFeed

PIECE_NS = 50_000_000


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


class _Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=200_000.0)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--warmup", type=float, default=20.0)
    ap.add_argument("--horizon", type=float, default=15.0)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    src = RecordSource(args.rate)
    live = LiveFeed(src.strings, label="cpu", gpu="h100", horizon_s=args.horizon,
                    refresh_s=0.5)
    live.devices = [DeviceInfo(0, "NVIDIA H100 80GB HBM3")]
    clock = _Clock()
    panels = PanelFeed(live, clock=clock)
    t0_ns = 1_800_000_000_000_000_000
    gen = feed = snap = 0.0
    snaps: list[float] = []
    engines: set[str] = set()
    rss: list[int] = []  # every 10 s of data
    n = int(args.seconds * 1e9 / PIECE_NS)
    warm = int(args.warmup * 1e9 / PIECE_NS)
    for i in range(n):
        a = t0_ns + i * PIECE_NS
        on = i >= warm
        c0 = time.thread_time()
        live.add(Trace(strings=src.strings, **src.chunk(a, a + PIECE_NS)))
        c1 = time.thread_time()
        gen += (c1 - c0) if on else 0.0
        if i % 200 == 199:
            rss.append(round(_rss_mb()))
        if i % 2 == 0:
            continue
        clock.t = (i + 1) * PIECE_NS / 1e9
        if i % 10 == 9:  # a table snapshot every 0.5 s (the feed's refresh)
            live._next_due = 0.0
            live._dirty = True
            out = panels.next_snapshot()
            d = time.thread_time() - c1
            if on:
                snap += d
                snaps.append(d)
                engines.add(out.meta.get("engine", "?") if out is not None else "none")
        else:  # the other 10 Hz polls hand records over and run the refit work
            live._next_due = float("inf")  # (what a poll before the snapshot is due does)
            live.next_snapshot()
            if on:
                feed += time.thread_time() - c1
    span = args.seconds - args.warmup
    print(f"feed CPU at {args.rate:,.0f} kernel records/s, {span:g} s of data measured after "
          f"{args.warmup:g} s; load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    print(f"  hand-over to the live engine and refit work (9 polls in 10): {feed / span:.3f} "
          f"cores")
    print(f"  table snapshots incl. their hand-over and panels: {snap / span:.3f} cores "
          f"(median {statistics.median(snaps) * 1e3:.0f} ms, {len(snaps)} snapshots, "
          f"engines {sorted(engines)})")
    print(f"  engine path in all: {(feed + snap) / span:.3f} cores "
          f"(record generation, the collector's stand-in: {gen / span:.3f})")
    print(f"  live engine restarts: {live.engine_restarts}; RSS every 10 s of data (MB): {rss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
