"""One timebase: which power field to use, its sensor model (T, W), and the fitted lag D.

Owns the choice of readings (one field per device, fresh readings only, windows inside the
attribution window), the sensor model (from the GPU preset; unknown boards: T from the
median spacing of fresh readings and W = T), the per-reading activity matrix over the exact
sensor windows ``[t_k − D − W, t_k − D]`` (optionally behind a first-order board response of
time constant τ; for poll-stamped logs averaged over each reading's possible publish times),
and the grid search of D (and τ) that best explains the readings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterator, Sequence

import numpy as np

from attribution.engine import publish_grid
from attribution.engine.stepping import finish
from attribution.model import (
    F64,
    I32,
    I64,
    POLL_TIME,
    POLL_TIME_KEY,
    B,
    PowerBatch,
    PowerField,
    Trace,
)
from attribution.presets import GpuPreset

FIELD_PREFERENCE = (PowerField.INSTANT, PowerField.DRAW, PowerField.SAMPLES, PowerField.METER,
                    PowerField.AVERAGE)
LAG_GRID_MS = (-20.0, 60.0)
LAG_COARSE_MS = 2.0
LAG_FINE_MS = 0.25
TAU_GRID_MS = (0.0, 0.4, 0.8, 1.2, 1.6, 2.0, 2.5, 3.0)
"""Candidate board response time constants (first-order low-pass before the boxcar).  1.6 and
2.5 ms since 2026-12-05: a V100 whose response is 2.35 ms, fitted at 2.0, put P_idle 5.6 %
high and its classes 3–7 % low, outside their intervals (docs/accuracy.md, "Drawn boards")."""
TAU_POINTS = 8
RIVAL_RATIO = 2.0
"""A coarse local minimum whose residual is within this factor of the coarse best is searched
finely too.  Readings locked to a periodic job's phase (1–2 s steps, a multiple of the
sensor's period, long idle) have minima narrower than the coarse step: on
phase_locked_step/h200 at a 2 s step (seed 2, 120 s) the coarse grid read 18.6 at +8 ms and
19.0 at +2 ms while the fine residual there was 1.0 at +1 ms, and a lag fitted 7 ms off split
the classes −54 %/−97 % (found by an audit, 2026-12-05).  On the seed-7 scenario suite (72
runs) a rival is searched on 8: the phase-locked step on five boards, and three consumer-board
runs whose residual is flat; none of their results moves.  The other 64 runs' second coarse
minimum is 28 times the best's or more, so they search exactly as before."""
MAX_RIVALS = 3
"""The most coarse points the fine search looks around (the best among them)."""
MIN_LAG_READINGS = 4
"""Fewer usable readings than this fit no lag: the searches (both engines) return
``DEFAULT_LAG``, which nothing then refines."""
DEFAULT_LAG = (1.5, 0.0)
"""(lag ms, τ ms) where no lag is fitted."""
SLOW_TAU_GRID_MS = (30.0, 60.0, 120.0, 250.0, 500.0)
"""Candidate time constants of a consumer board's slow boost stage (DESIGN.md §3: two-stage
ramp, tail 0.5-3 s)."""
SLOW_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
SLOW_LAG_SPAN_MS = 6.0
SPREAD_POINTS = 4
"""Publish times averaged over, evenly inside each reading's spread."""
MAX_BOARD_POWER_W = 5_000.0
"""The most a power reading may claim.  No GPU board draws near it: the largest, in 2026, are
rated 1.0–1.4 kW (B200 1 000 W, GB200 1 200 W a GPU, MI355X 1 400 W).  A reading above it is a
damaged row, a unit mix-up (mW read as W) or an error code read as a value; both engines drop
it as they drop negative and non-finite ones, and the snapshot says how many
(:func:`implausible_warning`): one such reading of 9·10⁸ W used to make a 4 GJ snapshot."""

MIN_FRESH = 8
"""With fewer fresh readings than this in a field, every poll of it counts as a reading
(unless its value changes as a sensor's would: :data:`REPEATS_SHARE`)."""
REPEATS_SHARE = 0.5
"""A field with fewer than ``MIN_FRESH`` fresh marks whose value changes on at most this share
of its rows (and on ``MIN_FRESH`` or more) is a log polling faster than the sensor publishes
whose fresh marks were lost: each change of value is a new reading, published some time since
the poll before (as an nvidia-smi log's, which the importer marks so).  Taken as readings
at their own poll times, every repeat counted as a reading stamped up to a period late: an
audit (2026-12-05) met resolvable classes −17…−24 % (V100) and −42…−48 % (A100/H100) with
P_idle +144…+273 %."""
AVERAGE_WINDOW_MS = 1000.0
"""Window of the ``average`` field on a board whose preset does not list it (DESIGN.md §3)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Readings:
    """The fresh readings of one field on one device."""

    field: PowerField | None
    t_ns: I64
    power_w: F64
    period_ms: float  # measured: median spacing, a poll-stamped log's publish grid (nan: < 2)
    spread_ns: I64 | None = None
    """Poll-timestamped readings (``POLL_TIME``): how long before ``t_ns`` the reading may
    have been published (since the previous poll of the field, at most a period, narrowed by
    the publish grid: ``publish_grid``); None when the timestamps are the sensor's own."""
    poll_lock: float | None = None
    """Poll-timestamped readings: how locked the log's polls are to the sensor
    (``publish_grid.poll_phase_scatter``; under ``LOCKED_POLLS``: locked)."""
    delay_flip_ns: I64 | None = None
    """Poll-timestamped readings whose polls are locked: how much later than the log's usual
    delay after its publish each reading was shown (``publish_grid.poll_delay_flips``; whole
    poll gaps); None: polls not locked, or the flips not told."""
    delay_grid_ns: I64 | None = None
    """Poll-timestamped readings whose polls are locked: how much later than the log's median
    delay after its publish each reading was shown, its publish taken on the sensor's grid
    (``publish_grid.poll_grid_delays``); None: polls not locked, or their stamps not at one
    delay.  Where it is given the engine keeps whichever placing its fit's residual prefers:
    this one, or the flips' (or, where those are None, the poll-interval average;
    ``build._locked_placing``)."""
    fresh_from_values: bool = False
    """The field's rows carried (almost) no fresh marks while their value kept changing and
    repeating: new values were taken by a change of value and placed as poll-stamped
    readings (:data:`REPEATS_SHARE`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Sensor:
    field: str
    period_ms: float
    window_ms: float
    lag_ms: float
    source: str  # "preset" | "measured" | "measured+fitted" | "field" | "none"


def readings_for(trace: Trace, device: int, preset: GpuPreset | None = None) -> Readings:
    """Fresh readings of the preferred field on ``device`` (sorted, de-duplicated by time).
    ``preset``: the board's, whose publish period bounds a poll-stamped reading's interval
    where the log polls more slowly than the sensor publishes."""
    p = trace.power
    on_dev = p.device == device
    if not bool(on_dev.any()):
        on_dev = p.device < 0  # a power log with no device column
    for f in FIELD_PREFERENCE:
        m = on_dev & (p.field == int(f))
        if not bool(m.any()):
            continue
        fresh = m & p.fresh
        by_value = False
        if int(np.count_nonzero(fresh)) < MIN_FRESH:
            changed = _value_changes(p.t_ns, p.power_mw, m)
            n_changed = int(np.count_nonzero(changed))
            if MIN_FRESH <= n_changed <= REPEATS_SHARE * int(np.count_nonzero(m)):
                fresh, by_value = changed, True  # fresh marks lost: by change of value
            else:
                # a value that (almost) never changes -- an idle board, or readings locked to
                # one slice of every step -- shows no fresh polls where the importer marks
                # them by a change of value (nvidia-smi logs): every poll is then a reading
                fresh = m
        t, w = one_per_stamp(p.t_ns[fresh], p.power_mw[fresh].astype(np.float64) / 1e3)
        period = float(np.median(np.diff(t)) / 1e6) if len(t) > 1 else float("nan")
        if (trace.meta.get(POLL_TIME_KEY) != POLL_TIME and not by_value) or not len(t):
            return Readings(f, t, w, period, None)
        hidden = not bool(np.all(fresh[m]))
        # the publish grid works on times from the first poll: its stamps' resolution is
        # judged on their differences and its float arithmetic stays exact, so neither
        # depends on where the timeline starts (a shift of a whole run moves nothing)
        polls = np.sort(p.t_ns[m])
        t0 = polls[0]
        polls = polls - t0
        stamps = t - t0
        t, w, spread, period = publish_grid.poll_stamped(
            stamps, w, polls, period, hidden_repeats=hidden,
            sensor_period_ms=_preset_period(preset, f))
        lock = publish_grid.poll_phase_scatter(stamps, polls, period)
        locked = lock < publish_grid.LOCKED_POLLS  # NaN: not judged
        flips = publish_grid.poll_delay_flips(t, polls, period) if locked else None
        grid = publish_grid.poll_grid_delays(t, polls, period) if locked else None
        return Readings(f, t + t0, w, period, spread, lock, flips, grid, by_value)
    return Readings(None, np.empty(0, np.int64), np.empty(0, np.float64), float("nan"))


def usable_power(power_w: F64) -> B:
    """The readings a board could give: finite, not negative, at most
    :data:`MAX_BOARD_POWER_W` (the engines, the export's power split)."""
    return np.asarray(np.isfinite(power_w) & (power_w >= 0) & (power_w <= MAX_BOARD_POWER_W),
                      bool)


def one_per_stamp(t_ns: I64, power_w: F64) -> tuple[I64, F64]:
    """Readings sorted by time, the unusable ones (not finite, negative, over
    :data:`MAX_BOARD_POWER_W`) dropped and those sharing a timestamp (two samplers merged, a
    log written twice) replaced by their mean: the result does not depend on the rows' order
    (both engines)."""
    ok = usable_power(power_w)
    t_ns, power_w = t_ns[ok], power_w[ok]
    order = np.argsort(t_ns, kind="stable")
    t_ns, power_w = t_ns[order], power_w[order]
    if len(t_ns) < 2 or bool(np.all(t_ns[1:] > t_ns[:-1])):
        return t_ns, power_w
    first = np.flatnonzero(np.r_[True, t_ns[1:] > t_ns[:-1]])
    count = np.diff(np.r_[first, len(t_ns)])
    return t_ns[first], np.add.reduceat(power_w, first) / count


def implausible_readings(power: PowerBatch) -> int:
    """How many of ``power``'s readings claim more than :data:`MAX_BOARD_POWER_W`."""
    return int(np.count_nonzero(power.power_mw > MAX_BOARD_POWER_W * 1e3))


def implausible_warning(n_readings: int) -> str:
    """The snapshot line for the readings :func:`one_per_stamp` dropped as implausible."""
    return (f"{n_readings} power reading(s) over {MAX_BOARD_POWER_W:.0f} W dropped (no GPU "
            "board draws that much: damaged rows, a unit mix-up or an error code)")


def _value_changes(t_ns: I64, power_mw: I64, m: B) -> B:
    """The rows of ``m`` whose value differs from the row of ``m`` before them in time (the
    first one too); rows sharing a timestamp taken in order of value, so that the marks do not
    depend on the rows' order."""
    idx = np.flatnonzero(m)
    idx = idx[np.lexsort((power_mw[idx], t_ns[idx]))]
    out = np.zeros(len(m), bool)
    if len(idx):
        v = power_mw[idx]
        out[idx] = np.r_[True, v[1:] != v[:-1]]
    return out


def _preset_period(preset: GpuPreset | None, field: PowerField) -> float | None:
    try:
        return float(preset.sensor(field).period_ms) if preset is not None else None
    except KeyError:
        return None


def sensor_model(preset: GpuPreset | None, readings: Readings) -> tuple[float, float, str]:
    """(T, W, source) for the readings' field: the preset's; else measured T and W = T
    (source "measured": the engine then fits W), or W = 1 s for the ``average`` field."""
    if readings.field is None:
        return float("nan"), float("nan"), "none"
    if preset is not None:
        try:
            s = preset.sensor(readings.field)
            return float(s.period_ms), float(s.window_ms), "preset"
        except KeyError:
            pass
    t = readings.period_ms if np.isfinite(readings.period_ms) else 100.0
    if readings.field is PowerField.AVERAGE:  # NVML's average field is a ~1 s mean by definition
        return t, AVERAGE_WINDOW_MS, "field"
    return t, t, "measured"


ActivityFn = Callable[[I64], F64]
"""``B(t)``: busy seconds per group up to each time (shape (len(t), groups))."""


def _delays(tau_ms: float, slow: tuple[float, float]) -> tuple[F64, F64]:
    """Delay quantiles u (ms) and their weights for a response τ (and slow stage)."""
    q = -np.log1p(-(np.arange(TAU_POINTS) + 0.5) / TAU_POINTS)
    u = tau_ms * q if tau_ms > 0 else np.zeros(1)
    wt = np.full(len(u), 1.0 / len(u))
    tau2, w2 = slow
    if tau2 > 0 and w2 > 0:
        u = np.concatenate([u, tau2 * q])
        wt = np.concatenate([wt * (1.0 - w2), np.full(TAU_POINTS, w2 / TAU_POINTS)])
    return u, wt


def window_fractions(busy: ActivityFn, t_ns: I64, window_ms: float, lag_ms: float,
                     tau_ms: float = 0.0, *, slow: tuple[float, float] = (0.0, 0.0),
                     spread_ns: I64 | None = None) -> F64:
    """Per-group busy fraction inside each reading's window [t − D − W, t − D].

    With ``tau_ms > 0`` the board is a first-order low-pass of time constant τ in front of
    the boxcar: the window integral of the filtered signal is the expectation of the boxcar
    integral over a delay u ~ Exp(τ), computed at ``TAU_POINTS`` quantiles of u.  ``slow``
    = (τ₂, w) adds a second, slow stage (consumer boards ramp in two stages): a fraction w of
    the power follows Exp(τ₂) instead; the delay is then the mixture.  ``spread_ns``
    (poll-timestamped readings, :class:`Readings`): each reading's activity is the mean over
    ``SPREAD_POINTS`` publish times evenly inside ``[t − spread, t]``.
    """
    return next(iter_window_fractions(busy, t_ns, window_ms, [(lag_ms, tau_ms)], slow=slow,
                                      spread_ns=spread_ns))


BATCH_VALUES = 4_000_000
"""Busy-function values (queries × groups) held at once by :func:`iter_window_fractions`."""


def _publish_times(t_ns: I64, spread_ns: I64) -> I64:
    """``SPREAD_POINTS`` publish times per reading, evenly inside ``[t − spread, t]``,
    ascending within each reading (so the busy function's searches resume), reading-major."""
    frac = (SPREAD_POINTS - 0.5 - np.arange(SPREAD_POINTS)) / SPREAD_POINTS
    back = np.rint(spread_ns[:, None].astype(np.float64) * frac[None, :]).astype(np.int64)
    return np.asarray((t_ns[:, None] - back).reshape(-1), np.int64)


def iter_window_fractions(busy: ActivityFn, t_ns: I64, window_ms: float,
                          specs: Sequence[tuple[float, float]], *,
                          slow: tuple[float, float] = (0.0, 0.0),
                          spread_ns: I64 | None = None) -> Iterator[F64]:
    """:func:`window_fractions` for each (lag, τ) of ``specs`` in turn, bit-identical to one
    call each.

    The lag search asks for the same readings at dozens of nearby lags.  Here every distinct
    window edge ``t_k − offset`` of a batch of pairs is asked of ``busy`` in one call, laid
    out reading by reading with offsets descending (so the times come nearly sorted and a
    busy function's search resumes from the previous answer instead of starting over in
    millions of knots); each pair's matrix is then assembled from those values with the
    same arithmetic as :func:`window_fractions`.  Batches hold at most ``BATCH_VALUES``
    values, so memory stays that of a few single calls however long the trace.
    ``spread_ns``: as :func:`window_fractions`.
    """
    if spread_ns is not None and len(t_ns):
        n_rd = len(t_ns)
        for x in iter_window_fractions(busy, _publish_times(t_ns, spread_ns), window_ms,
                                       specs, slow=slow):
            yield np.asarray(x.reshape(n_rd, SPREAD_POINTS, -1).mean(axis=1), np.float64)
        return
    n = len(t_ns)
    w_ns = np.int64(round(window_ms * 1e6))
    plans: list[tuple[I64, F64]] = []
    for lag_ms, tau_ms in specs:
        u, wt = _delays(tau_ms, slow)
        plans.append((np.rint((lag_ms + u) * 1e6).astype(np.int64), wt))
    per_query = max(int(getattr(busy, "n_groups", 8)), 1)
    i = 0
    while i < len(plans):
        # a batch of pairs whose window edges fit the value budget (at least one pair)
        j, cols_n = i, 0
        while j < len(plans) and (j == i or (cols_n + 2 * len(plans[j][0])) * n * per_query
                                  <= BATCH_VALUES):
            cols_n += 2 * len(plans[j][0])
            j += 1
        offs = np.concatenate([p[0] for p in plans[i:j]])
        asc = np.unique(np.concatenate([offs, offs + w_ns]))
        cols = asc[::-1]  # descending offsets: ascending times within each reading
        ih = len(cols) - 1 - np.searchsorted(asc, offs)
        il = len(cols) - 1 - np.searchsorted(asc, offs + w_ns)
        block = getattr(busy, "window_block", None)
        frac = block(t_ns, cols, ih, il, window_ms * 1e-3) if block is not None else None
        if frac is None:
            q = (t_ns[:, None] - cols[None, :]).reshape(-1)
            # (edge, reading, group), then every pair's (delay, reading, group) fractions
            by_group = getattr(busy, "by_group", None)
            if by_group is not None:
                vals = by_group(q, (n, len(cols)))
            else:
                v = busy(q)
                vals = np.ascontiguousarray(v.reshape(n, len(cols), v.shape[-1])
                                            .transpose(1, 0, 2))
            frac = vals[ih]
            frac -= vals[il]
            frac /= window_ms * 1e-3
        at = 0
        for off, wt in plans[i:j]:
            if len(off) == 1 and wt[0] == 1.0:  # τ = 0: one delay of weight 1 (1·x is x)
                yield frac[at].copy()  # a fresh array, as tensordot gives
            else:
                yield np.asarray(np.tensordot(wt, frac[at:at + len(off)], axes=1),
                                 dtype=np.float64)
            at += len(off)
        i = j


class LagMatrices:
    """The activity matrices of one set of readings (window, response τ and publish spread
    fixed) at the lags asked for, each computed once.  The lags asked for in one call are
    read in one :func:`iter_window_fractions` pass, the same bits as one
    :func:`window_fractions` each; a matrix is handed out as it is (callers do not write to
    it)."""

    def __init__(self, busy: ActivityFn, t_ns: I64, window_ms: float, tau_ms: float, *,
                 spread_ns: I64 | None = None) -> None:
        self._busy, self._t, self._w, self._tau = busy, t_ns, window_ms, tau_ms
        self._spread = spread_ns
        self._done: dict[tuple[float, tuple[float, float]], F64] = {}

    def at(self, lags_ms: Sequence[float], slow: tuple[float, float] = (0.0, 0.0)
           ) -> list[F64]:
        """The matrices at ``lags_ms`` (with the slow stage ``slow``), in that order."""
        todo = list(dict.fromkeys(d for d in lags_ms if (d, slow) not in self._done))
        if todo:
            got = iter_window_fractions(self._busy, self._t, self._w,
                                        [(d, self._tau) for d in todo], slow=slow,
                                        spread_ns=self._spread)
            for d, m in zip(todo, got, strict=True):
                self._done[d, slow] = m
        return [self._done[d, slow] for d in lags_ms]

    def release(self) -> None:
        """Forget the matrices held so far (each is (readings × groups): a long log with many
        classes makes them large); the ones a caller still holds stay alive with it."""
        self._done.clear()


def usable(t_ns: I64, window_ms: float, win_start_ns: int, win_end_ns: int,
           lag_ms_range: tuple[float, float] = LAG_GRID_MS) -> I32:
    """Indices of readings whose window stays inside the attribution window for all lags."""
    lo = t_ns - np.int64(round((lag_ms_range[1] + window_ms) * 1e6))
    hi = t_ns - np.int64(round(lag_ms_range[0] * 1e6))
    return np.flatnonzero((lo >= win_start_ns) & (hi <= win_end_ns)).astype(np.int32)


LagPlan = Generator[list[tuple[float, float]], list[float], tuple[float, float]]
"""A grid search as a plan: yields the (lag ms, τ ms) points of a stage, is sent their
residuals in the same order, and returns its answer."""


def coarse_rivals(scores: Sequence[float]) -> list[int]:
    """Indices of the coarse grid's points the fine search looks around: the best, and each
    other local minimum within ``RIVAL_RATIO`` of its residual (best first, at most
    ``MAX_RIVALS`` in all)."""
    r = np.asarray(scores, dtype=np.float64)
    best = int(np.argmin(r))
    n = len(r)
    local = [i for i in range(n) if i != best and r[i] <= RIVAL_RATIO * r[best]
             and (i == 0 or r[i] <= r[i - 1]) and (i == n - 1 or r[i] <= r[i + 1])
             and abs(i - best) > 1]  # a neighbour of the best lies in its fine grid already
    local.sort(key=lambda i: (r[i], i))
    return [best, *local[:MAX_RIVALS - 1]]


def _lag_stages(tau_ms: float) -> LagPlan:
    """Coarse lag grid, then a fine one around its best (and around any rival minimum,
    :func:`coarse_rivals`): returns (lag, residual)."""
    lo, hi = LAG_GRID_MS
    coarse = [(float(d), tau_ms) for d in np.arange(lo, hi + 1e-9, LAG_COARSE_MS)]
    scores = yield coarse
    fine_ms: list[float] = []
    for i in coarse_rivals(scores):
        c = coarse[i][0]
        fine_ms += [float(d) for d in np.arange(max(lo, c - LAG_COARSE_MS),
                                                min(hi, c + LAG_COARSE_MS) + 1e-9, LAG_FINE_MS)]
    fine = [(d, tau_ms) for d in sorted(set(fine_ms))]
    scores = yield fine
    i = int(np.argmin(scores))
    return fine[i][0], float(scores[i])


def lag_response_plan() -> LagPlan:
    """The (lag, τ) search of :func:`fit_lag_response` as a plan (the live engine's
    ``LagSearch`` evaluates it a few points per tick): the best τ = 0 lag, then for each τ of
    ``TAU_GRID_MS`` lags around ``lag₀ − τ`` (the response delays by τ on average); a τ wins
    only when strictly better, each grid's first minimum."""
    lag0, score0 = yield from _lag_stages(0.0)
    best = (score0, lag0, 0.0)
    grids = [np.arange(lag0 - tau - 1.0, lag0 - tau + 1.0 + 1e-9, LAG_FINE_MS)
             for tau in TAU_GRID_MS[1:]]
    scores = yield [(float(d), float(tau)) for tau, grid in zip(TAU_GRID_MS[1:], grids,
                                                                strict=True) for d in grid]
    k = 0
    for tau, grid in zip(TAU_GRID_MS[1:], grids, strict=True):
        part = scores[k:k + len(grid)]
        k += len(grid)
        i = int(np.argmin(part))
        if part[i] < best[0]:
            best = (float(part[i]), float(grid[i]), float(tau))
    return best[1], best[2]


def run_plan(plan: LagPlan, busy: ActivityFn, t_ns: I64, y: F64, window_ms: float, *,
             rss: Callable[[F64, F64], float], spread_ns: I64 | None = None
             ) -> tuple[float, float]:
    """Evaluate a plan stage by stage, each stage's activity matrices in one
    :func:`iter_window_fractions` call."""
    specs = next(plan)
    while True:
        scores = [rss(x, y) for x in iter_window_fractions(busy, t_ns, window_ms, specs,
                                                             spread_ns=spread_ns)]
        try:
            specs = plan.send(scores)
        except StopIteration as done:
            result: tuple[float, float] = done.value
            return result


def fit_lag(busy: ActivityFn, t_ns: I64, y: F64, window_ms: float,
            rss: Callable[[F64, F64], float], *, tau_ms: float = 0.0,
            spread_ns: I64 | None = None) -> float:
    """Lag (ms) minimising the regression residual: coarse grid, then a fine one."""
    return fit_lag_score(busy, t_ns, y, window_ms, rss, tau_ms=tau_ms, spread_ns=spread_ns)[0]


def fit_lag_score(busy: ActivityFn, t_ns: I64, y: F64, window_ms: float,
                  rss: Callable[[F64, F64], float], *, tau_ms: float = 0.0,
                  spread_ns: I64 | None = None) -> tuple[float, float]:
    """(lag, residual) at the best lag for a given response time constant."""
    if len(t_ns) < MIN_LAG_READINGS:
        return DEFAULT_LAG[0], float("inf")
    return run_plan(_lag_stages(tau_ms), busy, t_ns, y, window_ms, rss=rss,
                    spread_ns=spread_ns)


def fit_lag_response(busy: ActivityFn, t_ns: I64, y: F64, window_ms: float,
                     rss: Callable[[F64, F64], float], *, spread_ns: I64 | None = None
                     ) -> tuple[float, float]:
    """(lag, τ) jointly: the best lag for each τ in ``TAU_GRID_MS``, then the best τ."""
    if len(t_ns) < MIN_LAG_READINGS:
        return DEFAULT_LAG
    return run_plan(lag_response_plan(), busy, t_ns, y, window_ms, rss=rss,
                    spread_ns=spread_ns)


def fit_slow_response(busy: ActivityFn, t_ns: I64, y: F64, window_ms: float, *,
                      lag_ms: float, tau_ms: float, rss: Callable[[F64, F64], float],
                      spread_ns: I64 | None = None) -> tuple[float, tuple[float, float]]:
    """A slow second response stage (τ₂, w) and the lag refitted with it.

    Grid search of (τ₂, w) over ``SLOW_TAU_GRID_MS`` × ``SLOW_WEIGHTS`` at the given lag and
    τ, then the lag again (±``SLOW_LAG_SPAN_MS``, fine steps) with that stage, then the stage
    once more at the new lag.  Returns (lag, (0, 0)) when no stage lowers the residual.
    """
    return finish(slow_response_steps(busy, t_ns, y, window_ms, lag_ms=lag_ms, tau_ms=tau_ms,
                                      rss=rss, batched=True, spread_ns=spread_ns))


def slow_response_steps(busy: ActivityFn, t_ns: I64, y: F64, window_ms: float, *,
                        lag_ms: float, tau_ms: float, rss: Callable[[F64, F64], float],
                        batched: bool, spread_ns: I64 | None = None
                        ) -> Generator[float, None, tuple[float, tuple[float, float]]]:
    """:func:`fit_slow_response` as a generator (the live engine spreads it over ticks): after
    each activity matrix it yields that matrix's cost in delay-quantile matrices, and returns
    (lag, (τ₂, w)).  ``batched`` asks each stage's matrices of :func:`iter_window_fractions`
    in one go (the batch engine); otherwise one :func:`window_fractions` call per matrix, so a
    step costs one matrix.  Both give the same bits."""
    if len(t_ns) < 8:
        return lag_ms, (0.0, 0.0)

    def matrices(specs: list[tuple[float, float]], slow: tuple[float, float] = (0.0, 0.0)
                 ) -> Iterator[F64]:
        if batched:
            return iter_window_fractions(busy, t_ns, window_ms, specs, slow=slow,
                                         spread_ns=spread_ns)
        return (window_fractions(busy, t_ns, window_ms, d, tau, slow=slow, spread_ns=spread_ns)
                for d, tau in specs)

    def stage(lag: float) -> Generator[float, None, tuple[float, tuple[float, float]]]:
        # the mixture's activity is (1 − w)·x_fast + w·x_slow: one x_slow per τ₂
        xs = matrices([(lag, tau_ms)] + [(lag, t2) for t2 in SLOW_TAU_GRID_MS])
        x_fast = next(xs)
        yield TAU_POINTS if tau_ms > 0 else 1.0
        best = (rss(x_fast, y), (0.0, 0.0))
        for tau2, x_slow in zip(SLOW_TAU_GRID_MS, xs, strict=True):
            yield TAU_POINTS
            for w in SLOW_WEIGHTS:
                r = rss((1.0 - w) * x_fast + w * x_slow, y)
                if r < best[0]:
                    best = (r, (tau2, w))
        return best

    _, slow = yield from stage(lag_ms)
    if slow == (0.0, 0.0):
        return lag_ms, slow
    grid = np.arange(lag_ms - SLOW_LAG_SPAN_MS, lag_ms + SLOW_LAG_SPAN_MS + 1e-9, 2 * LAG_FINE_MS)
    scores = []
    for x in matrices([(float(d), tau_ms) for d in grid], slow):
        scores.append(rss(x, y))
        yield 2.0 * TAU_POINTS
    lag = float(grid[int(np.argmin(scores))])
    _, slow = yield from stage(lag)
    return lag, slow
