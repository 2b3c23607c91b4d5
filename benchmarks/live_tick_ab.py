"""Live tick of this checkout against another checkout's, tick by tick in lockstep.

Owns the A/B live-tick benchmark.  The shared VM's speed moves by 2x within a minute, so two
``live_tick.py`` runs one after the other compare the machine's phases as much as the code.
Here two worker processes -- this checkout and ``--baseline`` (another checkout of the
project, e.g. ``git worktree add --detach ../ref <commit>``) -- each simulate the same run
(``live_run``: this checkout's, driving each checkout's own engine) and
feed their own :class:`~attribution.engine.live.LiveEngine` to a full horizon; then the
driver has them run the measured ticks alternately (tick k: one worker, then the other; the
order flips every tick), so each pair of ticks sees the same phase of the machine.  Each tick
is timed in the worker's own thread CPU time: the tick (``update`` + ``snapshot``: what a
snapshot waits for) and, apart, ``LiveEngine.background`` run to the end after it (the refit
work the feeds run between snapshots; none in checkouts before it).

Prints per side p50/p99/max over the measured ticks of the tick and of tick + background and,
side by side, the ratios of the p50 and p99 and the median of the per-tick ratios (this
checkout / baseline).

Run: ``python benchmarks/live_tick_ab.py --baseline ../ref [--scenario demo --gpu h100
--horizon 300 --measure 60]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_run import add_run_args

WORKER = r"""
import argparse, sys, time
sys.path.insert(0, sys.argv[1])  # this checkout's benchmarks/: the run, whichever engine
from live_run import add_run_args, run_trace, ticks
from attribution.engine.live import LiveEngine

ap = argparse.ArgumentParser()
add_run_args(ap)
args = ap.parse_args(sys.argv[2:])
tr = run_trace(args)
eng = LiveEngine(devices=tr.devices, horizon_s=args.horizon, n_boot=100)
feed = ticks(tr, horizon_s=args.horizon, tick_s=args.tick)
between = getattr(eng, "background", None)  # absent from checkouts before it
for now, delta, measured in feed:  # fill the horizon, untimed
    eng.update(delta, now)
    eng.snapshot()
    while between is not None and between():
        pass
    if measured:
        break
print("ready", flush=True)
for line in sys.stdin:
    nxt = next(feed, None)
    if line.strip() != "tick" or nxt is None:
        print("done", flush=True)
        break
    now, delta, _ = nxt
    c0 = time.thread_time()
    eng.update(delta, now)
    eng.snapshot()
    c1 = time.thread_time()
    while between is not None and between():
        pass
    print(f"{c1 - c0:.9f} {time.thread_time() - c1:.9f}", flush=True)
"""


def _spawn(root: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(root))
    run = ["--scenario", args.scenario, "--gpu", args.gpu, "--horizon", str(args.horizon),
           "--measure", str(args.measure), "--tick", str(args.tick),
           "--split-classes", str(args.split_classes)]
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(Path(__file__).resolve().parent), *run],
        cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _ask(p: subprocess.Popen[str]) -> tuple[float, float] | None:
    """One tick: (update + snapshot, the background work after it) in thread CPU seconds."""
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write("tick\n")
    p.stdin.flush()
    out = p.stdout.readline().split()
    return None if len(out) != 2 else (float(out[0]), float(out[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True,
                    help="another checkout of the project (its root directory)")
    add_run_args(ap)
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    base = args.baseline.resolve()
    if not (base / "attribution" / "engine" / "live.py").is_file():
        print(f"live_tick_ab: error: {base} is not a checkout of this project", file=sys.stderr)
        return 2
    procs = {"this": _spawn(here, args), "baseline": _spawn(base, args)}
    for p in procs.values():  # both fill their horizon at once (2 cores), then wait
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            print("live_tick_ab: error: a worker failed to start", file=sys.stderr)
            return 2
    times: dict[str, list[tuple[float, float]]] = {"this": [], "baseline": []}
    load0 = os.getloadavg()[0]
    k = 0
    while True:
        order = ("this", "baseline") if k % 2 == 0 else ("baseline", "this")
        got = {name: _ask(procs[name]) for name in order}
        if any(v is None for v in got.values()):
            break
        for name, v in got.items():
            assert v is not None
            times[name].append((v[0] * 1e3, v[1] * 1e3))
        k += 1
    for p in procs.values():
        p.kill()
    this, ref = np.array(times["this"]), np.array(times["baseline"])
    print(f"{args.scenario} on {args.gpu}, {args.horizon:.0f} s horizon, {len(this)} tick pairs "
          f"in lockstep (thread CPU: the tick is update + snapshot; + background, the work run "
          f"between ticks); load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    rows = [("this: tick", this[:, 0]), ("this: tick + background", this.sum(1)),
            (f"{base.name}: tick", ref[:, 0]), (f"{base.name}: tick + background", ref.sum(1))]
    for name, v in rows:
        print(f"  {name:<34} p50 {np.percentile(v, 50):5.1f} ms, p99 "
              f"{np.percentile(v, 99):5.1f} ms, max {v.max():5.1f} ms")
    for name, a, b in (("tick", this[:, 0], ref[:, 0]),
                       ("tick + background", this.sum(1), ref.sum(1))):
        print(f"  this / baseline, {name + ':':<18} p50 "
              f"{np.percentile(a, 50) / np.percentile(b, 50):.2f}, p99 "
              f"{np.percentile(a, 99) / np.percentile(b, 99):.2f}, median per-tick ratio "
              f"{float(np.median(a / b)):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
