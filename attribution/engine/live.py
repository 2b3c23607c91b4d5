"""The live incremental engine: attribution over a sliding horizon at a per-tick cost that does
not grow with the run.

Owns the state of a live attribution.  ``LiveEngine.update(delta, now_ns)`` takes the records
that completed and the readings taken since the last call; once a stretch of time is settled
(``now − settle``: records arrive when they complete, so nothing overlapping it can still come)
it is reduced ONCE to

* a **slab** (one per update): per class calls, busy time, busy-time share (for the
  ``P_idle`` split) and bytes; idle time and gap count per cause;
* **reading rows**: per power reading whose sensor window is settled, the per-class activity
  fractions over its window at the current lag (and at lag ± 0.5 ms for the lag term of the
  interval), and the reading itself.

Slabs and rows sit in rings over the horizon (``live_ring``); ``snapshot()`` drops the
expired ones, reads the running slab sums, re-solves the (readings × groups) bounded regression
from its Gram matrix (the same solution as :func:`regress.fit`), draws ``boot_per_tick``
block-bootstrap replicates into a rolling pool of ``n_boot`` (``live_fit``), and assembles the
contract snapshot (``live_snapshot``).  The lag and the board response (and W for an unknown
board) are fitted once ``min_fit_s`` of data is in, then refitted at doubling intervals up to
every ``refit_every_s`` on the last ``fit_span_s`` only, a few grid points per tick
(``live_lag``); rows the record buffer still covers are re-reduced at the new lag, older ones
keep the lag they were reduced with.  Approximations versus the batch engine on the same horizon
are listed in docs/attribution.md ("Live engine").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.engine import regress
from attribution.engine.activity import COPY, MEMSET, BusyFunction, idle_share_s, items_for_device
from attribution.engine.build import (
    BLOCK_S,
    HELD_IDLE_READINGS,
    IDLE_SANITY,
    LAG_SLACK_MS,
    _fit_window,
)
from attribution.engine.clamp import CLAMP_MASK
from attribution.engine.live_fit import (
    bootstrap_gram,
    class_groups,
    gram,
    group_kinds,
    solve_gram,
    to_groups,
)
from attribution.engine.live_lag import LagSearch
from attribution.engine.live_ring import (
    N_CAUSES,
    SUMS,
    Classes,
    RowRing,
    Slab,
    SlabRing,
    StepRing,
)
from attribution.engine.live_snapshot import CiState, DevicePart, assemble
from attribution.engine.timebase import (
    FIELD_PREFERENCE,
    LAG_GRID_MS,
    TAU_GRID_MS,
    sensor_model,
    usable,
    window_fractions,
)
from attribution.engine.timebase import Readings as _Readings
from attribution.idle import idle_intervals
from attribution.model import F64, I32, DeviceInfo, PowerField, Trace
from attribution.presets import GpuPreset, get_preset, preset_for_name
from attribution.snapshot import Snapshot
from attribution.steps import step_spans

SETTLE_S = 0.5
"""Time behind ``now`` that is reduced: records longer than this that straddle it are late."""
LOOKBACK_NS = 100_000_000
"""Idle gaps are classified with this much context before the slab (gap length rules)."""
SLAB_MAX_NS = 1_000_000_000
"""Longest slab: the horizon's start moves in steps of at most this."""
MIN_FIT_S = 5.0
REFIT_EVERY_S = 30.0
FIT_SPAN_S = 20.0
BOOT_PER_TICK = 5
LAG_UNITS_PER_TICK = 16
"""Lag-grid work per tick, in activity matrices (a τ > 0 point is 8): a refit is ~420 in all,
so it spreads over ~27 ticks; the first fit runs at once."""
"""Bootstrap replicates drawn per snapshot; the interval reads the last ``n_boot`` of them."""


def _pad(a: F64, n: int) -> F64:
    """Zero columns for classes first seen after ``a`` was reduced."""
    if a.shape[-1] == n:
        return a
    width = [(0, 0)] * (a.ndim - 1) + [(0, n - a.shape[-1])]
    return np.asarray(np.pad(a, width), np.float64)


def _fsum(idx: npt.NDArray[np.integer[Any]], weights: F64, n: int) -> F64:
    return np.asarray(np.bincount(idx, weights=weights, minlength=n), np.float64)


class DeviceState:
    """Everything the live engine keeps for one GPU."""

    def __init__(self, device: int, name: str, preset: GpuPreset | None) -> None:
        self.device = device
        self.name = name
        self.preset = preset
        self.field: PowerField | None = None
        self.period_ms = float("nan")
        self.window_ms = float("nan")
        self.source = "none"
        self.lag_ms = 1.5
        self.tau_ms = 0.0
        self.fitted = False
        self.last_fit_ns = 0
        self.pend_t = np.empty(0, np.int64)
        self.pend_w = np.empty(0, np.float64)
        self.rows = RowRing()
        self.slabs = SlabRing()
        self.classes = Classes()
        self.energy_t = np.empty(0, np.int64)
        self.energy_mj = np.empty(0, np.int64)
        self.boot: deque[tuple[float, F64]] = deque()
        self.search: LagSearch | None = None
        self.steps = StepRing()
        self.clock_t = np.empty(0, np.int64)
        self.clock_clamped = np.empty(0, bool)

    def add_readings(self, tr: Trace) -> None:
        p = tr.power
        on = p.device == self.device
        if self.field is None:
            for f in FIELD_PREFERENCE:
                if bool((on & (p.field == int(f))).any()):
                    self.field = f
                    break
            if self.field is None:
                return
        m = on & (p.field == int(self.field)) & p.fresh
        t = p.t_ns[m]
        w = p.power_mw[m].astype(np.float64) / 1e3
        ok = np.isfinite(w) & (w >= 0)
        t, w = t[ok], w[ok]
        if len(self.pend_t):
            keep = t > self.pend_t[-1]
            t, w = t[keep], w[keep]
        order = np.argsort(t, kind="stable")
        self.pend_t = np.concatenate([self.pend_t, t[order]])
        self.pend_w = np.concatenate([self.pend_w, w[order]])
        if np.isnan(self.period_ms) and len(self.pend_t) > 8:
            rd = _Readings(self.field, self.pend_t, self.pend_w,
                           float(np.median(np.diff(self.pend_t)) / 1e6))
            self.period_ms, self.window_ms, self.source = sensor_model(self.preset, rd)
        c = tr.clocks
        if len(c):
            cm = c.device == self.device
            if not bool(cm.any()):
                cm = c.device < 0  # as clamp.clamped_items: a log without a device column
            self.clock_t = np.concatenate([self.clock_t, c.t_ns[cm]])
            self.clock_clamped = np.concatenate(
                [self.clock_clamped, (c.clock_reasons[cm] & CLAMP_MASK) != 0])
        e = tr.energy
        em = e.device == self.device
        if bool(em.any()):
            self.energy_t = np.concatenate([self.energy_t, e.t_ns[em]])
            self.energy_mj = np.concatenate([self.energy_mj, e.energy_mj[em]])


class LiveEngine:
    """Incremental attribution over ``[now − horizon, now − settle]``; see the module doc."""

    def __init__(self, *, gpu: str | None = None, devices: list[DeviceInfo] | None = None,
                 horizon_s: float = 300.0, settle_s: float = SETTLE_S,
                 min_fit_s: float = MIN_FIT_S, refit_every_s: float = REFIT_EVERY_S,
                 fit_span_s: float = FIT_SPAN_S, n_boot: int = 100,
                 boot_per_tick: int = BOOT_PER_TICK, lag_units_per_tick: float = LAG_UNITS_PER_TICK
                 ) -> None:
        self.gpu = gpu
        self.devices_info = list(devices or [])
        self.horizon_ns = int(horizon_s * 1e9)
        self.settle_ns = int(settle_s * 1e9)
        self.min_fit_ns = int(min_fit_s * 1e9)
        self.refit_ns = int(refit_every_s * 1e9)
        self.fit_span_ns = int(fit_span_s * 1e9)
        self.boot_per_tick = boot_per_tick
        self.lag_units_per_tick = lag_units_per_tick
        self._draws = 0
        self.n_boot = n_boot
        self.dev: dict[int, DeviceState] = {}
        self.chunks: deque[tuple[int, Trace]] = deque()
        self.start_ns: int | None = None
        self.done_ns: int | None = None
        self.now_ns = 0
        self.refits = 0

    # ------------------------------------------------------------------ input

    def _state(self, device: int) -> DeviceState:
        st = self.dev.get(device)
        if st is None:
            name = next((d.name for d in self.devices_info if d.index == device), "")
            preset = get_preset(self.gpu) if self.gpu is not None else preset_for_name(name)
            st = self.dev[device] = DeviceState(device, name, preset)
        return st

    def update(self, delta: Trace, now_ns: int) -> None:
        """Add the records completed and readings taken in ``(previous now, now_ns]``."""
        self.now_ns = now_ns
        devs = np.unique(np.concatenate([delta.kernels.device, delta.copies.device,
                                         delta.memsets.device, delta.power.device]))
        for d in devs[devs >= 0].tolist():
            self._state(int(d))
        for st in self.dev.values():
            st.add_readings(delta)
        items = Trace(strings=delta.strings, kernels=delta.kernels, copies=delta.copies,
                      memsets=delta.memsets, apis=delta.apis, markers=delta.markers)
        self.chunks.append((now_ns, items))
        if self.start_ns is None:
            starts = [int(b.start_ns.min()) for b in (delta.kernels, delta.copies,
                                                      delta.memsets, delta.apis) if len(b)]
            if not starts:
                self.chunks.clear()
                return
            self.start_ns = self.done_ns = min(starts)
        assert self.done_ns is not None
        upto = now_ns - self.settle_ns
        for st in self.dev.values():
            if st.search is not None:
                self._search_step(st, self.lag_units_per_tick)
                continue
            due = st.field is not None and not np.isnan(st.window_ms) and (
                (not st.fitted and upto - self.start_ns >= self.min_fit_ns)
                or (st.fitted and now_ns - st.last_fit_ns
                    >= min(self.refit_ns, max(st.last_fit_ns - self.start_ns, self.min_fit_ns))))
            if due:
                self._fit_lag(st, upto)
        ready = all(st.fitted or st.field is None for st in self.dev.values())
        while ready and upto > self.done_ns:  # slabs of at most SLAB_MAX_NS (horizon edge)
            b = min(upto, self.done_ns + SLAB_MAX_NS)
            for st in self.dev.values():
                self._reduce(st, self.done_ns, b)
            self.done_ns = b
        self._prune()

    def _margin_ns(self) -> int:
        w = max((st.window_ms for st in self.dev.values() if not np.isnan(st.window_ms)),
                default=0.0)
        return int((LAG_GRID_MS[1] + w + 3.0 * TAU_GRID_MS[-1] + 5.0) * 1e6) + LOOKBACK_NS

    def _recent(self, since_ns: int) -> Trace:
        """The chunks whose records may end at or after ``since_ns``, as one trace."""
        parts = [tr for end, tr in self.chunks if end >= since_ns]
        out = Trace(strings=parts[-1].strings) if parts else Trace()
        for f in ("kernels", "copies", "memsets", "apis", "markers"):
            setattr(out, f, type(getattr(out, f)).concat([getattr(p, f) for p in parts]))
        return out

    def _prune(self) -> None:
        if self.done_ns is None:
            return
        keep_from = self.done_ns - self._margin_ns()
        if any(not st.fitted and st.field is not None for st in self.dev.values()):
            keep_from = self.start_ns or keep_from
        else:
            keep_from = min(keep_from, self.now_ns - self.fit_span_ns - self.settle_ns)
        while self.chunks and self.chunks[0][0] < keep_from:
            self.chunks.popleft()

    # ------------------------------------------------------------------ lag

    def _fit_lag(self, st: DeviceState, upto: int) -> None:
        """Start a lag/response search on the last ``fit_span`` (the first one runs to the end
        at once: nothing is reduced before it; later ones a few grid points per tick)."""
        lo = max(self.start_ns or upto, upto - self.fit_span_ns)
        sub = self._recent(lo)
        it = items_for_device(sub, st.device)
        if not len(it) or len(st.pend_t) + len(st.rows) < 8:
            return
        s = np.clip(it.start_ns, lo, upto)
        e = np.clip(it.end_ns, lo, upto)
        rt, ry = st.rows.view()[:2]
        t_all = np.concatenate([rt, st.pend_t])
        y_all = np.concatenate([ry, st.pend_w])
        ct = _fsum(it.cls, (e - s).astype(np.float64), len(it.labels))
        group, n_groups = class_groups(ct, it.labels)
        busy = BusyFunction(s, e, group[it.cls], n_groups, origin_ns=lo)
        if st.source == "measured" and not st.fitted:
            st.window_ms = _fit_window(busy, t_all, y_all, st.period_ms, (lo, upto))
            st.source = "measured+fitted"
        idx = usable(t_all, st.window_ms, lo, upto)
        if len(idx) < 8:
            st.last_fit_ns = self.now_ns  # too few readings: try again a refit period later
            return
        st.search = LagSearch(busy, t_all[idx], y_all[idx], st.window_ms)
        if not st.fitted:
            self._search_step(st, math.inf)

    def _search_step(self, st: DeviceState, units: float) -> None:
        assert st.search is not None
        res = st.search.step(units)
        if res is None:
            return
        st.search = None
        old = (st.lag_ms, st.tau_ms)
        st.lag_ms, st.tau_ms = res
        if st.fitted and res != old:
            lo = max(self.start_ns or self.now_ns, self.now_ns - self.fit_span_ns)
            self._rereduce_rows(st, self._recent(lo), lo)
        st.fitted = True
        st.last_fit_ns = self.now_ns
        self.refits += 1

    def _reduce_steps(self, st: DeviceState, sub: Trace, span: tuple[int, int], *,
                      busy_all: Callable[[], BusyFunction], covered_from: int) -> None:
        """Steps (``attribution.steps.step_spans``: mark_step ranges, else ProfilerStep#N)
        that ended in [a, b): their per-class busy time and items (the step's energy is
        ``P_idle × duration + busy · ΔP`` at snapshot time, as in the batch engine).
        ``busy_all`` covers records ending after ``covered_from``; longer steps rebuild one."""
        a, b = span
        s_all, e_all, it_all, source = step_spans(sub, None, [])
        m = ((e_all > s_all) & (e_all >= a) & (e_all < b)
             & (s_all >= (self.start_ns or a)))
        if not bool(m.any()):
            return
        s0, e0, items = s_all[m], e_all[m], it_all[m]
        st.steps.source = source
        if int(s0[0]) >= covered_from:
            busy = busy_all()
        else:
            it = items_for_device(self._recent(int(s0[0])), st.device)
            gl = st.classes.lut(it.labels, it.class_source, it.class_key)
            busy = BusyFunction(it.start_ns, it.end_ns, gl[it.cls].astype(np.int32),
                                len(st.classes), origin_ns=int(s0[0]))
        bb = busy(np.concatenate([s0, e0]))
        st.steps.append(s0, (e0 - s0).astype(np.float64) * 1e-9, bb[len(s0):] - bb[:len(s0)],
                        items)

    def _rereduce_rows(self, st: DeviceState, sub: Trace, lo: int) -> None:
        """Recompute, at the new lag, the rows whose windows the record buffer still holds
        (older rows keep the lag they were reduced with)."""
        it = items_for_device(sub, st.device)
        gl = st.classes.lut(it.labels, it.class_source, it.class_key)
        n_cls = len(st.classes)
        busy = BusyFunction(it.start_ns, it.end_ns, gl[it.cls].astype(np.int32), n_cls,
                            origin_ns=lo)
        reach_ns = np.int64(round((st.lag_ms + LAG_SLACK_MS + st.window_ms
                                   + 3.0 * TAU_GRID_MS[-1]) * 1e6))
        if st.rows.n_cls < n_cls:  # grow the ring's class columns first
            st.rows.append(np.empty(0, np.int64), np.empty(0),
                           (np.zeros((0, n_cls)), np.zeros((0, n_cls)), np.zeros((0, n_cls))))
        t, _, *xs = st.rows.view()
        ok = t - reach_ns >= lo
        if bool(ok.any()):
            for d, x in zip((0.0, -LAG_SLACK_MS, LAG_SLACK_MS), xs, strict=True):
                x[ok] = window_fractions(busy, t[ok], st.window_ms, st.lag_ms + d, st.tau_ms)

    # ------------------------------------------------------------------ reduction

    def _reduce(self, st: DeviceState, a: int, b: int) -> None:
        """Reduce settled time [a, b) to a slab, and settled readings to rows."""
        sub = self._recent(a - self._margin_ns())
        it = items_for_device(sub, st.device)
        gl = st.classes.lut(it.labels, it.class_source, it.class_key)
        n_cls = len(st.classes)
        cls = gl[it.cls] if len(it) else np.empty(0, np.int64)
        s = np.clip(it.start_ns, a, b)
        e = np.clip(it.end_ns, a, b)
        inside = e > s
        dur = (e - s).astype(np.float64) * 1e-9
        share = np.zeros(len(it))
        share[inside] = idle_share_s(s[inside], e[inside], a)
        started = (it.start_ns >= a) & (it.start_ns < b)
        nbytes = np.zeros(len(it))
        for src, batch in ((COPY, sub.copies), (MEMSET, sub.memsets)):
            m = it.source == src
            nbytes[m] = batch.bytes[it.row[m]]
        iv = idle_intervals(sub, a - LOOKBACK_NS, b, [st.device])
        gs, ge = np.maximum(iv.start_ns, a), np.minimum(iv.end_ns, b)
        gm = ge > gs
        st.slabs.append(Slab(
            a, b,
            calls=np.bincount(cls[started], minlength=n_cls).astype(np.int64),
            time_s=_fsum(cls, dur, n_cls),
            share_s=_fsum(cls, share, n_cls),
            bytes=np.bincount(cls[started], weights=nbytes[started],
                              minlength=n_cls).astype(np.int64),
            idle_s=_fsum(iv.cause[gm], (ge - gs)[gm] * 1e-9, N_CAUSES),
            idle_n=np.bincount(iv.cause[gm & (iv.start_ns >= a)],
                               minlength=N_CAUSES).astype(np.int64)))
        shared: list[BusyFunction] = []

        def busy_all() -> BusyFunction:  # the buffer's busy function, built once if needed
            if not shared:
                shared.append(BusyFunction(it.start_ns, it.end_ns, cls.astype(np.int32), n_cls,
                                           origin_ns=self.start_ns or a))
            return shared[0]

        self._reduce_steps(st, sub, (a, b), busy_all=busy_all, covered_from=a - self._margin_ns())
        if st.field is None or not len(st.pend_t):
            return
        done = st.pend_t - np.int64(round(st.lag_ms * 1e6)) <= b
        first = self.start_ns or a
        ok = st.pend_t - np.int64(round((st.lag_ms + st.window_ms) * 1e6)) >= first
        t, y = st.pend_t[done & ok], st.pend_w[done & ok]
        st.pend_t, st.pend_w = st.pend_t[~done], st.pend_w[~done]
        if not len(t):
            return
        busy = busy_all()
        xs = [window_fractions(busy, t, st.window_ms, st.lag_ms + d, st.tau_ms)
              for d in (0.0, -LAG_SLACK_MS, LAG_SLACK_MS)]
        st.rows.append(t, y, (xs[0], xs[1], xs[2]))

    # ------------------------------------------------------------------ output

    def snapshot(self) -> Snapshot | None:
        """The horizon's attribution, or None before anything is settled."""
        if self.done_ns is None or not any(st.slabs for st in self.dev.values()):
            return None
        lo = self.done_ns - self.horizon_ns
        for st in self.dev.values():
            st.slabs.expire(lo)
            st.rows.expire(lo)
            st.steps.expire(lo)
            keep_c = st.clock_t >= lo
            st.clock_t, st.clock_clamped = st.clock_t[keep_c], st.clock_clamped[keep_c]
        starts = [st.slabs.slabs[0].start_ns for st in self.dev.values() if st.slabs]
        win = (min(starts), self.done_ns)
        parts = []
        for d in sorted(self.dev):
            st = self.dev[d]
            n = len(st.classes)
            t, y, *xv = st.rows.view()
            reach_ms = LAG_GRID_MS[1] + (0.0 if np.isnan(st.window_ms) else st.window_ms)
            keep = ((t - np.int64(round(reach_ms * 1e6)) >= win[0])
                    & (t - np.int64(round(LAG_GRID_MS[0] * 1e6)) <= win[1]))
            xs = [_pad(x[keep], n) for x in xv]
            y = y[keep]
            sums = {k: st.slabs.total(k, N_CAUSES if k.startswith("idle") else n)
                    for k in SUMS}
            for k in ("calls", "bytes", "idle_n"):
                sums[k] = np.rint(sums[k])
            in_win = st.clock_t <= win[1]
            clamps = (int(st.clock_clamped[in_win].sum()), int(in_win.sum()))
            parts.append(self._device_part(st, sums, xs, y, clamps))
        return assemble(parts, win)

    def _refresh_ci(self, st: DeviceState, xg: list[F64], y: F64, prior: float | None,
                    group: I32, *, centre: F64, idle_w: float, gram0: tuple[F64, F64],
                    span: tuple[float, float] = regress.PRIOR_SPAN_UNKNOWN) -> CiState:
        """Draw this tick's share of bootstrap replicates into the device's pool (the last
        ``n_boot`` replicates, class-level) and read the interval off the pool, stretched to
        the fits at lag ± LAG_SLACK_MS and at the ΔP prior centre × ``span``
        (:func:`regress.prior_span`, as the batch engine does)."""
        block = max(1, round(max(BLOCK_S * 1e3, 3.0 * st.window_ms) / max(st.period_ms, 1e-3)))
        self._draws += 1
        pb, dpb = bootstrap_gram(xg[0], y, prior, n_boot=self.boot_per_tick, block=block,
                                 seed=self._draws, pooled=centre, idle_weight=idle_w)
        for p, d in zip(pb.tolist(), dpb[:, group], strict=True):
            st.boot.append((p, d))
        while len(st.boot) > self.n_boot:
            st.boot.popleft()
        n = len(group)
        pool = np.full((len(st.boot), n), np.nan)
        for i, (_, d) in enumerate(st.boot):
            pool[i, :len(d)] = d
        m0, v0 = gram0
        ends = [solve_gram(*gram(x, y), prior, pooled=centre, idle_weight=idle_w)
                for x in xg[1:]]
        ends += [solve_gram(m0, v0, prior, pooled=centre * k, idle_weight=idle_w)
                 for k in span]
        lag = np.array([e[1:][group] for e in ends])
        fin = np.isfinite(pool)
        seen = fin.sum(axis=0)
        lo = np.full(n, np.nan)
        hi = np.full(n, np.nan)
        full = seen == len(pool)
        if bool(full.any()):
            lo[full], hi[full] = np.percentile(pool[:, full], [5.0, 95.0], axis=0)
        for c in np.flatnonzero(~full & (seen > 0)).tolist():  # classes newer than the pool
            lo[c], hi[c] = np.percentile(pool[fin[:, c], c], [5.0, 95.0])
        lo = np.fmin(lo, lag.min(axis=0))
        hi = np.fmax(hi, lag.max(axis=0))
        p_all = np.array([p for p, _ in st.boot])
        return CiState(self.done_ns or 0, lo, hi,
                       (float(np.percentile(p_all, 5.0)), float(np.percentile(p_all, 95.0))),
                       seen >= min(self.n_boot, 20))

    def _device_part(self, st: DeviceState, sums: dict[str, F64], xs: list[F64], y: F64,
                     clamps: tuple[int, int] = (0, 0)) -> DevicePart:
        time_s = sums["time_s"]
        labels = tuple(st.classes.labels)
        group, n_groups = class_groups(time_s, labels)
        prior = st.preset.active_idle_w if st.preset is not None else None
        xg = [to_groups(x, group, n_groups) for x in xs]
        ci: CiState | None = None
        held: tuple[float, float] | None = None
        if len(y) >= 1 and n_groups:
            m, v = gram(xg[0], y)
            # the batch fit's priors: ΔP toward its kind's pooled ΔP, P_idle toward the board's
            kinds = group_kinds(time_s, labels, tuple(st.classes.source), group, n_groups)
            centre = regress.pooled_by_kind_gram(m, v, kinds)
            idle_w = regress.IDLE_PRIOR_READINGS
            sol = solve_gram(m, v, prior, pooled=centre)
            if prior is not None and len(y) >= 8 and abs(sol[0] - prior) > IDLE_SANITY * prior:
                # as the batch engine: the readings cannot place P_idle; hold it at the
                # board's value and flag every class
                fitted = float(sol[0])
                idle_w = HELD_IDLE_READINGS * len(y)
                sol = solve_gram(m, v, prior, pooled=centre, idle_weight=idle_w)
                held = (fitted, float(sol[0]))
            p_idle, dp = float(sol[0]), sol[1:]
            sse = float(y @ y) - 2.0 * float(sol @ v) + float(sol @ m @ sol)
            rms = float(np.sqrt(max(sse, 0.0) / len(y)))
            span = regress.prior_span(sol[1:], centre, kinds, xg[0].sum(axis=0))
            ci = self._refresh_ci(st, xg, y, prior, group, centre=centre, idle_w=idle_w,
                                 gram0=(m, v), span=span)
        elif len(y) >= 1:
            p_idle, dp, rms = float(np.mean(y)), np.zeros(n_groups), float(np.std(y))
        else:
            p_idle, dp, rms = 0.0, np.zeros(n_groups), 0.0
        return DevicePart(
            device=st.device, name=st.name, preset=st.preset,
            field=st.field.label if st.field is not None else "none",
            period_ms=st.period_ms, window_ms=st.window_ms, lag_ms=st.lag_ms,
            tau_ms=st.tau_ms, source=st.source, labels=labels,
            class_source=tuple(st.classes.source), class_key=tuple(st.classes.key),
            group=group, n_groups=n_groups, xg=xg[0], p_idle_w=p_idle,
            dp_w=np.asarray(dp, np.float64), rms_w=rms, ci=ci, calls=sums["calls"],
            time_s=time_s, share_s=sums["share_s"], bytes=sums["bytes"], idle_s=sums["idle_s"],
            idle_n=sums["idle_n"], n_readings=len(y),
            energy_t_ns=st.energy_t, energy_mj=st.energy_mj,
            step_start_ns=st.steps.view()[0].copy(), step_dur_s=st.steps.view()[1].copy(),
            step_busy_s=_pad(st.steps.view()[2], len(labels)),
            step_items=st.steps.view()[3].copy(), step_source=st.steps.source,
            held_idle_w=held, clamp_samples=clamps)
