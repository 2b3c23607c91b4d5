"""`attribution.diff` additions: board gain in the interval, unresolvable mechanisms in the
decomposition, clamp joules moved out of kernels, and verdicts on simulated pairs."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attribution.diff import diff, mechanism_energies
from attribution.engine import attribute
from attribution.sim import SCENARIOS, simulate
from attribution.snapshot import KernelRow, Snapshot

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_diff import make_snapshot


def _pair(uuid_a: str | None, uuid_b: str | None, shift: float = 0.0
          ) -> tuple[Snapshot, Snapshot]:
    rng = np.random.default_rng(0)
    xa = 100 + 5 * rng.standard_normal(400)
    xb = 100 * (1 + shift) + 5 * rng.standard_normal(400)
    ma = {"gpu_uuids": {"0": uuid_a}} if uuid_a else {}
    mb = {"gpu_uuids": {"0": uuid_b}} if uuid_b else {}
    return (make_snapshot(xa, {"k": 50.0}, meta=ma), make_snapshot(xb, {"k": 50.0}, meta=mb))


def test_two_boards_widen_the_interval_by_their_gain_ratio() -> None:
    a, b = _pair("GPU-1", "GPU-1")
    same = diff(a, b)
    a, b = _pair(None, None)
    unknown = diff(a, b)
    a, b = _pair("GPU-1", "GPU-2")
    two = diff(a, b)
    assert same.delta_ci == unknown.delta_ci
    assert any("do not say which boards" in r for r in unknown.reasons)
    w_same = same.delta_ci[1] - same.delta_ci[0]
    w_two = two.delta_ci[1] - two.delta_ci[0]
    # a100 gain sigma 2 %: sqrt(2) * 2 % * 1.645 * 100 J = 4.65 J half-width from the boards
    assert w_two / 2 == pytest.approx(np.hypot(w_same / 2, 1.645 * np.sqrt(2) * 0.02 * 100),
                                      rel=0.02)
    assert any("different boards" in r for r in two.reasons)
    # a 4 % step is a regression on one board, not across two
    a, b = _pair("GPU-1", "GPU-1", shift=0.04)
    assert diff(a, b).verdict == "regression"
    a, b = _pair("GPU-1", "GPU-2", shift=0.04)
    assert diff(a, b).verdict == "inconclusive"


def test_unresolvable_mechanism_tops_only_on_what_it_is_sure_of() -> None:
    steps = [10.0] * 50
    base = make_snapshot(steps, {"gemm": 500.0, "flash": 300.0})
    cand = make_snapshot(steps, {"gemm": 560.0, "flash": 300.0})
    wide = KernelRow(name="flash", gpu=0, calls=100, time_s=1.0, energy_j=380.0,
                     dynamic_energy_j=300.0, dynamic_energy_ci_j=(0.0, 700.0),
                     avg_power_w=380.0, resolvable=False, precision="bf16")
    cand = dataclasses.replace(cand, kernels=(cand.kernels[0], wide))
    top = diff(base, cand).mechanisms
    assert [m.mechanism for m in top[:2]] == ["kernel:gemm", "kernel:flash"]
    assert top[1].delta_j > top[0].delta_j and not top[1].resolvable


def test_clamp_joules_move_out_of_the_stretched_kernels() -> None:
    clamps = [{"reason": "sw_power_cap", "energy_j": 30.0, "time_s": 2.0,
               "by_kernel_j": {"gemm": 20.0, "flash": 10.0}}]
    s = make_snapshot([1.0] * 10, {"gemm": 500.0, "flash": 300.0}, extra={"clamps": clamps})
    e = mechanism_energies(s)
    assert e["clamp.sw_power_cap"] == 30.0
    assert e["kernel:gemm"] == 480.0 and e["kernel:flash"] == 290.0
    assert sum(e.values()) == pytest.approx(s.totals.energy_j)


def _one_board(seed: int, **change: Any) -> Snapshot:
    """An 8 s run on one board (readings divided by the seed's gain, one uuid).  One mix for
    every phase: phases are counted in steps, so a short run with slower steps would cover
    other phases (another kernel mix) and confound the injected change."""
    spec = dataclasses.replace(SCENARIOS["varied_mix"], dirichlet_alpha=0.0, **change)
    sim = simulate("varied_mix", "a100", 8, seed=seed, spec=spec)
    tr = sim.trace
    g = 1.0 / sim.truth.gain
    tr.power = type(tr.power)(**{**tr.power.columns(), "power_mw": np.rint(
        tr.power.power_mw * g).astype(np.int64)})
    tr.energy = type(tr.energy)(**{**tr.energy.columns(), "energy_mj": np.rint(
        tr.energy.energy_mj * g).astype(np.int64)})
    tr.devices = [dataclasses.replace(d, uuid="GPU-board") for d in tr.devices]
    return attribute(tr, n_boot=50)


def test_simulated_host_stall_regression_and_same_config_rerun() -> None:
    base = _one_board(0)
    worse = diff(base, _one_board(1000, p_stall=0.6))
    assert worse.verdict == "regression"
    assert worse.mechanisms[0].mechanism == "idle.host_stall"
    again = diff(base, _one_board(1000))
    assert again.verdict in ("neutral", "inconclusive")
