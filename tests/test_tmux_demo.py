"""`ppwtop demo` in a real terminal: tmux at 160x48 and 100x30, keys s / space / q; and
`ppwtop replay` running to the end of a recording ("target disconnected", data kept).

Skipped when tmux is not installed.  Each size gets its own tmux server (``-L``), killed in
a ``finally`` whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
REPO = Path(__file__).resolve().parent.parent
KERNEL_MARKS = ("flash_fwd", "gemm", "SoftMax", "layer_norm")  # demo scenario kernels


class Tmux:
    def __init__(self, width: int, height: int) -> None:
        self.socket = f"ppwtop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.width, self.height = width, height

    def cmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert TMUX is not None
        return subprocess.run([TMUX, "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=10, check=check)

    def start(self, command: str) -> None:
        self.cmd("new-session", "-d", "-s", "t", "-x", str(self.width), "-y",
                 str(self.height), "-c", str(REPO), command)

    def capture(self) -> str:
        return self.cmd("capture-pane", "-p", "-t", "t").stdout

    def alive(self) -> bool:
        return self.cmd("has-session", "-t", "t", check=False).returncode == 0

    def keys(self, *keys: str) -> None:
        self.cmd("send-keys", "-t", "t", *keys)

    def wait_for(self, ok: Callable[[str], bool], timeout_s: float, what: str) -> str:
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            if not self.alive():
                pytest.fail(f"ppwtop exited while waiting for {what}; last screen:\n{text}")
            text = self.capture()
            if ok(text):
                return text
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout_s} s waiting for {what}; screen:\n{text}")

    def gone(self, timeout_s: float = 15.0) -> bool:
        """Whether the session's command has exited (its pane, and so the session, gone)
        within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        return not self.alive()

    def kill(self) -> None:
        self.cmd("kill-server", check=False)


@pytest.mark.parametrize(("width", "height"), [(160, 48), (100, 30)])
def test_demo_in_tmux(width: int, height: int) -> None:
    t = Tmux(width, height)
    try:
        # started from a non-tty, tmux hands the pane COLUMNS=80 LINES=24, which textual
        # would believe over the real pane size
        t.start(f"env -u COLUMNS -u LINES {sys.executable} -m ppwtop demo --seconds 30")
        screen = t.wait_for(lambda s: any(m in s for m in KERNEL_MARKS), 45.0, "a kernel row")
        lines = screen.splitlines()
        assert len(lines) <= height and all(len(ln) <= width for ln in lines)
        # header, kernels table, footer keys
        assert lines[0].lstrip().startswith("ppwtop")
        assert "sort: energy" in screen
        assert "kernels" in screen and "energy J" in screen
        footer = lines[-1]
        for key in ("q quit", "space pause", "s sort"):
            assert key in footer, footer
        # 's' cycles the sort key (energy -> time), shown in the header
        t.keys("s")
        screen = t.wait_for(lambda s: "sort: time" in s, 15.0, "sort: time")
        assert "sort: energy" not in screen
        # space pauses
        t.keys("Space")
        screen = t.wait_for(lambda s: "paused" in s.splitlines()[0], 15.0, "paused")
        # q quits: the session (whose only process is ppwtop) ends
        t.keys("q")
        assert t.gone(), "ppwtop did not exit on 'q'"
    finally:
        t.kill()


def test_replay_in_tmux_ends_disconnected(tmp_path: Path) -> None:
    from attribution.sim import simulate
    from ppwtop.recording import write_recording

    rec = tmp_path / "demo.ppw"
    write_recording(rec, simulate("demo", "h100", 10, seed=0).trace)
    t = Tmux(120, 36)
    try:
        # 10 s recording, replay starts 2 s in, at 8x: the end comes after about 1 s
        t.start(f"env -u COLUMNS -u LINES {sys.executable} -m ppwtop replay {rec} --speed 8")
        screen = t.wait_for(lambda s: "target disconnected" in s, 45.0, "target disconnected")
        assert "replay demo.ppw" in screen.splitlines()[0]
        # the last data is kept on screen
        screen = t.wait_for(lambda s: any(m in s for m in KERNEL_MARKS), 15.0, "a kernel row")
        assert "so far" in screen  # header line 2 still shows the last totals
        t.keys("q")
        assert t.gone(), "ppwtop replay did not exit on 'q'"
    finally:
        t.kill()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("sig", ["TERM", "HUP"])
def test_a_signal_ends_a_tui_session_as_q_does(tmp_path: Path, sig: str) -> None:
    """`kill` (SIGTERM) or a closed terminal (SIGHUP) during `ppwtop run` with the TUI: the
    terminal is handed back (the summary line printed on the normal screen), the recording
    closed with its end chunk, the launched command terminated, and the status is 128 + N.
    Before, ppwtop died on the spot: the terminal left in raw mode on the alternate screen,
    the recording without its end, the command running on as an orphan."""
    import signal

    from ppwtop.recording import read_recording

    rec, status, child_pid = tmp_path / "r.ppw", tmp_path / "status", tmp_path / "child.pid"
    job = tmp_path / "job.py"
    job.write_text(f"import os, time\nopen({str(child_pid)!r}, 'w').write(str(os.getpid()))\n"
                   "time.sleep(120)\n")
    t = Tmux(120, 36)
    try:
        t.start(f"sh -c 'env -u COLUMNS -u LINES {sys.executable} -m ppwtop run --backend sim "
                f"--record {rec} -- {sys.executable} {job}; echo $? > {status}; "
                "sleep 30'")
        t.wait_for(lambda s: any(m in s for m in KERNEL_MARKS), 60.0, "a kernel row")
        shell = int(t.cmd("list-panes", "-t", "t", "-F", "#{pane_pid}").stdout.split()[0])
        (ppwtop,) = _children(shell)
        os.kill(ppwtop, getattr(signal, f"SIG{sig}"))
        deadline = time.monotonic() + 30.0
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status.exists(), "ppwtop did not end on the signal"
        time.sleep(0.3)
        assert int(status.read_text()) == 128 + int(getattr(signal, f"SIG{sig}"))
        screen = t.capture()
        assert "ppwtop: session ended" in screen and "written" in screen, screen
        tr = read_recording(rec)
        assert len(tr.kernels) > 0
        assert "SIG" + sig in str(tr.meta.get("end_reason")), tr.meta.get("end_reason")
        pid = int(child_pid.read_text())  # terminated and reaped by ppwtop, as headless
        deadline = time.monotonic() + 10.0
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists(), "the launched command was left running"
    finally:
        t.kill()


def test_ctrl_c_quits_the_tui() -> None:
    """Ctrl-C in the TUI quits, as in top (textual's default only says to press ctrl+q)."""
    t = Tmux(120, 36)
    try:
        t.start(f"env -u COLUMNS -u LINES {sys.executable} -m ppwtop demo --seconds 30")
        t.wait_for(lambda s: any(m in s for m in KERNEL_MARKS), 45.0, "a kernel row")
        t.keys("C-c")
        assert t.gone(), "ppwtop did not exit on Ctrl-C"
    finally:
        t.kill()
