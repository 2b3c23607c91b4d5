"""Engine speed: records/s of the batch engine, and ``ppwtop attribute`` end to end, each
against the parse floor of the same trace file.

Owns the engine-speed benchmark (issue #3 goals: the engine alone ≥ 5 M kernel records/s on
one core; ``ppwtop attribute`` on a 1 M-kernel trace within 2× the parse floor).

The trace: a simulated ``launch_bound`` A100 run with ``--kernels`` kernels (default
1 000 000, one launch call per kernel, ~100 ms power readings), written as Kineto
``trace.json.gz`` + nvidia-smi CSV (``ppwtop simulate``'s writers).  The floor is
``gzip.decompress`` + ``orjson.loads`` of that file.

1. ``engine``: ``attribute_arrays`` + ``build_snapshot`` in-process on the simulated trace,
   runs interleaved with floor runs and with runs of the engine's numpy forms (the compiled
   sweeps off: the baseline the sweeps replace, same bits); medians of wall and CPU
   (process) time, kernel records/s, and the engine / floor and compiled / numpy ratios
   measured side by side (the VM is shared, so the ratios and the CPU times are steadier
   than absolute wall times).
2. ``end to end`` (unless ``--skip-end-to-end``): ``python -m ppwtop attribute`` in a
   subprocess (interpreter start, import, engine, snapshot write) against the floor,
   interleaved runs, medians and the ratio.

The goal is per core, so the process (and the ``attribute`` subprocess it starts) is pinned
to one CPU and numpy's BLAS to one thread before numpy loads (``--all-cores`` leaves both as
they are): process CPU time is then one core's time.

Run: ``python benchmarks/engine_speed.py [--runs 3] [--kernels 1000000]``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and "--all-cores" not in sys.argv:
    # before numpy loads: one BLAS thread, and this process (and its children) on one CPU
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})

import argparse
import functools
import gzip
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from attribution import native
from attribution.engine import attribute_arrays, build_snapshot
from attribution.model import Trace
from attribution.sim import simulate
from ppwtop.sim_io import write_kineto, write_smi_csv

KERNELS_PER_S = 12_270  # launch_bound on a100 (1.105 M kernels in 90 s, seed 0)


def floor(path: Path) -> None:
    orjson.loads(gzip.decompress(path.read_bytes()))


def engine(trace: Trace, *, compiled: bool = True) -> None:
    was = native.use(compiled)
    try:
        build_snapshot(trace, attribute_arrays(trace))
    finally:
        native.use(was)


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall s, CPU s) of one call."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _fmt(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--skip-end-to-end", action="store_true")
    ap.add_argument("--all-cores", action="store_true",
                    help="do not pin to one CPU and one BLAS thread")
    args = ap.parse_args(argv)
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    print(f"CPUs this process may use: {sorted(cpus)}; compiled sweeps "
          f"{'built' if native.built() else 'NOT built (numpy forms only)'}")
    seconds = max(2.0, args.kernels / KERNELS_PER_S)
    res = simulate(scenario="launch_bound", gpu="a100", seconds=seconds, seed=0)
    tr = res.trace
    n = len(tr.kernels)
    print(f"launch_bound on a100, {seconds:.0f} s: {n} kernels, {len(tr.apis)} runtime calls, "
          f"{len(tr.copies)} copies, {len(tr.power)} power rows")
    with tempfile.TemporaryDirectory() as d:
        trace_p, power_p, out_p = Path(d) / "trace.json.gz", Path(d) / "power.csv", \
            Path(d) / "snap.json"
        write_kineto(tr, trace_p)
        write_smi_csv(tr, power_p)
        print(f"  trace.json.gz {trace_p.stat().st_size / 1e6:.1f} MB")
        engine(tr)  # warm-up (imports, caches)
        engine(tr, compiled=False)
        eng: list[tuple[float, float]] = []
        ref: list[tuple[float, float]] = []
        fl: list[tuple[float, float]] = []
        for _ in range(args.runs):
            fl.append(_timed(functools.partial(floor, trace_p)))
            eng.append(_timed(functools.partial(engine, tr)))
            ref.append(_timed(functools.partial(engine, tr, compiled=False)))
        e, ec = (statistics.median(x[i] for x in eng) for i in (0, 1))
        f, fc = (statistics.median(x[i] for x in fl) for i in (0, 1))
        print(f"  engine (attribute_arrays + build_snapshot): {e:.3f} s wall median of "
              f"{args.runs} ({_fmt([x[0] for x in eng])}), {ec:.3f} s CPU -> "
              f"{n / e / 1e6:.2f} M kernel records/s wall, {n / ec / 1e6:.2f} M/s CPU "
              f"(goal >= 5 M/s: {'met' if n / e >= 5e6 else 'not met'})")
        print(f"  floor (gzip.decompress + orjson.loads): {f:.3f} s wall "
              f"({_fmt([x[0] for x in fl])}), {fc:.3f} s CPU")
        print(f"  ratio engine / floor, same run: {e / f:.3f}x wall, {ec / fc:.3f}x CPU")
        r, rc = (statistics.median(x[i] for x in ref) for i in (0, 1))
        pair = statistics.median(a[1] / b[1] for a, b in zip(eng, ref, strict=True))
        print(f"  numpy forms (compiled sweeps off), same runs: {r:.3f} s wall "
              f"({_fmt([x[0] for x in ref])}), {rc:.3f} s CPU -> {n / rc / 1e6:.2f} M/s CPU")
        print(f"  ratio compiled / numpy forms, paired CPU: {pair:.3f}x "
              f"({1 / pair:.2f}x faster)")
        if args.skip_end_to_end:
            return 0
        del res, tr
        cmd = [sys.executable, "-m", "ppwtop", "attribute", "--trace", str(trace_p),
               "--power", str(power_p), "--gpu", "a100", "-o", str(out_p)]
        fl2: list[float] = []
        e2e: list[float] = []
        for _ in range(args.runs):
            fl2.append(_timed(functools.partial(floor, trace_p))[0])
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True)
            e2e.append(time.perf_counter() - t0)
        f2, a = statistics.median(fl2), statistics.median(e2e)
        print(f"  floor (gzip.decompress + orjson.loads): {f2:.3f} s median of {args.runs} "
              f"({_fmt(fl2)})")
        print(f"  ppwtop attribute (subprocess, end to end): {a:.3f} s median of {args.runs} "
              f"({_fmt(e2e)})")
        print(f"  ratio attribute / floor: {a / f2:.2f}x (goal <= 2x: "
              f"{'met' if a / f2 <= 2.0 else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
