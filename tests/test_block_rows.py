"""`engine.block_rows`: a consumer board's regression rows (means of consecutive readings),
the priors' weights per row, and what the rows buy on a card the boost model misses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attribution.engine import attribute, block_rows, build, regress
from attribution.engine.block_rows import block_means, readings_per_row
from attribution.model import F64
from attribution.sim import simulate
from attribution.sim.scenarios import SCENARIOS
from attribution.sim.truth import Truth
from attribution.snapshot import Snapshot


def test_block_means_average_consecutive_rows_and_drop_a_partial_block() -> None:
    a = np.arange(14.0).reshape(7, 2)
    m = block_means(a, 3)
    assert m.shape == (2, 2)
    assert np.array_equal(m, [[2.0, 3.0], [8.0, 9.0]])
    assert np.array_equal(block_means(np.arange(5.0), 2), [0.5, 2.5])
    assert block_means(a, 1) is a


def test_only_a_consumer_board_fits_blocks() -> None:
    assert readings_per_row(100.0, consumer=True) == 2
    assert readings_per_row(20.0, consumer=True) == 10
    assert readings_per_row(100.0, consumer=False) == 1
    assert readings_per_row(float("nan"), consumer=True) == 1
    assert readings_per_row(1000.0, consumer=True) == 1  # a row is never under one reading


def test_the_priors_weigh_per_reading_whatever_the_rows_hold() -> None:
    """Rows that each repeat one reading B times, fitted as block means with ``per_row=B``,
    give the fit of the readings themselves: the priors' weights (in readings) follow the
    rows. Without the division the priors weigh B times more (the check that it matters)."""
    rng = np.random.default_rng(3)
    n, b = 60, 4
    x = rng.uniform(0.0, 1.0, (n, 3)) * [1.0, 0.3, 0.02]  # a short class: the prior shows
    y = 50.0 + x @ [200.0, 80.0, 300.0] + rng.normal(0.0, 2.0, n)
    centre = np.array([150.0, 150.0, 40.0])
    xr, yr = np.repeat(x, b, axis=0), np.repeat(y, b)
    want = regress.fit(xr, yr, 45.0, pooled=centre, idle_weight=3.0)
    got = regress.fit(block_means(xr, b), block_means(yr, b), 45.0, pooled=centre,
                      idle_weight=3.0, per_row=b)
    assert got.p_idle_w == pytest.approx(want.p_idle_w, rel=1e-9)
    assert np.allclose(got.dp_w, want.dp_w, rtol=1e-9)
    unscaled = regress.fit(block_means(xr, b), block_means(yr, b), 45.0, pooled=centre,
                           idle_weight=3.0)
    assert abs(unscaled.dp_w[2] - want.dp_w[2]) > 1.0  # W: the prior decided more
    # the bootstrap's replicates are fits of resampled rows with the same per-row priors
    xb, yb = block_means(xr, b), block_means(yr, b)
    _, dp_boot = regress.bootstrap(xb, yb, 45.0, n_boot=1, block=2, pooled=centre,
                                   idle_weight=3.0, per_row=b)
    idx = regress.block_indices(len(yb), 2, np.random.default_rng(0))
    one = regress.fit(xb[idx], yb[idx], 45.0, pooled=centre, idle_weight=3.0, per_row=b)
    assert np.allclose(dp_boot[0], one.dp_w, rtol=1e-9)


def _err_all(snap: Snapshot, truth: Truth) -> tuple[float, int]:
    """Error over all true classes (energy-weighted) and how many intervals hold the truth."""
    rows = {**{f"kernel:{k.name}": (k.dynamic_energy_j, k.dynamic_energy_ci_j)
               for k in snap.kernels},
            **{f"copy:{c.kind}/{c.memory}": (c.dynamic_energy_j, c.dynamic_energy_ci_j)
               for c in snap.copies}}
    true = truth.class_dynamic_j
    err = sum(abs(rows[c][0] - t) for c, t in true.items()) / sum(true.values())
    held = sum(rows[c][1][0] <= t <= rows[c][1][1] for c, t in true.items())
    return err, held


def test_only_consumer_boards_fit_blocks_in_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch engine hands its fits rows of two readings on a consumer board and of one
    elsewhere."""
    seen: list[int] = []

    def spy(a: F64, per_row: int) -> F64:
        seen.append(per_row)
        return block_means(a, per_row)

    monkeypatch.setattr(build, "block_means", spy)
    attribute(simulate("varied_mix", "a100", 10.0, seed=1).trace, n_boot=5)
    assert seen and set(seen) == {1}
    seen.clear()
    attribute(simulate("varied_mix", "rtx3090", 10.0, seed=1).trace, n_boot=5)
    assert seen and set(seen) == {2}


def test_blocks_hold_the_split_on_cards_slower_than_the_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Cards whose slow stage is heavier and slower than the boost model's grid reaches
    (τ₂ 800 ms, w 0.65: where the real RTX 3090/4090 fits point), on the two scenarios whose
    mix varies: the class split on 200 ms blocks is closer to the truth than on the 100 ms
    readings (the engine before the blocks), and its intervals hold more of the classes."""
    import attribution.sim as sim_pkg
    from attribution.sim.power import Response

    heavy = Response((3.0, 800.0), (0.35, 0.65), tail_frac=0.2)
    monkeypatch.setattr(sim_pkg, "drawn_consumer", lambda rng: heavy)
    err: dict[float, list[float]] = {200.0: [], 100.0: []}
    held: dict[float, int] = {200.0: 0, 100.0: 0}
    for scenario in ("varied_mix", "two_streams"):
        spec = dataclasses.replace(SCENARIOS[scenario], board_draw=True)
        for gpu in ("rtx3090", "rtx4090"):
            res = simulate(scenario, gpu, 30.0, seed=7, spec=spec)
            for block_ms, errs in err.items():  # 100 ms: one reading a row
                monkeypatch.setattr(block_rows, "BLOCK_MS", block_ms)
                e, h = _err_all(attribute(res.trace, n_boot=20), res.truth)
                errs.append(e)
                held[block_ms] += h
    assert np.mean(err[200.0]) < 0.85 * np.mean(err[100.0]), err
    assert held[200.0] > held[100.0], held
