"""The engine's models of board behaviour: clock clamps, consumer boost (slow stage and tail),
the 1 s average field, and the honesty of intervals for low-exposure copies.

Each test pins a failure the engine used to have (figures from docs/accuracy.md, 13:05 run):
clamp_episode 48-54 % off, copies +40…+2500 % with intervals excluding the truth, consumer
kernels 20-90 % low, the average field marked resolvable on a V100 at −66 %.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attribution.engine import attribute_arrays
from attribution.engine.clamp import clamped_items
from attribution.engine.regress import quick_rss
from attribution.engine.tail import (
    held_tail_params,
    idle_gaps,
    scan_tail,
    tail_energy_s,
    tail_fractions,
)
from attribution.model import CLOCK_REASON_GPU_IDLE, CLOCK_REASON_SW_THERMAL, ClockBatch, Trace
from attribution.sim import simulate

S = 1_000_000_000


def _truth_rel(scenario: str, gpu: str, seconds: float = 30.0, seed: int = 1
               ) -> tuple[dict[str, tuple[float, float, float, bool]], Any]:
    """Per class: (dynamic J, interval low, interval high, resolvable); and (sim, device)."""
    res = simulate(scenario, gpu, seconds, seed)
    a = attribute_arrays(res.trace, n_boot=40)
    d = a.devices[0]
    out = {lab: (float(d.class_dynamic_j[i]), float(d.class_ci_j[i, 0]),
                 float(d.class_ci_j[i, 1]), d.class_resolvable[i])
           for i, lab in enumerate(d.items.labels)}
    return out, (res, d)


def test_clamped_items_follow_the_nearest_clock_sample() -> None:
    t = np.arange(0, 10 * S, S // 10, dtype=np.int64)
    reasons = np.where((t >= 3 * S) & (t < 6 * S), CLOCK_REASON_SW_THERMAL,
                       CLOCK_REASON_GPU_IDLE).astype(np.uint64)
    tr = Trace(clocks=ClockBatch.from_columns({
        "t_ns": t, "device": np.zeros(len(t)), "sm_mhz": np.full(len(t), 1000),
        "mem_mhz": np.full(len(t), 1000), "temp_c": np.full(len(t), 50.0),
        "clock_reasons": reasons}))
    starts = np.array([1 * S, 3 * S + 1000, 5 * S, 6 * S + S // 5, 30 * S], dtype=np.int64)
    # GPU_IDLE is not a clamp; samples > 1 s away say nothing
    assert clamped_items(tr, 0, starts).tolist() == [False, True, True, False, False]


def test_clamp_episode_is_fitted_per_clamp_state() -> None:
    rel, (res, d) = _truth_rel("clamp_episode", "a100")
    truth = res.truth.class_dynamic_j
    kernels = [k for k in truth if k.startswith("kernel:")]
    err = sum(abs(rel[k][0] - truth[k]) for k in kernels) / sum(truth[k] for k in kernels)
    assert err < 0.05  # was 0.5 with one ΔP per class
    assert len(set(d.item_group.tolist())) > len(kernels)  # clamped instances are split off


def test_clamp_episode_intervals_cover_the_truth_as_90_percent_intervals_should() -> None:
    """The class intervals are 90 % intervals: over ten seeds of clamp_episode, at least 85 %
    of the resolvable classes' intervals hold the truth (measured: 41 of 46).  Asking every
    class of one seed to be covered asks a 90 % interval never to miss: with five or six
    resolvable classes per seed, three of these ten seeds have a miss."""
    covered = total = 0
    for seed in range(1, 11):
        rel, (res, _) = _truth_rel("clamp_episode", "a100", seed=seed)
        for k, (_, lo, hi, r) in rel.items():
            if r:
                total += 1
                covered += lo <= res.truth.class_dynamic_j[k] <= hi
    assert total >= 40
    assert covered >= 0.85 * total


@pytest.mark.parametrize("scenario", ["pageable_copies", "demo"])
def test_copies_are_unresolvable_or_covered(scenario: str) -> None:
    rel, (res, _) = _truth_rel(scenario, "h100")
    truth = res.truth.class_dynamic_j
    copies = [k for k in truth if k.startswith("copy:")]
    assert copies
    for k in copies:
        est, lo, hi, r = rel[k]
        assert (not r) or lo <= truth[k] <= hi, (k, est, truth[k])


def test_consumer_board_slow_stage_and_tail() -> None:
    rel, (res, d) = _truth_rel("varied_mix", "rtx3090", seconds=40.0)
    truth = res.truth
    tau2, w = d.slow_response
    assert tau2 > 0 and 0 < w < 1
    # active idle within 5 % of the (gain-scaled) truth: it was fitted ~23 % high
    assert abs(d.p_idle_w / (truth.active_idle_w * truth.gain) - 1) < 0.05
    big = sorted((k for k in truth.class_dynamic_j if k.startswith("kernel:")),
                 key=lambda k: -truth.class_dynamic_j[k])[:2]
    for k in big:
        assert abs(rel[k][0] / truth.class_dynamic_j[k] - 1) < 0.10
    for k, (_, lo, hi, r) in rel.items():
        assert not r  # still flagged: the boost model is approximate
        assert lo <= truth.class_dynamic_j[k] <= hi, k


def test_average_field_is_a_one_second_window_and_unresolvable() -> None:
    res = simulate("average_only", "v100", 20.0, 1)
    d = attribute_arrays(res.trace, n_boot=10).devices[0]
    assert d.sensor.window_ms == 1000.0 and d.sensor.source == "field"
    assert not any(d.class_resolvable)


def test_tail_window_means_match_numeric_integration() -> None:
    gs = np.array([1 * S, 4 * S], dtype=np.int64)
    ge = np.array([2 * S, 7 * S], dtype=np.int64)
    t = np.arange(S // 2, 8 * S, S // 10, dtype=np.int64)
    h = tail_fractions(gs, ge, t, window_ms=100.0, lag_ms=2.0, tau_s=0.5)
    grid = np.arange(0, 8 * S, 100_000, dtype=np.int64)  # 0.1 ms
    level = np.zeros(len(grid))
    for a, b in zip(gs, ge, strict=True):
        m = (grid >= a) & (grid < b)
        level[m] = np.exp(-(grid[m] - a) * 1e-9 / 0.5)
    for k in range(0, len(t), 7):
        hi = t[k] - 2_000_000
        m = (grid >= hi - 100_000_000) & (grid < hi)
        assert h[k] == pytest.approx(level[m].mean(), abs=2e-3)
    total = tail_energy_s(gs, ge, 0.5, 0, 8 * S)
    assert total == pytest.approx(level.sum() * 1e-4, rel=1e-3)


def test_tail_is_not_fitted_to_a_square_wave() -> None:
    # 50 ms on / 50 ms off: the tail of every gap is the complement of the busy time
    s = np.arange(0, 8 * S, 100_000_000, dtype=np.int64)
    e = s + 50_000_000
    t = np.arange(S, 7 * S, 100_000_000, dtype=np.int64) + 37_000_000
    x = np.full((len(t), 1), 0.5)
    y = 130.0 + 100.0 * x[:, 0] + np.random.default_rng(0).normal(0, 1, len(t))
    scan = scan_tail(x, y, s, e, t, window_ms=100.0, lag_ms=1.0, rss=quick_rss)
    assert scan.params is None
    assert scan.unplaced  # every candidate skipped: the tail trades with P_idle here


def test_a_held_active_idle_places_the_tail_a_free_one_cannot() -> None:
    # the square wave again: the tail (1 - busy time) trades with the constant, but with
    # P_idle held the readings' excess over it has a tail the fit can place
    s = np.arange(0, 8 * S, 100_000_000, dtype=np.int64)
    e = s + 50_000_000 + np.random.default_rng(1).integers(0, 30_000_000, len(s))
    t = np.arange(S, 7 * S, 25_000_000, dtype=np.int64) + 7_000_000
    busy = np.zeros(len(t))
    for a, b in zip(s, e, strict=True):
        lo, hi = np.maximum(t - 101_000_000, a), np.minimum(t - 1_000_000, b)
        busy += np.clip(hi - lo, 0, None) / 100e6
    x = busy[:, None]
    h = tail_fractions(*idle_gaps(s, e, 5_000_000), t, window_ms=100.0, lag_ms=1.0, tau_s=0.5)
    y = 130.0 + 100.0 * busy + 40.0 * h
    assert scan_tail(x, y, s, e, t, window_ms=100.0, lag_ms=1.0, rss=quick_rss).unplaced
    assert held_tail_params(x, y - 130.0, s, e, t, window_ms=100.0, lag_ms=1.0) is not None
    # every column nearly constant (a step locked to the window, every gap alike): nothing to
    # place either way (the gaps above vary 20-50 ms, so a min_gap between them would not
    # give every gap a tail: a column that is not constant)
    flat = np.full((len(t), 1), 0.5)
    assert held_tail_params(flat, np.full(len(t), 20.0), s, s + 60_000_000, t, window_ms=100.0,
                            lag_ms=1.0) is None


def test_prior_centre_is_per_kind() -> None:
    from attribution.engine.regress import pooled_by_kind

    rng = np.random.default_rng(3)
    k = 400
    x = np.column_stack([rng.uniform(0.2, 0.6, k), rng.uniform(0.0, 0.3, k),
                         rng.uniform(0.0, 0.05, k)])  # two kernels, one short copy
    y = 60.0 + x @ np.array([250.0, 120.0, 20.0]) + rng.normal(0, 1.0, k)
    c = pooled_by_kind(x, y, np.array([0, 0, 2]))
    assert c[2] == pytest.approx(20.0, abs=8.0)  # the copy's own kind, not the kernels' ~200 W
    assert 120.0 <= c[0] == c[1] <= 250.0


def test_a_board_response_between_the_old_tau_grid_points_is_fitted() -> None:
    """A V100 whose board responds in 2.35 ms (lag_50, seed 7, the response drawn off the
    grid): on the τ grid (0, 0.4, 0.8, 1.2, 2, 3) the fit took 2.0 ms, put P_idle 5.6 % over
    the sensor-scaled truth and the four resolvable kernels 3–7 % low, three of them outside
    their 90 % intervals.  With 1.6 and 2.5 ms on the grid: P_idle within 2 %, each resolvable
    kernel within 3 % and its interval holding the sensor-scaled truth."""
    import dataclasses

    from attribution.engine import attribute
    from attribution.sim.scenarios import SCENARIOS

    spec = dataclasses.replace(SCENARIOS["lag_50"], board_draw=True)
    res = simulate(scenario="lag_50", gpu="v100", seconds=60.0, seed=7, spec=spec)
    truth = res.truth
    assert any("tau 2.35 ms" in n for n in truth.notes)  # between the old grid's 2 and 3
    snap = attribute(res.trace)
    assert snap.totals.active_idle_w == pytest.approx(truth.active_idle_w * truth.gain,
                                                      rel=0.02)
    resolvable = [k for k in snap.kernels if k.resolvable]
    assert len(resolvable) >= 3
    for k in resolvable:
        true_j = truth.class_dynamic_j[f"kernel:{k.name}"] * truth.gain
        assert k.dynamic_energy_j == pytest.approx(true_j, rel=0.03)
        assert k.dynamic_energy_ci_j[0] <= true_j <= k.dynamic_energy_ci_j[1]
