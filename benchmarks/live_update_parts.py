"""Where the live engine's ``update`` spends a tick, part by part, on a full horizon.

Owns the per-part breakdown of the live tick's update half (issue #3): the same feed as
``live_tick.py`` (``--scenario`` on ``--gpu``, ``--horizon`` + ``--measure`` seconds, ``--tick``
steps, records as they complete), with the engine's reduction, lag-fit and buffer functions
wrapped in wall-clock timers.  For every tick once the horizon is full it records each part's
time (inclusive: a part's callees count in it too) and prints p50/p90/p99/max per part and the
slowest ticks with their parts.  The wrappers cost a few µs per call, so the parts read a
little high; compare two trees with this same file (``PYTHONPATH=<tree>``).  A part a tree
does not have is skipped.

Run: ``python benchmarks/live_update_parts.py [--scenario demo --gpu h100 --horizon 300]``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_run import add_run_args, run_trace
from live_run import ticks as ticks_of

from attribution.engine import live, live_reduce

PARTS: tuple[tuple[Any, str], ...] = (
    (live.LiveEngine, "_reduce"), (live.LiveEngine, "_fit_lag"),
    (live.LiveEngine, "_start_search"), (live.LiveEngine, "_search_land"),
    (live, "redo_rows"), (live, "redo_finish"),
    (live.LiveEngine, "_prune"), (live.LiveEngine, "_settled_steps"),
    (live.DeviceState, "unit_ids"), (live.DeviceState, "add_readings"),
    (live, "items_for_device"), (live, "reduce_slab"), (live, "row_columns"),
    (live, "busy_from"), (live_reduce.QueryBusy, "_table"),
    (live_reduce.QueryBusy, "overlaps"), (live, "BusyFunction"), (live, "ResponseSearch"),
    (live_reduce, "idle_intervals"), (live_reduce.ChunkBuffer, "recent"),
    (live_reduce.ChunkBuffer, "append"),
)


def _timed(acc: dict[str, float], name: str, f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            acc[name] += time.perf_counter() - t0
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(ap)
    ap.add_argument("--slowest", type=int, default=6)
    args = ap.parse_args(argv)
    acc: dict[str, float] = collections.defaultdict(float)
    for owner, name in PARTS:  # a part renamed away fails here, not silently
        setattr(owner, name, _timed(acc, name, getattr(owner, name)))
    tr = run_trace(args)
    eng = live.LiveEngine(devices=tr.devices, horizon_s=args.horizon, n_boot=100)
    ticks: list[dict[str, float]] = []
    for now, delta, measured in ticks_of(tr, horizon_s=args.horizon, tick_s=args.tick):
        acc.clear()
        t0 = time.perf_counter()
        eng.update(delta, now)
        t1 = time.perf_counter()
        eng.snapshot()
        t2 = time.perf_counter()
        if measured:
            ticks.append({**acc, "update": t1 - t0, "snapshot": t2 - t1, "tick": t2 - t0})
    head = ["tick", "update", "snapshot"]
    names = head + sorted({k for t in ticks for k in t} - set(head))
    print(f"{args.scenario} on {args.gpu}, horizon {args.horizon:.0f} s, {len(ticks)} ticks "
          f"(ms; a part's callees count in it)")
    print(f"  {'part':18s} {'p50':>7s} {'p90':>7s} {'p99':>7s} {'max':>7s}")
    for k in names:
        v = np.array([t.get(k, 0.0) for t in ticks]) * 1e3
        print(f"  {k:18s} {np.percentile(v, 50):7.2f} {np.percentile(v, 90):7.2f} "
              f"{np.percentile(v, 99):7.2f} {v.max():7.2f}")
    print("  slowest updates:")
    for i in sorted(range(len(ticks)), key=lambda i: -ticks[i]["update"])[:args.slowest]:
        parts = sorted(ticks[i].items(), key=lambda kv: -kv[1])
        print("   ", " ".join(f"{k} {v * 1e3:.1f}" for k, v in parts if v >= 3e-4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
