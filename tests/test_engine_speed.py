"""The batch engine's speed work changed no result.

``BusyFunction`` moved from two prefix-sum searches per query to one ``np.interp`` over
precomputed knots, and the idle energy per gap lost its Python loop.  The reference paths here
are the simplest correct forms: ``B_g(t)`` by brute-force integer clipping, the previous
prefix-sum form (kept in this file), and a per-gap dict lookup; the engine run with the
reference busy function must give the same per-class energies.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from attribution.engine import attribute, attribute_arrays, build
from attribution.engine.activity import BusyFunction
from attribution.model import F64, I32, I64, Trace
from attribution.sim import simulate


class PrefixSumBusy:
    """The previous ``BusyFunction``: sorted starts/ends, prefix sums, two searches."""

    def __init__(self, start_ns: I64, end_ns: I64, group: I32, n_groups: int, *,
                 origin_ns: int) -> None:
        self.origin_ns = origin_ns
        self.n_groups = n_groups
        s_all = (start_ns - origin_ns).astype(np.float64) * 1e-9
        e_all = (end_ns - origin_ns).astype(np.float64) * 1e-9
        self.parts = []
        for g in range(n_groups):
            s = np.sort(s_all[group == g])
            e = np.sort(e_all[group == g])
            self.parts.append((s, e, np.r_[0.0, np.cumsum(s)], np.r_[0.0, np.cumsum(e)]))

    def __call__(self, t_ns: I64) -> F64:
        t = (t_ns - self.origin_ns).astype(np.float64) * 1e-9
        out = np.zeros((len(t), self.n_groups))
        for g, (s, e, cs, ce) in enumerate(self.parts):
            ns = np.searchsorted(s, t, side="right")
            ne = np.searchsorted(e, t, side="right")
            out[:, g] = (t * ns - cs[ns]) - (t * ne - ce[ne])
        return out


def brute_busy_s(start_ns: I64, end_ns: I64, group: I32, n_groups: int, t_ns: I64) -> F64:
    """Σ_i |[s_i, e_i] ∩ (-∞, t]| in exact integer ns, per group."""
    out = np.zeros((len(t_ns), n_groups))
    for g in range(n_groups):
        s, e = start_ns[group == g], end_ns[group == g]
        for k, t in enumerate(t_ns.tolist()):
            out[k, g] = float(np.clip(t - s, 0, e - s).sum()) * 1e-9
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_busy_function_is_exact(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    start = np.sort(rng.integers(0, 50_000_000_000, n))
    dur = rng.integers(0, 3_000_000, n)
    dur[::17] = 0  # zero-length items
    start[5::23] = start[4::23][: len(start[5::23])]  # equal start times
    group = rng.integers(0, 4, n).astype(np.int32)  # overlapping items within a group too
    end = start + dur
    t = np.r_[rng.integers(-1_000_000, 51_000_000_000, 400), start[:50], end[:50]]
    want = brute_busy_s(start, end, group, 4, t)
    got = BusyFunction(start, end, group, 4, origin_ns=0)(t)
    assert np.abs(got - want).max() < 1e-9
    # B is non-decreasing in t and, for a group, never more than its total busy time
    ts = np.sort(t)
    b = BusyFunction(start, end, group, 4, origin_ns=0)(ts)
    assert (np.diff(b, axis=0) >= -1e-12).all()
    total = np.bincount(group, weights=dur.astype(np.float64) * 1e-9, minlength=4)
    assert (b <= total[None, :] + 1e-9).all()


@pytest.mark.parametrize(("scenario", "gpu"), [("varied_mix", "a100"), ("two_streams", "h100"),
                                               ("launch_bound", "a100")])
def test_engine_results_unchanged_by_the_fast_busy_function(
        scenario: str, gpu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = simulate(scenario=scenario, gpu=gpu, seconds=12.0, seed=3).trace
    fast = attribute(trace, n_boot=30)
    monkeypatch.setattr(build, "BusyFunction", PrefixSumBusy)
    ref = attribute(trace, n_boot=30)
    assert fast.gpus[0].sensor.lag_ms == ref.gpus[0].sensor.lag_ms
    f = {k.name: k for k in fast.kernels}
    assert set(f) == {k.name for k in ref.kernels}
    for k in ref.kernels:
        # the prefix-sum form is off by ~1e-7 s per busy-time difference: relative 1e-4
        assert f[k.name].dynamic_energy_j == pytest.approx(k.dynamic_energy_j, rel=1e-4,
                                                           abs=1e-6)
        assert f[k.name].energy_j == pytest.approx(k.energy_j, rel=1e-4, abs=1e-6)
    assert fast.totals.energy_j == pytest.approx(ref.totals.energy_j, rel=1e-6)
    assert fast.totals.idle_energy_j == pytest.approx(ref.totals.idle_energy_j, rel=1e-6)


def test_idle_energy_per_gap_is_its_device_idle_power(
        on_two_gpus: Callable[[Trace, Trace], Trace]) -> None:
    a = simulate(scenario="demo", gpu="h100", seconds=6.0, seed=1).trace
    b = simulate(scenario="demo", gpu="a100", seconds=6.0, seed=2).trace
    tr = on_two_gpus(a, b)
    arr = attribute_arrays(tr, n_boot=10)
    p_idle = {r.device: r.p_idle_w for r in arr.devices}
    assert len(p_idle) == 2 and p_idle[0] != p_idle[1]
    want = [p_idle[int(d)] * int(ns) * 1e-9
            for d, ns in zip(arr.idle.device.tolist(), arr.idle.duration_ns.tolist(),
                             strict=True)]
    assert np.allclose(arr.idle_energy_j, want, rtol=1e-12, atol=0.0)


def direct_window_fractions(busy: BusyFunction | PrefixSumBusy, t_ns: I64, window_ms: float,
                            lag_ms: float, tau_ms: float = 0.0, *,
                            slow: tuple[float, float] = (0.0, 0.0)) -> F64:
    """The activity matrix as ``timebase.window_fractions`` computed it before the lag search
    was batched: every window edge in one call, delay-major."""
    from attribution.engine.timebase import _delays

    n = len(t_ns)
    u, wt = _delays(tau_ms, slow)
    hi = (t_ns[None, :] - np.rint((lag_ms + u[:, None]) * 1e6).astype(np.int64)).reshape(-1)
    lo = hi - np.int64(round(window_ms * 1e6))
    both = busy(np.concatenate([lo, hi]))
    m = len(hi)
    frac = (both[m:] - both[:m]) / (window_ms * 1e-3)
    return np.asarray(np.tensordot(wt, frac.reshape(len(u), n, -1), axes=1))


@pytest.mark.usefixtures("native_mode")
def test_lag_matrices_are_window_fractions_each_computed_once() -> None:
    """``LagMatrices`` hands out one ``window_fractions`` matrix per (lag, slow stage), to the
    bit, reading each only once however the lags are asked for."""
    from attribution.engine import timebase

    rng = np.random.default_rng(3)
    start = np.sort(rng.integers(0, 20_000_000_000, 3000))
    busy = BusyFunction(start, start + rng.integers(0, 4_000_000, 3000),
                        rng.integers(0, 3, 3000).astype(np.int32), 3, origin_ns=0)
    t = np.sort(rng.integers(200_000_000, 19_800_000_000, 120))
    spread = rng.integers(0, 12_000_000, len(t))
    read: list[int] = []
    real = timebase.iter_window_fractions

    def counting(*args: object, **kw: object) -> object:
        if "spread_ns" in kw:  # the outer call (a spread one calls itself without it)
            read.append(len(args[3]))  # type: ignore[arg-type]
        return real(*args, **kw)  # type: ignore[arg-type]

    for sp in (None, spread):
        act = timebase.LagMatrices(busy, t, 25.0, 0.8, spread_ns=sp)
        read.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(timebase, "iter_window_fractions", counting)
            first = act.at([1.75, -3.0, 1.75])
            again = act.at([-3.0, 4.5], (120.0, 0.3))
            more = act.at([4.5, 1.75, -3.0])
            act.release()
            after = act.at([1.75])
        assert read == [2, 2, 1, 1]  # each (lag, stage) read once until released
        assert after[0] is not first[0] and after[0].tobytes() == first[0].tobytes()
        for lag, x in [(1.75, first[0]), (-3.0, first[1]), (4.5, more[0]), (1.75, more[1])]:
            assert x.tobytes() == timebase.window_fractions(busy, t, 25.0, lag, 0.8,
                                                            spread_ns=sp).tobytes()
        assert first[0] is first[2] is more[1]
        assert again[0].tobytes() == timebase.window_fractions(
            busy, t, 25.0, -3.0, 0.8, slow=(120.0, 0.3), spread_ns=sp).tobytes()
        assert not np.array_equal(again[0], first[1])  # the slow stage is part of the key


@pytest.mark.parametrize("budget", [1, 5_000, 4_000_000])
def test_batched_window_fractions_are_bit_identical(budget: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The lag search's batched activity matrices equal one ``window_fractions`` call each,
    to the bit (so the grid search picks the same lag), whatever the batch size."""
    from attribution.engine import timebase

    rng = np.random.default_rng(7)
    n = 4000
    start = np.sort(rng.integers(0, 20_000_000_000, n))
    end = start + rng.integers(0, 4_000_000, n)
    group = rng.integers(0, 3, n).astype(np.int32)
    busy = BusyFunction(start, end, group, 3, origin_ns=0)
    t = np.sort(rng.integers(200_000_000, 19_800_000_000, 150))
    specs = [(-20.0, 0.0), (1.75, 0.0), (0.25, 0.4), (-2.5, 3.0), (1.75, 0.0), (59.0, 1.2)]
    monkeypatch.setattr(timebase, "BATCH_VALUES", budget)
    for slow in ((0.0, 0.0), (120.0, 0.3)):
        got = list(timebase.iter_window_fractions(busy, t, 25.0, specs, slow=slow))
        assert len(got) == len(specs)
        for (lag, tau), x in zip(specs, got, strict=True):
            want = direct_window_fractions(busy, t, 25.0, lag, tau, slow=slow)
            assert x.shape == want.shape == (len(t), 3)
            assert np.array_equal(x, want)
    # a different window length and a short reading list
    x1 = timebase.window_fractions(busy, t[:3], 10.0, 5.0, 0.8)
    assert np.array_equal(x1, direct_window_fractions(busy, t[:3], 10.0, 5.0, 0.8))
    assert timebase.window_fractions(busy, t[:0], 10.0, 5.0, 0.8).shape == (0, 3)
    # readings out of order (the busy function then sorts the queries itself)
    sh = t[np.random.default_rng(1).permutation(len(t))]
    for (lag, tau), x in zip(specs, timebase.iter_window_fractions(busy, sh, 25.0, specs),
                             strict=True):
        assert np.array_equal(x, direct_window_fractions(busy, sh, 25.0, lag, tau))
    # any busy callable (no by_group): the generic layout
    plain = PrefixSumBusy(start, end, group, 3, origin_ns=0)
    x2 = timebase.window_fractions(plain, t, 25.0, 1.75, 0.4)
    assert np.array_equal(x2, direct_window_fractions(plain, t, 25.0, 1.75, 0.4))
