"""The batch engine's fast per-record paths give exactly what the plain forms gave.

Each rewritten pass (idle gaps and their causes, the ``P_idle`` time share, the busy-time
knots, the class and device look-ups) is compared here, on random timelines built to hit the
awkward cases (several devices, items outside the window or unsorted, overlaps, zero-length
items, equal times, repeated or sparse correlation ids), against the plain implementation it
replaced, kept in this file as the reference.  Equality is exact: the rewrites reorder no
floating-point arithmetic.  Every test runs twice: on the numpy forms and on the compiled
sweeps (``native_mode``), which must give the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attribution.engine.activity import BusyFunction, _knots, idle_share_s, items_for_device
from attribution.idle import (
    HOST_STALL,
    LAUNCH_GAP,
    LAUNCH_TOL_NS,
    OTHER,
    STALL_NS,
    SYNC_COVER,
    SYNC_WAIT,
    covered_ns,
    device_indices,
    idle_intervals,
)
from attribution.intsets import distinct_ints, unique_inverse
from attribution.model import (
    F64,
    I64,
    ApiBatch,
    ApiKind,
    CopyBatch,
    KernelBatch,
    MemsetBatch,
    StringTable,
    Trace,
)

pytestmark = pytest.mark.usefixtures("native_mode")

# ---- the plain forms the engine used before (references) -------------------------------


def ref_union(start_ns: I64, end_ns: I64) -> tuple[I64, I64]:
    if len(start_ns) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(start_ns, kind="stable")
    s = start_ns[order].astype(np.int64)
    e = np.maximum(end_ns[order].astype(np.int64), s)
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], run_end[last]


def ref_covered(seg_start: I64, seg_end: I64, a_ns: I64, b_ns: I64) -> I64:
    """Brute force, independent of ``idle``'s prefix sums: each segment's overlap with every
    span ``[a, b]``, summed."""
    out = np.zeros(len(a_ns), np.int64)
    for s0, e0 in zip(seg_start.tolist(), seg_end.tolist(), strict=True):
        out += np.clip(np.minimum(b_ns, e0) - np.maximum(a_ns, s0), 0, None)
    return out


def ref_issue_end(trace: Trace, correlation: I64) -> tuple[I64, np.ndarray]:
    apis = trace.apis
    issue = (apis.kind != ApiKind.SYNC) & (apis.correlation >= 0)
    corr, ends = apis.correlation[issue], apis.end_ns[issue]
    if len(corr) == 0 or len(correlation) == 0:
        return np.zeros(len(correlation), np.int64), np.zeros(len(correlation), bool)
    order = np.argsort(corr, kind="stable")
    corr, ends = corr[order], ends[order]
    j = np.clip(np.searchsorted(corr, correlation), 0, len(corr) - 1)
    return ends[j], (corr[j] == correlation) & (correlation >= 0)


def ref_idle(trace: Trace, ws: int, we: int, devices: list[int]
             ) -> tuple[I64, I64, np.ndarray, np.ndarray]:
    apis = trace.apis
    sync = apis.kind == ApiKind.SYNC
    sync_s, sync_e = ref_union(apis.start_ns[sync], apis.end_ns[sync])
    out: list[tuple[I64, I64, np.ndarray, np.ndarray]] = []
    for dev in devices:
        k, cp, ms = trace.kernels, trace.copies, trace.memsets
        km, cm, mm = k.device == dev, cp.device == dev, ms.device == dev
        s = np.concatenate([k.start_ns[km], cp.start_ns[cm], ms.start_ns[mm]])
        e = np.concatenate([k.end_ns[km], cp.end_ns[cm], ms.end_ns[mm]])
        corr = np.concatenate([k.correlation[km], cp.correlation[cm], ms.correlation[mm]])
        inwin = (e > ws) & (s < we)
        s, e, corr = s[inwin], e[inwin], corr[inwin]
        order = np.argsort(s, kind="stable")
        s, e, corr = s[order], e[order], corr[order]
        seg_s, seg_e = ref_union(s, e)
        seg_s, seg_e = np.clip(seg_s, ws, we), np.clip(seg_e, ws, we)
        gap_s, gap_e = np.r_[np.int64(ws), seg_e], np.r_[seg_s, np.int64(we)]
        first_item = np.clip(np.searchsorted(s, seg_s, side="left"), 0, max(len(s) - 1, 0))
        # of the items starting with a segment, the latest call (largest correlation id)
        next_corr = np.r_[[corr[f:np.searchsorted(s, s[f], side="right")].max()
                           for f in first_item.tolist()] if len(s) else
                          np.empty(0, np.int64), np.int64(-1)].astype(np.int64)
        keep = gap_e > gap_s
        gap_s, gap_e, next_corr = gap_s[keep], gap_e[keep], next_corr[keep]
        dur = gap_e - gap_s
        cover = ref_covered(sync_s, sync_e, gap_s, gap_e)
        issue_end, found = ref_issue_end(trace, next_corr)
        late = found & (issue_end >= gap_s - LAUNCH_TOL_NS)
        if len(apis) == 0:
            late = dur <= STALL_NS
        cause = np.full(len(dur), OTHER, np.uint8)
        cause[late] = LAUNCH_GAP
        cause[dur > STALL_NS] = HOST_STALL
        cause[cover > SYNC_COVER * dur] = SYNC_WAIT
        out.append((gap_s, gap_e, np.full(len(dur), dev, np.int16), cause))
    return tuple(np.concatenate([o[i] for o in out]) for i in range(4))  # type: ignore[return-value]


def ref_share(start_ns: I64, end_ns: I64, origin_ns: int) -> F64:
    n = len(start_ns)
    t = np.concatenate([start_ns, end_ns]) - origin_ns
    d = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.lexsort((d, t))
    ts = t[order].astype(np.float64) * 1e-9
    k = np.cumsum(d[order])
    rate = np.where(k[:-1] > 0, 1.0 / np.maximum(k[:-1], 1), 0.0)
    g = np.r_[0.0, np.cumsum(np.diff(ts) * rate)]
    gs = np.interp((start_ns - origin_ns).astype(np.float64) * 1e-9, ts, g)
    ge = np.interp((end_ns - origin_ns).astype(np.float64) * 1e-9, ts, g)
    return np.maximum(ge - gs, 0.0)


def ref_knots(s: F64, e: F64) -> tuple[F64, F64]:
    n = len(s)
    t = np.concatenate([s, e])
    step = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.argsort(t, kind="stable")
    ts = t[order]
    running = np.cumsum(step[order])
    b = np.empty(len(ts), np.float64)
    b[0] = 0.0
    np.cumsum(running[:-1] * np.diff(ts), out=b[1:])
    last = np.r_[np.diff(ts) > 0, True]
    return ts[last], b[last]


# ---- random timelines -------------------------------------------------------------------

T0 = 1_700_000_000_000_000_000


def _timeline(seed: int, n: int, *, devices: int, sorted_items: bool, dense_corr: bool,
              syncs: int, span_ns: int = 50_000_000) -> Trace:
    rng = np.random.default_rng(seed)
    start = rng.integers(0, span_ns, n)
    if sorted_items:
        start = np.sort(start)
    dur = rng.integers(0, 400_000, n)
    dur[rng.random(n) < 0.1] = 0  # zero-length items
    start[1::7] = start[0::7][: len(start[1::7])]  # equal start times
    end = start + dur
    dev = rng.integers(0, devices, n).astype(np.int16)
    corr = np.arange(n, dtype=np.int64) * (1 if dense_corr else 7919) + 100
    corr[rng.random(n) < 0.05] = -1
    n_k, n_c = n * 7 // 10, n * 2 // 10
    cols = {"start_ns": T0 + start, "end_ns": T0 + end, "device": dev, "correlation": corr,
            "name_id": rng.integers(0, 6, n).astype(np.int32)}

    def part(lo: int, hi: int) -> dict[str, np.ndarray]:
        return {k: v[lo:hi] for k, v in cols.items()}

    kc = part(0, n_k)
    cc = part(n_k, n_k + n_c)
    del cc["name_id"]
    cc["kind"] = rng.integers(1, 4, len(cc["start_ns"])).astype(np.uint8)
    cc["bytes"] = rng.integers(1, 1 << 20, len(cc["start_ns"]))
    mc = part(n_k + n_c, n)
    del mc["name_id"]
    mc["bytes"] = rng.integers(1, 1 << 20, len(mc["start_ns"]))
    # issuing API calls: most items have one, ending before or inside the gap before them
    m = np.flatnonzero(corr >= 0)
    a_end = start[m] - rng.integers(-200_000, 600_000, len(m))
    a_corr = corr[m]
    if not dense_corr:  # sparse ids, some repeated (a later call with the same id)
        a_corr = np.r_[a_corr, a_corr[::11]]
        a_end = np.r_[a_end, a_end[::11] + 5_000]
    sy_s = np.sort(rng.integers(0, span_ns, syncs))
    sy_e = sy_s + rng.integers(0, 3_000_000, syncs)
    api_s = np.r_[a_end - 3_000, sy_s]
    api_e = np.r_[a_end, sy_e]
    kinds = np.r_[np.full(len(a_end), int(ApiKind.LAUNCH)), np.full(syncs, int(ApiKind.SYNC))]
    apis = ApiBatch.from_columns({
        "start_ns": T0 + api_s, "end_ns": T0 + api_e,
        "correlation": np.r_[a_corr, np.full(syncs, -1)], "kind": kinds,
        "name_id": np.zeros(len(api_s), np.int32)})
    return Trace(kernels=KernelBatch.from_columns(kc), copies=CopyBatch.from_columns(cc),
                 memsets=MemsetBatch.from_columns(mc), apis=apis,
                 strings=StringTable([f"k{i}" for i in range(6)]))


CASES = st.tuples(st.integers(0, 10_000), st.integers(1, 400), st.integers(1, 3), st.booleans(),
                  st.booleans(), st.integers(0, 30), st.floats(-0.1, 1.1), st.floats(0.0, 1.1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                              HealthCheck.function_scoped_fixture])
@given(CASES)
def test_idle_intervals_match_the_plain_form(
        case: tuple[int, int, int, bool, bool, int, float, float]) -> None:
    seed, n, devices, sorted_items, dense, syncs, a, b = case
    tr = _timeline(seed, n, devices=devices, sorted_items=sorted_items, dense_corr=dense,
                   syncs=syncs)
    lo, hi = sorted((a, b))
    ws, we = T0 + int(lo * 50_000_000), T0 + int(hi * 50_000_000) + 1
    devs = device_indices(tr)
    got = idle_intervals(tr, ws, we, devs)
    want = ref_idle(tr, ws, we, devs)
    cols: tuple[np.ndarray, ...] = (got.start_ns, got.end_ns, got.device, got.cause)
    for g, w in zip(cols, want, strict=True):
        assert np.array_equal(g, w)


def test_idle_intervals_match_on_a_dense_timeline() -> None:
    tr = _timeline(5, 20_000, devices=1, sorted_items=True, dense_corr=True, syncs=400,
                   span_ns=8_000_000_000)
    got = idle_intervals(tr, T0, T0 + 8_000_400_000, [0])
    want = ref_idle(tr, T0, T0 + 8_000_400_000, [0])
    assert len(got) > 1000 and len(set(got.cause.tolist())) >= 3  # all paths exercised
    cols: tuple[np.ndarray, ...] = (got.start_ns, got.end_ns, got.device, got.cause)
    for g, w in zip(cols, want, strict=True):
        assert np.array_equal(g, w)


@pytest.mark.parametrize("seed", range(4))
def test_covered_ns_with_sorted_and_unsorted_queries(seed: int) -> None:
    rng = np.random.default_rng(seed)
    seg_s, seg_e = ref_union(rng.integers(0, 10**6, 30), rng.integers(0, 10**6, 30) + 10**4)
    a = np.sort(rng.integers(-10**4, 11 * 10**5, 2000))
    b = np.maximum.accumulate(a + rng.integers(0, 10**5, 2000))  # sorted too: the fast path
    b[::97] = a[::97]  # empty spans
    assert np.array_equal(covered_ns(seg_s, seg_e, a, b), ref_covered(seg_s, seg_e, a, b))
    p = rng.permutation(2000)
    assert np.array_equal(covered_ns(seg_s, seg_e, a[p], b[p]),
                          ref_covered(seg_s, seg_e, a[p], b[p]))
    # gap-like spans: disjoint, touching the segments' ends
    edges = np.unique(np.r_[seg_s, seg_e, rng.integers(-10**4, 11 * 10**5, 3000)])
    ga, gb = edges[:-1:2], edges[1::2]
    got = covered_ns(seg_s, seg_e, ga, gb)
    assert np.array_equal(got, ref_covered(seg_s, seg_e, ga, gb))
    assert (got > 0).any() and (got == 0).any()


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.integers(1, 500), st.booleans())
def test_time_share_and_knots_match_the_plain_forms(seed: int, n: int, overlap: bool) -> None:
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 5_000_000 if overlap else 500_000_000, n)
    dur = rng.integers(0, 400_000, n)
    dur[::5] = 0
    start[1::3] = start[0::3][: len(start[1::3])]
    end = start + dur
    end[2::9] = start[2::9]  # an end equal to another's start
    origin = int(start.min()) - 17
    assert np.array_equal(idle_share_s(start, end, origin), ref_share(start, end, origin))
    s_f = (start - origin).astype(np.float64) * 1e-9
    e_f = (end - origin).astype(np.float64) * 1e-9
    for g, w in zip(_knots(s_f, e_f), ref_knots(s_f, e_f), strict=True):
        assert np.array_equal(g, w)
    # one instance after another (touching, zero-length, equal starts allowed): the
    # interleaved fast path
    gaps = rng.integers(0, 3, n) * rng.integers(0, 50_000, n)
    s1 = np.cumsum(gaps + np.r_[0, dur[:-1]]) - origin // 7
    e1 = s1 + dur
    assert bool(np.all(s1[1:] >= e1[:-1]))
    s_f, e_f = s1.astype(np.float64) * 1e-9, e1.astype(np.float64) * 1e-9
    for g, w in zip(_knots(s_f, e_f), ref_knots(s_f, e_f), strict=True):
        assert np.array_equal(g, w)
    assert np.array_equal(idle_share_s(s1, e1, -5), ref_share(s1, e1, -5))
    q = rng.permutation(n)  # the same items in any order
    assert np.array_equal(idle_share_s(s1[q], e1[q], 11), ref_share(s1[q], e1[q], 11))


def test_busy_function_groups_any_labels() -> None:
    """Groups sorted by a narrow key (the fast path) or not (ids out of range): same B."""
    rng = np.random.default_rng(1)
    start = np.sort(rng.integers(0, 10**9, 5000))
    end = start + rng.integers(0, 10**6, 5000)
    group = rng.integers(0, 3, 5000).astype(np.int32)
    t = rng.integers(0, 10**9, 300)
    fast = BusyFunction(start, end, group, 3, origin_ns=0)(t)
    odd = group.copy()
    odd[:3] = 7  # outside [0, n_groups): dropped, like the plain form drops them
    keep = odd < 3
    got = BusyFunction(start, end, odd, 3, origin_ns=0)(t)
    want = BusyFunction(start[keep], end[keep], group[keep], 3, origin_ns=0)(t)
    assert np.array_equal(got, want)
    assert not np.array_equal(got, fast)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(-40_000, 40_000), max_size=60), st.sampled_from(
    [np.int16, np.int32, np.int64]))
def test_int_sets_are_np_unique(values: list[int], dtype: type[np.signedinteger[Any]]) -> None:
    a = np.array(values, np.int64).astype(dtype)
    u, inv = unique_inverse(a)
    wu, winv = np.unique(a, return_inverse=True)
    assert np.array_equal(u, wu) and np.array_equal(inv, winv.reshape(-1))
    assert np.array_equal(distinct_ints(a), wu)
    sparse = np.array([*values, 10**12], np.int64)  # a wide range: the np.unique path
    assert np.array_equal(unique_inverse(sparse)[1], np.unique(sparse, return_inverse=True)[1])


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 40), max_size=300), st.sampled_from([1, 3, 12, 13, 41]),
       st.sampled_from(["dense", "few", "negative", "sparse"]))
def test_int_counts_relabel_and_indices_are_the_plain_forms(values: list[int], n: int,
                                                            spread: str) -> None:
    """``counts``, ``indices_by_value`` (codes past n in no list), ``distinct_ints`` on a
    range of few values, and ``relabel`` through the id table or the search."""
    from attribution.intsets import counts, indices_by_value, relabel

    a = np.array(values, np.int64)
    codes = a % (n + 2)  # some codes ≥ n
    assert counts(a % n, n).tolist() == np.bincount(a % n, minlength=n)[:n].tolist()
    got = indices_by_value(codes, n)
    assert len(got) == n
    for v, idx in enumerate(got):
        assert idx.tolist() == np.flatnonzero(codes == v).tolist()
    ids = {"dense": a, "few": a % 5 + 7, "negative": a - 20, "sparse": a * 10**9}[spread]
    distinct = distinct_ints(ids)
    assert distinct.tolist() == np.unique(ids).tolist()
    label = (np.arange(len(distinct)) * 7 + 1).astype(np.int32)
    out = np.empty(len(ids), np.int32)
    relabel(ids, distinct, label, out=out)
    assert out.tolist() == label[np.unique(ids, return_inverse=True)[1].reshape(-1)].tolist()


def test_items_for_device_on_several_devices() -> None:
    tr = _timeline(3, 3000, devices=3, sorted_items=False, dense_corr=True, syncs=5)
    rows = 0
    for d in device_indices(tr):
        it = items_for_device(tr, d)
        rows += len(it)
        k = it.source == 0
        names = [tr.strings[i] for i in tr.kernels.name_id[it.row[k]].tolist()]
        assert [it.labels[c] for c in it.cls[k].tolist()] == [f"kernel:{x}" for x in names]
        assert np.array_equal(it.start_ns[k], tr.kernels.start_ns[it.row[k]])
    assert rows == len(tr.kernels) + len(tr.copies) + len(tr.memsets)


@pytest.mark.parametrize("seed", range(3))
def test_storm_spans_by_counting_equal_by_search(seed: int) -> None:
    """Sorted gap starts are placed storm by storm (index ranges); any order by a search."""
    from attribution.ranking.storms import Storms, in_spans

    rng = np.random.default_rng(seed)
    s = np.sort(rng.choice(10**7, 40, replace=False))
    e = s + rng.integers(1, 10**5, 40)
    dev = rng.integers(0, 2, 40).astype(np.int64)
    storms = Storms(dev, s, e, np.ones(40, np.int64), np.ones(40, np.int64))
    t = np.sort(np.r_[rng.integers(0, 10**7, 3000), s, e, e - 1])
    on = np.zeros(len(t), np.int64)  # one device: the sorted, index-range path
    p = rng.permutation(len(t))
    got, shuffled = in_spans(t, on, storms), in_spans(t[p], on[p], storms)
    assert np.array_equal(got[p], shuffled)
    s0, e0 = s[dev == 0], e[dev == 0]
    k = np.searchsorted(s0, t, side="right") - 1
    assert np.array_equal(got, (k >= 0) & (t < e0[np.clip(k, 0, None)]))
    assert got.any() and not got.all()


def test_snapshot_rows_and_record_energies_on_two_gpus(
        on_two_gpus: Callable[[Trace, Trace], Trace]) -> None:
    """Idle rows by (GPU, cause) and per-record energies scattered back to the trace's rows:
    the slice-based forms equal the plain masks on a two-GPU trace with shuffled rows."""
    from attribution.engine import attribute_arrays, build_snapshot
    from attribution.sim import simulate
    from attribution.snapshot import IDLE_CAUSES

    a = simulate(scenario="demo", gpu="h100", seconds=5.0, seed=1).trace
    b = simulate(scenario="varied_mix", gpu="a100", seconds=5.0, seed=2).trace
    tr = on_two_gpus(a, b)
    p = np.random.default_rng(0).permutation(len(tr.kernels))
    tr.kernels = type(tr.kernels)(**{k: v[p] for k, v in tr.kernels.columns().items()})
    arr = attribute_arrays(tr, n_boot=10)
    snap = build_snapshot(tr, arr)
    iv = arr.idle
    for row in snap.idle:
        m = (iv.device == row.gpu) & (iv.cause == IDLE_CAUSES.index(row.cause))
        assert row.count == int(m.sum())
        assert row.time_s == float(iv.duration_ns[m].sum()) * 1e-9
        assert row.energy_j == float(arr.idle_energy_j[m].sum())
    assert {r.gpu for r in snap.idle} == {0, 1} and sum(r.count for r in snap.idle) == len(iv)
    for r in arr.devices:
        k = r.items.source == 0
        assert np.array_equal(arr.kernel_energy_j[r.items.row[k]], r.item_energy_j[k])
        assert np.array_equal(arr.kernel_dynamic_j[r.items.row[k]], r.item_dynamic_j[k])
    assert len(arr.devices) == 2
