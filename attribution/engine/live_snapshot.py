"""The live engine's snapshot level: per-device fit results and horizon sums → contract rows.

Owns the conventions of CONTRACT.md for the live engine, the same as ``engine/rows.py`` for
the batch one: dynamic energy ``ΔP_c × time_c``; full energy adds ``P_idle × share_c`` (the
class's time share of busy wall time); idle energy ``P_idle × idle time`` by cause; so
kernels + copies + idle = total by construction.  Steps integrate the fitted model over each
settled ProfilerStep; inefficiencies are the row-level ranking
(:func:`attribution.ranking.rank_rows`); the energy-counter closure reuses the batch helper.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from attribution.engine.activity import KERNEL
from attribution.engine.aliasing import (
    anchor_warning,
    counter_scale,
    lag_kept_warning,
    locked_interval,
    locked_warning,
    unanchored_warning,
)
from attribution.engine.blind import (
    blind_anchor_warning,
    blind_cap_w,
    blind_warning,
    blind_why,
)
from attribution.engine.boost_span import stage_at_edge, stage_edge_warning
from attribution.engine.counter import back_warning, counter_energy_j, went_back
from attribution.engine.idle_place import NOT_JUDGED, IdleJudgement, idle_lines
from attribution.engine.live_fit import ClassVerdict, verdicts
from attribution.engine.live_solve import ClassCi
from attribution.engine.rows import close_totals
from attribution.engine.tail import tail_unplaced_warning
from attribution.model import F64, I32, I64, EnergyBatch, Trace
from attribution.precision import precision_of
from attribution.presets import GpuPreset
from attribution.ranking import RowInputs, rank_rows
from attribution.snapshot import (
    IDLE_CAUSES,
    CopyRow,
    GpuInfo,
    IdleRow,
    KernelRow,
    SensorInfo,
    Snapshot,
    Steps,
    Window,
    rows_by_energy,
)
from attribution.steps import StepTimes, step_times, with_energy

ENGINE = "regress/1+live"
_precision = functools.lru_cache(maxsize=4096)(precision_of)


class LagKept(NamedTuple):
    """A lag search whose readings were phase-locked, so its lag was not taken."""

    spread: float  # the search's readings' activity spread ratio (``aliasing``)
    lag_ms: float  # the lag kept
    fitted: bool  # the lag kept is a fitted one (not the engine's starting value)
    span_s: float  # the span the search read


@dataclasses.dataclass(frozen=True, slots=True)
class DevicePart:
    """One device's fit over the horizon and its horizon sums (per class / per cause)."""

    device: int
    name: str
    preset: GpuPreset | None
    field: str
    period_ms: float
    window_ms: float
    lag_ms: float
    tau_ms: float
    source: str
    labels: tuple[str, ...]  # per class (clamped units summed back in)
    class_source: tuple[int, ...]
    class_key: tuple[tuple[str, str], ...]
    group: I32  # each class's main regressor group
    n_groups: int
    g_c_time_s: F64  # (groups, classes) busy time: a class's units and their groups
    gram_g: F64  # Gram matrix of [1, group activity (, tail)] over the readings
    p_idle_w: float
    dyn_j: F64  # per class: Σ over its units of ΔP_unit × time_unit
    rms_w: float
    ci: ClassCi | None
    calls: F64
    time_s: F64
    share_s: F64
    bytes: F64
    idle_s: F64
    idle_n: F64
    n_readings: int
    energy_t_ns: I64
    energy_mj: I64
    step_start_ns: I64
    step_dur_s: F64
    step_dyn_j: F64  # per step: Σ over units of busy time × ΔP
    step_items: F64  # NaN where a step has no item count
    step_source: str
    held_idle_w: tuple[float, float] | None = None
    """(fitted, held) P_idle when the fit was degenerate and P_idle held at the board's."""
    idle_by_run: bool = False
    """P_idle held at the value an earlier horizon of this run placed, not the board's."""
    idle: IdleJudgement = NOT_JUDGED
    """What the fit's readings said about P_idle (``idle_place.judge_idle``)."""
    tail_unplaced: bool = False
    """P_idle's interval reaches the board's value: no boost tail could be placed."""
    phase_lock: float | None = None
    """The readings' activity spread ratio when they are phase-locked to the workload."""
    lag_kept: LagKept | None = None
    """The last lag search's readings were phase-locked: its lag was not taken."""
    blind_share: float | None = None
    """The busy share of the window when the readings show none of the work (``blind``)."""
    step_busy_s: F64 | None = None
    """Each step's busy time (set with ``blind_share``: the counter's energy spread by it)."""
    boost_tail_j: float | None = None
    """Energy of the fitted consumer boost tail over the horizon (None: not modelled)."""
    slow_response: tuple[float, float] = (0.0, 0.0)
    step_times: StepTimes | None = None
    """The energy-independent statistics of all the steps above, kept incrementally by the
    step ring (None: computed here)."""


def _class_ci(p: DevicePart, dyn_j: F64) -> tuple[F64, I64]:
    n = len(p.labels)
    lo = np.zeros(n)
    hi = 2.0 * dyn_j
    computed = np.zeros(n, np.int64)
    if p.ci is not None:
        ok = p.ci.computed & np.isfinite(p.ci.lo_j) & np.isfinite(p.ci.hi_j)
        lo[ok] = p.ci.lo_j[ok]
        hi[ok] = p.ci.hi_j[ok]
        computed[ok] = 1
    # the interval is from the last refresh; it always covers the current estimate
    return np.column_stack([np.minimum(lo, dyn_j), np.maximum(hi, dyn_j)]), computed


def _device_rows(p: DevicePart, unplaced: str | None = None
                 ) -> tuple[list[KernelRow], list[CopyRow], list[IdleRow], list[list[str]]]:
    v = _part_verdicts(p, unplaced)
    return _rows(p, v)


def _part_verdicts(p: DevicePart, unplaced: str | None) -> ClassVerdict:
    """The classes' verdicts and intervals; under ``blind``, every class flagged with its
    reason and its interval reaching the board's power limit over its busy time."""
    n = len(p.labels)
    dyn = p.dyn_j
    ci, computed = _class_ci(p, dyn)
    has_power = p.field != "none"
    v = verdicts(dyn_j=dyn, ci_j=ci, group=p.group, n_groups=p.n_groups, gram_g=p.gram_g,
                 g_c_time_s=p.g_c_time_s, window_ms=p.window_ms, preset=p.preset,
                 has_power=has_power, computed=computed, held_idle=p.held_idle_w,
                 phase_lock=p.phase_lock, idle_unplaced=unplaced,
                 boost_modelled=p.boost_tail_j is not None)
    ci_j = np.asarray(v.ci_j, np.float64).reshape(-1, 2)
    if p.phase_lock is not None and n:  # the readings do not split the classes
        ci_j = np.column_stack(locked_interval(ci_j[:, 0], ci_j[:, 1], dyn))
    if p.blind_share is not None and n:
        cap_w = max(blind_cap_w(p.preset, p.p_idle_w), _blind_w(p))
        ci_j = np.column_stack([ci_j[:, 0], np.maximum(ci_j[:, 1], cap_w * p.time_s)])
        return dataclasses.replace(v, ci_j=ci_j, resolvable=(False,) * n,
                                   why=(blind_why(p.blind_share),) * n)
    return dataclasses.replace(v, ci_j=ci_j)


def _blind_w(p: DevicePart) -> float:
    """ΔP the counter's anchoring gave every busy second under ``blind`` (0 if none)."""
    t = float(np.sum(p.time_s))
    return float(np.sum(p.dyn_j)) / t if t > 0 else 0.0


def _rows(p: DevicePart, v: ClassVerdict
          ) -> tuple[list[KernelRow], list[CopyRow], list[IdleRow], list[list[str]]]:
    n = len(p.labels)
    dyn = p.dyn_j
    energy = dyn + p.p_idle_w * p.share_s
    kernels: list[KernelRow] = []
    copies: list[CopyRow] = []
    # the columns as Python numbers once (the same floats as indexing them one at a time,
    # at a fraction of the cost for hundreds of classes)
    calls, time_s = np.asarray(p.calls).tolist(), np.asarray(p.time_s, np.float64).tolist()
    e_l, d_l = np.asarray(energy, np.float64).tolist(), np.asarray(dyn, np.float64).tolist()
    lo_l, hi_l = np.asarray(v.ci_j, np.float64).reshape(-1, 2).T.tolist()
    nbytes = np.asarray(p.bytes).tolist()
    for c in range(n):
        if calls[c] == 0 and time_s[c] <= 0:
            continue  # a class seen before the horizon only
        cij = (lo_l[c], hi_l[c])
        t, e = time_s[c], e_l[c]
        if p.class_source[c] == KERNEL:
            name = p.class_key[c][0]
            kernels.append(KernelRow(
                name=name, gpu=p.device, calls=int(calls[c]), time_s=t,
                energy_j=e, dynamic_energy_j=d_l[c],
                dynamic_energy_ci_j=cij, avg_power_w=e / t if t > 0 else 0.0,
                resolvable=v.resolvable[c], precision=_precision(name),
                cluster=v.cluster[c], why=v.why[c]))
        else:
            kind, mem = p.class_key[c]
            copies.append(CopyRow(
                kind=kind, memory=mem, gpu=p.device, calls=int(calls[c]),
                bytes=int(nbytes[c]), time_s=t, energy_j=e,
                dynamic_energy_j=d_l[c], dynamic_energy_ci_j=cij,
                resolvable=v.resolvable[c], why=v.why[c]))
    idle = [IdleRow(cause=cause, gpu=p.device, time_s=float(p.idle_s[i]),
                    energy_j=p.p_idle_w * float(p.idle_s[i]), count=int(p.idle_n[i]))
            for i, cause in enumerate(IDLE_CAUSES)]
    return kernels, copies, idle, [[p.labels[c] for c in comp] for comp in v.clusters]


def _steps(parts: list[DevicePart], win: tuple[int, int]) -> Steps | None:
    """Step statistics: the fitted model integrated over each settled step in the window
    (``P_idle × duration + Σ_c ΔP_c × busy_c``), summed over devices."""
    if not parts or not len(parts[0].step_start_ns):
        return None
    mask = parts[0].step_start_ns >= win[0]
    if not bool(mask.any()):
        return None
    # the usual case, every step inside: the columns as they are, no masked copies
    every = bool(mask.all())
    keep: npt.NDArray[np.bool_] | slice = slice(None) if every else mask
    dur_s = parts[0].step_dur_s[keep]
    energy = np.zeros(len(dur_s))
    for p in parts:
        if len(p.step_start_ns) != len(mask):
            continue
        energy += p.p_idle_w * dur_s + p.step_dyn_j[keep]
    times = parts[0].step_times
    if times is None or not every:
        times = step_times(dur_s, parts[0].step_items[keep], sla_ms=None,
                           source=parts[0].step_source)
    return with_energy(times, energy)


def _anchored(p: DevicePart, measured_j: float | None, warnings: list[str]) -> DevicePart:
    """A phase-locked device's part with its dynamic energy scaled to close the energy
    counter (``aliasing.counter_scale``; the part itself when there is nothing to anchor)."""
    fitted_j = float(np.sum(p.dyn_j))
    other_j = p.p_idle_w * (float(np.sum(p.share_s)) + float(np.sum(p.idle_s)))
    k = counter_scale(fitted_j, measured_j, other_j + (p.boost_tail_j or 0.0))
    if k is None:
        warnings.append(unanchored_warning(p.device, measured_j))
        return p
    warnings.append(anchor_warning(p.device, k, fitted_j))
    ci = (None if p.ci is None else
          dataclasses.replace(p.ci, lo_j=p.ci.lo_j * k, hi_j=p.ci.hi_j * k))
    return dataclasses.replace(p, dyn_j=p.dyn_j * k, step_dyn_j=p.step_dyn_j * k, ci=ci)


def _blind_anchored(p: DevicePart, measured_j: float | None) -> tuple[DevicePart, bool]:
    """A part whose readings show none of the work, with the energy counter's energy above
    active idle spread over the classes and steps by busy time (the batch engine's rule);
    the part itself when there is nothing to anchor to."""
    busy_s = float(np.sum(p.time_s))
    other_j = p.p_idle_w * (float(np.sum(p.share_s)) + float(np.sum(p.idle_s)))
    k = counter_scale(busy_s, measured_j, other_j + (p.boost_tail_j or 0.0))
    if k is None:
        return p, False
    steps = p.step_busy_s if p.step_busy_s is not None else np.zeros_like(p.step_dyn_j)
    return dataclasses.replace(p, dyn_j=k * np.asarray(p.time_s, np.float64),
                               step_dyn_j=k * steps), True


def assemble(parts: list[DevicePart], win: tuple[int, int]) -> Snapshot:
    """The contract snapshot of the horizon ``win`` from each device's part."""
    kernels: list[KernelRow] = []
    copies: list[CopyRow] = []
    idle: list[IdleRow] = []
    gpus: list[GpuInfo] = []
    warnings: list[str] = []
    clusters: list[dict[str, object]] = []
    measured = 0.0
    have_measured = bool(parts)
    settled: list[DevicePart] = []
    for part in parts:
        p = part
        en = Trace(energy=EnergyBatch.from_columns({
            "t_ns": p.energy_t_ns, "energy_mj": p.energy_mj,
            "device": np.full(len(p.energy_t_ns), p.device, np.int16)}))
        mj = counter_energy_j(en, p.device, win[0], win[1])
        share = p.blind_share
        if p.lag_kept is not None:
            warnings.append(lag_kept_warning(p.device, *p.lag_kept))
        if p.phase_lock is not None:
            warnings.append(locked_warning(p.device, p.phase_lock, held=p.preset is not None))
            if share is None:  # (readings that show none of the work are anchored below)
                p = _anchored(p, mj, warnings)
        if share is not None:
            p, anchored = _blind_anchored(p, mj)
            if anchored:
                warnings.append(blind_anchor_warning(p.device, float(np.sum(p.dyn_j))))
            elif p.phase_lock is not None:
                warnings.append(unanchored_warning(p.device, mj))
            warnings.append(blind_warning(
                p.device, share, max(blind_cap_w(p.preset, p.p_idle_w), _blind_w(p)),
                anchored=anchored))
        unplaced, lines = idle_lines(
            p.device, p.idle, p_idle_w=p.p_idle_w, held=p.held_idle_w,
            board_w=p.preset.active_idle_w if p.preset is not None else None,
            phase_locked=p.phase_lock is not None, by_run=p.idle_by_run)
        warnings += lines
        if p.tail_unplaced and p.preset is not None:
            warnings.append(tail_unplaced_warning(p.device, p.p_idle_w, p.preset.active_idle_w,
                                                  classes=False))
        if stage_at_edge(p.slow_response):
            warnings.append(stage_edge_warning(p.device, p.slow_response, blocks=False))
        settled.append(p)  # anchored: the steps read the same energies as the rows
        k, c, i, members = _device_rows(p, unplaced)
        clusters += [{"id": f"cluster{j}", "gpu": p.device, "members": m}
                     for j, m in enumerate(members)]
        kernels += k
        copies += c
        idle += i
        has_power = p.field != "none"
        gpus.append(GpuInfo(p.device, p.name, p.preset.key if p.preset else "unknown",
                            SensorInfo(p.field, p.period_ms if has_power else 0.0,
                                       p.window_ms if has_power else 0.0,
                                       p.lag_ms if has_power else 0.0)))
        if not has_power:
            warnings.append(f"GPU {p.device}: no power readings; energies are 0 (times only)")
        if mj is None:
            have_measured = False
            if went_back(en, p.device, win[0], win[1]):
                warnings.append(back_warning(p.device))
        else:
            measured += mj
    totals = close_totals(kernels, copies, idle,
                          active_idle_w=float(sum(p.p_idle_w for p in parts)),
                          measured_j=measured if have_measured else 0.0, warnings=warnings)
    total = totals.energy_j
    meta = {
        "engine": ENGINE,
        "readings": {str(p.device): p.n_readings for p in parts},
        "sensor_source": {str(p.device): p.source for p in parts},
        "response_ms": {str(p.device): p.tau_ms for p in parts},
        "fit_rms_w": {str(p.device): p.rms_w for p in parts},
        **({"boost_tail_j": {str(p.device): p.boost_tail_j for p in parts
                             if p.boost_tail_j is not None},
            "slow_response": {str(p.device): list(p.slow_response) for p in parts
                              if p.boost_tail_j is not None}}
           if any(p.boost_tail_j is not None for p in parts) else {}),
        "active_idle_ci_w": {str(p.device): list(p.ci.p_idle_w) if p.ci else
                             [p.p_idle_w, p.p_idle_w] for p in parts},
    }
    extra = {"clusters": clusters}
    return Snapshot(
        gpus=tuple(gpus), window=Window(win[0], win[1]), totals=totals,
        kernels=tuple(rows_by_energy(kernels)), copies=tuple(rows_by_energy(copies)),
        idle=tuple(idle), steps=_steps(settled, win),
        inefficiencies=rank_rows(
            RowInputs(tuple(kernels), tuple(copies), tuple(idle), total),
            {p.device: (p.ci.p_idle_w if p.ci else (p.p_idle_w, p.p_idle_w)) for p in parts}),
        warnings=tuple(warnings), meta=meta, extra=extra)
