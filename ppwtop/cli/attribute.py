"""``ppwtop attribute``: offline attribution of a trace (+ power log) to a snapshot JSON.

Owns the command line, loading and merging the inputs (and the owners file the ranking
uses), the time-zone mix-up rule (a power log that overlaps the trace only after a whole
quarter-hour shift is shifted, with a warning), and writing the snapshot.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attribution.engine import attribute
from attribution.engine.build import trace_window
from attribution.idle import work_devices
from attribution.model import POLL_TIME_KEY, Trace
from attribution.presets import preset_for_name
from ppwtop.cli.common import (
    gpu_list,
    parser,
    positive_float,
    print_warnings,
    require_power_for_gpus,
    utf8_text,
)
from ppwtop.cli.diff import read_owners
from ppwtop.errors import InputError
from ppwtop.importers import import_notes, load_power, load_trace
from ppwtop.snapshot_io import check_output, write_snapshot

QUARTER_NS = 15 * 60 * 1_000_000_000
MAX_SHIFT_QUARTERS = 14 * 4


def _overlap_ns(t_ns: np.ndarray, win: tuple[int, int], shifts: np.ndarray) -> np.ndarray:
    """Overlap of the power log's span, shifted by each shift, with the trace window."""
    lo, hi = max(int(t_ns.min()), -(2**62)), min(int(t_ns.max()), 2**62)  # + shift: no wrap
    a = np.maximum(lo + shifts, win[0])
    b = np.minimum(hi + shifts, win[1])
    out: np.ndarray = np.maximum(a, b) - a  # b - a wrapped past int64 for a log in 1700
    return out


def tz_shift_ns(power: Trace, win: tuple[int, int]) -> int:
    """0 if the power log overlaps the trace; else the quarter-hour shift that overlaps most.

    Raises ValueError when no shift up to ±14 h gives any overlap."""
    t = power.power.t_ns if len(power.power) else power.energy.t_ns
    if len(t) == 0:
        raise ValueError("holds no power readings")
    if _overlap_ns(t, win, np.array([0], np.int64))[0] > 0:
        return 0
    q = np.arange(-MAX_SHIFT_QUARTERS, MAX_SHIFT_QUARTERS + 1, dtype=np.int64)
    ov = _overlap_ns(t, win, q * QUARTER_NS)
    if not bool((ov > 0).any()):
        raise ValueError("does not overlap the trace in time (even after a time-zone shift)")
    best = ov.max()
    cands = q[ov == best]
    return int(cands[np.argmin(np.abs(cands))] * QUARTER_NS)


def _shift_power(power: Trace, delta_ns: int) -> Trace:
    out = Trace(strings=power.strings, devices=list(power.devices), meta=dict(power.meta))
    for f in Trace.BATCH_FIELDS:
        setattr(out, f, getattr(power, f).shifted(delta_ns))
    return out


def fill_device_names(trace: Trace, power: Trace) -> list[str]:
    """Give trace devices without a name the power log's name for the same index (the CSV's
    ``name`` column picks the preset when the trace has no ``deviceProperties``); a line for
    each device the two name as different models (a log of another machine?)."""
    names = {d.index: d.name for d in power.devices if d.name}
    lines = []
    for d in trace.devices:
        other = names.get(d.index)
        if not (d.name and other):
            continue
        mine, theirs = preset_for_name(d.name), preset_for_name(other)
        if mine is not None and theirs is not None and mine.key != theirs.key:
            lines.append(f"GPU {d.index}: the trace names it {d.name!r} ({mine.key}) but the "
                         f"power log {other!r} ({theirs.key}): a log of another machine? The "
                         "split of readings that do not follow the trace is not to be trusted")
    trace.devices = [dataclasses.replace(d, name=names.get(d.index, d.name)) if not d.name
                     else d for d in trace.devices]
    return lines


def remap_gpus(power: Trace, to_trace: dict[int, int], path: str) -> Trace:
    """The power log with its GPU ``g`` numbered ``to_trace[g]``, as the trace numbers it
    (``--power-gpus``: the job's ``CUDA_VISIBLE_DEVICES``; or :func:`gpus_by_uuid`); its
    other GPUs dropped.  A GPU the log does not have is an input error naming those it has."""
    batches = [getattr(power, f) for f in ("power", "energy", "clocks")]
    has = sorted(set().union(*(np.unique(b.device).astype(int).tolist() for b in batches)))
    if any(g < 0 for g in has):
        raise InputError(path, "--power-gpus: the log has no GPU index column (one GPU's log "
                               "needs no mapping)")
    missing = [g for g in to_trace if g not in has]
    if missing:
        raise InputError(path, f"--power-gpus: the log has no GPU {missing[0]} (it logs GPU"
                               f"{'s' if len(has) != 1 else ''} "
                               f"{', '.join(map(str, has)) or 'none'})")
    table = np.full(max(has) + 1, -1, np.int16)
    table[list(to_trace)] = list(to_trace.values())
    out = Trace(strings=power.strings, meta=dict(power.meta), devices=[
        dataclasses.replace(d, index=int(table[d.index])) for d in power.devices
        if 0 <= d.index < len(table) and table[d.index] >= 0])
    for f in Trace.BATCH_FIELDS:
        b = getattr(power, f)
        if f in ("power", "energy", "clocks") and len(b):
            kept = b.take(table[b.device] >= 0)
            b = dataclasses.replace(kept, device=table[kept.device])
        setattr(out, f, b)
    return out


def _uuid_key(uuid: str) -> str:
    """NVML and nvidia-smi write ``GPU-cf6b97c0-…``, Nsight Systems ``cf6b97c0-…``."""
    u = uuid.strip().lower()
    return u[4:] if u.startswith("gpu-") else u


def gpus_by_uuid(trace: Trace, power: Trace) -> dict[int, int] | None:
    """The log's GPU of each trace GPU with work, matched by UUID, where every such GPU has a
    UUID on both sides and some log index differs from the trace's (a job under
    ``CUDA_VISIBLE_DEVICES`` beside a log with a ``uuid`` column); None otherwise."""
    log = {_uuid_key(d.uuid): d.index for d in power.devices if _uuid_key(d.uuid)}
    mine = {d.index: _uuid_key(d.uuid) for d in trace.devices if _uuid_key(d.uuid)}
    worked = work_devices(trace)
    if not worked or any(mine.get(i, "") not in log for i in worked):
        return None
    to_trace = {log[mine[i]]: i for i in worked}
    return None if all(g == i for g, i in to_trace.items()) else to_trace


def merge_power(trace: Trace, power: Trace, path: str, *, tz: str | None = None,
                gpus: list[int] | None = None) -> tuple[Trace, list[str]]:
    """``trace`` merged with the power log read from ``path``, as ``ppwtop attribute`` and
    ``export`` merge it: its GPUs renumbered as ``gpus`` says, or by UUID where both sides
    name them and the numbering differs (:func:`remap_gpus`, :func:`gpus_by_uuid`),
    shifted by whole quarter hours when only that overlaps the trace (a warning says so),
    the log's device names given to unnamed trace devices, and the trace's own readings of a
    kind the log has (a recording's power) replaced by the log's (a warning says so: merged,
    the same readings counted twice)."""
    warnings: list[str] = []
    to_trace = ({g: i for i, g in enumerate(gpus)} if gpus is not None
                else gpus_by_uuid(trace, power))
    if to_trace is not None:
        if gpus is None:
            others = sorted({d.index for d in power.devices} - set(to_trace))
            warnings.append("power log's GPUs matched to the trace's by UUID: " + ", ".join(
                f"its GPU {g} is GPU {i}" for g, i in sorted(to_trace.items(),
                                                          key=lambda gi: gi[1]))
                + (f" (its GPU{'s' if len(others) > 1 else ''} "
                   f"{', '.join(map(str, others))} left out)" if others else ""))
        power = remap_gpus(power, to_trace, path)
    win = trace_window(trace)
    if win is not None:
        try:
            shift = tz_shift_ns(power, win)
        except ValueError as e:
            raise InputError(path, str(e)) from None
        if shift:
            hint = ("pass --power-tz" if tz is None else
                    f"--power-tz {tz} may not be the zone the log was written in")
            warnings.append(f"power log {path} shifted by {shift / 3.6e12:+.2f} h to "
                            f"overlap the trace (time-zone mix-up? {hint})")
            power = _shift_power(power, shift)
    own = [f for f in ("power", "energy", "clocks")
           if len(getattr(trace, f)) and len(getattr(power, f))]
    if own:  # two copies of the same readings would count twice; two sources would mix
        warnings.append(f"the trace's own {'/'.join(own)} readings are replaced by {path}'s")
        meta = {k: v for k, v in trace.meta.items() if k != POLL_TIME_KEY}
        trace = dataclasses.replace(trace, meta=meta, **{
            f: type(getattr(trace, f)).empty() for f in own})
    warnings += fill_device_names(trace, power)
    return trace.merged_with(power), warnings


def main(argv: list[str]) -> int:
    p = parser("attribute", "Offline attribution of a trace (+ power log) to a snapshot JSON.")
    p.add_argument("--trace", required=True, metavar="FILE",
                   help="Kineto JSON(.gz), Nsight Systems SQLite, or a ppwtop recording")
    p.add_argument("--power", metavar="FILE",
                   help="nvidia-smi CSV or ppwtop recording (optional if the trace has power)")
    p.add_argument("--gpu", metavar="MODEL", help="sensor/power preset (a100, h100, ...)")
    p.add_argument("--power-tz", metavar="TZ", type=utf8_text,
                   help="time zone of naive CSV timestamps")
    p.add_argument("--power-gpus", metavar="LIST", type=gpu_list,
                   help="the power log's GPU index of the trace's GPU 0, 1, ... (the job's "
                        "CUDA_VISIBLE_DEVICES, e.g. 3 or 3,5); the log's other GPUs dropped")
    p.add_argument("--owners", metavar="FILE",
                   help="owners file (TOML: name/NVTX-range patterns -> owner) for the ranking")
    p.add_argument("--sla-ms", type=positive_float, metavar="X", help="step latency SLA")
    p.add_argument("--step-range", metavar="NAME", type=utf8_text,
                   help="steps are the NVTX / user-annotation ranges of this name (glob ok) "
                        "instead of mark_step / ProfilerStep#N")
    p.add_argument("-o", "--output", required=True, metavar="SNAPSHOT.json")
    a = p.parse_args(argv)
    if a.gpu is not None:
        from attribution.presets import get_preset

        try:
            get_preset(a.gpu)
        except KeyError as e:
            from ppwtop.cli.common import UsageError

            raise UsageError(f"ppwtop attribute: --gpu: {e.args[0]}") from None
    require_power_for_gpus("attribute", a.power_gpus, a.power)
    check_output(a.output, [a.trace, a.power, a.owners])
    # (before the run, which may take minutes)
    owners = read_owners(a.owners) if a.owners is not None else None
    trace = load_trace(a.trace)
    warnings: list[str] = import_notes(a.trace, trace)
    if a.power is not None:
        power = load_power(a.power, tz=a.power_tz)
        warnings += import_notes(a.power, power)
        trace, merged = merge_power(trace, power, a.power, tz=a.power_tz, gpus=a.power_gpus)
        warnings += merged
    snap = attribute(trace, gpu=a.gpu, sla_ms=a.sla_ms, step_range=a.step_range, owners=owners)
    meta = dict(snap.meta)
    meta.update({"trace": str(a.trace), "power": a.power, "owners": a.owners,
                 "power_tz": a.power_tz, "step_range": a.step_range})
    if a.power_gpus is not None:
        meta["power_gpus"] = a.power_gpus
    snap = dataclasses.replace(snap, warnings=tuple(warnings) + snap.warnings, meta=meta)
    print_warnings(snap.warnings)
    write_snapshot(snap, a.output)
    t = snap.totals
    print(f"{a.output}: {t.energy_j:.1f} J over {snap.window.duration_s:.2f} s "
          f"(kernels {t.kernel_energy_j:.1f} J, copies {t.copy_energy_j:.1f} J, "
          f"idle {t.idle_energy_j:.1f} J; {len(snap.kernels)} kernel rows)")
    return 0
