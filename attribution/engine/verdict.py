"""When a class's energy counts as known: the precision rule behind ``resolvable``.

Owns the ``resolvable`` rules both engines apply (:func:`class_verdicts`, called by
``build.py`` and ``live_fit.verdicts``): the structural checks (power readings, sensor window,
phase-locked readings, degenerate fit, consumer board, pooled class, fixed mix, exposure, zero
estimate) and then the precision rule, ``PRECISION`` and :func:`precise`.  A class is
resolvable only when its 90 % interval lies within ``±PRECISION`` of its estimate on **both**
sides, i.e. the row's number is known to that precision.  10 % because an honest 90 % interval
of half-width P gives a mean absolute error of about P / 2 (normal errors: 0.8 σ against
1.645 σ), and the project's accuracy goal is 5 % energy-weighted error over resolvable classes;
a looser rule (the old ±50 % half-width) let classes 7-14 % off through with their intervals
honestly saying ±8-47 %.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attribution.model import F64, I32, B

PRECISION = 0.10
"""A resolvable class's 90 % interval lies within ±10 % of its estimate."""
MIN_EXPOSURE = 3.0
"""A class needs this many reading-equivalents of busy time inside sensor windows."""
NOT_COMPUTED = "interval not computed yet"
"""What a live class whose interval is still the placeholder (0 to twice the estimate: the
bootstrap pool has no replicate with it yet) says, alone or after another flag's reason."""
LONG_WINDOW_MS = 500.0
"""Sensors averaging this long (the 1 s ``average`` field) only support totals."""


def precise(dyn_j: F64, ci_j: F64, precision: float = PRECISION) -> B:
    """Per class: estimate > 0 and ``(1 − p)·est ≤ lo`` and ``hi ≤ (1 + p)·est``."""
    dyn = np.asarray(dyn_j, np.float64)
    ci = np.asarray(ci_j, np.float64).reshape(-1, 2)
    return np.asarray((dyn > 0) & (ci[:, 0] >= (1.0 - precision) * dyn)
                      & (ci[:, 1] <= (1.0 + precision) * dyn), dtype=np.bool_)


def imprecise_why(dyn_j: float, lo_j: float, hi_j: float,
                  precision: float = PRECISION, short_run: float | None = None) -> str:
    """The ``why`` of a class flagged by :func:`precise`: its interval relative to its estimate;
    ``short_run``: the factor a short run's few independent blocks widened the bootstrap's
    spread by (``boot_blocks.short_run_scale``), said when there is one."""
    lo = lo_j / dyn_j - 1.0
    hi = hi_j / dyn_j - 1.0
    return (f"90% interval {100 * lo:+.0f}…{100 * hi:+.0f}% of the estimate: "
            f"wider than ±{100 * precision:.0f}%"
            + ("" if short_run is None else
               f" (a short run: its spread widened ×{short_run:.2f}; record longer)"))


def class_verdicts(*, dyn_j: F64, ci_j: F64, group: I32, pooled_group: int, g_c_time_s: F64,
                   exposure: F64, clusters: list[list[int]], has_power: bool, window_ms: float,
                   held_idle: tuple[float, float, float] | None, consumer_why: str | None,
                   computed: B | None = None, phase_locked: float | None = None,
                   idle_unplaced: str | None = None,
                   power_why: Sequence[str | None] | None = None,
                   short_run: float | None = None
                   ) -> tuple[list[bool], list[str | None], list[str]]:
    """Per class: (resolvable, cluster name, why not), the first rule that fails in order.

    ``group``: each class's main regressor group; ``pooled_group``: the group shared by the
    rarely-run classes (−1: none); ``g_c_time_s``: groups × classes busy time; ``exposure``:
    per group, reading-equivalents of activity; ``clusters``: groups whose activity moves
    together (a fixed mix); ``held_idle``: (fitted, board's, held) active idle when the fit was
    degenerate; ``consumer_why``: the reason on a consumer board (None elsewhere);
    ``computed``: classes whose interval is computed (the live engine's newest are not yet);
    ``phase_locked``: the readings' activity spread ratio when they are phase-locked to the
    workload (``aliasing``; P_idle is then held when the board has a value);
    ``idle_unplaced``: the reason when the readings' windows are busy throughout
    (``idle_place``; P_idle is then held when the board has a value); ``power_why``: per
    class, why the power readings cannot be trusted for its split (the log's clock is off,
    it covers too little of the class's busy time, the lag sits at its search's edge, the
    readings show none of the work or of this class: ``build``), else None; ``short_run``:
    the factor a short run widened the bootstrap's spread by, where it is large enough to say
    (``boot_blocks.short_run_scale``)."""
    n_cls = len(dyn_j)
    cluster_of = {g: i for i, comp in enumerate(clusters) for g in comp}
    in_class = g_c_time_s > 0
    class_exposure = exposure @ in_class if n_cls else np.zeros(0)
    known = precise(dyn_j, ci_j)
    # each class's first group that is in a cluster (a column scan per class cost ~3 ms a
    # tick at 500 classes)
    clustered = np.zeros(len(in_class), bool)
    clustered[[g for g in cluster_of if g < len(in_class)]] = True
    class_in_cluster = in_class & clustered[:, None]
    in_cluster: B = (np.asarray(class_in_cluster.any(axis=0), bool) if n_cls
                     else np.zeros(0, bool))
    # (no group at all: classes known but none ran in the horizon, e.g. a GPU whose work has
    # just begun, before its first busy slab)
    first_clustered = (class_in_cluster.argmax(axis=0) if n_cls and len(in_class)
                       else np.zeros(n_cls, np.intp))
    res: list[bool] = []
    clu: list[str | None] = []
    why: list[str] = []
    for c in range(n_cls):
        r, w, cl = False, "", None
        placeholder = computed is not None and not bool(computed[c])
        if not has_power:
            w = "no power readings"
        elif power_why is not None and power_why[c] is not None:
            w = str(power_why[c])
        elif window_ms >= LONG_WINDOW_MS:
            w = f"{window_ms:.0f} ms averaging sensor: per-class split unreliable"
        elif phase_locked is not None:
            w = (f"power readings phase-locked to the workload: their windows see "
                 f"{100 * phase_locked:.2g}% of the activity spread of random windows"
                 + ("" if held_idle is None else
                    f"; active idle held at the board's {held_idle[2]:.0f} W (fitted "
                    f"{held_idle[0]:.0f} W)"))
        elif idle_unplaced is not None:
            w = idle_unplaced
        elif held_idle is not None:
            w = (f"fit is degenerate: active idle fitted at {held_idle[0]:.0f} W against the "
                 f"board's {held_idle[1]:.0f} W (aliasing or a missing regressor); held at "
                 f"{held_idle[2]:.0f} W")
        elif consumer_why is not None:
            w = consumer_why
        elif int(group[c]) == pooled_group >= 0:
            w = "pooled with other rarely-run classes"
        elif in_cluster[c]:
            w = "always runs in a fixed mix with other classes"
            cl = f"cluster{cluster_of[int(first_clustered[c])]}"
        elif class_exposure[c] < MIN_EXPOSURE:
            w = f"too little exposure ({class_exposure[c]:.1f} reading-equivalents)"
        elif dyn_j[c] <= 0:
            w = "estimate sits at the zero bound"
        elif placeholder:
            w = "new class: " + NOT_COMPUTED
            placeholder = False  # (said)
        elif not known[c]:
            w = imprecise_why(float(dyn_j[c]), float(ci_j[c, 0]), float(ci_j[c, 1]),
                              short_run=short_run)
        else:
            r = True
        if placeholder and w:
            # flagged for another reason before its interval was drawn: the interval shown
            # is the placeholder (0 to twice the estimate), not a bootstrap's
            w += "; " + NOT_COMPUTED
        res.append(r)
        clu.append(cl)
        why.append(w)
    return res, clu, why
