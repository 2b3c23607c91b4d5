"""Idle energy by cause and pageable copies: the host-side mechanisms of the ranking.

Owns two kinds of candidate:

* ``idle.<cause>``: ``P_idle × idle time`` of each idle cause (launch gaps, sync waits, host
  stalls, other), launch gaps inside tiny-kernel storms excluded (the storm owns them).  The
  interval comes from the active-idle power's 90 % interval × the time.
* ``copy:<kind>/pageable``: the time a pageable copy took beyond what the same bytes need at
  pinned bandwidth (measured from this run's pinned copies of the same direction on the same
  GPU, else of any direction, else ``NOMINAL_PINNED_GBPS``), times the copy's own average
  power.
"""

from __future__ import annotations

import numpy as np

from attribution.intsets import indices_by_value
from attribution.quantiles import median
from attribution.ranking.common import (
    Candidate,
    RankInputs,
    RowInputs,
    enclosing_ranges,
    has_ranges,
    scaled_ci,
)
from attribution.ranking.storms import Storms, in_spans
from attribution.snapshot import IDLE_CAUSES, CopyRow, IdleRow

NOMINAL_PINNED_GBPS = 20.0
"""Pinned host↔device bandwidth assumed when the run has no pinned copy (PCIe 4.0 ×16)."""

MAX_REL_WIDTH = 1.0
"""A pageable-copy candidate whose 90 % interval is wider than ±50 % is not resolvable."""

IDLE_MAX_REL_WIDTH = 0.5
"""An ``idle.<cause>`` candidate whose 90 % interval is wider than ±25 % is not resolvable:
its joules are active idle × time, and active idle that wide is not a measurement (the
engine's hold at the board's value spans ±50 %; a lag at its search's edge widens it too).
Placed active idle spans 7–19 % (20 s simulated runs, four boards, five scenarios)."""


def _idle_resolvable(e: float, ci_j: tuple[float, float]) -> bool:
    return (ci_j[1] - ci_j[0]) <= IDLE_MAX_REL_WIDTH * e


def _unplaced_why(e: float, t: float, ci_j: tuple[float, float]) -> str:
    """Why the candidate is not resolvable ("" where it is)."""
    if _idle_resolvable(e, ci_j) or not t > 0:
        return ""
    return (f"active idle's 90 % interval is {ci_j[0] / t:.0f}–{ci_j[1] / t:.0f} W: the "
            "readings do not place it closely enough for these joules to count as measured")

_FIX = {
    "launch_gap": ("cut launch overhead: capture the loop in CUDA graphs (torch.compile "
                   "mode='reduce-overhead', torch.cuda.graph) or batch more work per launch"),
    "sync_wait": ("remove synchronising calls from the hot loop (.item(), .cpu(), "
                  "cudaDeviceSynchronize, blocking copies); use events or non_blocking copies"),
    "host_stall": ("feed the GPU ahead of time: DataLoader workers and prefetch, pinned memory, "
                   "overlap host preprocessing with the previous step"),
    "other": "inspect the timeline around these gaps (stream dependencies, queue bubbles)",
}
_CHECK = {
    "launch_gap": "launch-gap time per step and kernel launch API time falling",
    "sync_wait": "sync-wait time per step falling and no new host stalls",
    "host_stall": "host-stall time per step falling and step latency p95 not rising",
    "other": "idle.other time per step falling",
}


def idle_candidates(inp: RankInputs, storms: Storms) -> list[Candidate]:
    iv = inp.arrays.idle
    if len(iv) == 0:
        return []
    dur_s = iv.duration_ns.astype(np.float64) * 1e-9
    # each gap's group: its cause, or len(IDLE_CAUSES) for launch gaps inside storms
    key = iv.cause
    n_claimed = 0
    if len(storms):
        claimed = (iv.cause == IDLE_CAUSES.index("launch_gap")) & in_spans(
            iv.start_ns, iv.device, storms)
        n_claimed = int(np.count_nonzero(claimed))
        if n_claimed:
            key = np.where(claimed, len(IDLE_CAUSES), iv.cause).astype(np.uint8)
    devs = inp.arrays.devices
    one_gpu = len(devs) == 1 and bool(np.all(iv.device == devs[0].device))
    lo = hi = np.empty(0)
    if not one_gpu:
        _, lo, hi = inp.per_record(iv.device.astype(np.int64))
    any_ranges = has_ranges(inp.trace)
    out: list[Candidate] = []
    # the gaps of each cause (claimed ones apart), in gap order
    by_cause = indices_by_value(key, len(IDLE_CAUSES))
    for cause, m in zip(IDLE_CAUSES, by_cause, strict=True):
        if len(m) == 0:
            continue
        d = dur_s[m]
        t = float(d.sum())
        e = float(inp.arrays.idle_energy_j[m].sum())
        if not e > 0:
            continue
        n = len(m)
        ci_j = _ci(lo, hi, m, d, devs[0].p_idle_ci_w if one_gpu else None)
        med_us = median(d, overwrite=True) * 1e6  # d's order is not needed after this
        pw = e / t if t > 0 else 0.0
        ev = (f"{n} gaps, {t:.3f} s with no kernel or copy running (median gap {med_us:.0f} µs) "
              f"at {pw:.0f} W active idle")
        if n_claimed and cause == "launch_gap":
            ev += f" (not counting {n_claimed} gaps inside tiny-kernel storms)"
        ranges = enclosing_ranges(inp.trace, iv.start_ns[m], iv.end_ns[m]) if any_ranges else ()
        if ranges:
            ev += f"; mostly inside range {ranges[0]!r}"
        out.append(Candidate(
            mechanism=f"idle.{cause}", energy_j=e,
            energy_ci_j=ci_j, evidence=ev, unresolved_why=_unplaced_why(e, t, ci_j),
            fix=f"{_FIX[cause]}; recovers at most {e:.3g} J ({t:.3f} s of active idle)",
            validation=(f"re-run with the fix: `ppwtop diff` shows idle.{cause} falling, "
                        f"{_CHECK[cause]}"),
            owner_names=ranges, resolvable=_idle_resolvable(e, ci_j)))
    return out


def _ci(lo: np.ndarray, hi: np.ndarray, m: np.ndarray, d: np.ndarray,
        one_gpu_ci_w: tuple[float, float] | None) -> tuple[float, float]:
    """(Σ P_idle low × t, Σ P_idle high × t) over the gaps ``m`` (durations ``d``); on one
    GPU the per-gap powers are its constants (the same dot products, without gathering)."""
    if one_gpu_ci_w is not None:
        return (float(np.full(len(m), float(one_gpu_ci_w[0])) @ d),
                float(np.full(len(m), float(one_gpu_ci_w[1])) @ d))
    return float(lo[m] @ d), float(hi[m] @ d)


def idle_row_candidates(idle: tuple[IdleRow, ...],
                        p_idle_ci_w: dict[int, tuple[float, float]]) -> list[Candidate]:
    """``idle.<cause>`` from the snapshot's idle rows alone (the live engine keeps per-cause
    sums, not the gaps): the same joules and interval as :func:`idle_candidates`, without
    the gap-level extras (storm exclusion, median gap, enclosing ranges)."""
    out: list[Candidate] = []
    for cause in IDLE_CAUSES:
        rows = [r for r in idle if r.cause == cause]
        e = float(sum(r.energy_j for r in rows))
        t = float(sum(r.time_s for r in rows))
        if not e > 0:
            continue
        n = int(sum(r.count for r in rows))
        lo = float(sum(p_idle_ci_w.get(r.gpu, (0.0, 0.0))[0] * r.time_s for r in rows))
        hi = float(sum(p_idle_ci_w.get(r.gpu, (0.0, 0.0))[1] * r.time_s for r in rows))
        out.append(Candidate(
            mechanism=f"idle.{cause}", energy_j=e, energy_ci_j=(lo, hi),
            evidence=(f"{n} gaps, {t:.3f} s with no kernel or copy running at "
                      f"{e / t if t > 0 else 0.0:.0f} W active idle"),
            unresolved_why=_unplaced_why(e, t, (lo, hi)),
            fix=f"{_FIX[cause]}; recovers at most {e:.3g} J ({t:.3f} s of active idle)",
            validation=(f"re-run with the fix: `ppwtop diff` shows idle.{cause} falling, "
                        f"{_CHECK[cause]}"),
            resolvable=_idle_resolvable(e, (lo, hi))))
    return out


def _pinned_gbps(copies: tuple[CopyRow, ...], gpu: int, kind: str) -> tuple[float, str]:
    def bw(rows: list[CopyRow]) -> float | None:
        b = sum(r.bytes for r in rows)
        t = sum(r.time_s for r in rows)
        return b / t / 1e9 if b > 0 and t > 0 else None

    same = [r for r in copies if r.gpu == gpu and r.memory == "pinned" and r.kind == kind]
    v = bw(same)
    if v is not None:
        return v, f"this run's pinned {kind} copies"
    anyk = [r for r in copies if r.gpu == gpu and r.memory == "pinned"
            and r.kind in ("HtoD", "DtoH")]
    v = bw(anyk)
    if v is not None:
        return v, "this run's pinned copies"
    return NOMINAL_PINNED_GBPS, "nominal PCIe 4.0 x16"


def copy_candidates(inp: RankInputs | RowInputs) -> list[Candidate]:
    out: list[Candidate] = []
    by_kind: dict[str, list[CopyRow]] = {}
    for c in inp.copies:
        if c.memory == "pageable" and c.time_s > 0 and c.energy_j > 0:
            by_kind.setdefault(c.kind, []).append(c)
    for kind, rows in sorted(by_kind.items()):
        e = 0.0
        lo = hi = 0.0
        lost_s = t_all = 0.0
        nbytes = calls = 0
        refs: list[str] = []
        for c in rows:
            gbps, ref = _pinned_gbps(inp.copies, c.gpu, kind)
            need_s = c.bytes / (gbps * 1e9)
            lost = max(0.0, c.time_s - need_s)
            frac = lost / c.time_s
            idle_part = c.energy_j - c.dynamic_energy_j
            ci = scaled_ci((c.dynamic_energy_ci_j[0] + idle_part,
                            c.dynamic_energy_ci_j[1] + idle_part), frac)
            assert ci is not None
            e += c.energy_j * frac
            lo += ci[0]
            hi += ci[1]
            lost_s += lost
            t_all += c.time_s
            nbytes += c.bytes
            calls += c.calls
            refs.append(f"{gbps:.1f} GB/s ({ref})")
        if not e > 0:
            continue
        got = nbytes / t_all / 1e9 if t_all > 0 else 0.0
        out.append(Candidate(
            mechanism=f"copy:{kind}/pageable", energy_j=e, energy_ci_j=(lo, hi),
            evidence=(f"{calls} pageable {kind} copies, {nbytes / 1e6:.1f} MB in {t_all:.3f} s "
                      f"= {got:.1f} GB/s vs pinned {', '.join(sorted(set(refs)))}: "
                      f"{lost_s:.3f} s lost"),
            fix=("copy from pinned host memory (pin_memory=True in the DataLoader, "
                 "tensor.pin_memory()) with non_blocking=True; recovers at most "
                 f"{e:.3g} J ({lost_s:.3f} s of copy time at the copies' own power)"),
            validation=(f"re-run with the fix: the {kind} copies show as pinned, "
                        f"`ppwtop diff` shows copy:{kind}/pageable gone and copy:{kind}/pinned "
                        "smaller than it was"),
            # the lost time × P_idle dominates; the copies' own ΔP only widens the interval
            resolvable=(hi - lo) <= MAX_REL_WIDTH * e))
    return out
