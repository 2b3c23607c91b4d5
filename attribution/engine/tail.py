"""The boost tail of consumer boards: power that stays on after the GPU goes idle.

Owns the tail regressor (its window means, energy and fit: :func:`scan_tail`, both
engines; :func:`held_tail_params` for a held P_idle).  GeForce cards keep boost power for
0.5-3 s after work stops (DESIGN.md §3).  Modelled as a level L (W, fitted, ≥ 0) times
``exp(−age/τ_t)`` inside every idle gap of at least ``min_gap`` (age = time since the gap
began), cut off when the next item starts.  The sensor sees its window mean, which
:func:`tail_fractions` computes exactly from the cumulative integral.  The tail matters far
beyond its energy: it sits exactly in the low-activity readings that pin the active idle, so
without it ``P_idle`` is fitted high and every class's ΔP low.  Its energy belongs to no item
and, by CONTRACT.md, is not idle energy (``P_idle × time``) either: the engine reports it
apart (``meta.boost_tail_j``).  Where every idle gap is alike (a step locked to the sensor's
window) no tail can be told from ``P_idle`` (:attr:`TailScan.unplaced`): both engines then
stretch P_idle's interval to the board's value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterator, Sequence

import numpy as np

from attribution.engine.stepping import finish
from attribution.model import F64, I64

TAIL_TAU_GRID_S = (0.25, 0.5, 1.0, 2.0)
MIN_GAP_GRID_MS = (5.0, 10.0, 15.0, 20.0, 30.0, 50.0)
"""Idle gaps shorter than this keep no tail. Was (5, 20, 50): on simulated cards whose tail
starts in gaps over 11-13 ms the fit took 20 ms, the tail's energy went into P_idle and the
classes came out 15-50 % low (docs/accuracy.md, "Where it fails" 1)."""
LIVE_MIN_GAP_GRID_MS = (5.0, 20.0, 50.0)
"""The live engine's min_gap grid: its 20-60 s span does not tell 10 from 15 ms apart (with
the finer grid its split moved further from the truth on 2 of 4 consumer rows of
``benchmarks/live_vs_batch.py``: docs/attribution.md, "Live engine")."""
TAIL_MAX_R2 = 0.9
"""A tail column explained this well by the activity columns is not identifiable: when every
gap is short and regular (a square wave) the tail is the complement of the busy time."""


def idle_gaps(start_ns: I64, end_ns: I64, min_gap_ns: int) -> tuple[I64, I64]:
    """Gaps of at least ``min_gap_ns`` between the union of the items' busy intervals."""
    if len(start_ns) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    o = np.argsort(start_ns, kind="stable")
    s = start_ns[o]
    e = np.maximum.accumulate(end_ns[o])
    long_ = s[1:] - e[:-1] >= min_gap_ns
    return e[:-1][long_].astype(np.int64), s[1:][long_].astype(np.int64)


def _cumulative_s(gs: I64, ge: I64, tau_s: float, t_ns: I64) -> F64:
    """``∫_{-∞}^t Σ_g exp(−(u − gs_g)/τ) 1[gs_g ≤ u < ge_g] du`` in seconds (gaps sorted and
    disjoint, so every gap before the last one begun by t is complete)."""
    full = tau_s * -np.expm1(-(ge - gs).astype(np.float64) * 1e-9 / tau_s)
    cum = np.r_[0.0, np.cumsum(full)]
    j = np.searchsorted(gs, t_ns, side="right")
    i = np.clip(j - 1, 0, None)
    age_s = (np.minimum(t_ns, ge[i]) - gs[i]).astype(np.float64) * 1e-9
    last = tau_s * -np.expm1(-np.clip(age_s, 0.0, None) / tau_s)
    return np.asarray(np.where(j > 0, cum[i] + last, 0.0), dtype=np.float64)


def tail_fractions(gs: I64, ge: I64, t_ns: I64, *, window_ms: float, lag_ms: float,
                   tau_s: float) -> F64:
    """Window mean of the unit-level tail for each reading's window [t − D − W, t − D]."""
    if len(gs) == 0:
        return np.zeros(len(t_ns))
    hi = t_ns - np.int64(round(lag_ms * 1e6))
    lo = hi - np.int64(round(window_ms * 1e6))
    return (_cumulative_s(gs, ge, tau_s, hi) - _cumulative_s(gs, ge, tau_s, lo)) / (
        window_ms * 1e-3)


def tail_energy_s(gs: I64, ge: I64, tau_s: float, a_ns: int, b_ns: int) -> float:
    """∫ of the unit-level tail over [a, b] (multiply by the level in W for joules)."""
    if len(gs) == 0:
        return 0.0
    c = _cumulative_s(gs, ge, tau_s, np.array([a_ns, b_ns], np.int64))
    return float(c[1] - c[0])


def _r2(h: F64, x: F64) -> float:
    """Uncentred R² of ``h`` regressed on a constant and the columns of ``x``: a nearly
    constant ``h`` is as unidentifiable (it trades with ``P_idle``) as a collinear one."""
    ss = float(h @ h)
    if ss <= 1e-18:
        return 1.0
    a = np.column_stack([np.ones(len(h)), x])
    coef = np.linalg.lstsq(a, h, rcond=None)[0]
    r = h - a @ coef
    return 1.0 - float(r @ r) / ss


@dataclasses.dataclass(frozen=True)
class TailScan:
    """What the tail grid found: the best candidate and whether the readings could place any."""

    params: tuple[float, float] | None
    """(min_gap ms, τ_t s) of the candidate that lowers the residual most, or None."""
    unplaced: bool
    """Every candidate with gaps to model was skipped as collinear: the tail is then the
    complement of the busy time, or nearly constant, and trades with ``P_idle`` (every gap
    alike, as in a step locked to the sensor's window); False where no gap was found at all."""


def _candidates(start_ns: I64, end_ns: I64, t_ns: I64, *, window_ms: float, lag_ms: float,
                gaps_ms: Sequence[float] | None = None) -> Iterator[tuple[float, float, F64]]:
    """The tail grid ``gaps_ms`` (default ``MIN_GAP_GRID_MS``) × ``TAIL_TAU_GRID_S``: (min_gap
    ms, τ_t s, the readings' tail column) for every min_gap that leaves an idle gap to model."""
    for mg in MIN_GAP_GRID_MS if gaps_ms is None else gaps_ms:
        gs, ge = idle_gaps(start_ns, end_ns, round(mg * 1e6))
        if len(gs) == 0:
            continue
        for tau in TAIL_TAU_GRID_S:
            yield float(mg), float(tau), tail_fractions(gs, ge, t_ns, window_ms=window_ms,
                                                        lag_ms=lag_ms, tau_s=tau)


def scan_tail(x: F64, y: F64, start_ns: I64, end_ns: I64, t_ns: I64, *, window_ms: float,
              lag_ms: float, rss: Callable[[F64, F64], float]) -> TailScan:
    """The grid (:func:`_candidates`): candidates with R² > ``TAIL_MAX_R2`` against a
    constant and the activity columns are skipped, the rest scored by ``rss`` (which fits its
    own constant)."""
    return finish(scan_tail_steps(x, y, start_ns, end_ns, t_ns, window_ms=window_ms,
                                  lag_ms=lag_ms, rss=rss))


def scan_tail_steps(x: F64, y: F64, start_ns: I64, end_ns: I64, t_ns: I64, *,
                    window_ms: float, lag_ms: float, rss: Callable[[F64, F64], float],
                    gaps_ms: Sequence[float] | None = None) -> Generator[None, None, TailScan]:
    """:func:`scan_tail` as a generator that yields after each min_gap's candidates (the
    live engine spreads the scan over its polls) and returns the same :class:`TailScan`;
    ``gaps_ms``: the min_gap grid (default ``MIN_GAP_GRID_MS``; the live engine's span keeps
    ``LIVE_MIN_GAP_GRID_MS``)."""
    best_r = rss(x, y)
    best: tuple[float, float] | None = None
    tried = skipped = 0
    gap = None
    for mg, tau, h in _candidates(start_ns, end_ns, t_ns, window_ms=window_ms, lag_ms=lag_ms,
                                  gaps_ms=gaps_ms):
        if gap is not None and mg != gap:
            yield
        gap = mg
        tried += 1
        if _r2(h, x) > TAIL_MAX_R2:  # the tail would stand in for the classes
            skipped += 1
            continue
        r = rss(np.column_stack([x, h]), y)
        if r < best_r * (1.0 - 1e-3):
            best_r, best = r, (mg, tau)
    return TailScan(best, tried > 0 and skipped == tried)


def tail_model(params: tuple[float, float] | None, start_ns: I64, end_ns: I64
               ) -> tuple[I64, I64, float] | None:
    """(gap starts, gap ends, τ_t) of a candidate (:func:`scan_tail`), None for none."""
    if params is None:
        return None
    gs, ge = idle_gaps(start_ns, end_ns, round(params[0] * 1e6))
    return gs, ge, params[1]


def _rss_through_zero(a: F64, y: F64) -> float:
    """Residual sum of squares of least squares with no constant."""
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    r = y - a @ coef
    return float(r @ r)


def held_tail_params(x: F64, excess_w: F64, start_ns: I64, end_ns: I64, t_ns: I64, *,
                     window_ms: float, lag_ms: float) -> tuple[float, float] | None:
    """The tail candidate that best explains the readings' excess over a *held* P_idle
    (``excess_w`` = power − P_idle, fitted with no constant), or None.  With P_idle no longer
    free, a tail that trades only with the constant is identifiable: a candidate is skipped
    only where the activity columns alone explain it (uncentred R² over ``TAIL_MAX_R2``;
    with every column nearly constant, as in a step locked to the sensor's window, they all
    do).  For the interval of a fit whose tail was unplaced (:attr:`TailScan.unplaced`)."""
    best_r = _rss_through_zero(x, excess_w) if x.shape[1] else float(excess_w @ excess_w)
    best: tuple[float, float] | None = None
    for mg, tau, h in _candidates(start_ns, end_ns, t_ns, window_ms=window_ms, lag_ms=lag_ms):
        ss = float(h @ h)
        if ss <= 1e-18:
            continue
        if x.shape[1] and 1.0 - _rss_through_zero(x, h) / ss > TAIL_MAX_R2:
            continue
        r = _rss_through_zero(np.column_stack([x, h]), excess_w)
        if r < best_r * (1.0 - 1e-3):
            best_r, best = r, (mg, tau)
    return best


def tail_unplaced_warning(device: int, p_idle_w: float, board_w: float, *,
                          classes: bool = True) -> str:
    """The snapshot's line for a consumer board whose tail was unplaced
    (:attr:`TailScan.unplaced`); ``classes``: the class intervals span the held fit too (the
    batch engine; the live engine stretches P_idle's alone)."""
    return (f"GPU {device}: the boost tail cannot be told from the active idle here (every "
            "idle gap alike, so the tail follows the busy time); active idle "
            f"{p_idle_w:.0f} W may hold the tail's power: "
            + ("the intervals span the fit" if classes else "its interval spans the value")
            + f" with active idle at the board's {board_w:.0f} W")
