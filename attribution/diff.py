"""The verdict on two snapshots (``ppwtop.diff/1``): did the candidate use more energy?

Owns the comparison of a baseline and a candidate :class:`~attribution.snapshot.Snapshot`:
the metric (energy per step, else energy per second), the delta and its 90 % interval and the
verdict.  The comparability score is :mod:`attribution.comparability`'s and the decomposition
of the delta into mechanisms (``kernel:<name>``, ``copy:<kind>/<memory>``, ``idle.<cause>``,
``clamp.<reason>``) is :mod:`attribution.mechanisms`'s.

Method (docs/diff.md says it for users):

* ``energy_per_step_j`` when both snapshots have steps; with per-step series on both sides the
  interval is a percentile bootstrap of the difference of means (each side resampled
  independently).  Without series the standard error comes from the step quantiles
  (``(p95 - p50) / 1.645`` as the spread) or, failing that, a conservative relative one.
* ``energy_per_s`` otherwise (``totals.energy_j / window.duration_s``), its uncertainty from the
  kernel/copy classes' 90 % intervals added in quadrature, floored at a relative 1 %.
* different boards (``meta["gpu_uuids"]`` known on both sides and different): the interval
  also holds the two power sensors' gain ratio (``sqrt(2) x gain_sigma`` of the preset, 90 %),
  in quadrature.
* verdict: regression when the whole interval is above ``+noise_floor x baseline``, improvement
  when it is below ``-noise_floor x baseline``, neutral when it lies inside ``+-noise_floor``
  (or straddles zero and is no wider than the band), else inconclusive.  A comparability below
  0.5 makes it inconclusive whatever the interval says, and so do two snapshots without energy
  (no power readings on either side: 0 against 0 says nothing).

Pure: numpy only, no I/O, deterministic for a given ``seed``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.comparability import comparability_factors, kernel_overlap
from attribution.mechanisms import Mechanism, mechanism_energies, mechanisms
from attribution.owners import OwnerMap
from attribution.presets import PRESETS, get_preset
from attribution.snapshot import Snapshot

__all__ = [
    "DiffResult", "Mechanism", "comparability_factors", "diff", "kernel_overlap",
    "mechanism_energies", "mechanisms",
]

SCHEMA = "ppwtop.diff/1"
VERDICTS = ("regression", "improvement", "neutral", "inconclusive")
METRIC_STEP = "energy_per_step_j"
METRIC_SECOND = "energy_per_s"
MIN_COMPARABILITY = 0.5
Z90 = 1.6448536269514722  # two-sided 90 % normal quantile
REL_UNCERTAINTY = 0.01  # per-side relative 1-sigma floor when there is no series to resample
STEP_REL_UNCERTAINTY = 0.03  # per-side relative 1-sigma when steps carry no spread at all
FIT_RMS_RATIO, FIT_RMS_MIN_W = 3.0, 5.0  # a fit residual this much worse is called out
DEFAULT_GAIN_SIGMA = 0.02  # board gain spread for a GPU model without a preset
_BOOT_CELLS = 4_000_000  # resampled values held in memory at once

FloatArray = npt.NDArray[np.float64]


@dataclasses.dataclass(frozen=True, slots=True)
class DiffResult:
    verdict: str
    metric: str
    baseline: float
    candidate: float
    delta: float
    delta_ci: tuple[float, float]
    comparability: float
    mechanisms: tuple[Mechanism, ...]
    relative_delta: float | None  # delta / baseline (None when the baseline is 0)
    relative_delta_ci: tuple[float, float] | None
    noise_floor: float
    interval_method: str  # "bootstrap" | "step_quantiles" | "step_relative" | "class_intervals"
    comparability_factors: Mapping[str, float]
    reasons: tuple[str, ...]

    @property
    def delta_is_clear(self) -> bool:
        """The delta's 90 % interval excludes 0.  Where it does not, the mechanisms' shares
        of the delta divide by a number the noise may have made: a 1.2 J move read +1 353 %
        of a −0.09 J delta (an audit, the same real run through two sensor fields).  The
        views then show no share; the JSON keeps it."""
        return not (self.delta_ci[0] <= 0.0 <= self.delta_ci[1])

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "verdict": self.verdict,
            "metric": self.metric,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "delta": self.delta,
            "delta_ci": [self.delta_ci[0], self.delta_ci[1]],
            "comparability": self.comparability,
            "mechanisms": [m.to_dict() for m in self.mechanisms],
            "relative_delta": self.relative_delta,
            "relative_delta_ci": (
                None if self.relative_delta_ci is None else list(self.relative_delta_ci)
            ),
            "noise_floor": self.noise_floor,
            "interval_method": self.interval_method,
            "comparability_factors": dict(self.comparability_factors),
            "reasons": list(self.reasons),
        }


def diff(
    baseline: Snapshot,
    candidate: Snapshot,
    *,
    noise_floor: float = 0.02,
    n_boot: int = 2000,
    seed: int = 0,
    owners: OwnerMap | None = None,
) -> DiffResult:
    """Compare ``candidate`` against ``baseline`` (delta = candidate - baseline)."""
    if not noise_floor >= 0:
        raise ValueError(f"noise_floor must be >= 0, got {noise_floor}")
    if n_boot < 100:
        raise ValueError(f"n_boot must be >= 100, got {n_boot}")
    reasons: list[str] = []
    per_step = _has_steps(baseline) and _has_steps(candidate)
    if per_step:
        metric = METRIC_STEP
        # step energies near 1e308 J overflow the means to inf: the interval is then nan and
        # the verdict inconclusive, without numpy's warnings on stderr
        with np.errstate(over="ignore", invalid="ignore"):
            base_v, cand_v, ci, method = _per_step(baseline, candidate, n_boot, seed, reasons)
    else:
        metric = METRIC_SECOND
        missing = [n for n, s in (("baseline", baseline), ("candidate", candidate))
                   if not _has_steps(s)]
        reasons.append(f"no steps in the {' and '.join(missing)}: metric is energy per second")
        base_v, cand_v, ci, method = _per_second(baseline, candidate, reasons)
    delta = cand_v - base_v
    ci = _widen_for_boards(baseline, candidate, base_v, cand_v, ci, reasons=reasons)

    factors, comp_reasons = comparability_factors(baseline, candidate)
    comparability = float(np.prod(list(factors.values()))) if factors else 1.0
    comparability = min(1.0, max(0.0, comparability))
    reasons.extend(comp_reasons)

    if baseline == candidate:
        # one run given twice (the same file, or copies): no change by construction, and no
        # second run's noise to weigh (the bootstrap's band could call it "inconclusive: a
        # longer run would decide")
        reasons.insert(0, "baseline and candidate are the same snapshot: neutral by "
                          "construction; compare two runs to measure a change")
        verdict = "neutral"
    elif base_v == 0.0 and cand_v == 0.0:  # no power on either side: energies are all 0
        reasons.append("no energy on either side (no power readings): nothing to compare, "
                       "verdict is inconclusive")
        verdict = "inconclusive"
    else:
        verdict = _verdict(base_v, ci, noise_floor, comparability, reasons)
    rel: float | None = None
    rel_ci: tuple[float, float] | None = None
    if base_v != 0:
        rel = delta / abs(base_v)
        rel_ci = (ci[0] / abs(base_v), ci[1] / abs(base_v))
    mechs = mechanisms(baseline, candidate, per_step=per_step, owners=owners)
    reasons.extend(_fit_warnings(baseline, candidate))
    return DiffResult(
        verdict=verdict, metric=metric, baseline=base_v, candidate=cand_v, delta=delta,
        delta_ci=ci, comparability=comparability, mechanisms=mechs, relative_delta=rel,
        relative_delta_ci=rel_ci, noise_floor=noise_floor, interval_method=method,
        comparability_factors=factors, reasons=tuple(reasons),
    )


# ---------------------------------------------------------------- metric and interval


def _has_steps(s: Snapshot) -> bool:
    st = s.steps
    if st is None:
        return False
    if len(st.step_energy_j) > 0:
        return True
    mean = st.energy_j.mean
    return st.count > 0 and isinstance(mean, int | float) and math.isfinite(mean)


def _series(s: Snapshot) -> FloatArray:
    assert s.steps is not None
    a = np.asarray(s.steps.step_energy_j, dtype=np.float64)
    return a[np.isfinite(a)]


def _per_step(
    a: Snapshot, b: Snapshot, n_boot: int, seed: int, reasons: list[str]
) -> tuple[float, float, tuple[float, float], str]:
    xa, xb = _series(a), _series(b)
    if xa.size >= 2 and xb.size >= 2:
        ma, mb = float(xa.mean()), float(xb.mean())
        lo, hi = bootstrap_mean_diff_ci(xa, xb, n_boot=n_boot, seed=seed)
        reasons.append(
            f"90% interval: bootstrap of the mean step energy ({xa.size} vs {xb.size} steps, "
            f"{n_boot} resamples)"
        )
        return ma, mb, (lo, hi), "bootstrap"
    # summary-only steps: spread from the quantiles, standard error sigma / sqrt(n)
    sides: list[tuple[float, float]] = []
    method = "step_quantiles"
    for s, x in ((a, xa), (b, xb)):
        assert s.steps is not None
        q = s.steps.energy_j
        if x.size >= 2:  # this side has a series: its own standard error
            mean = float(x.mean())
            se = float(x.std(ddof=1)) / math.sqrt(x.size)
        else:
            mean = float(x[0]) if x.size == 1 else float(q.mean)
            spread = q.p95 - q.p50
            if math.isfinite(spread) and spread > 0:
                se = spread / Z90 / math.sqrt(max(1, s.steps.count))
            else:
                se = STEP_REL_UNCERTAINTY * abs(mean)
                method = "step_relative"
        sides.append((mean, se))
    (ma, sa), (mb, sb) = sides
    half = Z90 * math.hypot(sa, sb)
    d = mb - ma
    if method == "step_quantiles":
        reasons.append("no per-step series: 90% interval from the step quantiles "
                       "(spread (p95-p50)/1.645, standard error spread/sqrt(steps))")
    else:
        reasons.append(f"no per-step series or spread: 90% interval from a conservative "
                       f"{STEP_REL_UNCERTAINTY:.0%} relative uncertainty per side")
    return ma, mb, (d - half, d + half), method


def bootstrap_mean_diff_ci(
    xa: FloatArray, xb: FloatArray, *, n_boot: int = 2000, seed: int = 0, level: float = 0.90
) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(xb) - mean(xa), each side resampled alone
    (spread widened by sqrt(n/(n-1)) per side, the usual small-sample correction)."""
    rng = np.random.default_rng(seed)
    diffs = _boot_means(xb, n_boot, rng) - _boot_means(xa, n_boot, rng)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(diffs, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _boot_means(x: FloatArray, n_boot: int, rng: np.random.Generator) -> FloatArray:
    n = int(x.size)
    out = np.empty(n_boot, dtype=np.float64)
    chunk = max(1, _BOOT_CELLS // max(n, 1))
    for start in range(0, n_boot, chunk):  # chunks only bound memory; each is vectorised
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = x[idx].mean(axis=1)
    if n > 1:  # the plain bootstrap's variance of the mean is (n-1)/n of s^2/n: undo that
        m = float(x.mean())
        out = m + (out - m) * math.sqrt(n / (n - 1))
    return out


def _per_second(
    a: Snapshot, b: Snapshot, reasons: list[str]
) -> tuple[float, float, tuple[float, float], str]:
    sides: list[tuple[float, float]] = []
    for s in (a, b):
        dur = s.window.duration_s
        if not dur > 0:
            raise ValueError("snapshot window has no duration: cannot compute energy per second")
        rate = s.totals.energy_j / dur
        cis = [k.dynamic_energy_ci_j for k in s.kernels] + [c.dynamic_energy_ci_j for c in s.copies]
        half_j = math.sqrt(sum(((hi - lo) / 2) ** 2 for lo, hi in cis))
        sigma = max(half_j / Z90 / dur, REL_UNCERTAINTY * abs(rate))
        sides.append((rate, sigma))
    (ra, sa), (rb, sb) = sides
    half = Z90 * math.hypot(sa, sb)
    d = rb - ra
    reasons.append("90% interval from the kernel/copy classes' intervals in quadrature, "
                   f"floored at {REL_UNCERTAINTY:.0%} relative per side (no per-step series)")
    return ra, rb, (d - half, d + half), "class_intervals"


def _fit_warnings(a: Snapshot, b: Snapshot) -> list[str]:
    """A side whose power fit is much worse than the other's: its kernel/copy split is not
    to be trusted (the engine's one-ΔP-per-class model breaks under a clock clamp)."""
    out: list[str] = []
    ra, rb = _max_meta(a.meta, "fit_rms_w"), _max_meta(b.meta, "fit_rms_w")
    if ra is None or rb is None:
        return out
    for name, x, y in (("candidate", rb, ra), ("baseline", ra, rb)):
        if x > FIT_RMS_RATIO * y and x > FIT_RMS_MIN_W:
            out.append(f"the {name}'s power fit is poor (residual {x:.1f} W vs {y:.1f} W): its "
                       "kernel/copy split is unreliable (a clock clamp?); trust idle.* and "
                       "clamp.* rows and the total")
    return out


def _max_meta(meta: Mapping[str, Any], key: str) -> float | None:
    raw = meta.get(key)
    if not isinstance(raw, Mapping):
        return None
    vals = [float(v) for v in raw.values()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    return max(vals) if vals else None


def board_gain_sigma(a: Snapshot, b: Snapshot) -> float | None:
    """Relative 1-sigma of the two runs' power-sensor gain ratio when they ran on different
    boards (``meta["gpu_uuids"]`` known on both sides and not the same set); 0.0 on the same
    boards; None when either side does not say which boards it ran on."""
    ua, ub = _uuids(a), _uuids(b)
    if ua is None or ub is None:
        return None
    if ua == ub:
        return 0.0
    sig = [get_preset(g.model).gain_sigma if g.model in PRESETS else DEFAULT_GAIN_SIGMA
           for g in (*a.gpus, *b.gpus)]
    return math.sqrt(2.0) * max(sig or [DEFAULT_GAIN_SIGMA])


def _uuids(s: Snapshot) -> frozenset[str] | None:
    raw = s.meta.get("gpu_uuids")
    if not isinstance(raw, Mapping) or not raw:
        return None
    vals = [str(v) for v in raw.values() if isinstance(v, str) and v]
    return frozenset(vals) if len(vals) == len(raw) else None


def _widen_for_boards(
    a: Snapshot, b: Snapshot, base: float, cand: float, ci: tuple[float, float], *,
    reasons: list[str],
) -> tuple[float, float]:
    """Each board reads power with its own gain (±5 %, not correctable): comparing two boards
    adds their gain ratio's spread to the interval, in quadrature with the sampling part."""
    sig = board_gain_sigma(a, b)
    if sig is None:
        reasons.append("the snapshots do not say which boards they ran on: assuming the same "
                       "board (a different board adds its power-sensor gain, up to ±5 %)")
        return ci
    if sig == 0.0:
        return ci
    d = cand - base
    g = Z90 * sig * abs(base)
    lo = d - math.hypot(d - ci[0], g)
    hi = d + math.hypot(ci[1] - d, g)
    reasons.append(f"different boards: the interval includes their power-sensor gain ratio "
                   f"(±{Z90 * sig:.1%} at 90%)")
    return lo, hi


def _verdict(
    base: float, ci: tuple[float, float], noise_floor: float, comparability: float,
    reasons: list[str],
) -> str:
    lo, hi = ci
    band = noise_floor * abs(base)
    if comparability < MIN_COMPARABILITY:
        reasons.append(f"comparability {comparability:.2f} < {MIN_COMPARABILITY}: the runs are "
                       "too different to judge, verdict is inconclusive")
        return "inconclusive"
    if lo > band:
        return "regression"
    if hi < -band:
        return "improvement"
    if -band <= lo and hi <= band:
        return "neutral"
    if lo <= 0.0 <= hi and hi - lo <= 2.0 * band:
        return "neutral"
    reasons.append(f"the 90% interval [{lo:.4g}, {hi:.4g}] crosses the +-{noise_floor:.0%} "
                   f"noise band (+-{band:.4g}): more steps or a longer run would decide")
    return "inconclusive"
