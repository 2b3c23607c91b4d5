"""The compiled sweeps (``attribution._native``) give the numpy forms' bits.

Each sweep is run against the numpy form it stands in for on inputs built to hit the awkward
cases (queries before, after and exactly at knots, out of order, one knot, empty groups,
overlapping instances, zero-length items), and the engine end to end is run both ways on
simulated traces.  Equality is exact.  The module is skipped where the extension was not
built (no C compiler at install time), unless ``PPWTOP_REQUIRE_NATIVE=1`` says it must be.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attribution import native
from attribution.engine import attribute_arrays, build_snapshot
from attribution.engine.activity import BusyFunction, _knots
from attribution.sim import simulate


def test_the_extension_is_built_where_it_must_be() -> None:
    if os.environ.get("PPWTOP_REQUIRE_NATIVE") == "1":
        assert native.built(), "PPWTOP_REQUIRE_NATIVE=1 but attribution._native did not build"
    elif not native.built():
        pytest.skip("attribution._native is not built")
    assert native.enabled() or os.environ.get("PPWTOP_NATIVE") == "0"


pytestmark = pytest.mark.skipif(not native.built() and
                                os.environ.get("PPWTOP_REQUIRE_NATIVE") != "1",
                                reason="attribution._native is not built")


@pytest.fixture(autouse=True)
def _native_on() -> object:
    was = native.use(True)
    yield
    native.use(was)


def _knots_of(rng: np.random.Generator, n: int, *, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    """Strictly increasing knots (seconds from whole ns, as BusyFunction makes them) and B."""
    gaps = rng.choice([500_000, 1_000_000, 2_000_000], n) if ties else rng.integers(1, 2_000_000, n)
    x_ns = np.unique(np.cumsum(gaps))
    return x_ns.astype(np.float64) * 1e-9, np.cumsum(rng.random(len(x_ns)))


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 300), st.integers(0, 400), st.booleans(),
       st.sampled_from(["sorted", "shuffled", "blocks"]))
def test_interp_groups_is_np_interp(seed: int, n_knots: int, n_q: int, ties: bool,
                                    order: str) -> None:
    rng = np.random.default_rng(seed)
    parts = []
    for g in range(3):
        x, y = _knots_of(rng, n_knots + g, ties=ties)
        parts.append((x, y))
    parts.append((np.empty(0), np.empty(0)))  # a group with no items reads 0
    hi_ns = max(round(float(p[0][-1]) * 1e9) for p in parts if len(p[0]))
    # queries in whole ns: before, inside, after the knots, and exactly at some of them
    # (a knot's own ns: the same conversion gives the same double), each group's last one
    t_rel = rng.integers(-2_000_000, hi_ns + 2_000_000, n_q)
    at = rng.random(n_q) < 0.3
    if at.any():
        t_rel[at] = rng.choice(np.rint(parts[0][0] * 1e9).astype(np.int64), int(at.sum()))
    t_rel[:3] = [round(float(p[0][-1]) * 1e9) for p in parts[:3]][:n_q]
    origin = 1_700_000_000_000_000_000
    t_ns = origin + t_rel
    if order == "sorted":
        t_ns = np.sort(t_ns)
    elif order == "blocks":  # sorted runs, as the lag search lays the edges out
        t_ns = np.sort(t_ns)[::-1].reshape(-1) if n_q < 4 else np.concatenate(
            [np.sort(c) for c in np.array_split(t_ns, 4)])
    n_cols = 4 if n_q % 4 == 0 and n_q else 1
    n_rows = n_q // n_cols if n_q else 0
    got = native.interp_groups([(x, y, native.coarse_index(x)) for x, y in parts], t_ns,
                               origin, n_rows, n_cols)
    tq = (t_ns - origin).astype(np.float64) * 1e-9
    assert got.shape == (n_cols, n_rows, 4)
    for g, (x, y) in enumerate(parts):
        want = (np.interp(tq, x, y, left=0.0, right=float(y[-1])) if len(x)
                else np.zeros(n_q))
        assert got[:, :, g].T.reshape(-1).tobytes() == want.tobytes()


def test_interp_groups_one_knot_and_bad_shapes() -> None:
    x, y = np.array([1.0]), np.array([5.0])
    t = np.array([0, 1_000_000_000, 2_000_000_000], np.int64)
    got = native.interp_groups([(x, y, native.coarse_index(x))], t, 0, 3, 1)
    assert got.reshape(-1).tolist() == np.interp([0.0, 1.0, 2.0], x, y, left=0.0,
                                                 right=5.0).tolist()
    with pytest.raises(ValueError, match="inconsistent shapes"):
        native.interp_groups([(x, y, native.coarse_index(x))], t, 0, 2, 1)
    with pytest.raises(ValueError, match="disagree"):
        native.interp_groups([(x, y, np.empty(0))], t, 0, 3, 1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31), st.integers(0, 400), st.integers(1, 6), st.booleans())
def test_knots_grouped_is_knots_per_group(seed: int, n: int, n_groups: int,
                                          overlap: bool) -> None:
    rng = np.random.default_rng(seed)
    gap = rng.integers(0, 2_000, n)
    dur = rng.integers(0, 5_000, n) * (rng.random(n) > 0.1)  # some zero-length items
    start = 10_000 + np.cumsum(gap + (0 if overlap else dur))
    if overlap:  # instances of a group may overlap or come out of order
        start = start + rng.integers(-3_000, 3_000, n)
    end = start + dur
    group = rng.integers(0, n_groups, n).astype(np.int32)
    origin = int(start.min()) - 7 if n else 0
    x, b, off, length = native.knots_grouped(start, end, group, n_groups, origin)
    for g in range(n_groups):
        sel = np.flatnonzero(group == g)
        wx, wb = _knots((start[sel] - origin).astype(np.float64) * 1e-9,
                        (end[sel] - origin).astype(np.float64) * 1e-9)
        s_g, e_g = start[sel], end[sel]
        ts = np.empty(2 * len(sel), np.int64)
        ts[0::2], ts[1::2] = s_g, e_g
        serial = bool(np.all(np.diff(ts) >= 0))
        if not serial:
            assert length[g] == -1
            continue
        a, m = int(off[g]), int(length[g])
        assert x[a:a + m].tobytes() == wx.tobytes() and b[a:a + m].tobytes() == wb.tobytes()


def test_knots_grouped_rejects_a_group_out_of_range() -> None:
    s = np.array([0, 10], np.int64)
    with pytest.raises(ValueError, match="outside"):
        native.knots_grouped(s, s + 5, np.array([0, 3], np.int32), 2, 0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 600), st.booleans())
def test_busy_function_both_ways(seed: int, n: int, overlap: bool) -> None:
    rng = np.random.default_rng(seed)
    dur = rng.integers(1, 4_000, n)
    start = np.cumsum(rng.integers(0, 3_000, n) + (0 if overlap else dur)) + 5_000
    end = start + dur
    group = rng.integers(0, 5, n).astype(np.int32)
    t = np.sort(rng.integers(0, int(end.max()) + 10_000, 60)).astype(np.int64)
    out = {}
    for on in (False, True):
        native.use(on)
        bf = BusyFunction(start, end, group, 5, origin_ns=1_000)
        out[on] = (bf(t), bf.by_group(t, (15, 4)))
    assert out[True][0].tobytes() == out[False][0].tobytes()
    assert out[True][1].tobytes() == out[False][1].tobytes()


@pytest.mark.parametrize(("scenario", "gpu"), [("two_streams", "h100"), ("launch_bound", "a100"),
                                               ("clamp_episode", "rtx3090")])
def test_engine_same_bits_both_ways(scenario: str, gpu: str) -> None:
    tr = simulate(scenario=scenario, gpu=gpu, seconds=6.0, seed=3).trace
    got = {}
    for on in (False, True):
        native.use(on)
        arrays = attribute_arrays(tr)
        got[on] = (arrays.kernel_energy_j.tobytes(), arrays.copy_dynamic_j.tobytes(),
                   arrays.idle_energy_j.tobytes(), build_snapshot(tr, arrays).to_dict())
    assert got[True] == got[False]


def test_ppwtop_native_0_turns_the_sweeps_off() -> None:
    code = "from attribution import native; print(native.built(), native.enabled())"
    env = dict(os.environ, PPWTOP_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "False"]
    native.use(False)
    with pytest.raises(RuntimeError, match="not in use"):
        native.interp_groups([], np.empty(0, np.int64), 0, 0, 0)
