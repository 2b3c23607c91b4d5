"""Clock-clamp state of each GPU item, from the NVML clock-event reasons in the trace.

Owns :func:`clamped_items`.  Under a power cap or a thermal slowdown the SM clock drops, so a
kernel runs longer at lower power: one ``ΔP`` per class cannot fit both regimes, and the
regression pushes the misfit into whatever regressor correlates with the clamp (typically a
copy class, whose rate per second changes when steps stretch).  The engine therefore fits a
kernel class's clamped instances as a regressor of their own and adds both parts back into the
class.  An item is clamped when the clock sample nearest its start (within ``MAX_GAP_NS``)
carries any of :data:`attribution.model.CLAMP_REASONS`.  Copies and memsets run on the copy
engines, not at the SM clock, and are never split.
"""

from __future__ import annotations

import numpy as np

from attribution.model import CLAMP_REASONS, I64, B, Trace

CLAMP_MASK = np.uint64(sum(CLAMP_REASONS))
MAX_GAP_NS = 1_000_000_000
"""A clock sample further than this from an item says nothing about it."""


def clamped_items(trace: Trace, device: int, start_ns: I64) -> B:
    """True for each item whose nearest clock sample reports a clamp reason."""
    c = trace.clocks
    out = np.zeros(len(start_ns), dtype=bool)
    if len(c) == 0 or len(start_ns) == 0:
        return out
    on = c.device == device
    if not bool(on.any()):
        on = c.device < 0
    if not bool(on.any()):
        return out
    t = c.t_ns[on]
    clamp = (c.clock_reasons[on] & CLAMP_MASK) != 0
    if not bool(clamp.any()):
        return out
    order = np.argsort(t, kind="stable")
    t, clamp = t[order], clamp[order]
    j = np.searchsorted(t, start_ns)
    lo = np.clip(j - 1, 0, len(t) - 1)
    hi = np.clip(j, 0, len(t) - 1)
    near = np.where(np.abs(start_ns - t[lo]) <= np.abs(t[hi] - start_ns), lo, hi)
    ok = np.abs(t[near] - start_ns) <= MAX_GAP_NS
    return np.asarray(ok & clamp[near], dtype=bool)
