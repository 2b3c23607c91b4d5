"""Short runs: how honest the engine is on traces of a few seconds, beside the rules before.

A PyTorch profiler trace usually spans a few steps: 0.2-3 s.  For every scenario × preset
at each ``--seconds`` (default 1, 1.5, 2, 3, 5) and each ``--seeds`` (default 0, 1, 2) this
attributes the simulated run twice, side by side on the same traces:

* **now**: the engine as it is;
* **before**: the rules before 2026-12-05 put back by monkeypatching (the bootstrap resampling
  one-second blocks however short the run, its spread unscaled, P_idle left to the fit under
  ``idle_place.MIN_JUDGED`` readings, the phase-lock test only from 32 readings, the ΔP
  prior at its full weight however short the run);

and prints per duration: the resolvable classes whose 90 % interval holds the truth (the
issue's 85-95 % goal), the share of all classes (flagged too) whose interval holds it, P_idle's
median error against the truth × the board's gain and the runs more than 20 % off, and the
runs whose idle energy is off by more than 3 % of the total (``Truth.span_idle_energy_j``),
on the data-centre presets and on all.

    python benchmarks/short_runs.py [--seconds 1,1.5,2,3,5] [--seeds 0,1,2] [--files]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attribution.engine import aliasing, build, idle_place, live_solve, regress
from attribution.sim import SCENARIOS
from benchmarks.accuracy import GPUS, _git_state, sim_row

CONSUMER = ("rtx3090", "rtx4090")


@contextlib.contextmanager
def rules_before() -> Iterator[None]:
    """The engine's short-run rules as they were before 2026-12-05."""
    judge = idle_place.judge_idle

    def judge_before(p_idle_w: float, board_w: float | None, **kw: Any
                     ) -> idle_place.IdleJudgement:
        if kw["n"] < idle_place.MIN_JUDGED:
            return idle_place.NOT_JUDGED
        return judge(p_idle_w, board_w, **kw)

    patches: list[tuple[Any, str, Any]] = [
        (build, "resample_block", lambda n_rows, preferred, floor: preferred),
        (build, "small_sample_scale", lambda n_rows, preferred: 1.0),
        (live_solve, "small_sample_scale", lambda n_rows, preferred: 1.0),
        (aliasing, "MIN_READINGS", 32),
        (build, "judge_idle", judge_before),
        (regress, "prior_scale_for", lambda span_s: 1.0),
    ]
    saved = [(m, name, getattr(m, name)) for m, name, _ in patches]
    for m, name, value in patches:
        setattr(m, name, value)
    try:
        yield
    finally:
        for m, name, value in saved:
            setattr(m, name, value)


def rows(seconds: float, seeds: list[int], files: bool = False) -> list[dict[str, Any]]:
    """:func:`accuracy.sim_row` of every scenario × preset × seed at ``seconds`` (runs the
    simulator cannot make that short are skipped); ``files``: through Kineto JSON and an
    nvidia-smi CSV, as ``ppwtop attribute`` reads them."""
    out = []
    for scenario in SCENARIOS:
        for gpu in GPUS:
            for seed in seeds:
                try:
                    out.append(sim_row(scenario, gpu, seconds, seed, files=files))
                except ValueError:  # e.g. the demo scenario needs ≥ 1 s
                    continue
    return out


def summary(rs: list[dict[str, Any]]) -> str:
    """One line: coverage of resolvable classes, of all classes, P_idle and idle error."""
    res = sum(r["resolvable"] for r in rs)
    held = sum(r["covered"] for r in rs)
    n_all = sum(r["classes_with_ci"] for r in rs)
    held_all = sum(r["covered_all_classes"] for r in rs)
    p_err = [abs(r["p_idle_w"] / (r["true_p_idle_w"] * r["gain"]) - 1.0) for r in rs]
    dc = [r for r in rs if r["gpu"] not in CONSUMER]
    return (f"resolvable held {held:4d}/{res:<4d} ({100 * held / max(res, 1):5.1f} %)  "
            f"all classes {100 * held_all / max(n_all, 1):5.1f} %  "
            f"P_idle median {100 * statistics.median(p_err):5.1f} %, >20 % off "
            f"{sum(p > 0.2 for p in p_err):3d}/{len(rs)}  "
            f"idle >3 %: data-centre {sum(r['idle_err'] > 0.03 for r in dc):3d}/{len(dc)}, "
            f"all {sum(r['idle_err'] > 0.03 for r in rs):3d}/{len(rs)}")


def counts(rs: list[dict[str, Any]]) -> dict[str, int]:
    """What the status table reads (benchmarks/accuracy_status.py): runs, resolvable classes
    and how many hold the truth, all classes and how many hold it, runs with idle > 3 %."""
    return {"runs": len(rs), "resolvable": sum(r["resolvable"] for r in rs),
            "held": sum(r["covered"] for r in rs),
            "classes": sum(r["classes_with_ci"] for r in rs),
            "classes_held": sum(r["covered_all_classes"] for r in rs),
            "idle_over_3pct": sum(r["idle_err"] > 0.03 for r in rs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", default="1,1.5,2,3,5")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--files", action="store_true",
                    help="through Kineto JSON + nvidia-smi CSV (poll-stamped readings)")
    ap.add_argument("--out", type=Path, default=None,
                    help="write the counts as JSON (benchmarks/short_runs_results.json is "
                         "the kept one the status table reads)")
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    pooled = {"now": [0, 0], "before": [0, 0]}
    kept: dict[str, Any] = {
        "schema": "ppwtop.short_runs/1",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "engine_version": _git_state(), "seeds": seeds, "files": a.files,
        "command": "python benchmarks/short_runs.py " + " ".join(argv or sys.argv[1:]),
        "durations": {}}
    for seconds in (float(s) for s in a.seconds.split(",")):
        now = rows(seconds, seeds, a.files)
        with rules_before():
            before = rows(seconds, seeds, a.files)
        print(f"{seconds:g} s, {len(now)} runs")
        for tag, rs in (("before", before), ("now", now)):
            print(f"  {tag:<6} {summary(rs)}")
            pooled[tag][0] += sum(r["covered"] for r in rs)
            pooled[tag][1] += sum(r["resolvable"] for r in rs)
        kept["durations"][f"{seconds:g}"] = {"now": counts(now), "before": counts(before)}
    for tag, (held, res) in pooled.items():
        print(f"pooled, {tag}: {held}/{res} resolvable classes held "
              f"({100 * held / max(res, 1):.1f} %)")
    if a.out is not None:
        a.out.write_bytes(orjson.dumps(kept, option=orjson.OPT_INDENT_2))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
