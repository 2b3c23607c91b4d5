"""The ranking's fast paths give exactly what the plain forms gave.

Storm detection (candidate runs from the edges of a sliding AND of the links, sums over the
candidate runs' kernels only, no gather on one GPU), the storm spans (sorted times placed
by one index range per storm) and the idle candidates (each cause's gaps by
``intsets.indices_by_value`` instead of a sort, the median by ``quantiles.median``) are
compared here,
on random timelines built to hit the awkward cases (several GPUs, kernels out of start order,
overlapping kernels, equal starts, zero-length kernels, runs right at ``MIN_RUN`` and at the
duration and gap limits, storms with equal or unsorted starts, gaps on several devices,
NVTX ranges, zero energies), against the plain implementation each replaced, kept in this
file as the reference.  Equality is exact (``repr`` of every field, so also -0.0 and every
float bit): the rewrites reorder no floating-point arithmetic.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attribution.idle import IdleIntervals
from attribution.intsets import distinct_ints, unique_inverse, value_counts
from attribution.model import I64, KernelBatch, MarkerBatch, MarkerKind, StringTable, Trace
from attribution.ranking import RankInputs
from attribution.ranking import idle_copies as ic
from attribution.ranking.common import (
    Candidate,
    enclosing_ranges,
    has_ranges,
)
from attribution.ranking.storms import (
    MAX_GAP_NS,
    MIN_GAP_SHARE,
    MIN_RUN,
    SHORT_NS,
    TINY_NS,
    Storms,
    find_storms,
    in_spans,
)
from attribution.snapshot import IDLE_CAUSES

# ---- the plain forms the ranking used before (references) ------------------------------


def ref_find_storms(inp: RankInputs) -> tuple[Storms, dict[str, int]]:
    kb = inp.trace.kernels
    out: list[tuple[I64, I64, I64, I64, I64]] = []
    names: dict[str, int] = {}
    for dev in distinct_ints(kb.device).tolist():
        idx = np.flatnonzero(kb.device == dev)
        s = kb.start_ns[idx]
        if not bool(np.all(s[1:] >= s[:-1])):
            idx = idx[np.argsort(s, kind="stable")]
            s = kb.start_ns[idx]
        e = kb.end_ns[idx]
        d = e - s
        if len(s) < MIN_RUN:
            continue
        short = d < SHORT_NS
        gap = s[1:] - np.maximum.accumulate(e)[:-1]
        link = short[:-1] & short[1:] & (gap < MAX_GAP_NS)
        run = np.concatenate([[0], np.cumsum(~link)])  # run id per kernel
        first = np.flatnonzero(np.concatenate([[True], ~link]))
        n = np.bincount(run)
        last = first + n - 1
        cand = np.flatnonzero((n >= MIN_RUN) & short[first])
        if len(cand) == 0:
            continue
        tiny_c = np.r_[0, np.cumsum(d < TINY_NS)]
        d_c = np.r_[0, np.cumsum(d)]
        tiny_n = tiny_c[last[cand] + 1] - tiny_c[first[cand]]
        span = e[last[cand]] - s[first[cand]]
        busy = d_c[last[cand] + 1] - d_c[first[cand]]
        ok = (2 * tiny_n > n[cand]) & (span > 0) & ((span - busy) >= MIN_GAP_SHARE * span)
        cand = cand[ok]
        if len(cand) == 0:
            continue
        out.append((np.full(len(cand), dev, np.int64), s[first[cand]], e[last[cand]],
                    n[cand].astype(np.int64), busy[ok].astype(np.int64)))
        storm_run = np.zeros(len(n), bool)
        storm_run[cand] = True
        ids, inv = unique_inverse(kb.name_id[idx[storm_run[run]]])
        cnt = np.bincount(inv, minlength=len(ids))
        for i, c in zip(ids.tolist(), cnt.tolist(), strict=True):
            nm = inp.trace.name(int(i))
            names[nm] = names.get(nm, 0) + int(c)
    if not out:
        z = np.zeros(0, np.int64)
        return Storms(z, z, z, z, z), names
    cols = [np.concatenate([o[j] for o in out]) for j in range(5)]
    return Storms(*cols), names


def ref_in_spans(t_ns: I64, device: I64, storms: Storms) -> np.ndarray:
    out = np.zeros(len(t_ns), bool)
    for dev in np.unique(storms.device).tolist():
        m = storms.device == dev
        s, e = storms.start_ns[m], storms.end_ns[m]
        o = np.argsort(s)
        s, e = s[o], e[o]
        on = device == dev
        t = t_ns if bool(on.all()) else t_ns[on]
        k = np.searchsorted(s, t, side="right") - 1
        out[on] = (k >= 0) & (t < e[np.clip(k, 0, None)])
    return out


def ref_idle_candidates(inp: RankInputs, storms: Storms) -> list[Candidate]:
    iv = inp.arrays.idle
    if len(iv) == 0:
        return []
    dur_s = iv.duration_ns.astype(np.float64) * 1e-9
    claimed = np.zeros(len(iv), bool)
    if len(storms):
        claimed = (iv.cause == IDLE_CAUSES.index("launch_gap")) & ref_in_spans(
            iv.start_ns, iv.device.astype(np.int64), storms)
    devs = inp.arrays.devices
    one_gpu = len(devs) == 1 and bool(np.all(iv.device == devs[0].device))
    lo = hi = np.empty(0)
    if not one_gpu:
        _, lo, hi = inp.per_record(iv.device.astype(np.int64))
    key = np.where(claimed, len(IDLE_CAUSES), iv.cause).astype(np.uint8)
    by_cause = np.argsort(key, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(key, minlength=len(IDLE_CAUSES) + 1))]
    n_claimed = int(claimed.sum())
    any_ranges = has_ranges(inp.trace)
    out: list[Candidate] = []
    for ci, cause in enumerate(IDLE_CAUSES):
        m = by_cause[bounds[ci]:bounds[ci + 1]]
        if len(m) == 0:
            continue
        d = dur_s[m]
        t = float(d.sum())
        e = float(inp.arrays.idle_energy_j[m].sum())
        if not e > 0:
            continue
        n = len(m)
        med_us = float(np.median(d)) * 1e6
        pw = e / t if t > 0 else 0.0
        ev = (f"{n} gaps, {t:.3f} s with no kernel or copy running (median gap {med_us:.0f} µs) "
              f"at {pw:.0f} W active idle")
        if n_claimed and cause == "launch_gap":
            ev += f" (not counting {n_claimed} gaps inside tiny-kernel storms)"
        ranges = enclosing_ranges(inp.trace, iv.start_ns[m], iv.end_ns[m]) if any_ranges else ()
        if ranges:
            ev += f"; mostly inside range {ranges[0]!r}"
        if one_gpu:
            c = devs[0].p_idle_ci_w
            ci_j = (float(np.full(len(m), float(c[0])) @ d),
                    float(np.full(len(m), float(c[1])) @ d))
        else:
            ci_j = (float(lo[m] @ d), float(hi[m] @ d))
        out.append(Candidate(
            mechanism=f"idle.{cause}", energy_j=e, energy_ci_j=ci_j, evidence=ev,
            fix=f"{ic._FIX[cause]}; recovers at most {e:.3g} J ({t:.3f} s of active idle)",
            validation=(f"re-run with the fix: `ppwtop diff` shows idle.{cause} falling, "
                        f"{ic._CHECK[cause]}"),
            owner_names=ranges,
            # since 2026-12-05: active idle the readings did not place is not resolvable
            resolvable=ic._idle_resolvable(e, ci_j), unresolved_why=ic._unplaced_why(e, t, ci_j)))
    return out


# ---- random inputs ----------------------------------------------------------------------

T0 = 1_700_000_000_000_000_000
NAMES = [f"k{i}" for i in range(6)] + ["range_a", "range_b", "range_c"]


@dataclasses.dataclass
class _Dev:
    device: int
    p_idle_w: float
    p_idle_ci_w: tuple[float, float]


@dataclasses.dataclass
class _Arrays:
    idle: IdleIntervals
    idle_energy_j: Any
    devices: tuple[_Dev, ...]


def _kernel_trace(seed: int, n: int, *, devices: int, shuffle: bool, overlap: bool) -> Trace:
    """Bursts of short kernels (some tiny, some just under or over the limits, gaps around
    ``MAX_GAP_NS``, lengths around ``MIN_RUN``) between longer kernels and long pauses."""
    rng = np.random.default_rng(seed)
    dur = np.empty(0, np.int64)
    step = np.empty(0, np.int64)
    while len(dur) < n:
        k = int(rng.choice([1, 3, MIN_RUN - 1, MIN_RUN, MIN_RUN + 1, 20, 60]))
        tiny = rng.random() < 0.7
        d = rng.integers(0, TINY_NS + 1 if tiny else SHORT_NS + 2, k)
        d[rng.random(k) < 0.05] = int(rng.choice([TINY_NS - 1, TINY_NS, SHORT_NS - 1,
                                                   SHORT_NS, 0]))
        g = rng.integers(0, 60_000, k)
        g[rng.random(k) < 0.05] = int(rng.choice([MAX_GAP_NS - 1, MAX_GAP_NS, 3 * MAX_GAP_NS]))
        dur = np.r_[dur, d, rng.integers(SHORT_NS, 400_000, 1)]
        step = np.r_[step, d + g, rng.integers(0, 500_000, 1)]
    dur, step = dur[:n], step[:n]
    start = T0 + np.r_[0, np.cumsum(step)[:-1]]
    start[3::17] = start[2::17][: len(start[3::17])]  # equal starts
    if overlap:  # another stream: some kernels run long past the next ones
        dur[rng.random(n) < 0.03] += 1_000_000
    dev = rng.integers(0, devices, n).astype(np.int16)
    p = rng.permutation(n) if shuffle else np.arange(n)
    tr = Trace(strings=StringTable(NAMES))
    tr.kernels = KernelBatch.from_columns({
        "start_ns": start[p], "end_ns": (start + dur)[p], "device": dev[p],
        "correlation": np.arange(n), "name_id": rng.integers(0, 6, n).astype(np.int32)[p]})
    return tr


def _inputs(trace: Trace, idle: IdleIntervals | None = None, energy: Any = None,
            devices: tuple[_Dev, ...] = (_Dev(0, 60.0, (55.0, 65.0)),)) -> RankInputs:
    if idle is None:
        z = np.zeros(0, np.int64)
        idle = IdleIntervals(z, z, np.zeros(0, np.int16), np.zeros(0, np.uint8))
    arrays = _Arrays(idle, energy if energy is not None else np.zeros(len(idle)), devices)
    return RankInputs(trace, arrays, (), (), (), 1000.0)  # type: ignore[arg-type]


def _same_storms(got: tuple[Storms, dict[str, int]], want: tuple[Storms, dict[str, int]]) -> None:
    for f in ("device", "start_ns", "end_ns", "kernels", "busy_ns"):
        g, w = getattr(got[0], f), getattr(want[0], f)
        assert g.dtype == w.dtype and np.array_equal(g, w), f
    assert list(got[1].items()) == list(want[1].items())  # counts and insertion order


def _same_candidates(got: list[Candidate], want: list[Candidate]) -> None:
    assert [repr(dataclasses.astuple(c)) for c in got] == [
        repr(dataclasses.astuple(c)) for c in want]


# ---- storms -----------------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.integers(0, 10_000), st.integers(0, 600), st.integers(1, 3), st.booleans(),
                 st.booleans()))
def test_find_storms_matches_the_plain_form(case: tuple[int, int, int, bool, bool]) -> None:
    seed, n, devices, shuffle, overlap = case
    tr = _kernel_trace(seed, n, devices=devices, shuffle=shuffle, overlap=overlap)
    _same_storms(find_storms(_inputs(tr)), ref_find_storms(_inputs(tr)))


def test_find_storms_on_a_long_timeline_finds_many() -> None:
    for shuffle, overlap in ((False, False), (True, True)):
        tr = _kernel_trace(3, 40_000, devices=1, shuffle=shuffle, overlap=overlap)
        got = find_storms(_inputs(tr))
        assert len(got[0]) > 200
        _same_storms(got, ref_find_storms(_inputs(tr)))


# ---- idle candidates --------------------------------------------------------------------


def _gaps(rng: np.random.Generator, n: int, devices: int, sorted_gaps: bool
          ) -> IdleIntervals:
    start = T0 + np.cumsum(rng.integers(0, 80_000, n))
    dur = rng.integers(0, 3_000_000, n)
    dur[rng.random(n) < 0.1] = 0
    dev = rng.integers(0, devices, n).astype(np.int16)
    cause = rng.choice(4, n, p=[0.7, 0.05, 0.05, 0.2]).astype(np.uint8)
    if not sorted_gaps:
        p = rng.permutation(n)
        start, dur, dev, cause = start[p], dur[p], dev[p], cause[p]
    return IdleIntervals(start, start + dur, dev, cause)


def _storms_over(rng: np.random.Generator, iv: IdleIntervals, k: int, devices: int, *,
                 ties: bool, unsorted: bool) -> Storms:
    if len(iv) == 0 or k == 0:
        z = np.zeros(0, np.int64)
        return Storms(z, z, z, z, z)
    lo, hi = int(iv.start_ns.min()), int(iv.start_ns.max()) + 1
    s = np.sort(rng.integers(lo - 10_000, hi + 10_000, k))
    if not ties:
        s = np.unique(s)
    picks = rng.choice(len(iv), min(len(s), len(iv)))
    s[: len(picks) // 3] = iv.start_ns[picks[: len(picks) // 3]]  # gaps exactly at a start
    s.sort()
    e = s + rng.integers(-1_000, 2_000_000, len(s))  # some empty, some past the next start
    dev = rng.integers(0, devices, len(s)).astype(np.int64)
    if unsorted:
        p = rng.permutation(len(s))
        s, e, dev = s[p], e[p], dev[p]
    one = np.ones(len(s), np.int64)
    return Storms(dev, s, e, one, one)


def _ranges_trace(rng: np.random.Generator, iv: IdleIntervals, on: bool) -> Trace:
    tr = Trace(strings=StringTable(NAMES))
    if on and len(iv):
        lo, hi = int(iv.start_ns.min()), int(iv.end_ns.max())
        s = np.sort(rng.integers(lo, hi + 1, 6))
        e = s + rng.integers(0, (hi - lo) // 3 + 2, 6)
        tr.markers = MarkerBatch.from_columns({
            "start_ns": s, "end_ns": e, "device": np.full(6, -1),
            "kind": np.r_[np.full(5, int(MarkerKind.NVTX)), int(MarkerKind.PROFILER_STEP)],
            "name_id": rng.integers(6, 9, 6).astype(np.int32)})
    return tr


# mostly the one-GPU case (its own fast path), often the others
ONE_MOSTLY = st.sampled_from([1, 1, 2, 3])
MOSTLY = st.sampled_from([True, True, False])
RARELY = st.sampled_from([False, False, True])
CASES = st.tuples(st.integers(0, 10_000), st.integers(0, 500), ONE_MOSTLY,
                  st.integers(0, 40), ONE_MOSTLY, MOSTLY, RARELY, RARELY, st.booleans(),
                  st.booleans())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASES)
def test_idle_candidates_match_the_plain_form(case: tuple[Any, ...]) -> None:
    (seed, n, gap_devs, k, storm_devs, sorted_gaps, ties, unsorted, ranges, zero_e) = case
    rng = np.random.default_rng(seed)
    iv = _gaps(rng, n, gap_devs, sorted_gaps)
    storms = _storms_over(rng, iv, k, storm_devs, ties=ties, unsorted=unsorted)
    energy = rng.random(len(iv)) * 0.01
    if zero_e:  # a cause without energy is skipped
        energy[iv.cause == rng.integers(0, 4)] = 0.0
    devs = tuple(_Dev(d, 50.0 + d, (45.0 + d, 57.5 + 2 * d))
                 for d in range(int(rng.integers(1, gap_devs + 1))))
    inp = _inputs(_ranges_trace(rng, iv, ranges), iv, energy, devs)
    _same_candidates(ic.idle_candidates(inp, storms), ref_idle_candidates(inp, storms))


def test_idle_candidates_on_one_gpu_with_found_storms() -> None:
    """The common case: storms from the kernels, gaps sorted on the one GPU (in_spans places
    them by index ranges) and most gaps are launch gaps."""
    tr = _kernel_trace(11, 30_000, devices=1, shuffle=False, overlap=False)
    storms, _ = find_storms(_inputs(tr))
    kb = tr.kernels
    s, e = kb.start_ns[:-1], kb.start_ns[1:]  # a gap before each kernel
    rng = np.random.default_rng(0)
    cause = rng.choice(4, len(s), p=[0.8, 0.02, 0.03, 0.15]).astype(np.uint8)
    iv = IdleIntervals(s, np.maximum(e, s), np.zeros(len(s), np.int16), cause)
    energy = (iv.end_ns - iv.start_ns).astype(np.float64) * 60e-9
    inp = _inputs(tr, iv, energy)
    got = ic.idle_candidates(inp, storms)
    _same_candidates(got, ref_idle_candidates(inp, storms))
    assert len(got) == 4 and "not counting" in got[0].evidence


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.integers(0, 10_000), st.integers(0, 400), st.integers(0, 60),
                 st.integers(1, 3)), st.booleans(), st.booleans())
def test_in_spans_by_ranges_is_the_search(case: tuple[int, int, int, int], ties: bool,
                                          unsorted: bool) -> None:
    """Sorted times placed storm by storm (index ranges) give the one-search-per-time mask,
    with equal starts, storms out of order and several devices; shuffled times (the search
    path) give the same mask, time by time."""
    seed, n, k, devices = case
    rng = np.random.default_rng(seed)
    iv = _gaps(rng, n, devices, True)
    storms = _storms_over(rng, iv, k, devices, ties=ties, unsorted=unsorted)
    got = in_spans(iv.start_ns, iv.device, storms)
    assert np.array_equal(got, ref_in_spans(iv.start_ns, iv.device.astype(np.int64), storms))
    p = rng.permutation(len(iv))
    assert np.array_equal(in_spans(iv.start_ns[p], iv.device[p], storms), got[p])


def test_in_spans_ranges_at_the_edges() -> None:
    """A storm holds its start, not its end; a time at the next storm's start is the next
    one's, even where the earlier storm has not ended."""
    s = np.array([30, 10, 20], np.int64)  # out of order
    e = np.array([35, 15, 32], np.int64)
    storms = Storms(np.zeros(3, np.int64), s, e, np.ones(3, np.int64), np.ones(3, np.int64))
    t = np.arange(0, 40, dtype=np.int64)
    got = in_spans(t, np.zeros(len(t), np.int16), storms)
    assert np.flatnonzero(got).tolist() == [*range(10, 15), *range(20, 35)]
    assert np.array_equal(got, ref_in_spans(t, np.zeros(len(t), np.int64), storms))
    assert not in_spans(t, np.ones(len(t), np.int16), storms).any()  # another device's times


# ---- name counts ------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-32_768, 32_767), max_size=60), st.sampled_from(  # int16 range
    [np.int16, np.int32, np.int64]), st.booleans())
def test_value_counts_is_np_unique(values: list[int], dtype: type[np.signedinteger[Any]],
                                   narrow: bool) -> None:
    a = np.array([v % 7 for v in values] if narrow else values, dtype=dtype)
    got_u, got_c = value_counts(a)
    want_u, want_c = np.unique(a, return_counts=True)
    assert got_u.dtype == np.int64 and got_c.dtype == np.int64
    assert got_u.tolist() == want_u.tolist() and got_c.tolist() == want_c.tolist()
