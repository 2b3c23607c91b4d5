"""The verdict on two snapshots (``ppwtop.diff/1``): did the candidate use more energy?

Owns the comparison of a baseline and a candidate :class:`~attribution.snapshot.Snapshot`:
the metric (energy per step, else energy per second), the delta and its 90 % interval, the
comparability score, the verdict, and the decomposition of the delta into mechanisms
(``kernel:<name>``, ``copy:<kind>/<memory>``, ``idle.<cause>``, ``clamp.<reason>``).

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
  0.5 makes it inconclusive whatever the interval says.

Pure: numpy only, no I/O, deterministic for a given ``seed``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.owners import OwnerMap
from attribution.presets import PRESETS, get_preset
from attribution.snapshot import Snapshot

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

# comparability factors for a mismatch (1.0 when they match or are not recorded)
SENSOR_MISMATCH = 0.6
DRIVER_MISMATCH = 0.85
TEMP_NEAR_C, TEMP_FAR_C = 5.0, 15.0
TEMP_MID, TEMP_FAR = 0.85, 0.6

FloatArray = npt.NDArray[np.float64]


@dataclasses.dataclass(frozen=True, slots=True)
class Mechanism:
    mechanism: str
    delta_j: float  # candidate - baseline, per step or per second (as the metric)
    share_of_delta: float  # delta_j / sum of all mechanisms' delta_j, sign kept
    baseline_j: float
    candidate_j: float
    owner: str | None = None
    resolvable: bool = True  # False: a prior-based split on at least one side

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "mechanism": self.mechanism,
            "delta_j": self.delta_j,
            "share_of_delta": self.share_of_delta,
            "baseline_j": self.baseline_j,
            "candidate_j": self.candidate_j,
            "resolvable": self.resolvable,
        }
        if self.owner is not None:
            d["owner"] = self.owner
        return d


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


# ---------------------------------------------------------------- comparability


def comparability_factors(a: Snapshot, b: Snapshot) -> tuple[dict[str, float], list[str]]:
    """Per-factor scores in [0, 1] (their product is the comparability) and the reasons."""
    f: dict[str, float] = {}
    why: list[str] = []
    ma = sorted(g.model if g.model != "unknown" else g.name for g in a.gpus)
    mb = sorted(g.model if g.model != "unknown" else g.name for g in b.gpus)
    f["gpu_model"] = 1.0 if ma == mb else 0.0
    if ma != mb:
        why.append(f"GPU model differs: {', '.join(ma) or 'none'} vs {', '.join(mb) or 'none'}")
    sa = sorted(g.sensor.field for g in a.gpus)
    sb = sorted(g.sensor.field for g in b.gpus)
    f["sensor_field"] = 1.0 if sa == sb else SENSOR_MISMATCH
    if sa != sb:
        why.append(f"power sensor field differs: {', '.join(sa)} vs {', '.join(sb)}")
    da, db = _meta_str(a.meta, "driver_version", "driver"), _meta_str(b.meta, "driver_version",
                                                                       "driver")
    if da is not None and db is not None:
        f["driver"] = 1.0 if da == db else DRIVER_MISMATCH
        if da != db:
            why.append(f"driver differs: {da} vs {db}")
    temp = _temperature_factor(a.meta, b.meta, why)
    if temp is not None:
        f["temperature"] = temp
    j = kernel_overlap(a, b)
    f["kernel_overlap"] = math.sqrt(j)
    if j < 0.9:
        why.append(f"kernel sets overlap {j:.0%} (energy-weighted Jaccard)")
    return f, why


def kernel_overlap(a: Snapshot, b: Snapshot) -> float:
    """Energy-weighted Jaccard of kernel names: sum(min(share)) / sum(max(share))."""
    ea = _shares(_kernel_energy(a))
    eb = _shares(_kernel_energy(b))
    if not ea and not eb:
        return 1.0
    names = sorted(set(ea) | set(eb))
    pa = np.array([ea.get(n, 0.0) for n in names])
    pb = np.array([eb.get(n, 0.0) for n in names])
    den = float(np.maximum(pa, pb).sum())
    return float(np.minimum(pa, pb).sum()) / den if den > 0 else 1.0


def _kernel_energy(s: Snapshot) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in s.kernels:
        out[k.name] = out.get(k.name, 0.0) + max(0.0, k.energy_j)
    return out


def _shares(e: Mapping[str, float]) -> dict[str, float]:
    total = sum(e.values())
    if total <= 0:
        return {n: 1.0 / len(e) for n in e} if e else {}
    return {n: v / total for n, v in e.items()}


def _meta_str(meta: Mapping[str, Any], *keys: str) -> str | None:
    for k in keys:
        v = meta.get(k)
        if v is not None and str(v).strip():
            return str(v).strip()
    return None


def _meta_float(meta: Mapping[str, Any], *keys: str) -> float | None:
    for k in keys:
        v = meta.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def _temperature_factor(
    ma: Mapping[str, Any], mb: Mapping[str, Any], why: list[str]
) -> float | None:
    keys = ("temperature_c", "gpu_temperature_c", "temp_c")
    ta, tb = _meta_float(ma, *keys), _meta_float(mb, *keys)
    if ta is not None and tb is not None:
        gap = abs(ta - tb)
        if gap <= TEMP_NEAR_C:
            return 1.0
        why.append(f"GPU temperature differs by {gap:.0f} °C ({ta:.0f} vs {tb:.0f})")
        return TEMP_MID if gap <= TEMP_FAR_C else TEMP_FAR
    ba, bb = _meta_str(ma, "temperature_band"), _meta_str(mb, "temperature_band")
    if ba is not None and bb is not None:
        if ba == bb:
            return 1.0
        why.append(f"temperature band differs: {ba} vs {bb}")
        return TEMP_MID
    return None


# ---------------------------------------------------------------- mechanisms


def mechanism_energies(s: Snapshot) -> dict[str, float]:
    """Energy per mechanism name (rows of all GPUs summed), in joules over the window.

    ``clamp.<reason>`` entries come from ``extra["clamps"]``; where an entry names the kernels
    its joules were taken from (``by_kernel_j``), they are taken out of those kernel rows."""
    out: dict[str, float] = {}

    def add(name: str, e: float) -> None:
        if math.isfinite(e):
            out[name] = out.get(name, 0.0) + e

    for k in s.kernels:
        add(f"kernel:{k.name}", k.energy_j)
    for c in s.copies:
        add(f"copy:{c.kind}/{c.memory}", c.energy_j)
    for i in s.idle:
        add(f"idle.{i.cause}", i.energy_j)
    for reason, e in _clamps(s.extra.get("clamps")):
        add(f"clamp.{reason}", e)
    # a clamp's cost sits inside the stretched kernels' rows: move it, so the parts still add up
    raw = s.extra.get("clamps")
    for item in raw if isinstance(raw, list) else ():
        moved = item.get("by_kernel_j") if isinstance(item, Mapping) else None
        if isinstance(moved, Mapping):
            for name, e in moved.items():
                key = f"kernel:{name}"
                if key in out and isinstance(e, int | float) and not isinstance(e, bool):
                    out[key] -= float(e)
    return out


def _clamps(raw: Any) -> Iterable[tuple[str, float]]:
    """Clamp energies from ``extra["clamps"]``: a list of {reason, energy_j} or a mapping."""
    if isinstance(raw, Mapping):
        for k, item in raw.items():
            v = item.get("energy_j") if isinstance(item, Mapping) else item
            if isinstance(v, int | float) and not isinstance(v, bool):
                yield str(k), float(v)
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, Mapping):
                e = item.get("energy_j")
                reason = item.get("reason", item.get("name"))
                if reason is not None and isinstance(e, int | float) and not isinstance(e, bool):
                    yield str(reason), float(e)


def mechanism_uncertainty(s: Snapshot) -> dict[str, tuple[float, bool]]:
    """Per kernel/copy mechanism: (half-width of its 90 % interval in J, resolvable)."""
    out: dict[str, tuple[float, bool]] = {}
    rows = [(f"kernel:{k.name}", k.dynamic_energy_ci_j, k.resolvable) for k in s.kernels]
    rows += [(f"copy:{c.kind}/{c.memory}", c.dynamic_energy_ci_j, c.resolvable)
             for c in s.copies]
    for name, ci, ok in rows:
        half = abs(float(ci[1]) - float(ci[0])) / 2.0
        h0, ok0 = out.get(name, (0.0, True))
        out[name] = (math.hypot(h0, half) if math.isfinite(half) else h0, ok0 and bool(ok))
    return out


def mechanisms(
    a: Snapshot, b: Snapshot, *, per_step: bool, owners: OwnerMap | None = None
) -> tuple[Mechanism, ...]:
    """The delta split by mechanism, largest |delta_j| first -- except that a mechanism the
    data cannot resolve on either side (a prior-based split) is ordered by the part of its
    delta beyond its two 90 % half-widths: it tops the list only on the part it is sure of."""
    na, nb = _normaliser(a, per_step), _normaliser(b, per_step)
    ea = {k: v / na for k, v in mechanism_energies(a).items()}
    eb = {k: v / nb for k, v in mechanism_energies(b).items()}
    ua, ub = mechanism_uncertainty(a), mechanism_uncertainty(b)
    names = sorted(set(ea) | set(eb))
    deltas = {n: eb.get(n, 0.0) - ea.get(n, 0.0) for n in names}
    total = sum(deltas.values())
    rows = [
        Mechanism(
            mechanism=n, delta_j=deltas[n],
            share_of_delta=deltas[n] / total if total != 0 else 0.0,
            baseline_j=ea.get(n, 0.0), candidate_j=eb.get(n, 0.0),
            owner=None if owners is None else owners.owner_for(n),
            resolvable=ua.get(n, (0.0, True))[1] and ub.get(n, (0.0, True))[1],
        )
        for n in names
    ]

    def key(m: Mechanism) -> float:
        if m.resolvable:
            return abs(m.delta_j)
        half = ua.get(m.mechanism, (0.0, True))[0] / na + ub.get(m.mechanism, (0.0, True))[0] / nb
        return max(0.0, abs(m.delta_j) - half)

    rows.sort(key=lambda m: (-key(m), m.mechanism))
    return tuple(rows)


def _normaliser(s: Snapshot, per_step: bool) -> float:
    if per_step:
        assert s.steps is not None
        n = s.steps.count if s.steps.count > 0 else len(s.steps.step_energy_j)
        return float(max(n, 1))
    dur = s.window.duration_s
    return dur if dur > 0 else 1.0
