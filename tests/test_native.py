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
from attribution.sim import first_order, simulate


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


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(0, 60), min_size=1, max_size=9))
def test_merge_order_is_stable_argsort(seed: int, run_lengths: list[int]) -> None:
    rng = np.random.default_rng(seed)
    # sorted runs with many ties within and across runs (coarse values)
    s = np.concatenate([np.sort(rng.integers(0, 20, n)) for n in run_lengths]).astype(np.int64)
    got = native.merge_order(s)
    runs = 1 + int(np.sum(s[1:] < s[:-1]))
    if runs > 8:
        assert got is None
    else:
        assert got is not None and np.array_equal(got, np.argsort(s, kind="stable"))


def _plain_gaps(runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]], w0: int, w1: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """idle.idle_intervals' gap arrays, written plainly (the reference)."""
    s = np.concatenate([r[0] for r in runs])
    e = np.concatenate([r[1] for r in runs])
    c = np.concatenate([r[2] for r in runs])
    o = np.argsort(s, kind="stable")
    s, e, c = s[o], e[o], c[o]
    if len(s) == 0:
        gs, ge, nc = np.array([w0]), np.array([w1]), np.array([-1])
    else:
        e = np.maximum(e, s)
        run_end = np.maximum.accumulate(e)
        new = np.r_[True, s[1:] > run_end[:-1]]
        first = np.flatnonzero(new)
        last = np.r_[first[1:] - 1, len(s) - 1]
        gs = np.r_[w0, run_end[last]]
        ge = np.r_[s[first], w1]
        ge[0] = min(max(ge[0], w0), w1)
        gs[-1] = min(max(gs[-1], w0), w1)
        gs[0], ge[-1] = w0, w1
        # of the items tied at a segment's start, the largest correlation id
        nc = np.r_[[c[f:np.searchsorted(s, s[f], side="right")].max() for f in first],
                   -1].astype(np.int64)
    keep = np.ones(len(gs), bool)
    keep[0] = ge[0] > gs[0]
    keep[-1] = keep[-1] and ge[-1] > gs[-1]
    return gs[keep], ge[keep], nc[keep]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(0, 40), min_size=1, max_size=3),
       st.booleans())
def test_union_gaps_is_the_plain_form(seed: int, sizes: list[int], edge: bool) -> None:
    rng = np.random.default_rng(seed)
    runs = []
    for n in sizes:
        s = np.sort(rng.integers(0, 400, n)).astype(np.int64)
        e = s + rng.integers(-3, 30, n) * (rng.random(n) > 0.2)  # zero, negative lengths
        runs.append((s, e, rng.integers(0, 1000, n).astype(np.int64)))
    allo = np.concatenate([r[0] for r in runs] + [r[1] for r in runs])
    w0 = int(allo.min()) - (0 if edge else 5) if len(allo) else 0
    w1 = int(allo.max()) + (0 if edge else 5) if len(allo) else 10
    got = native.union_gaps(runs, window_ns=(w0, w1))
    assert got is not None
    want = _plain_gaps(runs, w0, w1)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)
    # a run out of order is left to the caller
    if sizes[0] > 1 and runs[0][0][0] != runs[0][0][-1]:
        bad = [(r[0][::-1].copy(), r[1][::-1].copy(), r[2]) for r in runs[:1]] + runs[1:]
        assert native.union_gaps(bad, window_ns=(w0, w1)) is None


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 50), st.integers(0, 40),
       st.sampled_from(["increasing", "shuffled", "dupes", "sparse"]))
def test_issue_ends_is_the_table_or_search(seed: int, n_api: int, n_q: int, mode: str) -> None:
    from attribution.idle import MAX_TABLE_PER_ROW, _issue_end_ns
    from attribution.model import ApiBatch, ApiKind, Trace

    rng = np.random.default_rng(seed)
    step = 1_000_000 if mode == "sparse" else 3
    corr = np.cumsum(rng.integers(1, step + 1, n_api)).astype(np.int64)
    if mode == "dupes" and n_api > 2:
        corr[1] = corr[0]  # ids not strictly increasing: the searched form's business
    kind = np.where(rng.random(n_api) < 0.2, int(ApiKind.SYNC), 0).astype(np.uint8)
    corr[rng.random(n_api) < 0.1] = -1
    end = rng.integers(0, 10**9, n_api).astype(np.int64)
    pool = np.r_[corr, corr + 1, -1] if n_api else np.array([-1, 5])
    q = rng.choice(pool, n_q).astype(np.int64)
    if mode != "shuffled":
        q = np.r_[np.sort(q[q >= 0]), q[q < 0]]  # the last gap's -1 comes at the end
    z = np.zeros(n_api, np.int64)
    tr = Trace(apis=ApiBatch(start_ns=end - 5, end_ns=end, pid=z, tid=z, correlation=corr,
                             name_id=z.astype(np.int32), kind=kind))
    got = native.issue_ends(kind, corr, end, q, sync_kind=int(ApiKind.SYNC),
                            max_per_row=MAX_TABLE_PER_ROW)
    w_end, w_found = _issue_end_ns(tr, q)
    issuing = corr[(kind != ApiKind.SYNC) & (corr >= 0)]
    if len(issuing) > 1 and not bool(np.all(issuing[1:] > issuing[:-1])):
        assert got is None
        return
    if got is None:  # queries out of order over ids too sparse for the table: the search's
        assert mode in {"shuffled", "sparse"}
        return
    g_end, g_found = got
    assert np.array_equal(g_found, w_found)
    assert np.array_equal(g_end[g_found], w_end[w_found])


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 60), st.integers(0, 12), st.booleans())
def test_gap_causes_are_the_rules(seed: int, n: int, n_sync: int, have_api: bool) -> None:
    from attribution import idle

    rng = np.random.default_rng(seed)
    pts = np.cumsum(rng.integers(1, 2_500_000, 2 * n)).astype(np.int64)
    gs, ge = pts[0::2], pts[1::2]  # sorted, disjoint gaps, as idle_intervals makes them
    ss = np.sort(rng.integers(0, int(ge[-1]) + 1 if n else 10, n_sync)).astype(np.int64)
    ss, se = idle.union_segments(ss, ss + rng.integers(0, 2_000_000, n_sync))
    found = rng.random(n) < 0.7
    issue_end = gs + rng.integers(-5_000, 5_000, n)
    got = native.gap_causes(gs, ge, issue_end, found, sync=(ss, se), have_api=have_api,
                            launch_tol_ns=idle.LAUNCH_TOL_NS, stall_ns=idle.STALL_NS,
                            sync_cover=idle.SYNC_COVER)
    dur = ge - gs
    cover = idle.covered_ns(ss, se, gs, ge)
    late = found & (issue_end >= gs - idle.LAUNCH_TOL_NS) if have_api else dur <= idle.STALL_NS
    want = np.where(late, idle.LAUNCH_GAP, idle.OTHER).astype(np.uint8)
    want[dur > idle.STALL_NS] = idle.HOST_STALL
    want[(cover > 0) & (cover > idle.SYNC_COVER * dur)] = idle.SYNC_WAIT
    assert np.array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 300), st.booleans())
def test_share_serial_is_share_one_at_a_time(seed: int, n: int, overlap: bool) -> None:
    from attribution.engine.activity import _share_one_at_a_time

    rng = np.random.default_rng(seed)
    dur = rng.integers(0, 5_000, n)
    s = np.cumsum(rng.integers(0, 3_000, n) + (0 if overlap else dur)).astype(np.int64)
    e = s + dur
    o = rng.permutation(n) if rng.random() < 0.5 else np.arange(n)
    s, e = s[o], e[o]  # out of start order too
    want = _share_one_at_a_time(s, e, 123)
    got = native.share_serial(s, e, np.argsort(s, kind="stable").astype(np.int64), 123)
    if want is None:
        assert got is None
    else:
        assert got is not None and got.tobytes() == want.tobytes()


def test_gap_causes_at_the_rules_edges() -> None:
    from attribution import idle

    gs = np.array([0, 100, 200, 300, 2_000_000], np.int64)
    ge = np.array([10, 110, 210, 1_300_001, 2_000_000 + idle.STALL_NS], np.int64)
    ss = np.array([0, 104, 300], np.int64)  # half of gap 0, 6 of 10 of gap 1, all of gap 3
    se = np.array([5, 110, 1_300_001], np.int64)
    found = np.array([True, True, True, False, True])
    issue_end = np.array([0, 100, 200 - idle.LAUNCH_TOL_NS - 1, 0,
                          2_000_000 - idle.LAUNCH_TOL_NS], np.int64)
    got = native.gap_causes(gs, ge, issue_end, found, sync=(ss, se), have_api=True,
                            launch_tol_ns=idle.LAUNCH_TOL_NS, stall_ns=idle.STALL_NS,
                            sync_cover=idle.SYNC_COVER)
    # exactly half covered is not a sync wait; the tolerance is inclusive; a gap of exactly
    # STALL_NS is not a stall
    assert got.tolist() == [idle.LAUNCH_GAP, idle.SYNC_WAIT, idle.OTHER, idle.SYNC_WAIT,
                            idle.LAUNCH_GAP]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 400), st.integers(1, 40), st.booleans())
def test_window_fractions_both_ways(seed: int, n_items: int, n_readings: int,
                                    spread: bool) -> None:
    from attribution.engine.timebase import iter_window_fractions

    rng = np.random.default_rng(seed)
    dur = rng.integers(1, 3_000_000, n_items)
    start = np.cumsum(rng.integers(0, 2_000_000, n_items) + dur) + 50_000_000
    end = start + dur
    group = rng.integers(0, 3, n_items).astype(np.int32)
    t = np.sort(rng.integers(int(start[0]), int(end[-1]) + 80_000_000, n_readings))
    sp = rng.integers(0, 8_000_000, n_readings) if spread else None
    specs = [(float(d), float(tau)) for d in rng.uniform(-5, 40, 4)
             for tau in rng.choice([0.0, 0.8, 3.0], 2)]
    got = {}
    for on in (False, True):
        native.use(on)
        bf = BusyFunction(start, end, group, 3, origin_ns=int(start[0]) - 999)
        got[on] = [x.tobytes() for x in iter_window_fractions(bf, t, 25.0, specs, spread_ns=sp)]
    assert got[True] == got[False]


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 3000),
       st.sampled_from([0.0, 1e-12, 0.37, 0.999_975, 1.0, 1.5, -0.6]), st.booleans())
def test_first_order_is_lfilter(seed: int, n: int, a: float, odd: bool) -> None:
    """The simulator's recursion gives lfilter's bits, signed zeros and non-finite values
    included, for every pole the simulator uses and a few it does not."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 50.0, n)
    if odd and n:
        picks = rng.integers(0, n, 6)
        x[picks] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300], 6)
    got = first_order.first_order(1.0 - a, a, x)
    want = first_order.reference(1.0 - a, a, x)
    assert got.dtype == np.float64 and got.shape == x.shape
    assert got.view(np.int64).tobytes() == want.view(np.int64).tobytes()


def test_first_order_rejects_a_wrong_length_out() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        native._lib().first_order(0.5, 0.5, np.zeros(4), np.zeros(3))


@pytest.mark.parametrize(("scenario", "gpu"), [("clamp_episode", "rtx4090"), ("demo", "v100")])
def test_simulator_same_bits_both_ways(scenario: str, gpu: str) -> None:
    """The simulator's board power, sensor readings and temperatures do not depend on
    whether the compiled recursion or scipy's lfilter ran them."""
    got = {}
    for on in (False, True):
        native.use(on)
        run = simulate(scenario=scenario, gpu=gpu, seconds=4.0, seed=5)
        got[on] = (run.trace.power.power_mw.tobytes(), run.trace.power.t_ns.tobytes(),
                   run.trace.energy.energy_mj.tobytes(), run.trace.clocks.temp_c.tobytes(),
                   run.true_power[1].tobytes())
    assert got[True] == got[False]
