"""The engine's readings at their edges: a power log whose value never changes, and power
readings none of which can be used (a trace window shorter than the sensor's lag + window)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attribution.engine import attribute
from attribution.engine.live import LiveEngine
from attribution.engine.timebase import MIN_FRESH, readings_for
from attribution.model import PowerBatch, PowerField
from attribution.presets import PRESETS
from attribution.sim import simulate
from tests.test_live_engine import drive

MS = 1_000_000


def _polls(t0_ns: int, n: int, value_mw: int, *, fresh_first: int) -> PowerBatch:
    """``n`` polls 12 ms apart of one constant value, the first ``fresh_first`` marked fresh
    (a change-of-value importer marks only the first)."""
    fresh = np.zeros(n, bool)
    fresh[:fresh_first] = True
    return PowerBatch.from_columns({
        "t_ns": t0_ns + np.arange(n, dtype=np.int64) * 12 * MS,
        "power_mw": np.full(n, value_mw, np.int64), "device": np.zeros(n, np.int16),
        "field": np.full(n, int(PowerField.INSTANT), np.uint8), "fresh": fresh})


@pytest.mark.parametrize("fresh_first", [1, MIN_FRESH - 1])
def test_a_value_that_never_changes_counts_every_poll(fresh_first: int) -> None:
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    span = trace.gpu_span_ns()
    assert span is not None
    polls = _polls(span[0] - 200 * MS, 900, 150_000, fresh_first=fresh_first)
    rd = readings_for(dataclasses.replace(trace, power=polls), 0)
    assert len(rd.t_ns) == 900 and np.all(rd.power_w == 150.0)
    # enough fresh readings: those alone, as before
    polls = _polls(span[0] - 200 * MS, 900, 150_000, fresh_first=MIN_FRESH)
    assert len(readings_for(dataclasses.replace(trace, power=polls), 0).t_ns) == MIN_FRESH


def test_no_usable_reading_idles_at_the_board_value() -> None:
    """Readings that all end before the trace's window (none can hold a window inside it):
    the board's active idle, known to the sanity band, and no dynamic energy -- not 0 J."""
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    span = trace.gpu_span_ns()
    assert span is not None
    p = trace.power
    trace = dataclasses.replace(trace, power=p.take(p.t_ns < span[0]))
    snap = attribute(trace, n_boot=20)
    idle_w = PRESETS["a100"].active_idle_w
    assert snap.totals.active_idle_w == idle_w
    window_s = (snap.window.end_ns - snap.window.start_ns) * 1e-9
    assert snap.totals.energy_j == pytest.approx(idle_w * window_s, rel=1e-9)
    assert all(k.dynamic_energy_j == 0.0 and not k.resolvable for k in snap.kernels)
    assert any("no usable power reading" in w for w in snap.warnings)
    lo, hi = snap.meta["active_idle_ci_w"]["0"]
    assert lo <= 0.5 * idle_w * 1.001 and hi >= 1.5 * idle_w * 0.999


def test_live_with_no_reading_in_its_horizon_idles_at_the_board_value() -> None:
    """The power readings stop after 4 s (a sampler that died); 6 s later the 3 s horizon
    holds none: idle at the board's value, no dynamic energy -- not 0 J."""
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    span = trace.gpu_span_ns()
    assert span is not None
    p = trace.power
    trace = dataclasses.replace(trace, power=p.take(p.t_ns < span[0] + 4_000 * MS))
    snap = drive(trace, LiveEngine(devices=trace.devices, horizon_s=3.0, n_boot=20))
    assert snap is not None
    assert snap.totals.active_idle_w == PRESETS["a100"].active_idle_w
    assert snap.totals.idle_energy_j > 0.0
    assert all(k.dynamic_energy_j == 0.0 and not k.resolvable for k in snap.kernels)
