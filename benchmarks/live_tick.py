"""Live tick cost on a full horizon: the incremental engine vs re-running the batch engine.

Owns the live-tick benchmark (issue #3 goal: a live tick on a 300 s horizon under 20 ms).
Simulates ``--horizon`` + ``--measure`` seconds of a scenario, feeds it to
:class:`attribution.engine.live.LiveEngine` in ``--tick`` steps (records as they complete,
readings as taken: what ``TraceFeed`` does), and times ``update`` + ``snapshot`` of every tick
once the horizon is full, in wall time and in the tick thread's CPU time (which a shared
machine's other jobs cannot inflate); after each tick ``background`` runs to the end (the lag
refit's work, which the feeds run on their polls between snapshots), timed apart.  Every
tick also draws ``BOOT_PER_TICK`` bootstrap replicates; the ticks with lag-refit work are
reported apart too.  Side by side in the same run, at ``--batch-runs`` evenly spaced ticks,
the batch engine (``attribute``, what the feed ran every tick before) attributes the same
horizon.  Prints tick p50/p99/max, the background's, the batch median and the ratio.

Run: ``python benchmarks/live_tick.py [--scenario demo --gpu h100 --horizon 300]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_run import add_run_args, run_trace
from live_run import ticks as ticks_of

from attribution.engine import attribute
from attribution.engine.live import LAG_UNITS_PER_TICK, LiveEngine
from ppwtop.demo_feed import TraceFeed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(ap)
    ap.add_argument("--batch-runs", type=int, default=3)
    ap.add_argument("--n-boot", type=int, default=100)
    ap.add_argument("--lag-units-per-tick", type=float, default=LAG_UNITS_PER_TICK)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    tr = run_trace(args)
    span = tr.gpu_span_ns()
    assert span is not None
    print(f"{args.scenario} on {args.gpu}: {len(tr.kernels)} kernels "
          f"({len(np.unique(tr.kernels.name_id))} names) over "
          f"{(span[1] - span[0]) / 1e9:.0f} s; horizon {args.horizon:.0f} s, tick {args.tick} s")
    horizon = TraceFeed(tr, label="batch", horizon_s=args.horizon)  # the feed's batch window
    eng = LiveEngine(devices=tr.devices, horizon_s=args.horizon, n_boot=args.n_boot,
                     lag_units_per_tick=args.lag_units_per_tick)
    n_measured = int(args.measure / args.tick) - 2
    batch_at = set(np.linspace(1, max(n_measured - 1, 1), args.batch_runs).astype(int).tolist())
    ticks: list[float] = []
    cpu: list[float] = []  # the tick's own CPU time: what the machine's other jobs do not add
    refit_work: list[bool] = []
    between: list[float] = []  # LiveEngine.background after the tick, in thread CPU time
    batch: list[float] = []
    for now, delta, measured in ticks_of(tr, horizon_s=args.horizon, tick_s=args.tick):
        refits = eng.refits
        searching = any(st.search is not None for st in eng.dev.values())
        t0, c0 = time.perf_counter(), time.thread_time()
        eng.update(delta, now)
        snap = eng.snapshot()
        dt, dc = time.perf_counter() - t0, time.thread_time() - c0
        c1 = time.thread_time()
        pieces = eng.run_background()  # the refit work the feeds run between snapshots
        if not measured or snap is None:
            continue
        ticks.append(dt)
        cpu.append(dc)
        between.append(time.thread_time() - c1)
        refit_work.append(eng.refits != refits or searching or pieces > 0)
        if len(ticks) in batch_at:  # the batch engine on the same horizon, as the feed ran it
            window = horizon.window(now)
            t0 = time.perf_counter()
            attribute(window, n_boot=args.n_boot)
            batch.append(time.perf_counter() - t0)
    t = np.array(ticks) * 1e3
    special = t[np.array(refit_work, bool)]
    plain = t[~np.array(refit_work, bool)]
    print(f"  live tick over {len(t)} ticks on a full horizon: p50 {np.percentile(t, 50):.1f} ms,"
          f" p99 {np.percentile(t, 99):.1f} ms, max {t.max():.1f} ms "
          f"(goal p99 < 20 ms: {'met' if np.percentile(t, 99) < 20 else 'not met'})")
    c = np.array(cpu) * 1e3
    print(f"  CPU time of the tick thread: p50 {np.percentile(c, 50):.1f} ms, "
          f"p99 {np.percentile(c, 99):.1f} ms, max {c.max():.1f} ms; load average "
          f"{load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    bg = np.array(between) * 1e3
    print(f"  background between ticks (refit work): p50 {np.percentile(bg, 50):.1f} ms, p99 "
          f"{np.percentile(bg, 99):.1f} ms, max {bg.max():.1f} ms; tick + background CPU p50 "
          f"{np.percentile(c + bg, 50):.1f} ms, p99 {np.percentile(c + bg, 99):.1f} ms")
    if len(plain):
        print(f"  ticks without lag-refit work ({len(plain)}): p50 "
              f"{np.percentile(plain, 50):.1f} ms, p99 {np.percentile(plain, 99):.1f} ms")
    if len(special):
        print(f"  ticks with lag-refit work before or after them ({len(special)}): median "
              f"{np.median(special):.1f} ms, max {special.max():.1f} ms")
    if batch:
        b = statistics.median(batch)
        print(f"  batch re-fit of the same horizon: {b * 1e3:.0f} ms median of {len(batch)} "
              f"({', '.join(f'{x:.2f}' for x in batch)} s)")
        print(f"  ratio batch / live p50: {b * 1e3 / np.percentile(t, 50):.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
