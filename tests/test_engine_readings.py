"""The engine's readings at their edges: a power log whose value never changes, and power
readings none of which can be used (a trace window shorter than the sensor's lag + window)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from attribution.engine import attribute
from attribution.engine.live import LiveEngine
from attribution.engine.timebase import MIN_FRESH, readings_for
from attribution.model import PowerBatch, PowerField, Trace
from attribution.presets import PRESETS
from attribution.sim import simulate
from tests.test_live_engine import drive

MS = 1_000_000


def _polls(t0_ns: int, n: int, value_mw: int, *, fresh_first: int) -> PowerBatch:
    """``n`` polls 12 ms apart of one constant value, the first ``fresh_first`` marked fresh
    (a change-of-value importer marks only the first)."""
    fresh = np.zeros(n, bool)
    fresh[:fresh_first] = True
    return PowerBatch.from_columns({
        "t_ns": t0_ns + np.arange(n, dtype=np.int64) * 12 * MS,
        "power_mw": np.full(n, value_mw, np.int64), "device": np.zeros(n, np.int16),
        "field": np.full(n, int(PowerField.INSTANT), np.uint8), "fresh": fresh})


@pytest.mark.parametrize("fresh_first", [1, MIN_FRESH - 1])
def test_a_value_that_never_changes_counts_every_poll(fresh_first: int) -> None:
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    span = trace.gpu_span_ns()
    assert span is not None
    polls = _polls(span[0] - 200 * MS, 900, 150_000, fresh_first=fresh_first)
    rd = readings_for(dataclasses.replace(trace, power=polls), 0)
    assert len(rd.t_ns) == 900 and np.all(rd.power_w == 150.0)
    # enough fresh readings: those alone, as before
    polls = _polls(span[0] - 200 * MS, 900, 150_000, fresh_first=MIN_FRESH)
    assert len(readings_for(dataclasses.replace(trace, power=polls), 0).t_ns) == MIN_FRESH


def test_no_usable_reading_idles_at_the_board_value() -> None:
    """Readings that all end before the trace's window (none can hold a window inside it):
    the board's active idle, known to the sanity band, and no dynamic energy -- not 0 J."""
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    span = trace.gpu_span_ns()
    assert span is not None
    p = trace.power
    trace = dataclasses.replace(trace, power=p.take(p.t_ns < span[0]))
    snap = attribute(trace, n_boot=20)
    idle_w = PRESETS["a100"].active_idle_w
    assert snap.totals.active_idle_w == idle_w
    window_s = (snap.window.end_ns - snap.window.start_ns) * 1e-9
    assert snap.totals.energy_j == pytest.approx(idle_w * window_s, rel=1e-9)
    assert all(k.dynamic_energy_j == 0.0 and not k.resolvable for k in snap.kernels)
    assert any("no usable power reading" in w for w in snap.warnings)
    lo, hi = snap.meta["active_idle_ci_w"]["0"]
    assert lo <= 0.5 * idle_w * 1.001 and hi >= 1.5 * idle_w * 0.999


def test_a_field_with_no_usable_reading_at_all_is_times_only_and_says_so() -> None:
    """Every reading negative or past any board's draw (a damaged recording; the CSV importer
    skips negative rows): no power information at all, so energies are 0 and the warning says
    that -- it used to say idle ran at the board's active idle while the snapshot held 0 J."""
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=5.0, seed=1).trace
    c = trace.power.columns()
    c["power_mw"] = np.where(np.arange(len(c["power_mw"])) % 2 == 0,
                             -np.abs(c["power_mw"]) - 1, 6_000_000)
    snap = attribute(dataclasses.replace(trace, power=PowerBatch.from_columns(c)), n_boot=20)
    assert snap.totals.energy_j == 0.0 and snap.totals.active_idle_w == 0.0
    (line,) = [w for w in snap.warnings if "no usable power reading" in w]
    assert "at all" in line and "energies are 0" in line and "board's" not in line
    assert "over 5000 W" in line


@pytest.mark.parametrize("live", [False, True])
def test_implausible_readings_are_dropped_and_counted(live: bool) -> None:
    """Three readings of 9·10⁸ W among good ones (a damaged row, mW read as W): dropped as the
    negative ones are, with a line counting them; the snapshot is the one without them (it
    was a 4 GJ snapshot).  The same readings at 4 kW, below the bound, are kept."""
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    p = trace.power
    picks = np.flatnonzero(p.fresh)[[40, 150, 250]]
    keep = np.ones(len(p), bool)
    keep[picks] = False
    clean = dataclasses.replace(trace, power=p.take(keep))

    def damaged(mw: int) -> Trace:
        c = p.columns()
        c["power_mw"] = c["power_mw"].copy()
        c["power_mw"][picks] = mw
        return dataclasses.replace(trace, power=PowerBatch.from_columns(c))

    def run(tr: Trace) -> Any:
        if live:
            return drive(tr, LiveEngine(devices=tr.devices, horizon_s=30.0, n_boot=20))
        return attribute(tr, n_boot=20)

    ref, got, kept = run(clean), run(damaged(900_000_000_000)), run(damaged(4_000_000))
    assert got is not None and ref is not None and kept is not None
    assert got.totals.energy_j == pytest.approx(ref.totals.energy_j, rel=1e-9)
    (line,) = [w for w in got.warnings if "over 5000 W dropped" in w]
    assert line.startswith("3 power reading(s)")
    assert not any("over 5000 W" in w for w in (*ref.warnings, *kept.warnings))
    assert kept.totals.energy_j > ref.totals.energy_j * 1.01


def test_live_with_no_reading_in_its_horizon_idles_at_the_board_value() -> None:
    """The power readings stop after 4 s (a sampler that died); 6 s later the 3 s horizon
    holds none: idle at the board's value, no dynamic energy -- not 0 J."""
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    span = trace.gpu_span_ns()
    assert span is not None
    p = trace.power
    trace = dataclasses.replace(trace, power=p.take(p.t_ns < span[0] + 4_000 * MS))
    snap = drive(trace, LiveEngine(devices=trace.devices, horizon_s=3.0, n_boot=20))
    assert snap is not None
    assert snap.totals.active_idle_w == PRESETS["a100"].active_idle_w
    assert snap.totals.idle_energy_j > 0.0
    assert all(k.dynamic_energy_j == 0.0 and not k.resolvable for k in snap.kernels)


def test_live_with_too_few_readings_in_its_horizon() -> None:
    """A 0.5 s horizon (4 readings of an A100): its snapshot used to raise ValueError when
    the settling delay expired every slab just as it was taken. Now: P_idle held at the
    board's value with the reason in each class's why, as the batch engine; with no board
    table, P_idle's interval reaches from 0 to the lowest reading and holds the truth."""
    res = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1)
    snap = drive(res.trace, LiveEngine(devices=res.trace.devices, horizon_s=0.5, n_boot=20))
    assert snap is not None
    assert snap.totals.active_idle_w == pytest.approx(PRESETS["a100"].active_idle_w, rel=0.01)
    assert all(k.why is not None and "too few to place active idle" in k.why
               for k in snap.kernels)
    unknown = dataclasses.replace(res.trace, devices=[
        dataclasses.replace(d, name="Mystery GPU") for d in res.trace.devices])
    snap = drive(unknown, LiveEngine(devices=unknown.devices, horizon_s=0.5, n_boot=20))
    assert snap is not None
    lo, hi = snap.meta["active_idle_ci_w"]["0"]
    assert lo <= res.truth.active_idle_w * res.truth.gain <= hi


def _with_power(trace: Any, power: PowerBatch) -> Any:
    return dataclasses.replace(trace, power=power)


@pytest.mark.parametrize("shift_s", [4.0, -3.0])
def test_a_power_log_whose_clock_is_seconds_off_is_told_and_flagged(shift_s: float) -> None:
    # the engine's lag search reaches −20…+60 ms; a log seconds off used to be split as if
    # aligned, silently (the copies came out 3.5× their truth on a 5 s shift)
    res = simulate("varied_mix", "a100", 20.0, seed=0)
    aligned = attribute(res.trace)
    assert not any("clock" in w for w in aligned.warnings)
    assert any(k.resolvable for k in aligned.kernels)
    p = res.trace.power
    snap = attribute(_with_power(res.trace, p.shifted(int(shift_s * 1e9))))
    line = [w for w in snap.warnings if "clock" in w]
    assert len(line) == 1
    found_s = float(line[0].split("far better ")[1].split(" s off")[0])
    assert found_s == pytest.approx(shift_s, abs=0.25)  # the sensor's lag and window on top
    assert not any(k.resolvable for k in snap.kernels)
    assert all("clock looks" in (k.why or "") for k in snap.kernels)


def test_log_shift_finds_the_offset_and_leaves_an_aligned_log_alone() -> None:
    from attribution.engine.activity import BusyFunction
    from attribution.engine.clock_shift import NEAR_S, log_shift

    # a load that switches at random between idle and busy every 0.3-3 s
    rng = np.random.default_rng(3)
    edges = np.cumsum(rng.uniform(0.3e9, 3e9, 40)).astype(np.int64)
    s, e = edges[0::2], edges[1::2][: len(edges[0::2])]
    busy = BusyFunction(s, e, np.zeros(len(s), np.int32), 1, origin_ns=0)
    t = np.arange(int(1e9), int(edges[-1]), int(100e6), dtype=np.int64)
    on = np.zeros(len(t))
    for a, b in zip(s, e, strict=True):
        on[(t > a) & (t <= b)] = 1.0
    y = 60.0 + 200.0 * on + rng.normal(0.0, 5.0, len(t))
    win = (int(s[0]), int(e[-1]))
    got = log_shift(busy, t, y, win)
    assert got is not None and abs(got.shift_s) <= NEAR_S and not got.off
    late = log_shift(busy, t + int(2.5e9), y, win)
    assert late is not None and late.off and late.shift_s == pytest.approx(2.5, abs=0.1)


def test_covered_stretches_and_the_time_of_items_inside_them() -> None:
    from attribution.engine.power_cover import covered_stretches
    from attribution.idle import covered_ns

    # rows every 100 ms from 1 s to 2 s, a hole, then 5 s to 6 s: the loop ran over those
    # stretches, and one spacing before its first row and after its last
    t = np.r_[np.arange(10, 21), np.arange(50, 61)].astype(np.int64) * 100_000_000
    s, e = covered_stretches(t, (0, 10 * 10**9))
    assert (e - s).sum() == 2_200_000_000  # the hole (2 s to 5 s) is not covered
    got = covered_ns(s, e, np.array([0, 15, 19, 45], np.int64) * 100_000_000,
                     np.array([5, 25, 55, 100], np.int64) * 100_000_000)
    assert got.tolist() == [0, 5e8, 6e8, 1.1e9]
    # a one-second poll loop started and stopped with a 4.5 s trace covers all of it
    s, e = covered_stretches(np.array([1, 2, 3, 4], np.int64) * 10**9, (0, 4_500_000_000))
    assert (e - s).sum() == 4_500_000_000


def test_a_power_log_covering_part_of_the_trace_says_so_and_flags_what_ran_outside() -> None:
    res = simulate("varied_mix", "a100", 20.0, seed=0)
    p = res.trace.power
    cut = int(p.t_ns.min() + 0.3 * (p.t_ns.max() - p.t_ns.min()))
    snap = attribute(_with_power(res.trace, p.take(p.t_ns <= cut)))
    line = [w for w in snap.warnings if "power log covers" in w]
    assert len(line) == 1
    share = int(line[0].split("covers ")[1].split("%")[0])
    assert 25 <= share <= 35
    # every kernel class ran all along: about 70 % of each one's time is outside the log
    assert snap.kernels and all(not k.resolvable and "outside the power log" in (k.why or "")
                                for k in snap.kernels)
    assert not any("power log covers" in w for w in attribute(res.trace).warnings)
    # the field the fit reads is what counts: another field's rows running on do not hide it
    inst = p.field == int(PowerField.INSTANT)
    other = p.take(~inst)
    assert len(other) and bool((other.t_ns > cut).any())
    mixed = PowerBatch.concat([p.take(inst & (p.t_ns <= cut)), other]).sorted_by("t_ns")
    snap = attribute(_with_power(res.trace, mixed))
    assert snap.gpus[0].sensor.field == "instant"
    assert any("power log covers" in w for w in snap.warnings)


def _flags_lost(trace: Trace) -> Trace:
    """The instant field's rows kept, their fresh marks all cleared."""
    p = trace.power
    fresh = p.fresh & (p.field != int(PowerField.INSTANT))
    return dataclasses.replace(trace, power=dataclasses.replace(p, fresh=fresh))


@pytest.mark.parametrize("gpu", ["a100", "v100", "rtx3090"])
def test_lost_fresh_marks_are_recovered_from_the_changes_of_value(gpu: str) -> None:
    """A log polling faster than the sensor publishes whose fresh marks were lost: each
    change of value is a reading, poll-stamped (before, every poll counted as a reading at
    its own time: A100 P_idle 154 W against 60 W and a class resolvable at −44 %; V100 held
    as degenerate; the 3090 +12 % with no word)."""
    res = simulate(scenario="varied_mix", gpu=gpu, seconds=30.0, seed=1)
    lost = _flags_lost(res.trace)
    rd = readings_for(lost, 0)
    assert rd.fresh_from_values and rd.spread_ns is not None  # placed as poll-stamped
    snap = attribute(lost, n_boot=30)
    # the readings inside the window: the sensor's own (the idle tail after the work repeats
    # one value, so a change of value finds no reading there, as in an nvidia-smi log)
    fresh_n = attribute(res.trace, n_boot=2).meta["readings"]["0"]
    assert abs(snap.meta["readings"]["0"] - fresh_n) <= 0.01 * fresh_n
    assert any("carry no fresh marks" in w for w in snap.warnings)
    truth_w = res.truth.active_idle_w * res.truth.gain
    assert snap.totals.active_idle_w == pytest.approx(truth_w, rel=0.05)
    for row in snap.kernels:
        if row.resolvable:
            want = res.truth.class_dynamic_j[f"kernel:{row.name}"] * res.truth.gain
            lo, hi = row.dynamic_energy_ci_j
            assert lo - 0.05 * want <= want <= hi + 0.05 * want


def test_values_that_change_on_most_rows_are_not_taken_for_repeats() -> None:
    """Under ``MIN_FRESH`` marks and a value that changes on more than ``REPEATS_SHARE`` of
    the rows: every row is a reading at its own time, as before (no sign of polls repeating
    a published value)."""
    trace = simulate(scenario="varied_mix", gpu="a100", seconds=10.0, seed=1).trace
    span = trace.gpu_span_ns()
    assert span is not None
    polls = _polls(span[0] - 200 * MS, 900, 150_000, fresh_first=0)
    changing = dataclasses.replace(polls, power_mw=polls.power_mw + np.arange(900) % 3)
    rd = readings_for(dataclasses.replace(trace, power=changing), 0)
    assert not rd.fresh_from_values and rd.spread_ns is None and len(rd.t_ns) == 900
    # repeats on more than REPEATS_SHARE of the rows: by change of value
    steps = dataclasses.replace(polls, power_mw=polls.power_mw + np.arange(900) // 4)
    rd = readings_for(dataclasses.replace(trace, power=steps), 0)
    assert rd.fresh_from_values and len(rd.t_ns) == 225
