"""The engine's array level: per-record energies for one trace.

Owns the pipeline per device -- items and classes, idle gaps, readings and sensor model,
lag search, regression, bootstrap, resolvability -- and the conventions of CONTRACT.md:
dynamic energy ``ΔP_c × duration``; full energy adds ``P_idle × time share``; idle energy
``P_idle × idle time`` by cause; so Σ items + Σ idle = P_idle × window + Σ dynamic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from attribution.engine import regress
from attribution.engine.activity import BusyFunction, Items, idle_share_s, items_for_device
from attribution.engine.timebase import (
    Sensor,
    fit_lag,
    fit_lag_response,
    readings_for,
    sensor_model,
    usable,
    window_fractions,
)
from attribution.idle import IdleIntervals, device_indices, idle_intervals
from attribution.model import F64, I32, I64, Trace
from attribution.presets import GpuPreset, get_preset, preset_for_name

MAX_GROUPS = 32
"""Classes beyond the 32 busiest share one regressor ("rest")."""
MIN_EXPOSURE = 3.0
"""A class needs this many reading-equivalents of busy time inside sensor windows."""
MAX_REL_HALF_WIDTH = 0.5
COLLINEAR = 0.95
N_BOOT = 200
WINDOW_FRACTIONS = (0.25, 0.5, 1.0)
"""Candidate W / T for a board with no preset (DESIGN.md §3: 25 %, 50 %, 100 % seen)."""
LAG_SLACK_MS = 0.5
"""Lag uncertainty folded into the intervals (timestamp skew, board response shape)."""
LONG_WINDOW_MS = 500.0
"""Sensors averaging this long (the 1 s ``average`` field) only support totals."""
Z90 = 1.645
GAIN_SIGMA = 0.03
"""Board gain spread assumed for an unknown GPU (presets carry their own)."""
BLOCK_S = 1.0
"""Bootstrap blocks span max(1 s, 3 W) of readings (readings closer are correlated)."""


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceResult:
    """Everything the engine decided for one GPU."""

    device: int
    name: str
    model: str
    sensor: Sensor
    p_idle_w: float
    p_idle_ci_w: tuple[float, float]
    items: Items
    class_group: I32  # class → regressor group
    group_dp_w: F64
    class_dynamic_j: F64
    class_ci_j: F64  # (classes, 2)
    class_resolvable: tuple[bool, ...]
    class_cluster: tuple[str | None, ...]
    class_why: tuple[str, ...]
    item_dynamic_j: F64
    item_energy_j: F64
    n_readings: int
    rms_w: float
    response_ms: float  # fitted board response time constant τ
    busy: Callable[[I64], F64]  # B_g(t), seconds per group
    clusters: tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Arrays:
    """Per-record energies aligned with the trace's rows, plus idle intervals."""

    window_start_ns: int
    window_end_ns: int
    kernel_dynamic_j: F64
    kernel_energy_j: F64
    copy_dynamic_j: F64
    copy_energy_j: F64
    memset_dynamic_j: F64
    memset_energy_j: F64
    idle: IdleIntervals
    idle_energy_j: F64
    devices: tuple[DeviceResult, ...]
    has_power: bool
    warnings: tuple[str, ...]


def trace_window(trace: Trace) -> tuple[int, int] | None:
    """The profiled span: GPU items, host API calls and markers (power logs excluded)."""
    starts, ends = [], []
    for b in (trace.kernels, trace.copies, trace.memsets, trace.apis, trace.markers):
        if len(b):
            starts.append(int(b.start_ns.min()))
            ends.append(int(b.end_ns.max()))
    if not starts:
        return None
    return min(starts), max(ends)


def _preset(trace: Trace, device: int, gpu: str | None) -> GpuPreset | None:
    if gpu is not None:
        return get_preset(gpu)
    for d in trace.devices:
        if d.index == device:
            return preset_for_name(d.name)
    return None


def _device_name(trace: Trace, device: int) -> str:
    for d in trace.devices:
        if d.index == device:
            return d.name
    return ""


def _with_gain(ci: F64, est: F64, gain_sigma: float) -> F64:
    """Widen bootstrap intervals by the board's gain uncertainty (not correctable, so it
    belongs in the interval): relative half-widths add in quadrature."""
    g = Z90 * gain_sigma
    lo_rel = np.divide(est - ci[:, 0], est, out=np.zeros_like(est), where=est > 0)
    hi_rel = np.divide(ci[:, 1] - est, est, out=np.zeros_like(est), where=est > 0)
    lo = est * (1.0 - np.sqrt(np.clip(lo_rel, 0, None) ** 2 + g * g))
    hi = est * (1.0 + np.sqrt(np.clip(hi_rel, 0, None) ** 2 + g * g))
    return np.column_stack([np.minimum(np.clip(lo, 0.0, None), ci[:, 0]),
                            np.maximum(hi, ci[:, 1])])


def _fit_window(busy: Callable[[I64], F64], t_ns: I64, power_w: F64, period_ms: float,
                win: tuple[int, int]) -> float:
    """Unknown board: pick W among T/4, T/2, T by the residual at each W's best lag (all
    candidates scored on the same readings)."""
    cands = [period_ms * f for f in WINDOW_FRACTIONS]
    idx = usable(t_ns, max(cands), win[0], win[1])
    if len(idx) < 8:
        return period_ms
    t_k, y = t_ns[idx], power_w[idx]
    scores = []
    for w in cands:
        lag = fit_lag(busy, t_k, y, w, regress.quick_rss)
        scores.append(regress.quick_rss(window_fractions(busy, t_k, w, lag), y))
    return float(cands[int(np.argmin(scores))])


def _groups(items: Items, n_cls: int) -> tuple[I32, int]:
    """Busiest MAX_GROUPS classes get their own group, the rest share the last one."""
    t = np.bincount(items.cls, weights=items.duration_ns.astype(np.float64), minlength=n_cls)
    order = sorted(range(n_cls), key=lambda c: (-t[c], items.labels[c]))
    group = np.zeros(n_cls, np.int32)
    for rank, c in enumerate(order):
        group[c] = min(rank, MAX_GROUPS)
    return group, min(n_cls, MAX_GROUPS + 1) if n_cls > MAX_GROUPS else n_cls


def _clusters(x: F64, exposure: F64) -> list[list[int]]:
    """Groups whose activity fractions correlate above COLLINEAR (connected components)."""
    g = x.shape[1]
    if g < 2 or x.shape[0] < 3:
        return []
    sd = x.std(axis=0)
    live = np.flatnonzero((sd > 1e-12) & (exposure > 0))
    if len(live) < 2:
        return []
    c = np.corrcoef(x[:, live].T)
    parent = list(range(len(live)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    ii, jj = np.nonzero(np.triu(c > COLLINEAR, 1))
    for i, j in zip(ii.tolist(), jj.tolist(), strict=True):
        parent[find(i)] = find(j)
    comps: dict[int, list[int]] = {}
    for i in range(len(live)):
        comps.setdefault(find(i), []).append(int(live[i]))
    return [v for v in comps.values() if len(v) > 1]


def _attribute_device(trace: Trace, device: int, win: tuple[int, int], *, gpu: str | None,
                      n_boot: int, warnings: list[str]) -> DeviceResult:
    preset = _preset(trace, device, gpu)
    items = items_for_device(trace, device)
    n_cls = len(items.labels)
    group, n_groups = _groups(items, n_cls)
    item_group = group[items.cls] if len(items) else np.empty(0, np.int32)
    origin = win[0]
    s_ns = np.clip(items.start_ns, win[0], win[1])
    e_ns = np.clip(items.end_ns, win[0], win[1])

    busy = BusyFunction(s_ns, e_ns, item_group, n_groups, origin_ns=origin)

    rd = readings_for(trace, device)
    period_ms, window_ms, source = sensor_model(preset, rd)
    field = rd.field.label if rd.field is not None else "none"
    idx = usable(rd.t_ns, window_ms, win[0], win[1]) if rd.field is not None else np.empty(0,
                                                                                         np.int32)
    t_k, y = rd.t_ns[idx], rd.power_w[idx]
    prior = preset.active_idle_w if preset is not None else None
    dur_s = (e_ns - s_ns).astype(np.float64) * 1e-9
    class_time = np.bincount(items.cls, weights=dur_s, minlength=n_cls)
    lag, tau = 1.5, 0.0
    if rd.field is None:
        warnings.append(f"GPU {device}: no power readings; energies are 0 (times only)")
    elif len(y) < 8:
        warnings.append(f"GPU {device}: only {len(y)} usable power readings inside the trace "
                        "window; the fit rests on the priors")
    if source == "measured" and len(y) >= 8 and n_groups:
        window_ms = _fit_window(busy, rd.t_ns, rd.power_w, period_ms, win)
        source = "measured+fitted"
        idx = usable(rd.t_ns, window_ms, win[0], win[1])
        t_k, y = rd.t_ns[idx], rd.power_w[idx]
    if len(y) >= 1 and n_groups:
        lag, tau = fit_lag_response(busy, t_k, y, window_ms, regress.quick_rss)
        x = window_fractions(busy, t_k, window_ms, lag, tau)
        f = regress.fit(x, y, prior)
        lag_dp = np.array([regress.fit(window_fractions(busy, t_k, window_ms, lag + d, tau), y,
                                       prior).dp_w for d in (-LAG_SLACK_MS, LAG_SLACK_MS)])
        block = max(1, round(max(BLOCK_S * 1e3, 3.0 * window_ms) / max(period_ms, 1e-3)))
        p_boot, dp_boot = regress.bootstrap(x, y, prior, n_boot=n_boot, block=block)
        p_idle, dp, rms = f.p_idle_w, f.dp_w, f.rms_w
        exposure = x.sum(axis=0)
    elif len(y) >= 1:  # power but no activity: everything is idle
        p_idle = float(np.mean(y))
        dp = np.zeros(n_groups)
        lag_dp = np.zeros((2, n_groups))
        p_boot, dp_boot = np.full(max(n_boot, 1), p_idle), np.zeros((max(n_boot, 1), n_groups))
        rms = float(np.std(y))
        x = np.zeros((len(y), n_groups))
        exposure = np.zeros(n_groups)
    else:
        p_idle = 0.0
        dp = np.zeros(n_groups)
        lag_dp = np.zeros((2, n_groups))
        p_boot, dp_boot = np.zeros(1), np.zeros((1, n_groups))
        rms = 0.0
        x = np.zeros((0, n_groups))
        exposure = np.zeros(n_groups)
    has_power = rd.field is not None
    class_dp = dp[group] if n_cls else np.zeros(0)
    class_dyn = class_dp * class_time
    boot_dyn = dp_boot[:, group] * class_time[None, :] if n_cls else np.zeros((1, 0))
    ci = np.percentile(boot_dyn, [5.0, 95.0], axis=0).T if n_cls else np.zeros((0, 2))
    ci = _with_gain(ci, class_dyn, preset.gain_sigma if preset is not None else GAIN_SIGMA)
    if n_cls:  # the lag is known to ±LAG_SLACK_MS at best: the interval covers both ends
        lag_dyn = lag_dp[:, group] * class_time[None, :]
        ci = np.column_stack([np.minimum(ci[:, 0], lag_dyn.min(axis=0)),
                              np.maximum(ci[:, 1], lag_dyn.max(axis=0))])
    clusters = _clusters(x, exposure) if has_power else []
    cluster_of: dict[int, int] = {}
    for ci_idx, comp in enumerate(clusters):
        for g in comp:
            cluster_of[g] = ci_idx
    resolvable, cluster, why = [], [], []
    for c in range(n_cls):
        g = int(group[c])
        half = (ci[c, 1] - ci[c, 0]) / 2.0
        if not has_power:
            r, w, cl = False, "no power readings", None
        elif window_ms >= LONG_WINDOW_MS:
            r, cl = False, None
            w = f"{window_ms:.0f} ms averaging sensor: per-class split unreliable"
        elif preset is not None and preset.consumer_boost:
            r, w, cl = False, "consumer-card boost ramp and tail are not modelled yet", None
        elif n_cls > MAX_GROUPS and g == MAX_GROUPS:
            r, w, cl = False, "pooled with other rarely-run classes", None
        elif g in cluster_of:
            r, w = False, "always runs in a fixed mix with other classes"
            cl = f"cluster{cluster_of[g]}"
        elif exposure[g] < MIN_EXPOSURE:
            r, w, cl = False, f"too little exposure ({exposure[g]:.1f} reading-equivalents)", None
        elif class_dyn[c] <= 0:
            r, w, cl = False, "estimate sits at the zero bound", None
        elif half > MAX_REL_HALF_WIDTH * class_dyn[c]:
            r, w, cl = False, "90% interval wider than ±50%", None
        else:
            r, w, cl = True, "", None
        resolvable.append(r)
        cluster.append(cl)
        why.append(w)
    item_dyn = class_dp[items.cls] * dur_s if len(items) else np.zeros(0)
    share = idle_share_s(s_ns, e_ns, origin)
    item_energy = item_dyn + p_idle * share
    names = tuple(tuple(items.labels[c] for c in range(n_cls) if int(group[c]) in comp)
                  for comp in clusters)
    return DeviceResult(
        device=device, name=_device_name(trace, device),
        model=preset.key if preset is not None else "unknown",
        sensor=Sensor(field, period_ms if has_power else 0.0, window_ms if has_power else 0.0,
                      lag if has_power else 0.0, source),
        p_idle_w=p_idle,
        p_idle_ci_w=(float(np.percentile(p_boot, 5)), float(np.percentile(p_boot, 95))),
        items=items, class_group=group, group_dp_w=np.asarray(dp, np.float64),
        class_dynamic_j=class_dyn, class_ci_j=ci, class_resolvable=tuple(resolvable),
        class_cluster=tuple(cluster), class_why=tuple(why), item_dynamic_j=item_dyn,
        item_energy_j=item_energy, n_readings=len(y), rms_w=rms, response_ms=tau, busy=busy,
        clusters=names,
    )


def _idle_power_w(results: tuple[DeviceResult, ...], device: I64 | np.ndarray) -> F64:
    """Each idle gap's ``P_idle`` (its device's; 0 for a device without a result)."""
    p = np.zeros(len(device), np.float64)
    for r in results:
        p[device == r.device] = r.p_idle_w
    return p


def attribute_arrays(trace: Trace, *, gpu: str | None = None, n_boot: int = N_BOOT
                     ) -> Arrays:
    """Per-record energies (kernels, copies, memsets aligned with the trace's rows) and idle
    intervals with cause and energy."""
    warnings: list[str] = []
    win = trace_window(trace)
    if win is None:
        if len(trace.power):
            win = (int(trace.power.t_ns.min()), int(trace.power.t_ns.max()))
        else:
            win = (0, 0)
    if len(trace.kernels) == 0:
        warnings.append("the trace has no kernels")
    devs = device_indices(trace)
    results = tuple(_attribute_device(trace, d, win, gpu=gpu, n_boot=n_boot,
                                      warnings=warnings) for d in devs)
    idle = idle_intervals(trace, win[0], win[1], devs)
    idle_e = _idle_power_w(results, idle.device) * idle.duration_ns.astype(np.float64) * 1e-9
    out: dict[int, tuple[F64, F64]] = {}
    for src, batch in ((0, trace.kernels), (1, trace.copies), (2, trace.memsets)):
        dyn = np.zeros(len(batch))
        full = np.zeros(len(batch))
        for r in results:
            m = r.items.source == src
            dyn[r.items.row[m]] = r.item_dynamic_j[m]
            full[r.items.row[m]] = r.item_energy_j[m]
        out[src] = (dyn, full)
    return Arrays(
        window_start_ns=win[0], window_end_ns=win[1],
        kernel_dynamic_j=out[0][0], kernel_energy_j=out[0][1],
        copy_dynamic_j=out[1][0], copy_energy_j=out[1][1],
        memset_dynamic_j=out[2][0], memset_energy_j=out[2][1],
        idle=idle, idle_energy_j=idle_e, devices=results,
        has_power=any(r.sensor.field != "none" for r in results),
        warnings=tuple(warnings),
    )
