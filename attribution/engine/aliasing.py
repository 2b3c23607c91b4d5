"""Phase lock between a device's power readings and its workload (aliasing).

Owns :func:`spread_ratio` and the rule that calls readings phase-locked.  A sensor that
publishes every T and a workload whose step repeats every T (or a multiple or divisor of it)
can look at the same part of every step: each reading's window [t − D − W, t − D] then holds
the same slice of activity, the readings barely vary, and the regression extrapolates P_idle
from jitter.  On the simulator's phase-locked runs (100 ms step, 25 ms windows every 100 ms)
the fit then placed P_idle 4–37 % off, with an interval a few per cent wide that missed it.

The test compares the spread of the activity the readings saw with the spread the same
workload shows through windows of the same length placed at random times in the same span:
``tr Cov(x at the readings) / tr Cov(x at random windows)``.  Readings that sample the
workload fairly give a ratio near 1 (0.87–1.13 over the 144 runs of the simulator's suite,
seeds 7 and 3, phase-locked V100 included: its 20 ms period sees five phases of the step);
phase-locked ones 0.0004–0.06.  A workload whose activity does not vary at the window's scale
at all (a saturated GPU, or a step exactly one window long) has nothing to compare: the
ratio is then 1 and the rule says nothing here: ``idle_place`` tells windows busy
throughout by the constant's leverage instead (docs/attribution.md, "Phase lock").

Phase-locked readings cannot place P_idle or the classes' ΔP (nor the lag: every lag sees a
constant slice), and the fit's dynamic energy can be off by any factor (+525 % on one
simulated A100 run).  Both engines then hold P_idle at the board's value, flag every class,
and, where the energy counter covers the window, scale the dynamic energy so that the total
closes to the counter (:func:`counter_scale`): the counter integrates all of the time, so it
knows the total the slice-bound readings cannot.  The split among classes stays unknown, and
each class's interval says so (:func:`locked_interval`: from 0 to the device's whole dynamic
energy).
"""

from __future__ import annotations

import numpy as np

from attribution.engine.timebase import ActivityFn, window_fractions
from attribution.model import F64, I64

PHASE_LOCKED_RATIO = 0.25
"""Readings whose activity spread is below this fraction of random windows' are phase-locked
(the suite's two populations: ≤ 0.06 and ≥ 0.87)."""
MIN_SPREAD = 1e-4
"""Below this random-window spread (Σ over groups of the busy fractions' variance: an rms
busy-fraction change of 1 % of a window) the workload does not vary at the window's scale and
the test does not apply."""
MIN_READINGS = 8
"""Fewer readings than this: no test (the variance estimates would be too noisy; P_idle is
then held by ``idle_place.MIN_JUDGED``'s rule anyway).  32 until 2026-12-05: runs of 1.5-3 s
(8-31 readings on the 25 %-sampling boards) went untested, and a phase-locked one kept P_idle
at 1.8-5.7× the truth as "pinned".  Measured on every scenario × preset at 1-5 s, seeds 0-5:
the phase-locked runs' ratio 0.000-0.10 from 8 readings on; the others' smallest 0.34 at 8-11
readings (1st percentile 0.43), 0.45 at 12-31, 0.71 from 32; none under the 0.25 rule."""
RANDOM_WINDOWS = 512
"""Random windows drawn (at least; as many as readings when there are more)."""
SEED = 0
"""The random windows' seed: the test gives the same answer on the same data."""


def _spread(x: F64) -> float:
    """Σ over columns of each column's variance."""
    if len(x) < 2:
        return 0.0
    return float(np.sum(np.var(x, axis=0)))


def random_sums(x: F64) -> tuple[F64, F64, F64]:
    """Random windows' busy fractions ``x`` (windows × columns) as the test reads them: their
    count (one element), and the per-column sums of the fractions and of their squares (sums
    add up: the live engine keeps them per slab, so the horizon's reference is a running
    sum)."""
    return (np.array([float(len(x))]), np.asarray(x.sum(axis=0), np.float64),
            np.asarray((x * x).sum(axis=0), np.float64))


def spread_ratio(busy: ActivityFn, t_ns: I64, x: F64, window_ms: float, *, lag_ms: float,
                 tau_ms: float = 0.0, slow: tuple[float, float] = (0.0, 0.0),
                 spread_ns: I64 | None = None) -> float:
    """Activity spread of the readings ``x`` (their activity matrix at ``t_ns``) over that of
    random windows in the same span at the same lag and response (and, for poll-timestamped
    readings, averaged over the readings' median publish spread as theirs are):
    :func:`spread_ratio_sums` on windows drawn here (``RANDOM_WINDOWS``, ``SEED``)."""
    n = len(t_ns)
    if n < MIN_READINGS or x.ndim != 2 or x.shape[1] == 0:
        return 1.0
    lo, hi = int(t_ns.min()), int(t_ns.max())
    if hi <= lo:
        return 1.0
    rng = np.random.default_rng(SEED)
    t_rand = np.sort(rng.integers(lo, hi, size=max(n, RANDOM_WINDOWS), dtype=np.int64))
    sp = (None if spread_ns is None else
          np.full(len(t_rand), int(np.median(spread_ns)), np.int64))
    return spread_ratio_sums(x, *random_sums(window_fractions(
        busy, t_rand, window_ms, lag_ms, tau_ms, slow=slow, spread_ns=sp)))


def spread_ratio_sums(x: F64, n_rand: F64, sum_x: F64, sum_xx: F64) -> float:
    """The readings' spread ``x`` over the random windows' (same columns), the windows given
    as :func:`random_sums` gives them; 1.0 when the test does not apply (too few readings, or
    a workload that does not vary at the window's scale)."""
    n = float(n_rand[0]) if len(n_rand) else 0.0
    if len(x) < MIN_READINGS or x.ndim != 2 or x.shape[1] == 0 or n < 2:
        return 1.0
    mean = sum_x / n
    ref = float(np.sum(np.maximum(sum_xx / n - mean * mean, 0.0)))
    if ref < MIN_SPREAD:
        return 1.0
    return _spread(x) / ref


def phase_locked(ratio: float) -> bool:
    """The readings are phase-locked to the workload (see the module docstring)."""
    return ratio < PHASE_LOCKED_RATIO


def locked_warning(device: int, ratio: float, *, held: bool) -> str:
    """The snapshot's warning line for phase-locked readings on ``device``."""
    return (f"GPU {device}: the power readings are phase-locked to the workload (their sensor "
            f"windows see {100 * ratio:.2g}% of the activity spread of randomly placed "
            "windows): they cannot place the active idle power or split the classes; "
            + ("active idle held at the board's value" if held else
               "no board value to hold the active idle at"))


def locked_lag_warning(device: int, fitted_ms: float, used_ms: float) -> str:
    """The batch engine's line when phase-locked readings fitted a lag it does not use."""
    return (f"GPU {device}: phase-locked readings do not place the lag (they fitted "
            f"{fitted_ms:.3g} ms): the sensor model's {used_ms:.3g} ms is used")


def lag_kept_warning(device: int, ratio: float, lag_ms: float, fitted: bool,
                     span_s: float) -> str:
    """The live view's line when its last lag search read phase-locked readings (whose lag
    is any: every lag sees the same slice) and kept the lag it had."""
    return (f"GPU {device}: the lag search on the last {span_s:.0f} s read phase-locked "
            f"readings ({100 * ratio:.2g}% of the activity spread of randomly placed windows), "
            f"which do not place the lag: it stays at {lag_ms:.3g} ms ("
            + ("the last one fitted)" if fitted else "the sensor model's, never fitted)"))


def counter_scale(dynamic_j: float, measured_j: float | None, other_j: float) -> float | None:
    """The factor on every class's dynamic energy that makes the total close to the energy
    counter: ``(measured − other) / dynamic``, where ``other`` is the energy that is not
    dynamic (P_idle × the window, a boost tail).  None when there is no counter delta or
    either side is not positive (nothing to anchor, or a counter below the idle floor)."""
    if measured_j is None or dynamic_j <= 0.0:
        return None
    target = measured_j - other_j
    if target <= 0.0:
        return None
    return target / dynamic_j


def anchor_warning(device: int, scale: float, fitted_j: float) -> str:
    """The snapshot's line saying a phase-locked device's dynamic energy was anchored."""
    return (f"GPU {device}: dynamic energy scaled ×{scale:.3g} to close the energy counter "
            f"(the phase-locked fit gave {fitted_j:.0f} J)")


def locked_interval(lo_j: F64, hi_j: F64, dyn_j: F64) -> tuple[F64, F64]:
    """Class intervals under phase lock: from 0 to at least the device's whole dynamic
    energy (the readings do not split it among the classes)."""
    total = float(np.sum(dyn_j))
    return np.zeros_like(lo_j), np.maximum(hi_j, total)


def unanchored_warning(device: int, measured_j: float | None) -> str:
    """The snapshot's line when a phase-locked device's energy could not be anchored."""
    why = ("no energy counter covers the window" if measured_j is None else
           f"the energy counter's {measured_j:.0f} J leave no dynamic energy to anchor to")
    return (f"GPU {device}: the energies rest on the phase-locked fit, which sees one slice of "
            f"each step, and can be far off, the total too ({why})")
