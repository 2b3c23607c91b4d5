"""How much of the trace window (and of each class's busy time) the power log covers.

Owns :func:`covered_stretches` (how much of each item they hold is
``attribution.idle.covered_ns``'s) and the line the snapshot says about a partial log. A
power log that starts after the profiler (nvidia-smi started late), stops early, or pauses
leaves part of the window unmeasured. The fit's ΔP and P_idle still price every item there,
which is right only if the work there draws what it drew inside the log: a class that ran
mostly outside the log has its energy extrapolated, not measured, and is flagged. What is
judged is when the log was *running* (its poll loop), not what its sensor's windows saw: the
stretches between consecutive rows up to ``MAX_GAP_PERIODS`` of its usual spacing apart, and
one spacing before its first row and after its last (a loop polling every second that starts
with the trace has its first row a second in).
"""

from __future__ import annotations

import numpy as np

from attribution.model import I64

MAX_GAP_PERIODS = 3.0
"""Consecutive readings further apart than this many median spacings leave a hole."""
WARN_BELOW = 0.9
"""A log covering less of the window than this gets a warning."""
CLASS_BELOW = 0.5
"""A class with less of its busy time inside the log than this is flagged."""


def covered_stretches(t_ns: I64, win: tuple[int, int]) -> tuple[I64, I64]:
    """The stretches of ``win`` the readings cover, as sorted disjoint (starts, ends)."""
    t = np.unique(t_ns)
    if len(t) < 2 or win[1] <= win[0]:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    gap = np.diff(t)
    spacing = int(np.median(gap))
    ok = gap <= MAX_GAP_PERIODS * spacing
    s = np.clip(np.r_[t[0] - spacing, t[:-1][ok], t[-1]], win[0], win[1])
    e = np.clip(np.r_[t[0], t[1:][ok], t[-1] + spacing], win[0], win[1])
    keep = e > s
    return s[keep].astype(np.int64), e[keep].astype(np.int64)


def partial_warning(device: int, share: float, win_s: float, flagged: int) -> str:
    """The snapshot's line for a log covering ``share`` of a ``win_s``-second window."""
    return (f"GPU {device}: the power log covers {100 * share:.0f}% of the {win_s:.1f} s trace "
            "window: energy outside it is priced by the fit made inside it"
            + (f"; {flagged} class{'es' if flagged != 1 else ''} that ran mostly outside it "
               "flagged" if flagged else ""))
