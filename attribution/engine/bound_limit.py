"""Upper ends of the intervals of groups the fit holds at ΔP = 0 (batch engine).

The fit is non-negative: a group whose readings push its ΔP below zero (a short copy whose
power the lag or the boost model gives to a neighbour) sits at the bound, and so does every
bootstrap replicate and every refit at the interval's ends.  Its interval then reads [0, 0] J,
a claim of exactly zero, where the readings only say "small".  Its upper end is set instead
to the ΔP the readings still allow: z₉₀ standard errors of the group's coefficient in the
fit's design (σ² from the residual over ``n / block`` effective readings, as the lag's slack
takes it; P_idle's prior weight in the Gram matrix, the ΔP prior's not), at most the largest
reading above P_idle (no class draws more than the board was ever seen to: a group no reading
sees gets that).  Groups above the bound keep their bootstrap and refit ends.

Measured (docs/accuracy.md, "Where it fails" 4): through the files, 10 s of demo on an H100,
a pageable DtoH copy (319 calls, 3.4 J true) read [0, 0] J and the pinned HtoD one [0, 8.2] J
against 33 J.
"""

from __future__ import annotations

import numpy as np

from attribution.engine.regress import Z90
from attribution.model import F64

AT_BOUND_W = 0.5
"""A group fitted under this ΔP is at the bound: it draws nothing the readings show.  The
solver's answer at the bound is not exactly 0: a 2 s periodic job whose windows missed its
work fitted its GEMM at 5 mW, and its interval read [0.002, 0.002] J against 210 J (an audit,
2026-12-05).  Half a watt is below any sensor's noise and any busy kernel's draw.  The one
threshold of "at zero" in the engine (``blind`` reads it too)."""
TINY = 1e-12
"""Ridge on the ΔP diagonal, relative to the Gram matrix's largest entry: keeps the inverse
finite for a group no reading sees (its variance then ~1e12× any other's: the cap decides)."""


def bound_upper_w(x: F64, y: F64, dp_w: F64, *, rms_w: float, p_idle_w: float, block: int,
                  idle_weight: float) -> F64:
    """Per group of ``x`` (readings × groups): the ΔP (W) the upper end of a group at the
    bound (``dp_w <= AT_BOUND_W``) reaches; 0 for the groups above it."""
    k, g = x.shape
    out = np.zeros(g)
    at_bound = np.asarray(dp_w[:g], np.float64) <= AT_BOUND_W
    if not at_bound.any() or k < 2:
        return out
    a = np.column_stack([np.ones(k), x])
    gram = a.T @ a
    gram[0, 0] += idle_weight
    # the ΔP prior is left out: its weight is a tie-breaker, not information about the
    # group (a group no reading sees gets the cap below, not the prior's ±σ/√weight)
    gram[np.arange(1, g + 1), np.arange(1, g + 1)] += TINY * max(float(np.max(np.diag(gram))),
                                                                 1.0)
    var = np.diag(np.linalg.inv(gram))[1:]
    s2 = rms_w ** 2 * k / max(k - g - 1, 1) * block
    cap = max(float(np.max(y)) - p_idle_w, 0.0)
    up = np.minimum(Z90 * np.sqrt(np.maximum(var, 0.0) * s2), cap)
    out[at_bound] = up[at_bound]
    return out
