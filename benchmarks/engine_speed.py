"""Engine speed: records/s of the batch engine, and ``ppwtop attribute`` end to end vs the parse
floor of the same file.

Owns the engine-speed benchmark (issue #3 goals: the engine alone ≥ 5 M kernel records/s on
one core; ``ppwtop attribute`` on a 1 M-kernel trace within 2× the parse floor).

1. ``engine``: ``attribute_arrays`` + ``build_snapshot`` in-process on a simulated
   ``launch_bound`` A100 run with ``--kernels`` kernels (default 1 000 000, one launch call per
   kernel, ~100 ms power readings), median of ``--runs`` runs; prints kernel records/s.
2. ``end to end``: the same run written as Kineto ``trace.json.gz`` + nvidia-smi CSV
   (``ppwtop simulate``'s writers), then ``python -m ppwtop attribute`` in a subprocess
   (interpreter start, import, engine, snapshot write) against the floor = ``gzip.decompress``
   + ``orjson.loads`` of the same trace file, interleaved runs, medians and the ratio.

Run: ``python benchmarks/engine_speed.py [--runs 3] [--kernels 1000000]``.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from attribution.engine import attribute_arrays, build_snapshot
from attribution.sim import simulate
from ppwtop.sim_io import write_kineto, write_smi_csv

KERNELS_PER_S = 12_270  # launch_bound on a100 (1.105 M kernels in 90 s, seed 0)


def floor(path: Path) -> None:
    orjson.loads(gzip.decompress(path.read_bytes()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--skip-end-to-end", action="store_true")
    args = ap.parse_args(argv)
    seconds = max(2.0, args.kernels / KERNELS_PER_S)
    res = simulate(scenario="launch_bound", gpu="a100", seconds=seconds, seed=0)
    tr = res.trace
    n = len(tr.kernels)
    print(f"launch_bound on a100, {seconds:.0f} s: {n} kernels, {len(tr.apis)} runtime calls, "
          f"{len(tr.copies)} copies, {len(tr.power)} power rows")
    eng: list[float] = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        build_snapshot(tr, attribute_arrays(tr))
        eng.append(time.perf_counter() - t0)
    e = statistics.median(eng)
    print(f"  engine (attribute_arrays + build_snapshot): {e:.3f} s median of {args.runs} "
          f"({', '.join(f'{x:.2f}' for x in eng)}) -> {n / e / 1e6:.2f} M kernel records/s "
          f"(goal >= 5 M/s: {'met' if n / e >= 5e6 else 'not met'})")
    if args.skip_end_to_end:
        return 0
    with tempfile.TemporaryDirectory() as d:
        trace_p, power_p, out_p = Path(d) / "trace.json.gz", Path(d) / "power.csv", \
            Path(d) / "snap.json"
        write_kineto(tr, trace_p)
        write_smi_csv(tr, power_p)
        del res, tr
        cmd = [sys.executable, "-m", "ppwtop", "attribute", "--trace", str(trace_p),
               "--power", str(power_p), "--gpu", "a100", "-o", str(out_p)]
        fl: list[float] = []
        e2e: list[float] = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            floor(trace_p)
            fl.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True)
            e2e.append(time.perf_counter() - t0)
        f, a = statistics.median(fl), statistics.median(e2e)
        print(f"  trace.json.gz {trace_p.stat().st_size / 1e6:.1f} MB")
        print(f"  floor (gzip.decompress + orjson.loads): {f:.3f} s median of {args.runs} "
              f"({', '.join(f'{x:.2f}' for x in fl)})")
        print(f"  ppwtop attribute (subprocess, end to end): {a:.3f} s median of {args.runs} "
              f"({', '.join(f'{x:.2f}' for x in e2e)})")
        print(f"  ratio attribute / floor: {a / f:.2f}x (goal <= 2x: "
              f"{'met' if a / f <= 2.0 else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
