"""Power readings that show none of the work (both engines; the one-class form, batch only).

Owns the rule that tells them, the upper end their classes' intervals take, and the lines
that say so. A GPU that runs kernels draws more than its active idle; readings in which
every class of a busy GPU fits at ΔP ≈ 0 (under :data:`AT_BOUND_W`) did not see the work. On
the simulator's phase-locked runs on a 25 %-sampling board (H100/H200 at 30-60 s, A100 at 2
s; found by a black-box audit, 2026-12-05) the sensor's 25 ms windows fell in the idle part
of every 100 ms step: the readings were flat at active idle (rms 0.3 mW), the lag search had
nothing to choose by, and at the lag it kept the activity still varied, so the spread test
(``aliasing``) did not call the readings phase-locked. Every class then read 0 J with an
interval of [0, 0] J (``bound_limit`` caps a class at the largest reading above P_idle, and
there was none), the total was 70 % low, and nothing was said.

Under the rule every class is flagged with the reason, and its interval reaches the board's
power limit above active idle over its busy time (what the readings cannot exclude).  Where
an energy counter covers the window it knows the total: its energy above active idle is
spread over the classes by busy time (the phase-lock anchoring of ``aliasing``, from equal
power per busy second since the fit has none).  Without one the work's time stays at
active idle, and the snapshot says the total is low.
"""

from __future__ import annotations

import numpy as np

from attribution.engine.bound_limit import AT_BOUND_W
from attribution.model import F64
from attribution.presets import PRESETS, GpuPreset

BUSY_SHARE_MIN = 0.005
"""The least share of the window the device's classes must be busy for the rule to apply
(a few short kernels can leave no mark on the readings honestly).  2 % until an audit met a
1 s periodic job busy 1.8 % of its window (0.53 s of a 30 s run, ~265 J) whose GEMM was
called resolvable at 0.002 J against 210 J."""
MIN_BUSY_S = 0.1
"""... and at least this much busy time in all."""
MIN_READINGS = 8
"""Fewer usable readings than this: no rule (``idle_place.MIN_JUDGED`` holds P_idle and
flags every class there anyway)."""


def blind_to_work(dp_w: F64, group_time_s: F64, window_s: float, n_readings: int) -> bool:
    """Every group with busy time fitted at ΔP ≤ :data:`AT_BOUND_W` (``bound_limit``) while
    the groups together were busy at least :data:`BUSY_SHARE_MIN` of the window and
    :data:`MIN_BUSY_S` (``group_time_s``: each group's busy time)."""
    busy = group_time_s > 0.0
    if n_readings < MIN_READINGS or window_s <= 0.0 or not bool(busy.any()):
        return False
    busy_s = float(group_time_s.sum())
    if busy_s < BUSY_SHARE_MIN * window_s or busy_s < MIN_BUSY_S:
        return False
    return bool(np.all(dp_w[busy] <= AT_BOUND_W))


def blind_cap_w(preset: GpuPreset | None, p_idle_w: float) -> float:
    """ΔP the readings cannot exclude: the board's power limit above active idle (with no
    board known, the largest limit in the model table)."""
    tdp_w = preset.tdp_w if preset is not None else max(p.tdp_w for p in PRESETS.values())
    return max(tdp_w - p_idle_w, 0.0)


def blind_why(busy_share: float) -> str:
    """A flagged class's reason under the rule."""
    return (f"the power readings show none of the work (every class fits at 0 W while the "
            f"GPU was busy {100 * busy_share:.0f}% of the window): its energy is not measured")


def blind_warning(device: int, busy_share: float, cap_w: float, *, anchored: bool) -> str:
    """The snapshot's line under the rule (``anchored``: the energy counter gave the total,
    :func:`blind_anchor_warning`)."""
    total = ("the total closes to the energy counter, but the split among the classes is "
             "unknown" if anchored else
             f"the work's time is counted at active idle, so the total is low by up to "
             f"{cap_w:.0f} W over that time")
    return (f"GPU {device}: the power readings show none of the work: every class fits at "
            f"0 W while kernels and copies kept the GPU busy {100 * busy_share:.0f}% of the "
            "window (readings in step with the workload, each seeing only its idle part, or "
            f"a power log of another run); {total}, and the class intervals reach the "
            "board's power limit. "
            + ("Change the step period or the sensor's phase to split it" if anchored else
               "Record with the energy counter (ppwtop record) or change the step period"))


def blind_anchor_warning(device: int, dynamic_j: float) -> str:
    """The line saying the energy counter's dynamic energy was spread over the classes by
    busy time."""
    return (f"GPU {device}: the energy counter's {dynamic_j:.0f} J above active idle spread "
            "over the classes by busy time (the readings fit none)")


UNSEEN_WHY = (f"fits at under {AT_BOUND_W:g} W above active idle: the readings show none of "
              "its power (its windows may all miss it)")
"""A class's reason when it alone fits at under :data:`AT_BOUND_W` while it ran: the readings
show none of its power (its interval is the bound's, ``bound_limit``)."""
