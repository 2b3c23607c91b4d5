"""The live engine's per-tick fit of one device: units → regressor groups, the Gram fit with
the batch fit's priors, the held-idle rule, and the rolling bootstrap pool behind the interval.

Owns :func:`fit_device` and :class:`BootPool`.  The horizon's reading rows carry one column
per *unit* (a class, or a kernel class's clamped instances: ``live_clamp``); units are ranked
into at most 33 groups as the batch engine ranks them, each group's prior kind is
``2 × source + clamped`` (and the boost tail its own), and every class's energy and interval
is the sum over its units (``Σ_g ΔP_g × time[g, c]``, the batch engine's ``g_c_time``).
The numerics (Gram NNLS, block bootstrap on sufficient statistics) are ``live_fit``'s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attribution.engine import regress
from attribution.engine.boot_blocks import small_sample_scale
from attribution.engine.build import (
    GAIN_SIGMA,
    HELD_IDLE_READINGS,
    TAIL_KIND,
    board_floor_w,
    p_idle_interval,
)
from attribution.engine.idle_place import (
    NOT_JUDGED,
    IdleJudgement,
    idle_leverage_gram,
    judge_idle,
    sanity_band_w,
    unheld_ends_w,
)
from attribution.engine.live_clamp import UnitMap, class_time_by_group, ranked_groups, unit_kinds
from attribution.engine.live_fit import (
    block_stats,
    bootstrap_blocks,
    design_blocks,
    group_columns,
    nnls_grams,
    solve_gram,
    with_prior,
)
from attribution.model import F64, I32
from attribution.presets import GpuPreset
from attribution.quantiles import column_percentiles, percentiles


@dataclasses.dataclass(frozen=True, slots=True)
class ClassCi:
    """The interval state per class: dynamic-energy bounds from the replicate pool (already
    stretched to the lag and prior-centre refits) and P_idle's."""

    lo_j: F64
    hi_j: F64
    p_idle_w: tuple[float, float]
    computed: np.ndarray  # classes with enough replicates in the pool


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceFit:
    """One device's fit over the horizon, per unit, group and class."""

    group: I32  # unit → group
    n_groups: int
    gram_g: F64  # Gram matrix of [1, group activity (, tail)] over the readings at the lag
    p_idle_w: float
    unit_dp_w: F64  # ΔP of each unit's group
    class_dyn_j: F64
    g_c_time_s: F64  # (groups, classes)
    class_group: I32  # each class's main group
    rms_w: float
    ci: ClassCi | None
    held_idle_w: tuple[float, float] | None
    tail_level_w: float = 0.0
    idle: IdleJudgement = NOT_JUDGED
    """What the readings said about P_idle (``idle_place.judge_idle``): held, busy
    throughout, kept off the board's value."""
    tail_unplaced: bool = False
    """P_idle's interval reaches down to the board's value: no boost tail could be told from
    the constant and the fit sits above the board's value (as the batch engine)."""
    idle_by_run: bool = False
    """P_idle was held at the value an earlier horizon of this run placed (``run_idle_w``)."""


RUN_IDLE_CI = 0.10
"""A horizon whose P_idle interval lies within ±this of its value (and that the readings
placed: not held, not busy throughout, not phase-locked) is remembered as the run's own
active idle, for later horizons busy throughout.  On a job whose 20 s of mixed work turn
saturated (simulator, H200 under an A100 board table) the mixed horizons read ±5 %, the
transition ones 67-69 W against 74.5 W within intervals 11-88 W wide (not remembered)."""


def placed_idle_w(f: DeviceFit, *, blind: bool, phase_locked: bool) -> float | None:
    """The fit's P_idle where its own readings placed it, and within ``RUN_IDLE_CI``: not
    held, not busy throughout, no unplaced boost tail, not blind to the work, not
    phase-locked; None otherwise."""
    if (f.ci is None or f.held_idle_w is not None or f.idle.few is not None or f.idle.unplaced
            or f.tail_unplaced or blind or phase_locked):
        return None
    lo, hi = f.ci.p_idle_w
    ok = (1.0 - RUN_IDLE_CI) * f.p_idle_w <= lo and hi <= (1.0 + RUN_IDLE_CI) * f.p_idle_w
    return f.p_idle_w if ok else None


CI_Q = np.array([5.0, 95.0]) / 100.0
"""The interval's quantiles over the bootstrap pool (90 %)."""


class BootPool:
    """The last ``n_boot`` bootstrap replicates of one device: P_idle and ΔP per unit (units
    newer than a replicate are NaN in it), in a ring of rows (the oldest overwritten; the
    interval reads percentiles over the rows, which do not depend on their order)."""

    def __init__(self) -> None:
        self._p: F64 = np.empty(0)
        self._d: F64 = np.empty((0, 0))
        self._n = 0  # rows filled
        self._next = 0  # the row the next replicate goes to

    def __len__(self) -> int:
        return self._n

    def add(self, p_idle_w: F64, unit_dp_w: F64, n_boot: int) -> None:
        units = unit_dp_w.shape[1]
        if len(self._p) != n_boot or self._d.shape[1] < units:  # (re)size, newest rows kept
            keep = np.roll(np.arange(len(self._p)), -self._next)[len(self._p) - self._n:]
            keep = keep[max(0, len(keep) - n_boot):]
            p = np.full(n_boot, np.nan)
            d = np.full((n_boot, max(units, self._d.shape[1])), np.nan)
            p[:len(keep)] = self._p[keep]
            d[:len(keep), :self._d.shape[1]] = self._d[keep]
            self._p, self._d, self._n = p, d, len(keep)
            self._next = self._n % n_boot if n_boot else 0
        for j in range(max(0, len(p_idle_w) - n_boot), len(p_idle_w)):  # the newest n_boot
            self._p[self._next] = p_idle_w[j]
            self._d[self._next, :units] = unit_dp_w[j]
            self._d[self._next, units:] = np.nan
            self._next = (self._next + 1) % n_boot
            self._n = min(self._n + 1, n_boot)

    def class_energy(self, time_s: F64, um: UnitMap) -> F64:
        """(replicates, classes) dynamic energy; NaN where a replicate lacks a unit that ran."""
        n = len(time_s)
        pool = self._d[:self._n, :n] if self._d.shape[1] >= n else np.pad(
            self._d[:self._n], ((0, 0), (0, n - self._d.shape[1])), constant_values=np.nan)
        fin = np.isfinite(pool)
        e = um.to_classes(np.where(fin, pool, 0.0) * time_s)
        missing = um.to_classes((~fin & (time_s > 0)).astype(np.float64)) > 0
        e[missing] = np.nan
        return e

    def p_idle_ci(self, p_idle_w: float, ends_w: list[float], gain_sigma: float,
                  t_scale: float = 1.0) -> tuple[float, float]:
        """P_idle's interval as the batch engine builds it (:func:`build.p_idle_interval`)
        from the pool's 5–95 % (their distances from ``p_idle_w`` × ``t_scale``,
        ``boot_blocks.small_sample_scale``) and the P_idle of the tick's end fits."""
        lo, hi = percentiles(self._p[:self._n], CI_Q)  # np.percentile's, without its overhead
        lo = max(p_idle_w - t_scale * (p_idle_w - float(lo)), 0.0)
        hi = p_idle_w + t_scale * (float(hi) - p_idle_w)
        return p_idle_interval(p_idle_w, (lo, hi), ends_w, gain_sigma)


def _per_unit(dp: F64, group: I32, absent: float = 0.0) -> F64:
    """ΔP of each unit's group along the last axis (``absent`` for a unit that did not run)."""
    out = np.take(dp, np.maximum(group, 0), axis=-1) if dp.shape[-1] else np.zeros(
        (*dp.shape[:-1], len(group)))
    out = np.where(group >= 0, out, absent)
    return np.asarray(out, np.float64)


def _percentiles(e: F64) -> tuple[F64, F64, np.ndarray]:
    """Per class, the 5 and 95 % of the replicates that have it, and how many do."""
    (lo, hi), seen = column_percentiles(e, CI_Q)
    return lo, hi, seen


def fit_device(*, time_s: F64, xs: list[F64], y: F64, um: UnitMap, preset: GpuPreset | None,
               block: int, pool: BootPool, n_boot: int, boot_per_tick: int, seed: int,
               tail: list[F64] | None = None, phase_locked: bool = False,
               has_power: bool = True, tail_unplaced: bool = False,
               prior_scale: float = 1.0, run_idle_w: float | None = None) -> DeviceFit:
    """Fit ``power ≈ P_idle + Σ_g ΔP_g x_g (+ L·tail)`` on the horizon's rows.

    ``xs`` = per-unit activity at the lag and at the interval's two lag ends (∓
    ``LAG_SLACK_MS``, or the residual's reach); ``tail`` (consumer boards) the tail column at
    the same three lags.  Draws ``boot_per_tick`` replicates into ``pool`` and reads the class
    intervals off it, stretched to the fits at the other lags, at the ΔP prior centre ×
    ``regress.prior_span`` (its measured spread) and without the prior
    (``regress.DATA_ALONE_SCALE``), as the batch engine does, and with a tail to the fit
    without it.  ``phase_locked``: the readings
    cannot place P_idle (``aliasing``): held at the board's value, as a degenerate fit's.
    ``has_power``: the device has a power field (without one, energies are 0: times only;
    with one but no reading in the horizon, idle runs at the board's value).
    ``tail_unplaced`` (``live_boost.Boost.tail_unplaced``): P_idle may hold the boost tail's
    power, so its interval reaches the board's value where the fit lies above it (the batch
    engine also spans the classes over a fit held there; the live one does not).
    ``prior_scale``: the ΔP prior's weight for the horizon's span
    (``regress.prior_scale_for``, as the batch engine's for its run).  ``run_idle_w``: the
    P_idle an earlier horizon of this run placed (``RUN_IDLE_CI``); a horizon whose windows
    are busy throughout holds P_idle there instead of at the board's value, and on a board
    with no value too (the batch engine, without a run before its window, holds at the
    board's, and on a board with none leaves it anywhere from 0 W to the lowest reading)."""
    order, group, n_groups = ranked_groups(time_s, um)
    g_c, class_group = class_time_by_group(time_s, um, group, n_groups)
    prior = preset.active_idle_w if preset is not None else None
    n_cls, n_rd = len(um.labels), len(y)
    width = 1 + n_groups + (0 if tail is None else tail[0].shape[1])

    def design(i: int, out: F64) -> F64:  # [1, group activity, tail] at lag i, in out's rows
        out[:n_rd, 0] = 1.0
        group_columns(xs[i], group, n_groups, out[:n_rd, 1:n_groups + 1])
        if tail is not None:
            out[:n_rd, n_groups + 1:] = tail[i]
        return out

    # the lag's design in whole bootstrap blocks: its block statistics sum to its Gram matrix
    a, nb = design_blocks(n_rd, width, block)
    yy = np.zeros(len(a))
    yy[:n_rd] = y
    gb, vb = block_stats(design(0, a), yy, nb)
    m = gb.sum(axis=0).reshape(width, width)
    v = vb.sum(axis=0) if nb else np.zeros(width)
    if not (n_rd >= 1 and n_groups):
        # no reading in the horizon: idle at the board's value, as the batch engine with none
        p_idle = (float(np.mean(y)) if n_rd else
                  prior if prior is not None and has_power else 0.0)
        rms = float(np.std(y)) if n_rd else 0.0
        return DeviceFit(group, n_groups, m, p_idle, np.zeros(um.n_units), np.zeros(n_cls), g_c,
                         class_group, rms, None, None)
    # the batch fit's priors: ΔP toward its kind's pooled ΔP, P_idle toward the board's
    kinds = unit_kinds(um, order, group, n_groups)
    if tail is not None:
        kinds = np.r_[kinds, TAIL_KIND]
    centre = regress.pooled_by_kind_gram(m, v, kinds)
    idle_w = regress.IDLE_PRIOR_READINGS
    held: tuple[float, float] | None = None
    def sse_of(s: F64) -> float:  # the readings' residual sum of squares at a solution
        return float(y @ y) - 2.0 * float(s @ v) + float(s @ m @ s)

    ps = prior_scale
    sol = solve_gram(m, v, prior, pooled=centre, prior_scale=ps)
    judged = judge_idle(float(sol[0]), prior, rss_w2=sse_of(sol), n=n_rd, n_params=width,
                        block=block, leverage=idle_leverage_gram(m), phase_locked=phase_locked)
    # busy throughout with an earlier placement: held there, on a board with no table value
    # too (there the fit's value is anything from 0 W to the lowest reading)
    by_run = judged.unplaced and run_idle_w is not None and (judged.hold or prior is None)
    if by_run and not judged.hold:
        judged = dataclasses.replace(judged, hold=True)
    if judged.hold:
        # as the batch engine: the readings cannot place P_idle; hold it at the board's value
        # (busy throughout: at this run's own, where an earlier horizon placed it) and flag
        # every class
        fitted = float(sol[0])
        if by_run:
            prior = run_idle_w  # the held value, its band and its bootstrap's, from here on
        idle_w = HELD_IDLE_READINGS * len(y)
        sol = solve_gram(m, v, prior, pooled=centre, idle_weight=idle_w, prior_scale=ps)
        held = (fitted, float(sol[0]))
    p_idle, dp = float(sol[0]), sol[1:n_groups + 1]
    rms = float(np.sqrt(max(sse_of(sol), 0.0) / len(y)))
    # bootstrap replicates into the pool (ΔP per unit, mapped through this tick's groups)
    pb, dpb = bootstrap_blocks(gb, vb, prior, n_boot=boot_per_tick, seed=seed, pooled=centre,
                               idle_weight=idle_w, prior_scale=ps)
    # a unit that did not run in this horizon has no ΔP here: NaN, so a later horizon in which
    # it runs reads its interval from the replicates that saw it (as for units newer than these)
    pool.add(pb, _per_unit(dpb, group, np.nan), n_boot)
    e_boot = pool.class_energy(time_s, um)
    lo, hi, seen = _percentiles(e_boot)
    # the pool's spread scaled by Student's t for the horizon's independent seconds, as the
    # batch engine's (boot_blocks; the live horizon resamples whole 1 s blocks)
    t_scale = small_sample_scale(n_rd, block)
    est_j = np.asarray(dp @ g_c, np.float64)
    lo = np.maximum(est_j - t_scale * (est_j - lo), 0.0)
    hi = est_j + t_scale * (hi - est_j)
    # the fits at the other lags and prior centres: one stacked solve
    ends_sys = []
    for i in (1, 2):
        d = design(i, a[:n_rd])  # a's block statistics are taken
        ends_sys.append(with_prior(d.T @ d, d.T @ y, prior, pooled=centre, idle_weight=idle_w,
                                   prior_scale=ps))
    span = regress.prior_span(sol[1:], centre, kinds, m[0, 1:])
    ends_sys += [with_prior(m, v, prior, pooled=centre * k, idle_weight=idle_w,
                            prior_scale=ps) for k in span]
    # the readings alone, as the batch engine (regress.DATA_ALONE_SCALE)
    ends_sys.append(with_prior(m, v, prior, pooled=centre, idle_weight=idle_w,
                               prior_scale=regress.DATA_ALONE_SCALE))
    if prior is not None and judged.hold and not phase_locked:
        # held because the readings do not place P_idle: anywhere the sanity band allows
        ends_sys += [with_prior(m, v, band_w, pooled=centre, idle_weight=idle_w,
                                prior_scale=ps) for band_w in sanity_band_w(prior)]
    if prior is None:  # as the batch engine: no board value to hold P_idle at
        ends_sys += [with_prior(m, v, p_w, pooled=centre, idle_weight=HELD_IDLE_READINGS * n_rd,
                                prior_scale=ps)
                     for p_w in unheld_ends_w(judged, prior, y, phase_locked=phase_locked)]
    ends = list(nnls_grams(np.array([s[0] for s in ends_sys]),
                           np.array([s[1] for s in ends_sys])))
    if tail is not None:  # the boost model is itself uncertain: the fit without the tail
        k = n_groups + 1  # (the batch engine also drops the slow stage: docs/attribution.md)
        ends.append(solve_gram(m[:k, :k], v[:k], prior, pooled=centre[:n_groups],
                               idle_weight=idle_w, prior_scale=ps))
    e_ends = np.array([e[1:n_groups + 1] @ g_c for e in ends])
    lo = np.fmin(lo, e_ends.min(axis=0))
    hi = np.fmax(hi, e_ends.max(axis=0))
    gain_sigma = preset.gain_sigma if preset is not None else GAIN_SIGMA
    end_p = [float(e[0]) for e in ends] + ([held[0]] if held is not None else [])
    end_p += unheld_ends_w(judged, prior, y, phase_locked=phase_locked)  # as the batch engine
    floor_w = (board_floor_w(prior, gain_sigma)  # as the batch engine
               if tail_unplaced and prior is not None and held is None and p_idle > prior
               else None)
    if floor_w is not None:
        end_p.append(floor_w)
    ci = ClassCi(lo, hi, pool.p_idle_ci(p_idle, end_p, gain_sigma, t_scale),
                 seen >= min(n_boot, 20))
    tail_w = float(sol[n_groups + 1]) if tail is not None else 0.0
    return DeviceFit(group, n_groups, m, p_idle, _per_unit(dp, group),
                     np.asarray(dp @ g_c, np.float64), g_c, class_group, rms, ci, held, tail_w,
                     judged, floor_w is not None, by_run)
