"""scripts/gpu_check.py against the fakes: every section, the fitted sensor, kill safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"
SECTIONS = ("environment", "nvml", "sensor", "energy", "cupti", "overhead", "attribute")

sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check_sensor as gs  # noqa: E402


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(path.read_bytes())
    return doc


def _start(out: Path, budget_s: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), "--fake", "--budget-s", str(budget_s), "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("gpu_check") / "findings.json"
    p = _start(out, 30)
    stdout, _ = p.communicate(timeout=60)
    assert p.returncode == 0, stdout.decode()
    return _load(out), stdout.decode()


def test_every_section_present_and_summarised(full_run: tuple[dict[str, Any], str]) -> None:
    doc, stdout = full_run
    assert doc["schema"] == "ppwtop.gpu_check/1"
    assert doc["status"] == "complete" and doc["fake"] is True
    assert set(doc["sections"]) == set(SECTIONS)
    for name in SECTIONS:
        res = doc["sections"][name]
        assert "error" not in res, (name, res)
        assert any(line.startswith(name) for line in stdout.splitlines()), name
    assert doc["sections"]["overhead"]["skipped"].startswith("agent not built")
    env = doc["sections"]["environment"]
    assert env["gpus"][0]["name"] == "NVIDIA H200"


def test_sensor_fit_recovers_fake_board(full_run: tuple[dict[str, Any], str]) -> None:
    sensor = full_run[0]["sections"]["sensor"]
    truth, fit = sensor["fake_board"], sensor["fit_instant"]
    assert abs(sensor["instant_period_ms"] - truth["period_ms"]) < 0.5
    assert abs(fit["window_ms"] - truth["window_ms"]) <= 5.0
    assert abs(fit["lag_ms"] - truth["lag_ms"]) <= 5.0
    assert abs(fit["low_w"] - truth["low_w"]) < 0.05 * truth["high_w"]
    assert abs(fit["high_w"] - truth["high_w"]) < 0.05 * truth["high_w"]
    for wave in sensor["fit_per_wave"].values():
        assert abs(wave["window_ms"] - truth["window_ms"]) <= 5.0
    # the fake's samples buffer holds 120 readings, one per sensor period
    assert sensor["samples_buffer"]["depth"] == 120
    assert abs(sensor["samples_buffer"]["period_ms"] - truth["period_ms"]) < 0.5


def test_energy_counter_and_attribution(full_run: tuple[dict[str, Any], str]) -> None:
    sec = full_run[0]["sections"]
    # the fake counter is the exact integral of true power, so it matches the schedule model
    assert abs(sec["energy"]["square_wave"]["counter_over_model"] - 1) < 0.01
    # bursts between the 25 ms windows: the counter sees them, the instant readings do not
    blind = sec["energy"]["blind_bursts"]
    assert blind["verdict"] == "integrates all time"
    assert abs(blind["instant_sees_fraction"]) < 0.05
    att = sec["attribute"]
    assert abs(att["totals"]["energy_j"] / att["counter_over_kernels_span_j"] - 1) < 0.05
    assert att["totals"]["kernel_energy_j"] > 0.5 * att["kernel_model_j"]
    cup = sec["cupti"]
    assert cup["kernels_decoded"] == cup["launched"] > 0 and cup["timestamps_match"]


def test_kill_midway_leaves_valid_json(tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    p = _start(out, 30)
    try:
        t_end = time.monotonic() + 30
        while time.monotonic() < t_end:
            if out.exists() and "environment" in _load(out)["sections"]:
                break
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.communicate(timeout=10)
    doc = _load(out)
    assert doc["status"] == "running"
    assert "environment" in doc["sections"]


def test_sigterm_marks_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    p = _start(out, 30)
    try:
        t_end = time.monotonic() + 30
        while time.monotonic() < t_end and not (
                out.exists() and "nvml" in _load(out)["sections"]):
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
    finally:
        p.communicate(timeout=10)
    doc = _load(out)
    assert doc["status"] == "interrupted"
    assert "sensor" not in doc["sections"] or "elapsed_s" in doc["sections"]["sensor"]


def test_tiny_budget_still_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    p = _start(out, 2.5)
    p.communicate(timeout=30)
    doc = _load(out)
    assert doc["status"] == "complete"
    assert set(doc["sections"]) == set(SECTIONS)
    assert any("skipped" in r or "error" in r for r in doc["sections"].values())


def test_fit_window_lag_on_known_square_wave() -> None:
    # readings computed by hand from the model: a W=40 ms mean ending D=7 ms before t
    st, en = gs.square_schedule([61.0], 6.0)(0)
    t = np.arange(2_000_000_000, 6_000_000_000, 100_000_000, dtype=np.int64) + 13_000_000
    w, d = 40_000_000, 7_000_000
    frac = (gs.on_time_before(t - d, st, en) - gs.on_time_before(t - d - w, st, en)) / w
    fit = gs.fit_window_lag(t, 80 + 400 * frac, st, en)
    assert fit["window_ms"] == pytest.approx(40.0) and fit["lag_ms"] == pytest.approx(7.0)
    assert fit["low_w"] == pytest.approx(80.0) and fit["high_w"] == pytest.approx(480.0)


def test_on_time_before_counts_interval_overlap() -> None:
    st, en = np.array([10, 30], np.int64), np.array([20, 35], np.int64)
    got = gs.on_time_before(np.array([0, 10, 15, 25, 32, 100], np.int64), st, en)
    assert got.tolist() == [0, 0, 5, 10, 12, 15]


def test_blind_schedule_avoids_windows() -> None:
    sch = gs.blind_schedule(100.0, 25.0, 1.5, phase_ns=3_000_000, seconds=2.0)
    assert sch is not None
    st, en = sch(0)
    pub = 3_000_000 + np.arange(0, 40) * 100_000_000
    w0, w1 = pub - 1_500_000 - 25_000_000, pub - 1_500_000
    overlap = np.minimum(en[:, None], w1[None, :]) - np.maximum(st[:, None], w0[None, :])
    assert (overlap <= 0).all() and len(st) >= 15
    assert gs.blind_schedule(100.0, 100.0, 1.5, phase_ns=0, seconds=1.0) is None
