"""Whether a device's readings place its active idle power at all: the constant's leverage.

Owns :func:`idle_leverage` (from the design) and :func:`idle_leverage_gram` (from its Gram
matrix, as the live engine keeps it), the rule :func:`idle_unplaced` and its reason line.

The fit is ``power ≈ P_idle + Σ_g ΔP_g x_g``.  P_idle is told apart from the classes' ΔP
only by how the activity in the readings' windows varies: where some windows are idle, or
less busy than others, the readings extrapolate to no activity.  Where every window is busy
throughout (one kernel longer than the trace's readings, a GPU saturated with no gap at the
window's scale), the activity columns add up to a constant and P_idle is any value: the
priors alone split the power, every bootstrap replicate agrees with them, and the interval
came out narrow (the real TR/A100 run: one 6 s kernel, every usable reading's window busy
throughout, its class called resolvable at ±3.4 %).

The measure is the constant column's variance inflation, ``n · [(AᵀA)⁻¹]₀₀`` for the design
``A = [1, x]``, computed as ``n / ‖1 − x b‖²`` with ``b`` the least-squares fit of the constant
on the activity columns (a singular design gives infinity, where a pseudo-inverse would hide
it).  It is 1 when the activity is orthogonal to the constant and grows as the activity
explains it. Measured (60 s, seeds 7 and 3, and the 20 s check: seed 11, workload seed 5): on
the simulator's suite 1.7–2 400 on data-centre boards (their phase-locked rows reach 10⁷, which
their own rule catches first) and 150–3 100 on consumer ones; on the same workloads with every
launch gap, sync, stall and copy removed (a saturated GPU; seeds 7 and 3) 8 300–5 000 000, but
for phase_locked_step, whose step keeps its idle tail (1–900); on the real meter runs 130–570
where the readings at a kernel's edges vary, and infinite on the TR/A100 run
(``benchmarks/idle_place.py`` reruns the simulator's part). Above ``IDLE_UNPLACED`` the
readings are taken not to place P_idle: both engines hold it at the board's value where there
is one, as for a degenerate fit, flag every class, and span the class intervals over P_idle's
sanity band (the board's value ± 50 %).
"""

from __future__ import annotations

import numpy as np

from attribution.model import F64

IDLE_UNPLACED = 5e3
"""The constant's variance inflation above which the readings do not place P_idle (the
activity explains all but 1/5000 of the constant): 1.6× the simulator suite's largest
(launch_bound on the rtx3090, 3 090), 1.65× under the smallest of its saturated variants
(lag_50 on the rtx3090, 8 270)."""


def idle_leverage_gram(m: F64) -> float:
    """``n · [(AᵀA)⁻¹]₀₀`` from the Gram matrix ``m = AᵀA`` of ``A = [1, x]`` (so ``m[0, 0]``
    is the number of readings): the Schur complement of the activity block, solved by least
    squares so a singular activity block is fine; infinity where the constant lies in the
    activity's span, NaN for no readings."""
    n = float(m[0, 0])
    if not n > 0:
        return float("nan")
    if m.shape[0] == 1:
        return 1.0
    m10 = m[1:, 0]
    b = np.linalg.lstsq(m[1:, 1:], m10, rcond=None)[0]
    ss = n - float(m10 @ b)
    return n / ss if ss > n * 1e-12 else float("inf")


def idle_leverage(x: F64) -> float:
    """:func:`idle_leverage_gram` of the design ``[1, x]`` (``x``: readings × columns)."""
    a = np.column_stack([np.ones(len(x)), x])
    return idle_leverage_gram(a.T @ a)


def idle_unplaced(leverage: float) -> bool:
    """The readings do not place P_idle (see the module docstring)."""
    return leverage > IDLE_UNPLACED


def unplaced_why(held: tuple[float, float] | None) -> str:
    """Each class's reason (and the device's warning) when the readings do not place P_idle;
    ``held``: (fitted, held) P_idle when it was held at the board's value."""
    return ("busy throughout: every reading's window holds all but the same activity, so the "
            "readings cannot tell active idle from the kernels' power"
            + ("" if held is None else
               f"; active idle held at the board's {held[1]:.0f} W (fitted {held[0]:.0f} W)"))


def gram_unplaced(m: F64) -> bool:
    """:func:`idle_unplaced` from a Gram matrix of ``[1, x]`` over at least 8 readings (the
    batch engine's minimum for judging a fit)."""
    return bool(m.shape[0]) and m[0, 0] >= 8 and idle_unplaced(idle_leverage_gram(m))


IDLE_PINNED = 0.15
"""P_idle's relative standard error (:func:`idle_se_rel`) at or under which the readings pin
it: a fit that far from the board's preset value is then the board's own active idle, not a
degenerate fit (docs/attribution.md, "Held active idle")."""


def idle_se_rel(rss_w2: float, p_idle_w: float, *, n: int, n_params: int, block: int,
                leverage: float) -> float:
    """P_idle's standard error over its value: ``√(rss / (n − p) · block · leverage / n)``
    (σ² over the effective readings, ``block`` to a bootstrap block, as the lag's slack
    takes it; ``leverage`` from :func:`idle_leverage`); infinity where it cannot be told
    (no spare readings, a singular design, P_idle at 0)."""
    if n <= n_params or not np.isfinite(leverage) or not p_idle_w > 0:
        return float("inf")
    s2 = max(rss_w2, 0.0) / (n - n_params) * block
    return float(np.sqrt(s2 * leverage / n)) / p_idle_w


def off_preset_warning(device: int, fitted_w: float, board_w: float, se_rel: float) -> str:
    """The warning when a pinned P_idle lies outside the sanity band around the preset."""
    off = 100.0 * (fitted_w / board_w - 1.0)
    return (f"GPU {device}: active idle fitted at {fitted_w:.0f} W, {off:+.0f}% from the board "
            f"table's {board_w:.0f} W; kept, as the readings pin it to "
            f"±{100 * se_rel:.0f}% (1σ): this board idles differently from the table")
