"""Idle gaps and their causes on hand-made timelines whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np

from attribution.idle import covered_ns, idle_intervals, union_segments
from attribution.model import ApiBatch, ApiKind, CopyBatch, KernelBatch, Trace

US = 1_000
MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _kernels(spans: list[tuple[int, int]], corr: list[int] | None = None) -> KernelBatch:
    return KernelBatch.from_columns({
        "start_ns": [T0 + s for s, _ in spans], "end_ns": [T0 + e for _, e in spans],
        "device": [0] * len(spans), "name_id": [0] * len(spans),
        "correlation": corr if corr is not None else [-1] * len(spans)})


def _apis(rows: list[tuple[int, int, int, ApiKind]]) -> ApiBatch:
    return ApiBatch.from_columns({
        "start_ns": [T0 + r[0] for r in rows], "end_ns": [T0 + r[1] for r in rows],
        "correlation": [r[2] for r in rows], "kind": [int(r[3]) for r in rows],
        "name_id": [0] * len(rows)})


def test_union_merges_overlaps_and_keeps_disjoint() -> None:
    s, e = union_segments(np.array([50, 0, 150, 400]), np.array([200, 100, 300, 500]))
    assert s.tolist() == [0, 400] and e.tolist() == [300, 500]
    # covered time of [0, 300] inside [250, 450] is 50 + 50
    assert covered_ns(s, e, np.array([250]), np.array([450])).tolist() == [100]


def test_no_api_info_short_gaps_are_launch_gaps_long_ones_stalls() -> None:
    tr = Trace(kernels=_kernels([(0, 100 * US), (200 * US, 300 * US)]))
    idle = idle_intervals(tr, T0, T0 + 5 * MS, [0])
    got = sorted(zip((idle.start_ns - T0).tolist(), (idle.end_ns - T0).tolist(),
                     idle.cause_names(), strict=True))
    assert got == [(100 * US, 200 * US, "launch_gap"), (300 * US, 5 * MS, "host_stall")]


def test_kernels_and_copies_overlapping_leave_no_gap() -> None:
    copies = CopyBatch.from_columns({"start_ns": [T0 + 50 * US], "end_ns": [T0 + 200 * US],
                                     "device": [0], "kind": [1]})
    tr = Trace(kernels=_kernels([(0, 100 * US), (150 * US, 300 * US)]), copies=copies)
    idle = idle_intervals(tr, T0, T0 + 300 * US, [0])
    assert len(idle) == 0


def test_causes_from_api_calls() -> None:
    spans = [(0, 100 * US), (150 * US, 250 * US), (260 * US, 300 * US),
             (2500 * US, 3000 * US), (5000 * US, 5100 * US)]
    apis = _apis([
        (-10 * US, -5 * US, 1, ApiKind.LAUNCH),
        (130 * US, 140 * US, 2, ApiKind.LAUNCH),  # ends inside gap 100..150 → launch_gap
        (5 * US, 10 * US, 3, ApiKind.LAUNCH),  # queued long before gap 250..260 → other
        (20 * US, 25 * US, 4, ApiKind.LAUNCH),
        (400 * US, 2400 * US, -1, ApiKind.SYNC),  # covers 2.0 of gap 0.3..2.5 ms → sync_wait
        (4900 * US, 4990 * US, 5, ApiKind.LAUNCH),  # gap 3..5 ms > 1 ms → host_stall
    ])
    tr = Trace(kernels=_kernels(spans, corr=[1, 2, 3, 4, 5]), apis=apis)
    idle = idle_intervals(tr, T0, T0 + 5100 * US, [0])
    got = dict(zip((idle.start_ns - T0).tolist(), idle.cause_names(), strict=True))
    assert got == {100 * US: "launch_gap", 250 * US: "other", 300 * US: "sync_wait",
                   3000 * US: "host_stall"}
    assert int(idle.duration_ns.sum()) == 50 * US + 10 * US + 2200 * US + 2000 * US


def test_gaps_tile_the_window_with_busy_time() -> None:
    rng = np.random.default_rng(3)
    s = np.sort(rng.integers(0, 100 * MS, 300))
    e = s + rng.integers(1, 400 * US, 300)
    tr = Trace(kernels=_kernels(list(zip(s.tolist(), e.tolist(), strict=True))))
    win = (T0 - MS, T0 + 101 * MS)
    idle = idle_intervals(tr, *win, [0])
    us, ue = union_segments(s + T0, e + T0)
    assert int(idle.duration_ns.sum()) + int((ue - us).sum()) == win[1] - win[0]
    assert bool(np.all(idle.end_ns > idle.start_ns))


def _two_processes(other_pid_ids: list[int], sync_pid: int) -> Trace:
    """GPU 0 launched by process 1 (ids 1, 2); a sync call covering GPU 0's 0.3..2.5 ms gap
    made by process ``sync_pid``; a process 2 launching ids ``other_pid_ids`` (none on GPU 0
    unless listed there)."""
    rows = [(-10 * US, -5 * US, 1, ApiKind.LAUNCH, 1), (130 * US, 140 * US, 2, ApiKind.LAUNCH, 1),
            (400 * US, 2400 * US, -1, ApiKind.SYNC, sync_pid)]
    rows += [(-20 * US, -15 * US, c, ApiKind.LAUNCH, 2) for c in other_pid_ids]
    apis = ApiBatch.from_columns({
        "start_ns": [T0 + r[0] for r in rows], "end_ns": [T0 + r[1] for r in rows],
        "correlation": [r[2] for r in rows], "kind": [int(r[3]) for r in rows],
        "pid": [r[4] for r in rows], "name_id": [0] * len(rows)})
    kernels = _kernels([(0, 100 * US), (150 * US, 300 * US), (2500 * US, 2600 * US)],
                       corr=[1, 2, 3])
    return Trace(kernels=kernels, apis=apis)


def test_another_processs_sync_call_does_not_make_a_sync_wait() -> None:
    """A trace of two processes: the sync call of one that launched nothing on GPU 0 leaves
    GPU 0's gap a host stall; its own process's makes it a sync wait; where the launch ids
    name both processes (ids that collide across processes) every sync call counts."""
    def cause_at_300us(trace: Trace) -> str:
        idle = idle_intervals(trace, T0, T0 + 2600 * US, [0])
        causes: dict[int, str] = dict(zip((idle.start_ns - T0).tolist(), idle.cause_names(),
                                          strict=True))
        return causes[300 * US]

    assert cause_at_300us(_two_processes([90], sync_pid=2)) == "host_stall"
    assert cause_at_300us(_two_processes([90], sync_pid=1)) == "sync_wait"
    assert cause_at_300us(_two_processes([2], sync_pid=2)) == "sync_wait"  # ids collide
