"""The rows a consumer board's class regression fits: means of consecutive readings.

Owns :data:`BLOCK_MS`, :func:`readings_per_row` and :func:`block_means` (batch engine). A
consumer card's sensor averages over its whole period (W = T = 100 ms), and its boost ramp
spreads a burst's energy over the next 40-1000 ms, a shape the engine only approximates (the
slow stage's grid, ``timebase.SLOW_TAU_GRID_MS``; real RTX 3090/4090 fits sit at that grid's
edge). Where windows tile time, the mean of B consecutive readings is the power over one
window B times as long, so the share of a burst's energy the response carries out of its
row, and with it what a wrong guess at the response's shape moves, shrinks; what is lost is
the mix's variation inside a row. So the class regression (the point fit, its bootstrap and
every refit the intervals span) runs on block means of the readings, with the priors'
weights (in readings) divided by the readings a row holds; the lag, the response and the
tail are still searched on the readings.

Measured (docs/accuracy.md, "Where it fails" 1; 2026-12-05; B swept over 1, 2, 3, 5, 10 on
seeds 7, 3, 11, 5, then checked on 13 and 17), consumer rows of 60 s, error over all
classes (mean of the seeds' means) and the share of classes their (flagged) intervals hold,
one reading a row → B = 2:

* cards drawn off the model's grid, six seeds: 5.70 → 5.42 %, 86.8 → 93.3 %, worst row
  21.9 → 15.9 %;
* cards as slow as the real RTX 3090/4090 fits (τ₂ 300-1000 ms, w 0.5-0.7), two seeds:
  11.3 → 8.8 %, 66.6 → 85.9 % (worst row 28.4 → 36.6 %); checked after on seeds 11 and
  5: 10.3 → 9.2 %, 70.3 → 86.6 %;
* cards on the grid, which the per-reading fit describes exactly: 5.31 → 5.66 %, 92.9 →
  96.5 %; P_idle's median error 1.7 → 3.9 % (its worst 95 → 74 %).

Longer rows lost more on the grid (6.2 % at B = 3) and did worse on the slow cards too
(9.4 % at 3, 10.1 % at 5, 11.3 % at 10). Data-centre boards keep one reading per row: their
response settles in ~2 ms, and their results are unchanged to the bit.
"""

from __future__ import annotations

from attribution.model import F64

BLOCK_MS = 200.0
"""The span of a consumer board's regression row: two 100 ms readings."""


def readings_per_row(period_ms: float, *, consumer: bool) -> int:
    """How many consecutive readings one regression row averages: ``BLOCK_MS`` worth on a
    consumer board (at least 1), else 1."""
    if not consumer or not period_ms > 0:
        return 1
    return max(1, round(BLOCK_MS / period_ms))


def block_means(a: F64, per_row: int) -> F64:
    """Means of ``per_row`` consecutive rows of ``a`` (1-D or 2-D, rows first); a last
    partial block is dropped.  ``per_row`` 1 returns ``a`` itself."""
    if per_row <= 1:
        return a
    n = (len(a) // per_row) * per_row
    out: F64 = a[:n].reshape(n // per_row, per_row, *a.shape[1:]).mean(axis=1)
    return out
