"""Records that share a timestamp, a counter that goes back, and a poll-stamped log shifted by
less than its stamps' resolution: the snapshot must not depend on the rows' order or on
where the timeline starts (issue #3's invariances; each case found by an audit, each test
fails on the engine before its fix)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attribution import native
from attribution.engine import attribute
from attribution.engine.counter import counter_energy_j, went_back
from attribution.engine.publish_grid import stamp_resolution_ns
from attribution.engine.timebase import readings_for
from attribution.idle import idle_intervals
from attribution.model import (
    CLOCK_REASON_SW_POWER_CAP,
    ApiBatch,
    ApiKind,
    ClockBatch,
    DeviceInfo,
    EnergyBatch,
    KernelBatch,
    PowerBatch,
    Trace,
)
from attribution.sim import simulate
from attribution.snapshot import Snapshot
from ppwtop.sim_io import through_files

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _tied_trace(order: list[int]) -> Trace:
    """Three kernels: one, a 0.5 ms gap, then two that start at the same ns on two streams;
    the later call (correlation 3) returned inside the gap, the earlier one long before."""
    tr = Trace(devices=[DeviceInfo(0, "NVIDIA A100-SXM4-80GB")])
    names = tr.strings.intern_many(["a", "b", "c"])
    launch = tr.strings.intern("cudaLaunchKernel")
    rows = [(0, MS, 7, 1, names[0]), (3 * MS // 2, 5 * MS // 2, 7, 2, names[1]),
            (3 * MS // 2, 5 * MS // 2, 13, 3, names[2])]
    rows = [rows[0]] + [rows[i] for i in order]
    s, e, st, co, nm = (np.array(c) for c in zip(*rows, strict=True))
    z = np.zeros(len(rows))
    tr.kernels = KernelBatch.from_columns(dict(
        start_ns=s + T0, end_ns=e + T0, device=z, stream=st, correlation=co, name_id=nm,
        grid_x=z + 1, grid_y=z + 1, grid_z=z + 1, block_x=z + 1, block_y=z + 1,
        block_z=z + 1, registers=z, shared_mem_bytes=z))
    call_end = np.array([-MS // 20, MS // 5, 7 * MS // 5]) + T0  # calls 1, 2 early; 3 late
    tr.apis = ApiBatch.from_columns(dict(
        start_ns=call_end - 10_000, end_ns=call_end, pid=np.ones(3), tid=np.ones(3),
        correlation=np.array([1, 2, 3]), name_id=np.full(3, launch),
        kind=np.full(3, int(ApiKind.LAUNCH))))
    return tr


@pytest.mark.parametrize("compiled", [True, False])
def test_a_gap_ended_by_items_starting_together_has_one_cause_in_any_order(
        compiled: bool) -> None:
    """The gap's next item is the latest call's (correlation 3, late): a launch gap, whichever
    row comes first.  Before, the first row in input order decided: launch gap or other."""
    was = native.use(compiled)
    try:
        causes = []
        for order in ([1, 2], [2, 1]):
            gaps = idle_intervals(_tied_trace(order), T0 - MS, T0 + 3 * MS)
            inside = gaps.start_ns == T0 + MS
            causes.append(gaps.cause_names()[int(np.flatnonzero(inside)[0])])
    finally:
        native.use(was)
    assert causes == ["launch_gap", "launch_gap"]


def _same(a: Snapshot, b: Snapshot) -> None:
    assert a.totals.active_idle_w == pytest.approx(b.totals.active_idle_w, rel=1e-9)
    assert ([k.dynamic_energy_j for k in a.kernels]
            == pytest.approx([k.dynamic_energy_j for k in b.kernels], rel=1e-9, abs=1e-9))
    assert [k.resolvable for k in a.kernels] == [k.resolvable for k in b.kernels]


def test_power_readings_sharing_a_time_are_averaged_in_any_order() -> None:
    """Every reading again at its own time with another value (two samplers merged): the
    engine reads their mean.  Before, the first row kept: P_idle moved 61 → 83 W on
    reversing the rows."""
    tr = simulate("varied_mix", "a100", 6.0, 1).trace
    twin = tr.power.columns()
    twin["power_mw"] = (twin["power_mw"] * 1.3).astype(twin["power_mw"].dtype)
    both = PowerBatch.concat([tr.power, PowerBatch.from_columns(twin)])
    rev = both.take(np.arange(len(both))[::-1].copy())
    r = readings_for(dataclasses.replace(tr, power=both), 0)
    assert np.all(np.diff(r.t_ns) > 0)
    one = readings_for(tr, 0)
    assert r.power_w == pytest.approx(one.power_w * 1.15, rel=2e-3)
    _same(attribute(dataclasses.replace(tr, power=both), n_boot=10),
          attribute(dataclasses.replace(tr, power=rev), n_boot=10))


def test_clock_samples_sharing_a_time_clamp_if_any_does_in_any_order() -> None:
    tr = simulate("clamp_episode", "a100", 6.0, 1).trace
    c = tr.clocks.columns()
    clamped = (c["clock_reasons"] & CLOCK_REASON_SW_POWER_CAP) != 0
    c["clock_reasons"] = np.where(clamped, 1, CLOCK_REASON_SW_POWER_CAP).astype(np.uint64)
    both = ClockBatch.concat([tr.clocks, ClockBatch.from_columns(c)])
    perm = np.random.default_rng(7).permutation(len(both))
    _same(attribute(dataclasses.replace(tr, clocks=both), n_boot=10),
          attribute(dataclasses.replace(tr, clocks=both.take(perm)), n_boot=10))


def test_a_counter_that_goes_back_is_not_a_closure_reference() -> None:
    """A reset mid-run read −739 831 J measured and a closure error of 0 before."""
    tr = simulate("varied_mix", "a100", 6.0, 1).trace
    c = {k: v.copy() for k, v in tr.energy.columns().items()}
    half = len(c["energy_mj"]) // 2
    c["energy_mj"][half:] -= c["energy_mj"][half] - 10
    reset = dataclasses.replace(tr, energy=EnergyBatch.from_columns(c))
    lo, hi = int(tr.kernels.start_ns.min()), int(tr.kernels.end_ns.max())
    assert not went_back(tr, 0, lo, hi) and counter_energy_j(tr, 0, lo, hi) is not None
    assert went_back(reset, 0, lo, hi) and counter_energy_j(reset, 0, lo, hi) is None
    # a window wholly before the reset still reads the counter
    assert counter_energy_j(reset, 0, lo, lo + 2 * 10**9) == pytest.approx(
        counter_energy_j(tr, 0, lo, lo + 2 * 10**9))
    snap = attribute(reset, n_boot=10)
    assert snap.totals.measured_energy_j == 0.0 and snap.totals.closure_error == 0.0
    assert any("energy counter decreases" in w for w in snap.warnings)


def test_stamp_resolution_is_judged_on_differences() -> None:
    t = np.arange(50, dtype=np.int64) * 12 * MS + T0
    assert [stamp_resolution_ns(t + d) for d in (0, 1, 1000, MS)] == [MS] * 4
    assert stamp_resolution_ns(np.r_[t, t[-1] + 1000]) == 1000


def test_a_poll_stamped_log_shifted_by_less_than_its_stamps_moves_nothing() -> None:
    """nvidia-smi's ms stamps, the whole run shifted by 1 ns: before, the stamps read as 1 ns
    resolution and pageable_copies/h200 moved P_idle 78.3 → 46.5 W."""
    tr = through_files(simulate("pageable_copies", "h200", 5.0, 4).trace)
    moved = Trace(strings=tr.strings, devices=list(tr.devices), meta=dict(tr.meta))
    for f in Trace.BATCH_FIELDS:
        setattr(moved, f, getattr(tr, f).shifted(1))
    _same(attribute(tr, n_boot=10), attribute(moved, n_boot=10))


def test_the_live_engine_averages_power_readings_sharing_a_time_too() -> None:
    """The live view took both rows of a doubled reading as two readings, kept in their
    order; now their mean, as the batch engine: both orders give one snapshot, the one of
    the averaged log."""
    from attribution.engine.live import LiveEngine

    tr = simulate("varied_mix", "a100", 8.0, 1).trace
    cols = tr.power.columns()
    twin = dict(cols, power_mw=np.rint(cols["power_mw"] * 1.3).astype(cols["power_mw"].dtype))
    mean = dict(cols, power_mw=((cols["power_mw"] + twin["power_mw"]) // 2).astype(
        cols["power_mw"].dtype))
    both = PowerBatch.concat([tr.power, PowerBatch.from_columns(twin)])
    now = int(max(tr.kernels.end_ns.max(), tr.power.t_ns.max())) + 2_000_000_000
    snaps = []
    for power in (both, both.take(np.arange(len(both))[::-1].copy()),
                  PowerBatch.from_columns(mean)):
        eng = LiveEngine(devices=tr.devices, horizon_s=30.0)
        eng.update(dataclasses.replace(tr, power=power), now)
        snap = eng.snapshot()
        assert snap is not None
        snaps.append(snap)
    _same(snaps[0], snaps[1])
    assert snaps[0].totals.active_idle_w == pytest.approx(snaps[2].totals.active_idle_w,
                                                          rel=1e-3)
