"""A status stream that fails (stderr piped into a reader that has gone) never ends a live
session early: collection runs for the time asked and the recording ends complete."""

from __future__ import annotations

import time
from pathlib import Path

from ppwtop.live.serve import serve
from ppwtop.live.session import Session
from ppwtop.live.status_out import StatusOut
from ppwtop.recording import read_recording
from ppwtop.transport.endpoint import Listener


class _GonePipe:
    """stderr whose reader has exited: every write fails as a closed pipe does."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_failed_status_line_does_not_end_the_session(tmp_path: Path) -> None:
    rec = tmp_path / "r.ppw"
    gone = _GonePipe()
    with Listener() as lis:
        s = Session(lis, label="t", backend="sim", record_path=rec,
                    out=gone)  # type: ignore[arg-type]
        s.sim_end_ns = 1  # "the simulated job has ended" is said on the first turn
        t0 = time.monotonic()
        reason = s.run(seconds=0.6)
    assert time.monotonic() - t0 >= 0.6
    assert reason == "0.6 s elapsed"
    assert gone.writes == 1  # the first failure silenced the rest
    tr = read_recording(rec)
    assert tr.meta["complete"] is True and tr.meta["end_reason"] == "0.6 s elapsed"


def test_serve_runs_its_time_and_summary_with_a_gone_stderr(tmp_path: Path) -> None:
    rec = tmp_path / "r.ppw"
    with Listener() as lis:
        rc = serve(lis, label="t", record_path=rec, headless=True, seconds=0.5,
                   backend="cupti", out=_GonePipe())  # type: ignore[arg-type]
    assert rc == 0
    tr = read_recording(rec)
    assert tr.meta["complete"] is True and tr.meta["end_reason"] == "0.5 s elapsed"


def test_status_out_passes_lines_through_until_it_fails() -> None:
    import io

    buf = io.StringIO()
    so = StatusOut(buf)
    print("ppwtop: one", file=so, flush=True)
    assert buf.getvalue() == "ppwtop: one\n" and not so.broken
    buf.close()
    print("ppwtop: two", file=so, flush=True)  # a closed stream: swallowed
    assert so.broken
