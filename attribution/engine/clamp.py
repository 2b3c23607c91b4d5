"""Clock-clamp state of each GPU item, from the NVML clock-event reasons in the trace.

Owns :func:`clamped_items` and :func:`nearest_clamped` (the rule, shared with the live
engine).  Under a power cap or a thermal slowdown the SM clock drops, so a
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
    return nearest_clamped(t[order], clamp[order], start_ns)


def one_per_time(t_ns: I64, clamp: B) -> tuple[I64, B]:
    """Sorted sample times with samples sharing a time made one, clamped if any of them is
    (two samplers merged): the rule then does not depend on the rows' order."""
    if not bool(np.any(t_ns[1:] == t_ns[:-1])):
        return t_ns, clamp
    t_one, at = np.unique(t_ns, return_inverse=True)
    merged = np.zeros(len(t_one), dtype=bool)
    np.logical_or.at(merged, at, clamp)
    return t_one, merged


def nearest_clamped(t_ns: I64, clamp: B, start_ns: I64) -> B:
    """For each start, whether the nearest clock sample (``t_ns`` sorted, within
    ``MAX_GAP_NS``) carries a clamp reason (``clamp``: per sample; of samples sharing a time,
    any).  Shared by the batch
    engine (:func:`clamped_items`) and the live one (``live_clamp.ClockLog``)."""
    if len(t_ns) == 0 or len(start_ns) == 0:
        return np.zeros(len(start_ns), dtype=bool)
    t_ns, clamp = one_per_time(t_ns, clamp)
    j = np.searchsorted(t_ns, start_ns)
    lo = np.clip(j - 1, 0, len(t_ns) - 1)
    hi = np.clip(j, 0, len(t_ns) - 1)
    near = np.where(np.abs(start_ns - t_ns[lo]) <= np.abs(t_ns[hi] - start_ns), lo, hi)
    ok = np.abs(t_ns[near] - start_ns) <= MAX_GAP_NS
    return np.asarray(ok & clamp[near], dtype=bool)
