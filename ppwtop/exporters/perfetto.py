"""Chrome/Perfetto trace-event export: energy-annotated slices and power/clock counter tracks.

Owns :func:`export_trace` (a :class:`~attribution.model.Trace` → trace-event document),
:func:`export_snapshot` (a snapshot, which has no timeline, → one aggregate slice per class)
and :func:`write_perfetto`.  The document is ``{"traceEvents": [...], "displayTimeUnit": "ns",
"metadata": {...}}``; ``ts``/``dur`` are microseconds (floats) since the earliest emitted time
(``metadata.origin_ns`` holds it in Unix-epoch ns), so every ``ts`` is >= 0.

Tracks: one process per GPU (``pid`` = 1 + GPU index), one thread per stream (``tid`` =
stream), plus an ``idle`` thread (``tid`` = :data:`IDLE_TID`) holding the idle gaps named by
cause; counters (``ph`` "C") for board power (W), SM/memory clocks (MHz) and temperature (°C).

Per-record energy (``metadata.energy_method`` says which was used):

* ``snapshot``: with a snapshot, each record gets its class's energy in proportion to its
  duration (``energy_j × dur / class time``, i.e. the class's average power × duration), so the
  slices of a class add up to the snapshot's number exactly.
* ``engine``: otherwise the attribution engine's per-record energies
  (``attribution.engine.build.attribute_arrays``), when that engine is present and gives a
  non-zero total (on a trace too short for its sensor model it may give none).
* ``power_split``: failing both, the measured board power integrated over each record,
  shared by time between concurrent records; idle gaps get the power of their time.  No
  sensor-lag or filter correction: a rough view, not the engine's attribution.
* ``none``: no power and no snapshot; slices carry no energy.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from attribution.model import (
    F64,
    I64,
    ApiKind,
    CopyKind,
    MemKind,
    PowerField,
    Trace,
)
from attribution.snapshot import IDLE_CAUSES, Snapshot
from ppwtop.errors import InputError

IDLE_TID = 1_000_000
COUNTER_TID = 0
STALL_NS = 1_000_000  # a gap over 1 ms with nothing in flight is a host stall
FIELD_PREFERENCE = (PowerField.METER, PowerField.INSTANT, PowerField.SAMPLES, PowerField.DRAW,
                    PowerField.AVERAGE)

Event = dict[str, Any]


def gpu_pid(device: int) -> int:
    return int(device) + 1


# -- per-record energies ---------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Energies:
    """Energy (J) per kernel/copy/memset row of a trace, and idle gaps with cause and energy."""

    kernel_j: F64
    copy_j: F64
    memset_j: F64
    idle_start_ns: I64
    idle_end_ns: I64
    idle_device: I64
    idle_cause: list[str]
    idle_j: F64
    method: str
    notes: list[str]


def _energies(*parts: Any) -> Energies:
    kj, cj, mj, gs, ge, gd, gc, ij, method, notes = parts
    return Energies(kj, cj, mj, gs, ge, gd, gc, ij, method=method, notes=list(notes))


def record_energies(trace: Trace, snapshot: Snapshot | None = None) -> Energies:
    """Per-record energies by the first method that applies (see the module docstring)."""
    notes: list[str] = []
    if snapshot is None:
        engine = _engine()
        if engine is not None:
            try:
                en = _from_engine(trace, engine)
            except Exception as e:  # the engine is young; never lose the export over it
                notes.append(f"engine failed ({type(e).__name__}: {e}); used power_split")
            else:
                total = float(np.nansum(en.kernel_j) + np.nansum(en.copy_j)
                              + np.nansum(en.idle_j))
                if total > 0 or len(trace.power) == 0:
                    return en
                notes += [*en.notes, "the engine attributed no energy; used power_split"]
    gs, ge, gd, gc = idle_gaps(trace)
    cum = _board_energy(trace)
    if snapshot is not None:
        kj, cj, mj = _from_snapshot(trace, snapshot)
        dur_ns = (ge - gs).astype(np.float64)
        by_cause = {(r.cause, r.gpu): r.energy_j for r in snapshot.idle}
        keys = list(zip(gc, gd.tolist(), strict=True))
        idle_j = _share_by_class(keys, dur_ns, by_cause)
        missing = np.array([k not in by_cause for k in keys], bool)
        idle_j[missing] = dur_ns[missing] * 1e-9 * snapshot.totals.active_idle_w
        return _energies(kj, cj, mj, gs, ge, gd, gc, idle_j, "snapshot", notes)
    if cum is None:
        z = np.zeros
        return _energies(z(len(trace.kernels)), z(len(trace.copies)), z(len(trace.memsets)), gs,
                        ge, gd, gc, z(len(gs)), "none", [*notes, "no power readings"])
    kj, cj, mj = _power_split(trace, cum)
    idle_j = np.zeros(len(gs))
    for dev, f in cum.items():
        m = gd == dev
        idle_j[m] = f(ge[m]) - f(gs[m])
    return _energies(kj, cj, mj, gs, ge, gd, gc, idle_j, "power_split", notes)


def _engine() -> Callable[..., Any] | None:
    for mod in ("attribution.engine", "attribution.engine.build"):
        try:
            fn = getattr(importlib.import_module(mod), "attribute_arrays", None)
        except ImportError:
            continue
        if callable(fn):
            return fn  # type: ignore[no-any-return]
    return None


def _from_engine(trace: Trace, attribute_arrays: Callable[..., Any]) -> Energies:
    a = attribute_arrays(trace)
    idle = a.idle
    causes = [IDLE_CAUSES[int(c)] if 0 <= int(c) < len(IDLE_CAUSES) else "other"
              for c in np.asarray(idle.cause).tolist()]
    return _energies(
        np.asarray(a.kernel_energy_j, np.float64), np.asarray(a.copy_energy_j, np.float64),
        np.asarray(a.memset_energy_j, np.float64), np.asarray(idle.start_ns, np.int64),
        np.asarray(idle.end_ns, np.int64), np.asarray(idle.device, np.int64), causes,
        np.asarray(a.idle_energy_j, np.float64), "engine", list(a.warnings))


def _from_snapshot(trace: Trace, snap: Snapshot) -> tuple[F64, F64, F64]:
    """Each record: its class's snapshot energy × (its duration / the class's total duration)."""
    k = trace.kernels
    kj = np.zeros(len(k))
    if len(k):
        energy = {(r.name, r.gpu): r.energy_j for r in snap.kernels}
        names = np.array([trace.strings[i] if i >= 0 else "" for i in k.name_id.tolist()],
                         dtype=object)
        kj = _share_by_class(list(zip(names.tolist(), k.device.tolist(), strict=True)),
                             (k.end_ns - k.start_ns).astype(np.float64), energy)
    c = trace.copies
    cj = np.zeros(len(c))
    if len(c):
        energy_c = {(r.kind, r.memory, r.gpu): r.energy_j for r in snap.copies}
        keys = [(_copy_kind(kd), _copy_memory(s, d), dev) for kd, s, d, dev in zip(
            c.kind.tolist(), c.src_mem.tolist(), c.dst_mem.tolist(), c.device.tolist(),
            strict=True)]
        cj = _share_by_class(keys, (c.end_ns - c.start_ns).astype(np.float64), energy_c)
    return kj, cj, np.zeros(len(trace.memsets))


def _share_by_class(keys: list[Any], dur_ns: F64, energy: dict[Any, float]) -> F64:
    uniq: dict[Any, int] = {}
    cls = np.fromiter((uniq.setdefault(key, len(uniq)) for key in keys), np.int64, len(keys))
    class_time = np.bincount(cls, weights=dur_ns, minlength=len(uniq))
    class_e = np.array([energy.get(key, 0.0) for key in uniq], np.float64)
    per_ns = np.divide(class_e, class_time, out=np.zeros(len(uniq)), where=class_time > 0)
    out: F64 = per_ns[cls] * dur_ns
    return out


def _copy_kind(kind: int) -> str:
    try:
        return CopyKind(kind).label
    except ValueError:
        return "other"


def _copy_memory(src: int, dst: int) -> str:
    """The host-side memory of a copy (what the snapshot's ``memory`` column names)."""
    for m in (src, dst):
        try:
            mk = MemKind(m)
        except ValueError:
            continue
        if mk in (MemKind.PAGEABLE, MemKind.PINNED, MemKind.MANAGED):
            return mk.label
    try:
        return MemKind(dst).label
    except ValueError:
        return "unknown"


def _board_energy(trace: Trace) -> dict[int, Callable[[I64], F64]] | None:
    """Per device, E(t): board energy (J) from the first reading, power linearly interpolated."""
    p = trace.power
    if len(p) == 0:
        return None
    out: dict[int, Callable[[I64], F64]] = {}
    for dev in np.unique(p.device).tolist():
        on_dev = p.device == dev
        fields = set(p.field[on_dev].tolist())
        field = next((f for f in FIELD_PREFERENCE if int(f) in fields), None)
        if field is None:
            continue
        m = on_dev & (p.field == int(field))
        t, idx = np.unique(p.t_ns[m], return_index=True)
        w = p.power_mw[m][idx].astype(np.float64) * 1e-3
        out[int(dev)] = _integral(t, w)
    return out or None


def _integral(t_ns: I64, power_w: F64) -> Callable[[I64], F64]:
    """E(t) for a piecewise-linear power curve held constant outside the readings."""
    dt_s = np.diff(t_ns).astype(np.float64) * 1e-9
    cum = np.r_[0.0, np.cumsum(0.5 * (power_w[1:] + power_w[:-1]) * dt_s)]
    slope = np.r_[np.diff(power_w) / np.where(dt_s > 0, dt_s, 1.0), 0.0]

    def energy(q_ns: I64) -> F64:
        q = np.asarray(q_ns, np.int64)
        i = np.clip(np.searchsorted(t_ns, q, side="right") - 1, 0, len(t_ns) - 1)
        d = (q - t_ns[i]).astype(np.float64) * 1e-9
        s = np.where((q < t_ns[0]) | (q >= t_ns[-1]), 0.0, slope[i])
        out: F64 = cum[i] + power_w[i] * d + 0.5 * s * d * d
        return out

    return energy


def _power_split(trace: Trace, cum: dict[int, Callable[[I64], F64]]) -> tuple[F64, F64, F64]:
    batches: tuple[Any, ...] = (trace.kernels, trace.copies, trace.memsets)
    outs = [np.zeros(len(b)) for b in batches]
    for dev, energy in cum.items():
        masks = [b.device == dev for b in batches]
        s = np.concatenate([b.start_ns[m] for b, m in zip(batches, masks, strict=True)])
        e = np.concatenate([np.maximum(b.end_ns[m], b.start_ns[m])
                            for b, m in zip(batches, masks, strict=True)])
        if len(s) == 0:
            continue
        bounds = np.unique(np.r_[s, e])
        delta = np.zeros(len(bounds), np.int64)
        np.add.at(delta, np.searchsorted(bounds, s), 1)
        np.add.at(delta, np.searchsorted(bounds, e), -1)
        active = np.cumsum(delta)[:-1]
        seg_j = np.diff(energy(bounds))
        share = np.divide(seg_j, active, out=np.zeros(len(seg_j)), where=active > 0)
        c = np.r_[0.0, np.cumsum(share)]
        item_j = c[np.searchsorted(bounds, e)] - c[np.searchsorted(bounds, s)]
        lo = 0
        for out, m in zip(outs, masks, strict=True):
            n = int(m.sum())
            out[m] = item_j[lo:lo + n]
            lo += n
    return outs[0], outs[1], outs[2]


def idle_gaps(trace: Trace) -> tuple[I64, I64, I64, list[str]]:
    """Idle gaps (start, end, device, cause): the engine's classifier
    (``attribution.idle.idle_intervals`` over its trace window) when present, else
    :func:`simple_idle_gaps`."""
    try:
        from attribution.engine.build import trace_window
        from attribution.idle import idle_intervals
    except ImportError:
        return simple_idle_gaps(trace)
    win = trace_window(trace)
    if win is None:
        return simple_idle_gaps(trace)
    iv = idle_intervals(trace, win[0], win[1])
    causes = [IDLE_CAUSES[int(c)] if 0 <= int(c) < len(IDLE_CAUSES) else "other"
              for c in iv.cause.tolist()]
    return (np.asarray(iv.start_ns, np.int64), np.asarray(iv.end_ns, np.int64),
            np.asarray(iv.device, np.int64), causes)


def simple_idle_gaps(trace: Trace) -> tuple[I64, I64, I64, list[str]]:
    """Gaps between busy intervals per device (inside its first..last item) and their cause:
    ``sync_wait`` when a synchronising API call spans the gap, else ``host_stall`` over 1 ms,
    else ``launch_gap``."""
    batches: tuple[Any, ...] = (trace.kernels, trace.copies, trace.memsets)
    dev_all = np.concatenate([b.device for b in batches]).astype(np.int64)
    s_all = np.concatenate([b.start_ns for b in batches])
    e_all = np.concatenate([b.end_ns for b in batches])
    apis = trace.apis
    sync = apis.kind == ApiKind.SYNC
    sync_s, sync_e = apis.start_ns[sync], apis.end_ns[sync]
    order = np.argsort(sync_s, kind="stable")
    sync_s, sync_maxe = sync_s[order], np.maximum.accumulate(sync_e[order]) if len(order) else \
        sync_e[order]
    gs_l, ge_l, gd_l = [], [], []
    for dev in np.unique(dev_all).tolist():
        m = dev_all == dev
        o = np.argsort(s_all[m], kind="stable")
        s, e = s_all[m][o], e_all[m][o]
        run_end = np.maximum.accumulate(e)
        gap = s[1:] > run_end[:-1]
        gs_l.append(run_end[:-1][gap])
        ge_l.append(s[1:][gap])
        gd_l.append(np.full(int(gap.sum()), dev, np.int64))
    if not gs_l:
        z = np.empty(0, np.int64)
        return z, z.copy(), z.copy(), []
    gs, ge, gd = np.concatenate(gs_l), np.concatenate(ge_l), np.concatenate(gd_l)
    cause = np.where(ge - gs > STALL_NS, "host_stall", "launch_gap").astype(object)
    if len(sync_s):
        j = np.searchsorted(sync_s, gs, side="right") - 1
        spans = (j >= 0) & (sync_maxe[np.clip(j, 0, None)] >= ge)
        cause[spans] = "sync_wait"
    return gs, ge, gd, [str(c) for c in cause.tolist()]


# -- events ----------------------------------------------------------------------------------


def export_trace(trace: Trace, snapshot: Snapshot | None = None,
                 source: str = "") -> dict[str, Any]:
    """The trace-event document of a trace (energies per :func:`record_energies`)."""
    en = record_energies(trace, snapshot)
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
    cnames = [f"Memcpy {_copy_kind(kd)} ({_copy_memory(s, d)})" for kd, s, d in
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
    try:
        Path(out).write_bytes(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY))
    except OSError as e:
        raise InputError(out, f"cannot write ({e.strerror or e})") from None
