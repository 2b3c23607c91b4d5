"""Live engine vs batch engine vs simulator truth on the same horizon.

Owns the live-vs-batch comparison of docs/accuracy.md ("Live engine against the batch
engine").  Simulates ``--seconds`` of each scenario × preset, feeds it to
:class:`attribution.engine.live.LiveEngine` tick by tick (records as they complete, readings as
taken), and on the last snapshot's window runs the batch engine (``attribute``) on the records
inside it; the truth is the simulator's per-record dynamic energy over the same records.
Prints per run: total and P_idle difference, Σ|Δ dynamic| / Σ dynamic and the worst class
holding ≥ 5 % of the dynamic energy (live − batch), the same against the truth for both
engines, each engine's P_idle against the truth (× the board gain), the fitted lags, and
resolvable counts.  With ``--flag-ticks N`` it also compares the
two engines' ``resolvable`` flags at N ticks spread over the run (the batch engine on each
tick's window): classes the live view flags and the batch engine does not.

Run: ``python benchmarks/live_vs_batch.py [--runs clamp_episode/h100,demo/a100 ...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

import numpy as np

from attribution.engine import attribute
from attribution.engine.deltas import ITEMS, SAMPLES, Deltas
from attribution.engine.live import LiveEngine
from attribution.model import Trace
from attribution.sim import SCENARIOS, simulate
from attribution.snapshot import Snapshot

DEFAULT_RUNS = ("clamp_episode/h100,clamp_episode/a100,demo/h100,demo/a100,varied_mix/a100,"
                "two_streams/h100,varied_mix/rtx3090,demo/rtx4090")


def window_trace(trace: Trace, win: tuple[int, int]) -> tuple[Trace, dict[str, np.ndarray]]:
    """The records inside ``win`` (and the readings up to 100 ms after it), and the masks."""
    parts: dict[str, Any] = {}
    masks = {}
    for n in ITEMS:
        b = getattr(trace, n)
        masks[n] = (b.start_ns >= win[0]) & (b.end_ns <= win[1])
        parts[n] = b.take(masks[n])
    for n in SAMPLES:
        b = getattr(trace, n)
        parts[n] = b.take((b.t_ns >= win[0]) & (b.t_ns <= win[1] + 100_000_000))
    return Trace(strings=trace.strings, devices=trace.devices, **parts), masks


def rows(snap: Snapshot) -> dict[str, Any]:
    out: dict[str, Any] = {f"kernel:{r.name}": r for r in snap.kernels}
    out.update({f"copy:{r.kind}/{r.memory}": r for r in snap.copies})
    return out


def truth_on(res: Any, masks: dict[str, np.ndarray]) -> dict[str, float]:
    """True dynamic energy per kernel class over the window's kernels."""
    k, m = res.trace.kernels, masks["kernels"]
    ids = k.name_id[m].astype(np.int64)
    sums = np.bincount(ids, weights=res.truth.kernel_dynamic_j[m])
    return {f"kernel:{res.trace.strings[i]}": float(sums[i]) for i in np.unique(ids).tolist()}


def compare(a: dict[str, Any], b: dict[str, Any] | dict[str, float]) -> tuple[float, float, str]:
    """(Σ|Δ| / Σ b, worst relative Δ among classes ≥ 5 % of Σ b, its class)."""
    def val(r: Any) -> float:
        return float(r) if isinstance(r, float) else float(r.dynamic_energy_j)
    tot = sum(val(r) for r in b.values())
    s, worst, which = 0.0, 0.0, ""
    for k, rb in b.items():
        if k not in a:
            continue
        d = val(a[k]) - val(rb)
        s += abs(d)
        if val(rb) >= 0.05 * tot and abs(d) / val(rb) > abs(worst):
            worst, which = d / val(rb), k
    return s / tot if tot else 0.0, worst, which


def covered(a: dict[str, Any], truth: dict[str, float]) -> tuple[int, int]:
    """Classes of ``truth`` whose 90 % interval in ``a`` holds the truth, of those ``a`` has
    (flagged or not: is the interval itself honest?)."""
    keys = [k for k in truth if k in a and truth[k] > 0]
    lo_hi = [a[k].dynamic_energy_ci_j for k in keys]
    return sum(lo <= truth[k] <= hi for k, (lo, hi) in zip(keys, lo_hi, strict=True)), len(keys)


def drive(trace: Trace, eng: LiveEngine, *, flag_ticks: int = 0, tick_ns: int = 500_000_000
          ) -> tuple[Snapshot | None, list[tuple[float, list[str], int, int]], list[float]]:
    deltas = Deltas(trace)
    span = trace.gpu_span_ns()
    assert span is not None
    n_ticks = int((span[1] - span[0]) / tick_ns) + 1
    check = set(np.linspace(n_ticks // 4, n_ticks - 1, flag_ticks).astype(int).tolist()
                ) if flag_ticks else set()
    prev, now, k = span[0] - 1, span[0], 0
    snap = None
    flags: list[tuple[float, list[str], int, int]] = []
    cost: list[float] = []
    while now < span[1]:
        now = min(now + tick_ns, span[1])
        t0 = time.perf_counter()
        eng.update(deltas.between(prev, now), now)
        s = eng.snapshot()
        cost.append(time.perf_counter() - t0)
        snap = s or snap
        prev = now
        k += 1
        if k in check and s is not None:
            b = attribute(window_trace(trace, (s.window.start_ns, s.window.end_ns))[0],
                          n_boot=100)
            lr, br = rows(s), rows(b)
            only_live_flag = [c for c in lr if c in br and br[c].resolvable
                              and not lr[c].resolvable]
            flags.append(((now - span[0]) / 1e9, only_live_flag,
                          sum(r.resolvable for r in lr.values()),
                          sum(r.resolvable for r in br.values())))
    return snap, flags, cost


def run(spec: str, seconds: float, horizon: float, seed: int, flag_ticks: int, *,
        board_draw: bool = False) -> dict[str, float]:
    scenario, gpu = spec.split("/")
    res = simulate(scenario=scenario, gpu=gpu, seconds=seconds, seed=seed,
                   spec=dataclasses.replace(SCENARIOS[scenario], board_draw=True)
                   if board_draw else None)
    live, flags, _ = drive(res.trace, LiveEngine(devices=res.trace.devices, horizon_s=horizon),
                           flag_ticks=flag_ticks)
    assert live is not None
    wtr, masks = window_trace(res.trace, (live.window.start_ns, live.window.end_ns))
    batch = attribute(wtr, n_boot=100)
    lr, br = rows(live), rows(batch)
    truth = truth_on(res, masks)
    lb = compare(lr, br)
    lt = compare(lr, truth)
    bt = compare(br, truth)
    tot = (live.totals.energy_j - batch.totals.energy_j) / batch.totals.energy_j
    pid = (live.totals.active_idle_w - batch.totals.active_idle_w) / batch.totals.active_idle_w
    p_true = res.truth.active_idle_w * res.truth.gain  # what the sensor reads at active idle
    pid_t = (live.totals.active_idle_w / p_true - 1, batch.totals.active_idle_w / p_true - 1)
    cov_l, cov_b = covered(lr, truth), covered(br, truth)
    nres = (sum(r.resolvable for r in lr.values()), sum(r.resolvable for r in br.values()))
    same = {k for k, r in lr.items() if r.resolvable} == {k for k, r in br.items()
                                                           if r.resolvable}
    print(f"{spec:22s} tot {tot:+.3%} Pidle {pid:+.2%} | live-batch Σ|Δ| {lb[0]:.2%} worst "
          f"{lb[1]:+.2%} ({lb[2][:24]}) | kernels vs truth: live Σ|Δ| {lt[0]:.1%} worst "
          f"{lt[1]:+.1%}, batch {bt[0]:.1%} worst {bt[1]:+.1%} | Pidle vs truth "
          f"{pid_t[0]:+.1%}/{pid_t[1]:+.1%} | lag "
          f"{live.gpus[0].sensor.lag_ms:.2f}/{batch.gpus[0].sensor.lag_ms:.2f} | resolvable "
          f"{nres[0]}/{nres[1]} {'same' if same else 'DIFFER'} | interval holds truth live "
          f"{cov_l[0]}/{cov_l[1]} batch {cov_b[0]}/{cov_b[1]}", flush=True)
    for t, only, nl, nb in flags:
        names = ", ".join(c[:40] for c in only) or "-"
        print(f"    t={t:5.1f}s resolvable live/batch {nl}/{nb}; flagged by live only "
              f"({len(only)}): {names}", flush=True)
    return {"live_batch": lb[0], "live_truth": lt[0], "batch_truth": bt[0],
            "held_live": cov_l[0], "held_batch": cov_b[0], "classes": cov_l[1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=DEFAULT_RUNS)
    ap.add_argument("--seconds", type=float, default=70.0)
    ap.add_argument("--horizon", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--flag-ticks", type=int, default=0)
    ap.add_argument("--board-draw", action="store_true",
                    help="each board's response drawn off the engine's grids (the simulator's "
                         "board_draw)")
    args = ap.parse_args(argv)
    runs = [run(spec, args.seconds, args.horizon, args.seed, args.flag_ticks,
                board_draw=args.board_draw) for spec in args.runs.split(",")]
    # one line to set beside another tree's: Σ|Δ|/Σ summed over the runs, intervals held
    print(f"summed over {len(runs)} runs: live-batch {sum(r['live_batch'] for r in runs):.1%}"
          f" | kernels vs truth: live {sum(r['live_truth'] for r in runs):.1%}, batch "
          f"{sum(r['batch_truth'] for r in runs):.1%} | interval holds truth live "
          f"{sum(r['held_live'] for r in runs):.0f}, batch {sum(r['held_batch'] for r in runs):.0f}"
          f" of {sum(r['classes'] for r in runs):.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
