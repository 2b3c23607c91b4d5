"""Is `ppwtop diff` right?  Injected regressions, same-config re-runs and the ranking suite.

On the simulator (``varied_mix`` on an A100, ``--seconds`` per run, default 12):

* **injected pairs**: a baseline run (seed s) against a run of the same workload with one
  mechanism made worse (seed s + 1000, so the noise differs too), each sized to cost roughly
  10 % of a step's energy: launch gaps (90 % of launches late by a median 350 µs), host stalls
  (60 % of steps instead of 10 %), sync waits (every step, 9 ms), a 32 MB pageable input copy
  added to every step, the GEMM 20 % slower at 10 % more power, a power-cap clamp over 80 % of
  the run (clock × 0.6, ΔP × 0.6).  Counted: verdict == "regression", and the injected mechanism on
  top of the decomposition.
* **same-config pairs**: the same workload re-run with another ``seed`` (same
  ``workload_seed``): the false-regression rate (verdict "regression") over ``--same`` pairs
  (default 40) must stay <= 5 %; false improvements are counted too.  Twice: on one board
  (each run's readings divided by its seed's sensor gain, one uuid: a CI machine re-running
  the job) and on two boards (each seed its own gain and uuid, as the simulator draws them).
  Injected pairs run on one board.
* **ranking suite**: every scenario once; top-3 overlap of the inefficiency ranking with the
  simulator's truth counted the ranking's way (``benchmarks/ranking_truth.py``).

Run from the repository root (2 worker processes at most)::

    python benchmarks/diff_calibration.py [--seconds 12] [--same 40] [--injected 6]
        [--long-pairs N --long-seconds 48] [--workers 2] [--no-suite] [--out FILE]

Prints tables and writes ``benchmarks/diff_calibration_results.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ranking_truth import top_overlap, truth_mechanisms

from attribution.diff import diff
from attribution.engine import attribute
from attribution.model import EnergyBatch, PowerBatch
from attribution.sim import SCENARIOS, SimResult, simulate
from attribution.sim.scenarios import ClampSpec, CopySpec, ScenarioSpec
from attribution.snapshot import Snapshot

BASE = "varied_mix"
GPU = "a100"
SEED_OFFSET = 1000
BOARD_UUID = "GPU-sim-calibration-board"


def _variants() -> dict[str, tuple[ScenarioSpec, str]]:
    b = SCENARIOS[BASE]
    gemm = b.classes[0]
    slow = dataclasses.replace(gemm, median_us=gemm.median_us * 1.2,
                               dp_frac=min(1.0, gemm.dp_frac * 1.1))
    return {
        "launch_gaps": (dataclasses.replace(b, p_launch_gap=0.9, launch_gap_us=350.0),
                        "idle.launch_gap"),
        "host_stalls": (dataclasses.replace(b, p_stall=0.6), "idle.host_stall"),
        "sync_waits": (dataclasses.replace(b, p_sync=1.0, sync_ms=9.0), "idle.sync_wait"),
        "pageable_copy": (dataclasses.replace(
            b, copies=(*b.copies, CopySpec("HtoD", "pageable", 32 << 20))), "copy:HtoD/pageable"),
        "slower_gemm": (dataclasses.replace(b, classes=(slow, *b.classes[1:])),
                        f"kernel:{gemm.name}"),
        "clamp": (dataclasses.replace(b, clamps=(ClampSpec(0.1, 0.9, clock_ratio=0.6,
                                                           power_factor=0.6),)),
                  "clamp.sw_power_cap"),
    }


def _same_board(sim: SimResult) -> None:
    """Re-read the run through one board: readings and counter divided by this seed's sensor
    gain, one uuid for every run (the simulator draws a board per seed)."""
    tr, g = sim.trace, 1.0 / sim.truth.gain
    cols = tr.power.columns()
    cols["power_mw"] = np.rint(cols["power_mw"] * g).astype(np.int64)
    tr.power = PowerBatch(**cols)
    cols = tr.energy.columns()
    cols["energy_mj"] = np.rint(cols["energy_mj"] * g).astype(np.int64)
    tr.energy = EnergyBatch(**cols)
    tr.devices = [dataclasses.replace(d, uuid=BOARD_UUID) for d in tr.devices]


def _run(job: tuple[str, int, float, bool]) -> tuple[tuple[str, int, bool], Snapshot, float]:
    variant, seed, seconds, one_board = job
    spec = None if variant == "base" else _variants()[variant][0]
    t0 = time.perf_counter()
    sim = simulate(BASE, GPU, seconds, seed=seed, spec=spec)
    if one_board:
        _same_board(sim)
    snap = attribute(sim.trace)
    return (variant, seed, one_board), snap, time.perf_counter() - t0


def _suite(job: tuple[str, float]) -> dict[str, Any]:
    name, seconds = job
    sim = simulate(name, seconds=seconds, seed=7)
    snap = attribute(sim.trace)
    truth = truth_mechanisms(sim)
    eng = [i.mechanism for i in snap.inefficiencies]
    est = {i.mechanism: i.energy_j for i in snap.inefficiencies}
    top_t = sorted(truth, key=lambda m: -truth[m])[:3]
    errs = {m: (est.get(m, 0.0) - truth[m]) / truth[m] for m in top_t}
    return {"scenario": name, "top3_overlap": top_overlap(eng, truth), "engine_top3": eng[:3],
            "truth_top3": top_t, "top1_agrees": bool(eng[:1] == top_t[:1]),
            "truth_top3_rel_err": errs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--same", type=int, default=40, help="same-config pairs")
    ap.add_argument("--injected", type=int, default=6, help="pairs per injected mechanism")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-suite", action="store_true")
    ap.add_argument("--long-pairs", type=int, default=0,
                    help="extra same-config one-board pairs of --long-seconds each")
    ap.add_argument("--long-seconds", type=float, default=48.0)
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent / "diff_calibration_results.json")
    a = ap.parse_args(argv)
    workers = max(1, min(2, a.workers))
    variants = _variants()
    jobs = []
    for one in (True, False):
        jobs += [("base", s, a.seconds, one) for s in range(a.same)]
        jobs += [("base", s + SEED_OFFSET, a.seconds, one) for s in range(a.same)]
    jobs += [("base", s, a.seconds, True) for s in range(a.same, a.injected)]
    jobs += [(v, s + SEED_OFFSET, a.seconds, True) for v in variants for s in range(a.injected)]
    long_jobs = [("base", s + o, a.long_seconds, True) for s in range(a.long_pairs)
                 for o in (2 * SEED_OFFSET, 3 * SEED_OFFSET)]
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        runs = {k: (snap, w) for k, snap, w in pool.imap_unordered(_run, jobs)}
        long_runs = {k: snap for k, snap, _ in pool.imap_unordered(_run, long_jobs)}
        suite = [] if a.no_suite else pool.map(_suite, [(n, 15.0) for n in SCENARIOS])
    wall = time.perf_counter() - t0

    same: dict[str, list[dict[str, Any]]] = {"one_board": [], "two_boards": []}
    for one, key in ((True, "one_board"), (False, "two_boards")):
        for s in range(a.same):
            d = diff(runs[("base", s, one)][0], runs[("base", s + SEED_OFFSET, one)][0], seed=s)
            same[key].append({"seed": s, "verdict": d.verdict, "rel_delta": d.relative_delta,
                              "rel_ci": d.relative_delta_ci})
    long_rows = []
    for s in range(a.long_pairs):
        d = diff(long_runs[("base", s + 2 * SEED_OFFSET, True)],
                 long_runs[("base", s + 3 * SEED_OFFSET, True)], seed=s)
        long_rows.append({"seed": s, "verdict": d.verdict, "rel_delta": d.relative_delta,
                          "rel_ci": d.relative_delta_ci})
    if long_rows:
        same["one_board_long"] = long_rows
    inj: dict[str, Any] = {}
    for v, (_, expect) in variants.items() if a.injected else ():
        rows: list[dict[str, Any]] = []
        for s in range(a.injected):
            d = diff(runs[("base", s, True)][0], runs[(v, s + SEED_OFFSET, True)][0], seed=s)
            rows.append({"seed": s, "verdict": d.verdict, "rel_delta": d.relative_delta,
                         "top": d.mechanisms[0].mechanism if d.mechanisms else None,
                         "top_share": d.mechanisms[0].share_of_delta if d.mechanisms else None})
        inj[v] = {"expect": expect, "pairs": rows,
                  "verdict_right": sum(r["verdict"] == "regression" for r in rows) / len(rows),
                  "top_right": sum(r["top"] == expect for r in rows) / len(rows),
                  "median_rel_delta": sorted(r["rel_delta"] for r in rows)[len(rows) // 2]}
    rates = {k: {v: sum(r["verdict"] == v for r in rows) / max(1, len(rows))
                 for v in ("regression", "improvement", "neutral", "inconclusive")}
             for k, rows in same.items()}

    print(f"{'injected':<14} {'expect':<22} {'verdict ok':>10} {'top ok':>7} {'rel delta':>9}")
    for v, r in inj.items():
        print(f"{v:<14} {r['expect'][:22]:<22} {r['verdict_right']:>10.0%} {r['top_right']:>7.0%} "
              f"{r['median_rel_delta']:>+9.1%}")
    for k, r in rates.items():
        print(f"same-config pairs ({k}): {len(same[k])}; false regression {r['regression']:.1%}, "
              f"false improvement {r['improvement']:.1%}, neutral {r['neutral']:.1%}, "
              f"inconclusive {r['inconclusive']:.1%}")
    if suite:
        print(f"\n{'scenario':<18} {'top3':>5} {'top1':>5}  engine top-3 | truth top-3")
        for r in suite:
            print(f"{r['scenario']:<18} {r['top3_overlap']:>5.2f} {r['top1_agrees']!s:>5}  "
                  f"{', '.join(r['engine_top3'])} | {', '.join(r['truth_top3'])}")
        mean = sum(r["top3_overlap"] for r in suite) / len(suite)
        print(f"mean top-3 overlap {mean:.2f}")
    per_run = sorted(w for _, w in runs.values())
    print(f"\nwall {wall:.0f} s with {workers} workers"
          + (f"; per run {per_run[len(per_run) // 2]:.2f} s median" if per_run else ""))
    out = {"date": datetime.date.today().isoformat(), "seconds": a.seconds, "gpu": GPU,
           "base": BASE, "injected": inj, "same_config": {"pairs": same, "rates": rates},
           "suite": suite, "wall_s": wall}
    a.out.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
