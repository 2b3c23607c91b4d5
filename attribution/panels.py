"""Display series for the live UI, computed from the Trace window a snapshot was made from.

Owns ``snapshot.extra["panels"]`` (``ppwtop.panels/1``): an optional, JSON-able addition to
the snapshot (the contract's keys are untouched; readers that do not know it ignore it).

* ``busy``: per GPU, the fraction of each 100 ms bin in which a kernel, copy or memset ran
  (the GPU-busy band under the power graph);
* ``clocks``: per GPU, the last and peak SM clock, memory clock, temperature, the clamp
  reasons active in the last sample and the share of samples clamped per reason;
* ``classes``: per kernel name and GPU (the 100 with most GPU time), a log2 histogram of
  launch durations and the launches per time bin over the window.

Vectorised numpy (sort, searchsorted, bincount); no per-record Python loops.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from attribution.intsets import unique_inverse
from attribution.model import CLAMP_REASONS, I64, ClockBatch, Trace
from attribution.snapshot import Snapshot

SCHEMA = "ppwtop.panels/1"
BUSY_BIN_NS = 100_000_000
LAUNCH_BINS = 40
HIST_MIN_NS = 1_000  # first histogram edge: 1 µs; bins double up to 2^23 µs (~8 s)
HIST_BINS = 24
MAX_CLASSES = 100


def _union(start: I64, end: I64) -> tuple[I64, I64]:
    """The union of ``[start, end)`` intervals as disjoint intervals sorted by start."""
    if not len(start):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return s[idx], run_end[np.r_[idx[1:] - 1, len(s) - 1]]


def binned_busy_ns(us: I64, ue: I64, t0: int, n_bins: int, bin_ns: int) -> np.ndarray:
    """Busy ns per bin of disjoint, sorted intervals ``[us, ue)``."""
    out = np.zeros(n_bins, dtype=np.float64)
    if not len(us):
        return out
    length = ue - us
    # busy time from the first interval to each bin edge: whole intervals before it, plus
    # the covered part of the one it falls in
    edges = t0 + np.arange(n_bins + 1, dtype=np.int64) * bin_ns
    cum = np.concatenate([[0], np.cumsum(length)])
    i = np.searchsorted(us, edges, side="right")
    j = np.maximum(i - 1, 0)
    busy_to_edge = np.where(i > 0, cum[j] + np.clip(edges - us[j], 0, length[j]), 0)
    out[:] = np.diff(busy_to_edge.astype(np.float64))
    return out


def _union_busy_ns(start: I64, end: I64, t0: int, n_bins: int, bin_ns: int) -> np.ndarray:
    """Busy ns per bin of the union of [start, end) intervals (overlaps counted once)."""
    return binned_busy_ns(*_union(start, end), t0, n_bins, bin_ns)


def _gather(pieces: Sequence[Trace], batch: str, cols: tuple[str, ...]
            ) -> dict[str, np.ndarray]:
    """The named columns of one batch across ``pieces``, concatenated (only those columns:
    a live window holds millions of records of a dozen columns each)."""
    parts = [getattr(p, batch) for p in pieces]
    parts = [b for b in parts if len(b)] or parts[:1]
    if not parts:
        parts = [getattr(Trace(), batch)]
    if len(parts) == 1:
        return {c: getattr(parts[0], c) for c in cols}
    return {c: np.concatenate([getattr(b, c) for b in parts]) for c in cols}


def busy_series(trace: Trace | Sequence[Trace], start_ns: int, end_ns: int
                ) -> list[dict[str, Any]]:
    pieces = [trace] if isinstance(trace, Trace) else list(trace)
    n_bins = max(1, int(-(-(end_ns - start_ns) // BUSY_BIN_NS)))
    cols = [_gather(pieces, b, ("start_ns", "end_ns", "device"))
            for b in ("kernels", "copies", "memsets")]
    dev_all = np.concatenate([c["device"] for c in cols])
    s_all = np.concatenate([c["start_ns"] for c in cols])
    e_all = np.concatenate([c["end_ns"] for c in cols])
    one = len(dev_all) > 0 and bool(np.all(dev_all == dev_all[0]))
    devs = [int(dev_all[0])] if one else sorted(int(d) for d in np.unique(dev_all))
    out = []
    for d in devs:
        if len(devs) == 1:
            s, e = s_all, e_all
        else:
            m = dev_all == d
            s, e = s_all[m], e_all[m]
        busy = _union_busy_ns(s, e, start_ns, n_bins, BUSY_BIN_NS) / BUSY_BIN_NS
        out.append({"gpu": d, "t0_ns": int(start_ns), "bin_ns": BUSY_BIN_NS,
                    "fraction": np.round(np.clip(busy, 0.0, 1.0), 3).tolist()})
    return out


def clock_strip(trace: Trace) -> list[dict[str, Any]]:
    ck = trace.clocks
    out = []
    for d in sorted(int(x) for x in np.unique(ck.device)):
        m = ck.device == d
        t = ck.t_ns[m]
        order = np.argsort(t, kind="stable")
        sm, mem = ck.sm_mhz[m][order], ck.mem_mhz[m][order]
        temp, reasons = ck.temp_c[m][order], ck.clock_reasons[m][order]
        shares = {name: float(np.mean((reasons & np.uint64(bit)) != 0))
                  for bit, name in CLAMP_REASONS.items()}
        clamp_bits = np.uint64(sum(CLAMP_REASONS))
        last = int(reasons[-1])
        out.append({
            "gpu": d, "samples": int(m.sum()),
            "sm_mhz": int(sm[-1]), "sm_mhz_max": int(sm.max()), "mem_mhz": int(mem[-1]),
            "temp_c": round(float(temp[-1]), 1), "temp_c_max": round(float(temp.max()), 1),
            "clamped_now": [name for bit, name in CLAMP_REASONS.items() if last & bit],
            "clamped_share": float(np.mean((reasons & clamp_bits) != 0)),
            "clamp_share_by_reason": {k: v for k, v in shares.items() if v > 0},
        })
    return out


def class_series(trace: Trace | Sequence[Trace], start_ns: int, end_ns: int
                 ) -> dict[str, dict[str, Any]]:
    """Keyed ``"<gpu>:<name>"``: duration histogram and launches over time."""
    pieces = [trace] if isinstance(trace, Trace) else list(trace)
    k = _gather(pieces, "kernels", ("start_ns", "end_ns", "device", "name_id"))
    if not len(k["start_ns"]):
        return {}
    dur = (k["end_ns"] - k["start_ns"]).astype(np.float64)
    # name_id as its low 32 bits: a -1 (a name lost) must not borrow from the device
    key = k["device"].astype(np.int64) * (1 << 32) + (k["name_id"].astype(np.int64) & 0xFFFFFFFF)
    uk, inv = _unique_keys(key)
    tot = np.bincount(inv, weights=dur, minlength=len(uk))
    keep = np.argsort(-tot, kind="stable")[:MAX_CLASSES]
    remap = np.full(len(uk), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    c = remap[inv]
    sel = c >= 0
    if not bool(sel.all()):
        c, dur, st = c[sel], dur[sel], k["start_ns"][sel]
    else:
        st = k["start_ns"]
    hb = np.clip(np.floor(np.log2(np.maximum(dur, 1.0) / HIST_MIN_NS)).astype(np.int64) + 1,
                 0, HIST_BINS - 1)  # bin 0: < 1 µs; bin i: [2^(i-1), 2^i) µs
    hist = np.bincount(c * HIST_BINS + hb, minlength=len(keep) * HIST_BINS
                       ).reshape(len(keep), HIST_BINS)
    span = max(end_ns - start_ns, 1)
    lb = np.clip(((st - start_ns) * LAUNCH_BINS) // span, 0, LAUNCH_BINS - 1)
    launches = np.bincount(c * LAUNCH_BINS + lb, minlength=len(keep) * LAUNCH_BINS
                           ).reshape(len(keep), LAUNCH_BINS)
    out = {}
    for j, u in enumerate(uk[keep]):
        dev, name_id = int(u >> 32), int(u & 0xFFFFFFFF)
        out[f"{dev}:{pieces[-1].name(name_id)}"] = {
            "hist_min_ns": HIST_MIN_NS, "hist_counts": hist[j].tolist(),
            "launch_bin_ns": span // LAUNCH_BINS, "launches": launches[j].tolist(),
        }
    return out


def _unique_keys(key: I64) -> tuple[I64, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` of ``device << 32 | name_id`` keys: when the
    devices and name ids are small and non-negative, by counting dense ids (no sort of the
    millions of records a live window holds)."""
    dev, name = key >> 32, key & 0xFFFFFFFF
    if len(key) and int(key.min()) >= 0 and int(dev.max()) < 256:
        n_names = int(name.max()) + 1
        if n_names <= max(1 << 16, 4 * len(key)):
            uniq, inv = unique_inverse(dev * n_names + name)
            return (uniq // n_names) * (1 << 32) + uniq % n_names, inv
    return np.unique(key, return_inverse=True)


def panel_data(trace: Trace | Sequence[Trace], start_ns: int, end_ns: int) -> dict[str, Any]:
    """Everything above for the records of ``trace`` (one trace, or the pieces of one) in
    ``[start_ns, end_ns]``."""
    pieces = [trace] if isinstance(trace, Trace) else list(trace)
    return {"schema": SCHEMA, "busy": busy_series(pieces, start_ns, end_ns),
            "clocks": clock_strip(_concat_clocks(pieces)),
            "classes": class_series(pieces, start_ns, end_ns)}


def _concat_clocks(pieces: Sequence[Trace]) -> Trace:
    if len(pieces) == 1:
        return pieces[0]
    return Trace(clocks=ClockBatch.concat(p.clocks for p in pieces))


def with_panels(snap: Snapshot, trace: Trace | Sequence[Trace]) -> Snapshot:
    """``snap`` with ``extra["panels"]`` computed from ``trace`` over the snapshot's window."""
    panels = panel_data(trace, snap.window.start_ns, snap.window.end_ns)
    return dataclasses.replace(snap, extra={**snap.extra, "panels": panels})
