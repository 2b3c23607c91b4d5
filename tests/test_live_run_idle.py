"""A live horizon busy throughout holds P_idle at the value an earlier horizon of the same
run placed (``live_solve.RUN_IDLE_CI``), not at the board table's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attribution.engine.live import LiveEngine
from attribution.model import DeviceInfo, EnergyBatch, Trace
from attribution.sim import SCENARIOS, SimResult, simulate
from tests.test_live_engine import drive

A100 = DeviceInfo(index=0, name="NVIDIA A100-SXM4-80GB")
"""The board the engine is told: its table's active idle (62 W) is not the simulated H200's
(75 W), as a board that idles differently from the table would be."""


def _mixed_then_saturated() -> tuple[Trace, SimResult, SimResult]:
    """20 s of varied_mix on an H200, then 30 s of back-to-back kernels (no gap, stall, sync
    or copy: every 25 ms window busy throughout), spliced 200 ms apart, without the energy
    counter (each run's counter starts at its own zero)."""
    first = simulate("varied_mix", "h200", 20.0, seed=4)
    busy = dataclasses.replace(SCENARIOS["varied_mix"], p_sync=0.0, p_stall=0.0,
                               p_launch_gap=0.0, copies=(), kernels_per_step=200)
    then = simulate("varied_mix", "h200", 30.0, seed=5, spec=busy)
    span_a, span_b = first.trace.gpu_span_ns(), then.trace.gpu_span_ns()
    assert span_a is not None and span_b is not None
    shift = span_a[1] - span_b[0] + 200_000_000
    bt = then.trace
    parts = {f: getattr(bt, f).shifted(shift) for f in Trace.BATCH_FIELDS}
    parts["energy"] = EnergyBatch.empty()
    moved = Trace(strings=bt.strings, devices=bt.devices, meta=dict(bt.meta), **parts)
    trace = dataclasses.replace(first.trace, energy=EnergyBatch.empty()).merged_with(moved)
    trace.devices = [A100]
    return trace, first, then


def _dynamic_truth_j(res: SimResult, lo_ns: int, hi_ns: int, shift: int) -> float:
    """True dynamic energy (× the gain) of ``res``'s kernels inside the window once shifted."""
    k = res.trace.kernels
    inside = (k.start_ns + shift >= lo_ns) & (k.end_ns + shift <= hi_ns)
    return float(np.sum(res.truth.kernel_dynamic_j[inside])) * res.truth.gain


def test_a_busy_horizon_holds_the_runs_own_active_idle() -> None:
    trace, first, then = _mixed_then_saturated()
    snap = drive(trace, LiveEngine(devices=[A100], horizon_s=10.0))
    assert snap is not None
    truth_w = then.truth.active_idle_w * then.truth.gain  # 74.5 W
    assert any("busy throughout" in w for w in snap.warnings)
    (why,) = {k.why for k in snap.kernels}
    assert "active idle held at this run's" in why and "the board table's 62 W" in why
    # held where the mixed horizons placed it (71.2 W), not at the table's 62 W (-17 %)
    assert snap.totals.active_idle_w == pytest.approx(truth_w, rel=0.06)
    lo_w, hi_w = snap.meta["active_idle_ci_w"]["0"]
    assert lo_w <= truth_w <= hi_w
    # the classes' dynamic energy follows (+1.1 %; the board's value put +3.6 % on them)
    span_b = then.trace.gpu_span_ns()
    span_a = first.trace.gpu_span_ns()
    assert span_a is not None and span_b is not None
    shift = span_a[1] - span_b[0] + 200_000_000
    dyn_truth = _dynamic_truth_j(then, snap.window.start_ns, snap.window.end_ns, shift)
    dyn = sum(k.dynamic_energy_j for k in snap.kernels)
    assert dyn == pytest.approx(dyn_truth, rel=0.02)


def test_with_no_earlier_placement_the_board_value_is_held() -> None:
    """The saturated part alone: no horizon ever placed P_idle, so the board table's."""
    _, _, then = _mixed_then_saturated()
    trace = dataclasses.replace(then.trace, devices=[A100])
    snap = drive(trace, LiveEngine(devices=[A100], horizon_s=10.0))
    assert snap is not None
    assert snap.totals.active_idle_w == pytest.approx(62.0, rel=1e-3)
    (why,) = {k.why for k in snap.kernels}
    assert "active idle held at the board's 62 W" in why


def test_a_board_without_a_table_value_holds_the_runs_own_too() -> None:
    """An unknown board (no table value): busy throughout, the fit put P_idle at 0 W (its
    interval from 0 to the lowest reading) and the classes' dynamic energy at +20 %; held at
    the run's own 72.8 W, +0.7 %."""
    trace, first, then = _mixed_then_saturated()
    l4 = DeviceInfo(index=0, name="NVIDIA L4")
    trace.devices = [l4]
    snap = drive(trace, LiveEngine(devices=[l4], horizon_s=10.0))
    assert snap is not None
    truth_w = then.truth.active_idle_w * then.truth.gain
    assert snap.totals.active_idle_w == pytest.approx(truth_w, rel=0.05)
    (why,) = {k.why for k in snap.kernels}
    assert "active idle held at this run's" in why and "no board model" not in why
    span_a, span_b = first.trace.gpu_span_ns(), then.trace.gpu_span_ns()
    assert span_a is not None and span_b is not None
    shift = span_a[1] - span_b[0] + 200_000_000
    dyn_truth = _dynamic_truth_j(then, snap.window.start_ns, snap.window.end_ns, shift)
    assert sum(k.dynamic_energy_j for k in snap.kernels) == pytest.approx(dyn_truth, rel=0.03)
