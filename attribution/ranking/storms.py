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

from attribution.intsets import distinct_ints, value_counts
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
    devs = distinct_ints(kb.device).tolist()
    for dev in devs:
        # one GPU (the common case): its columns as they are, no gather
        idx = None if len(devs) == 1 else np.flatnonzero(kb.device == dev)
        s = kb.start_ns if idx is None else kb.start_ns[idx]
        if not bool(np.all(s[1:] >= s[:-1])):
            o = np.argsort(s, kind="stable")
            idx = o if idx is None else idx[o]
            s = kb.start_ns[idx]
        e = kb.end_ns if idx is None else kb.end_ns[idx]
        if len(s) < MIN_RUN:
            continue
        got = _device_storms(s, e)
        if got is None:
            continue
        first, last, n, busy, members = got
        out.append((np.full(len(first), dev, np.int64), s[first], e[last],
                    n.astype(np.int64), busy.astype(np.int64)))
        ids, cnt = value_counts(kb.name_id[members if idx is None else idx[members]])
        for i, c in zip(ids.tolist(), cnt.tolist(), strict=True):
            nm = inp.trace.name(int(i))
            names[nm] = names.get(nm, 0) + int(c)
    if not out:
        z = np.zeros(0, np.int64)
        return Storms(z, z, z, z, z), names
    cols = [np.concatenate([o[j] for o in out]) for j in range(5)]
    return Storms(*cols), names


def _device_storms(s: I64, e: I64) -> tuple[I64, I64, I64, I64, I64] | None:
    """One GPU's storms from its kernels in start order (``len(s) >= MIN_RUN``): first and
    last kernel, kernels and busy time of each, and the kernels inside them (in order)."""
    tiny, link = _flags(s, e)
    # a run of >= MIN_RUN kernels is a run of >= MIN_RUN - 1 links; its kernels are all short
    # (a link needs both ends short).  w[i]: links i .. i + MIN_RUN - 2 all set, so the runs
    # of set w are the candidate runs, found among the few edges of w instead of by run ids
    # over every kernel.
    w, k = link, 1
    while k < MIN_RUN - 1:
        step = min(k, MIN_RUN - 1 - k)
        w = w[:-step] & w[step:]
        k += step
    edge = np.flatnonzero(w[1:] != w[:-1]) + 1  # starts and stops of the set runs
    if bool(w[0]):
        edge = np.r_[0, edge]
    if bool(w[-1]):
        edge = np.r_[edge, len(w)]
    if len(edge) == 0:
        return None
    first, last = edge[0::2], edge[1::2] + (MIN_RUN - 2)
    n = last - first + 1
    # median under TINY_NS <=> more than half the run's kernels are under it.  Integer sums
    # over each run [first, last] by one reduceat at the runs' bounds (the odd pieces, the
    # stretches between runs, are dropped; the last piece runs to the end)
    at = np.empty(2 * len(first), np.intp)
    at[0::2], at[1::2] = first, last + 1
    if at[-1] == len(s):
        at = at[:-1]
    tiny_n = np.add.reduceat(tiny, at, dtype=np.int64)[0::2]
    # Σ end - Σ start: int64 sums wrap alike, so their difference is the exact busy time
    busy = np.add.reduceat(e, at)[0::2] - np.add.reduceat(s, at)[0::2]
    span = e[last] - s[first]
    ok = (2 * tiny_n > n) & (span > 0) & ((span - busy) >= MIN_GAP_SHARE * span)
    if not bool(ok.any()):
        return None
    first, last, n = first[ok], last[ok], n[ok]
    return first, last, n, busy[ok], _ranges(first, n)


def _flags(s: I64, e: I64) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel in start order: shorter than ``TINY_NS``; per pair of neighbours: both
    shorter than ``SHORT_NS`` and the gap from the latest end so far (overlapping streams) to
    the next start under ``MAX_GAP_NS``."""
    d = e - s
    short = d < SHORT_NS
    run_end = e if bool(np.all(e[1:] >= e[:-1])) else np.maximum.accumulate(e)
    link = short[:-1] & short[1:] & ((s[1:] - run_end[:-1]) < MAX_GAP_NS)
    return d < TINY_NS, link


def _ranges(first: I64, n: I64) -> I64:
    """``first[i], first[i] + 1, ..., first[i] + n[i] - 1`` for each i, concatenated."""
    out: I64 = np.repeat(first - (np.cumsum(n) - n), n)
    out += np.arange(len(out))
    return out


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


def in_spans(t_ns: I64, device: np.ndarray, storms: Storms) -> np.ndarray:
    """Mask of times ``t_ns`` (on ``device``) that fall inside a storm of that device: the
    last storm to start at or before t has not ended.  Times in ascending order (idle gaps
    come so) are placed storm by storm: storm k holds the times in
    ``[start_k, min(end_k, start_k+1))``, one index range by two searches, instead of one
    search per time."""
    out = np.zeros(len(t_ns), bool)
    for dev in distinct_ints(storms.device).tolist():
        m = storms.device == dev
        s, e = storms.start_ns[m], storms.end_ns[m]
        o = np.argsort(s)
        s, e = s[o], e[o]
        on = device == dev
        every = bool(on.all())
        t = t_ns if every else t_ns[on]
        if bool(np.all(t[1:] >= t[:-1])):
            stop = np.minimum(e, np.r_[s[1:], e[-1:]])  # from the next start on: the next storm's
            lo = np.searchsorted(t, s, side="left")
            inside = np.zeros(len(t), bool)
            inside[_ranges(lo, np.maximum(np.searchsorted(t, stop, side="left") - lo, 0))] = True
        else:
            k = np.searchsorted(s, t, side="right") - 1
            inside = (k >= 0) & (t < e[np.clip(k, 0, None)])
        if every:
            out |= inside
        else:
            out[on] = inside
    return out
