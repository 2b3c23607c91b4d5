"""Live collection end to end on the sim backend, with real processes: ``ppwtop run`` launches
a Python target whose agent ships fake-libcupti buffers over the socket while the fake NVML
drives the sampler; the recording is then read back and attributed.

Every test has a bounded timeout; the target scripts are tiny.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from attribution.engine import attribute
from attribution.model import MarkerKind
from ppwtop.recording import read_recording

TIMEOUT_S = 60


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PPWTOP_SOCKET", None)
    env["PPWTOP_SIM_REPORT"] = str(tmp / "sim_report.json")
    env["PPWTOP_SIM_SECONDS"] = "30"  # every test's target ends well before; simulates faster
    env.update(extra)
    return env


def _ppwtop(args: list[str], tmp: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ppwtop", *args], capture_output=True, check=False,
                          text=True, timeout=TIMEOUT_S, cwd=tmp, env=kw.pop("env", _env(tmp)),
                          **kw)


def _script(tmp: Path, body: str) -> str:
    p = tmp / "target.py"
    p.write_text(textwrap.dedent(body))
    return str(p)


def test_run_sim_headless_records_what_the_fake_delivered(tmp_path: Path) -> None:
    target = _script(tmp_path, """
        import time
        import ppwtop
        for i in range(13):
            ppwtop.mark_step(items=32)  # the contract's spelling
            time.sleep(0.12)
        print("target done")
    """)
    rec = tmp_path / "r.ppw"
    t0 = time.monotonic()
    r = _ppwtop(["run", "--backend", "sim", "--headless", "--seconds", "40", "--record",
                 str(rec), "--", sys.executable, target], tmp_path)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert "target done" in r.stdout
    assert took < 30, "the session did not end when the target exited"
    assert "session ended (the target exited)" in r.stderr
    report = json.loads((tmp_path / "sim_report.json").read_text())
    delivered = report["delivered"]
    tr = read_recording(rec)
    assert tr.meta["complete"] is True
    assert delivered["kernels"] > 100
    # every kernel the fake delivered, decoded and recorded exactly once
    assert len(tr.kernels) == delivered["kernels"]
    assert len(tr.copies) == delivered["copies"]
    assert len(np.unique(tr.kernels.start_ns)) > 0.99 * len(tr.kernels)
    assert tr.meta["session"]["buffers_dropped_by_agent"] == 0
    assert len(tr.power) > 0 and len(tr.energy) > 0
    assert tr.devices and tr.devices[0].name.startswith("NVIDIA")
    hello = tr.meta["target"]
    assert hello["backend"] == "sim" and hello["late_attach"] is False
    assert hello["argv"][0] == target and isinstance(hello["pid"], int)
    assert hello["clock"]["host_ns"] > 0
    # mark_step: 12 closed steps (the first call only starts timing), 32 items each
    steps = tr.markers.take(tr.markers.kind == MarkerKind.STEP_MARK)
    assert len(steps) == 12
    assert np.all(steps.items == 32)
    assert np.all(steps.end_ns - steps.start_ns >= 100_000_000)
    assert tr.strings[int(steps.name_id[0])] == "ppwtop.mark_step"
    # power readings sit on the same timebase as the kernels
    k0, k1 = int(tr.kernels.start_ns.min()), int(tr.kernels.end_ns.max())
    inside = (tr.power.t_ns >= k0) & (tr.power.t_ns <= k1)
    assert inside.mean() > 0.5
    snap_path = tmp_path / "s.json"
    a = _ppwtop(["attribute", "--trace", str(rec), "-o", str(snap_path)], tmp_path)
    assert a.returncode == 0, a.stderr
    snap = orjson.loads(snap_path.read_bytes())
    t = snap["totals"]
    parts = (sum(k["energy_j"] for k in snap["kernels"])
             + sum(c["energy_j"] for c in snap["copies"])
             + sum(i["energy_j"] for i in snap["idle"]))
    assert t["energy_j"] > 0
    assert abs(parts - t["energy_j"]) <= 1e-3 * t["energy_j"]
    assert snap["steps"] is not None and snap["steps"]["count"] >= 10
    assert snap["steps"]["items_per_j"] > 0


def test_seconds_ends_the_session_and_the_command_runs_on(tmp_path: Path) -> None:
    """``--seconds`` counts from the session's start, the target's start-up included: under
    load the agent may connect after it (this test used to assert kernels and steps and failed
    on a loaded machine), so only the session's end and the command's are asserted here."""
    target = _script(tmp_path, """
        import time
        time.sleep(4)
        open("finished", "w").write("ok")
    """)
    rec = tmp_path / "r.ppw"
    r = _ppwtop(["record", "-o", str(rec), "--seconds", "2", "--backend", "sim", "--",
                 sys.executable, target], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 s elapsed" in r.stderr
    assert (tmp_path / "finished").read_text() == "ok"
    tr = read_recording(rec)
    assert tr.meta["complete"] is True
    assert len(tr.power) > 0
    # NVML was polled for the session's 2 s, not for the command's 4
    span_s = (int(tr.power.t_ns.max()) - int(tr.power.t_ns.min())) / 1e9
    assert 1.0 < span_s < 3.0


def test_a_recording_with_profiler_steps_attributes_whole(tmp_path: Path) -> None:
    """The session ends with the target, so every kernel after the agent's start is in
    (the agent connects before the target's code runs): torch.profiler's steps (NVTX ranges
    through CUPTI) are steps, and the energy counter, which starts after the first kernel,
    closes."""
    target = _script(tmp_path, """
        import time
        time.sleep(2.5)
    """)
    rec = tmp_path / "r.ppw"
    r = _ppwtop(["record", "-o", str(rec), "--backend", "sim", "--",
                 sys.executable, target], tmp_path)
    assert r.returncode == 0, r.stderr
    tr = read_recording(rec)
    assert tr.meta["complete"] is True
    snap = attribute(tr, n_boot=20)
    assert snap.steps is not None and snap.steps.count > 50
    assert snap.totals.measured_energy_j > 0 and abs(snap.totals.closure_error) < 0.02


def _wait_recording(tmp_path: Path, rec: Path, min_bytes: int, timeout_s: float = 30.0) -> None:
    """Until the target has written its pid file and the recording holds ``min_bytes``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (tmp_path / "pid").exists() and rec.exists() and rec.stat().st_size > min_bytes:
            return
        time.sleep(0.1)
    pytest.fail("nothing recorded in time")


def test_sigkill_of_ppwtop_leaves_the_target_running(tmp_path: Path) -> None:
    target = _script(tmp_path, """
        import os, time
        import ppwtop.agent as agent
        open("pid.tmp", "w").write(str(os.getpid()))
        os.replace("pid.tmp", "pid")  # whole: the test reads it once it exists
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5.0:
            agent.mark_step(items=1)
            time.sleep(0.01)
        open("finished.tmp", "w").write(f"{time.monotonic() - t0:.2f}")
        os.replace("finished.tmp", "finished")  # whole (the test read it empty once)
    """)
    rec = tmp_path / "r.ppw"
    p = subprocess.Popen([sys.executable, "-m", "ppwtop", "run", "--backend", "sim",
                          "--headless", "--record", str(rec), "--", sys.executable, target],
                         cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        # wait until buffers are being recorded, then kill ppwtop without warning
        _wait_recording(tmp_path, rec, 100_000)
        p.send_signal(signal.SIGKILL)
        p.wait(5)
    finally:
        if p.poll() is None:
            p.kill()
    deadline = time.monotonic() + 20
    while not (tmp_path / "finished").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (tmp_path / "finished").exists(), "the target did not finish after ppwtop died"
    # 500 iterations of 10 ms: the dead socket must not slow the loop materially
    assert float((tmp_path / "finished").read_text()) < 7.0
    tr = read_recording(rec)  # readable up to the kill
    assert tr.meta["complete"] is False
    assert len(tr.kernels) > 0 and len(tr.power) > 0


def test_sigterm_ends_the_session_cleanly_and_stops_the_command(tmp_path: Path) -> None:
    """`timeout 20 ppwtop record ...` or `docker stop`: SIGTERM used to kill ppwtop on the
    spot (no end chunk, no line, the command left running); it now ends the session as
    Ctrl-C does, stops the command it launched, and exits 143."""
    target = _script(tmp_path, """
        import os, time
        open("pid.tmp", "w").write(str(os.getpid()))
        os.replace("pid.tmp", "pid")  # whole: the test reads it once it exists
        time.sleep(60)
    """)
    rec = tmp_path / "r.ppw"
    p = subprocess.Popen([sys.executable, "-m", "ppwtop", "record", "-o", str(rec),
                          "--backend", "sim", "--", sys.executable, target],
                         cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        _wait_recording(tmp_path, rec, 50_000)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert "terminated (SIGTERM)" in err
    tr = read_recording(rec)
    assert tr.meta["complete"] is True and tr.meta["end_reason"] == "terminated (SIGTERM)"
    assert len(tr.kernels) > 0
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}"), "the command outlived ppwtop's SIGTERM"


def test_a_command_killed_by_a_signal_exits_as_a_shell_says(tmp_path: Path) -> None:
    r = _ppwtop(["record", "-o", str(tmp_path / "r.ppw"), "--backend", "sim", "--",
                 sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], tmp_path)
    assert r.returncode == 137, r.stderr  # 128 + 9, as bash reports it (was 256 - 9)
    assert "killed by signal 9 (SIGKILL)" in r.stderr


def test_cupti_held_by_another_profiler_goes_on_with_nvml_only(tmp_path: Path) -> None:
    target = _script(tmp_path, "import time; time.sleep(1.5)\n")
    rec = tmp_path / "r.ppw"
    r = _ppwtop(["run", "--backend", "sim", "--headless", "--record", str(rec), "--",
                 sys.executable, target], tmp_path,
                env=_env(tmp_path, PPWTOP_SIM_CUPTI_BUSY="1"))
    assert r.returncode == 0, r.stderr
    assert "CUPTI in_use" in r.stderr and "NVML data only" in r.stderr
    tr = read_recording(rec)
    assert len(tr.kernels) == 0
    assert len(tr.power) > 0
    assert tr.meta["agent"]["cupti_status"] == "in_use"


def test_non_python_command_records_nvml_until_it_exits(tmp_path: Path) -> None:
    rec = tmp_path / "r.ppw"
    r = _ppwtop(["run", "--backend", "sim", "--headless", "--record", str(rec), "--",
                 "sleep", "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "without an agent connecting" in r.stderr
    tr = read_recording(rec)
    assert len(tr.kernels) == 0 and len(tr.power) > 0


def test_command_exit_status_is_passed_on(tmp_path: Path) -> None:
    r = _ppwtop(["record", "-o", str(tmp_path / "r.ppw"), "--backend", "sim", "--",
                 sys.executable, "-c", "raise SystemExit(7)"], tmp_path)
    assert r.returncode == 7, r.stderr


@pytest.mark.parametrize("args, message", [
    (["run", "--backend", "sim", "--headless", "--record", "r.ppw"], "no command to run"),
    (["run", "--backend", "sim", "--headless", "--record", "r.ppw", "--"], "no command"),
    (["run", "--headless", "--", "true"], "--headless needs --record"),
    (["record", "-o", "/nonexistent-dir/r.ppw", "--backend", "sim", "--", "true"],
     "no such directory"),
    (["record", "-o", ".", "--backend", "sim", "--", "true"], "is a directory"),
    (["record", "--backend", "sim", "--", "true"], "required"),
    (["record", "-o", "r.ppw", "--backend", "gpu", "--", "true"], "invalid choice"),
    (["record", "-o", "r.ppw", "--backend", "sim", "--", "no-such-command-xyz"],
     "command not found"),
    (["record", "-o", "r.ppw", "--backend", "sim", "--scenario", "nope", "--", "true"],
     "unknown scenario"),
    (["record", "-o", "r.ppw", "--backend", "sim", "--seed", "-1", "--", "true"], "--seed"),
    (["record", "-o", "r.ppw", "--backend", "sim", "--seconds", "1e308", "--", "true"],
     "--seconds: must be over 0 and at most 1e+07 s"),
    (["run", "--headless", "--record", "r.ppw", "--backend", "sim", "--seconds", "inf", "--",
      "true"], "must be finite"),
])
def test_bad_command_lines_are_one_line_exit_2(tmp_path: Path, args: list[str],
                                               message: str) -> None:
    r = _ppwtop(args, tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ppwtop: error:"), r.stderr
    assert message in lines[0]
    assert not (tmp_path / "r.ppw").exists()


def test_disk_full_stops_the_recording_and_keeps_what_was_written(tmp_path: Path) -> None:
    import resource

    def limit() -> None:  # a file-size limit makes writes fail with EFBIG, like a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000))

    target = _script(tmp_path, "import time; time.sleep(3)\n")
    rec = tmp_path / "r.ppw"
    r = _ppwtop(["record", "-o", str(rec), "--backend", "sim", "--", sys.executable, target],
                tmp_path, preexec_fn=limit)
    assert r.returncode == 2, r.stderr
    assert "disk full" in r.stderr and "what was written is kept" in r.stderr
    tr = read_recording(rec)
    assert 0 < rec.stat().st_size <= 150_000
    assert len(tr.kernels) + len(tr.power) > 0


def test_late_attach_entry_connects_and_says_what_it_cannot_see(tmp_path: Path) -> None:
    from ppwtop.fakes.sim_run import SimRunConfig
    from ppwtop.live import serve_session
    from ppwtop.transport.endpoint import Listener

    cfg = SimRunConfig(seconds=20.0, anchor_ns=time.time_ns())
    rec = tmp_path / "r.ppw"
    code = textwrap.dedent("""
        import sys, threading, time
        from ppwtop.agent.bootstrap import attach_entry
        attach_entry(sys.argv[1], "sim")
        agent = [t for t in threading.enumerate() if t.name == "ppwtop-agent-attach"]
        print(f"returned agent_thread_alive={bool(agent) and agent[0].is_alive()}", flush=True)
        time.sleep(6)
    """)
    with Listener() as lis:
        env = {**_env(tmp_path), **cfg.env()}
        child = subprocess.Popen([sys.executable, "-c", code, lis.path], env=env,
                                 stdout=subprocess.PIPE, text=True)
        try:
            rc = serve_session(lis, label="pid", record_path=rec, headless=True, seconds=15,
                               backend="sim", sim=cfg, launch=lambda: None,
                               accept_timeout_s=15)
            out, _ = child.communicate(timeout=20)
        finally:
            if child.poll() is None:
                child.kill()
    assert rc == 0
    assert child.returncode == 0
    # attach_entry hands the connection and the session to a thread of its own and returns
    # while that thread still runs (the injector's call is not held for the session)
    assert "agent_thread_alive=True" in out
    tr = read_recording(rec)
    assert tr.meta["late_attach"] is True
    assert any("NVTX" in m for m in tr.meta["late_attach_missing"])
    assert tr.meta["target"]["late_attach"] is True
    assert len(tr.kernels) > 0


def test_the_users_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nopen(os.path.join(os.path.dirname(__file__), 'ran'), 'w').write('yes')\n")
    rec = tmp_path / "r.ppw"
    target = _script(tmp_path, """
        import os, time
        import ppwtop.agent as agent
        assert agent.running() is not None, "agent not started"
        assert "PPWTOP_SOCKET" not in os.environ  # the target's children are not profiled
        time.sleep(1.0)
    """)
    env = _env(tmp_path, PYTHONPATH=str(site))
    r = _ppwtop(["record", "-o", str(rec), "--backend", "sim", "--", sys.executable, target],
                tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert (site / "ran").read_text() == "yes"
    assert len(read_recording(rec).kernels) > 0


def test_a_forked_child_does_not_keep_the_session_open(tmp_path: Path) -> None:
    target = _script(tmp_path, """
        import os, time
        import ppwtop.agent as agent
        pid = os.fork()
        if pid == 0:  # like a DataLoader worker: outlives the parent here
            agent.mark_step(items=1)  # must be harmless in the child
            time.sleep(40)
            os._exit(0)
        open("child", "w").write(str(pid))
        time.sleep(0.5)
    """)
    rec = tmp_path / "r.ppw"
    t0 = time.monotonic()
    err = tmp_path / "stderr.txt"
    try:  # output to a file: the forked child holds any pipe open for 40 s
        with err.open("w") as f:
            rc = subprocess.call([sys.executable, "-m", "ppwtop", "record", "-o", str(rec),
                                  "--backend", "sim", "--", sys.executable, target],
                                 cwd=tmp_path, env=_env(tmp_path), stdout=f, stderr=f,
                                 timeout=TIMEOUT_S)
        took = time.monotonic() - t0
    finally:
        child = tmp_path / "child"
        if child.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(child.read_text()), signal.SIGKILL)
    assert rc == 0, err.read_text()
    assert "the target exited" in err.read_text()
    assert took < 30, "the session waited for the forked child"
    assert read_recording(rec).meta["complete"] is True


def test_the_end_of_the_simulated_job_is_announced(tmp_path: Path) -> None:
    target = _script(tmp_path, "import time; time.sleep(3.5)\n")
    rec = tmp_path / "r.ppw"
    r = _ppwtop(["record", "-o", str(rec), "--backend", "sim", "--", sys.executable, target],
                tmp_path, env=_env(tmp_path, PPWTOP_SIM_SECONDS="1.5"))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("the simulated job has ended") == 1
    tr = read_recording(rec)
    assert tr.meta["sim"]["seconds"] == 1.5
    assert int(tr.kernels.end_ns.max()) <= tr.meta["sim"]["anchor_ns"] + 1_500_000_000


def test_nothing_collected_is_an_error_not_an_empty_success(tmp_path: Path) -> None:
    """The real backend on a machine without a GPU: CUPTI fails in the target and NVML is
    not there; the session recorded 0 kernels and 0 readings and exited 0 (audit)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works here: something is collected")
    r = _ppwtop(["record", "-o", str(tmp_path / "r.ppw"), "--", sys.executable, "-c",
                 "pass"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert "nothing was collected" in r.stderr
    assert read_recording(tmp_path / "r.ppw").meta["complete"] is True  # still readable


def test_an_empty_command_log_is_removed_and_a_written_one_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under the TUI the command's output goes to a temporary log; one it never wrote to is
    removed instead of being left (and announced) after every run."""
    from ppwtop.live.launch import tell_log

    empty, written = tmp_path / "empty.log", tmp_path / "written.log"
    empty.write_bytes(b"")
    written.write_text("step 1 loss 2.3\n")
    tell_log(empty)
    tell_log(written)
    assert not empty.exists() and written.exists()
    assert capsys.readouterr().err.splitlines() == [
        f"ppwtop: the command's output is in {written}"]
