"""When a class's energy counts as known: the precision rule behind ``resolvable``.

Owns ``PRECISION`` and :func:`precise`, which the batch engine (``build.py``) and the live
engine (``live_fit.verdicts``) both apply after their structural checks (power readings, sensor
window, degenerate fit, consumer board, pooled class, fixed mix, exposure).  A class is
resolvable only when its 90 % interval lies within ``±PRECISION`` of its estimate on **both**
sides, i.e. the row's number is known to that precision.  10 % because an honest 90 % interval
of half-width P gives a mean absolute error of about P / 2 (normal errors: 0.8 σ against
1.645 σ), and the project's accuracy goal is 5 % energy-weighted error over resolvable classes;
a looser rule (the old ±50 % half-width) let classes 7-14 % off through with their intervals
honestly saying ±8-47 %.
"""

from __future__ import annotations

import numpy as np

from attribution.model import F64, B

PRECISION = 0.10
"""A resolvable class's 90 % interval lies within ±10 % of its estimate."""


def precise(dyn_j: F64, ci_j: F64, precision: float = PRECISION) -> B:
    """Per class: estimate > 0 and ``(1 − p)·est ≤ lo`` and ``hi ≤ (1 + p)·est``."""
    dyn = np.asarray(dyn_j, np.float64)
    ci = np.asarray(ci_j, np.float64).reshape(-1, 2)
    return np.asarray((dyn > 0) & (ci[:, 0] >= (1.0 - precision) * dyn)
                      & (ci[:, 1] <= (1.0 + precision) * dyn), dtype=np.bool_)


def imprecise_why(dyn_j: float, lo_j: float, hi_j: float,
                  precision: float = PRECISION) -> str:
    """The ``why`` of a class flagged by :func:`precise`: its interval relative to its estimate."""
    lo = lo_j / dyn_j - 1.0
    hi = hi_j / dyn_j - 1.0
    return (f"90% interval {100 * lo:+.0f}…{100 * hi:+.0f}% of the estimate: "
            f"wider than ±{100 * precision:.0f}%")
