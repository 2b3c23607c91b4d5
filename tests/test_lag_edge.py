"""A lag fitted at the edge of its search (``lag_refine.lag_at_edge``): the trace's clock
tens of ms off the power log's pushed the true lag past the search, and the split was made at
the edge with no word (an audit, 2026-12-05)."""

from __future__ import annotations

import dataclasses

import pytest

from attribution.engine import attribute
from attribution.engine.lag_refine import EDGE_MS, lag_at_edge
from attribution.engine.timebase import LAG_GRID_MS
from attribution.model import Trace
from attribution.sim import simulate


def test_the_edges() -> None:
    lo, hi = LAG_GRID_MS
    assert lag_at_edge(lo) and lag_at_edge(hi) and lag_at_edge(lo - 3.0)
    assert lag_at_edge(lo - 3.0 + EDGE_MS, tau_ms=3.0)  # the τ = 0 lag the grid searched
    assert not lag_at_edge(lo + 2 * EDGE_MS) and not lag_at_edge(0.0)
    assert not lag_at_edge(hi - 2 * EDGE_MS)


def _shifted(trace: Trace, ms: float) -> Trace:
    d = int(ms * 1e6)
    return dataclasses.replace(trace, kernels=trace.kernels.shifted(d),
                               copies=trace.copies.shifted(d), memsets=trace.memsets.shifted(d),
                               apis=trace.apis.shifted(d), markers=trace.markers.shifted(d))


@pytest.mark.parametrize(("gpu", "shift_ms", "told"), [
    ("v100", 30.0, True),  # GEMM resolvable at −24 %, a copy at +2 460 %, before
    ("v100", -64.0, True),  # the other end
    ("v100", 0.0, False), ("a100", 5.0, False)])
def test_a_trace_clock_tens_of_ms_off_is_told(gpu: str, shift_ms: float, told: bool) -> None:
    trace = _shifted(simulate("varied_mix", gpu, 30.0, seed=0).trace, shift_ms)
    snap = attribute(trace, n_boot=20)
    said = [w for w in snap.warnings if "the edge of its search" in w]
    assert bool(said) is told
    if told:
        assert all(not k.resolvable and "edge of its search" in k.why for k in snap.kernels)
        assert all(not c.resolvable and "edge of its search" in c.why for c in snap.copies)


def test_the_line_names_the_lag_the_search_saw() -> None:
    """−24 ms with a 4 ms response sits at the −20 ms end: the line says both (an audit read
    "fitted at −24.0 ms, the edge of its search (−20 to +60 ms)" as a contradiction)."""
    from attribution.engine.lag_refine import lag_edge_warning, lag_edge_why

    lo = LAG_GRID_MS[0]
    line = lag_edge_warning(0, lo - 4.0, 4.0)
    assert f"{lo - 4.0:+.1f} ms ({lo:+.1f} ms with the board's 4.0 ms response)" in line
    assert f"({lo:+.0f} to" in line
    assert "(" not in lag_edge_warning(0, lo).split("ms")[0]  # no response: the lag alone
    assert f"{lo:+.1f} ms with" in lag_edge_why(lo - 4.0, 4.0)
