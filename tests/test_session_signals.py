"""SIGTERM and SIGHUP for the whole of ``ppwtop record`` (startup, the session, the wait for
the command), not only while data is collected: ppwtop ends as on Ctrl-C, with a line, the
socket directory removed, the command it launched terminated and, mid-run, the recording
closed with its end chunk (SIGHUP too: there is no screen to lose)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ppwtop.recording import read_recording


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PPWTOP_SOCKET", None)
    env["PPWTOP_SIM_SECONDS"] = "30"
    (tmp / "tmp").mkdir()
    env["TMPDIR"] = str(tmp / "tmp")  # where the Listener's socket directory goes
    return env


def _target(tmp: Path) -> str:
    p = tmp / "target.py"
    p.write_text(textwrap.dedent("""
        import os, time
        open("pid.tmp", "w").write(str(os.getpid()))
        os.replace("pid.tmp", "pid")
        time.sleep(60)
    """))
    return str(p)


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    return not os.path.exists(f"/proc/{pid}")


def _record(tmp: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ppwtop", "record", "-o", str(tmp / "r.ppw"),
                             "--backend", "sim", *extra, "--", sys.executable, _target(tmp)],
                            cwd=tmp, env=_env(tmp), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _signal_when(p: subprocess.Popen[str], sig: int, ready: str) -> str:
    """Send ``sig`` once stderr shows ``ready``; all of stderr."""
    assert p.stderr is not None
    seen = []
    try:
        for line in p.stderr:
            seen.append(line)
            if ready in line:
                p.send_signal(sig)
                break
        _, rest = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    return "".join(seen) + rest


def test_sigterm_while_waiting_for_the_command_terminates_it_and_cleans_up(
        tmp_path: Path) -> None:
    p = _record(tmp_path, "--seconds", "1")
    err = _signal_when(p, signal.SIGTERM, "waiting for the command")
    assert p.returncode == 143, err
    pid = int((tmp_path / "pid").read_text())
    assert f"terminated (SIGTERM): the command (pid {pid}) terminated" in err
    assert _gone(pid), "the command outlived ppwtop's SIGTERM"
    assert list((tmp_path / "tmp").iterdir()) == []  # no ppwtop-*/agent.sock left
    assert read_recording(tmp_path / "r.ppw").meta["complete"] is True


def test_sighup_mid_run_headless_closes_the_recording(tmp_path: Path) -> None:
    p = _record(tmp_path)
    deadline = time.monotonic() + 30
    rec = tmp_path / "r.ppw"
    while not ((tmp_path / "pid").exists() and rec.exists() and rec.stat().st_size > 50_000):
        if time.monotonic() > deadline:
            p.kill()
            pytest.fail("nothing recorded in time")
        time.sleep(0.1)
    p.send_signal(signal.SIGHUP)
    try:
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 129, err
    tr = read_recording(rec)
    assert tr.meta["complete"] is True and tr.meta["end_reason"] == "ended by SIGHUP"
    assert _gone(int((tmp_path / "pid").read_text()))
    assert list((tmp_path / "tmp").iterdir()) == []


def test_sigterm_at_startup_removes_the_socket_directory(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import os, signal, sys, time
        import ppwtop.live
        def starting(*a, **k):  # SIGTERM while the session is being set up
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            return 0
        ppwtop.live.serve_session = starting
        from ppwtop.cli.main import main
        sys.exit(main(sys.argv[1:]))
    """)
    r = subprocess.run([sys.executable, "-c", code, "record", "-o", str(tmp_path / "r.ppw"),
                        "--backend", "sim", "--", sys.executable, "-c", "pass"],
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 143, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "ppwtop: terminated (SIGTERM)"
    assert list((tmp_path / "tmp").iterdir()) == []
