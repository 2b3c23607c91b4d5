"""The engine's snapshot level: rows, totals, steps and a first ranked inefficiency list.

Owns the aggregation of :class:`attribution.engine.build.Arrays` into the contract's
``ppwtop.snapshot/1`` dataclasses: one kernel row per name and GPU, one copy row per
kind/memory/GPU, one idle row per cause/GPU, totals with closure against the energy counter,
ProfilerStep statistics, and inefficiencies (idle causes and pageable copies by joules).
"""

from __future__ import annotations

import numpy as np

from attribution.engine.activity import KERNEL
from attribution.engine.build import Arrays, DeviceResult
from attribution.model import F64, MarkerKind, Trace
from attribution.precision import precision_of
from attribution.snapshot import (
    IDLE_CAUSES,
    CopyRow,
    GpuInfo,
    IdleRow,
    Inefficiency,
    KernelRow,
    Quantiles,
    SensorInfo,
    Snapshot,
    Steps,
    Totals,
    Window,
    rows_by_energy,
)

_FIX = {
    "idle.host_stall": ("overlap host work with GPU work (DataLoader workers, pinned memory, "
                        "prefetch), or batch more work per launch"),
    "idle.sync_wait": ("remove synchronising calls from the hot loop (.item(), .cpu(), "
                       "cudaDeviceSynchronize); use events or non-blocking copies"),
    "idle.launch_gap": "reduce launch overhead: CUDA graphs, torch.compile, fused kernels",
    "idle.other": "inspect the timeline around these gaps (queue bubbles, dependencies)",
}


def _kernel_copy_rows(trace: Trace, r: DeviceResult) -> tuple[list[KernelRow], list[CopyRow]]:
    it = r.items
    n_cls = len(it.labels)
    dur_s = it.duration_ns.astype(np.float64) * 1e-9
    calls = np.bincount(it.cls, minlength=n_cls)
    time_s = np.bincount(it.cls, weights=dur_s, minlength=n_cls)
    energy = np.bincount(it.cls, weights=r.item_energy_j, minlength=n_cls)
    nbytes = np.zeros(n_cls, np.int64)
    from attribution.engine.activity import COPY, MEMSET

    for src, batch in ((COPY, trace.copies), (MEMSET, trace.memsets)):
        m = it.source == src
        if bool(m.any()):
            nbytes += np.bincount(it.cls[m], weights=batch.bytes[it.row[m]].astype(np.float64),
                                  minlength=n_cls).astype(np.int64)
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
                dynamic_energy_ci_j=ci, resolvable=r.class_resolvable[c]))
    return kernels, copies


def _measured_energy_j(trace: Trace, device: int, start_ns: int, end_ns: int) -> float | None:
    e = trace.energy
    m = e.device == device
    if int(m.sum()) < 2:
        return None
    t = e.t_ns[m]
    v = e.energy_mj[m].astype(np.float64)
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    slack = 1_000_000_000
    if t[0] > start_ns + slack or t[-1] < end_ns - slack:
        return None
    ts = (t - start_ns).astype(np.float64)
    a, b = np.interp([0.0, float(end_ns - start_ns)], ts, v)
    return float(b - a) / 1e3


def _steps(trace: Trace, arrays: Arrays, sla_ms: float | None) -> Steps | None:
    mk = trace.markers
    m = (mk.kind == int(MarkerKind.PROFILER_STEP)) & (mk.end_ns > mk.start_ns)
    m &= (mk.start_ns >= arrays.window_start_ns) & (mk.end_ns <= arrays.window_end_ns)
    if not bool(m.any()):
        return None
    s, e = mk.start_ns[m], mk.end_ns[m]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    dur_s = (e - s).astype(np.float64) * 1e-9
    energy = np.zeros(len(s))
    for r in arrays.devices:
        b = r.busy(np.concatenate([s, e]))
        busy = b[len(s):] - b[:len(s)]
        energy += r.p_idle_w * dur_s + busy @ r.group_dp_w
    lat_ms = dur_s * 1e3

    def q(v: F64) -> Quantiles:
        p = np.percentile(v, [50, 95, 99])
        return Quantiles(float(np.mean(v)), float(p[0]), float(p[1]), float(p[2]))

    return Steps(
        count=len(s), energy_j=q(energy), latency_ms=q(lat_ms), items_per_j=None,
        sla_ms=sla_ms,
        sla_compliance=None if sla_ms is None else float(np.mean(lat_ms <= sla_ms)),
        step_energy_j=tuple(float(x) for x in energy),
        step_latency_ms=tuple(float(x) for x in lat_ms),
    )


def _inefficiencies(idle: list[IdleRow], copies: list[CopyRow], total_j: float
                    ) -> tuple[Inefficiency, ...]:
    cand: list[tuple[str, float, str, str, str]] = []
    by_cause: dict[str, list[IdleRow]] = {}
    for row in idle:
        by_cause.setdefault(row.cause, []).append(row)
    for cause, rows in by_cause.items():
        ej = sum(x.energy_j for x in rows)
        t = sum(x.time_s for x in rows)
        n = sum(x.count for x in rows)
        if ej <= 0:
            continue
        mech = f"idle.{cause}"
        cand.append((mech, ej, f"{n} idle gaps, {t:.3f} s with no kernel or copy running",
                     _FIX[mech], "re-run and check this idle cause's time and joules drop"))
    for c in copies:
        if c.memory == "pageable" and c.energy_j > 0:
            cand.append((f"copy:{c.kind}/pageable", c.energy_j,
                         f"{c.calls} pageable {c.kind} copies, {c.bytes} bytes, {c.time_s:.3f} s",
                         "use pinned host memory (pin_memory=True) and non_blocking copies",
                         "re-run and check the copies show as pinned and their time drops"))
    cand.sort(key=lambda x: (-x[1], x[0]))
    return tuple(
        Inefficiency(rank=i + 1, mechanism=m, energy_j=ej,
                     share=ej / total_j if total_j > 0 else 0.0, evidence=ev, fix=fx,
                     owner="unowned", validation=va)
        for i, (m, ej, ev, fx, va) in enumerate(cand)
    )


def build_snapshot(trace: Trace, arrays: Arrays, *, sla_ms: float | None = None) -> Snapshot:
    """Aggregate per-record energies into the contract snapshot."""
    warnings = list(arrays.warnings)
    kernels: list[KernelRow] = []
    copies: list[CopyRow] = []
    idle_rows: list[IdleRow] = []
    gpus: list[GpuInfo] = []
    measured = 0.0
    have_measured = bool(arrays.devices) and arrays.has_power
    idle = arrays.idle
    for r in arrays.devices:
        k, c = _kernel_copy_rows(trace, r)
        kernels += k
        copies += c
        on = idle.device == r.device
        for ci, cause in enumerate(IDLE_CAUSES):
            m = on & (idle.cause == ci)
            idle_rows.append(IdleRow(
                cause=cause, gpu=r.device,
                time_s=float(idle.duration_ns[m].sum()) * 1e-9,
                energy_j=float(arrays.idle_energy_j[m].sum()), count=int(m.sum())))
        s = r.sensor
        gpus.append(GpuInfo(r.device, r.name, r.model,
                            SensorInfo(s.field, s.period_ms, s.window_ms, s.lag_ms)))
        mj = _measured_energy_j(trace, r.device, arrays.window_start_ns, arrays.window_end_ns)
        if mj is None:
            have_measured = False
        else:
            measured += mj
    k_j = float(sum(x.energy_j for x in kernels))
    c_j = float(sum(x.energy_j for x in copies))
    i_j = float(sum(x.energy_j for x in idle_rows))
    total = k_j + c_j + i_j
    if not have_measured:
        measured = 0.0
    closure = (total - measured) / measured if measured > 0 else 0.0
    if measured > 0 and abs(closure) > 0.1:
        warnings.append(f"attributed energy differs from the energy counter by {closure:+.1%}")
    totals = Totals(energy_j=total, kernel_energy_j=k_j, copy_energy_j=c_j, idle_energy_j=i_j,
                    active_idle_w=float(sum(r.p_idle_w for r in arrays.devices)),
                    measured_energy_j=measured, closure_error=closure)
    meta = {
        "engine": "regress/1",
        "readings": {str(r.device): r.n_readings for r in arrays.devices},
        "sensor_source": {str(r.device): r.sensor.source for r in arrays.devices},
        "response_ms": {str(r.device): r.response_ms for r in arrays.devices},
        "slow_response": {str(r.device): list(r.slow_response) for r in arrays.devices},
        "boost_tail_j": {str(r.device): r.boost_tail_j for r in arrays.devices},
        "fit_rms_w": {str(r.device): r.rms_w for r in arrays.devices},
        "active_idle_ci_w": {str(r.device): list(r.p_idle_ci_w) for r in arrays.devices},
        "source": trace.meta.get("source"),
    }
    extra = {"clusters": [
        {"id": f"cluster{i}", "gpu": r.device, "members": list(comp)}
        for r in arrays.devices for i, comp in enumerate(r.clusters)]}
    return Snapshot(
        gpus=tuple(gpus),
        window=Window(arrays.window_start_ns, arrays.window_end_ns),
        totals=totals,
        kernels=tuple(rows_by_energy(kernels)),
        copies=tuple(rows_by_energy(copies)),
        idle=tuple(idle_rows),
        steps=_steps(trace, arrays, sla_ms),
        inefficiencies=_inefficiencies(idle_rows, copies, total),
        warnings=tuple(warnings),
        meta=meta,
        extra=extra,
    )
