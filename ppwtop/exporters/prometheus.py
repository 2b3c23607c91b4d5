"""Prometheus exposition of attributed energy: a custom collector over the latest snapshot.

Owns :class:`EnergyCollector`, a ``prometheus_client`` collector fed with
:class:`~attribution.snapshot.Snapshot` objects by :meth:`EnergyCollector.update`, and the
metric families it yields on each scrape:

* ``ppwtop_energy_joules_total{gpu,kind,class}`` (counter): energy by class; ``kind`` is
  ``kernel`` (``class`` = kernel name), ``copy`` (``class`` = ``<kind>/<memory>``) or ``idle``
  (``class`` = idle cause).
* ``ppwtop_energy_total_joules{gpu}`` (counter): all energy of the GPU (``totals.energy_j``
  for a one-GPU snapshot, else the sum of that GPU's rows).
* ``ppwtop_power_watts{gpu}`` (gauge): mean power over the latest snapshot's window
  (the GPU's energy / ``window.duration_s``), or ``extra["power_now_w"]`` (one GPU).
* ``ppwtop_active_idle_watts{gpu}``, ``ppwtop_closure_error{gpu}`` (gauges): from the latest
  snapshot's totals (snapshot-wide numbers, repeated for each GPU it lists).
* ``ppwtop_clamp_seconds{gpu,reason}`` (gauge): clock-clamp time of the latest snapshot from
  ``extra["clamps"]`` (a list of ``{reason, seconds|time_s|duration_s}`` or a mapping
  ``reason -> seconds | {...}``); absent or malformed entries are skipped.

Counters stay monotone across updates.  Two feeding modes (``update(snap, cumulative=...)``):

* ``cumulative=False`` (default, what ``ppwtop serve --demo`` uses): each snapshot covers a
  new window that does not overlap the previous ones (tumbling windows); its energies are
  added to the running totals kept here per label set.
* ``cumulative=True``: each snapshot holds the energy since the start of the run; a counter
  becomes ``max(previous, new)`` so a slightly smaller re-estimate never makes it go down.

Negative energies (none are expected) add nothing, so a counter can never decrease.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from attribution.snapshot import Snapshot

ClassKey = tuple[str, str, str]  # (gpu, kind, class)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def class_energies(snap: Snapshot) -> dict[ClassKey, float]:
    """Energy (J) per (gpu, kind, class) of one snapshot; repeated labels are summed."""
    out: dict[ClassKey, float] = {}

    def add(key: ClassKey, e: float) -> None:
        if math.isfinite(e):
            out[key] = out.get(key, 0.0) + e

    for k in snap.kernels:
        add((str(k.gpu), "kernel", k.name), k.energy_j)
    for c in snap.copies:
        add((str(c.gpu), "copy", f"{c.kind}/{c.memory}"), c.energy_j)
    for i in snap.idle:
        add((str(i.gpu), "idle", i.cause), i.energy_j)
    return out


def gpu_labels(snap: Snapshot, classes: Iterable[ClassKey] = ()) -> list[str]:
    """The GPU labels of a snapshot: its listed GPUs, else those of its rows, else "0"."""
    gpus = sorted({str(g.index) for g in snap.gpus} | {k[0] for k in classes}, key=_gpu_order)
    return gpus or ["0"]


def _gpu_order(g: str) -> tuple[int, str]:
    return (int(g), "") if g.isdigit() else (1 << 30, g)


def gpu_energies(snap: Snapshot, classes: Mapping[ClassKey, float]) -> dict[str, float]:
    """Total energy (J) per GPU: ``totals.energy_j`` for one GPU, else per-GPU row sums."""
    gpus = gpu_labels(snap, classes)
    if len(gpus) == 1:
        return {gpus[0]: snap.totals.energy_j}
    out = dict.fromkeys(gpus, 0.0)
    for (gpu, _, _), e in classes.items():
        out[gpu] += e
    return out


def mean_power_w(snap: Snapshot) -> dict[str, float]:
    """Power (W) per GPU: ``extra["power_now_w"]`` (one GPU) if present, else the GPU's
    energy over the window's duration; empty for a zero-length window."""
    energies = gpu_energies(snap, class_energies(snap))
    now = _num(snap.extra.get("power_now_w"))
    if now is not None and len(energies) == 1:
        return dict.fromkeys(energies, now)
    d = snap.window.duration_s
    return {g: e / d for g, e in energies.items()} if d > 0 else {}


def clamp_seconds(raw: Any) -> dict[str, float]:
    """Clamp time (s) per reason from ``extra["clamps"]``, tolerant of shape and absence."""
    out: dict[str, float] = {}

    def secs(item: Any) -> float | None:
        if isinstance(item, Mapping):
            for key in ("seconds", "time_s", "duration_s"):
                v = _num(item.get(key))
                if v is not None:
                    return v
            return None
        return _num(item)

    if isinstance(raw, Mapping):
        for reason, item in raw.items():
            s = secs(item)
            if s is not None:
                out[str(reason)] = out.get(str(reason), 0.0) + s
    elif isinstance(raw, list | tuple):
        for item in raw:
            if not isinstance(item, Mapping):
                continue
            reason = item.get("reason", item.get("name"))
            s = secs(item)
            if reason is not None and s is not None:
                out[str(reason)] = out.get(str(reason), 0.0) + s
    return out


def _fold(prev: float, e: float, cumulative: bool) -> float:
    """The next counter value: never below ``prev``."""
    if not math.isfinite(e):
        return prev
    return max(prev, e) if cumulative else prev + max(e, 0.0)


class EnergyCollector(Collector):
    """Collector over the latest snapshot, with cumulative counters kept per label set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._class_j: dict[ClassKey, float] = {}
        self._gpu_j: dict[str, float] = {}
        self._latest: Snapshot | None = None
        self.updates = 0

    def update(self, snap: Snapshot, *, cumulative: bool = False) -> None:
        """Fold one snapshot in (a new tumbling window, or energy-so-far if cumulative)."""
        classes = class_energies(snap)
        gpus = gpu_energies(snap, classes)
        with self._lock:
            for key, e in classes.items():
                self._class_j[key] = _fold(self._class_j.get(key, 0.0), e, cumulative)
            for gpu, e in gpus.items():
                self._gpu_j[gpu] = _fold(self._gpu_j.get(gpu, 0.0), e, cumulative)
            self._latest = snap
            self.updates += 1

    def energy_j(self, gpu: str, kind: str, cls: str) -> float:
        """The current counter value of one class (0 if never seen)."""
        with self._lock:
            return self._class_j.get((gpu, kind, cls), 0.0)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            class_j = dict(self._class_j)
            gpu_j = dict(self._gpu_j)
            snap = self._latest
        by_class = CounterMetricFamily(
            "ppwtop_energy_joules", "GPU energy attributed to a kernel, copy class or idle cause",
            labels=["gpu", "kind", "class"])
        for (gpu, kind, cls), e in sorted(class_j.items()):
            by_class.add_metric([gpu, kind, cls], e)
        yield by_class
        total = CounterMetricFamily(
            "ppwtop_energy_total_joules", "All attributed GPU energy", labels=["gpu"])
        for gpu, e in sorted(gpu_j.items(), key=lambda kv: _gpu_order(kv[0])):
            total.add_metric([gpu], e)
        yield total
        power = GaugeMetricFamily(
            "ppwtop_power_watts", "Mean board power over the latest snapshot window",
            labels=["gpu"])
        idle_w = GaugeMetricFamily(
            "ppwtop_active_idle_watts", "Active idle power of the latest snapshot",
            labels=["gpu"])
        closure = GaugeMetricFamily(
            "ppwtop_closure_error", "(attributed - measured) / measured energy, latest snapshot",
            labels=["gpu"])
        clamps = GaugeMetricFamily(
            "ppwtop_clamp_seconds", "Clock-clamp time in the latest snapshot window by reason",
            labels=["gpu", "reason"])
        if snap is not None:
            gpus = gpu_labels(snap, class_energies(snap))
            p = mean_power_w(snap)
            c = clamp_seconds(snap.extra.get("clamps"))
            for gpu in gpus:
                if gpu in p:
                    power.add_metric([gpu], p[gpu])
                idle_w.add_metric([gpu], snap.totals.active_idle_w)
                closure.add_metric([gpu], snap.totals.closure_error)
                for reason, s in sorted(c.items()):
                    clamps.add_metric([gpu, reason], s)
        yield power
        yield idle_w
        yield closure
        yield clamps
