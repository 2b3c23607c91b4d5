"""GPU-busy intervals and idle gaps with their causes.

Owns the busy/idle split of each device's timeline: busy = the union of kernels, copies and
memsets on that device; idle = everything else inside the attribution window (including the
stretch from the window start to the first activity and from the last activity to the window
end).  Each idle gap gets one cause (``attribution.snapshot.IDLE_CAUSES`` order):

* ``sync_wait``  -- a synchronising API call (``ApiKind.SYNC``) covers more than half the gap;
* ``host_stall`` -- otherwise, a gap longer than 1 ms (nothing in flight for over 1 ms);
* ``launch_gap`` -- otherwise, the host call that issued the next item ended inside the gap
  (or less than ``LAUNCH_TOL_NS`` before it): the host was too slow to launch; with no API
  records at all, any gap up to 1 ms counts as a launch gap (where items start together
  after a gap, the next item is the one of the latest call: the largest correlation id);
* ``other``      -- the rest (the next item was queued long before: a device-side bubble).

Everything is vectorised: sorting, running maxima and ``searchsorted`` over the sorted
interval ends; no per-gap Python loop.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attribution import native
from attribution.intsets import distinct_ints
from attribution.model import I16, I64, U8, ApiKind, B, Trace
from attribution.snapshot import IDLE_CAUSES

LAUNCH_GAP, SYNC_WAIT, HOST_STALL, OTHER = 0, 1, 2, 3
assert IDLE_CAUSES[LAUNCH_GAP] == "launch_gap" and IDLE_CAUSES[SYNC_WAIT] == "sync_wait"
assert IDLE_CAUSES[HOST_STALL] == "host_stall" and IDLE_CAUSES[OTHER] == "other"

STALL_NS = 1_000_000
"""A gap longer than this with nothing in flight is a host stall (CONTRACT.md)."""
LAUNCH_TOL_NS = 2_000
"""A launch call that ended this little before the gap began still counts as 'late'."""
SYNC_COVER = 0.5
"""Fraction of a gap a sync call must cover for the gap to be a sync wait."""


@dataclasses.dataclass(frozen=True, slots=True)
class IdleIntervals:
    """Idle gaps of all devices; ``cause`` indexes ``IDLE_CAUSES``."""

    start_ns: I64
    end_ns: I64
    device: I16
    cause: U8

    def __len__(self) -> int:
        return len(self.start_ns)

    @property
    def duration_ns(self) -> I64:
        return self.end_ns - self.start_ns

    def cause_names(self) -> list[str]:
        return [IDLE_CAUSES[int(c)] for c in self.cause]


def union_segments(start_ns: I64, end_ns: I64) -> tuple[I64, I64]:
    """The union of intervals as sorted, disjoint ``(start, end)`` segments."""
    if len(start_ns) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(start_ns, kind="stable")
    seg_s, seg_e, _ = _union_sorted(start_ns[order].astype(np.int64), end_ns[order])
    return seg_s, seg_e


def _union_sorted(s: I64, end_ns: I64) -> tuple[I64, I64, I64]:
    """:func:`union_segments` of intervals already sorted by start (``s`` int64, non-empty),
    plus the index of each segment's first interval."""
    e = np.maximum(end_ns.astype(np.int64), s)
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    np.greater(s[1:], run_end[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.empty(len(first), np.intp)
    last[:-1] = first[1:] - 1
    last[-1] = len(s) - 1
    return s[first], run_end[last], first


def covered_ns(seg_start: I64, seg_end: I64, a_ns: I64, b_ns: I64) -> I64:
    """Time inside ``[a, b]`` covered by disjoint sorted segments (vectorised over a, b)."""
    if len(seg_start) == 0:
        return np.zeros(len(a_ns), np.int64)
    if (len(a_ns) > 4 * len(seg_start) and bool(np.all(a_ns[1:] >= a_ns[:-1]))
            and bool(np.all(b_ns[1:] >= b_ns[:-1])) and bool(np.all(b_ns >= a_ns))):
        return _covered_sorted(seg_start, seg_end, a_ns, b_ns)
    return _covered(seg_start, seg_end, a_ns, b_ns)


def _covered_sorted(seg_start: I64, seg_end: I64, a_ns: I64, b_ns: I64) -> I64:
    """:func:`covered_ns` for many spans sorted by start and by end (idle gaps) and few
    segments (sync calls): only the spans a segment reaches are computed, the rest cover 0.
    Segment i reaches spans ``b > start_i`` and ``a < end_i``: one index range each."""
    first = np.searchsorted(b_ns, seg_start, side="right")
    stop = np.maximum(np.searchsorted(a_ns, seg_end, side="left"), first)
    depth = np.cumsum(np.bincount(first, minlength=len(a_ns) + 1)
                      - np.bincount(stop, minlength=len(a_ns) + 1))[:len(a_ns)]
    reached = np.flatnonzero(depth > 0)
    out = np.zeros(len(a_ns), np.int64)
    out[reached] = _covered(seg_start, seg_end, a_ns[reached], b_ns[reached])
    return out


def _covered(seg_start: I64, seg_end: I64, a_ns: I64, b_ns: I64) -> I64:
    lengths = seg_end - seg_start
    cum = np.r_[np.int64(0), np.cumsum(lengths)]

    def upto(t: I64) -> I64:
        j = np.searchsorted(seg_start, t, side="right") - 1
        jj = np.clip(j, 0, None)
        inside = np.clip(t - seg_start[jj], 0, lengths[jj])
        return np.where(j < 0, 0, cum[jj] + inside)

    return upto(b_ns) - upto(a_ns)


def _item_columns(trace: Trace, device: int) -> tuple[I64, I64, I64]:
    """Start, end and correlation of all GPU items (kernels, copies, memsets) on a device."""
    k, cp, ms = trace.kernels, trace.copies, trace.memsets
    cols = []
    for b in (k, cp, ms):
        m = b.device == device
        if bool(m.all()):  # one device (the common case): no gather
            cols.append((b.start_ns, b.end_ns, b.correlation))
        else:
            cols.append((b.start_ns[m], b.end_ns[m], b.correlation[m]))
    s, e, c = (np.concatenate([x[i] for x in cols]) for i in range(3))
    return s, e, c


def busy_segments(trace: Trace, device: int) -> tuple[I64, I64]:
    """Union of kernels, copies and memsets on ``device``."""
    s, e, _ = _item_columns(trace, device)
    return union_segments(s, e)


MAX_TABLE_PER_ROW = 4
"""Correlation ids are looked up in a table when they span at most this many per API row."""


def _issue_end_ns(trace: Trace, correlation: I64) -> tuple[I64, B]:
    """End time of the host call that issued each item (by correlation id) and a found mask
    (the first issuing call with that id, by row, when several share it)."""
    apis = trace.apis
    issue = (apis.kind != ApiKind.SYNC) & (apis.correlation >= 0)
    corr = apis.correlation[issue]
    ends = apis.end_ns[issue]
    if len(corr) == 0 or len(correlation) == 0:
        return np.zeros(len(correlation), np.int64), np.zeros(len(correlation), bool)
    lo, hi = int(corr.min()), int(corr.max())
    if hi - lo <= MAX_TABLE_PER_ROW * len(corr) + 1024 and bool(np.all(corr[1:] > corr[:-1])):
        # distinct increasing ids in a dense range (CUPTI and Kineto number them so): a table
        table = np.full(hi - lo + 1, -1, np.intp)
        table[corr - lo] = np.arange(len(corr))
        j = table[np.clip(correlation - lo, 0, hi - lo)]
        found = (j >= 0) & (correlation >= lo) & (correlation <= hi)
        return ends[j], found  # (where not found: any end; callers mask by found)
    order = np.argsort(corr, kind="stable")
    corr, ends = corr[order], ends[order]
    j = np.clip(np.searchsorted(corr, correlation), 0, len(corr) - 1)
    found = (corr[j] == correlation) & (correlation >= 0)
    return ends[j], found


def _device_sync(trace: Trace, device: int, sync: np.ndarray) -> tuple[I64, I64]:
    """The sync calls that can hold ``device`` idle in a trace of several processes: those of
    the processes that launched its work (by the launch calls' correlation ids).  A process
    that never touched the GPU does not make its gaps sync waits (a merged two-process trace:
    GPU 0's sync_wait grew 2.50 -> 2.57 s from GPU 1's process).  Where the ids do not tell
    (none matched, or every process matched: ids that collide across processes), all."""
    apis = trace.apis
    corr = _item_columns(trace, device)[2]
    issue = (apis.kind != ApiKind.SYNC) & np.isin(apis.correlation, corr[corr >= 0])
    pids = np.unique(apis.pid[issue])
    keep = sync
    if 0 < len(pids) < len(np.unique(apis.pid)):
        keep = sync & np.isin(apis.pid, pids)
    return union_segments(apis.start_ns[keep], apis.end_ns[keep])


def idle_intervals(trace: Trace, window_start_ns: int, window_end_ns: int,
                   devices: list[int] | None = None) -> IdleIntervals:
    """All idle gaps inside the window, per device, with their cause."""
    if devices is None:
        devices = device_indices(trace)
    apis = trace.apis
    sync = apis.kind == ApiKind.SYNC
    every_sync = union_segments(apis.start_ns[sync], apis.end_ns[sync])
    have_api = len(apis) > 0
    several = have_api and bool((apis.pid != apis.pid[0]).any())
    out_s, out_e, out_d, out_c = [], [], [], []
    for dev in devices:
        sync_s, sync_e = _device_sync(trace, dev, sync) if several else every_sync
        got = (_gaps_native(trace, dev, (window_start_ns, window_end_ns), (sync_s, sync_e))
               if native.enabled() else None)
        if got is not None:
            out_s.append(got[0])
            out_e.append(got[1])
            out_d.append(np.full(len(got[0]), dev, np.int16))
            out_c.append(got[2])
            continue
        s, e, corr = _item_columns(trace, dev)
        if len(s) and not (int(e.min()) > window_start_ns and int(s.max()) < window_end_ns):
            inwin = (e > window_start_ns) & (s < window_end_ns)
            s, e, corr = s[inwin], e[inwin], corr[inwin]
        if not bool(np.all(s[1:] >= s[:-1])):
            order = np.argsort(s, kind="stable")
            s, e, corr = s[order], e[order], corr[order]
        n_seg = 0
        first = np.empty(0, np.intp)
        gap_s = np.empty(1, np.int64)
        gap_e = np.empty(1, np.int64)
        if len(s):
            seg_s, seg_e, first = _union_sorted(s.astype(np.int64, copy=False), e)
            n_seg = len(seg_s)
            # gaps: window start → first segment, between segments, last segment → window end
            gap_s = np.empty(n_seg + 1, np.int64)
            gap_s[1:] = seg_e
            gap_e = np.empty(n_seg + 1, np.int64)
            gap_e[:-1] = seg_s
            # every item overlaps the window, so only the first segment can start before it
            # and only the last end after it: clipping touches those two
            gap_e[0] = min(max(int(gap_e[0]), window_start_ns), window_end_ns)
            gap_s[-1] = min(max(int(gap_s[-1]), window_start_ns), window_end_ns)
        gap_s[0] = window_start_ns
        gap_e[-1] = window_end_ns
        # the item that ends each gap: the first (sorted) item of the segment after it (a
        # first segment clipped at the window start follows an empty gap, dropped below)
        next_corr = np.empty(n_seg + 1, np.int64)
        next_corr[:-1] = corr[first]
        next_corr[-1] = -1
        _latest_of_ties(s, corr, first, next_corr)
        # segments are disjoint and apart, so only the first and last gap can be empty
        a = 0 if gap_e[0] > gap_s[0] else 1
        b = n_seg + 1 if gap_e[-1] > gap_s[-1] else n_seg
        if (a, b) != (0, n_seg + 1):
            gap_s, gap_e, next_corr = gap_s[a:b], gap_e[a:b], next_corr[a:b]
        dur = gap_e - gap_s
        cover = covered_ns(sync_s, sync_e, gap_s, gap_e)
        issue_end, found = _issue_end_ns(trace, next_corr)
        late = found & (issue_end >= gap_s - LAUNCH_TOL_NS)
        if not have_api:
            late = dur <= STALL_NS
        cause = np.where(late, np.uint8(LAUNCH_GAP), np.uint8(OTHER))
        cause[dur > STALL_NS] = HOST_STALL
        some = np.flatnonzero(cover)  # a gap no sync call reaches covers 0: not a sync wait
        cause[some[cover[some] > SYNC_COVER * dur[some]]] = SYNC_WAIT
        out_s.append(gap_s)
        out_e.append(gap_e)
        out_d.append(np.full(len(dur), dev, np.int16))
        out_c.append(cause)
    if not out_s:
        z = np.empty(0, np.int64)
        return IdleIntervals(z, z.copy(), np.empty(0, np.int16), np.empty(0, np.uint8))
    if len(out_s) == 1:  # one device: its arrays as they are, no copy
        return IdleIntervals(out_s[0], out_e[0], out_d[0], out_c[0])
    return IdleIntervals(np.concatenate(out_s), np.concatenate(out_e),
                         np.concatenate(out_d), np.concatenate(out_c))


def _latest_of_ties(s: I64, corr: I64, first: np.ndarray, next_corr: I64) -> None:
    """Where items tie at a segment's start (``s`` sorted, ``first`` each segment's first
    item), the segment's ``next_corr`` becomes the largest of their correlation ids -- the
    latest call -- so that a gap's cause does not depend on the rows' order."""
    if len(s) < 2 or not bool(np.any(s[1:] == s[:-1])):
        return
    seg = np.repeat(np.arange(len(first)), np.diff(np.r_[first, len(s)]))
    tied = s == s[first][seg]
    np.maximum.at(next_corr, seg[tied], corr[tied])


def _gaps_native(trace: Trace, device: int, window_ns: tuple[int, int],
                 sync: tuple[I64, I64]) -> tuple[I64, I64, U8] | None:
    """One device's gaps and causes by the compiled sweeps (the same values as the numpy
    form), or None where that form must run: an item outside the window (it clips), a source
    out of start order (it sorts)."""
    runs = []
    for b in (trace.kernels, trace.copies, trace.memsets):
        m = b.device == device
        if bool(m.all()):  # one device (the common case): no gather
            runs.append((b.start_ns, b.end_ns, b.correlation))
        else:
            runs.append((b.start_ns[m], b.end_ns[m], b.correlation[m]))
    for s, e, _ in runs:
        if len(s) and not (int(e.min()) > window_ns[0] and int(s.max()) < window_ns[1]):
            return None
    gaps = native.union_gaps(runs, window_ns=window_ns)
    if gaps is None:
        return None
    gap_s, gap_e, next_corr = gaps
    apis = trace.apis
    issued = native.issue_ends(apis.kind, apis.correlation, apis.end_ns, next_corr,
                               sync_kind=int(ApiKind.SYNC), max_per_row=MAX_TABLE_PER_ROW)
    issue_end, found = issued if issued is not None else _issue_end_ns(trace, next_corr)
    cause = native.gap_causes(gap_s, gap_e, issue_end, found, sync=sync,
                              have_api=len(apis) > 0, launch_tol_ns=LAUNCH_TOL_NS,
                              stall_ns=STALL_NS, sync_cover=SYNC_COVER)
    return gap_s, gap_e, cause


def work_devices(trace: Trace) -> list[int]:
    """Devices with a kernel, copy or memset record (the trace's GPUs that did work)."""
    found = np.unique(np.concatenate([distinct_ints(b.device) for b in (
        trace.kernels, trace.copies, trace.memsets)]))
    return [int(d) for d in found]


def device_indices(trace: Trace) -> list[int]:
    """Devices that have GPU activity or power readings, else the declared ones, else [0]."""
    found = np.unique(np.concatenate([
        distinct_ints(b.device) for b in (trace.kernels, trace.copies, trace.memsets,
                                          trace.power)]))
    found = found[found >= 0]
    if len(found):
        return [int(d) for d in found]
    if trace.devices:
        return sorted(d.index for d in trace.devices)
    return [0]

