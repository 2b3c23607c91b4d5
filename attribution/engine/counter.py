"""The board's energy counter over a window.

Owns :func:`counter_energy_j`: the counter's delta (``nvmlDeviceGetTotalEnergyConsumption``,
mJ) between two times, interpolated between its readings.  Both engines report it as
``totals.measured_energy_j`` (the closure reference, DESIGN.md §3 L1/L4), and a device whose
power readings are phase-locked to its workload has its dynamic energy anchored to it
(``aliasing.counter_scale``).
"""

from __future__ import annotations

import numpy as np

from attribution.model import Trace

SLACK_NS = 1_000_000_000
"""The counter must have readings within this of both ends of the window."""


def counter_energy_j(trace: Trace, device: int, start_ns: int, end_ns: int) -> float | None:
    """Joules the counter of ``device`` advanced over [start, end] (None: fewer than two
    readings, or none within ``SLACK_NS`` of an end)."""
    e = trace.energy
    m = e.device == device
    if int(m.sum()) < 2:
        return None
    t = e.t_ns[m]
    v = e.energy_mj[m].astype(np.float64)
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    if t[0] > start_ns + SLACK_NS or t[-1] < end_ns - SLACK_NS:
        return None
    ts = (t - start_ns).astype(np.float64)
    a, b = np.interp([0.0, float(end_ns - start_ns)], ts, v)
    return float(b - a) / 1e3
