"""The board's energy counter over a window.

Owns :func:`counter_energy_j`: the counter's delta (``nvmlDeviceGetTotalEnergyConsumption``,
mJ) between two times, interpolated between its readings and extended at its own rate past
the first or last of them (up to ``SLACK_NS``).  Both engines report it as
``totals.measured_energy_j`` (the closure reference, DESIGN.md §3 L1/L4), and a device whose
power readings are phase-locked to its workload has its dynamic energy anchored to it
(``aliasing.counter_scale``).
"""

from __future__ import annotations

import numpy as np

from attribution.model import Trace

SLACK_NS = 1_000_000_000
"""The counter must have readings within this of both ends of the window."""
EDGE_NS = 1_000_000_000
"""The stretch next to the counter's first (last) reading whose mean rate extends it to a
window end before (after) its readings."""


def _readings(trace: Trace, device: int) -> tuple[np.ndarray, np.ndarray]:
    """The counter's readings of ``device`` sorted by time (readings sharing a time by
    value)."""
    e = trace.energy
    m = e.device == device
    t = e.t_ns[m]
    v = e.energy_mj[m].astype(np.float64)
    order = np.lexsort((v, t))
    return t[order], v[order]


def _backwards(t: np.ndarray, v: np.ndarray, start_ns: int, end_ns: int) -> bool:
    """Whether the sorted readings decrease anywhere from the last one at or before the window
    to the first one at or after it (the readings the window's delta reads)."""
    i0 = max(int(np.searchsorted(t, start_ns, "right")) - 1, 0)
    i1 = int(np.searchsorted(t, end_ns, "left")) + 1
    return bool(np.any(np.diff(v[i0:i1]) < 0))


def went_back(trace: Trace, device: int, start_ns: int, end_ns: int) -> bool:
    """Whether the counter of ``device`` decreases over the window: a reset (driver reload, GPU
    reset) or two counters' readings merged.  Its delta then measures nothing, and
    :func:`counter_energy_j` gives None."""
    return _backwards(*_readings(trace, device), start_ns, end_ns)


def back_warning(device: int) -> str:
    """The snapshot line for a counter that :func:`went_back`."""
    return (f"GPU {device}: the energy counter decreases inside the window (reset, or "
            "readings of two counters merged): no closure against it")


def counter_energy_j(trace: Trace, device: int, start_ns: int, end_ns: int) -> float | None:
    """Joules the counter of ``device`` advanced over [start, end] (None: fewer than two
    readings, none within ``SLACK_NS`` of an end, or a counter that :func:`went_back`)."""
    t, v = _readings(trace, device)
    if len(t) < 2 or _backwards(t, v, start_ns, end_ns):
        return None
    if t[0] > start_ns + SLACK_NS or t[-1] < end_ns - SLACK_NS:
        return None
    ts = (t - start_ns).astype(np.float64)
    a, b = np.interp([0.0, float(end_ns - start_ns)], ts, v)
    # past its first or last reading the counter is extended at its own rate near that end
    # (interp holds it flat: a recording whose NVML thread starts 0.2 s after the first
    # kernel lost that 0.2 s of energy, and a 3 s recording read +11.5 % closure)
    if start_ns < t[0]:
        a = v[0] - _edge_rate(t, v) * float(t[0] - start_ns)
    if end_ns > t[-1]:
        b = v[-1] + _edge_rate(t[::-1], v[::-1]) * float(end_ns - t[-1])
    return float(b - a) / 1e3


def _edge_rate(t: np.ndarray, v: np.ndarray) -> float:
    """The counter's mean rate (mJ/ns) over :data:`EDGE_NS` from its reading ``t[0]`` (``t``
    ascending or, for the last end, descending): at least to the next reading that differs
    in time."""
    far = np.flatnonzero(np.abs(t - t[0]) <= EDGE_NS)
    j = int(far[-1]) if len(far) else 0
    if j == 0 or t[j] == t[0]:
        later = np.flatnonzero(t != t[0])
        if not len(later):
            return 0.0
        j = int(later[0])
    rate = float(v[j] - v[0]) / float(t[j] - t[0])
    return max(rate, 0.0)
