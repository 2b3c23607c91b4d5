"""The kernel-time checks (``engine/timing_checks``): the same-stream overlap against a
brute-force count, the pooled screen, and the warnings on damaged traces and only there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from attribution.engine import attribute
from attribution.engine.timing_checks import (
    NO_DURATION_WARN,
    OVERLAP_WARN,
    kernel_timing,
    same_stream_overlap_ns,
    timing_warnings,
)
from attribution.model import I64, KernelBatch
from attribution.sim import simulate
from attribution.sim.scenarios import SCENARIOS
from ppwtop.importers import load_trace

DATA = Path(__file__).parent / "data"
REAL_TRACES = sorted(p for p in [*DATA.rglob("*.json.gz"), *DATA.rglob("*.sqlite")]
                     if "amd_trace" not in p.parts)  # AMD: refused by the importer


def _brute_overlap_ns(stream: np.ndarray, a: I64, b: I64) -> int:
    """Per stream, kernels in start order, each one's part before the latest end so far."""
    total = 0
    for s in set(stream.tolist()):
        on = stream == s
        ends_so_far: list[int] = []
        for x, y in sorted(zip(a[on].tolist(), b[on].tolist(), strict=True)):
            if ends_so_far:
                total += max(0, min(max(ends_so_far), y) - x)
            ends_so_far.append(y)
    return total


def test_same_stream_overlap_matches_a_brute_force_count() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(0, 30))
        stream = rng.integers(0, 4, n).astype(np.int32)
        a = rng.integers(0, 100, n).astype(np.int64)
        b = a + rng.integers(-5, 30, n)  # some ends before their starts: damaged rows
        assert same_stream_overlap_ns(stream, a, b) == _brute_overlap_ns(stream, a, b)


def test_same_stream_overlap_with_times_too_far_apart_to_lift() -> None:
    """Times whose span × streams would overflow int64 take the ranks' path: same count."""
    a = np.array([0, 2**62, 2**62 + 5, 10, 3, 2**61], np.int64)
    b = a + np.array([20, 10, 1, 5, 10, 7], np.int64)
    stream = np.array([0, 0, 0, 1, 1, 2], np.int32)
    got = same_stream_overlap_ns(stream, a, b)
    assert got == _brute_overlap_ns(stream, a, b) == 1 + 3


def _kernels(a: list[int], b: list[int], stream: list[int], device: int = 0) -> KernelBatch:
    n = len(a)
    return KernelBatch.from_columns({
        "start_ns": np.array(a, np.int64), "end_ns": np.array(b, np.int64),
        "device": np.full(n, device, np.int16), "stream": np.array(stream, np.int32),
        "name_id": np.zeros(n, np.int32), "correlation": np.arange(n, dtype=np.int64)})


def test_concurrent_streams_are_not_told_one_stream_is() -> None:
    """Two streams running side by side: pooled overlap high, the streams' own nil."""
    a = [0, 5, 100, 105, 200, 205]
    b = [90, 95, 190, 195, 290, 295]
    ok = kernel_timing(_kernels(a, b, [1, 2, 1, 2, 1, 2]), 0)
    assert ok.pooled_overlap_ns == 3 * 85 and ok.stream_overlap_ns == 0
    assert timing_warnings(0, ok) == []
    bad = kernel_timing(_kernels(a, b, [1] * 6), 0)
    assert bad.stream_overlap_ns == 3 * 85
    (line,) = timing_warnings(0, bad)
    assert line.startswith("GPU 0: 47% of kernel time overlaps an earlier kernel on the same")


def test_the_order_of_the_rows_does_not_matter() -> None:
    rng = np.random.default_rng(2)
    a = np.sort(rng.integers(0, 10_000, 200))
    b = a + rng.integers(1, 400, 200)
    k = _kernels(a.tolist(), b.tolist(), rng.integers(0, 3, 200).tolist())
    shuffled = k.take(rng.permutation(200))
    assert kernel_timing(shuffled, 0) == kernel_timing(k, 0)


def test_below_the_screen_the_streams_are_not_sorted() -> None:
    """Pooled overlap under the threshold: the same-stream count is skipped (None), since it
    can only be smaller."""
    k = _kernels([0, 100, 190], [100, 200, 300], [1, 1, 1])
    t = kernel_timing(k, 0)
    assert t.pooled_overlap_ns == 10 and t.stream_overlap_ns is None
    assert t.stream_overlap_share is None and timing_warnings(0, t) == []


@pytest.mark.parametrize(("zero_share", "told"), [(0.4, False), (NO_DURATION_WARN, True)])
def test_kernels_without_a_duration_are_told_from_half_of_them(zero_share: float,
                                                                told: bool) -> None:
    n = 100
    a = list(range(0, 100 * n, 100))
    b = [x + (0 if i < zero_share * n else 50) for i, x in enumerate(a)]
    lines = timing_warnings(3, kernel_timing(_kernels(a, b, [7] * n, device=3), 3))
    assert bool(lines) is told
    if told:
        assert lines[0].startswith(f"GPU 3: {round(zero_share * n)} of {n} kernels")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_no_simulated_scenario_is_told(scenario: str) -> None:
    trace = simulate(scenario=scenario, seconds=3.0, seed=1).trace
    for d in np.unique(trace.kernels.device).tolist():
        assert timing_warnings(d, kernel_timing(trace.kernels, d)) == []


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name[:40])
def test_no_kept_real_trace_is_told(path: Path) -> None:
    """The real traces (one with 7 % of its kernels at 0 µs, one with concurrent NCCL
    streams) pass both checks."""
    trace = load_trace(path)
    for d in np.unique(trace.kernels.device).tolist():
        timing = kernel_timing(trace.kernels, d)
        assert timing.no_duration_share < NO_DURATION_WARN
        share = timing.stream_overlap_share
        assert share is None or share < OVERLAP_WARN
        assert timing_warnings(d, timing) == []


def test_a_trace_whose_durations_or_starts_were_lost_says_so() -> None:
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    k = trace.kernels
    assert not any("GPU 0:" in w and "kernel" in w for w in attribute(trace, n_boot=10).warnings)
    no_dur = dataclasses.replace(trace, kernels=dataclasses.replace(k, end_ns=k.start_ns.copy()))
    snap = attribute(no_dur, n_boot=10)
    assert f"GPU 0: {len(k)} of {len(k)} kernels (100%) have no duration" in snap.warnings[0]
    same = dataclasses.replace(k, start_ns=np.full(len(k), k.start_ns[0]),
                               end_ns=k.start_ns[0] + (k.end_ns - k.start_ns))
    snap = attribute(dataclasses.replace(trace, kernels=same), n_boot=10)
    assert snap.warnings[0].startswith("GPU 0: 100% of kernel time overlaps")


def test_items_ending_before_they_start_are_read_as_zero_length() -> None:
    """Every kernel's start and end swapped (a damaged recording): before, the kernels read
    −44.8 J and negative times; now zero length, their energy idle's, and a line says so."""
    from attribution.engine.timing_checks import forward_items

    tr = simulate("varied_mix", "a100", 6.0, 1).trace
    k = tr.kernels
    swapped = dataclasses.replace(tr, kernels=dataclasses.replace(
        k, start_ns=k.end_ns.copy(), end_ns=k.start_ns.copy()))
    fixed, n = forward_items(swapped)
    assert n == int(np.count_nonzero(k.end_ns > k.start_ns))
    assert np.array_equal(fixed.kernels.end_ns, fixed.kernels.start_ns)
    assert forward_items(tr) == (tr, 0)
    snap = attribute(swapped, n_boot=10)
    assert all(r.time_s >= 0 and r.energy_j >= 0 for r in snap.kernels)
    assert snap.totals.kernel_energy_j == pytest.approx(0.0, abs=1e-9)
    (line,) = [w for w in snap.warnings if "end before they start" in w]  # once
    assert line.startswith(f"{n} GPU item(s)")
    total = snap.totals.kernel_energy_j + snap.totals.copy_energy_j + snap.totals.idle_energy_j
    assert total == pytest.approx(snap.totals.energy_j, rel=1e-9)
    # the arrays and the rows apart (as same_bits.py and engine_speed.py call them): the
    # rows read the repaired times too (the ranking read negative kernel times: a launch-
    # bound run's tiny-kernel storm ranked below its launch gaps)
    from attribution.engine import attribute_arrays, build_snapshot

    lb = simulate("launch_bound", "a100", 6.0, 1).trace
    lk = lb.kernels
    lb = dataclasses.replace(lb, kernels=dataclasses.replace(
        lk, start_ns=lk.end_ns.copy(), end_ns=lk.start_ns.copy()))
    apart = build_snapshot(lb, attribute_arrays(lb, n_boot=10))
    assert apart.to_dict() == attribute(lb, n_boot=10).to_dict()


def test_the_live_engine_reads_backwards_items_as_zero_length_too() -> None:
    from attribution.engine.live import LiveEngine

    tr = simulate("varied_mix", "a100", 8.0, 1).trace
    k = tr.kernels
    swapped = dataclasses.replace(tr, kernels=dataclasses.replace(
        k, start_ns=k.end_ns.copy(), end_ns=k.start_ns.copy()))
    eng = LiveEngine(devices=tr.devices, horizon_s=30.0)
    t_end = int(max(k.start_ns.max(), k.end_ns.max(), tr.power.t_ns.max()))
    eng.update(swapped, t_end + 2_000_000_000)
    snap = eng.snapshot()
    assert snap is not None
    assert all(r.time_s >= 0 and r.energy_j >= 0 for r in snap.kernels)
    assert any("end before they start" in w for w in snap.warnings)


def test_a_few_records_far_from_the_run_are_left_out_with_a_line() -> None:
    """Five kernels at ts −10¹² µs made a 1 000 005 s window and 61.6 MJ (an audit); they
    are left out now, the window and the energies are the run's own."""
    from attribution.engine import attribute
    from attribution.engine.timing_checks import stray_records
    from tests.test_engine import hand_trace

    tr = hand_trace(seconds=10.0)
    clean = attribute(tr, n_boot=10)
    k = tr.kernels
    far = 10**18  # ~11.6 days of ns before the run
    s, e = k.start_ns.copy(), k.end_ns.copy()
    s[:3] -= far
    e[:3] -= far
    e[10] += 50 * 3_600 * 10**9  # one that "ends" two days later
    bad = dataclasses.replace(tr, kernels=dataclasses.replace(k, start_ns=s, end_ns=e))
    kept, n, reach_s = stray_records(bad)
    assert n == 4 and len(kept.kernels) == len(k) - 4 and reach_s >= 3_600.0
    snap = attribute(bad, n_boot=10)
    assert snap.window.duration_s == pytest.approx(clean.window.duration_s, rel=1e-3)
    assert snap.totals.energy_j == pytest.approx(clean.totals.energy_j, rel=0.02)
    assert any(w.startswith("4 record(s) lie more than") for w in snap.warnings)
    # the run itself is never cut: a shift of the whole timeline, or a second session half
    # the records long, leaves everything in
    assert stray_records(tr)[1] == 0
    half = len(k) // 2
    s2 = k.start_ns.copy()
    s2[:half] -= far
    two = dataclasses.replace(tr, kernels=dataclasses.replace(
        k, start_ns=s2, end_ns=k.end_ns - np.where(np.arange(len(k)) < half, far, 0)))
    assert stray_records(two)[1] == 0
    # without a power log nothing is at stake: kept; nor is what the log covers (a server's
    # warm-up and a late request two hours on, logged throughout, are one run)
    assert stray_records(dataclasses.replace(bad, power=type(tr.power).empty()))[1] == 0
    late = k.start_ns.copy(), k.end_ns.copy()
    two_h = 2 * 3_600 * 10**9
    late[0][:20] += two_h
    late[1][:20] += two_h
    cols = {c: np.r_[v, v[-1:]] for c, v in tr.power.columns().items()}
    cols["t_ns"][-1] += two_h + 10**9  # the log runs on past the late burst
    logged = type(tr.power).from_columns(cols)
    burst = dataclasses.replace(tr, kernels=dataclasses.replace(k, start_ns=late[0],
                                                                end_ns=late[1]))
    assert stray_records(burst)[1] == 20  # the log ends with the run: a burst it missed
    assert stray_records(dataclasses.replace(burst, power=logged))[1] == 0
