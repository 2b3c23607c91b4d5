"""Readings that show none of the work (``engine/blind``): the rule, and the engine on a
phase-locked H100 run whose sensor windows all fell in the idle part of the step."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from attribution.engine import attribute
from attribution.engine.blind import (
    BUSY_SHARE_MIN,
    MIN_READINGS,
    blind_cap_w,
    blind_to_work,
)
from attribution.engine.live import LiveEngine
from attribution.model import EnergyBatch
from attribution.presets import PRESETS
from attribution.sim import SCENARIOS, SimResult, simulate
from tests.test_live_engine import drive


def test_the_rule() -> None:
    t = np.array([3.0, 1.0, 0.0])  # group busy seconds (the last ran nothing)
    assert blind_to_work(np.array([0.0, 0.0, 5.0]), t, 100.0, 50)  # idle group ignored
    assert not blind_to_work(np.array([0.0, 5.0, 0.0]), t, 100.0, 50)  # one group drew
    assert blind_to_work(np.array([0.0, 0.002, 0.0]), t, 100.0, 50)  # milliwatts are none
    assert not blind_to_work(np.zeros(3), t / 100.0, 4.0, 50)  # 0.04 s busy: too little
    assert not blind_to_work(np.zeros(3), t, 4.0 / BUSY_SHARE_MIN + 1.0, 50)  # barely busy
    assert blind_to_work(np.zeros(3), t, 4.0 / BUSY_SHARE_MIN, 50)
    assert not blind_to_work(np.zeros(3), t, 100.0, MIN_READINGS - 1)  # too few readings
    assert not blind_to_work(np.zeros(3), np.zeros(3), 100.0, 50)  # nothing ran


@pytest.fixture(scope="module")
def blind_run() -> SimResult:
    """A phase-locked H100 run whose every reading sees only the step's idle part."""
    return simulate(scenario="phase_locked_step", gpu="h100", seconds=30.0, seed=3)


def _held(snap: Any, res: SimResult) -> list[bool]:
    out = []
    for k in snap.kernels:
        true_j = res.truth.class_dynamic_j["kernel:" + k.name]
        out.append(k.dynamic_energy_ci_j[0] <= true_j <= k.dynamic_energy_ci_j[1])
    return out


def test_without_a_counter_the_snapshot_says_the_total_is_low(blind_run: SimResult) -> None:
    trace = dataclasses.replace(blind_run.trace, energy=EnergyBatch.empty())
    snap = attribute(trace, n_boot=50)
    # the readings are flat at active idle: the fit gives the kernels nothing
    assert all(k.dynamic_energy_j == 0.0 for k in snap.kernels)
    assert snap.totals.energy_j < 0.5 * blind_run.truth.total_energy_j
    (line,) = [w for w in snap.warnings if "show none of the work" in w]
    assert "the total is low by up to 630 W" in line
    # every class flagged with the reason, and its interval reaching what it drew
    assert all(not k.resolvable and k.why.startswith("the power readings show none of the work")
               for k in snap.kernels)
    assert all(_held(snap, blind_run))


def test_with_a_counter_the_total_closes_to_it(blind_run: SimResult) -> None:
    snap = attribute(blind_run.trace, n_boot=50)
    assert any("the energy counter's" in w and "spread over the classes" in w
               for w in snap.warnings)
    assert any("the total closes to the energy counter" in w for w in snap.warnings)
    assert snap.totals.energy_j == pytest.approx(blind_run.truth.total_energy_j, rel=0.06)
    dyn = [k.dynamic_energy_j for k in snap.kernels]
    time_s = [k.time_s for k in snap.kernels]
    assert dyn[0] / time_s[0] == pytest.approx(dyn[1] / time_s[1], rel=1e-9)  # by busy time
    assert all(not k.resolvable for k in snap.kernels) and all(_held(snap, blind_run))


def test_a_run_the_readings_see_is_not_told() -> None:
    res = simulate(scenario="phase_locked_step", gpu="h100", seconds=30.0, seed=1)
    snap = attribute(res.trace, n_boot=50)
    assert not any("show none of the work" in w for w in snap.warnings)


@pytest.mark.parametrize(("seed", "blind"), [(3, True), (1, False)])
def test_live_anchoring_reaches_the_rows_and_the_steps(seed: int, blind: bool) -> None:
    """The live view of a phase-locked H100 run with an energy counter: told as the batch
    engine tells it, and the counter's energy in the steps as in the rows (the steps kept
    the unanchored fit's energy before: 8 J a step against 22)."""
    res = simulate(scenario="phase_locked_step", gpu="h100", seconds=30.0, seed=seed)
    snap = drive(res.trace, LiveEngine(devices=res.trace.devices, horizon_s=15.0))
    assert snap is not None and snap.steps is not None
    assert any("show none of the work" in w for w in snap.warnings) is blind
    if blind:
        assert all(not k.resolvable and k.why.startswith("the power readings show none")
                   for k in snap.kernels)
        cap_w = blind_cap_w(PRESETS["h100"], snap.totals.active_idle_w)
        assert all(k.dynamic_energy_ci_j[1] >= cap_w * k.time_s for k in snap.kernels)
    assert all(k.dynamic_energy_j > 0 for k in snap.kernels)  # anchored either way
    steps_j = float(np.sum(np.asarray(snap.steps.step_energy_j)))
    assert 0.9 * snap.totals.energy_j < steps_j <= snap.totals.energy_j


def test_live_without_a_counter_says_the_total_is_low(blind_run: SimResult) -> None:
    trace = dataclasses.replace(blind_run.trace, energy=EnergyBatch.empty())
    snap = drive(trace, LiveEngine(devices=trace.devices, horizon_s=15.0))
    assert snap is not None
    (line,) = [w for w in snap.warnings if "show none of the work" in w]
    assert "the total is low by up to" in line
    assert all(k.dynamic_energy_j == 0.0 and not k.resolvable for k in snap.kernels)


def test_a_class_fitted_at_a_few_milliwatts_is_not_measured() -> None:
    """A 1 s … 2 s periodic job mostly idle (1.8 % busy), its windows missing the work: the
    GEMM fitted at 5 mW was called resolvable at 0.002 J in [0.002, 0.002] J against 210 J
    (an audit). The rule's busy floor is now 0.5 % and ΔP under 0.5 W counts as none: every
    class flagged, the counter's energy spread by busy time, the truth inside the interval."""
    spec = dataclasses.replace(SCENARIOS["phase_locked_step"], step_period_ms=2000.0)
    res = simulate("phase_locked_step", "h200", 30.0, seed=8, spec=spec)
    snap = attribute(res.trace, n_boot=50)
    assert any("show none of the work" in w for w in snap.warnings)
    assert all(not k.resolvable for k in snap.kernels)
    assert all(_held(snap, res))


def test_one_class_at_a_few_milliwatts_among_seen_ones_is_flagged() -> None:
    """The per-class form: a class fitted under 0.5 W while others draw is flagged with the
    reason (its interval is the bound's), the others judged as usual."""
    from attribution.engine import regress

    res = simulate("varied_mix", "a100", 20.0, seed=1)
    real = regress.fit

    def zero_first(*a: Any, **k: Any) -> regress.Fit:  # the solver puts a class at 2 mW
        f = real(*a, **k)
        dp = f.dp_w.copy()
        dp[0] = 0.002
        return dataclasses.replace(f, dp_w=dp)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(regress, "fit", zero_first)
        snap = attribute(res.trace, n_boot=20)
    why = [r.why for r in snap.kernels if r.why.startswith("fits at under")]
    why += [r.why for r in snap.copies if r.why.startswith("fits at under")]
    assert why and all(w.startswith("fits at under 0.5 W above active idle") for w in why)
    assert any(k.resolvable for k in snap.kernels)
