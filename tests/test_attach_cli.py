"""``ppwtop attach PID`` end to end on the sim backend: a running Python process gets the agent
injected, its session is recorded, the target keeps running; bad pids are refused with one
line before anything (recording, sampler) starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from attribution.model import MarkerKind
from ppwtop.inject import ptrace_call
from ppwtop.recording import read_recording

TIMEOUT_S = 60

TARGET = textwrap.dedent("""
    import os, sys, time
    import ppwtop.agent as agent
    stop = sys.argv[1]
    print("ready", flush=True)
    while not os.path.exists(stop):
        agent.mark_step(items=8)  # a no-op until the agent is attached
        time.sleep(0.1)
    print("target done", flush=True)
""")


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PPWTOP_SOCKET", None)
    env["PPWTOP_SIM_REPORT"] = str(tmp / "sim_report.json")
    env["PPWTOP_SIM_SECONDS"] = "30"
    return env


def _ppwtop(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ppwtop", *args], capture_output=True,
                          check=False, text=True, timeout=TIMEOUT_S, cwd=tmp, env=_env(tmp))


@pytest.mark.skipif(not ptrace_call.supported(), reason="the injector needs Linux on x86-64")
def test_attach_sim_records_the_running_target_which_runs_on(tmp_path: Path) -> None:
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    stop = tmp_path / "stop"
    target = subprocess.Popen([sys.executable, str(script), str(stop)], stdout=subprocess.PIPE,
                              text=True, env=_env(tmp_path))
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        rec = tmp_path / "r.ppw"
        r = _ppwtop(["attach", "--backend", "sim", "--headless", "--seconds", "3", "--record",
                     str(rec), str(target.pid)], tmp_path)
        if "not permitted" in r.stderr:
            pytest.skip(f"ptrace refused here: {r.stderr.strip()}")
        assert r.returncode == 0, r.stderr
        assert "session ended" in r.stderr, r.stderr
        assert target.poll() is None, "the target died when the session ended"
        tr = read_recording(rec)
        assert tr.meta["target"]["late_attach"] is True
        assert tr.meta["target"]["pid"] == target.pid
        assert tr.meta["late_attach_missing"], "late attach must say what it cannot see"
        assert len(tr.kernels) > 100 and len(tr.power) > 0
        steps = tr.markers.take(tr.markers.kind == MarkerKind.STEP_MARK)
        assert len(steps) >= 5 and np.all(steps.items == 8)
        snap_path = tmp_path / "s.json"
        a = _ppwtop(["attribute", "--trace", str(rec), "-o", str(snap_path)], tmp_path)
        assert a.returncode == 0, a.stderr
        assert "recorded by a late attach: missing" in a.stderr
        snap = orjson.loads(snap_path.read_bytes())
        assert snap["totals"]["energy_j"] > 0
        assert any("late attach" in w for w in snap["warnings"])
        # the target still works and ends on its own
        stop.touch()
        out, _ = target.communicate(timeout=10)
        assert "target done" in out and target.returncode == 0
        # the fake counted what it delivered (written when the target's agent stopped): the
        # recording holds at most that (the session ended before the target did)
        report = json.loads((tmp_path / "sim_report.json").read_text())
        assert len(tr.kernels) <= report["delivered"]["kernels"]
    finally:
        if target.poll() is None:
            target.kill()
            target.wait()


@pytest.mark.skipif(not ptrace_call.supported(), reason="the injector needs Linux on x86-64")
def test_attach_to_a_cpu_bound_target_connects_promptly_and_sees_no_backlog(
        tmp_path: Path) -> None:
    """A target whose main thread never sleeps: the agent's thread did its imports (numpy,
    the simulator's scipy) against it, each file read waiting out a GIL switch interval, and
    connected ~20 s late; a 3 s session then saw no kernel.  And the fake CUPTI shipped the
    simulated run from ppwtop's start, work from before the attach."""
    script = tmp_path / "busy.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        print("ready", flush=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 40:
            sum(range(1000))
    """))
    target = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True, env=_env(tmp_path))
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        rec = tmp_path / "r.ppw"
        t0 = time.time_ns()
        r = _ppwtop(["attach", "--backend", "sim", "--headless", "--seconds", "3", "--record",
                     str(rec), str(target.pid)], tmp_path)
        took_s = (time.time_ns() - t0) / 1e9
        if "not permitted" in r.stderr:
            pytest.skip(f"ptrace refused here: {r.stderr.strip()}")
        assert r.returncode == 0, r.stderr
        assert took_s < 15.0, r.stderr  # was ~23 s
        tr = read_recording(rec)
        assert len(tr.kernels) > 100
        # nothing that completed before the agent subscribed (its HELLO's clock)
        hello_ns = int(tr.meta["target"]["clock"]["host_ns"])
        assert int(tr.kernels.end_ns.min()) >= hello_ns - 100_000_000
    finally:
        target.kill()
        target.wait(10)


def test_a_dead_pid_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    rec = tmp_path / "r.ppw"
    r = _ppwtop(["attach", "--backend", "sim", "--headless", "--record", str(rec),
                 str(gone.pid)], tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith("ppwtop: error:") and r.stderr.count("\n") == 1
    assert f"pid {gone.pid}" in r.stderr
    assert not rec.exists()


def test_a_non_python_pid_is_refused_and_left_running(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        rec = tmp_path / "r.ppw"
        r = _ppwtop(["attach", "--headless", "--record", str(rec), str(sleeper.pid)], tmp_path)
        assert r.returncode == 2 and "not a Python process" in r.stderr
        assert r.stderr.count("\n") == 1 and not rec.exists()
        time.sleep(0.1)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("args, words", [
    (["--headless", "1"], "--headless needs --record"),
    (["0"], "not a process id"),
    (["--backend", "cupti", "--scenario", "demo", "1"], "--scenario needs --backend sim"),
])
def test_bad_command_lines(tmp_path: Path, args: list[str], words: str) -> None:
    r = _ppwtop(["attach", *args], tmp_path)
    assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1
