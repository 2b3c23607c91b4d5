"""The simulator's one recursive filter, ``y[n] = b0·x[n] + a·y[n−1]`` from ``y[−1] = 0``.

Owns how the simulator runs it: the board's energy-conserving response (``power``), the
sensor's slow gain wander and the temperature's lag (``sensor``).  The compiled loop
(``attribution.native.first_order``) gives ``scipy.signal.lfilter([b0], [1, −a], x)``'s bits;
lfilter itself is the reference and the fallback, imported only when the loop is not in use,
because importing ``scipy.signal`` takes 0.3–0.7 s, most of the simulator's import and so of
``ppwtop demo``'s and the sim agent's start-up (docs/performance.md).
"""

from __future__ import annotations

import numpy as np

from attribution import native
from attribution.model import F64


def first_order(b0: float, a: float, x: F64) -> F64:
    """``y[n] = b0·x[n] + a·y[n−1]``, ``y[−1] = 0``, over a 1-D ``x`` (float64 out)."""
    if native.enabled():
        return native.first_order(b0, a, x)
    return reference(b0, a, x)


def reference(b0: float, a: float, x: F64) -> F64:
    """The same recursion by ``scipy.signal.lfilter`` (imported here, on first use)."""
    from scipy.signal import lfilter

    return np.asarray(lfilter([b0], [1.0, -a], x), dtype=np.float64)
