"""Chrome/Perfetto trace-event export: energy-annotated slices and power/clock counter tracks.

Owns :func:`export_trace` (a :class:`~attribution.model.Trace` → trace-event document),
:func:`export_snapshot` (a snapshot, which has no timeline, → one aggregate slice per class)
and :func:`write_perfetto`.  The document is ``{"traceEvents": [...], "displayTimeUnit": "ns",
"metadata": {...}}``; ``ts``/``dur`` are microseconds (floats) since the earliest emitted time
(``metadata.origin_ns`` holds it in Unix-epoch ns), so every ``ts`` is >= 0.

Tracks: one process per GPU (``pid`` = 1 + GPU index), one thread per stream (``tid`` =
stream), plus an ``idle`` thread (``tid`` = :data:`IDLE_TID`) holding the idle gaps named by
cause; counters (``ph`` "C") for board power (W), SM/memory clocks (MHz) and temperature (°C).

Per-record energies come from :mod:`ppwtop.exporters.record_energy` (``metadata.energy_method``
says which method gave them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from attribution.engine.timing_checks import repaired
from attribution.model import F64, PowerField, Trace
from attribution.snapshot import Snapshot
from ppwtop.exporters.record_energy import copy_kind, copy_memory, record_energies
from ppwtop.fileio import write_output

IDLE_TID = 1_000_000
COUNTER_TID = 0

Event = dict[str, Any]


def gpu_pid(device: int) -> int:
    return int(device) + 1


def export_trace(trace: Trace, snapshot: Snapshot | None = None, source: str = "", *,
                 use_engine: bool = True) -> dict[str, Any]:
    """The trace-event document of a trace (energies per :func:`record_energies`).  Its
    times are repaired first as the engine repairs them (``timing_checks.repaired``): the
    engine's per-record energies are for the records it kept, the naive split's idle would
    span a stretched window, and the snapshot split shares by duration."""
    trace, lines = repaired(trace)
    en = record_energies(trace, snapshot, use_engine=use_engine)
    en.notes[:0] = lines
    for name in ("kernel_j", "copy_j", "memset_j", "idle_j"):
        setattr(en, name, np.nan_to_num(getattr(en, name), nan=0.0, posinf=0.0, neginf=0.0))
    times = [b.start_ns for b in (trace.kernels, trace.copies, trace.memsets) if len(b)]
    times += [x.t_ns for x in (trace.power, trace.clocks) if len(x)]
    if len(en.idle_start_ns):
        times.append(en.idle_start_ns)
    origin = int(min(int(t.min()) for t in times)) if times else 0
    events: list[Event] = []
    threads: set[tuple[int, int]] = set()
    devices: set[int] = set()

    def slices(batch: Any, energy_j: F64, names: list[str], cat: str,
               extra: dict[str, Any] | None = None) -> None:
        if len(batch) == 0:
            return
        ts = (batch.start_ns - origin).astype(np.float64) / 1e3
        dur_ns = np.maximum(batch.end_ns - batch.start_ns, 0)
        dur = dur_ns.astype(np.float64) / 1e3
        pw = np.divide(energy_j, dur_ns * 1e-9, out=np.zeros(len(dur)), where=dur_ns > 0)
        dev, stream = batch.device.tolist(), batch.stream.tolist()
        extra_cols = {k: np.asarray(v).tolist() for k, v in (extra or {}).items()}
        for i, (t, d, ej, w) in enumerate(zip(ts.tolist(), dur.tolist(), energy_j.tolist(),
                                              pw.tolist(), strict=True)):
            pid, tid = gpu_pid(dev[i]), int(stream[i])
            args: dict[str, Any] = {"energy_j": ej, "avg_power_w": w}
            for k, col in extra_cols.items():
                args[k] = col[i]
            events.append({"name": names[i], "cat": cat, "ph": "X", "ts": t, "dur": d,
                           "pid": pid, "tid": tid, "args": args})
            threads.add((pid, tid))
            devices.add(int(dev[i]))

    k = trace.kernels
    knames = [trace.strings[i] if 0 <= i < len(trace.strings) else "kernel"
              for i in k.name_id.tolist()]
    slices(k, en.kernel_j, knames, "kernel", {"correlation": k.correlation})
    c = trace.copies
    cnames = [f"Memcpy {copy_kind(kd)} ({copy_memory(s, d)})" for kd, s, d in
              zip(c.kind.tolist(), c.src_mem.tolist(), c.dst_mem.tolist(), strict=True)]
    slices(c, en.copy_j, cnames, "copy", {"bytes": c.bytes})
    ms = trace.memsets
    slices(ms, en.memset_j, ["Memset"] * len(ms), "memset", {"bytes": ms.bytes})

    if len(en.idle_start_ns):
        ts = ((en.idle_start_ns - origin).astype(np.float64) / 1e3).tolist()
        dur = ((en.idle_end_ns - en.idle_start_ns).astype(np.float64) / 1e3).tolist()
        for t, d, dev, cause, ej in zip(ts, dur, en.idle_device.tolist(), en.idle_cause,
                                        en.idle_j.tolist(), strict=True):
            pid = gpu_pid(dev)
            events.append({"name": f"idle.{cause}", "cat": "idle", "ph": "X", "ts": t,
                           "dur": d, "pid": pid, "tid": IDLE_TID,
                           "args": {"energy_j": ej, "cause": cause}})
            threads.add((pid, IDLE_TID))
            devices.add(int(dev))

    events += _power_counters(trace, origin, devices)
    events += _clock_counters(trace, origin, devices)
    names = {d.index: d.name for d in trace.devices}
    meta = _metadata_events(devices, threads, names)
    metadata = {
        "ppwtop_schema": "ppwtop.perfetto/1", "source": source, "origin_ns": origin,
        "energy_method": en.method, "notes": en.notes,
        "kernel_energy_j": float(en.kernel_j.sum()), "copy_energy_j": float(en.copy_j.sum()),
        "memset_energy_j": float(en.memset_j.sum()), "idle_energy_j": float(en.idle_j.sum()),
    }
    return {"traceEvents": meta + events, "displayTimeUnit": "ns", "metadata": metadata}


def _power_counters(trace: Trace, origin: int, devices: set[int]) -> list[Event]:
    p = trace.power
    out: list[Event] = []
    if len(p) == 0:
        return out
    for dev in np.unique(p.device).tolist():
        for field in np.unique(p.field[p.device == dev]).tolist():
            m = (p.device == dev) & (p.field == field)
            try:
                label = PowerField(field).label
            except ValueError:
                label = str(field)
            name = f"power.{label} W"
            ts = ((p.t_ns[m] - origin).astype(np.float64) / 1e3).tolist()
            w = (p.power_mw[m].astype(np.float64) * 1e-3).tolist()
            pid = gpu_pid(int(dev))
            out += [{"name": name, "ph": "C", "ts": t, "pid": pid, "tid": COUNTER_TID,
                     "args": {"power_w": v}} for t, v in zip(ts, w, strict=True)]
            devices.add(int(dev))
    return out


def _clock_counters(trace: Trace, origin: int, devices: set[int]) -> list[Event]:
    c = trace.clocks
    out: list[Event] = []
    if len(c) == 0:
        return out
    ts_all = (c.t_ns - origin).astype(np.float64) / 1e3
    tracks = (("SM clock MHz", "sm_mhz", c.sm_mhz.astype(np.float64), c.sm_mhz >= 0),
              ("memory clock MHz", "mem_mhz", c.mem_mhz.astype(np.float64), c.mem_mhz >= 0),
              ("temperature C", "temp_c", c.temp_c.astype(np.float64), np.isfinite(c.temp_c)))
    for dev in np.unique(c.device).tolist():
        on = c.device == dev
        pid = gpu_pid(int(dev))
        for name, key, values, ok in tracks:
            m = on & ok
            if not m.any():
                continue
            out += [{"name": name, "ph": "C", "ts": t, "pid": pid, "tid": COUNTER_TID,
                     "args": {key: v}} for t, v in zip(ts_all[m].tolist(), values[m].tolist(),
                                                       strict=True)]
            devices.add(int(dev))
    return out


def _metadata_events(devices: set[int], threads: set[tuple[int, int]],
                     names: dict[int, str], thread_names: dict[int, str] | None = None
                     ) -> list[Event]:
    out: list[Event] = []
    for dev in sorted(devices):
        label = f"GPU {dev}" + (f" ({names[dev]})" if names.get(dev) else "")
        out.append({"name": "process_name", "ph": "M", "ts": 0, "pid": gpu_pid(dev), "tid": 0,
                    "args": {"name": label}})
        out.append({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": gpu_pid(dev),
                    "tid": 0, "args": {"sort_index": dev}})
    for pid, tid in sorted(threads):
        if thread_names and tid in thread_names:
            label = thread_names[tid]
        else:
            label = "idle" if tid == IDLE_TID else f"stream {tid}"
        out.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": tid,
                    "args": {"name": label}})
    return out


def export_snapshot(snap: Snapshot, source: str = "") -> dict[str, Any]:
    """A snapshot has classes, not records: one aggregate slice per kernel class / copy class /
    idle cause, laid end to end from the window start on its own track (duration = the class's
    total time), and the power timeline of ``extra["power_series"]`` as a counter when present.
    """
    from ppwtop.report.model import power_series

    events: list[Event] = []
    threads: set[tuple[int, int]] = set()
    devices: set[int] = {g.index for g in snap.gpus}
    tracks = {1: "kernel classes (aggregate)", 2: "copy classes (aggregate)", IDLE_TID: "idle"}
    cursor: dict[tuple[int, int], float] = {}

    def put(name: str, cat: str, gpu: int, tid: int, *, time_s: float, args: dict[str, Any]
            ) -> None:
        pid = gpu_pid(gpu)
        t = cursor.get((pid, tid), 0.0)
        d = max(float(time_s), 0.0) * 1e6
        events.append({"name": name, "cat": cat, "ph": "X", "ts": t, "dur": d, "pid": pid,
                       "tid": tid, "args": args})
        cursor[(pid, tid)] = t + d
        threads.add((pid, tid))
        devices.add(gpu)

    for k in sorted(snap.kernels, key=lambda r: -r.energy_j):
        put(k.name, "kernel", k.gpu, 1, time_s=k.time_s,
            args={"energy_j": k.energy_j, "avg_power_w": k.avg_power_w, "calls": k.calls,
             "dynamic_energy_j": k.dynamic_energy_j,
             "dynamic_energy_ci_j": list(k.dynamic_energy_ci_j), "resolvable": k.resolvable})
    for c in sorted(snap.copies, key=lambda r: -r.energy_j):
        put(f"Memcpy {c.kind} ({c.memory})", "copy", c.gpu, 2, time_s=c.time_s,
            args={"energy_j": c.energy_j, "bytes": c.bytes, "calls": c.calls})
    for i in snap.idle:
        put(f"idle.{i.cause}", "idle", i.gpu, IDLE_TID, time_s=i.time_s,
            args={"energy_j": i.energy_j, "cause": i.cause})
    for s in power_series(snap):
        pid = gpu_pid(s.gpu)
        t0 = s.t_s[0]
        events += [{"name": "power W", "ph": "C", "ts": (t - t0) * 1e6, "pid": pid,
                    "tid": COUNTER_TID, "args": {"power_w": w}}
                   for t, w in zip(s.t_s, s.power_w, strict=True)]
        devices.add(s.gpu)
    names = {g.index: g.name for g in snap.gpus}
    meta = _metadata_events(devices, threads, names, tracks)
    metadata = {
        "ppwtop_schema": "ppwtop.perfetto/1", "source": source, "origin_ns": snap.window.start_ns,
        "energy_method": "snapshot_aggregate",
        "notes": ["slices are per-class aggregates laid end to end, not a timeline"],
        "kernel_energy_j": sum(k.energy_j for k in snap.kernels),
        "copy_energy_j": sum(c.energy_j for c in snap.copies),
        "idle_energy_j": sum(i.energy_j for i in snap.idle),
    }
    return {"traceEvents": meta + events, "displayTimeUnit": "ns", "metadata": metadata}


def write_perfetto(doc: dict[str, Any], out: str | Path) -> None:
    write_output(out, orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY))
