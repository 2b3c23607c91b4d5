"""The NVML sampler against a fake libnvidia-ml (pynvml's own wrappers run unchanged on it).

Expected readings are computed here by brute force on the board's 1 ms true-power grid (a mean
of the grid values inside each sensor window), independently of the fake's cumulative-energy
arithmetic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pynvml
import pytest

from attribution.model import PowerField
from ppwtop.collectors.nvml import NvmlSampler, NvmlUnavailableError
from ppwtop.collectors.nvml_rows import parse_cuda_visible_devices
from ppwtop.fakes.nvml_board import BoardModel, VirtualClock, board_from_sim, square_wave
from ppwtop.fakes.nvml_lib import FakeNvmlLib, installed

T0_NS = 1_700_000_000_000_000_000
MS = 1_000_000


@pytest.fixture(autouse=True)
def restore_pynvml() -> Iterator[None]:
    """Every test leaves pynvml's module state (library, pointer cache, refcount) as it was."""
    saved = (pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache),
             pynvml._nvmlLib_refcount)
    yield
    leaked = pynvml.nvmlLib is not saved[0]
    pynvml.nvmlLib = saved[0]
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlGetFunctionPointer_cache.update(saved[1])
    pynvml._nvmlLib_refcount = saved[2]
    assert not leaked, "a test left a fake in pynvml.nvmlLib"


def random_board(name: str = "NVIDIA H100 80GB HBM3", uuid: str = "GPU-aaaa-1111",
                 seconds: float = 4.0, seed: int = 0, **kw: object) -> BoardModel:
    rng = np.random.default_rng(seed)
    t = T0_NS + np.arange(round(seconds * 1000), dtype=np.int64) * MS
    p = 80.0 + 400.0 * rng.random(len(t))
    params: dict[str, object] = {"period_ms": 100.0, "window_ms": 25.0, "lag_ms": 2.0}
    params.update(kw)
    return BoardModel(name, uuid, t, p, **params)  # type: ignore[arg-type]


def brute_mean_mw(board: BoardModel, pub_ns: int, window_ms: float, lag_ms: float) -> float:
    end = pub_ns - round(lag_ms * MS)
    start = end - round(window_ms * MS)
    inside = (board.t_ns >= start) & (board.t_ns < end)
    assert inside.sum() == round(window_ms), "window must lie on the 1 ms grid"
    return float(board.power_w[inside].mean() * 1000.0)


def run_polls(sampler: NvmlSampler, clock: VirtualClock, n: int, step_ms: float) -> None:
    for _ in range(n):
        sampler.poll_once()
        clock.advance_ms(step_ms)


# --- pynvml's wrappers on the fake ------------------------------------------------------------


def test_pynvml_wrappers_run_on_the_fake() -> None:
    board = random_board()
    clock = VirtualClock(T0_NS + 1234 * MS)
    with installed(FakeNvmlLib([board], clock, missing=frozenset({"nvmlDeviceGetPowerMode"}))):
        pynvml.nvmlInit()
        try:
            assert pynvml.nvmlDeviceGetCount() == 1
            assert pynvml.nvmlSystemGetDriverVersion() == "580.65.06"
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
            assert pynvml.nvmlDeviceGetUUID(h) == "GPU-aaaa-1111"
            (v,) = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_POWER_INSTANT])
            assert v.nvmlReturn == pynvml.NVML_SUCCESS
            # latest publication at or before 1234 ms is 1200 ms; window [1173, 1198) ms
            assert v.timestamp == (T0_NS + 1200 * MS) // 1000
            assert v.value.uiVal == pytest.approx(
                brute_mean_mw(board, T0_NS + 1200 * MS, 25, 2), abs=1)
            with pytest.raises(pynvml.NVMLError_InvalidArgument) as err:
                pynvml.nvmlDeviceGetHandleByIndex(5)
            assert str(err.value) == "Invalid Argument"  # nvmlErrorString path
            with pytest.raises(pynvml.NVMLError_FunctionNotFound):
                pynvml.nvmlDeviceGetPowerState(h)  # not exported by the fake
        finally:
            pynvml.nvmlShutdown()
    assert pynvml.nvmlLib is None or not isinstance(pynvml.nvmlLib, FakeNvmlLib)


def test_energy_counter_is_the_true_integral() -> None:
    t = T0_NS + np.arange(2000, dtype=np.int64) * MS
    p = np.where(np.arange(2000) < 1000, 100.0, 300.0)
    board = BoardModel("NVIDIA A100-SXM4-40GB", "GPU-e", t, p, idle_w=50.0,
                       energy_offset_mj=70_000)
    clock = VirtualClock(T0_NS - 1000 * MS)
    with installed(FakeNvmlLib([board], clock)):
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        before = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        clock.advance_ms(1000 + 1500)  # 1 s idle, 1 s at 100 W, then 0.5 s at 300 W
        after = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        clock.advance_ms(1500)  # 0.5 s at 300 W, then 1 s of idle (50 W) past the grid
        later = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        pynvml.nvmlShutdown()
    assert before == 70_000 - 50_000  # 1 s of idle before the grid starts
    assert after - before == pytest.approx(50_000 + 100_000 + 150_000, abs=1)
    assert later - after == pytest.approx(150_000 + 50_000, abs=1)


# --- instant readings, de-duplication, samples buffer -------------------------------------


def test_instant_readings_are_the_published_window_means() -> None:
    board = random_board()
    clock = VirtualClock(T0_NS + 1100 * MS)  # the 1 s average window lies on the grid
    with installed(FakeNvmlLib([board], clock)):
        s = NvmlSampler(clock=clock, env={})
        run_polls(s, clock, 100, 20.0)  # 2 s at 50 Hz
        tr = s.drain()
        s.stop()
    pw = tr.power
    inst = (pw.field == PowerField.INSTANT) & pw.fresh
    assert inst.sum() == 20
    t_fresh = pw.t_ns[inst]
    assert np.all(np.diff(t_fresh) == 100 * MS)  # the sensor's own timestamps, every T
    expect = np.array([brute_mean_mw(board, int(t), 25, 2) for t in t_fresh])
    np.testing.assert_allclose(pw.power_mw[inst], expect, atol=1.0)
    avg = (pw.field == PowerField.AVERAGE) & pw.fresh
    expect_avg = np.array([brute_mean_mw(board, int(t), 1000, 2) for t in pw.t_ns[avg]])
    np.testing.assert_allclose(pw.power_mw[avg], expect_avg, atol=1.0)


def test_dedup_when_polling_five_times_faster_than_the_sensor() -> None:
    board = random_board()
    clock = VirtualClock(T0_NS + 500 * MS + 7 * MS)  # off the publication phase
    with installed(FakeNvmlLib([board], clock)):
        s = NvmlSampler(clock=clock, env={})
        run_polls(s, clock, 150, 20.0)  # T = 100 ms, polled every 20 ms
        tr = s.drain()
        s.stop()
    pw = tr.power.take(tr.power.field == PowerField.INSTANT)
    assert len(pw) == 150  # every poll kept (the engine sees the cadence)
    assert pw.fresh.sum() == 30  # one fresh row per published reading
    fresh_t = pw.t_ns[pw.fresh]
    assert len(np.unique(fresh_t)) == len(fresh_t)
    # each stale row repeats the reading of a fresh row with the same sensor timestamp
    stale = ~pw.fresh
    idx = np.searchsorted(fresh_t, pw.t_ns[stale])
    assert np.all(fresh_t[idx] == pw.t_ns[stale])
    assert np.all(pw.power_mw[pw.fresh][idx] == pw.power_mw[stale])
    stats = tr.meta["nvml"]["devices"][0]["field_stats"]["instant"]
    assert stats["rows"] == 150 and stats["fresh"] == 30
    assert stats["mean_period_ms"] == pytest.approx(100.0)


def test_field_timestamps_that_are_query_times_or_missing() -> None:
    clock = VirtualClock(T0_NS + 1000 * MS)
    with installed(FakeNvmlLib([random_board(field_timestamps="query"),
                                random_board(field_timestamps="none", uuid="GPU-b")], clock)):
        s = NvmlSampler(clock=clock, env={})
        run_polls(s, clock, 100, 20.0)
        tr = s.drain()
        s.stop()
    inst = tr.power.take(tr.power.field == PowerField.INSTANT)
    q = inst.take(inst.device == 0)
    assert q.fresh.all()  # nothing to de-duplicate on: every timestamp is new...
    assert any("look like query times" in n for n in s.notes)  # ...and the run says so
    z = inst.take(inst.device == 1)
    assert np.all(np.diff(z.t_ns) == 20 * MS)  # poll times
    assert z.fresh.sum() == 20  # de-duplicated on the value (random board: values differ)
    assert any("carry no timestamp" in n for n in s.notes)


def test_samples_buffer_is_drained_without_gaps_or_repeats() -> None:
    board = random_board(samples_capacity=50)
    clock = VirtualClock(T0_NS + 600 * MS)
    with installed(FakeNvmlLib([board], clock)):
        s = NvmlSampler(clock=clock, env={}, samples_hz=2.0)
        run_polls(s, clock, 50, 20.0)
        first = s.drain()
        run_polls(s, clock, 50, 20.0)
        second = s.drain()
        s.stop()
    t = np.concatenate([b.t_ns[b.field == PowerField.SAMPLES] for b in (first.power,
                                                                        second.power)])
    # probed at 600 ms (buffer contents before that skipped), drained at 2 Hz until 2.1 s
    assert t[0] == T0_NS + 700 * MS and t[-1] == T0_NS + 2100 * MS
    assert np.all(np.diff(t) == 100 * MS)  # consecutive publications, across drains
    inst = second.power.take((second.power.field == PowerField.INSTANT) & second.power.fresh)
    smp = second.power.take(second.power.field == PowerField.SAMPLES)
    common, i_inst, i_smp = np.intersect1d(inst.t_ns, smp.t_ns, return_indices=True)
    assert len(common) >= 5
    assert np.all(inst.power_mw[i_inst] == smp.power_mw[i_smp])


# --- unsupported calls ---------------------------------------------------------------------------


def test_unsupported_samples_and_energy_give_notes_not_crashes() -> None:
    good = random_board(uuid="GPU-good")
    bare = random_board(uuid="GPU-bare").without(
        "nvmlDeviceGetSamples", "nvmlDeviceGetTotalEnergyConsumption",
        f"field:{pynvml.NVML_FI_DEV_POWER_AVERAGE}")
    clock = VirtualClock(T0_NS + 800 * MS)
    with installed(FakeNvmlLib([good, bare], clock)) as lib:
        s = NvmlSampler(clock=clock, env={}, samples_hz=50.0)
        run_polls(s, clock, 30, 20.0)
        tr = s.drain()
        s.stop()
    # probed once at start, then never called again on the board that lacks them
    assert lib.board_calls[("nvmlDeviceGetSamples", 1)] == 1
    assert lib.board_calls[("nvmlDeviceGetTotalEnergyConsumption", 1)] == 1
    assert lib.board_calls[("nvmlDeviceGetTotalEnergyConsumption", 0)] == 1 + 30
    notes = " | ".join(s.notes)
    assert "GPU 1" in notes and "samples buffer unsupported" in notes
    assert "no energy counter" in notes
    assert "'average' unsupported" in notes
    assert "GPU 0" not in notes
    devs = {d["device"]: d for d in tr.meta["nvml"]["devices"]}
    assert devs[0]["samples_buffer"] and devs[0]["energy_counter"]
    assert not devs[1]["samples_buffer"] and not devs[1]["energy_counter"]
    assert devs[1]["fields"] == ["instant"]
    on1 = tr.power.device == 1
    assert not np.any(tr.power.field[on1] == PowerField.SAMPLES)
    assert not np.any(tr.power.field[on1] == PowerField.AVERAGE)
    assert np.any(tr.power.field[on1] == PowerField.INSTANT)
    assert set(tr.energy.device.tolist()) == {0}
    assert tr.meta["nvml"]["notes"] == s.notes


def test_missing_instant_field_falls_back_to_power_usage_with_a_note() -> None:
    board = random_board().without(f"field:{pynvml.NVML_FI_DEV_POWER_INSTANT}",
                                   f"field:{pynvml.NVML_FI_DEV_POWER_AVERAGE}")
    clock = VirtualClock(T0_NS + 1500 * MS)
    with installed(FakeNvmlLib([board], clock)):
        s = NvmlSampler(clock=clock, env={})
        run_polls(s, clock, 20, 20.0)
        tr = s.drain()
        s.stop()
    assert set(tr.power.field.tolist()) <= {PowerField.DRAW, PowerField.SAMPLES}
    draw = tr.power.take(tr.power.field == PowerField.DRAW)
    assert len(draw) == 20
    assert np.all(np.diff(draw.t_ns) == 20 * MS)  # poll times: no sensor timestamp
    assert any("nvmlDeviceGetPowerUsage" in n for n in s.notes)


def test_clocks_thermals_and_reasons_at_the_lower_rate() -> None:
    board = random_board(
        state_t_ns=np.array([T0_NS, T0_NS + 1500 * MS]), sm_mhz=[1980, 1410],
        mem_mhz=[2619, 2619], temp_c=[40, 77], clock_reasons=[0, 0x4])
    clock = VirtualClock(T0_NS + 1000 * MS)
    # an older driver without the ...EventReasons name: the Throttle name answers
    lib = FakeNvmlLib([board], clock,
                      missing=frozenset({"nvmlDeviceGetCurrentClocksEventReasons"}))
    with installed(lib):
        s = NvmlSampler(clock=clock, clock_hz=5.0, env={})
        run_polls(s, clock, 50, 20.0)  # 1 s
        tr = s.drain()
        s.stop()
    c = tr.clocks
    assert len(c) == 5  # 5 Hz over 1 s
    assert np.all(np.diff(c.t_ns) == 200 * MS)
    late = c.t_ns >= T0_NS + 1500 * MS
    assert c.sm_mhz[~late].tolist() == [1980] * int((~late).sum())
    assert c.sm_mhz[late].tolist() == [1410] * int(late.sum())
    assert c.temp_c[late].tolist() == [77.0] * int(late.sum())
    assert c.clock_reasons[late].tolist() == [4] * int(late.sum())
    assert lib.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1 + 5


def test_unsupported_clocks_give_sentinels() -> None:
    board = random_board().without("nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature")
    clock = VirtualClock(T0_NS + 1000 * MS)
    with installed(FakeNvmlLib([board], clock)):
        s = NvmlSampler(clock=clock, env={})
        run_polls(s, clock, 10, 20.0)
        tr = s.drain()
        s.stop()
    assert len(tr.clocks) == 1
    assert tr.clocks.sm_mhz[0] == -1 and tr.clocks.mem_mhz[0] == -1
    assert np.isnan(tr.clocks.temp_c[0])
    assert sum("unsupported" in n for n in s.notes) == 3


def test_gpu_lost_mid_run_stops_that_gpu_only() -> None:
    boards = [random_board(uuid="GPU-a"), random_board(uuid="GPU-b")]
    clock = VirtualClock(T0_NS + 1000 * MS)
    with installed(FakeNvmlLib(boards, clock)) as lib:
        s = NvmlSampler(clock=clock, env={})
        run_polls(s, clock, 10, 20.0)
        lib.fail["nvmlDeviceGetFieldValues@0"] = pynvml.NVML_ERROR_GPU_IS_LOST
        run_polls(s, clock, 10, 20.0)
        tr = s.drain()
        s.stop()
    assert any("is lost" in n for n in s.notes)
    inst = tr.power.field == PowerField.INSTANT
    assert int((inst & (tr.power.device == 0)).sum()) == 10  # nothing after it was lost
    assert int((inst & (tr.power.device == 1)).sum()) == 20
    assert len(tr.energy.take(tr.energy.device == 0)) == 10
    assert [d["lost"] for d in tr.meta["nvml"]["devices"]] == [True, False]


def test_nvml_init_failure_is_a_clear_error() -> None:
    lib = FakeNvmlLib([random_board()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with installed(lib), pytest.raises(NvmlUnavailableError, match="Driver Not Loaded"):
        NvmlSampler(env={}).open()


# --- which GPUs ----------------------------------------------------------------------------------


UUIDS = ["GPU-aaaa-0000", "GPU-bbbb-1111", "GPU-cccc-2222"]


def three_boards() -> list[BoardModel]:
    return [random_board(name=f"NVIDIA H100 #{i}", uuid=u, seed=i) for i, u in enumerate(UUIDS)]


@pytest.mark.parametrize(("value", "want"), [
    ("2,0", [2, 0]),
    ("GPU-cccc-2222,GPU-aaaa", [2, 0]),
    ("bbbb", [1]),
    ("1,7,2", [1]),  # CUDA stops at the first invalid entry
    ("0,0,1", [0]),
    ("", []),
    ("0,GPU-", [0]),  # an ambiguous prefix ends the list
    ("MIG-1234,0", []),
])
def test_parse_cuda_visible_devices(value: str, want: list[int]) -> None:
    got, notes = parse_cuda_visible_devices(value, UUIDS)
    assert got == want
    assert bool(notes) == (value in ("1,7,2", "0,0,1", "0,GPU-", "MIG-1234,0"))


def test_cuda_visible_devices_selects_and_renumbers() -> None:
    clock = VirtualClock(T0_NS + 1000 * MS)
    with installed(FakeNvmlLib(three_boards(), clock)):
        s = NvmlSampler(clock=clock, env={"CUDA_VISIBLE_DEVICES": "GPU-cccc,0"})
        run_polls(s, clock, 3, 20.0)
        tr = s.drain()
        s.stop()
    assert [(d.index, d.name, d.uuid) for d in tr.devices] == [
        (0, "NVIDIA H100 #2", "GPU-cccc-2222"), (1, "NVIDIA H100 #0", "GPU-aaaa-0000")]
    assert [d["nvml_index"] for d in tr.meta["nvml"]["devices"]] == [2, 0]
    assert set(tr.power.device.tolist()) == {0, 1}
    assert any("CUDA_DEVICE_ORDER" in n for n in s.notes)  # an integer entry was used


def test_explicit_indices_win_and_empty_env_selects_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock(T0_NS + 1000 * MS)
    with installed(FakeNvmlLib(three_boards(), clock)):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        s = NvmlSampler([1, 2], clock=clock)
        s.open()
        assert [d.uuid for d in s.device_infos] == UUIDS[1:]
        s.stop()
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        s = NvmlSampler(clock=clock)
        s.poll_once()
        assert s.device_infos == [] and len(s.drain().power) == 0
        assert any("no GPU selected" in n for n in s.notes)
        s.stop()
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        s = NvmlSampler(clock=clock)
        s.open()
        assert len(s.device_infos) == 3
        s.stop()
        with pytest.raises(ValueError, match="NVML index"):
            NvmlSampler([3], clock=clock).open()
        assert pynvml.nvmlLib.init_count == 0  # no NVML handle leaked by the failed open


# --- cost and the thread ---------------------------------------------------------------------


def test_cost_fraction_is_measured_and_reported() -> None:
    clock = VirtualClock(T0_NS + 1000 * MS)
    with installed(FakeNvmlLib([random_board()], clock)):
        s = NvmlSampler(clock=clock, env={})
        run_polls(s, clock, 50, 20.0)
        meta = s.drain().meta["nvml"]
        s.stop()
    assert s.cost_fraction > 0.0
    assert meta["cost_fraction"] > 0.0
    assert meta["polls"] == 50
    assert meta["poll_cpu_us_mean"] > 0.0
    assert meta["poll_wall_us_mean"] > 0.0
    # the fraction is CPU time in polls over wall time since open: bounded by the polls' share
    assert meta["cost_fraction"] <= 1.0


def test_thread_start_stop_is_clean_and_drain_is_thread_safe() -> None:
    now = time.time_ns()
    t, p = square_wave(now - 1_000 * MS, 10.0, 100.0, 300.0, 1.0)
    board = BoardModel("NVIDIA H100 80GB HBM3", "GPU-live", t, p, period_ms=20.0,
                       window_ms=10.0)
    with installed(FakeNvmlLib([board])) as lib:
        s = NvmlSampler(poll_hz=200.0, clock_hz=20.0, env={})
        s.start()
        assert s.running
        parts = []
        for _ in range(6):
            time.sleep(0.05)
            parts.append(s.drain())  # concurrent with polling
        s.stop()
        s.stop()  # idempotent
        assert not s.running
        assert lib.init_count == 0  # nvmlShutdown called once
        with pytest.raises(RuntimeError, match="make a new one"):
            s.start()
        parts.append(s.drain())
    assert not any(th.name == "ppwtop-nvml" for th in threading.enumerate())
    fresh_t = np.concatenate([b.power.t_ns[(b.power.field == PowerField.INSTANT)
                                           & b.power.fresh] for b in parts])
    assert len(fresh_t) >= 5
    assert len(np.unique(fresh_t)) == len(fresh_t)  # no reading handed over twice
    assert s.polls >= 20
    assert 0.0 < s.cost_fraction < 0.5
    assert not s.errors


# --- driven by the simulator -----------------------------------------------------------------


def test_board_from_sim_replays_the_simulators_readings_and_counter() -> None:
    from attribution.sim import simulate

    res = simulate("demo", "h100", seconds=2.0, seed=3)
    board = board_from_sim(res)
    start = res.truth.window_start_ns
    clock = VirtualClock(start)
    with installed(FakeNvmlLib([board], clock)):
        s = NvmlSampler(clock=clock, env={})
        run_polls(s, clock, 100, 20.0)  # 2 s at 50 Hz: last poll at start + 1980 ms
        tr = s.drain()
        s.stop()
        # the counter the fake answers is the simulator's, at the simulator's read times
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        sim_e = res.trace.energy
        for j in (3, 10, 17):
            clock.advance(int(sim_e.t_ns[j]) - clock())
            got = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
            assert abs(got - int(sim_e.energy_mj[j])) <= 1
        pynvml.nvmlShutdown()
    assert tr.devices[0].name == "NVIDIA H100 80GB HBM3"
    sim_p = res.trace.power
    pub = sim_p.take(sim_p.fresh & (sim_p.field == PowerField.INSTANT))
    lo = int(np.searchsorted(pub.t_ns, start, side="right")) - 1
    hi = int(np.searchsorted(pub.t_ns, start + 1980 * MS, side="right"))
    got = tr.power.take(tr.power.fresh & (tr.power.field == PowerField.INSTANT))
    assert len(got) == hi - lo >= 20
    np.testing.assert_array_equal(got.t_ns, pub.t_ns[lo:hi] // 1000 * 1000)  # µs timestamps
    np.testing.assert_array_equal(got.power_mw, pub.power_mw[lo:hi])
    # energy between consecutive polls = gain x the true grid's energy over those 20 ms
    t_grid, p_w = res.true_power
    e = tr.energy
    for i in (5, 40, 90):
        a, b = int(e.t_ns[i]), int(e.t_ns[i + 1])
        in_bins = (t_grid >= a) & (t_grid < b)
        want_mj = res.truth.gain * p_w[in_bins].sum() * (t_grid[1] - t_grid[0]) * 1e-6
        assert abs(int(e.energy_mj[i + 1] - e.energy_mj[i]) - want_mj) <= 1.0


def test_characterize_reports_this_boards_sensor() -> None:
    import orjson

    from ppwtop.collectors.nvml import characterize

    now = time.time_ns()
    t = now - 2_000 * MS + np.arange(6000, dtype=np.int64) * MS
    board = BoardModel("NVIDIA H200", "GPU-h200", t, np.full(len(t), 250.0), period_ms=20.0,
                       window_ms=10.0, gain=1.03)
    with installed(FakeNvmlLib([board])):
        rep = characterize(seconds=0.6, poll_hz=200.0, repeats=5)
    orjson.dumps(rep)  # JSON-able
    (dev,) = rep["devices"]
    assert dev["instant_period_ms"] == pytest.approx(20.0)
    assert dev["samples_period_ms"] == pytest.approx(20.0)
    assert 0.0 < dev["instant_fresh_fraction"] < 0.6  # 200 Hz polls of a 50 Hz sensor
    # steady 250 W: the counter and the readings agree (the same gain on both)
    assert dev["energy_over_instant_integral"] == pytest.approx(1.0, abs=0.03)
    assert {"0:field_values", "0:energy", "0:sm_clock", "0:power_usage"} <= set(rep["latency"])
    assert rep["meta"]["nvml"]["cost_fraction"] > 0.0
