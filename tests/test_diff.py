"""`attribution.diff` and `ppwtop diff`: verdicts, intervals, comparability, mechanisms, CLI."""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest

from attribution.diff import diff, kernel_overlap
from attribution.owners import load_owners
from attribution.snapshot import (
    CopyRow,
    GpuInfo,
    IdleRow,
    KernelRow,
    Quantiles,
    SensorInfo,
    Snapshot,
    Steps,
    Totals,
    Window,
)
from ppwtop.cli.main import main
from tests.fifo_guard import unblocked_after

# per-step energy of each class in the reference workload (J per step)
BASE_KERNELS = {"ampere_sgemm_128x64_nn": 30.0, "flash_fwd_kernel": 20.0,
                "vectorized_elementwise_kernel": 10.0}
BASE_COPIES = {("HtoD", "pinned"): 2.0}
BASE_IDLE = {"launch_gap": 3.0, "host_stall": 1.0}


def make_snapshot(
    step_energy_j: Sequence[float] | npt.NDArray[np.float64] | None,
    kernels: Mapping[str, float],
    *,
    copies: Mapping[tuple[str, str], float] | None = None,
    idle: Mapping[str, float] | None = None,
    model: str = "a100",
    field: str = "instant",
    meta: Mapping[str, Any] | None = None,
    duration_s: float = 10.0,
    extra: Mapping[str, Any] | None = None,
    kernel_ci_frac: float = 0.05,
    series: bool = True,
) -> Snapshot:
    """A snapshot whose class energies (totals over the window) are as given, with steps from
    ``step_energy_j`` (None: no steps; ``series=False``: summary quantiles only)."""
    copies = copies or {}
    idle = idle or {}
    krows = tuple(
        KernelRow(name=n, gpu=0, calls=100, time_s=1.0, energy_j=e, dynamic_energy_j=0.8 * e,
                  dynamic_energy_ci_j=(0.8 * e * (1 - kernel_ci_frac),
                                       0.8 * e * (1 + kernel_ci_frac)),
                  avg_power_w=e, resolvable=True, precision="bf16")
        for n, e in kernels.items()
    )
    crows = tuple(
        CopyRow(kind=k, memory=m, gpu=0, calls=10, bytes=1 << 20, time_s=0.1, energy_j=e,
                dynamic_energy_j=0.5 * e)
        for (k, m), e in copies.items()
    )
    irows = tuple(IdleRow(cause=c, gpu=0, time_s=0.5, energy_j=e) for c, e in idle.items())
    k_j = sum(kernels.values())
    c_j = sum(copies.values())
    i_j = sum(idle.values())
    total = k_j + c_j + i_j
    steps = None
    if step_energy_j is not None:
        x = np.asarray(step_energy_j, dtype=float)
        q = Quantiles(float(x.mean()), *(float(v) for v in np.quantile(x, [0.5, 0.95, 0.99])))
        steps = Steps(count=int(x.size), energy_j=q, latency_ms=Quantiles(50, 50, 55, 60),
                      items_per_j=None,
                      step_energy_j=tuple(float(v) for v in x) if series else ())
    return Snapshot(
        gpus=(GpuInfo(0, f"NVIDIA {model.upper()}", model,
                      SensorInfo(field, 100.0, 25.0, 1.5)),),
        window=Window(0, int(duration_s * 1e9)),
        totals=Totals(total, k_j, c_j, i_j, 60.0, total, 0.0),
        kernels=krows, copies=crows, idle=irows, steps=steps,
        meta=dict(meta or {}), extra=dict(extra or {}),
    )


def workload(
    rng: np.random.Generator, n_steps: int = 40, *, scale: Mapping[str, float] | None = None,
    cv: float = 0.05, **kw: Any,
) -> Snapshot:
    """n_steps steps of the reference workload; ``scale`` multiplies a kernel class."""
    scale = scale or {}
    per_step = {n: e * scale.get(n, 1.0) for n, e in BASE_KERNELS.items()}
    step_mean = sum(per_step.values()) + sum(BASE_COPIES.values()) + sum(BASE_IDLE.values())
    series = step_mean * (1 + cv * rng.standard_normal(n_steps))
    jitter = 1 + 0.01 * rng.standard_normal(len(per_step))
    kernels = {n: float(e * n_steps * j)
               for (n, e), j in zip(per_step.items(), jitter, strict=True)}
    copies = {k: e * n_steps for k, e in BASE_COPIES.items()}
    idle = {c: e * n_steps for c, e in BASE_IDLE.items()}
    return make_snapshot(series, kernels, copies=copies, idle=idle, **kw)


# ---------------------------------------------------------------- verdicts


def test_injected_kernel_regression_is_found_and_tops_mechanisms() -> None:
    rng = np.random.default_rng(1)
    # 200 steps at 5 % step-to-step spread: the +4.5 % change is ~9 standard errors out
    base = workload(rng, n_steps=200)
    cand = workload(rng, n_steps=200, scale={"ampere_sgemm_128x64_nn": 1.10})
    r = diff(base, cand)
    assert r.metric == "energy_per_step_j"
    assert r.verdict == "regression", r.reasons
    # +10 % of a 30 J/step class on a 66 J/step workload: about +3 J/step
    assert 1.5 < r.delta < 4.5
    assert r.delta_ci[0] < r.delta < r.delta_ci[1]
    top = r.mechanisms[0]
    assert top.mechanism == "kernel:ampere_sgemm_128x64_nn"
    assert top.delta_j == pytest.approx(3.0, rel=0.15)
    assert 0.6 < top.share_of_delta < 1.6
    assert r.comparability > 0.9
    # shares of the decomposition add up to one
    assert sum(m.share_of_delta for m in r.mechanisms) == pytest.approx(1.0)


def test_step_energies_near_the_float_limit_are_inconclusive_without_numpy_warnings() -> None:
    # found by fuzzing: step_energy_j 1e308 overflowed the bootstrap's means with numpy
    # RuntimeWarnings on stderr
    base = make_snapshot([3.0, 3.1, 2.9, 3.0], {"k": 100.0})
    with np.errstate(over="ignore"):  # the helper's own summary of the steps
        cand = make_snapshot([1e308] * 4, {"k": 100.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = diff(base, cand)
    assert r.verdict == "inconclusive"


def test_improvement_when_a_kernel_gets_cheaper() -> None:
    rng = np.random.default_rng(2)
    r = diff(workload(rng), workload(rng, scale={"flash_fwd_kernel": 0.8}))
    assert r.verdict == "improvement", r.reasons
    assert r.mechanisms[0].mechanism == "kernel:flash_fwd_kernel"
    assert r.mechanisms[0].delta_j < 0
    assert r.relative_delta is not None and r.relative_delta < -0.02


def test_one_run_given_twice_is_said_to_be_one_run() -> None:
    """``diff A A`` (found by an audit): where the step bootstrap's band passed the noise
    floor it read "inconclusive, a longer run would decide", hiding that there is no second
    run; it is neutral and says why first.  Two runs that differ are not told so."""
    rng = np.random.default_rng(3)
    a = workload(rng, n_steps=10, cv=0.3)  # a band well past the 2 % floor
    r = diff(a, a)
    assert r.verdict == "neutral" and r.delta == 0.0
    assert r.reasons[0].startswith("baseline and candidate are the same snapshot")
    assert not any("longer run would decide" in w for w in r.reasons)
    other = diff(a, workload(rng))
    assert not any("same snapshot" in w for w in other.reasons)


def _false_rate(noise_floor: float, n_seeds: int = 40) -> tuple[float, list[str]]:
    verdicts = []
    for seed in range(n_seeds):
        rng = np.random.default_rng(1000 + seed)
        r = diff(workload(rng), workload(rng), noise_floor=noise_floor, seed=seed, n_boot=1000)
        verdicts.append(r.verdict)
    return sum(v == "regression" for v in verdicts) / n_seeds, verdicts


def test_false_regression_rate_same_distribution() -> None:
    rate, verdicts = _false_rate(0.02)
    print(f"false-regression rate (noise floor 2%, 40 seeds): {rate:.1%}; "
          f"verdicts {dict((v, verdicts.count(v)) for v in set(verdicts))}")
    assert rate <= 0.05
    # most same-distribution pairs are called neutral, not just 'not regression'
    assert verdicts.count("neutral") >= 30


def test_false_regression_rate_without_noise_floor_matches_the_interval_level() -> None:
    # with no noise band the one-sided error of a 90 % interval is about 5 %
    rate, _ = _false_rate(0.0)
    print(f"false-regression rate (noise floor 0, 40 seeds): {rate:.1%}")
    assert rate <= 0.15


def test_different_gpu_model_is_inconclusive_even_with_a_clear_change() -> None:
    rng = np.random.default_rng(3)
    r = diff(workload(rng), workload(rng, scale={"ampere_sgemm_128x64_nn": 1.5}, model="h100"))
    assert r.verdict == "inconclusive"
    assert r.comparability < 0.5
    assert r.comparability_factors["gpu_model"] == 0.0
    assert any("GPU model differs" in why for why in r.reasons)


def test_disjoint_kernel_sets_are_inconclusive() -> None:
    rng = np.random.default_rng(4)
    base = workload(rng)
    other = make_snapshot(rng.normal(80, 1, 40), {"totally_other_kernel": 3000.0})
    assert kernel_overlap(base, other) == 0.0
    r = diff(base, other)
    assert r.verdict == "inconclusive"
    assert r.comparability_factors["kernel_overlap"] == 0.0


def test_driver_sensor_and_temperature_lower_comparability() -> None:
    rng = np.random.default_rng(5)
    base = workload(rng, meta={"driver_version": "550.54", "temperature_c": 45})
    same = workload(rng, meta={"driver_version": "550.54", "temperature_c": 47})
    other = workload(rng, field="average", meta={"driver_version": "560.10",
                                                  "temperature_c": 80})
    r_same = diff(base, same)
    r_other = diff(base, other)
    assert r_same.comparability_factors["driver"] == 1.0
    assert r_same.comparability_factors["temperature"] == 1.0
    assert r_other.comparability_factors["driver"] < 1.0
    assert r_other.comparability_factors["sensor_field"] < 1.0
    assert r_other.comparability_factors["temperature"] < 1.0
    assert 0.0 <= r_other.comparability < r_same.comparability <= 1.0


def test_per_second_metric_when_no_steps() -> None:
    base = make_snapshot(None, {"k1": 600.0, "k2": 300.0}, idle={"other": 100.0},
                         duration_s=10.0)
    cand = make_snapshot(None, {"k1": 600.0, "k2": 450.0}, idle={"other": 100.0},
                         duration_s=10.0)
    r = diff(base, cand)
    assert r.metric == "energy_per_s"
    assert r.baseline == pytest.approx(100.0)  # 1000 J / 10 s
    assert r.candidate == pytest.approx(115.0)
    assert r.delta == pytest.approx(15.0)
    assert r.interval_method == "class_intervals"
    assert r.verdict == "regression", r.reasons
    assert r.mechanisms[0].mechanism == "kernel:k2"
    assert r.mechanisms[0].delta_j == pytest.approx(15.0)  # per second
    assert any("energy per second" in why for why in r.reasons)
    # one side with steps is not enough for the per-step metric
    with_steps = make_snapshot([10.0] * 20, {"k1": 600.0, "k2": 300.0},
                               idle={"other": 100.0})
    assert diff(base, with_steps).metric == "energy_per_s"


def test_two_runs_without_power_are_inconclusive_not_neutral() -> None:
    # no power readings: every energy is 0 on both sides, which says nothing about either
    base = make_snapshot(None, {"k1": 0.0, "k2": 0.0}, duration_s=10.0)
    cand = make_snapshot(None, {"k1": 0.0, "k2": 0.0}, duration_s=12.0)
    r = diff(base, cand)
    assert r.verdict == "inconclusive"
    assert any("no energy on either side" in why for why in r.reasons)


def test_per_second_small_change_is_not_a_regression() -> None:
    base = make_snapshot(None, {"k1": 1000.0}, duration_s=10.0)
    cand = make_snapshot(None, {"k1": 1005.0}, duration_s=10.0)  # +0.5 %: within noise
    assert diff(base, cand).verdict in ("neutral", "inconclusive")
    assert diff(base, cand).verdict != "regression"


def test_summary_only_steps_use_quantile_spread() -> None:
    rng = np.random.default_rng(6)
    base = workload(rng, n_steps=200, series=False)
    cand = workload(rng, n_steps=200, series=False, scale={"flash_fwd_kernel": 1.3})
    r = diff(base, cand)
    assert r.metric == "energy_per_step_j"
    assert r.interval_method == "step_quantiles"
    assert r.verdict == "regression", r.reasons
    assert any("no per-step series" in why for why in r.reasons)


def test_noisy_short_runs_are_inconclusive() -> None:
    rng = np.random.default_rng(7)
    base = workload(rng, n_steps=5, cv=0.3)
    cand = workload(rng, n_steps=5, cv=0.3, scale={"flash_fwd_kernel": 1.1})
    r = diff(base, cand)
    assert r.verdict == "inconclusive"
    assert r.delta_ci[1] - r.delta_ci[0] > 2 * 0.02 * r.baseline


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(8)
    a, b = workload(rng), workload(rng)
    assert diff(a, b, seed=3).delta_ci == diff(a, b, seed=3).delta_ci
    assert diff(a, b, seed=3).delta_ci != diff(a, b, seed=4).delta_ci


def test_clamps_become_mechanisms_and_absence_is_tolerated() -> None:
    rng = np.random.default_rng(9)
    base = workload(rng, extra={"clamps": [{"reason": "negative_dynamic", "energy_j": 0.0}]})
    cand = workload(rng, extra={"clamps": {"negative_dynamic": 400.0}})
    names = {m.mechanism: m for m in diff(base, cand).mechanisms}
    assert names["clamp.negative_dynamic"].delta_j == pytest.approx(400.0 / 40)
    plain = diff(workload(rng), workload(rng, extra={"clamps": "garbage"}))
    assert not any(m.mechanism.startswith("clamp.") for m in plain.mechanisms)


def test_owners_are_attached_to_mechanisms() -> None:
    rng = np.random.default_rng(10)
    owners = load_owners('[[owner]]\npattern = "*gemm*"\nowner = "@matmul"\n')
    r = diff(workload(rng), workload(rng, scale={"ampere_sgemm_128x64_nn": 1.1}),
             owners=owners)
    assert r.mechanisms[0].owner == "@matmul"
    assert r.mechanisms[0].to_dict()["owner"] == "@matmul"
    assert {m.owner for m in r.mechanisms[1:]} <= {"unowned"}


def test_swapping_sides_negates_the_delta_and_flips_the_verdict() -> None:
    rng = np.random.default_rng(12)
    a = workload(rng, n_steps=200)
    b = workload(rng, n_steps=200, scale={"flash_fwd_kernel": 1.2})
    ab, ba = diff(a, b), diff(b, a)
    assert ab.delta == pytest.approx(-ba.delta)
    assert (ab.verdict, ba.verdict) == ("regression", "improvement")
    assert {m.mechanism: m.delta_j for m in ab.mechanisms} == pytest.approx(
        {m.mechanism: -m.delta_j for m in ba.mechanisms})


def test_a_snapshot_against_itself_is_neutral() -> None:
    a = workload(np.random.default_rng(13))
    r = diff(a, a)
    assert r.delta == 0.0
    assert r.verdict == "neutral"
    assert r.comparability == pytest.approx(1.0)
    assert all(m.delta_j == 0.0 and m.share_of_delta == 0.0 for m in r.mechanisms)


# ---------------------------------------------------------------- CLI

CONTRACT_KEYS = {"schema", "verdict", "metric", "baseline", "candidate", "delta", "delta_ci",
                 "comparability", "mechanisms"}
MECH_NAME = re.compile(r"^(kernel:.+|copy:[^/]+/.+|idle\..+|clamp\..+)$")


def _write(path: Path, snap: Snapshot) -> Path:
    path.write_bytes(orjson.dumps(snap.to_dict()))
    return path


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(11)
    a = _write(tmp_path / "a.json", workload(rng, n_steps=100))
    same = _write(tmp_path / "same.json", workload(rng, n_steps=100))
    worse = _write(tmp_path / "worse.json",
                   workload(rng, n_steps=100, scale={"vectorized_elementwise_kernel": 1.4}))
    return a, same, worse


def test_json_output_has_the_contract_keys(
    pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, worse = pair
    assert main(["diff", str(a), str(worse), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert set(doc) >= CONTRACT_KEYS
    assert doc["schema"] == "ppwtop.diff/1"
    assert doc["verdict"] in ("regression", "improvement", "neutral", "inconclusive")
    assert doc["verdict"] == "regression"
    assert doc["metric"] in ("energy_per_step_j", "energy_per_s")
    for key in ("baseline", "candidate", "delta", "comparability"):
        assert isinstance(doc[key], float)
    assert 0.0 <= doc["comparability"] <= 1.0
    lo, hi = doc["delta_ci"]
    assert lo <= doc["delta"] <= hi
    assert doc["mechanisms"]
    for m in doc["mechanisms"]:
        assert {"mechanism", "delta_j", "share_of_delta"} <= set(m)
        assert MECH_NAME.match(m["mechanism"]), m["mechanism"]
    assert doc["mechanisms"][0]["mechanism"] == "kernel:vectorized_elementwise_kernel"
    deltas = [abs(m["delta_j"]) for m in doc["mechanisms"]]
    assert deltas == sorted(deltas, reverse=True)
    assert isinstance(doc["reasons"], list)
    assert isinstance(doc["comparability_factors"], dict)


def test_human_output(pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, same, _ = pair
    assert main(["diff", str(a), str(same)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "verdict: neutral"
    assert "energy_per_step_j" in out and "90% CI" in out
    assert "comparability" in out
    mech_lines = [ln for ln in out.splitlines()
                  if len(ln.split()) >= 3 and MECH_NAME.match(ln.split(None, 2)[2])]
    assert 1 <= len(mech_lines) <= 5
    assert max(len(ln) for ln in out.splitlines()) < 200  # no padding to the longest name


def test_fail_on_regression_exits_3(
    pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, same, worse = pair
    assert main(["diff", str(a), str(worse), "--fail-on-regression"]) == 3
    captured = capsys.readouterr()
    assert captured.out.startswith("verdict: regression")  # printed before the gate
    assert "regression" in captured.err
    assert main(["diff", str(a), str(same), "--fail-on-regression"]) == 0
    assert capsys.readouterr().out.startswith("verdict: neutral")
    assert main(["diff", str(a), str(worse), "--json", "--fail-on-regression"]) == 3
    assert orjson.loads(capsys.readouterr().out)["verdict"] == "regression"


def test_owners_file_on_the_cli(
    pair: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, worse = pair
    owners = tmp_path / "OWNERS.toml"
    owners.write_text('[[owner]]\npattern = "*elementwise*"\nowner = "@pointwise"\n')
    assert main(["diff", str(a), str(worse), "--json", "--owners", str(owners)]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["mechanisms"][0]["owner"] == "@pointwise"
    owners.write_text("[[owner]]\npattern = 3\n")
    assert main(["diff", str(a), str(worse), "--owners", str(owners)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppwtop: error:") and str(owners) in err and "\n" not in err


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (None, "no such file"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a ppwtop.snapshot/1"),
        (b'{"schema": "ppwtop.diff/1"}', "not a ppwtop.snapshot/1"),
        (b'{"schema": "ppwtop.snapshot/1", "gpus": []}', "missing key"),
    ],
)
def test_bad_files_exit_2_with_one_line(
    pair: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    content: bytes | None, what: str,
) -> None:
    a, _, _ = pair
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    for argv in (["diff", str(bad), str(a)], ["diff", str(a), str(bad), "--json"]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert "\n" not in err and "Traceback" not in err
        assert err.startswith(f"ppwtop: error: {bad}: ")
        assert what in err
        assert captured.out == ""


@pytest.mark.parametrize("kind", ["fifo", "device", "fifo owners"])
def test_an_input_that_is_no_regular_file_is_refused_before_it_is_read(
    pair: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str,
) -> None:
    # found by fuzzing: `diff snap.json /dev/zero` read until MemoryError, and a FIFO with no
    # writer blocked the read forever (/dev/null here: a regression must not eat the memory)
    a, _, worse = pair
    special = Path("/dev/null") if kind == "device" else tmp_path / "fifo"
    if kind != "device":
        os.mkfifo(special)
    argv = (["diff", str(a), str(worse), "--owners", str(special)] if kind == "fifo owners"
            else ["diff", str(a), str(special)])

    with unblocked_after(special):  # should the FIFO be opened after all: EOF, not a hang
        assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ppwtop: error: {special}: is a ") and "\n" not in err
    assert err.endswith("not a regular file") and "internal error" not in err


def test_usage_errors_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "only_one.json"]) == 2
    assert capsys.readouterr().err.startswith("ppwtop: error:")
    with pytest.raises(SystemExit) as e:
        main(["diff", "--help"])
    assert e.value.code == 0
    assert "--fail-on-regression" in capsys.readouterr().out


def test_uncomparable_numbers_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = make_snapshot(None, {"k": 100.0})
    empty_window = dataclasses.replace(good, window=Window(5, 5))
    a = _write(tmp_path / "a.json", good)
    b = _write(tmp_path / "b.json", empty_window)
    assert main(["diff", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppwtop: error:") and "no duration" in err and "\n" not in err
    doc = good.to_dict()
    doc["totals"]["energy_j"] = None
    (tmp_path / "null.json").write_bytes(orjson.dumps(doc))
    assert main(["diff", str(a), str(tmp_path / "null.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppwtop: error:") and "internal error" not in err


def test_snapshots_carry_the_driver_and_temperature_the_comparability_reads() -> None:
    """The engine writes ``meta.driver_version`` (a recording's NVML, else Kineto's CUDA
    driver version) and ``meta.temperature_c`` (the window's mean clock-sample temperature);
    nothing wrote them, so diff's driver and temperature factors never fired (an audit)."""
    from attribution.engine import attribute
    from attribution.sim import simulate

    trace = simulate("demo", "a100", 6.0, seed=1).trace
    a = attribute(dataclasses.replace(trace, meta={**trace.meta,
                                                   "nvml": {"driver_version": "550.54"}}),
                  n_boot=10)
    assert a.meta["driver_version"] == "550.54"
    c = trace.clocks
    assert a.meta["temperature_c"] == pytest.approx(float(np.mean(c.temp_c)), abs=0.5)
    hot = dataclasses.replace(c, temp_c=(c.temp_c + 20.0).astype(np.float32))
    b = attribute(dataclasses.replace(trace, clocks=hot,
                                      meta={**trace.meta, "cuda_driver_version": 12040}),
                  n_boot=10)
    assert b.meta["driver_version"] == "12040"
    r = diff(a, b)
    assert r.comparability_factors["driver"] < 1.0 and r.comparability_factors["temperature"] < 1
    assert any("driver differs" in w for w in r.reasons)
    assert any("temperature differs by 20" in w for w in r.reasons)


@pytest.mark.parametrize("floor", ["5", "1e308", "0", "nan"])
def test_a_noise_floor_outside_0_to_1_is_refused(floor: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from ppwtop.cli.main import main as cli_main

    assert cli_main(["diff", "--noise-floor", floor, "a.json", "b.json"]) == 2
    err = capsys.readouterr().err.strip()  # before: 5 read as 500 %, 1e308 printed +-inf%
    assert err.startswith("ppwtop: error:") and "--noise-floor" in err and "\n" not in err
