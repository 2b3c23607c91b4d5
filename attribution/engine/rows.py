"""The engine's snapshot level: rows and totals; steps and the ranking come from their modules.

Owns the aggregation of :class:`attribution.engine.build.Arrays` into the contract's
``ppwtop.snapshot/1`` dataclasses: one kernel row per name and GPU, one copy row per
kind/memory/GPU, one idle row per cause/GPU, totals with closure against the energy counter.
Steps are :func:`attribution.steps.step_stats`, the inefficiencies and ``extra["clamps"]`` /
``extra["precision_mix"]`` are :func:`attribution.ranking.rank`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attribution.engine.activity import KERNEL
from attribution.engine.build import Arrays, DeviceResult
from attribution.engine.counter import back_warning, counter_energy_j, went_back
from attribution.engine.timing_checks import repaired
from attribution.intsets import indices_by_value
from attribution.model import Trace
from attribution.owners import OwnerMap
from attribution.precision import precision_of
from attribution.ranking import RankInputs, rank
from attribution.snapshot import (
    IDLE_CAUSES,
    CopyRow,
    GpuInfo,
    IdleRow,
    KernelRow,
    SensorInfo,
    Snapshot,
    Totals,
    Window,
    rows_by_energy,
)
from attribution.steps import step_stats


def _kernel_copy_rows(trace: Trace, r: DeviceResult) -> tuple[list[KernelRow], list[CopyRow]]:
    it = r.items
    n_cls = len(it.labels)
    # the engine's per-class sums (the same bincounts this took over the items)
    calls, time_s, energy = r.class_calls, r.class_time_s, r.class_energy_j
    nbytes = np.zeros(n_cls, np.int64)
    from attribution.engine.activity import COPY, MEMSET

    for src, batch in ((COPY, trace.copies), (MEMSET, trace.memsets)):
        # items come kernels, then copies, then memsets: each source's items are one slice
        a, b = (int(i) for i in np.searchsorted(it.source, np.array([src, src + 1],
                                                                    it.source.dtype)))
        if b > a:
            nbytes += np.bincount(it.cls[a:b], weights=batch.bytes[it.row[a:b]].astype(
                np.float64), minlength=n_cls).astype(np.int64)
    kernels: list[KernelRow] = []
    copies: list[CopyRow] = []
    for c in range(n_cls):
        ci = (float(r.class_ci_j[c, 0]), float(r.class_ci_j[c, 1]))
        t = float(time_s[c])
        if it.class_source[c] == KERNEL:
            name = it.class_key[c][0]
            kernels.append(KernelRow(
                name=name, gpu=r.device, calls=int(calls[c]), time_s=t,
                energy_j=float(energy[c]), dynamic_energy_j=float(r.class_dynamic_j[c]),
                dynamic_energy_ci_j=ci, avg_power_w=float(energy[c]) / t if t > 0 else 0.0,
                resolvable=r.class_resolvable[c], precision=precision_of(name),
                cluster=r.class_cluster[c], why=r.class_why[c]))
        else:
            kind, mem = it.class_key[c]
            copies.append(CopyRow(
                kind=kind, memory=mem, gpu=r.device, calls=int(calls[c]), bytes=int(nbytes[c]),
                time_s=t, energy_j=float(energy[c]), dynamic_energy_j=float(r.class_dynamic_j[c]),
                dynamic_energy_ci_j=ci, resolvable=r.class_resolvable[c], why=r.class_why[c]))
    return kernels, copies


def run_conditions(trace: Trace, start_ns: int, end_ns: int) -> dict[str, Any]:
    """What ``diff``'s comparability reads about the run (``attribution.comparability``):
    the driver version (a recording's NVML, else a Kineto trace's CUDA driver version) and
    the mean GPU temperature of the clock samples inside the window.  Nothing wrote them, so
    those two factors never fired (found by an audit, 2026-12-05)."""
    out: dict[str, Any] = {}
    nvml = trace.meta.get("nvml")
    driver = nvml.get("driver_version") if isinstance(nvml, dict) else None
    if not driver:
        driver = trace.meta.get("cuda_driver_version")
    if isinstance(driver, (str, int)) and str(driver):
        out["driver_version"] = str(driver)
    c = trace.clocks
    temp = c.temp_c[(c.t_ns >= start_ns) & (c.t_ns <= end_ns)].astype(np.float64)
    temp = temp[np.isfinite(temp) & (temp > 0)]
    if len(temp):
        out["temperature_c"] = round(float(temp.mean()), 1)
    return out


def _idle_sums(arrays: Arrays) -> dict[tuple[int, int], tuple[int, float, int]]:
    """Per (device, cause index) of the results' devices and ``IDLE_CAUSES``: (Σ gap ns,
    Σ gap energy, gaps), each sum over that device's gaps of that cause in gap order."""
    idle = arrays.idle
    causes = len(IDLE_CAUSES)
    slots = len(arrays.devices) * causes
    # each gap's (device slot, cause) code; `slots`: a gap in no row (another device, no cause)
    if len(arrays.devices) == 1:
        on = idle.device == arrays.devices[0].device
        code = np.where(on & (idle.cause < causes), idle.cause, slots)
    else:
        lut = np.full(1 << 16, len(arrays.devices), np.int64)  # device columns are int16
        for i, r in enumerate(arrays.devices):
            lut[r.device & 0xFFFF] = i
        slot = lut[idle.device.astype(np.int64) & 0xFFFF]
        code = np.where((slot < len(arrays.devices)) & (idle.cause < causes),
                        slot * causes + idle.cause, slots)
    dur_ns = idle.duration_ns
    by_code = indices_by_value(code, slots)
    return {(r.device, ci): (int(dur_ns[m].sum()), float(arrays.idle_energy_j[m].sum()), len(m))
            for i, r in enumerate(arrays.devices)
            for ci, m in enumerate(by_code[i * causes:(i + 1) * causes])}


def close_totals(kernels: list[KernelRow], copies: list[CopyRow], idle: list[IdleRow], *,
                 active_idle_w: float, measured_j: float, warnings: list[str]) -> Totals:
    """The contract totals (kernels + copies + idle = total) and the closure against the
    energy counter's ``measured_j`` (0: none), warning past 10 %; shared with the live
    engine."""
    k_j = float(sum(x.energy_j for x in kernels))
    c_j = float(sum(x.energy_j for x in copies))
    i_j = float(sum(x.energy_j for x in idle))
    total = k_j + c_j + i_j
    closure = (total - measured_j) / measured_j if measured_j > 0 else 0.0
    if measured_j > 0 and abs(closure) > 0.1:
        warnings.append(f"attributed energy differs from the energy counter by {closure:+.1%}")
    return Totals(energy_j=total, kernel_energy_j=k_j, copy_energy_j=c_j, idle_energy_j=i_j,
                  active_idle_w=active_idle_w, measured_energy_j=measured_j,
                  closure_error=closure)


def build_snapshot(trace: Trace, arrays: Arrays, *, sla_ms: float | None = None,
                   step_range: str | None = None, owners: OwnerMap | None = None) -> Snapshot:
    """Aggregate per-record energies into the contract snapshot (steps: attribution.steps;
    the inefficiency ranking: attribution.ranking).  The times are repaired here too
    (``timing_checks.repaired``; ``attribute_arrays`` repaired its own reading of them and
    carries the lines)."""
    trace = repaired(trace)[0]
    warnings = list(arrays.warnings)
    kernels: list[KernelRow] = []
    copies: list[CopyRow] = []
    idle_rows: list[IdleRow] = []
    gpus: list[GpuInfo] = []
    measured = 0.0
    have_measured = bool(arrays.devices) and arrays.has_power
    idle_sums = _idle_sums(arrays)
    for r in arrays.devices:
        k, c = _kernel_copy_rows(trace, r)
        kernels += k
        copies += c
        for ci, cause in enumerate(IDLE_CAUSES):
            ns, e_j, count = idle_sums[r.device, ci]
            idle_rows.append(IdleRow(cause=cause, gpu=r.device, time_s=float(ns) * 1e-9,
                                     energy_j=e_j, count=count))
        s = r.sensor
        gpus.append(GpuInfo(r.device, r.name, r.model,
                            SensorInfo(s.field, s.period_ms, s.window_ms, s.lag_ms)))
        mj = counter_energy_j(trace, r.device, arrays.window_start_ns, arrays.window_end_ns)
        if mj is None:
            have_measured = False
            if went_back(trace, r.device, arrays.window_start_ns, arrays.window_end_ns):
                warnings.append(back_warning(r.device))
        else:
            measured += mj
    totals = close_totals(kernels, copies, idle_rows,
                          active_idle_w=float(sum(r.p_idle_w for r in arrays.devices)),
                          measured_j=measured if have_measured else 0.0, warnings=warnings)
    total = totals.energy_j
    meta = {
        "engine": "regress/1",
        "readings": {str(r.device): r.n_readings for r in arrays.devices},
        "sensor_source": {str(r.device): r.sensor.source for r in arrays.devices},
        "response_ms": {str(r.device): r.response_ms for r in arrays.devices},
        # the lag's measured 90 % uncertainty before the intervals' 0.5 ms floor (null: none)
        "lag_profile_ms": {str(r.device): r.lag_profile_ms if math.isfinite(r.lag_profile_ms)
                           else None for r in arrays.devices},
        "slow_response": {str(r.device): list(r.slow_response) for r in arrays.devices},
        "boost_tail_j": {str(r.device): r.boost_tail_j for r in arrays.devices},
        "fit_rms_w": {str(r.device): r.rms_w for r in arrays.devices},
        "active_idle_ci_w": {str(r.device): list(r.p_idle_ci_w) for r in arrays.devices},
        "source": trace.meta.get("source"),
        "gpu_uuids": {str(d.index): d.uuid for d in trace.devices if d.uuid
                      and d.index in {r.device for r in arrays.devices}},
        **run_conditions(trace, arrays.window_start_ns, arrays.window_end_ns),
    }
    kernels_t, copies_t = tuple(rows_by_energy(kernels)), tuple(rows_by_energy(copies))
    ranking = rank(RankInputs(trace, arrays, kernels_t, copies_t, tuple(idle_rows), total),
                   owners)
    steps = step_stats(trace, arrays, sla_ms=sla_ms, step_range=step_range, warnings=warnings)
    extra = {"clusters": [
        {"id": f"cluster{i}", "gpu": r.device, "members": list(comp)}
        for r in arrays.devices for i, comp in enumerate(r.clusters)],
        "clamps": ranking.clamps, "precision_mix": ranking.precision_mix}
    return Snapshot(
        gpus=tuple(gpus),
        window=Window(arrays.window_start_ns, arrays.window_end_ns),
        totals=totals,
        kernels=kernels_t,
        copies=copies_t,
        idle=tuple(idle_rows),
        steps=steps,
        inefficiencies=ranking.items,
        warnings=tuple(warnings),
        meta=meta,
        extra=extra,
    )
