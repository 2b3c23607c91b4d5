"""The naive time-overlap split: the baseline the regression engine is measured against.

Owns ``time_split``: each reading stands for one period T of energy above idle,
``(power_w − P_idle) × T``, and that energy is split among the classes active in the
reading's window in proportion to their busy time there.  DESIGN.md §3 reports this is
27–35 % off; the tests print its error beside the regression's.
"""

from __future__ import annotations

import numpy as np

from attribution.model import F64


def time_split(x: F64, power_w: F64, p_idle_w: float, period_s: float) -> F64:
    """Dynamic energy per group (J) by splitting each reading's energy above idle by time."""
    above = np.clip(power_w - p_idle_w, 0.0, None) * period_s
    tot = x.sum(axis=1)
    share = np.divide(x, tot[:, None], out=np.zeros_like(x), where=tot[:, None] > 0)
    return np.asarray(above @ share, dtype=np.float64)
