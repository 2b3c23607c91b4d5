"""The intervals' "readings alone" end (``regress.DATA_ALONE_SCALE``, both engines): where
each sensor window holds one whole step, the readings differ only by the step-to-step mix and
the ΔP prior decides the short classes; its pull moved P_idle further than the prior-span
ends say (an audit, 2026-12-05: a 25 ms step on an H100 read P_idle 60.7 W in 53.0–68.3 W
against 70.5 W true)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attribution.engine import attribute, regress
from attribution.engine.live import LiveEngine
from attribution.sim import SimResult, simulate
from attribution.sim.scenarios import SCENARIOS
from tests.test_live_engine import drive


def _step_25ms(gpu: str, seed: int) -> SimResult:
    spec = dataclasses.replace(SCENARIOS["varied_mix"], step_period_ms=25.0,
                               kernels_per_step=12, p_stall=1.0, p_sync=0.0)
    return simulate("varied_mix", gpu, 30.0, seed=seed, spec=spec)


def test_the_fit_without_the_prior_is_the_readings_own() -> None:
    """At a millionth of its weight the ΔP prior no longer moves the fit: the same answer
    as an unconstrained least-squares fit where that is non-negative."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 0.4, size=(300, 4))
    y = 60.0 + x @ np.array([400.0, 150.0, 300.0, 80.0]) + rng.normal(0.0, 2.0, 300)
    ols = np.linalg.lstsq(np.column_stack([np.ones(300), x]), y, rcond=None)[0]
    got = regress.fit(x, y, None, pooled=np.full(4, 900.0),
                      prior_scale=regress.DATA_ALONE_SCALE)
    assert got.p_idle_w == pytest.approx(ols[0], abs=0.05)
    np.testing.assert_allclose(got.dp_w, ols[1:], atol=0.5)
    pulled = regress.fit(x, y, None, pooled=np.full(4, 900.0))  # the prior at full weight
    assert abs(pulled.p_idle_w - ols[0]) > 10 * abs(got.p_idle_w - ols[0])


@pytest.mark.parametrize(("gpu", "seed"), [("h100", 1), ("a100", 1)])
def test_active_idle_interval_reaches_what_the_readings_alone_say(gpu: str, seed: int) -> None:
    res = _step_25ms(gpu, seed)
    truth_w = res.truth.active_idle_w * res.truth.gain
    lo, hi = attribute(res.trace, n_boot=50).meta["active_idle_ci_w"]["0"]
    # before: h100 [53.0, 68.3] W and a100 [51.2, 59.5] W against 70.5 and 59.7 W true
    assert lo <= truth_w and hi >= 0.98 * truth_w


def test_the_live_view_reaches_it_too() -> None:
    res = _step_25ms("h100", 1)
    truth_w = res.truth.active_idle_w * res.truth.gain
    snap = drive(res.trace, LiveEngine(devices=res.trace.devices, horizon_s=30.0))
    assert snap is not None
    lo, hi = snap.meta["active_idle_ci_w"]["0"]
    assert lo <= truth_w and hi >= 0.98 * truth_w  # before: [53.4, 68.6] W against 70.5 W
