"""Whether a device's readings place its active idle power at all: the constant's leverage.

Owns the decision both engines take on P_idle before they split the power,
:func:`judge_idle` (hold it at the board table's value, keep a fit off the table, or neither),
its measures (:func:`idle_leverage` from the design, :func:`idle_leverage_gram` from the Gram
matrix the live engine keeps, :func:`idle_se_rel`), the sanity band the held fits' intervals
span (:func:`sanity_band_w`) and the lines the snapshot says about it (:func:`idle_lines`).

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

import dataclasses

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


NO_BOARD_HINT = ("no board model to hold it at (pass --gpu MODEL): anywhere from 0 W to the "
                 "lowest reading")
"""What the lines add where the board is unknown and the readings cannot place P_idle."""


def unplaced_why(held: tuple[float, float] | None, *, board_known: bool = True,
                 by_run: bool = False, board_w: float | None = None) -> str:
    """Each class's reason (and the device's warning) when the readings do not place P_idle;
    ``held``: (fitted, held) P_idle when it was held at the board's value, or (``by_run``,
    the live engine) at the value an earlier horizon of the run placed."""
    why = ("busy throughout: every reading's window holds all but the same activity, so the "
           "readings cannot tell active idle from the kernels' power")
    if held is None:
        return why + ("" if board_known else f"; {NO_BOARD_HINT}")
    if not by_run:
        return why + f"; active idle held at the board's {held[1]:.0f} W (fitted {held[0]:.0f} W)"
    table = "" if board_w is None else f"; the board table's {board_w:.0f} W"
    return (why + f"; active idle held at this run's {held[1]:.0f} W, placed by an earlier "
            f"horizon (fitted {held[0]:.0f} W{table})")


IDLE_SANITY = 0.5
"""A fitted active idle this far (relative) from the board table's is not taken as it is
unless the readings pin it (:data:`IDLE_PINNED`); held fits' intervals span this band."""
IDLE_PINNED = 0.15
"""P_idle's relative standard error (:func:`idle_se_rel`) at or under which the readings pin
it: a fit that far from the board's preset value is then the board's own active idle, not a
degenerate fit (docs/attribution.md, "Held active idle")."""
MIN_JUDGED = 8
"""Fewer readings than this do not place P_idle: it is held at the board's value where the
board has one (:func:`few_why`), and nothing else is judged. Before 2026-12-05 the fit was
kept: on 1 s runs (under 8 readings on 165 of 216 runs of every scenario × preset) the
bounded fit put P_idle anywhere from 0 W to 3× the truth (median error 15 %; held: 1.4 %)."""


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


@dataclasses.dataclass(frozen=True, slots=True)
class IdleJudgement:
    """What the readings say about P_idle (:func:`judge_idle`)."""

    hold: bool
    """Hold P_idle at the board's value and flag every class."""
    unplaced: bool
    """The readings' windows are busy throughout (:func:`idle_unplaced`)."""
    off_table_se: float | None = None
    """Kept more than :data:`IDLE_SANITY` off the board's value: P_idle's relative standard
    error, at most :data:`IDLE_PINNED` (None: not off the table, or held)."""
    few: int | None = None
    """Under :data:`MIN_JUDGED` readings: how many (None: enough to judge)."""


NOT_JUDGED = IdleJudgement(hold=False, unplaced=False)
"""The judgement of a fit with too few readings (or none yet)."""


def judge_idle(p_idle_w: float, board_w: float | None, *, rss_w2: float, n: int,
               n_params: int, block: int, leverage: float, phase_locked: bool
               ) -> IdleJudgement:
    """Hold the fit's P_idle (``p_idle_w``, residual sum of squares ``rss_w2`` over ``n``
    readings and ``n_params`` parameters) at the board's ``board_w`` where the readings cannot
    place it: phase lock (``aliasing``), windows busy throughout (``leverage`` over
    :data:`IDLE_UNPLACED`), or a fit more than :data:`IDLE_SANITY` off the board's value that
    they do not pin either (:func:`idle_se_rel` over :data:`IDLE_PINNED`), or too few
    readings (under :data:`MIN_JUDGED`; nothing else is judged then).  A board with no value
    is never held."""
    if n < MIN_JUDGED:
        return IdleJudgement(hold=board_w is not None, unplaced=False, few=n)
    unplaced = idle_unplaced(leverage)
    if board_w is None:
        return IdleJudgement(hold=False, unplaced=unplaced)
    if abs(p_idle_w - board_w) <= IDLE_SANITY * board_w:
        return IdleJudgement(hold=phase_locked or unplaced, unplaced=unplaced)
    se = idle_se_rel(rss_w2, p_idle_w, n=n, n_params=n_params, block=block, leverage=leverage)
    if phase_locked or unplaced or se > IDLE_PINNED:
        return IdleJudgement(hold=True, unplaced=unplaced)
    return IdleJudgement(hold=False, unplaced=False, off_table_se=se)


def few_why(n: int, held: tuple[float, float] | None) -> str:
    """Each class's reason when under :data:`MIN_JUDGED` readings cannot place P_idle;
    ``held``: (fitted, held) P_idle when it was held at the board's value."""
    return (f"only {n} usable power reading{'' if n == 1 else 's'}: too few to place active "
            "idle" + ("" if held is None else
                      f"; held at the board's {held[1]:.0f} W (fitted {held[0]:.0f} W)"))


def unheld_ends_w(judged: IdleJudgement, board_w: float | None, y: F64, *,
                  phase_locked: bool = False) -> list[float]:
    """The P_idle values an interval also spans when the readings cannot place P_idle (too
    few of them, ``judged.few``; windows busy throughout, ``judged.unplaced``; phase lock) on
    a board with no table value to hold it at: from 0 to the lowest reading (each reading is
    P_idle plus non-negative activity power); nothing otherwise (both engines)."""
    if board_w is not None or not len(y):
        return []
    if judged.few is None and not judged.unplaced and not phase_locked:
        return []
    return [0.0, float(np.min(y))]


def sanity_band_w(board_w: float) -> tuple[float, float]:
    """The P_idle values a held fit's intervals also span: the board's value ± the band."""
    return board_w * (1.0 - IDLE_SANITY), board_w * (1.0 + IDLE_SANITY)


def off_preset_warning(device: int, fitted_w: float, board_w: float, se_rel: float) -> str:
    """The warning when a pinned P_idle lies outside the sanity band around the preset."""
    off = 100.0 * (fitted_w / board_w - 1.0)
    return (f"GPU {device}: active idle fitted at {fitted_w:.0f} W, {off:+.0f}% from the board "
            f"table's {board_w:.0f} W; kept, as the readings pin it to "
            f"±{100 * se_rel:.0f}% (1σ): this board idles differently from the table")


def degenerate_warning(device: int, held: tuple[float, float]) -> str:
    """The device's line when a fit off the sanity band that the readings do not pin was held
    at the board's value (``held``: fitted, held); each class says "fit is degenerate"."""
    return (f"GPU {device}: active idle fitted at {held[0]:.0f} W, more than "
            f"{100 * IDLE_SANITY:.0f}% off the board's {held[1]:.0f} W, and the readings do not "
            f"pin it: held at {held[1]:.0f} W and every class flagged (the readings say "
            "little about active idle: few idle edges, a workload the sensor aliases; or they "
            "or the board's value are not this GPU's: a power log of another run or machine, a "
            "wrong --gpu)")


def idle_lines(device: int, judged: IdleJudgement, *, p_idle_w: float, board_w: float | None,
               held: tuple[float, float] | None, phase_locked: bool, by_run: bool = False
               ) -> tuple[str | None, list[str]]:
    """What a snapshot says about P_idle: each class's reason when the windows are busy
    throughout (None otherwise, or when phase lock, which says more, also holds) and the
    device's warnings; ``held``: (fitted, held) P_idle when it was held (``by_run``: at the
    run's own earlier value, the live engine)."""
    lines: list[str] = []
    if judged.few is not None:  # the device's warning is the trace window's (build)
        return few_why(judged.few, held), lines
    reason = (unplaced_why(held, board_known=board_w is not None, by_run=by_run,
                           board_w=board_w)
              if judged.unplaced and not phase_locked else None)
    if reason is not None:
        lines.append(f"GPU {device}: {reason}")
    elif held is not None and not phase_locked:  # held off the sanity band, not pinned
        lines.append(degenerate_warning(device, held))
    if judged.off_table_se is not None and board_w is not None:
        lines.append(off_preset_warning(device, p_idle_w, board_w, judged.off_table_se))
    return reason, lines
