"""Steps and work units: which spans are steps, their energy, latency, items and the SLA.

Owns the choice of step spans and the :class:`~attribution.snapshot.Steps` statistics:

* ``step_range`` given: NVTX / user-annotation (or ``ProfilerStep#N``) ranges whose name
  matches it (exact name or fnmatch glob; Kineto's GPU-side projection is used only when the
  host ranges are absent);
* else the agent's ``mark_step`` marks (``MarkerKind.STEP_MARK``): a mark with a duration is
  one step; instant marks (start == end) close a step each, which runs from the previous
  mark (the first instant mark only opens); ``items`` is the work-unit count of the step;
* else ``ProfilerStep#N`` ranges (Kineto's own kind; where there are none, NVTX or
  user-annotation ranges of that name, as a CUPTI recording holds them).

Per-step energy is ``P_idle × duration + Σ_g busy_g(step) × ΔP_g`` from the engine's
busy-time functions.  Items per joule: Σ items / Σ energy over steps that carry items.  SLA:
compliance is the fraction of steps with latency ≤ ``sla_ms``; the headline *throughput per
watt under the SLA* is ``Σ units of steps within the SLA / Σ energy of all steps`` (units are
items when the steps carry them, else steps): energy spent on late steps is waste.  Since
(units/s) / W = units/J, it is stored as ``items_per_j_under_sla``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from attribution.model import F64, I64, MarkerKind, Trace
from attribution.quantiles import percentiles
from attribution.snapshot import FloatSeries, Quantiles, Steps

if TYPE_CHECKING:
    from attribution.engine.build import Arrays

_HOST_RANGES = (int(MarkerKind.NVTX), int(MarkerKind.USER_ANNOTATION),
                int(MarkerKind.PROFILER_STEP))
"""Host ranges ``--step-range`` matches; the Kineto importer keeps ``ProfilerStep#N`` apart (its
own kind), so ``--step-range 'ProfilerStep*'`` used to miss them and warn."""


def _named(trace: Trace, pattern: str, kinds: tuple[int, ...]) -> np.ndarray:
    mk = trace.markers
    ids = np.unique(mk.name_id[np.isin(mk.kind, kinds) & (mk.name_id >= 0)])
    hit = [i for i in ids.tolist()
           if trace.name(i) == pattern or fnmatch.fnmatchcase(trace.name(i), pattern)]
    return np.isin(mk.kind, kinds) & np.isin(mk.name_id, np.array(hit, dtype=np.int32))


def step_spans(trace: Trace, step_range: str | None, warnings: list[str]
               ) -> tuple[I64, I64, F64, str]:
    """(start_ns, end_ns, items (NaN = none), source) of the steps, by start time."""
    mk = trace.markers
    if step_range is not None:
        m = _named(trace, step_range, _HOST_RANGES) & (mk.end_ns > mk.start_ns)
        if not bool(m.any()):
            m = _named(trace, step_range, (int(MarkerKind.GPU_USER_ANNOTATION),))
            m &= mk.end_ns > mk.start_ns
        if bool(m.any()):
            return _sorted(mk.start_ns[m], mk.end_ns[m], mk.items[m], f"range:{step_range}")
        warnings.append(f"--step-range {step_range!r}: no NVTX, user-annotation or ProfilerStep "
                        "range of that name; steps fall back to mark_step / ProfilerStep#N")
    sm = mk.kind == int(MarkerKind.STEP_MARK)
    if bool(sm.any()):
        s, e, it = mk.start_ns[sm], mk.end_ns[sm], mk.items[sm]
        rng = e > s
        inst = np.flatnonzero(~rng)
        inst = inst[np.argsort(s[inst], kind="stable")]
        s2, e2, it2 = s[inst][:-1], s[inst][1:], it[inst][1:]
        return _sorted(np.concatenate([s[rng], s2]), np.concatenate([e[rng], e2]),
                       np.concatenate([it[rng], it2]), "mark_step")
    m = (mk.kind == int(MarkerKind.PROFILER_STEP)) & (mk.end_ns > mk.start_ns)
    if not bool(m.any()):  # the same ranges as NVTX / user ranges (a CUPTI recording)
        m = _profiler_step_named(trace) & (mk.end_ns > mk.start_ns)
    return _sorted(mk.start_ns[m], mk.end_ns[m], mk.items[m], "ProfilerStep")


_PROFILER_STEP_NAME = re.compile(r"ProfilerStep#\d+")


def _profiler_step_named(trace: Trace) -> np.ndarray:
    """NVTX / user-annotation ranges named ``ProfilerStep#N``: how ``torch.profiler``'s steps
    reach a CUPTI recording (Kineto's JSON gives them their own kind).  A recording of 443
    such ranges read ``steps: null`` (found by an audit)."""
    mk = trace.markers
    kinds = np.isin(mk.kind, (int(MarkerKind.NVTX), int(MarkerKind.USER_ANNOTATION)))
    ids = np.unique(mk.name_id[kinds & (mk.name_id >= 0)])
    hit = [i for i in ids.tolist() if _PROFILER_STEP_NAME.fullmatch(trace.name(i))]
    return kinds & np.isin(mk.name_id, np.array(hit, dtype=np.int32))


def _sorted(s: I64, e: I64, it: F64, source: str) -> tuple[I64, I64, F64, str]:
    o = np.argsort(s, kind="stable")
    return s[o], e[o], np.asarray(it[o], dtype=np.float64), source


def _q(v: F64) -> Quantiles:
    p = percentiles(v)
    return Quantiles(float(np.mean(v)), float(p[0]), float(p[1]), float(p[2]))


def step_stats(trace: Trace, arrays: Arrays, *, sla_ms: float | None = None,
               step_range: str | None = None, warnings: list[str] | None = None
               ) -> Steps | None:
    """Per-step statistics, or None when the run has no step (inside the window)."""
    warn: list[str] = [] if warnings is None else warnings
    s, e, items, source = step_spans(trace, step_range, warn)
    m = (e > s) & (s >= arrays.window_start_ns) & (e <= arrays.window_end_ns)
    if not bool(m.any()):
        return None
    s, e, items = s[m], e[m], items[m]
    dur_s = (e - s).astype(np.float64) * 1e-9
    energy = np.zeros(len(s))
    # the busy functions at each distinct start or end once, in ascending order (steps back to
    # back share their bounds: half the queries, walked forward; a value does not depend on
    # the other queries)
    t, at = np.unique(np.concatenate([s, e]), return_inverse=True)
    for r in arrays.devices:
        b = r.busy(t)
        busy = b[at[len(s):]] - b[at[:len(s)]]
        energy += r.p_idle_w * dur_s + busy @ r.group_dp_w
    return summarize(dur_s, energy, items, sla_ms=sla_ms, source=source)


def summarize(dur_s: F64, energy_j: F64, items: F64, *, sla_ms: float | None,
              source: str) -> Steps:
    """The snapshot's ``steps`` from per-step durations, energies and items (NaN = none given);
    shared by the batch and the live engine."""
    return with_energy(step_times(dur_s, items, sla_ms=sla_ms, source=source), energy_j)


@dataclasses.dataclass(frozen=True, slots=True)
class StepTimes:
    """The part of :func:`summarize` that depends on the steps' spans and items only, not on
    the energy model: the live engine keeps it while its step ring is unchanged."""

    lat_ms: F64
    latency_ms: Quantiles
    has: npt.NDArray[np.bool_]  # the steps that carry an item count
    any_items: bool
    items_sum: np.float64  # Σ items over those steps
    ok: npt.NDArray[np.bool_] | None  # latency within the SLA (None: no SLA)
    units_ok_sum: np.float64  # Σ units of the steps within the SLA
    step_latency_ms: Sequence[float]
    step_items: Sequence[float]
    sla_ms: float | None
    source: str


def step_times(dur_s: F64, items: F64, *, sla_ms: float | None, source: str) -> StepTimes:
    """The energy-independent part of the step statistics (see :func:`with_energy`)."""
    lat_ms = dur_s * 1e3
    has = np.isfinite(items)
    any_items = bool(has.any())
    units = np.where(has, items, 0.0) if any_items else np.ones(len(dur_s))
    ok = lat_ms <= sla_ms if sla_ms is not None else None
    return StepTimes(
        lat_ms=lat_ms, latency_ms=_q(lat_ms), has=has, any_items=any_items,
        items_sum=np.float64(items[has].sum()), ok=ok,
        units_ok_sum=np.float64(units[ok].sum()) if ok is not None else np.float64(0.0),
        step_latency_ms=FloatSeries(lat_ms),
        step_items=FloatSeries(np.where(has, items, 0.0)) if any_items else (),
        sla_ms=sla_ms, source=source)


def with_energy(t: StepTimes, energy_j: F64) -> Steps:
    """The snapshot's ``steps`` from :func:`step_times` and the per-step energies."""
    items_per_j = None
    if t.any_items and float(energy_j[t.has].sum()) > 0:
        items_per_j = float(t.items_sum / energy_j[t.has].sum())
    compliance = under = None
    if t.ok is not None:
        compliance = float(np.mean(t.ok))
        tot = float(energy_j.sum())
        under = float(t.units_ok_sum / tot) if tot > 0 else None
    return Steps(
        count=len(t.lat_ms), energy_j=_q(energy_j), latency_ms=t.latency_ms,
        items_per_j=items_per_j, sla_ms=t.sla_ms, sla_compliance=compliance,
        items_per_j_under_sla=under, step_energy_j=FloatSeries(energy_j),
        step_latency_ms=t.step_latency_ms, step_items=t.step_items,
        work_unit="items" if t.any_items else "steps", source=t.source)
