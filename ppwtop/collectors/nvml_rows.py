"""What the NVML sampler keeps between polls, and what its rows say (no ``pynvml`` here).

Owns the pure parts of :mod:`ppwtop.collectors.nvml`: the ``CUDA_VISIBLE_DEVICES`` parser,
the per-field de-duplication state (``fresh`` readings, cadence statistics), the row buffer a
poll appends to and ``drain`` swaps out as columnar batches, and the cadence report of
``characterize`` (scripts/gpu_check.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from attribution.model import ClockBatch, EnergyBatch, PowerBatch, PowerField, Trace


def parse_cuda_visible_devices(
    value: str, uuids: Sequence[str]
) -> tuple[list[int], list[str]]:
    """NVML indices named by a ``CUDA_VISIBLE_DEVICES`` value, and notes.

    Entries are integers or (prefixes of) ``GPU-`` UUIDs; like CUDA, the list ends at the first
    entry that names no device (or repeats one).  MIG instances are not sampled (their power
    is the parent board's).
    """
    out: list[int] = []
    notes: list[str] = []
    for raw in value.split(","):
        e = raw.strip()
        if not e:
            break
        if re.fullmatch(r"-?\d+", e):
            i = int(e)
            idx = i if 0 <= i < len(uuids) else None
        elif e.startswith("MIG-"):
            notes.append(f"CUDA_VISIBLE_DEVICES entry {e!r} is a MIG instance: not sampled "
                         "(NVML reports power for the whole board)")
            break
        else:
            want = e if e.startswith("GPU-") else "GPU-" + e
            hits = [k for k, u in enumerate(uuids) if u.startswith(want)]
            idx = hits[0] if len(hits) == 1 else None
        if idx is None or idx in out:
            notes.append(f"CUDA_VISIBLE_DEVICES entry {e!r} names no (new) GPU: list ends there")
            break
        out.append(idx)
    return out, notes


class FieldState:
    """De-duplication state and cadence statistics of one power field on one GPU."""

    __slots__ = ("first_us", "last_mw", "last_us", "n_fresh", "n_repeat", "n_rows")

    def __init__(self) -> None:
        self.n_rows = 0
        self.n_fresh = 0
        self.n_repeat = 0  # fresh rows whose value equals the previous fresh value
        self.first_us = -1
        self.last_us = -1
        self.last_mw = -1

    def add(self, ts_us: int, mw: int, now_ns: int) -> tuple[int, bool]:
        """``(t_ns, fresh)`` for a reading: fresh iff its own timestamp is new (or, with no
        timestamp, iff its value changed; then ``t_ns`` is the poll time)."""
        self.n_rows += 1
        if ts_us <= 0:
            fresh = mw != self.last_mw
            t_ns = now_ns
        else:
            fresh = ts_us != self.last_us
            t_ns = ts_us * 1000
            if fresh:
                self.first_us = ts_us if self.first_us < 0 else self.first_us
                self.last_us = ts_us
        if fresh:
            self.n_fresh += 1
            self.n_repeat += int(mw == self.last_mw)
        self.last_mw = mw
        return t_ns, fresh

    def describe(self) -> dict[str, Any]:
        span_ms = (self.last_us - self.first_us) / 1e3
        return {
            "rows": self.n_rows, "fresh": self.n_fresh, "fresh_same_value": self.n_repeat,
            "mean_period_ms": span_ms / (self.n_fresh - 1) if self.n_fresh > 1 else None,
        }

    def looks_like_query_time(self) -> bool:
        """Timestamps that advance on nearly every poll while the value mostly repeats are
        probably the driver's query time, not the sensor's publication time."""
        return (self.n_rows >= 50 and self.n_fresh > 0.9 * self.n_rows
                and self.n_repeat > 0.5 * self.n_fresh)


class RowBuffer:
    """Row buffers appended by polls and swapped out by drain."""

    def __init__(self) -> None:
        self.p_t: list[int] = []
        self.p_mw: list[int] = []
        self.p_dev: list[int] = []
        self.p_field: list[int] = []
        self.p_fresh: list[bool] = []
        self.e_t: list[int] = []
        self.e_mj: list[int] = []
        self.e_dev: list[int] = []
        self.c_t: list[int] = []
        self.c_dev: list[int] = []
        self.c_sm: list[int] = []
        self.c_mem: list[int] = []
        self.c_temp: list[float] = []
        self.c_reasons: list[int] = []

    def power(self, t_ns: int, mw: int, dev: int, field: PowerField, fresh: bool) -> None:
        self.p_t.append(t_ns)
        self.p_mw.append(mw)
        self.p_dev.append(dev)
        self.p_field.append(int(field))
        self.p_fresh.append(fresh)

    def extend(self, other: RowBuffer) -> None:
        for k, v in vars(other).items():
            getattr(self, k).extend(v)

    def to_batches(self) -> tuple[PowerBatch, EnergyBatch, ClockBatch]:
        """The rows as columnar batches, each sorted by time."""
        power = PowerBatch.from_columns({
            "t_ns": np.asarray(self.p_t, np.int64), "power_mw": np.asarray(self.p_mw, np.int64),
            "device": np.asarray(self.p_dev, np.int16), "field": np.asarray(self.p_field, np.uint8),
            "fresh": np.asarray(self.p_fresh, np.bool_),
        }).sorted_by("t_ns")
        energy = EnergyBatch.from_columns({
            "t_ns": np.asarray(self.e_t, np.int64), "energy_mj": np.asarray(self.e_mj, np.int64),
            "device": np.asarray(self.e_dev, np.int16),
        }).sorted_by("t_ns")
        clocks = ClockBatch.from_columns({
            "t_ns": np.asarray(self.c_t, np.int64), "device": np.asarray(self.c_dev, np.int16),
            "sm_mhz": np.asarray(self.c_sm, np.int32), "mem_mhz": np.asarray(self.c_mem, np.int32),
            "temp_c": np.asarray(self.c_temp, np.float32),
            "clock_reasons": np.asarray(self.c_reasons, np.uint64),
        }).sorted_by("t_ns")
        return power, energy, clocks


def _median_ms(t_ns: Any) -> float | None:
    d = np.diff(np.asarray(t_ns, dtype=np.int64))
    return float(np.median(d) / 1e6) if len(d) else None


def cadence_report(tr: Trace) -> list[dict[str, Any]]:
    """Per GPU, what a sampler's rows say about the board's NVML: spacing of fresh instant
    timestamps (T), the share of polls that saw a new one, samples-buffer spacing, the
    energy counter's update period and its ratio to mean instant power × time."""
    out: list[dict[str, Any]] = []
    p, e = tr.power, tr.energy
    for info in tr.devices:
        on = p.device == info.index
        inst = p.take(on & (p.field == PowerField.INSTANT))
        fresh = inst.take(inst.fresh)
        smp = p.take(on & (p.field == PowerField.SAMPLES))
        en = e.take(e.device == info.index)
        changed = en.take(np.flatnonzero(np.diff(en.energy_mj) != 0) + 1) if len(en) else en
        ratio = None
        if len(fresh) > 2 and len(en) > 2:
            # counter energy / (mean fresh instant power x time) over the counter's span
            in_span = (fresh.t_ns >= en.t_ns[0]) & (fresh.t_ns <= en.t_ns[-1])
            dur_s = float(en.t_ns[-1] - en.t_ns[0]) / 1e9
            if in_span.any() and dur_s > 0:
                mean_w = float(fresh.power_mw[in_span].mean()) / 1e3
                ctr_j = float(en.energy_mj[-1] - en.energy_mj[0]) / 1e3
                ratio = ctr_j / (mean_w * dur_s) if mean_w > 0 else None
        out.append({
            "device": info.index, "name": info.name,
            "instant_period_ms": _median_ms(fresh.t_ns),
            "instant_fresh_fraction": float(inst.fresh.mean()) if len(inst) else None,
            "samples_period_ms": _median_ms(smp.t_ns), "samples_rows": len(smp),
            "energy_update_ms": _median_ms(changed.t_ns),
            "energy_over_instant_integral": ratio,
        })
    return out
