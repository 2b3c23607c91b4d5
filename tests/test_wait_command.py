"""What ppwtop says when Ctrl-C stops its wait for the command: whether the command ended
too (a terminal's Ctrl-C reaches the whole group) or keeps running, naming its pid; also in
the first, quiet, 2 s of the wait."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import threading
from pathlib import Path

from ppwtop.live.serve import serve
from ppwtop.transport.endpoint import Listener


def _serve_and_interrupt(tmp_path: Path, also_child: bool) -> tuple[int, str, int]:
    """serve() a 0.2 s session of `sleep 30`; 0.8 s in (the quiet wait) Ctrl-C reaches
    ppwtop, and the command too when ``also_child``."""
    out = io.StringIO()
    children: list[subprocess.Popen[bytes]] = []

    def launch() -> subprocess.Popen[bytes]:
        children.append(subprocess.Popen(["sleep", "30"]))
        return children[0]

    def ctrl_c() -> None:
        if also_child:
            children[0].send_signal(signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.8, ctrl_c)
    try:
        with Listener() as lis:
            timer.start()
            rc = serve(lis, label="t", record_path=tmp_path / "r.ppw", headless=True,
                       seconds=0.2, backend="cupti", launch=launch, out=out)
    finally:
        timer.cancel()
        if children and children[0].poll() is None:
            children[0].kill()
            children[0].wait()
    return rc, out.getvalue(), children[0].pid


def test_ctrl_c_to_the_group_says_the_command_ended_too(tmp_path: Path) -> None:
    rc, err, pid = _serve_and_interrupt(tmp_path, also_child=True)
    assert "keeps running" not in err
    assert f"interrupted; the command (pid {pid}) ended too" in err
    assert "killed by signal 2 (SIGINT)" in err and rc == 130


def test_ctrl_c_to_ppwtop_alone_names_the_command_left_running(tmp_path: Path) -> None:
    rc, err, pid = _serve_and_interrupt(tmp_path, also_child=False)
    assert f"stopped waiting; the command (pid {pid}) keeps running" in err
    assert rc == 130
