"""The live incremental engine: attribution over a sliding horizon at a per-tick cost that does
not grow with the run.

Owns the state of a live attribution.  ``LiveEngine.update(delta, now_ns)`` takes the records
that completed and the readings taken since the last call; once a stretch of time is settled
(``now − settle``: records arrive when they complete, so nothing overlapping it can still come;
and no later than the earliest launch call whose item has not come, ``live_pending``, so a
kernel running longer than the delay is not cut) it is reduced ONCE to

* a **slab** (one per update): per class calls, busy time, busy-time share (for the
  ``P_idle`` split) and bytes; idle time and gap count per cause;
* **reading rows**: per power reading whose sensor window is settled, the per-class activity
  fractions over its window at the current lag (and at lag ± 0.5 ms for the lag term of the
  interval), and the reading itself.

A kernel class's clamped instances are a unit of their own (``live_clamp``); on consumer
boards the rows also carry the slow response stage and the boost tail (``live_boost``); what a
reduction reads and makes of it is ``live_reduce``.  Slabs, rows and steps sit in rings over
the horizon (``live_ring``, step statistics kept incrementally by ``live_steps``);
``snapshot()`` drops the expired ones, reads the running slab sums, re-solves the (readings ×
groups) bounded regression from its Gram matrix (the same solution as :func:`regress.fit`),
draws ``boot_per_tick`` block-bootstrap replicates into a rolling pool of ``n_boot``
(``live_solve``, ``live_fit``), and assembles the contract snapshot (``live_snapshot``). The
lag and the board response (and W for an unknown board) are fitted once ``min_fit_s`` of
data is in, then refitted at doubling intervals up to every ``refit_every_s`` on the last
``fit_span_s`` only, a few grid points per tick (``live_lag``); when a refit moves the lag,
the rows the record buffer still covers are re-reduced at it a few per tick (``live_redo``)
and the new lag applies once they are all done; older rows keep the lag they were reduced
with.  A refit's work reads nothing the next update brings, so ``background()`` runs it
between updates (the feeds call it on their polls between snapshots) and ``update`` runs
whatever is left first.
Approximations versus the batch engine on the same horizon are listed in docs/attribution.md
("Live engine").
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from attribution.engine import regress
from attribution.engine.activity import BusyFunction, Items, items_for_device
from attribution.engine.aliasing import phase_locked, random_sums, spread_ratio_sums
from attribution.engine.blind import blind_to_work
from attribution.engine.build import _fit_window, readings_block, untraced_warning
from attribution.engine.clamp import MAX_GAP_NS
from attribution.engine.deltas import GPU_ITEMS
from attribution.engine.lag_refine import LAG_SLACK_MS
from attribution.engine.live_boost import Boost, ResponseSearch, row_columns
from attribution.engine.live_clamp import ClockLog, UnitIndex, ranked_groups, unit_ids
from attribution.engine.live_pending import (
    WAIT_WARN_S,
    PendingLaunches,
    waiting_warning,
)
from attribution.engine.live_redo import LagParams, Redo, redo_finish, redo_rows
from attribution.engine.live_reduce import (
    LOOKAHEAD_NS,
    LOOKBACK_NS,
    ChunkBuffer,
    _fsum,
    busy_from,
    random_rate_per_s,
    random_window_ends,
    reduce_slab,
    row_reach_ns,
)
from attribution.engine.live_ring import (
    N_CAUSES,
    SUMS,
    Classes,
    RowRing,
    SlabRing,
    StepRing,
)
from attribution.engine.live_snapshot import DevicePart, LagKept, assemble
from attribution.engine.live_solve import BootPool, fit_device, placed_idle_w
from attribution.engine.timebase import (
    FIELD_PREFERENCE,
    LAG_GRID_MS,
    TAU_GRID_MS,
    implausible_readings,
    implausible_warning,
    one_per_stamp,
    sensor_model,
    usable,
    window_fractions,
)
from attribution.engine.timebase import Readings as _Readings
from attribution.engine.timing_checks import backwards_warning, forward_items
from attribution.model import F64, I64, DeviceInfo, PowerField, Trace
from attribution.presets import NOMINAL_LAG_MS, GpuPreset, get_preset, preset_for_name
from attribution.snapshot import Snapshot
from attribution.steps import step_spans

SETTLE_S = 0.5
"""Time behind ``now`` that is reduced: records longer than this that straddle it are late."""
SLAB_MAX_NS = 1_000_000_000
"""Longest slab: the horizon's start moves in steps of at most this."""
MIN_FIT_S = 5.0
REFIT_EVERY_S = 30.0
FIT_SPAN_S = 20.0
BOOT_PER_TICK = 5
"""Bootstrap replicates drawn per snapshot; the interval reads the last ``n_boot`` of them."""
LAG_UNITS_PER_TICK = 22
"""Lag-grid work per tick, in activity matrices (a τ > 0 point is 8): a refit is ~560 in all
(seven τ grids of 9 lags), so it spreads over ~26 ticks; the first fit runs at once.  16 with
the earlier five τ grids (~420): the finer τ grid at 16 landed its refits ~9 ticks later, and
the staler lag put live − batch at 8 → 20 % summed over `live_vs_batch.py`'s eight runs."""
CONSUMER_FIT_SPAN_S = 60.0
"""The span a consumer board's refit reads (``fit_span_s`` elsewhere): the boost tail
trades with P_idle, and refitting an rtx4090 on 20 s put the live P_idle up to 12 % high (27 %
with the refits stepped faster) where the batch engine's 60 s gave −4…+8 %; on 60 s the live
one is −4…+6 % (docs/accuracy.md, "Live engine against the batch engine")."""
CONSUMER_SEARCH_SCALE = 2.5
"""A consumer board's refit also searches the slow stage and the tail (~900 matrices, not
~420): its search gets this many times ``lag_units_per_tick``, so that it lands in about as
many ticks as a data-centre board's (at 1× it took ~57 ticks and landed on stale readings)."""
REDO_ROWS_PER_TICK = 64
"""Rows re-reduced per tick after a refit moved the lag (~200 at a 100 ms sensor period: the
last 20 s; ~600 on a consumer board, whose refit reads 60 s); the tick after the refit gathers
their records."""


def _pad(a: F64, n: int) -> F64:
    """Zero columns for classes first seen after ``a`` was reduced."""
    if a.shape[-1] == n:
        return a
    width = [(0, 0)] * (a.ndim - 1) + [(0, n - a.shape[-1])]
    return np.asarray(np.pad(a, width), np.float64)


class DeviceState:
    """Everything the live engine keeps for one GPU."""

    def __init__(self, device: int, name: str, preset: GpuPreset | None, *,
                 fit_span_ns: int) -> None:
        self.device = device
        self.name = name
        self.preset = preset
        self.consumer = preset is not None and preset.consumer_boost  # boost model fitted
        # the span a refit reads: the engine's, at least CONSUMER_FIT_SPAN_S on a consumer board
        self.fit_span_ns = (max(fit_span_ns, int(CONSUMER_FIT_SPAN_S * 1e9)) if self.consumer
                            else fit_span_ns)
        self.field: PowerField | None = None
        self.period_ms = float("nan")
        self.window_ms = float("nan")
        self.source = "none"
        self.lag_ms = NOMINAL_LAG_MS
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
        self.pool = BootPool()
        self.search: ResponseSearch | None = None
        self.boost = Boost()  # consumer boards: slow stage and tail (live_boost)
        # how far below and above the lag the interval's refits sit (the rows' x_lo, x_hi)
        self.lag_ends_ms = (LAG_SLACK_MS, LAG_SLACK_MS)
        self.tail_rows = RowRing()  # the tail column of each row (consumer boards only)
        self.busy_end_ns: int | None = None  # last busy end seen (a tail gap's start)
        self.steps = StepRing()
        self.clock = ClockLog()
        self.units = UnitIndex()
        self.redo: Redo | None = None  # a re-reduction at a refitted lag in progress
        # a refit due at the last update, left to ``LiveEngine.background``: (lo, upto, the
        # readings' times and watts as of that update)
        self.fit_due: tuple[int, int, I64, F64] | None = None
        self.ahead = False  # the next update's search or redo step is done already
        # the last search's readings' spread ratio when they were phase-locked (their lag was
        # not taken), else None
        self.lag_locked: float | None = None
        self.lag_taken = False  # a search's lag was taken (not only the starting value)
        # the P_idle the last horizon that placed it tightly read (live_solve.RUN_IDLE_CI):
        # held there when a later horizon is busy throughout
        self.run_idle_w: float | None = None
        # a kernel, copy or memset seen on this GPU: NVML samples every GPU, the agent sees one
        # process's work; a GPU without any is not fitted, reduced or shown
        self.has_work = False
        # a GPU whose work began after the update that started the engine: when its first
        # records came (its first fit waits min_fit from there, not from the engine's start,
        # and the other GPUs do not wait for it: it joins the reductions once fitted)
        self.late_work_ns: int | None = None

    @property
    def lag_params(self) -> LagParams:
        """(lag ms, τ ms, boost, the interval's lag ends): what a refit sets."""
        return self.lag_ms, self.tau_ms, self.boost, self.lag_ends_ms

    def set_lag_params(self, params: LagParams) -> None:
        """Make a refit's values the device's."""
        self.lag_ms, self.tau_ms, self.boost, self.lag_ends_ms = params

    def unit_ids(self, it: Items) -> I64:
        """Each item's unit (class, or its class's clamped unit) in the class table."""
        return unit_ids(self.classes, it, self.clock.clamped_at(it.start_ns))

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
        # sorted, the unusable dropped, readings sharing a time averaged (as the batch engine)
        t, w = one_per_stamp(p.t_ns[m], p.power_mw[m].astype(np.float64) / 1e3)
        if len(self.pend_t):
            keep = t > self.pend_t[-1]
            t, w = t[keep], w[keep]
        self.pend_t = np.concatenate([self.pend_t, t])
        self.pend_w = np.concatenate([self.pend_w, w])
        if np.isnan(self.period_ms) and len(self.pend_t) > 8:
            rd = _Readings(self.field, self.pend_t, self.pend_w,
                           float(np.median(np.diff(self.pend_t)) / 1e6))
            self.period_ms, self.window_ms, self.source = sensor_model(self.preset, rd)
        self.clock.add(tr.clocks, self.device)
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
                 boot_per_tick: int = BOOT_PER_TICK, lag_units_per_tick: float = LAG_UNITS_PER_TICK,
                 redo_rows_per_tick: float = REDO_ROWS_PER_TICK) -> None:
        self.gpu = gpu
        self.devices_info = list(devices or [])
        self.horizon_ns = int(horizon_s * 1e9)
        self.settle_ns = int(settle_s * 1e9)
        self.min_fit_ns = int(min_fit_s * 1e9)
        self.refit_ns = int(refit_every_s * 1e9)
        self.fit_span_ns = int(fit_span_s * 1e9)
        self.boot_per_tick = boot_per_tick
        self.lag_units_per_tick = lag_units_per_tick
        self.redo_rows_per_tick = redo_rows_per_tick
        self._draws = 0
        self.n_boot = n_boot
        self.dev: dict[int, DeviceState] = {}
        self.chunks = ChunkBuffer()
        self.start_ns: int | None = None
        self.done_ns: int | None = None
        self.now_ns = 0
        self.refits = 0
        # launches whose items have not come: time is settled no further than the earliest
        self.pending = PendingLaunches()
        self.backwards_items = 0  # GPU items received ending before they start (read as 0 long)
        self.implausible_readings = 0  # power readings received over MAX_BOARD_POWER_W
        self.held_by_launch = False  # the last update settled short of now − settle for one

    # ------------------------------------------------------------------ input

    def _state(self, device: int) -> DeviceState:
        st = self.dev.get(device)
        if st is None:
            name = next((d.name for d in self.devices_info if d.index == device), "")
            preset = get_preset(self.gpu) if self.gpu is not None else preset_for_name(name)
            st = self.dev[device] = DeviceState(device, name, preset,
                                                fit_span_ns=self.fit_span_ns)
        return st

    def update(self, delta: Trace, now_ns: int) -> None:
        """Add the records completed and readings taken in ``(previous now, now_ns]``."""
        self.run_background()  # what the caller did not run between the updates
        self.now_ns = now_ns
        delta, backwards = forward_items(delta)
        self.backwards_items += backwards
        self.implausible_readings += implausible_readings(delta.power)
        devs = np.unique(np.concatenate([delta.kernels.device, delta.copies.device,
                                         delta.memsets.device, delta.power.device]))
        for d in devs[devs >= 0].tolist():
            self._state(int(d))
        for batch in (delta.kernels, delta.copies, delta.memsets):
            for d in np.unique(batch.device).tolist():
                st0 = self.dev.get(int(d))
                if st0 is not None and not st0.has_work:
                    st0.has_work = True
                    if self.start_ns is not None:  # set by an earlier update
                        st0.late_work_ns = now_ns
        for st in self.dev.values():
            st.add_readings(delta)
        self.pending.update(delta)
        items = Trace(strings=delta.strings, kernels=delta.kernels, copies=delta.copies,
                      memsets=delta.memsets, apis=delta.apis, markers=delta.markers)
        self.chunks.append(now_ns, items)
        if self.start_ns is None:
            starts = [int(b.start_ns.min()) for b in (delta.kernels, delta.copies,
                                                      delta.memsets, delta.apis) if len(b)]
            if not starts:
                self.chunks.clear()
                return
            self.start_ns = self.done_ns = min(starts)
        assert self.done_ns is not None
        upto = now_ns - self.settle_ns
        floor = self.pending.floor_ns(now_ns)  # an item running longer than the delay
        self.held_by_launch = floor is not None and floor < upto
        if floor is not None:
            upto = min(upto, floor)
        for st in self.dev.values():
            st.ahead = False  # this update's grid step or redo rows were done by background()
            if st.search is not None:
                self._search_land(st)
                continue
            if st.redo is not None:
                if st.redo.complete:
                    redo_finish(st, self.chunks, self.now_ns)
                continue
            due = st.field is not None and st.has_work and not np.isnan(st.window_ms) and (
                (not st.fitted and upto - (st.late_work_ns or self.start_ns) >= self.min_fit_ns)
                or (st.fitted and now_ns - st.last_fit_ns
                    >= min(self.refit_ns, max(st.last_fit_ns - self.start_ns, self.min_fit_ns))))
            if due:
                self._fit_lag(st, upto)
        ready = all(st.fitted or st.field is None or not st.has_work
                    or st.late_work_ns is not None for st in self.dev.values())
        while ready and upto > self.done_ns:  # slabs of at most SLAB_MAX_NS (horizon edge)
            b = min(upto, self.done_ns + SLAB_MAX_NS)
            for st in self.dev.values():
                if st.field is not None and not st.fitted:  # no work (or late, not fitted
                    keep = st.pend_t >= b - st.fit_span_ns  # yet): its readings for a fit
                    st.pend_t, st.pend_w = st.pend_t[keep], st.pend_w[keep]
                    continue
                self._reduce(st, self.done_ns, b)
            self.done_ns = b
        self._prune()

    def _margin_ns(self) -> int:
        w = max((st.window_ms for st in self.dev.values() if not np.isnan(st.window_ms)),
                default=0.0)
        slow = max((st.boost.reach_ms() for st in self.dev.values()), default=0.0)
        return int((LAG_GRID_MS[1] + w + 3.0 * TAU_GRID_MS[-1] + slow + 5.0) * 1e6) + LOOKBACK_NS

    def _prune(self) -> None:
        if self.done_ns is None:
            return
        context_from = self.done_ns - self._margin_ns()  # what the next reductions read
        keep_from = context_from
        if any(not st.fitted and st.field is not None and st.has_work
               and st.late_work_ns is None for st in self.dev.values()):
            keep_from = self.start_ns or keep_from
        else:
            span = max((st.fit_span_ns for st in self.dev.values()), default=self.fit_span_ns)
            keep_from = min(keep_from, self.now_ns - span - self.settle_ns)
        for st in self.dev.values():  # a re-reduction not started yet reads from lo_ns
            if st.redo is not None and st.redo.busy is None:
                keep_from = min(keep_from, st.redo.lo_ns)
        # API calls: only the next reductions' idle gaps read them (their context)
        self.chunks.prune(keep_from, apis_from_ns=context_from)

    # ------------------------------------------------------------------ lag

    def background(self) -> bool:
        """One piece of the work the next :meth:`update` starts with: a refit the last update
        found due (its records read and busy function built), then per device one lag-grid
        step or one step of a re-reduction.  None of it reads what the next update brings,
        so a caller that runs it between updates, after taking the snapshot (the feeds do, on
        the polls between snapshots), gets the same snapshots with the refit's work off the
        tick's path; ``update`` runs whatever is left first.  True if it did a piece."""
        for st in self.dev.values():
            if st.fit_due is not None:
                due, st.fit_due = st.fit_due, None
                self._start_search(st, *due)
                return True
            if st.ahead:
                continue
            if st.search is not None:
                st.search.step(self.lag_units_per_tick
                               * (CONSUMER_SEARCH_SCALE if st.consumer else 1.0))
                st.ahead = True
                return True
            if st.redo is not None and not st.redo.complete:
                redo_rows(st, self.chunks, self.redo_rows_per_tick)
                st.ahead = True
                return True
        return False

    def run_background(self) -> int:
        """:meth:`background` until nothing is left for the next update; the pieces run."""
        pieces = 0
        while self.background():
            pieces += 1
        return pieces

    def _fit_lag(self, st: DeviceState, upto: int) -> None:
        """Start a lag/response search on the last ``fit_span``: the first one runs to the end
        at once (nothing is reduced before it); a refit takes the readings as of now and leaves
        the rest to :meth:`background` (a few grid points per update)."""
        lo = max(self.start_ns or upto, upto - st.fit_span_ns)
        rt, ry = st.rows.view()[:2]
        t_all = np.concatenate([rt, st.pend_t])
        y_all = np.concatenate([ry, st.pend_w])
        if st.fitted:
            st.fit_due = (lo, upto, t_all, y_all)
            return
        self._start_search(st, lo, upto, t_all, y_all)
        if st.search is not None:
            st.search.step(math.inf)
            self._search_land(st)

    def _start_search(self, st: DeviceState, lo: int, upto: int, t_all: I64, y_all: F64
                      ) -> None:
        """The search's inputs: the span's records on clamp-split units, their busy function
        and the usable readings (``t_all``, ``y_all``: rows and pending readings as of the
        update that found the fit due; the buffer still holds the span's records)."""
        sub = self.chunks.recent(lo, kinds=GPU_ITEMS)  # no API call or marker: ~2x cheaper
        it = items_for_device(sub, st.device)
        if not len(it) or len(t_all) < 8:
            return
        s = np.clip(it.start_ns, lo, upto)
        e = np.clip(it.end_ns, lo, upto)
        unit = st.unit_ids(it)  # as the batch engine: the search runs on clamp-split units
        ct = _fsum(unit, (e - s).astype(np.float64), len(st.classes))
        _, group, n_groups = ranked_groups(ct, st.units.of(st.classes))
        if not n_groups:  # the span's records all begin after it (work just started)
            return
        gu = group[unit]
        ran = gu >= 0
        if bool(ran.all()):  # every unit ran in the span (the common case): no copies
            busy = BusyFunction(s, e, gu, n_groups, origin_ns=lo)
        else:
            busy = BusyFunction(s[ran], e[ran], gu[ran], n_groups, origin_ns=lo)
        if st.source == "measured" and not st.fitted:
            st.window_ms = _fit_window(busy, t_all, y_all, st.period_ms, (lo, upto))
            st.source = "measured+fitted"
        idx = usable(t_all, st.window_ms, lo, upto)
        if len(idx) < 8:
            st.last_fit_ns = self.now_ns  # too few readings: try again a refit period later
            return
        st.search = ResponseSearch(busy, t_all[idx], y_all[idx], st.window_ms,
                                   consumer=st.consumer, start_ns=s, end_ns=e,
                                   block=readings_block(st.window_ms, st.period_ms))

    def _search_land(self, st: DeviceState) -> None:
        """The search's result, once it has one: the new values now, or (a fitted device
        whose lag, response or boost moved) a re-reduction of the rows the record buffer
        still covers, a few per update (``live_redo``), with the values applied when done."""
        assert st.search is not None
        res = st.search.result
        if res is None:
            return
        params = (*res, st.search.lag_ends_ms)
        # phase-locked readings see one slice of every step at every lag: the lag (response,
        # boost) they fit is any (a near-period step fitted 5-10 ms off on its first 5-10 s);
        # the engine keeps what it has (the board's values before a first fit)
        st.lag_locked = st.search.spread if phase_locked(st.search.spread) else None
        if st.lag_locked is not None:
            params = st.lag_params
        else:
            st.lag_taken = True
        st.search = None
        # every row of the span the refit read (60 s on a consumer board): rows older than a
        # 20 s redo kept the values of fits on the run's first seconds
        lo = max(self.start_ns or self.now_ns, self.now_ns - st.fit_span_ns)
        t = st.rows.view()[0]
        t = t[t - row_reach_ns(res[0], st.window_ms, res[2].reach_ms(), params[3][1]) >= lo]
        if st.fitted and params != st.lag_params and len(t):
            st.redo = Redo(params, t.copy(), lo, self.now_ns)
            if math.isinf(self.redo_rows_per_tick):
                redo_rows(st, self.chunks, math.inf)
                redo_finish(st, self.chunks, self.now_ns)
        else:
            st.set_lag_params(params)
        st.fitted = True
        st.last_fit_ns = self.now_ns
        self.refits += 1

    # ------------------------------------------------------------------ reduction

    def _reduce(self, st: DeviceState, a: int, b: int) -> None:
        """Reduce settled time [a, b) to a slab (with its random windows' sums), the steps
        that ended in it, and the settled readings to rows (``live_reduce``)."""
        # records starting a little after b: the rows' windows at the lag slack, the idle
        # gap the slab's end cuts (classified whole)
        slack_ns = max(int(np.ceil(max(LAG_SLACK_MS, st.lag_ends_ms[0]) * 1e6)) + 1_000_000,
                       LOOKAHEAD_NS)
        sub = self.chunks.recent(a - LOOKBACK_NS, start_before_ns=b + slack_ns)
        it = items_for_device(sub, st.device)
        cls = st.unit_ids(it)  # per unit: a kernel class's clamped instances apart
        n_cls = len(st.classes)
        slab = reduce_slab(sub, it, cls, n_cls, (a, b))
        first = self.start_ns or a
        # the steps that ended in [a, b) and the readings settled by b
        steps = self._settled_steps(st, a, b)
        t: I64 = np.empty(0, np.int64)
        y: F64 = np.empty(0, np.float64)
        if st.field is not None and len(st.pend_t):
            done = st.pend_t - np.int64(round(st.lag_ms * 1e6)) <= b
            ok = st.pend_t - np.int64(round((st.lag_ms + st.window_ms) * 1e6)) >= first
            t, y = st.pend_t[done & ok], st.pend_w[done & ok]
            st.pend_t, st.pend_w = st.pend_t[~done], st.pend_w[~done]
        # windows at random in [a, b), read as readings at the lag would be (the horizon's
        # phase-lock test: their spread is the reference the rows' spread is compared with)
        r_t: I64 = np.empty(0, np.int64)
        if st.field is not None and not np.isnan(st.window_ms):
            r_t = random_window_ends(a, b, first, st.window_ms,
                                     random_rate_per_s(self.horizon_ns * 1e-9)) + np.int64(
                round(st.lag_ms * 1e6))
        if steps is None and not len(t) and not len(r_t):
            st.slabs.append(slab)
            return
        need: list[int] = []
        if len(t) or len(r_t):  # the earliest window, reading's or random
            first_t = min(int(v[0]) for v in (t, r_t) if len(v))
            need.append(first_t - row_reach_ns(st.lag_ms, st.window_ms, st.boost.reach_ms(),
                                               st.lag_ends_ms[1]))
        need += [int(steps[0][0])] if steps is not None else []
        need_from = min(need)
        if need_from < a - LOOKBACK_NS:  # a step (or a window) reaching past the context read
            sub = self.chunks.recent(need_from, start_before_ns=b + slack_ns)
            it = items_for_device(sub, st.device)
            cls = st.unit_ids(it)
            n_cls = len(st.classes)  # the wider read may hold classes not seen before
        busy = busy_from(it, cls, n_cls, need_from,
                         (steps[0], steps[1]) if steps is not None else None)
        x_rand: F64 | None = None
        if len(t):  # the random windows ride along as readings (one busy-time query)
            xs, hs = row_columns(busy, np.r_[t, r_t], window_ms=st.window_ms,
                                 lag_ms=st.lag_ms, tau_ms=st.tau_ms, boost=st.boost,
                                 start_ns=it.start_ns, end_ns=it.end_ns,
                                 prev_end_ns=st.busy_end_ns, now_ns=self.now_ns,
                                 ends_ms=st.lag_ends_ms)
            n_t = len(t)
            x_rand = xs[0][n_t:]
            xs = [x[:n_t] for x in xs]
            hs = None if hs is None else [h[:n_t] for h in hs]
        elif len(r_t):
            x_rand = window_fractions(busy, r_t, st.window_ms, st.lag_ms, st.tau_ms,
                                      slow=st.boost.slow)
        if x_rand is not None and len(x_rand):
            r_n, r_x, r_xx = random_sums(x_rand)
            slab = dataclasses.replace(slab, rand_n=r_n, rand_x=r_x, rand_xx=r_xx)
        st.slabs.append(slab)
        if steps is not None:
            s0, e0, items = steps
            st.steps.append(s0, (e0 - s0).astype(np.float64) * 1e-9,
                            busy.span_busy(), items)
        if not len(t):
            return
        st.rows.append(t, y, (xs[0], xs[1], xs[2]))
        if hs is not None:
            st.tail_rows.append(t, y, (hs[0], hs[1], hs[2]))
        if len(it):
            st.busy_end_ns = max(st.busy_end_ns or 0, int(it.end_ns.max()))

    def _settled_steps(self, st: DeviceState, a: int, b: int) -> tuple[I64, I64, F64] | None:
        """Steps (``attribution.steps.step_spans``: mark_step ranges, else ProfilerStep#N,
        from every marker the record buffer holds) that ended in [a, b): (start, end,
        items); their per-class busy time is read by the caller (the step's energy is
        ``P_idle × duration + busy · ΔP`` at snapshot time, as in the batch engine)."""
        s_all, e_all, it_all, source = step_spans(self.chunks.markers(), None, [])
        m = ((e_all > s_all) & (e_all >= a) & (e_all < b)
             & (s_all >= (self.start_ns or a)))
        if not bool(m.any()):
            return None
        st.steps.source = source
        return s_all[m], e_all[m], it_all[m]

    # ------------------------------------------------------------------ output

    def snapshot(self) -> Snapshot | None:
        """The horizon's attribution, or None before anything is settled."""
        if self.done_ns is None or not any(st.slabs for st in self.dev.values()):
            return None
        lo = self.done_ns - self.horizon_ns
        for st in self.dev.values():
            st.slabs.expire(lo)
            st.rows.expire(lo)
            st.tail_rows.expire(lo)
            # clock samples decide the clamp state of records the buffer still holds
            st.clock.expire(min(lo, self.now_ns - st.fit_span_ns - self.settle_ns
                                - self._margin_ns()) - MAX_GAP_NS)
        starts = [st.slabs.slabs[0].start_ns for st in self.dev.values() if st.slabs]
        if not starts:  # a horizon shorter than the settling delay: all expired just now
            return None
        win = (min(starts), self.done_ns)
        for st in self.dev.values():  # a step that starts before the window is out of it for
            st.steps.expire(win[0])  # good (the window's start only moves on): one slice
        parts: list[DevicePart] = []
        # as the batch engine: a GPU with readings but no work while another has work is
        # another process's (NVML samples every GPU), not this run's idle
        worked = [d for d, st in self.dev.items() if st.has_work]
        untraced = sorted(d for d in self.dev if d not in worked) if worked else []
        for d in sorted(self.dev):
            if d in untraced or not self.dev[d].slabs:  # no work, or none reduced yet
                continue
            st = self.dev[d]
            n = len(st.classes)
            t, y, *xv = st.rows.view()
            reach_ms = LAG_GRID_MS[1] + (0.0 if np.isnan(st.window_ms) else st.window_ms)
            # rows are in time order: the rows whose windows fit the horizon are one slice
            keep = slice(int(np.searchsorted(t, win[0] + np.int64(round(reach_ms * 1e6)))),
                         int(np.searchsorted(t, win[1] + np.int64(round(LAG_GRID_MS[0] * 1e6)),
                                             side="right")))
            xs = [_pad(x[keep], n) for x in xv]
            y = y[keep]
            hs = None
            if len(st.tail_rows) == len(t) and st.boost.modelled:
                hs = [h[keep] for h in st.tail_rows.view()[2:]]
            sums = {k: st.slabs.total(k, N_CAUSES if k.startswith("idle") else n)
                    for k in SUMS}
            open_calls, open_bytes = st.slabs.head_open(n)  # items the start cuts
            sums["calls"] = sums["calls"] + open_calls
            sums["bytes"] = sums["bytes"] + open_bytes
            for k in ("calls", "bytes", "idle_n"):
                sums[k] = np.rint(sums[k])
            # the phase-lock test on the horizon's rows against its slabs' random windows (a
            # search's own readings are another span: a step just off the sensor's period
            # drifts in and out of lock over its ~30 s beat)
            spread = spread_ratio_sums(xs[0], st.slabs.total("rand_n", 1),
                                       st.slabs.total("rand_x", n),
                                       st.slabs.total("rand_xx", n))
            parts.append(self._device_part(st, sums, xs, y, hs, first=not parts,
                                           span_s=(win[1] - win[0]) * 1e-9, spread=spread))
        snap = assemble(parts, win)
        lines = [untraced_warning(untraced)] if untraced else []
        wait_s = (self.now_ns - self.done_ns) * 1e-9
        if self.held_by_launch and wait_s - self.settle_ns * 1e-9 > WAIT_WARN_S:
            lines.append(waiting_warning(wait_s))
        lost = self.pending.given_up_line(win[0])
        if lost is not None:
            lines.append(lost)
        if self.backwards_items:
            lines.append(backwards_warning(self.backwards_items))
        if self.implausible_readings:
            lines.append(implausible_warning(self.implausible_readings))
        if lines:
            snap = dataclasses.replace(snap, warnings=(*lines, *snap.warnings))
        return snap

    def _device_part(self, st: DeviceState, sums: dict[str, F64], xs: list[F64], y: F64,
                     hs: list[F64] | None = None, *, first: bool = True,
                     span_s: float = math.inf, spread: float = 1.0) -> DevicePart:
        um = st.units.of(st.classes)
        # bootstrap blocks span max(1 s, 3 W) of readings, as the batch engine's
        block = readings_block(st.window_ms, st.period_ms)
        self._draws += 1
        f = fit_device(time_s=sums["time_s"], xs=xs, y=y, um=um, preset=st.preset, block=block,
                       pool=st.pool, n_boot=self.n_boot, boot_per_tick=self.boot_per_tick,
                       seed=self._draws, tail=hs if hs and bool(hs[0].any()) else None,
                       phase_locked=phase_locked(spread), has_power=st.field is not None,
                       tail_unplaced=st.boost.tail_unplaced,
                       prior_scale=regress.prior_scale_for(span_s), run_idle_w=st.run_idle_w)
        steps = st.steps.view()
        class_time_s = um.to_classes(sums["time_s"])
        blind = (st.field is not None and not f.idle.unplaced  # (as the batch engine)
                 and blind_to_work(f.class_dyn_j, class_time_s, span_s, len(y)))
        placed = placed_idle_w(f, blind=blind, phase_locked=phase_locked(spread))
        if placed is not None:  # the run's own active idle, for a later busy horizon
            st.run_idle_w = placed
        return DevicePart(
            device=st.device, name=st.name, preset=st.preset,
            field=st.field.label if st.field is not None else "none",
            period_ms=st.period_ms, window_ms=st.window_ms, lag_ms=st.lag_ms,
            tau_ms=st.tau_ms, source=st.source, labels=um.labels,
            class_source=um.source, class_key=um.key,
            group=f.class_group, n_groups=f.n_groups, g_c_time_s=f.g_c_time_s, gram_g=f.gram_g,
            p_idle_w=f.p_idle_w, dyn_j=f.class_dyn_j, rms_w=f.rms_w,
            ci=f.ci, calls=um.to_classes(sums["calls"]), time_s=class_time_s,
            share_s=um.to_classes(sums["share_s"]), bytes=um.to_classes(sums["bytes"]),
            idle_s=sums["idle_s"], idle_n=sums["idle_n"], n_readings=len(y),
            energy_t_ns=st.energy_t, energy_mj=st.energy_mj,
            step_start_ns=steps[0], step_dur_s=steps[1],  # views: used before the next append
            step_dyn_j=st.steps.busy_dot(f.unit_dp_w),
            step_items=steps[2], step_source=st.steps.source,
            step_times=st.steps.times() if first and len(steps[0]) else None,
            held_idle_w=f.held_idle_w, idle=f.idle, tail_unplaced=f.tail_unplaced,
            idle_by_run=f.idle_by_run,
            phase_lock=spread if phase_locked(spread) else None,
            lag_kept=(None if st.lag_locked is None else
                      LagKept(st.lag_locked, st.lag_ms, st.lag_taken, st.fit_span_ns * 1e-9)),
            blind_share=float(class_time_s.sum()) / span_s if blind else None,
            step_busy_s=st.steps.busy_dot(np.ones(len(f.unit_dp_w))) if blind else None,
            slow_response=st.boost.slow,
            boost_tail_j=(f.tail_level_w * float(hs[0].sum()) * st.period_ms * 1e-3
                          if hs is not None else None))
