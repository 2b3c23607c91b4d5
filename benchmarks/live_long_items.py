"""The live view on jobs whose kernels run longer than its settling delay.

Owns the measurement behind docs/accuracy.md ("Live engine: items longer than the settling
delay"). Simulates varied_mix with one more kernel class whose instances run ``--long-ms``
(median; lognormal σ 0.3) and feeds it to :class:`attribution.engine.live.LiveEngine` tick by
tick twice, side by side: settling at ``now − SETTLE_S`` only (before 2026-12-05) and no
further than the earliest launch whose record has not come (``live_pending``). Prints per
run, for each: P_idle against the truth, the long class's calls, busy time and dynamic
energy against the truth over the live window (each instance's share inside it), and
Σ|Δ| / Σ over every kernel class, and how far the view's end runs behind now (from
the first snapshot on); then the medians and the ratio of the two errors.

Run: ``python benchmarks/live_long_items.py [--long-ms 1200] [--gpus h100,a100] [--seeds 1,2,3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import numpy as np

from attribution.engine.deltas import Deltas
from attribution.engine.live import LiveEngine
from attribution.sim import SCENARIOS, simulate
from attribution.sim.scenarios import LONG_KERNEL as LONG
from attribution.sim.scenarios import with_long_kernels


def true_dynamic_in(res: Any, win: tuple[int, int]) -> tuple[dict[str, float], int, float]:
    """Per kernel class: the true dynamic energy × board gain of each kernel's part inside
    ``win`` (its energy × the share of its time inside); the long class's calls and time."""
    k = res.trace.kernels
    s, e = np.clip(k.start_ns, *win), np.clip(k.end_ns, *win)
    frac = (e - s) / np.maximum(k.end_ns - k.start_ns, 1)
    ids = k.name_id.astype(np.int64)
    joules = np.bincount(ids, weights=res.truth.kernel_dynamic_j * frac) * res.truth.gain
    names = [res.trace.strings[i] for i in range(len(joules))]
    out = {n: float(j) for n, j in zip(names, joules, strict=True) if j > 0}
    li = names.index(LONG)
    on = (ids == li) & (e > s)
    return out, int(on.sum()), float((e - s)[on].sum() * 1e-9)


def run(res: Any, horizon_s: float, floor: bool) -> dict[str, float]:
    tr = res.trace
    eng = LiveEngine(devices=tr.devices, horizon_s=horizon_s)
    if not floor:  # the settling of before: a fixed delay behind now
        eng.pending.floor_ns = lambda now_ns: None  # type: ignore[method-assign]
    deltas = Deltas(tr)
    span = tr.gpu_span_ns()
    assert span is not None
    prev, now, snap, lags = span[0] - 1, span[0], None, []
    while now < span[1]:
        now = min(now + 500_000_000, span[1])
        eng.update(deltas.between(prev, now), now)
        snap = eng.snapshot() or snap
        if snap is not None and eng.done_ns is not None:  # from the first snapshot on
            lags.append((now - eng.done_ns) * 1e-9)
        prev = now
    assert snap is not None
    win = (snap.window.start_ns, snap.window.end_ns)
    truth, calls, time_s = true_dynamic_in(res, win)
    rows = {r.name: r for r in snap.kernels}
    lk = rows.get(LONG)
    tot = sum(truth.values())
    err = sum(abs((rows[n].dynamic_energy_j if n in rows else 0.0) - j)
              for n, j in truth.items()) / tot
    p_true = res.truth.active_idle_w * res.truth.gain
    return {"p_idle": snap.totals.active_idle_w / p_true - 1.0,
            "calls": lk.calls if lk else 0, "calls_true": calls,
            "time": (lk.time_s if lk else 0.0) / time_s - 1.0,
            "long": (lk.dynamic_energy_j if lk else 0.0) / truth[LONG] - 1.0,
            "all": err, "view_lag_p50_s": statistics.median(lags), "view_lag_max_s": max(lags)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long-ms", type=float, default=1200.0)
    ap.add_argument("--gpus", default="h100,a100")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--horizon", type=float, default=30.0)
    a = ap.parse_args(argv)
    spec = with_long_kernels(SCENARIOS["varied_mix"], a.long_ms)
    errs: dict[bool, list[float]] = {False: [], True: []}
    for gpu in a.gpus.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            res = simulate(scenario="varied_mix", gpu=gpu, seconds=a.seconds, seed=seed,
                           spec=spec)
            for floor in (False, True):
                r = run(res, a.horizon, floor)
                errs[floor].append(r["all"])
                print(f"{gpu:8s} seed {seed} {'pending floor' if floor else 'fixed delay  '}: "
                      f"P_idle {r['p_idle']:+7.1%} | long class calls {r['calls']:3.0f} / "
                      f"{r['calls_true']:3.0f}, time {r['time']:+6.1%}, dynamic "
                      f"{r['long']:+7.1%} | all classes Σ|Δ|/Σ {r['all']:6.1%} | view behind "
                      f"now: median {r['view_lag_p50_s']:.2f} s, max {r['view_lag_max_s']:.2f} s",
                      flush=True)
    before, after = statistics.median(errs[False]), statistics.median(errs[True])
    print(f"median Σ|Δ|/Σ over every class: fixed delay {before:.1%}, pending floor "
          f"{after:.1%} (ratio {after / before:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
