"""Tiny-kernel storms: launch-bound runs of very short kernels (fusion candidates).

Owns storm detection.  Per GPU, kernels in start order are linked while each is shorter than
``SHORT_NS`` and the gap to the next is under ``MAX_GAP_NS`` (a host stall breaks a run).  A
run is a storm when it has at least ``MIN_RUN`` kernels, their median duration is under
``TINY_NS`` (10 µs) and idle gaps fill at least ``MIN_GAP_SHARE`` of its span (launch-bound:
the GPU waits for the host more than it computes).

Wasted energy: ``P_idle × span`` of every storm.  Fusing a storm into a few kernels keeps its
dynamic work (ΔP × time moves into the fused kernel) but collapses its wall time, so the
active-idle floor over the span is what fusion can recover at most.  Launch gaps inside
storms are counted here, not again under ``idle.launch_gap``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attribution.intsets import count_le_sorted, distinct_ints, unique_inverse
from attribution.model import I64
from attribution.ranking.common import Candidate, RankInputs, enclosing_ranges

TINY_NS = 10_000
SHORT_NS = 20_000
MAX_GAP_NS = 200_000
MIN_RUN = 8
MIN_GAP_SHARE = 0.25
MECHANISM = "storm.tiny_kernels"


@dataclasses.dataclass(frozen=True, slots=True)
class Storms:
    device: I64  # per storm
    start_ns: I64
    end_ns: I64
    kernels: I64  # kernels per storm
    busy_ns: I64  # kernel time per storm

    def __len__(self) -> int:
        return len(self.start_ns)


def find_storms(inp: RankInputs) -> tuple[Storms, dict[str, int]]:
    """All storms, and the count of each kernel name inside them."""
    kb = inp.trace.kernels
    out: list[tuple[I64, I64, I64, I64, I64]] = []
    names: dict[str, int] = {}
    for dev in distinct_ints(kb.device).tolist():
        idx = np.flatnonzero(kb.device == dev)
        s = kb.start_ns[idx]
        if not bool(np.all(s[1:] >= s[:-1])):
            idx = idx[np.argsort(s, kind="stable")]
            s = kb.start_ns[idx]
        e = kb.end_ns[idx]
        d = e - s
        if len(s) < MIN_RUN:
            continue
        short = d < SHORT_NS
        gap = s[1:] - np.maximum.accumulate(e)[:-1]
        link = short[:-1] & short[1:] & (gap < MAX_GAP_NS)
        run = np.concatenate([[0], np.cumsum(~link)])  # run id per kernel
        first = np.flatnonzero(np.concatenate([[True], ~link]))
        n = np.bincount(run)
        last = first + n - 1
        cand = np.flatnonzero((n >= MIN_RUN) & short[first])
        if len(cand) == 0:
            continue
        # median under TINY_NS <=> more than half the run's kernels are under it; integer
        # sums over the candidate runs only (prefix sums: exact)
        tiny_c = np.r_[0, np.cumsum(d < TINY_NS)]
        d_c = np.r_[0, np.cumsum(d)]
        tiny_n = tiny_c[last[cand] + 1] - tiny_c[first[cand]]
        span = e[last[cand]] - s[first[cand]]
        busy = d_c[last[cand] + 1] - d_c[first[cand]]
        ok = (2 * tiny_n > n[cand]) & (span > 0) & ((span - busy) >= MIN_GAP_SHARE * span)
        cand = cand[ok]
        if len(cand) == 0:
            continue
        out.append((np.full(len(cand), dev, np.int64), s[first[cand]], e[last[cand]],
                    n[cand].astype(np.int64), busy[ok].astype(np.int64)))
        storm_run = np.zeros(len(n), bool)
        storm_run[cand] = True
        ids, inv = unique_inverse(kb.name_id[idx[storm_run[run]]])
        cnt = np.bincount(inv, minlength=len(ids))
        for i, c in zip(ids.tolist(), cnt.tolist(), strict=True):
            nm = inp.trace.name(int(i))
            names[nm] = names.get(nm, 0) + int(c)
    if not out:
        z = np.zeros(0, np.int64)
        return Storms(z, z, z, z, z), names
    cols = [np.concatenate([o[j] for o in out]) for j in range(5)]
    return Storms(*cols), names


def storm_candidate(inp: RankInputs, storms: Storms, names: dict[str, int]) -> Candidate | None:
    if len(storms) == 0:
        return None
    span_s = (storms.end_ns - storms.start_ns).astype(np.float64) * 1e-9
    p, p_lo, p_hi = inp.per_record(storms.device)
    energy = float(p @ span_s)
    lo, hi = float(p_lo @ span_s), float(p_hi @ span_s)
    n_k = int(storms.kernels.sum())
    busy_s = float(storms.busy_ns.sum()) * 1e-9
    tot_s = float(span_s.sum())
    top = sorted(names, key=lambda k: -names[k])[:2]
    ranges = enclosing_ranges(inp.trace, storms.start_ns, storms.end_ns)
    evidence = (f"{len(storms)} launch-bound runs of {n_k} kernels (median < 10 µs each), "
                f"{tot_s:.3f} s of wall time of which the GPU computed {busy_s:.3f} s "
                f"({busy_s / tot_s:.0%}); mean {n_k / len(storms):.0f} kernels per run")
    if ranges:
        evidence += f"; mostly inside range {ranges[0]!r}"
    return Candidate(
        mechanism=MECHANISM, energy_j=energy, energy_ci_j=(lo, hi), evidence=evidence,
        fix=("fuse the short kernels (torch.compile, a fused/foreach op, a custom kernel) or "
             "capture the run in a CUDA graph; recovers at most the active-idle energy of the "
             f"runs' span ({energy:.3g} J, {tot_s:.3f} s); the dynamic work stays"),
        validation=("re-run with the fix: `ppwtop diff` shows storm.tiny_kernels and "
                    "idle.launch_gap falling, kernel calls per step falling, step energy not "
                    "rising"),
        owner_names=tuple(ranges) + tuple(top))


def in_spans(t_ns: I64, device: I64, storms: Storms) -> np.ndarray:
    """Mask of times ``t_ns`` (on ``device``) that fall inside a storm of that device."""
    out = np.zeros(len(t_ns), bool)
    for dev in np.unique(storms.device).tolist():
        m = storms.device == dev
        s, e = storms.start_ns[m], storms.end_ns[m]
        o = np.argsort(s)
        s, e = s[o], e[o]
        on = device == dev
        t = t_ns if bool(on.all()) else t_ns[on]
        if len(t) > 4 * len(s) and bool(np.all(t[1:] >= t[:-1])):  # idle gaps come sorted
            k = count_le_sorted(s, t) - 1
        else:
            k = np.searchsorted(s, t, side="right") - 1
        out[on] = (k >= 0) & (t < e[np.clip(k, 0, None)])
    return out
