"""Per-record energies for the timeline exporters: one joule figure per kernel, copy, memset
and idle gap of a :class:`~attribution.model.Trace`.

Owns :func:`record_energies` and the three ways it can get them (``Energies.method``):

* ``snapshot``: with a snapshot, each record gets its class's energy in proportion to its
  duration (``energy_j × dur / class time``, i.e. the class's average power × duration), so the
  records of a class add up to the snapshot's number exactly.
* ``engine``: otherwise the attribution engine's per-record energies
  (:func:`attribution.engine.build.attribute_arrays`), when it gives a non-zero total (on a
  trace too short for its sensor model it may give none).
* ``power_split``: failing both (or when asked for), the measured board power integrated over
  each record and shared by time between concurrent records; idle gaps get the power of their
  time.  No sensor-lag or filter correction: a rough view, not the engine's attribution.
* ``none``: no power and no snapshot; records carry no energy.

Idle gaps always come from the engine's classifier (:func:`attribution.idle.idle_intervals`
over the engine's trace window), so an exported timeline names the same causes as a snapshot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from attribution.engine.build import attribute_arrays, trace_window
from attribution.engine.timebase import one_per_stamp, usable_power
from attribution.idle import idle_intervals
from attribution.model import F64, I64, CopyKind, MemKind, PowerField, Trace
from attribution.snapshot import IDLE_CAUSES, Snapshot

FIELD_PREFERENCE = (PowerField.METER, PowerField.INSTANT, PowerField.SAMPLES, PowerField.DRAW,
                    PowerField.AVERAGE)
"""Which power signal ``power_split`` integrates when a device has several."""


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


def record_energies(trace: Trace, snapshot: Snapshot | None = None, *,
                    use_engine: bool = True) -> Energies:
    """Per-record energies by the first method that applies (see the module docstring)."""
    notes: list[str] = []
    if snapshot is None and use_engine:
        en = _from_engine(trace)
        total = float(np.nansum(en.kernel_j) + np.nansum(en.copy_j) + np.nansum(en.idle_j))
        if total > 0 or len(trace.power) == 0:
            return en
        notes += [*en.notes, "the engine attributed no energy; used power_split"]
    gs, ge, gd, gc = idle_gaps(trace)
    if snapshot is not None:
        kj, cj, mj = _from_snapshot(trace, snapshot)
        dur_ns = (ge - gs).astype(np.float64)
        by_cause = {(r.cause, r.gpu): r.energy_j for r in snapshot.idle}
        keys = list(zip(gc, gd.tolist(), strict=True))
        idle_j = _share_by_class(keys, dur_ns, by_cause)
        missing = np.array([k not in by_cause for k in keys], bool)
        idle_j[missing] = dur_ns[missing] * 1e-9 * snapshot.totals.active_idle_w
        return Energies(kj, cj, mj, gs, ge, gd, gc, idle_j, "snapshot", notes)
    cum = _board_energy(trace)
    if cum is None:
        z = np.zeros
        return Energies(z(len(trace.kernels)), z(len(trace.copies)), z(len(trace.memsets)), gs,
                        ge, gd, gc, z(len(gs)), "none", [*notes, "no power readings"])
    kj, cj, mj = _power_split(trace, cum)
    idle_j = np.zeros(len(gs))
    for dev, f in cum.items():
        m = gd == dev
        idle_j[m] = f(ge[m]) - f(gs[m])
    return Energies(kj, cj, mj, gs, ge, gd, gc, idle_j, "power_split", notes)


def idle_gaps(trace: Trace) -> tuple[I64, I64, I64, list[str]]:
    """Idle gaps (start, end, device, cause) as the engine classifies them; none for a trace
    with no GPU activity, nor on GPUs it only declares (as the engine: nothing ran there)."""
    win = trace_window(trace)
    nothing = not any(len(b) for b in (trace.kernels, trace.copies, trace.memsets, trace.power))
    if win is None or nothing:
        z = np.empty(0, np.int64)
        return z, z.copy(), z.copy(), []
    iv = idle_intervals(trace, win[0], win[1])
    return (np.asarray(iv.start_ns, np.int64), np.asarray(iv.end_ns, np.int64),
            np.asarray(iv.device, np.int64), _cause_names(iv.cause))


def _cause_names(codes: Any) -> list[str]:
    return [IDLE_CAUSES[c] if 0 <= c < len(IDLE_CAUSES) else "other"
            for c in np.asarray(codes, np.int64).tolist()]


def _from_engine(trace: Trace) -> Energies:
    a = attribute_arrays(trace)
    idle = a.idle
    return Energies(
        np.asarray(a.kernel_energy_j, np.float64), np.asarray(a.copy_energy_j, np.float64),
        np.asarray(a.memset_energy_j, np.float64), np.asarray(idle.start_ns, np.int64),
        np.asarray(idle.end_ns, np.int64), np.asarray(idle.device, np.int64),
        _cause_names(idle.cause), np.asarray(a.idle_energy_j, np.float64), "engine",
        list(a.warnings))


def _from_snapshot(trace: Trace, snap: Snapshot) -> tuple[F64, F64, F64]:
    """Each record: its class's snapshot energy × (its duration / the class's total duration)."""
    k = trace.kernels
    kj = np.zeros(len(k))
    if len(k):
        energy = {(r.name, r.gpu): r.energy_j for r in snap.kernels}
        names = [trace.strings[i] if i >= 0 else "" for i in k.name_id.tolist()]
        kj = _share_by_class(list(zip(names, k.device.tolist(), strict=True)),
                             (k.end_ns - k.start_ns).astype(np.float64), energy)
    c = trace.copies
    cj = np.zeros(len(c))
    if len(c):
        energy_c = {(r.kind, r.memory, r.gpu): r.energy_j for r in snap.copies}
        keys = [(copy_kind(kd), copy_memory(s, d), dev) for kd, s, d, dev in zip(
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


def copy_kind(kind: int) -> str:
    """The snapshot's ``kind`` label of a copy (``other`` for a code it does not know)."""
    try:
        return CopyKind(kind).label
    except ValueError:
        return "other"


def copy_memory(src: int, dst: int) -> str:
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
    # the readings as the engine takes them (timebase.one_per_stamp: the unusable dropped --
    # negative, not finite, past any board's draw -- and those sharing a stamp averaged)
    usable = usable_power(p.power_mw.astype(np.float64) * 1e-3)
    for dev in np.unique(p.device[usable]).tolist():
        on_dev = usable & (p.device == dev)
        fields = set(p.field[on_dev].tolist())
        field = next((f for f in FIELD_PREFERENCE if int(f) in fields), None)
        if field is None:
            continue
        m = on_dev & (p.field == int(field))
        out[int(dev)] = _integral(*one_per_stamp(p.t_ns[m], p.power_mw[m] * 1e-3))
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
    """Each segment's board energy shared equally by the records running in it."""
    batches: tuple[Any, ...] = (trace.kernels, trace.copies, trace.memsets)
    outs = [np.zeros(len(b)) for b in batches]
    for dev, energy in cum.items():
        masks = [b.device == dev for b in batches]
        s = np.concatenate([b.start_ns[m] for b, m in zip(batches, masks, strict=True)])
        e = np.concatenate([b.end_ns[m] for b, m in zip(batches, masks, strict=True)])
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
