"""How accurate is the attribution engine?  Simulator ground truth and a real power meter.

For every scenario × GPU preset the simulator runs ``--seconds`` (default 60, seed fixed) and
the engine attributes the trace; against the simulator's truth this measures

* ``err``: energy-weighted error of per-class dynamic energy over the classes the engine calls
  resolvable, Σ|est − true| / Σ true (kernels and copies);
* ``naive``: the same for the time-overlap baseline (``benchmarks/naive.py``) over the same
  classes, with the engine's active idle so that only the split differs;
* ``cov``: fraction of resolvable classes whose 90 % interval contains the truth;
* ``insep``: classes in the truth's fixed-mix groups that are flagged not resolvable or covered;
* ``idle``: |engine idle − true idle over the GPU span| / true span energy;
* ``closure``: |Σ kernels + copies + idle − totals.energy_j| / totals.energy_j;
* ``wall``: wall time of ``attribute``.

Then the real-meter rows (``benchmarks/accuracy_real.py``), skipped when /work/shared is absent.
``--files`` runs the suite through the user's path instead: each simulated trace written as
Kineto JSON + nvidia-smi CSV and read back by the importers (poll-stamped readings, ms
timestamps), as ``ppwtop attribute`` sees it; ``--files --locked-polls`` with nvidia-smi's
polls in step with the sensor (the simulator's ``locked_polls``, as in the real A100 200 s
and V100 logs).  Run from the repository root::

    python benchmarks/accuracy.py [--seconds 60] [--quick] [--files [--locked-polls]]
                                  [--data DIR] [--out FILE]

Prints a table and writes ``benchmarks/accuracy_results.json`` (``--files``:
``accuracy_files_results.json``; with ``--locked-polls``: ``accuracy_files_locked_results.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attribution.engine import attribute
from attribution.model import PowerField
from attribution.sim import SCENARIOS, simulate
from benchmarks.accuracy_real import real_rows
from benchmarks.naive import naive_split
from ppwtop.sim_io import through_files

GPUS = ("v100", "a100", "h100", "h200", "rtx3090", "rtx4090")
QUICK_SCENARIOS = ("varied_mix", "fixed_mix", "two_streams", "average_only")
QUICK_GPUS = ("v100", "a100", "rtx3090")
TIGHT = ("v100", "rtx3090")  # presets whose goal is 3 %
SEED = 7
DEFAULT_DATA = Path("/work/shared/data/real")


def _covers(ci: tuple[float, float], x: float) -> bool:
    return bool(ci[0] - 1e-9 <= x <= ci[1] + 1e-9)


def sim_row(scenario: str, gpu: str, seconds: float, seed: int,
            workload_seed: int | None = None, *, files: bool = False,
            locked_polls: bool = False, clock_wander: bool = False,
            board_draw: bool = False) -> dict[str, Any]:
    spec = (dataclasses.replace(SCENARIOS[scenario], locked_polls=locked_polls,
                                clock_wander=clock_wander, board_draw=board_draw)
            if locked_polls or clock_wander or board_draw else None)
    res = simulate(scenario=scenario, gpu=gpu, seconds=seconds, seed=seed,
                   workload_seed=workload_seed, spec=spec)
    truth, trace = res.truth, res.trace
    if files:
        trace = through_files(trace)
    t0 = time.perf_counter()
    snap = attribute(trace)
    wall_s = time.perf_counter() - t0
    est: dict[str, tuple[float, tuple[float, float], bool]] = {}
    for k in snap.kernels:
        est[f"kernel:{k.name}"] = (k.dynamic_energy_j, k.dynamic_energy_ci_j, k.resolvable)
    for c in snap.copies:
        est[f"copy:{c.kind}/{c.memory}"] = (c.dynamic_energy_j, c.dynamic_energy_ci_j,
                                             c.resolvable)
    true = truth.class_dynamic_j
    missing = sorted(set(true) - set(est))
    res_keys = [c for c in true if c in est and est[c][2]]
    naive = naive_split(trace, 0, snap.totals.active_idle_w,
                        PowerField[truth.default_field.upper()])
    tot_true = sum(true[c] for c in res_keys)
    abs_err = {c: est[c][0] - true[c] for c in res_keys}
    err = sum(abs(v) for v in abs_err.values()) / tot_true if tot_true else float("nan")
    nerr = (sum(abs(naive.get(c, 0.0) - true[c]) for c in res_keys) / tot_true
            if tot_true else float("nan"))
    all_true = sum(true.values())
    err_all = sum(abs(est.get(c, (0.0,))[0] - true[c]) for c in true) / all_true
    nerr_all = sum(abs(naive.get(c, 0.0) - true[c]) for c in true) / all_true
    covered = [c for c in res_keys if _covers(est[c][1], true[c])]
    # interval width: mean relative half-width over resolvable classes; and coverage over
    # every class (flagged or not), which says whether even a flagged row's interval is honest
    half = [(est[c][1][1] - est[c][1][0]) / 2 / true[c] for c in res_keys if true[c] > 0]
    all_keys = [c for c in true if c in est and true[c] > 0]
    covered_all = [c for c in all_keys if _covers(est[c][1], true[c])]
    # diagnostic: the same against the truth as the sensor scales it (gain is not correctable)
    g = truth.gain
    covered_g = [c for c in res_keys if _covers(est[c][1], g * true[c])]
    err_g = (sum(abs(est[c][0] - g * true[c]) for c in res_keys) / (g * tot_true)
             if tot_true else float("nan"))
    insep = [c for g in truth.inseparable for c in g]
    insep_ok = [c for c in insep
                if c not in est or not est[c][2] or _covers(est[c][1], true.get(c, 0.0))]
    true_idle_span = truth.span_idle_energy_j()
    idle_err = abs(snap.totals.idle_energy_j - true_idle_span) / truth.span_energy_j
    cause_err, cause_times = idle_cause_err(snap, truth)
    parts = (sum(k.energy_j for k in snap.kernels) + sum(c.energy_j for c in snap.copies)
             + sum(i.energy_j for i in snap.idle))
    closure = abs(parts - snap.totals.energy_j) / snap.totals.energy_j
    worst = sorted(abs_err.items(), key=lambda kv: -abs(kv[1]))[:3]
    goal = 0.03 if gpu in TIGHT else 0.05
    cov = len(covered) / len(res_keys) if res_keys else float("nan")
    return {
        "scenario": scenario, "gpu": gpu, "seconds": seconds, "seed": seed,
        "classes": len(true), "resolvable": len(res_keys), "missing": missing,
        "err": err, "err_all_classes": err_all,
        "naive_err": nerr, "naive_err_all_classes": nerr_all,
        "coverage": cov, "covered": len(covered), "gain": g,
        "ci_rel_half_width": sum(half) / len(half) if half else float("nan"),
        "ci_half_width_sum": sum(half), "classes_with_ci": len(all_keys),
        "covered_all_classes": len(covered_all),
        "err_vs_sensor_scale": err_g, "covered_vs_sensor_scale": len(covered_g),
        "inseparable": len(insep), "inseparable_ok": len(insep_ok),
        "idle_err": idle_err, "idle_cause_err": cause_err, "idle_cause_time_s": cause_times,
        "closure": closure,
        "total_err_vs_span": (snap.totals.energy_j - truth.span_energy_j) / truth.span_energy_j,
        "p_idle_w": snap.totals.active_idle_w, "true_p_idle_w": truth.active_idle_w,
        "sensor": {"field": snap.gpus[0].sensor.field, "lag_ms": snap.gpus[0].sensor.lag_ms,
                   "true_effective_lag_ms": truth.effective_lag_ms,
                   "window_ms": snap.gpus[0].sensor.window_ms,
                   "period_ms": snap.gpus[0].sensor.period_ms},
        "worst": [{"class": c[:70], "true_j": true[c], "est_j": est[c][0],
                   "ci_j": list(est[c][1]), "rel": d / true[c] if true[c] else float("nan")}
                  for c, d in worst],
        "wall_s": wall_s,
        "pass": {"err": err <= goal, "coverage": 0.85 <= cov <= 0.95,
                 "idle": idle_err <= 0.03, "closure": closure <= 0.001},
    }


def idle_cause_err(snap: Any, truth: Any) -> tuple[float, dict[str, list[float]]]:
    """``Truth.misplaced_idle_share`` of the snapshot's idle time by cause, and the times
    themselves (cause: [true, engine] s)."""
    got: dict[str, float] = {}
    for i in snap.idle:
        got[f"idle.{i.cause}"] = got.get(f"idle.{i.cause}", 0.0) + i.time_s
    true = truth.span_idle_time_s()
    return (truth.misplaced_idle_share(got),
            {k[5:]: [true.get(k, 0.0), got.get(k, 0.0)] for k in sorted(set(got) | set(true))})


def _pf(b: bool) -> str:
    return "ok" if b else "FAIL"


def print_sim(rows: list[dict[str, Any]]) -> None:
    print(f"{'scenario':<18} {'gpu':<8} {'err%':>6} {'naive%':>7} {'all%':>6} {'nall%':>6} "
          f"{'cov':>7} {'cov_g':>5} {'insep':>6} "
          f"{'idle%':>6} {'clos%':>7} {'wall_s':>6}  pass(err/cov/idle/clos)")
    for r in rows:
        p = r["pass"]
        print(f"{r['scenario']:<18} {r['gpu']:<8} {100 * r['err']:6.2f} "
              f"{100 * r['naive_err']:7.2f} {100 * r['err_all_classes']:6.2f} "
              f"{100 * r['naive_err_all_classes']:6.2f} {r['covered']:>3}/{r['resolvable']:<3} "
              f"{r['covered_vs_sensor_scale']:>5} "
              f"{r['inseparable_ok']:>2}/{r['inseparable']:<3} {100 * r['idle_err']:6.2f} "
              f"{100 * r['closure']:7.3f} {r['wall_s']:6.2f}  "
              f"{_pf(p['err'])}/{_pf(p['coverage'])}/{_pf(p['idle'])}/{_pf(p['closure'])}")


def print_real(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'real run':<10} {'field':<8} {'meter_J':>8} {'engine_J':>9} {'full%':>7} "
          f"{'dyn%':>7} {'ci':>4} {'res':>4} {'smi∫%':>7} {'naive%':>7}  sensor")
    for r in rows:
        if "skipped" in r:
            print(f"{r['run']:<10} {r['field']:<8} skipped: {r['skipped']}")
            continue
        print(f"{r['run']:<10} {r['field']:<8} {r['meter_kernel_j']:8.1f} "
              f"{r['engine_kernel_j']:9.1f} {100 * r['engine_full_err']:+7.2f} "
              f"{100 * r['engine_dyn_err']:+7.2f} {'yes' if r['ci_covers_meter'] else 'no':>4} "
              f"{'yes' if r.get('resolvable') else 'no':>4} "
              f"{100 * r['smi_integral_err']:+7.2f} {100 * r['naive_split_full_err']:+7.2f}  "
              f"{r['sensor']}")


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    n_res = sum(r["resolvable"] for r in rows)

    def med(key: str) -> float:
        v = sorted(r[key] for r in rows if r[key] == r[key])
        return v[len(v) // 2] if v else float("nan")
    return {
        "rows": len(rows),
        "pass_err": sum(r["pass"]["err"] for r in rows),
        "pass_coverage": sum(r["pass"]["coverage"] for r in rows),
        "pass_idle": sum(r["pass"]["idle"] for r in rows),
        "pass_closure": sum(r["pass"]["closure"] for r in rows),
        "rows_with_resolvable": sum(r["resolvable"] > 0 for r in rows),
        "median_err": med("err"),
        "max_err": max((r["err"] for r in rows if r["err"] == r["err"]), default=float("nan")),
        "median_naive_err": med("naive_err"),
        "median_err_all_classes": med("err_all_classes"),
        "median_naive_err_all_classes": med("naive_err_all_classes"),
        "pooled_coverage": sum(r["covered"] for r in rows) / n_res if n_res else float("nan"),
        "pooled_coverage_vs_sensor_scale": (sum(r["covered_vs_sensor_scale"] for r in rows)
                                            / n_res if n_res else float("nan")),
        "median_err_vs_sensor_scale": med("err_vs_sensor_scale"),
        "mean_ci_rel_half_width": (sum(r["ci_half_width_sum"] for r in rows) / n_res
                                   if n_res else float("nan")),
        "pooled_coverage_all_classes": (sum(r["covered_all_classes"] for r in rows)
                                        / max(sum(r["classes_with_ci"] for r in rows), 1)),
        "pooled_coverage_by_gpu": {
            g: (sum(r["covered"] for r in rows if r["gpu"] == g)
                / max(sum(r["resolvable"] for r in rows if r["gpu"] == g), 1))
            for g in dict.fromkeys(r["gpu"] for r in rows)},
        "resolvable_by_gpu": {g: sum(r["resolvable"] for r in rows if r["gpu"] == g)
                              for g in dict.fromkeys(r["gpu"] for r in rows)},
        "max_idle_err": max(r["idle_err"] for r in rows),
        "median_idle_cause_err": med("idle_cause_err"),
        "max_idle_cause_err": max(r["idle_cause_err"] for r in rows),
        "max_closure": max(r["closure"] for r in rows),
        "total_wall_s": sum(r["wall_s"] for r in rows),
    }


def _git_state() -> str:
    """HEAD and whether the engine files differ from it (another engineer may be editing)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "attribution"], cwd=root,
                               check=True, capture_output=True, text=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    files = [ln[3:] for ln in dirty if ln.strip()]
    return head + (f" + uncommitted {', '.join(files)}" if files else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=None, help="simulated seconds (60)")
    ap.add_argument("--quick", action="store_true", help="20 s and fewer combinations")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--workload-seed", type=int, default=None,
                    help="draw other workload definitions (phase schedules and mixes) too")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--files", action="store_true",
                    help="through the files: Kineto JSON + nvidia-smi CSV written and read "
                         "back, as `ppwtop attribute` reads them (no real rows)")
    ap.add_argument("--locked-polls", action="store_true",
                    help="with --files: nvidia-smi's polls in step with the sensor's publishes "
                         "(as in the real A100 and V100 logs) instead of free-running")
    ap.add_argument("--clock-wander", action="store_true",
                    help="the sensor's publish clock wanders against the host's (the "
                         "simulator's clock_wander; with --locked-polls the polls follow it, "
                         "as the real A100 200 s log's stamps do)")
    ap.add_argument("--board-draw", action="store_true",
                    help="each consumer card's ramp and tail drawn per run, off the engine's "
                         "model grid (the simulator's board_draw)")
    ap.add_argument("--gpus", default=None,
                    help="comma-separated presets (default all; with --quick its three)")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: accuracy_results.json, accuracy_files_results.json or "
                         "accuracy_files_locked_results.json beside this script")
    a = ap.parse_args(argv)
    if a.locked_polls and not a.files:
        ap.error("--locked-polls needs --files (the polls are what the CSV is written from)")
    if (a.clock_wander or a.board_draw or a.gpus) and a.out is None:
        ap.error("--clock-wander, --board-draw and --gpus need --out (they are checks, not "
                 "the kept tables)")
    if a.out is None:
        name = ("accuracy_files_locked_results.json" if a.locked_polls else
                "accuracy_files_results.json" if a.files else "accuracy_results.json")
        a.out = Path(__file__).resolve().parent / name
    seconds = a.seconds if a.seconds is not None else (20.0 if a.quick else 60.0)
    scen = QUICK_SCENARIOS if a.quick else tuple(SCENARIOS)
    gpus = (tuple(a.gpus.split(",")) if a.gpus else QUICK_GPUS if a.quick else GPUS)
    t0 = time.perf_counter()
    rows = []
    for s in scen:
        for g in gpus:
            rows.append(sim_row(s, g, seconds, a.seed, a.workload_seed, files=a.files,
                                locked_polls=a.locked_polls, clock_wander=a.clock_wander,
                                board_draw=a.board_draw))
    print_sim(rows)
    summ = summary(rows)
    print("\nsummary:", orjson.dumps(summ, option=orjson.OPT_SERIALIZE_NUMPY).decode())
    real = [] if a.files else real_rows(a.data, a.quick)
    if a.files:
        print("\nreal-meter rows: not with --files (they are read from their own logs)")
    elif real:
        print_real(real)
    else:
        print(f"\nreal-meter rows skipped: {a.data} not found")
    out = {
        "schema": "ppwtop.accuracy/1",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.processor()} "
                   f"python {platform.python_version()}",
        "command": " ".join(["python", "benchmarks/accuracy.py", *(argv or sys.argv[1:])]),
        "engine_version": _git_state(),
        "seconds": seconds, "seed": a.seed, "workload_seed": a.workload_seed,
        "through_files": a.files, "locked_polls": a.locked_polls,
        "clock_wander": a.clock_wander, "board_draw": a.board_draw,
        "summary": summ, "sim": rows, "real": real,
        "elapsed_s": time.perf_counter() - t0,
    }
    a.out.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print(f"\nwrote {a.out} in {out['elapsed_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
