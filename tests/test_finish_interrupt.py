"""A second Ctrl-C while a session closes its recording: the end chunk is still written
(the signal waits the few milliseconds until the file is closed), and the summary never
says "written" about a recording left without one."""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from ppwtop.live.serve import summary
from ppwtop.live.session import Session
from ppwtop.recording import read_recording
from ppwtop.transport.endpoint import Listener


def test_a_ctrl_c_while_closing_waits_for_the_end_chunk(tmp_path: Path) -> None:
    rec = tmp_path / "r.ppw"
    with Listener() as lis:
        s = Session(lis, label="t", backend="sim", record_path=rec, out=io.StringIO())
        w = s.writer
        assert w is not None
        real_close = w.close

        def close() -> None:
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C lands here
            real_close()

        w.close = close  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            s.run(seconds=0.2)
    assert w.ended
    assert read_recording(rec).meta["complete"] is True
    assert summary(s).endswith(f"recording {rec} written")


def test_the_summary_says_a_recording_without_end_chunk_is_incomplete(
        tmp_path: Path) -> None:
    rec = tmp_path / "r.ppw"
    with Listener() as lis:
        s = Session(lis, label="t", backend="sim", record_path=rec, out=io.StringIO())
        w = s.writer
        assert w is not None
        real_close = w.close

        def interrupted(parts: Any, chunk: bool = True) -> None:
            raise KeyboardInterrupt

        def close() -> None:  # the end chunk's write is interrupted (audit's stand-in)
            w._write_parts = interrupted  # type: ignore[method-assign]
            real_close()

        w.close = close  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            s.run(seconds=0.1)
    assert read_recording(rec).meta["complete"] is False
    line = summary(s)
    assert "written" not in line.split("; recording")[-1].replace("was written", "")
    assert f"recording {rec} incomplete: interrupted" in line
