"""The live UI's display series (:mod:`attribution.panels`) over a window made of pieces, each
piece summarised once.

Owns :class:`PanelCache`.  A live window is the pieces a session received (one per decoded
buffer or poll), most of them unchanged from one refresh to the next; recomputing the panels
from every record of a 15 s window at 200k records/s read 3 M records per refresh.  Here each
piece is summarised once, when first seen, and a refresh combines the summaries:

* busy band: per device, the piece's busy union (disjoint sorted intervals); pieces whose
  unions overlap in time are merged again, the rest are disjoint and simply put end to end;
* per-class series: per ``(gpu, kernel name)`` the piece's total GPU time (integer ns),
  duration histogram and start times sorted by class, so the launches per time bin of any
  window are counts between bin edges (``searchsorted``).

The result equals :func:`attribution.panels.panel_data` on the same pieces exactly (tested):
the sums are of integers, the bins of the same integer rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from attribution.model import F64, I64, Trace
from attribution.panels import (
    BUSY_BIN_NS,
    HIST_BINS,
    HIST_MIN_NS,
    LAUNCH_BINS,
    MAX_CLASSES,
    SCHEMA,
    _concat_clocks,
    _gather,
    _union,
    _unique_keys,
    binned_busy_ns,
    clock_strip,
)

_GPU = ("kernels", "copies", "memsets")


@dataclasses.dataclass(frozen=True, slots=True)
class _Summary:
    union: dict[int, tuple[I64, I64]]  # device -> its busy union in this piece
    keys: I64  # sorted distinct ``device << 32 | name_id`` of the piece's kernels
    tot_ns: F64  # GPU time per key (integer-valued)
    hist: I64  # (keys, HIST_BINS)
    starts: I64  # kernel starts sorted by (key, start)
    seg: I64  # (keys + 1): where each key's starts begin in ``starts``


def _summarize(piece: Trace) -> _Summary:
    cols = [_gather([piece], b, ("start_ns", "end_ns", "device")) for b in _GPU]
    dev = np.concatenate([c["device"] for c in cols])
    s = np.concatenate([c["start_ns"] for c in cols])
    e = np.concatenate([c["end_ns"] for c in cols])
    union = {}
    for d in np.unique(dev).tolist():
        m = dev == d
        union[int(d)] = _union(s[m], e[m])
    k = piece.kernels
    if not len(k):
        z = np.empty(0, np.int64)
        return _Summary(union, z, np.empty(0), np.empty((0, HIST_BINS), np.int64), z,
                        np.zeros(1, np.int64))
    # name_id as its low 32 bits: a -1 (a name lost) must not borrow from the device
    key = k.device.astype(np.int64) * (1 << 32) + (k.name_id.astype(np.int64) & 0xFFFFFFFF)
    uk, inv = _unique_keys(key)
    dur = (k.end_ns - k.start_ns).astype(np.float64)
    tot = np.asarray(np.bincount(inv, weights=dur, minlength=len(uk)), np.float64)
    hb = np.clip(np.floor(np.log2(np.maximum(dur, 1.0) / HIST_MIN_NS)).astype(np.int64) + 1,
                 0, HIST_BINS - 1)
    hist = np.bincount(inv * HIST_BINS + hb, minlength=len(uk) * HIST_BINS
                       ).reshape(len(uk), HIST_BINS)
    order = np.lexsort((k.start_ns, inv))
    seg = np.searchsorted(inv[order], np.arange(len(uk) + 1))
    return _Summary(union, uk, tot, hist, k.start_ns[order], seg.astype(np.int64))


def _launch_counts(sm: _Summary, bounds: I64) -> I64:
    """(keys, LAUNCH_BINS) launches of the piece between the window's bin bounds."""
    n_keys = len(sm.keys)
    if not len(sm.starts):
        return np.zeros((n_keys, LAUNCH_BINS), np.int64)
    base = int(sm.starts.min())
    big = int(sm.starts.max()) - base + 2
    # starts sorted by key, then start: make them one increasing sequence by key offsets
    owner = np.repeat(np.arange(n_keys, dtype=np.int64), np.diff(sm.seg))
    comp = owner * big + (sm.starts - base)
    q = (np.arange(n_keys, dtype=np.int64)[:, None] * big
         + np.clip(bounds - base, 0, big - 1)[None, :])
    pos = np.searchsorted(comp, q.ravel()).reshape(n_keys, len(bounds))
    edges = np.column_stack([sm.seg[:-1], pos, sm.seg[1:]])
    return np.diff(edges, axis=1)


class PanelCache:
    """``panel_data`` of windows of pieces, each piece summarised once (see module doc).
    Keeps the summaries of the pieces of the last call only."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Trace, _Summary]] = {}

    def panel_data(self, pieces: Sequence[Trace], start_ns: int, end_ns: int
                   ) -> dict[str, Any]:
        memo: dict[int, tuple[Trace, _Summary]] = {}
        sums = []
        for p in pieces:
            hit = self._memo.get(id(p))
            sm = hit[1] if hit is not None and hit[0] is p else _summarize(p)
            memo[id(p)] = (p, sm)
            sums.append(sm)
        self._memo = memo
        return {"schema": SCHEMA, "busy": self._busy(sums, start_ns, end_ns),
                "clocks": clock_strip(_concat_clocks(list(pieces))),
                "classes": self._classes(pieces, sums, start_ns, end_ns)}

    @staticmethod
    def _busy(sums: list[_Summary], start_ns: int, end_ns: int) -> list[dict[str, Any]]:
        n_bins = max(1, int(-(-(end_ns - start_ns) // BUSY_BIN_NS)))
        out = []
        for d in sorted({d for sm in sums for d in sm.union}):
            parts = sorted((sm.union[d] for sm in sums if d in sm.union and len(sm.union[d][0])),
                           key=lambda u: int(u[0][0]))
            merged: list[tuple[I64, I64]] = []
            cluster: list[tuple[I64, I64]] = []
            hi = np.iinfo(np.int64).min
            for us, ue in parts:  # pieces whose unions overlap are merged again
                if cluster and int(us[0]) >= hi:
                    merged.append(cluster[0] if len(cluster) == 1 else _union(
                        np.concatenate([c[0] for c in cluster]),
                        np.concatenate([c[1] for c in cluster])))
                    cluster = []
                cluster.append((us, ue))
                hi = max(hi, int(ue[-1]))  # a union's ends increase with its starts
            if cluster:
                merged.append(cluster[0] if len(cluster) == 1 else _union(
                    np.concatenate([c[0] for c in cluster]),
                    np.concatenate([c[1] for c in cluster])))
            us = np.concatenate([m[0] for m in merged]) if merged else np.empty(0, np.int64)
            ue = np.concatenate([m[1] for m in merged]) if merged else np.empty(0, np.int64)
            busy = binned_busy_ns(us, ue, start_ns, n_bins, BUSY_BIN_NS) / BUSY_BIN_NS
            out.append({"gpu": d, "t0_ns": int(start_ns), "bin_ns": BUSY_BIN_NS,
                        "fraction": np.round(np.clip(busy, 0.0, 1.0), 3).tolist()})
        return out

    @staticmethod
    def _classes(pieces: Sequence[Trace], sums: list[_Summary], start_ns: int, end_ns: int
                 ) -> dict[str, dict[str, Any]]:
        have = [sm for sm in sums if len(sm.keys)]
        if not have:
            return {}
        uk = np.unique(np.concatenate([sm.keys for sm in have]))
        tot = np.zeros(len(uk))
        hist = np.zeros((len(uk), HIST_BINS), np.int64)
        launches = np.zeros((len(uk), LAUNCH_BINS), np.int64)
        span = max(end_ns - start_ns, 1)
        j = np.arange(1, LAUNCH_BINS, dtype=np.int64)
        bounds = start_ns + (-((-j * span) // LAUNCH_BINS))  # first start of bins 1..39
        for sm in have:
            g = np.searchsorted(uk, sm.keys)
            tot[g] += sm.tot_ns
            hist[g] += sm.hist
            launches[g] += _launch_counts(sm, bounds)
        keep = np.argsort(-tot, kind="stable")[:MAX_CLASSES]
        names = pieces[-1]
        out = {}
        for i in keep.tolist():
            u = int(uk[i])
            dev, name_id = u >> 32, u & 0xFFFFFFFF
            out[f"{dev}:{names.name(name_id)}"] = {
                "hist_min_ns": HIST_MIN_NS, "hist_counts": hist[i].tolist(),
                "launch_bin_ns": span // LAUNCH_BINS, "launches": launches[i].tolist(),
            }
        return out
