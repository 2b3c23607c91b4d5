"""What the optimization report says, independent of how it is rendered.

Owns :func:`build_report`: one (or two, with a baseline) :class:`~attribution.snapshot.Snapshot`
→ a :class:`Report` of plain rows (operating points, energy breakdown, bottlenecks, kernel
table, idle by cause, intervention plan, verdict, power series).  The Markdown and HTML
renderers only format these rows; no numbers are computed there.

Optional snapshot extras it reads (absent is fine):

* ``extra["clamps"]``: a list of ``{"reason", "energy_j", "time_s"}`` (or a mapping reason →
  that dict / energy) — clock-clamp time and energy.
* ``extra["power_series"]``: ``{"t_s": [...], "power_w": [...]}`` (optionally ``"gpu"``), or a
  list of such dicts, one per GPU — the board-power timeline.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from attribution.diff import MIN_COMPARABILITY, DiffResult
from attribution.snapshot import (
    Inefficiency,
    KernelRow,
    Snapshot,
    energy_known,
    rows_by_energy,
)

TOP_KERNELS = 15
TOP_INTERVENTIONS = 5
CHECK = ("keep this snapshot as the baseline (before.json); apply the fix behind a flag, run the "
         "same workload and `ppwtop attribute ... -o after.json`; then "
         "`ppwtop diff before.json after.json --fail-on-regression` must exit 0 (exit 3: "
         "regression, turn the flag off) and the mechanism's delta must be negative")


@dataclasses.dataclass(frozen=True, slots=True)
class OperatingPoint:
    """One headline metric; ``better`` is "lower" or "higher" (for the change column)."""

    label: str
    unit: str
    after: float | None  # the snapshot being reported (the candidate when there is a baseline)
    before: float | None  # the baseline's value (None without a baseline)
    better: str
    energy: bool = False
    """An energy-derived metric (what a change of power sensor moves as well as the run)."""
    mark: str | None = None
    """"better" / "worse" in this report (:meth:`judged` with the report's comparability,
    noise floor and sensor fields), set by :func:`build_report`."""

    @property
    def change(self) -> float | None:
        """Relative change after vs before (None when either side is missing or zero)."""
        if self.before is None or self.after is None or self.before == 0:
            return None
        ch = (self.after - self.before) / abs(self.before)
        return 0.0 if abs(ch) < 1e-9 else ch

    def judged(self, comparable: bool, *, floor: float = 0.0,
               energy_comparable: bool = True) -> str | None:
        """"better" or "worse" for a change, by the metric's direction; None where there is
        no change, a change under ``floor`` (the diff's noise floor), the runs are not
        comparable (a difference is then no verdict), or an energy metric between runs read
        through different power sensors (``energy_comparable``)."""
        ch = self.change
        if ch is None or ch == 0 or not comparable or abs(ch) < floor:
            return None
        if self.energy and not energy_comparable:
            return None
        return "better" if (ch < 0) == (self.better == "lower") else "worse"


@dataclasses.dataclass(frozen=True, slots=True)
class BreakdownRow:
    """Energies None (shown n/a) where the snapshot's are unknown (``energy_known``)."""

    category: str  # "kernels" | "copies" | "idle" | "idle.<cause>" ...
    energy_j: float | None
    share: float | None  # of the total energy
    before_energy_j: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class KernelLine:
    """Energies and ``resolvable`` None (shown n/a) where the snapshot's energies are unknown
    (``energy_known``: 0 J by convention, not measured)."""

    name: str
    gpu: int
    calls: int
    time_s: float
    energy_j: float | None
    share: float | None
    dynamic_energy_j: float | None
    dynamic_ci_j: tuple[float, float] | None
    avg_power_w: float | None
    resolvable: bool | None
    note: str  # why it is not resolvable / its cluster


@dataclasses.dataclass(frozen=True, slots=True)
class IdleLine:
    """Energies None (shown n/a) where the snapshot's are unknown (``energy_known``)."""

    cause: str
    time_s: float
    energy_j: float | None
    share: float | None
    count: int


@dataclasses.dataclass(frozen=True, slots=True)
class Intervention:
    rank: int
    mechanism: str
    energy_j: float
    fix: str
    owner: str
    validation: str  # the snapshot's own validation text
    check: str  # the rollback-safe confirmation with `ppwtop diff --fail-on-regression`


@dataclasses.dataclass(frozen=True, slots=True)
class PowerSeries:
    gpu: int
    t_s: tuple[float, ...]
    power_w: tuple[float, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    title: str
    gpus: tuple[str, ...]
    duration_s: float
    has_baseline: bool
    operating_points: tuple[OperatingPoint, ...]
    breakdown: tuple[BreakdownRow, ...]
    bottlenecks: tuple[Inefficiency, ...]
    kernels: tuple[KernelLine, ...]
    kernel_count: int  # all kernel classes (the table shows the top ones)
    idle: tuple[IdleLine, ...]
    interventions: tuple[Intervention, ...]
    verdict: DiffResult | None
    power: tuple[PowerSeries, ...]
    warnings: tuple[str, ...]
    closure_error: float | None
    """Against the energy counter; None where the inputs held none (an nvidia-smi CSV, no
    power): the snapshot then carries 0.0, which is not a perfect match."""
    comparable: bool = True
    """False where the baseline's runs are not comparable (the diff's comparability under
    its minimum): the before/after changes are shown without "better"/"worse"."""
    energy_known: bool = True
    """False for a snapshot without power readings (:func:`energy_known`): its energies are
    0 by convention, not measured; the lines carry them as None (n/a), the tables are ordered
    by time (``order``) and ``time_view`` stands in for the ranking."""
    order: str = "energy"
    """What the kernel and idle tables are ordered by: "energy", or "time"."""
    no_plan: str = "Nothing to do: no ranked inefficiencies."
    """The intervention plan's sentence when nothing is ranked."""
    time_view: tuple[str, ...] = ()
    """Where the GPU time went (largest idle causes and kernels, shares of GPU time), for a
    snapshot whose energies are unknown; () otherwise."""


NO_POWER = ("no power readings in this snapshot: energies are unknown (n/a, not 0 J), so "
            "nothing is ranked and the tables are ordered by time; for energies attribute with "
            "--power (an nvidia-smi log of the run) or record the run with ppwtop record")


def _time_view(snap: Snapshot, n: int = 3) -> tuple[str, ...]:
    """The largest idle causes and kernel classes by time, as shares of the GPUs' time."""
    gpus = {k.gpu for k in snap.kernels} | {c.gpu for c in snap.copies} | {
        i.gpu for i in snap.idle if i.time_s > 0}
    gpu_s = snap.window.duration_s * max(len(gpus), 1)
    if gpu_s <= 0:
        return ()

    def line(what: str, t: float) -> str:
        return f"{what}: {t:.4g} s, {100 * t / gpu_s:.1f} % of the GPU time ({gpu_s:.4g} s)"

    idle = [(i.cause, i.time_s) for i in _idle(snap, known=False) if i.time_s > 0][:n]
    kern = sorted(snap.kernels, key=lambda k: (-k.time_s, k.name, k.gpu))[:n]
    return (tuple(line(f"idle.{c}", t) for c, t in idle)
            + tuple(line(f"kernel {k.name} (GPU {k.gpu})", k.time_s) for k in kern))


def build_report(snap: Snapshot, baseline: Snapshot | None = None,
                 verdict: DiffResult | None = None, title: str = "") -> Report:
    """The report on ``snap`` (the candidate, when ``baseline`` is given)."""
    total = snap.totals.energy_j
    known = energy_known(snap)
    comparable = verdict is None or verdict.comparability >= MIN_COMPARABILITY
    lines: tuple[str, ...] = ()
    if not comparable and verdict is not None:
        # found by an audit: the headline said "−40 % (better)" for an A100 run against an
        # H100 baseline, and only the last section said the two could not be compared
        factors = ", ".join(f"{k} {v:.2f}" for k, v in verdict.comparability_factors.items()
                            if v < 1.0)
        lines = (f"the baseline is not comparable with this run (comparability "
                 f"{verdict.comparability:.2f}: {factors}): the before/after changes below "
                 "are differences, not a verdict",)
    energy_comparable = verdict is None or verdict.comparability_factors.get(
        "sensor_field", 1.0) >= 1.0
    if comparable and not energy_comparable:
        lines += ("the two runs' power was read through different sensor fields: the energy "
                  "metrics' changes below are the sensors' as much as the runs', and are not "
                  "marked better or worse",)
    gpus = tuple(f"GPU {g.index}: {g.name} ({g.model})" for g in snap.gpus)
    if baseline is not None and [(g.name, g.model) for g in baseline.gpus] != [
            (g.name, g.model) for g in snap.gpus]:
        gpus += tuple(f"baseline GPU {g.index}: {g.name} ({g.model})" for g in baseline.gpus)
    return Report(
        title=title or "ppwtop perf-per-watt report",
        gpus=gpus,
        duration_s=snap.window.duration_s,
        has_baseline=baseline is not None,
        operating_points=tuple(
            dataclasses.replace(o, mark=o.judged(
                comparable, floor=0.0 if verdict is None else verdict.noise_floor,
                energy_comparable=energy_comparable))
            for o in operating_points(snap, baseline)),
        breakdown=_breakdown(snap, baseline, known),
        bottlenecks=tuple(sorted(snap.inefficiencies, key=lambda i: i.rank)),
        kernels=tuple(_kernel_line(k, total, known) for k in (
            rows_by_energy(snap.kernels) if known
            else sorted(snap.kernels, key=lambda k: (-k.time_s, k.name, k.gpu)))[:TOP_KERNELS]),
        kernel_count=len(snap.kernels),
        idle=_idle(snap, known=known),
        interventions=_interventions(snap),
        verdict=verdict,
        power=power_series(snap),
        warnings=lines + tuple(snap.warnings) + (
            _unresolvable_warning(snap) if known else (NO_POWER,)),
        closure_error=(snap.totals.closure_error if snap.totals.measured_energy_j > 0
                       else None),
        comparable=comparable,
        energy_known=known,
        order="energy" if known else "time",
        no_plan=("Nothing to do: no ranked inefficiencies." if known else
                 "Nothing ranked: ranking needs energies and this snapshot has no power "
                 "readings. Where the GPU time went:"),
        time_view=() if known else _time_view(snap),
    )


# -- operating points ------------------------------------------------------------------------


def headline(snap: Snapshot) -> dict[str, tuple[str, float | None, str]]:
    """label → (unit, value, better) for one snapshot (energy metrics None where its energies
    are unknown, :func:`energy_known`)."""
    dur = snap.window.duration_s
    t = snap.totals
    steps = snap.steps
    known = energy_known(snap)

    def en(v: float | None) -> float | None:
        return v if known else None

    out: dict[str, tuple[str, float | None, str]] = {}
    has_steps = steps is not None and steps.count > 0
    if has_steps and steps is not None:
        out["energy per step"] = ("J", en(_f(steps.energy_j.mean)), "lower")
        out["steps per joule"] = ("steps/J", en(_inv(steps.energy_j.mean)), "higher")
        if steps.items_per_j is not None:
            out["items per joule"] = ("items/J", en(_f(steps.items_per_j)), "higher")
        out["step latency p50"] = ("ms", _f(steps.latency_ms.p50), "lower")
        out["step latency p95"] = ("ms", _f(steps.latency_ms.p95), "lower")
        out["step latency p99"] = ("ms", _f(steps.latency_ms.p99), "lower")
        if steps.sla_compliance is not None:
            out["SLA compliance"] = ("%", 100.0 * float(steps.sla_compliance), "higher")
        if steps.items_per_j_under_sla is not None:
            # the headline operating point: work done within the SLA per joule of all steps
            unit = "items" if steps.work_unit == "items" else "steps"
            out[f"{unit} per joule within SLA"] = (
                f"{unit}/J", en(_f(steps.items_per_j_under_sla)), "higher")
    out["average power"] = ("W", en(t.energy_j / dur) if dur > 0 else None, "lower")
    out["total energy"] = ("J", en(_f(t.energy_j)), "lower")
    idle_share = t.idle_energy_j / t.energy_j if t.energy_j > 0 else None
    out["idle share of energy"] = ("%", None if idle_share is None else 100 * idle_share, "lower")
    clamp_s, clamp_j = clamp_totals(snap)
    if clamp_s is not None or clamp_j is not None:
        out["clock-clamp time"] = ("s", clamp_s, "lower")
        out["clock-clamp energy"] = ("J", clamp_j, "lower")
    return out


ENERGY_METRICS = frozenset({"energy per step", "steps per joule", "items per joule",
                            "average power", "total energy", "idle share of energy",
                            "clock-clamp energy"})
"""The headline rows computed from energies (and the '... per joule within SLA' row)."""


def operating_points(snap: Snapshot, baseline: Snapshot | None) -> tuple[OperatingPoint, ...]:
    after = headline(snap)
    before = headline(baseline) if baseline is not None else {}
    labels = list(after) + [k for k in before if k not in after]
    rows = []
    for label in labels:
        unit, a, better = after.get(label) or before[label]
        b = before.get(label, (unit, None, better))[1] if baseline is not None else None
        rows.append(OperatingPoint(label, unit, a, b, better, energy=label in ENERGY_METRICS
                                   or label.endswith("per joule within SLA")))
    return tuple(rows)


def clamp_totals(snap: Snapshot) -> tuple[float | None, float | None]:
    """(seconds, joules) under a clock clamp from ``extra["clamps"]``, None when absent."""
    raw = snap.extra.get("clamps")
    items: list[Mapping[str, Any]] = []
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            items.append(v if isinstance(v, Mapping) else {"reason": k, "energy_j": v})
    elif isinstance(raw, list):
        items = [x for x in raw if isinstance(x, Mapping)]
    else:
        return None, None
    secs = [_num(x.get("time_s", x.get("duration_s"))) for x in items]
    joules = [_num(x.get("energy_j")) for x in items]
    s = [v for v in secs if v is not None]
    j = [v for v in joules if v is not None]
    return (sum(s) if s else None), (sum(j) if j else None)


# -- tables ----------------------------------------------------------------------------------


def _breakdown(snap: Snapshot, baseline: Snapshot | None, known: bool = True
               ) -> tuple[BreakdownRow, ...]:
    def parts(s: Snapshot) -> dict[str, float]:
        t = s.totals
        return {"kernels": t.kernel_energy_j, "copies": t.copy_energy_j, "idle": t.idle_energy_j}

    now = parts(snap)
    was = parts(baseline) if baseline is not None else {}
    total = snap.totals.energy_j
    return tuple(
        BreakdownRow(k, v, v / total if total > 0 else 0.0, was.get(k)) if known
        else BreakdownRow(k, None, None, was.get(k)) for k, v in now.items()
    )


def _kernel_line(k: KernelRow, total_j: float, known: bool = True) -> KernelLine:
    if not known:
        return KernelLine(name=k.name, gpu=k.gpu, calls=k.calls, time_s=k.time_s,
                          energy_j=None, share=None, dynamic_energy_j=None, dynamic_ci_j=None,
                          avg_power_w=None, resolvable=None, note="")
    note = ""
    if not k.resolvable:
        note = k.why or "not separable from other classes"
        if k.cluster:
            note += f" (cluster: {k.cluster})"
    return KernelLine(
        name=k.name, gpu=k.gpu, calls=k.calls, time_s=k.time_s, energy_j=k.energy_j,
        share=k.energy_j / total_j if total_j > 0 else 0.0,
        dynamic_energy_j=k.dynamic_energy_j,
        dynamic_ci_j=(float(k.dynamic_energy_ci_j[0]), float(k.dynamic_energy_ci_j[1])),
        avg_power_w=k.avg_power_w, resolvable=k.resolvable, note=note,
    )


def _idle(snap: Snapshot, *, known: bool = True) -> tuple[IdleLine, ...]:
    """Idle by cause, largest energy first (largest time where energies are unknown)."""
    by: dict[str, list[float]] = {}
    for r in snap.idle:
        acc = by.setdefault(r.cause, [0.0, 0.0, 0.0])
        acc[0] += r.time_s
        acc[1] += r.energy_j
        acc[2] += r.count
    total = snap.totals.energy_j
    rows = [IdleLine(c, v[0], v[1], v[1] / total if total > 0 else 0.0, int(v[2])) if known
            else IdleLine(c, v[0], None, None, int(v[2])) for c, v in by.items()]
    return tuple(sorted(rows, key=lambda r: -(r.energy_j if r.energy_j is not None
                                              else r.time_s)))


def _interventions(snap: Snapshot) -> tuple[Intervention, ...]:
    out = []
    for i in sorted(snap.inefficiencies, key=lambda i: i.rank)[:TOP_INTERVENTIONS]:
        out.append(Intervention(i.rank, i.mechanism, i.energy_j, i.fix or "(no fix suggested)",
                                i.owner or "(unowned)", i.validation, CHECK))
    return tuple(out)


def power_series(snap: Snapshot) -> tuple[PowerSeries, ...]:
    """The board-power timeline(s) from ``extra["power_series"]``; () when absent or bad."""
    raw = snap.extra.get("power_series")
    items: Sequence[Any] = raw if isinstance(raw, list) else [raw] if raw is not None else []
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        t, p = item.get("t_s"), item.get("power_w")
        if not isinstance(t, list) or not isinstance(p, list) or len(t) != len(p) or not t:
            continue
        try:
            ts = tuple(float(x) for x in t)
            ps = tuple(float(x) for x in p)
        except (TypeError, ValueError):
            continue
        gpu = item.get("gpu", 0)
        out.append(PowerSeries(int(gpu) if isinstance(gpu, int) else 0, ts, ps))
    return tuple(out)


def _unresolvable_warning(snap: Snapshot) -> tuple[str, ...]:
    bad = [k for k in snap.kernels if not k.resolvable]
    if not bad:
        return ()
    e = sum(k.energy_j for k in bad)
    return (f"{len(bad)} kernel class(es) ({e:.3g} J) are not resolvable: the readings do not "
            "pin their numbers down (each row in the kernel table says why)",)


def _f(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def _inv(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) or v <= 0 else 1.0 / v


def _num(v: Any) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None
