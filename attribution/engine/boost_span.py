"""The consumer boost model's grid resolution, as fits the class intervals span (batch engine).

A consumer board's fit carries a slow response stage (τ₂, w) picked from
``timebase.SLOW_TAU_GRID_MS`` × ``SLOW_WEIGHTS`` and a boost tail (min_gap, τ_t) picked from
``tail.MIN_GAP_GRID_MS`` × ``TAIL_TAU_GRID_S``. A real card's response sits between those
points, and the fit at the nearest one is biased by that much. The intervals therefore also
span the fits at the grid's neighbours of the chosen point, one parameter moved one step at a
time (up to four stages and four tails), besides the fit without the stage and tail.

Measured (docs/accuracy.md, "Where it fails" 1): with each simulated card's response drawn
off the grid (``ScenarioSpec.board_draw``), the consumer intervals covered 77.8 % of the
classes (seeds 7 and 3), 84.1 % with the neighbours (87.8 % once the tail's min_gap grid was
made finer); on the real RTX 3090 square-wave run the interval reaches the meter. The point
estimates do not move.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attribution.engine.tail import MIN_GAP_GRID_MS, TAIL_TAU_GRID_S, tail_fractions, tail_model
from attribution.engine.timebase import SLOW_TAU_GRID_MS, SLOW_WEIGHTS, LagMatrices
from attribution.model import F64, I64


def stage_at_edge(slow: tuple[float, float]) -> bool:
    """Whether the fitted slow stage sits at the grid's slow or heavy edge (τ₂ at the longest
    point, or w at the largest): the board responds more slowly than the model can follow.
    Measured (docs/accuracy.md, "Where it fails" 1): 0 of 48 simulated cards drawn inside the
    grid's range and 0 of 48 on it, 47 of 48 drawn with τ₂ 300-1000 ms and w 0.5-0.7, and
    every real RTX 3090/4090 meter row here."""
    tau2, w = slow
    return slow != (0.0, 0.0) and (tau2 >= SLOW_TAU_GRID_MS[-1] or w >= SLOW_WEIGHTS[-1])


def stage_edge_warning(device: int, slow: tuple[float, float], *, blocks: bool = True) -> str:
    """The snapshot's line for :func:`stage_at_edge`; ``blocks``: the split was fitted on
    200 ms blocks of readings (the batch engine, ``block_rows``), else on each reading (the
    live engine).  The figures are the batch engine's on 48 simulated cards like it (τ₂
    300-1000 ms, w 0.5-0.7; seeds 7 and 3, 60 s), with and without the blocks."""
    figures = ("7 % off in median (up to 37 %) with its intervals holding 86 % of the classes"
               if blocks else
               "9 % off in median (up to 28 %) with its intervals holding 2 classes in 3, "
               "fitted on each reading as this view does")
    return (f"GPU {device}: the fitted slow boost stage (τ₂ {slow[0]:.0f} ms, weight "
            f"{slow[1]:.1f}) sits at the edge of the model's grid: this board ramps more slowly "
            "than the model follows, and on simulated cards like it the kernel split was "
            + figures)


def grid_neighbours(grid: Sequence[float], value: float) -> list[float]:
    """The points either side of ``value`` on ``grid`` ([] when it is not on the grid)."""
    if value not in grid:
        return []
    i = list(grid).index(value)
    return [grid[j] for j in (i - 1, i + 1) if 0 <= j < len(grid)]


def neighbour_stages(slow: tuple[float, float]) -> list[tuple[float, float]]:
    """The slow stages one grid step from ``slow`` in τ₂ or in w (none without a stage)."""
    if slow == (0.0, 0.0):
        return []
    tau2, w = slow
    return ([(t, w) for t in grid_neighbours(SLOW_TAU_GRID_MS, tau2)]
            + [(tau2, v) for v in grid_neighbours(SLOW_WEIGHTS, w)])


def neighbour_tails(params: tuple[float, float] | None) -> list[tuple[float, float]]:
    """The tail candidates (min_gap ms, τ_t s) one grid step from ``params`` in either."""
    if params is None:
        return []
    gap_ms, tau_s = params
    return ([(g, tau_s) for g in grid_neighbours(MIN_GAP_GRID_MS, gap_ms)]
            + [(gap_ms, t) for t in grid_neighbours(TAIL_TAU_GRID_S, tau_s)])


def neighbour_designs(act: LagMatrices, x: F64, *, lag_ms: float, slow: tuple[float, float],
                      tail_params: tuple[float, float] | None, tail_col: F64 | None,
                      items: tuple[I64, I64], t_ns: I64, window_ms: float) -> list[F64]:
    """The design matrices of the grid's neighbours of the fitted boost model: each
    neighbouring stage with the fitted tail's column ``tail_col`` (none where no tail is
    modelled), then the fitted stage's activity ``x`` with each neighbouring tail's column."""
    out: list[F64] = []
    for stage in neighbour_stages(slow):
        xs = act.at([lag_ms], stage)[0]
        out.append(xs if tail_col is None else np.column_stack([xs, tail_col]))
    for params in neighbour_tails(tail_params):
        model = tail_model(params, *items)
        assert model is not None  # params is not None
        out.append(np.column_stack([x, tail_fractions(model[0], model[1], t_ns,
                                                      window_ms=window_ms, lag_ms=lag_ms,
                                                      tau_s=model[2])]))
    return out
