"""Whether a trace's kernel times are plausible, and the warning lines when they are not.

Owns two checks on a device's kernels, each a share with the threshold it is judged by:

* **no duration** (``end_ns <= start_ns``): a kernel of zero length gets no time and no
  energy, so its share of the device's work falls to idle.  A profiler that stamps whole
  microseconds gives a few (the real Kineto ResNet-50 sample: 7.3 % of its kernels); most
  kernels without a duration means the durations were lost.
* **same-stream overlap**: a CUDA stream runs its kernels one after another, so kernel time
  on one stream that overlaps an earlier kernel of the same stream means damaged timestamps
  (every kernel stamped alike, a clock mixed up), or two processes' streams merged under one
  id.  The real traces kept in ``../shared/data/real`` show at most 0.64 % (the B200 trace).

Neither check changes a number: the engine attributes what the trace says, and the snapshot
says why those numbers should not be trusted.  Two repairs are made.  By :func:`forward_items`:
a GPU item that ends before it starts (a damaged recording or export; the Kineto importer
already reads a negative ``dur`` as 0) is read as zero length, with a warning, instead of
giving a negative time and negative joules.  By :func:`stray_records`: a few records far
from the rest of the run and from the power log (a start of 0, a ts of −10¹² µs) are left
out, with a warning, instead of stretching the window to days and filling it with idle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from attribution.model import I64, KernelBatch, Trace

NO_DURATION_WARN = 0.5  # share of a device's kernels without a duration that is told
OVERLAP_WARN = 0.1  # share of a device's kernel time overlapping its own stream that is told


@dataclass(frozen=True)
class KernelTiming:
    """One device's kernel-time shares."""

    n_kernels: int
    n_no_duration: int
    busy_ns: int  # Σ kernel durations (non-negative parts)
    pooled_overlap_ns: int  # kernel time overlapping an earlier kernel, streams pooled
    stream_overlap_ns: int | None  # ... an earlier kernel of its own stream; measured only
    # where the pooled overlap reaches OVERLAP_WARN (it is never more than the pooled)

    @property
    def no_duration_share(self) -> float:
        return self.n_no_duration / self.n_kernels if self.n_kernels else 0.0

    @property
    def stream_overlap_share(self) -> float | None:
        """The same-stream overlap's share of kernel time; None where not measured."""
        if self.stream_overlap_ns is None:
            return None
        return self.stream_overlap_ns / self.busy_ns if self.busy_ns > 0 else 0.0


def _running_overlap_ns(a: I64, b: I64) -> int:
    """Σ over kernels (``a`` in ascending order) of the part before the latest end so far."""
    if len(a) < 2:
        return 0
    prev = np.maximum.accumulate(b[:-1])
    return int(np.clip(np.minimum(prev, b[1:]) - a[1:], 0, None).sum())


def same_stream_overlap_ns(stream: np.ndarray, start_ns: I64, end_ns: I64) -> int:
    """Kernel time that overlaps an earlier-starting kernel of the same stream: within each
    stream in start order, the part of each kernel before the latest end so far."""
    if len(start_ns) < 2:
        return 0
    order = np.lexsort((start_ns, stream))  # ties in start add up alike in either order
    s, a, b = stream[order], start_ns[order], end_ns[order]
    first = np.r_[True, s[1:] != s[:-1]]
    if not bool(first[1:].any()):
        return _running_overlap_ns(a, b)
    # the latest end so far, restarted at each stream: one running max with each stream's
    # values raised above the one before's, on the ends themselves where that cannot
    # overflow and on their ranks where it could
    seg = np.cumsum(first, dtype=np.int64) - 1
    low = int(b.min())
    span = int(b.max()) - low + 1
    if span * (int(seg[-1]) + 1) < 2**62:
        lift = seg * span
        reach = np.maximum.accumulate(b - low + lift) - lift + low
    else:
        by_end = np.argsort(b, kind="stable")
        rank = np.empty(len(b), np.int64)
        rank[by_end] = np.arange(len(b))
        lift = seg * len(b)
        reach = b[by_end][np.maximum.accumulate(rank + lift) - lift]
    prev = np.r_[a[:1], reach[:-1]]
    prev[first] = a[first]  # a stream's first kernel overlaps nothing before it
    return int(np.clip(np.minimum(prev, b) - a, 0, None).sum())


def kernel_timing(kernels: KernelBatch, device: int) -> KernelTiming:
    """The shares of ``device``'s kernels.  The same-stream overlap is measured only where
    the overlap of all the device's kernels, streams pooled, reaches the threshold (it is
    never less, and it needs no sort on a trace in start order: most traces)."""
    on = kernels.device == device
    whole = bool(on.all())
    a = np.asarray(kernels.start_ns if whole else kernels.start_ns[on], np.int64)
    b = np.asarray(kernels.end_ns if whole else kernels.end_ns[on], np.int64)
    dur = b - a
    busy_ns = int(np.clip(dur, 0, None).sum())
    if len(a) > 1 and not bool((a[1:] >= a[:-1]).all()):
        order = np.argsort(a, kind="stable")
        pooled = _running_overlap_ns(a[order], b[order])
    else:
        pooled = _running_overlap_ns(a, b)
    own: int | None = None
    if busy_ns > 0 and pooled >= OVERLAP_WARN * busy_ns:
        stream = np.asarray(kernels.stream if whole else kernels.stream[on])
        own = same_stream_overlap_ns(stream, a, b)
    return KernelTiming(n_kernels=len(a), n_no_duration=int((dur <= 0).sum()),
                        busy_ns=busy_ns, pooled_overlap_ns=pooled, stream_overlap_ns=own)


def timing_warnings(device: int, timing: KernelTiming) -> list[str]:
    """The lines for ``device`` whose shares pass the thresholds (none on a plausible trace)."""
    out: list[str] = []
    if timing.n_kernels and timing.no_duration_share >= NO_DURATION_WARN:
        out.append(
            f"GPU {device}: {timing.n_no_duration} of {timing.n_kernels} kernels "
            f"({100 * timing.no_duration_share:.0f}%) have no duration (end = start): they get "
            "no time or energy and their work counts as idle; the trace's durations look lost")
    share = timing.stream_overlap_share
    if share is not None and share >= OVERLAP_WARN:
        out.append(
            f"GPU {device}: {100 * share:.0f}% of kernel time overlaps an "
            "earlier kernel on the same stream, which runs its kernels one after another: the "
            "trace's timestamps look damaged (or two processes' streams share ids); per-kernel "
            "energies on this GPU are not to be trusted")
    return out


def forward_items(trace: Trace) -> tuple[Trace, int]:
    """``trace`` with every kernel, copy and memset that ends before it starts read as zero
    length (``end_ns = start_ns``), and how many there were (the trace itself when none)."""
    fixed: dict[str, object] = {}
    n = 0
    for field in ("kernels", "copies", "memsets"):
        b = getattr(trace, field)
        back = b.end_ns < b.start_ns
        k = int(np.count_nonzero(back))
        if k:
            n += k
            fixed[field] = dataclasses.replace(b, end_ns=np.maximum(b.end_ns, b.start_ns))
    return (dataclasses.replace(trace, **fixed) if fixed else trace), n  # type: ignore[arg-type]


STRAY_MIN_NS = 3_600 * 10**9
"""A record is stray only when it lies at least an hour beyond the bulk of the run ..."""
STRAY_SPAN_FACTOR = 10.0
"""... and at least ten times the bulk's own span (its 1st to 99th percentile of starts)."""
STRAY_MAX_SHARE = 0.01
"""More than this share of the records that far out is not a few damaged stamps (two
sessions in one file): nothing is left out."""
_STRAY_SAMPLE = 65_536
"""The bulk's percentiles are read from at most this many records, evenly strided (a
million-kernel trace: two partial sorts of 65 536 values, not of a million)."""
_RECORDS = ("kernels", "copies", "memsets", "apis", "markers")


def stray_records(trace: Trace) -> tuple[Trace, int, float]:
    """``trace`` without the GPU items, host calls and markers that lie far from the rest of
    the run and from its power log (see the module doc and the constants), how many were
    left out, and how far beyond the kept span the cut-off lay (s).  An audit, 2026-12-05:
    five kernels with a ts of −10¹² µs made a 1 000 005 s window and 61.6 MJ; a recording's
    kernel starting at 0 made 1.57 TJ.  Records the power log covers are never left out (a
    server's warm-up and a late request two hours on, logged throughout, are one run), and
    without a power log nothing is (no joules are at stake; the times are the trace's)."""
    batches = [getattr(trace, f) for f in _RECORDS]
    n = sum(len(b) for b in batches)
    if n < 100 or not len(trace.power):
        return trace, 0, 0.0
    step = max(1, n // _STRAY_SAMPLE)
    # strided per batch (no concatenation of every start: ~2 M on the speed trace)
    sample = np.concatenate([b.start_ns[::step] for b in batches if len(b)])
    lo, hi = np.percentile(sample, [1.0, 99.0], method="nearest")
    reach = max(float(STRAY_MIN_NS), STRAY_SPAN_FACTOR * float(hi - lo))
    p_first, p_last = int(trace.power.t_ns.min()), int(trace.power.t_ns.max())
    first = float(min(int(lo), p_first)) - reach
    last = float(max(int(hi), p_last)) + reach
    masks: dict[str, np.ndarray] = {}
    for f, b in zip(_RECORDS, batches, strict=True):
        # a batch wholly inside (the common case) costs a min and a max, no mask
        if len(b) and (float(b.start_ns.min()) < first or float(b.end_ns.max()) > last):
            masks[f] = (b.start_ns < first) | (b.end_ns > last)
    k = sum(int(np.count_nonzero(m)) for m in masks.values())
    if k == 0 or k > STRAY_MAX_SHARE * n:
        return trace, 0, 0.0
    kept = {f: getattr(trace, f).take(np.flatnonzero(~m)) for f, m in masks.items()}
    return dataclasses.replace(trace, **kept), k, reach * 1e-9


def stray_warning(n_records: int, reach_s: float) -> str:
    """The snapshot line for the records :func:`stray_records` left out."""
    return (f"{n_records} record(s) lie more than {reach_s:.3g} s outside the rest of the run "
            "and its power log (damaged timestamps, or a burst the log did not cover): left "
            "out, so the window is the run's own")


def repaired(trace: Trace) -> tuple[Trace, list[str]]:
    """``trace`` as every reader of its times takes it -- items that end before they start
    read as zero length (:func:`forward_items`), stray records left out
    (:func:`stray_records`) -- and the lines saying what was repaired.  One call for the
    batch engine (``attribute_arrays``, ``build_snapshot``), the export and ``replay``: the
    export's snapshot split once shared class energy by negative durations (a review)."""
    trace, backwards = forward_items(trace)
    trace, stray, reach_s = stray_records(trace)
    return trace, ([backwards_warning(backwards)] if backwards else []) + (
        [stray_warning(stray, reach_s)] if stray else [])


def backwards_warning(n_items: int) -> str:
    """The snapshot line for the items :func:`forward_items` repaired."""
    return (f"{n_items} GPU item(s) end before they start (damaged timestamps): read as zero "
            "length, so their time and energy fall to idle")
