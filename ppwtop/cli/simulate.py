"""`ppwtop simulate`: run the built-in simulator and write what a profiled job would leave
behind (Kineto trace, nvidia-smi CSV) plus the ground truth."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ppwtop.cli.common import nonempty_path, parser, seed_int, sim_seconds
from ppwtop.errors import InputError, PpwtopError

MAX_EVENTS = 6_000_000
"""The most trace events (kernels, copies, memsets, host calls, markers) ``simulate`` writes:
a Kineto document is built as Python objects before it is written, about 1.1 kB an event at
peak (an audit: launch_bound for 900 s, 21.9 M events, peaked at 23.5 GB and nearly ran a
23 GB machine out of memory).  Every scenario but launch_bound stays under it at 900 s."""


def build_parser() -> argparse.ArgumentParser:
    from attribution.presets import PRESETS
    from attribution.sim import SCENARIOS

    p = parser("simulate", "Simulate a GPU job with known ground truth and write "
               "DIR/trace.json.gz (Kineto), DIR/power.csv (nvidia-smi) and DIR/truth.json.")
    p.add_argument("--scenario", default="varied_mix",
                   help=f"workload scenario: {', '.join(SCENARIOS)} (default varied_mix)")
    p.add_argument("--gpu", default=None,
                   help=f"GPU preset: {', '.join(PRESETS)} (default: the scenario's own)")
    p.add_argument("--seconds", type=sim_seconds, default=30.0,
                   help="simulated wall time in seconds (1 to 900, default 30)")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="seed of this run's realisation and sensor noise (default 0)")
    p.add_argument("--workload-seed", type=seed_int, default=None, metavar="N",
                   help="seed of the workload definition (phases, mix); default: the "
                        "scenario's fixed workload, so other --seed values re-run the same job")
    p.add_argument("--out", required=True, type=nonempty_path, help="output directory")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from attribution.presets import PRESETS
    from attribution.sim import SCENARIOS, simulate
    from ppwtop.sim_io import write_all

    if args.scenario not in SCENARIOS:
        raise PpwtopError(f"unknown scenario {args.scenario!r} (known: {', '.join(SCENARIOS)})")
    if args.gpu is not None and args.gpu.strip().lower() not in PRESETS:
        raise PpwtopError(f"unknown GPU model {args.gpu!r} (known: {', '.join(PRESETS)})")
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory")
    t = time.perf_counter()
    res = simulate(args.scenario, args.gpu.strip().lower() if args.gpu else None,
                   args.seconds, args.seed, workload_seed=args.workload_seed)
    sim = res.trace
    n = len(sim.kernels) + len(sim.copies) + len(sim.memsets) + len(sim.apis) + len(sim.markers)
    if n > MAX_EVENTS:
        most_s = int(args.seconds * MAX_EVENTS / n)
        raise PpwtopError(f"{args.scenario} for {args.seconds:g} s holds {n / 1e6:.1f} M trace "
                          f"events; writing them as Kineto JSON takes about "
                          f"{n * 1.1e3 / 1e9:.0f} GB of memory, so at most "
                          f"{MAX_EVENTS / 1e6:.0f} M are written: use --seconds {most_s} or less")
    try:
        paths = write_all(res, out)
    except OSError as e:
        raise InputError(out, f"cannot write: {e.strerror or e}") from None
    tr = res.truth
    print(f"simulated {args.scenario} on {tr.gpu} for {args.seconds:g} s (seed {args.seed}): "
          f"{len(res.trace.kernels)} kernels, {len(res.trace.copies)} copies, "
          f"{tr.total_energy_j:.1f} J in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    for p in paths:
        print(p)
    return 0
