"""The simulated job's timeline: kernels, copies, the gaps between them and their causes, the
host-side runtime calls (launch / sync / memcpy) and the ProfilerStep ranges.

Owns :func:`build_timeline`.  Everything is generated per step as rectangular arrays and laid
out with one ``cumsum``; times are true GPU/host times in int64 ns (the CUPTI clock offset is
applied later, when the trace is assembled).
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from attribution.model import F64, I32, I64, U8, B
from attribution.sim.scenarios import STREAM2_CLASS, ScenarioSpec

GAP_OTHER, GAP_LAUNCH, GAP_SYNC, GAP_STALL = 0, 1, 2, 3
GAP_CAUSES = ("idle.other", "idle.launch_gap", "idle.sync_wait", "idle.host_stall")

COPY_KINDS = ("HtoD", "DtoH")
COPY_MEMS = ("pinned", "pageable")
_BW_GBPS = {("HtoD", "pinned"): 22.0, ("DtoH", "pinned"): 22.0,
            ("HtoD", "pageable"): 7.0, ("DtoH", "pageable"): 5.0}
_COPY_DP_FRAC = {"pinned": 0.07, "pageable": 0.04}

US = 1_000
MS = 1_000_000
LAUNCH_API_NS = 3_500
LAUNCH_SPACING_NS = 6_000
LAUNCH_LATENCY_NS = 5_000
TAIL_IDLE_NS = 500 * MS


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    """Items in GPU order (stream 1 then stream 2 appended), gaps and host records."""

    start_ns: I64
    end_ns: I64
    is_copy: B
    cls: I32  # kernel class index (−1 = stream-2 class), or copy-type index for copies
    stream2: B
    dp_w: F64
    gap_ns: I64  # GPU idle before the item (stream 1 only; 0 for stream 2)
    gap_cause: U8
    clamped: B
    copy_bytes: I64
    copy_types: tuple[tuple[str, str], ...]  # copy-type index → (kind, memory)
    # host records (no offset applied)
    api_start_ns: I64
    api_end_ns: I64
    api_item: I64  # index into items (−1 for sync calls)
    api_kind: U8  # 0 launch, 1 memcpy async, 2 memcpy (sync), 3 device sync
    api_tid_off: U8  # 0 main thread, 1 second thread (stream-2 launches)
    step_start_ns: I64
    step_end_ns: I64
    clamp_windows: tuple[tuple[int, int, int, float], ...]  # (start, end, reason, clock_ratio)
    window_start_ns: int
    window_end_ns: int


def _lognormal(rng: np.random.Generator, median: F64 | float, sigma: float,
               shape: tuple[int, ...]) -> F64:
    return np.asarray(median * np.exp(sigma * rng.standard_normal(shape)), dtype=np.float64)


def _plan_rngs(spec: ScenarioSpec, workload_seed: int) -> tuple[np.random.Generator, ...]:
    """Generators of the workload definition: one per quantity, so each draw depends only on
    the scenario and ``workload_seed`` (never on the instance seed or on how many steps)."""
    tag = zlib.crc32(f"workload/{spec.name}".encode())
    return tuple(np.random.default_rng([workload_seed, tag, j]) for j in range(3))


def _draw_steps(spec: ScenarioSpec, rng: np.random.Generator, n: int, dyn_w: float,
                workload_seed: int = 0) -> dict[str, np.ndarray]:
    """Rectangular (steps × slots) arrays: copies first, then kernels.

    The phase schedule (phase lengths, each phase's class mix, fixed-pattern repeats) is the
    workload definition and comes from ``workload_seed``; everything per instance (which class
    each slot runs, durations, ΔP jitter, gaps, copies) comes from ``rng``.
    """
    len_rng, mix_rng, rep_rng = _plan_rngs(spec, workload_seed)
    k = spec.kernels_per_step
    ncls = len(spec.classes)
    med = np.array([c.median_us for c in spec.classes]) * US
    sig = np.array([c.sigma for c in spec.classes])
    dp = np.array([c.dp_frac for c in spec.classes]) * dyn_w
    dps = np.array([c.dp_sigma for c in spec.classes])
    # phases → mix per step over the classes outside fixed groups
    grouped = {i for g in spec.fixed_groups for i in g}
    free = np.array([i for i in range(ncls) if i not in grouped], dtype=np.int64)
    lo, hi = spec.phase_steps
    lens = len_rng.integers(lo, hi + 1, size=n // lo + 2)
    phase = np.repeat(np.arange(len(lens)), lens)[:n]
    if spec.dirichlet_alpha > 0 and len(free) > 1:
        mix = mix_rng.dirichlet(np.full(len(free), spec.dirichlet_alpha), size=len(lens))
        mix = 0.05 / len(free) + 0.95 * mix  # every class keeps some exposure
    else:
        mix = np.full((len(lens), max(len(free), 1)), 1.0 / max(len(free), 1))
    cum = np.cumsum(mix, axis=1)
    unit = len(spec.fixed_pattern)
    r_lo, r_hi = spec.fixed_repeats
    nfix = unit * r_hi
    nvar = k - nfix
    cls = np.empty((n, k), dtype=np.int64)
    k_on = np.ones((n, k), dtype=bool)
    if nfix:
        cls[:, :nfix] = np.tile(np.asarray(spec.fixed_pattern), r_hi)[None, :]
        reps = rep_rng.integers(r_lo, r_hi + 1, size=len(lens))[phase]
        k_on[:, :nfix] = np.arange(nfix)[None, :] < (reps * unit)[:, None]
    if nvar > 0:
        u = rng.random((n, nvar))
        pick = (u[:, :, None] > cum[phase][:, None, :-1]).sum(axis=2)
        cls[:, nfix:] = free[pick]
    dur = np.exp(np.log(med[cls]) + sig[cls] * rng.standard_normal((n, k)))
    dur = np.maximum(dur, 4_000.0)
    dpw = dp[cls] * np.exp(dps[cls] * rng.standard_normal((n, k)))
    # gaps between kernels: queued (a few µs, "other") or launch gaps
    gap = _lognormal(rng, 3_000.0, 0.3, (n, k))
    cause = np.zeros((n, k), dtype=np.uint8)
    lg = rng.random((n, k)) < spec.p_launch_gap
    gap[lg] = np.clip(_lognormal(rng, spec.launch_gap_us * US, 0.6, (int(lg.sum()),)),
                      10 * US, 900 * US)
    cause[lg] = GAP_LAUNCH
    # copies (slots before the kernels)
    ncp = len(spec.copies)
    c_dur = np.zeros((n, ncp))
    c_dp = np.zeros((n, ncp))
    c_on = np.zeros((n, ncp), dtype=bool)
    c_gap = _lognormal(rng, 3_000.0, 0.3, (n, ncp))
    c_cause = np.zeros((n, ncp), dtype=np.uint8)
    for j, c in enumerate(spec.copies):
        c_on[:, j] = rng.random(n) < c.prob
        c_dur[:, j] = c.bytes_ / (_BW_GBPS[(c.kind, c.memory)] * 1e9) * 1e9 * np.exp(
            0.1 * rng.standard_normal(n))
        c_dp[:, j] = _COPY_DP_FRAC[c.memory] * dyn_w * np.exp(0.05 * rng.standard_normal(n))
    out = {
        "dur": np.concatenate([c_dur, dur], axis=1),
        "dp": np.concatenate([c_dp, dpw], axis=1),
        "gap": np.concatenate([c_gap, gap], axis=1),
        "cause": np.concatenate([c_cause, cause], axis=1),
        "on": np.concatenate([c_on, k_on], axis=1),
        "is_copy": np.concatenate([np.ones((n, ncp), bool), np.zeros((n, k), bool)], axis=1),
        "cls": np.concatenate([np.broadcast_to(np.arange(ncp), (n, ncp)), cls], axis=1),
        "step": np.broadcast_to(np.arange(n)[:, None], (n, ncp + k)),
        "pageable": np.concatenate(
            [np.broadcast_to(np.array([c.memory == "pageable" for c in spec.copies], bool),
                             (n, ncp)), np.zeros((n, k), bool)], axis=1),
    }
    return out


def _flatten_with_step_gaps(spec: ScenarioSpec, rng: np.random.Generator,
                            st: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    on = st["on"]
    flat = {key: np.ascontiguousarray(v)[on] for key, v in st.items() if key != "on"}
    step = flat["step"]
    first = np.ones(len(step), dtype=bool)
    first[1:] = step[1:] != step[:-1]
    nf = int(first.sum())
    u = rng.random(nf)
    g = _lognormal(rng, 80.0 * US, 0.5, (nf,)).clip(10 * US, 900 * US)
    c = np.full(nf, GAP_LAUNCH, dtype=np.uint8)
    sync = u < spec.p_sync
    stall = (u >= spec.p_sync) & (u < spec.p_sync + spec.p_stall)
    g[sync] = _lognormal(rng, spec.sync_ms * MS, 0.6, (int(sync.sum()),)).clip(50 * US, 20 * MS)
    c[sync] = GAP_SYNC
    g[stall] = _lognormal(rng, spec.stall_ms * MS, 0.6, (int(stall.sum()),)).clip(1.2 * MS,
                                                                                   200 * MS)
    c[stall] = GAP_STALL
    g[0], c[0] = 50 * US, GAP_LAUNCH  # nothing precedes the first item
    flat["gap"][first] = g
    flat["cause"][first] = c
    # the host cannot launch during a synchronous (pageable) copy: the next item is a launch gap
    after_pg = np.zeros(len(step), dtype=bool)
    after_pg[1:] = flat["pageable"][:-1]
    fix = after_pg & (flat["cause"] == GAP_OTHER)
    flat["gap"][fix] = np.maximum(flat["gap"][fix], 15 * US)
    flat["cause"][fix] = GAP_LAUNCH
    flat["first"] = first
    return flat


def _layout(t0: int, gap: F64, dur: F64) -> tuple[I64, I64]:
    gi = np.rint(gap).astype(np.int64)
    di = np.rint(dur).astype(np.int64)
    start = t0 + np.cumsum(gi) + np.concatenate([[0], np.cumsum(di)[:-1]])
    return start, start + di


def _phase_lock(spec: ScenarioSpec, flat: dict[str, np.ndarray], t0: int) -> None:
    """Rewrite each step's first gap so steps start exactly every ``step_period_ms``."""
    period = spec.step_period_ms * MS
    first = flat["first"]
    flat["dur"] = np.rint(flat["dur"])
    flat["gap"] = np.rint(flat["gap"])
    busy = flat["dur"] + np.where(first, 0.0, flat["gap"])
    step = flat["step"]
    per_step = np.bincount(step, weights=busy)
    if per_step.max() > period - 1.2 * MS:
        raise ValueError(f"{spec.name}: step busy time exceeds the step period")
    g = np.empty(len(per_step))
    g[0] = 5 * MS
    g[1:] = period - per_step[:-1]
    flat["gap"][first] = g
    flat["cause"][0] = GAP_STALL


def build_timeline(spec: ScenarioSpec, rng: np.random.Generator, t0: int, seconds: float,
                   dyn_w: float, *, workload_seed: int = 0) -> Timeline:
    t_end = t0 + round(seconds * 1e9)
    k = spec.kernels_per_step
    mean_us = float(np.mean([c.median_us for c in spec.classes]))
    est_step_ns = k * (mean_us * US * 1.1 + spec.p_launch_gap * spec.launch_gap_us * US) + (
        spec.p_stall * spec.stall_ms + spec.p_sync * spec.sync_ms) * MS
    if spec.step_period_ms > 0:
        est_step_ns = spec.step_period_ms * MS
    n = int(seconds * 1e9 / est_step_ns * 1.4) + 4
    while True:
        flat = _flatten_with_step_gaps(spec, rng, _draw_steps(spec, rng, n, dyn_w, workload_seed))
        if spec.step_period_ms > 0:
            _phase_lock(spec, flat, t0)
        start, end = _layout(t0, flat["gap"], flat["dur"])
        if end[-1] > t_end - TAIL_IDLE_NS:
            break
        n *= 2
    # clamp episodes: kernels starting inside run longer at lower power
    clamp_of = np.full(len(start), -1, dtype=np.int64)  # which episode clamped each item
    for i, c in enumerate(spec.clamps):
        a = t0 + c.start_frac * (t_end - t0)
        b = t0 + c.end_frac * (t_end - t0)
        m = (start >= a) & (start < b) & ~flat["is_copy"]
        flat["dur"] = np.where(m, flat["dur"] / c.clock_ratio, flat["dur"])
        flat["dp"] = np.where(m, flat["dp"] * c.power_factor, flat["dp"])
        clamp_of[m] = i
    if spec.clamps:
        start, end = _layout(t0, flat["gap"], flat["dur"])
    # keep whole steps that end before the tail idle
    keep_step = np.bincount(flat["step"], weights=(end > t_end - TAIL_IDLE_NS)) == 0
    keep = keep_step[flat["step"]]
    if not bool(keep.any()):  # (a spec whose step outlasts the run: nothing to simulate)
        first = float(end[flat["step"] == flat["step"][0]].max() - t0) * 1e-9
        raise ValueError(f"no whole step of {spec.name!r} fits in {seconds:g} s (its first "
                         f"step runs {first:.1f} s): simulate longer")
    start, end = start[keep], end[keep]
    f = {key: v[keep] for key, v in flat.items()}
    clamp_of = clamp_of[keep]
    clamped = clamp_of >= 0
    clamp_windows: list[tuple[int, int, int, float]] = []
    for i, c in enumerate(spec.clamps):
        # the episode spans its own items, as laid out after every stretch (an episode's
        # window taken as its nominal span again past its end took in the next episode's
        # items, and the clock reasons stayed set over the unclamped time between)
        m = clamp_of == i
        if m.any():
            clamp_windows.append((int(start[m].min()), int(end[m].max()), c.reason,
                                  c.clock_ratio))
    copy_types = tuple((c.kind, c.memory) for c in spec.copies)
    nbytes = np.array([c.bytes_ for c in spec.copies] or [0], dtype=np.int64)
    is_copy = f["is_copy"]
    copy_bytes = np.where(is_copy, nbytes[np.where(is_copy, f["cls"], 0)], 0)
    api = _host_calls(start, end, f["gap"], f["cause"], is_copy=is_copy, pageable=f["pageable"])
    # steps tile the timeline from just before the host launches their first item
    first = f["first"]
    gap_i = start - np.concatenate([[t0], end[:-1]])
    st_start = start[first] - LAUNCH_LATENCY_NS - 1_000
    st_end = np.concatenate([st_start[1:], [end[-1]]])
    # stream 2: a collective inside some long stream-1 kernels
    s2 = _stream2(spec, rng, start, end, is_copy=is_copy, dyn_w=dyn_w)
    n1 = len(start)
    n2 = len(s2[0])
    a2s = s2[0] - LAUNCH_LATENCY_NS - LAUNCH_API_NS
    return Timeline(
        start_ns=np.concatenate([start, s2[0]]),
        end_ns=np.concatenate([end, s2[1]]),
        is_copy=np.concatenate([is_copy, np.zeros(n2, bool)]),
        cls=np.concatenate([f["cls"].astype(np.int32), np.full(n2, -1, np.int32)]),
        stream2=np.concatenate([np.zeros(n1, bool), np.ones(n2, bool)]),
        dp_w=np.concatenate([f["dp"], s2[2]]),
        gap_ns=np.concatenate([gap_i, np.zeros(n2, np.int64)]),
        gap_cause=np.concatenate([f["cause"], np.zeros(n2, np.uint8)]),
        clamped=np.concatenate([clamped, np.zeros(n2, bool)]),
        copy_bytes=np.concatenate([copy_bytes, np.zeros(n2, np.int64)]),
        copy_types=copy_types,
        api_start_ns=np.concatenate([api[0], a2s]),
        api_end_ns=np.concatenate([api[1], a2s + LAUNCH_API_NS]),
        api_item=np.concatenate([api[2], n1 + np.arange(n2)]),
        api_kind=np.concatenate([api[3], np.zeros(n2, np.uint8)]),
        api_tid_off=np.concatenate([np.zeros(len(api[0]), np.uint8), np.ones(n2, np.uint8)]),
        step_start_ns=st_start,
        step_end_ns=st_end,
        clamp_windows=tuple(clamp_windows),
        window_start_ns=t0,
        window_end_ns=t_end,
    )


def _host_calls(start: I64, end: I64, gap: F64, cause: U8, *, is_copy: B, pageable: B
                ) -> tuple[I64, I64, I64, U8]:
    """Launch/memcpy calls for every item plus a sync call spanning each sync-wait gap.

    Within a run of queued items the host issues calls every ``LAUNCH_SPACING_NS`` but never
    later than ``LAUNCH_LATENCY_NS`` before the item starts: h_i = min(h_{i-1} + s, b_i), solved
    as a segmented running minimum.
    """
    n = len(start)
    b = start - LAUNCH_LATENCY_NS
    run_start = cause != GAP_OTHER
    run_start[0] = True
    run_id = np.cumsum(run_start) - 1
    idx = np.arange(n, dtype=np.int64)
    big = np.int64(400_000_000_000)
    c = (b - t_rel(b)) - idx * LAUNCH_SPACING_NS - run_id * big
    h = np.minimum.accumulate(c) + idx * LAUNCH_SPACING_NS + run_id * big + t_rel(b)
    a_end = h + LAUNCH_API_NS
    a_end = np.where(pageable, np.maximum(a_end, end + 2 * US), a_end)
    kind = np.where(is_copy, np.where(pageable, 2, 1), 0).astype(np.uint8)
    sy = np.flatnonzero(cause == GAP_SYNC)
    sy = sy[sy > 0]
    prev_api_end = a_end[sy - 1]
    gap_start = start[sy] - np.rint(gap[sy]).astype(np.int64)
    s_start = np.maximum(prev_api_end + 500, gap_start - 300 * US)
    s_end = start[sy] - LAUNCH_LATENCY_NS - 1_000
    api_start = np.concatenate([h, s_start])
    api_end = np.concatenate([a_end, s_end])
    item = np.concatenate([idx, np.full(len(sy), -1, np.int64)])
    kinds = np.concatenate([kind, np.full(len(sy), 3, np.uint8)])
    order = np.argsort(api_start, kind="stable")
    return api_start[order], api_end[order], item[order], kinds[order]


def t_rel(x: I64) -> np.int64:
    """A base to keep the segmented-minimum arithmetic well inside int64."""
    return np.int64(x[0]) if len(x) else np.int64(0)


def _stream2(spec: ScenarioSpec, rng: np.random.Generator, start: I64, end: I64, *,
             is_copy: B, dyn_w: float) -> tuple[I64, I64, F64]:
    if spec.two_streams <= 0:
        e = np.empty(0, np.int64)
        return e, e.copy(), np.empty(0)
    d = end - start
    cand = np.flatnonzero((d > 300 * US) & ~is_copy)
    pick = cand[rng.random(len(cand)) < spec.two_streams]
    frac = rng.uniform(0.3, 0.9, len(pick))
    d2 = np.rint(d[pick] * frac).astype(np.int64)
    off = np.rint((d[pick] - d2) * rng.random(len(pick))).astype(np.int64)
    off = np.maximum(off, LAUNCH_LATENCY_NS + LAUNCH_API_NS + 1_000)
    off = np.minimum(off, d[pick] - d2)
    s = start[pick] + off
    dp = STREAM2_CLASS.dp_frac * dyn_w * np.exp(STREAM2_CLASS.dp_sigma *
                                                rng.standard_normal(len(pick)))
    return s, s + d2, dp
