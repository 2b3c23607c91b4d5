"""How the block bootstrap cuts a short run, and how far its spread is trusted (both engines).

Owns :data:`MIN_BLOCKS`, :func:`resample_block`, :func:`small_sample_scale` and when a
snapshot says its run was short (:data:`SAY_SCALE`, :func:`short_run_warning`). The class
intervals start from a moving-block bootstrap whose blocks span max(1 s, 3 W) of readings
(``build.BLOCK_S``: residuals that close move together). On a run of a few seconds that
breaks in two ways:

* **Too few blocks to resample.** A run no longer than one block has one resample, itself:
  the bootstrap's spread is zero. Two or three blocks overlap almost entirely. So the
  resampling block is shortened until the run holds :data:`MIN_BLOCKS` of them, never below
  3 W of readings (closer readings share their sensor window) and never above the 1 s block.
* **A spread measured on a few independent stretches.** Readings within a block (1 s, or
  3 W of a long-window sensor) are correlated, so a run of n blocks holds about n
  independent pieces, however it is resampled. The bootstrap's deviations from the point
  fit are scaled by Student's t at the 90 % two-sided level with ``n − 1`` degrees of
  freedom (at least 1) over the normal's 1.645: 3.84 at 2 s, 1.30 at 5 s, 1.07 at 15 s (the
  live horizon), 1.016 at 60 s (1 s blocks).

Measured (``benchmarks/short_runs.py``, docs/accuracy.md "Short runs"; 2026-12-05; every
scenario × preset at 1, 1.5, 2, 3 and 5 s, seeds 0–2, then 3–5 held out): the resolvable
classes' 90 % intervals held the truth on 80.1 % (676 / 844) before, 89.3 % (517 / 579)
after, and 80.2 → 89.7 % on the held-out seeds; at 1.5–2 s 63–76 % → 92–98 %. t on the
shorter resampling blocks instead (df ≈ 9) held 83 %. With the ΔP prior also weighed in
proportion to the run (``regress.prior_scale_for``), 92.3 % (551 / 597; held out 91.8 %).
The 60 s suites' verdicts and coverage do not move.
"""

from __future__ import annotations

import math

from scipy.special import stdtrit

from attribution.engine.regress import Z90

MIN_BLOCKS = 10
"""Resampling blocks a run is cut into at least, where 3 W of readings allows."""
SAY_SCALE = 1.15
"""A widening this large or more is said (:func:`short_run_scale`): a run of 8 blocks or
fewer (t with 7 degrees of freedom is 1.15× the normal's)."""


def resample_block(n_rows: int, preferred: int, floor: int) -> int:
    """The bootstrap's block, in rows, for a run of ``n_rows``: ``preferred`` (1 s of
    readings) where the run holds :data:`MIN_BLOCKS` of those, else ``n_rows //
    MIN_BLOCKS``, never under ``floor`` (3 W of readings) nor under 1."""
    preferred = max(1, preferred)
    return max(1, min(preferred, max(floor, n_rows // MIN_BLOCKS)))


def small_sample_scale(n_rows: int, preferred: int) -> float:
    """Student's t (90 % two-sided, ``n_rows / preferred − 1`` degrees of freedom, at least
    1) over :data:`Z90`: how much wider than the bootstrap's own spread the interval is taken
    on a run of ``n_rows`` rows whose residuals are correlated over ``preferred`` rows (the
    bootstrap's preferred block)."""
    blocks = n_rows / max(1, preferred)
    df = max(blocks - 1.0, 1.0)
    return float(stdtrit(df, 0.95)) / Z90


def floor_rows(window_ms: float, period_ms: float, per_row: int = 1) -> int:
    """3 W of readings, in rows of ``per_row`` readings (readings closer than that share
    their sensor window)."""
    return max(1, math.ceil(3.0 * window_ms / max(period_ms, 1e-3) / max(per_row, 1)))


def short_run_scale(scale: float) -> float | None:
    """``scale`` where a snapshot should say it (at least :data:`SAY_SCALE`), else None."""
    return scale if scale >= SAY_SCALE else None


def short_run_warning(device: int, n_rows: int, preferred: int, block_s: float,
                      scale: float) -> str:
    """The snapshot's line for a run short enough that its intervals were widened."""
    return (f"GPU {device}: a short run ({n_rows / max(preferred, 1):.1f} blocks of "
            f"{block_s:.1f} s of readings): the intervals' bootstrap spread is widened "
            f"×{scale:.2f} (Student's t) for the few independent stretches it holds, so few "
            f"classes resolve; a run of {MIN_BLOCKS * block_s:.0f} s or more narrows them")
