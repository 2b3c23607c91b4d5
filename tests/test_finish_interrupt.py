"""A second Ctrl-C while a session closes its recording: the end chunk is still written
(the signal waits the few milliseconds until the file is closed), and the summary never
says "written" about a recording left without one."""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ppwtop.live.serve import summary
from ppwtop.live.session import Session
from ppwtop.recording import RecordingWriter, read_recording
from ppwtop.transport.endpoint import Listener


def _closing_with(tmp_path: Path, before_close: Callable[[RecordingWriter], None],
                  seconds: float) -> tuple[Session, RecordingWriter, Path]:
    """A sim session recording to a file for ``seconds``, ``before_close`` run on its writer
    as the session closes it; the run must end on KeyboardInterrupt."""
    rec = tmp_path / "r.ppw"
    with Listener() as lis:
        s = Session(lis, label="t", backend="sim", record_path=rec, out=io.StringIO())
        w = s.writer
        assert w is not None
        real_close = w.close

        def close() -> None:
            before_close(w)
            real_close()

        w.close = close  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            s.run(seconds=seconds)
    return s, w, rec


def test_a_ctrl_c_while_closing_waits_for_the_end_chunk(tmp_path: Path) -> None:
    def second_ctrl_c(_w: RecordingWriter) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C lands here

    s, w, rec = _closing_with(tmp_path, second_ctrl_c, 0.2)
    assert w.ended
    assert read_recording(rec).meta["complete"] is True
    assert summary(s).endswith(f"recording {rec} written")


def test_the_summary_says_a_recording_without_end_chunk_is_incomplete(
        tmp_path: Path) -> None:
    def interrupted(parts: Any, chunk: bool = True) -> None:
        raise KeyboardInterrupt

    def end_chunk_interrupted(w: RecordingWriter) -> None:  # the audit's stand-in
        w._write_parts = interrupted  # type: ignore[method-assign]

    s, w, rec = _closing_with(tmp_path, end_chunk_interrupted, 0.1)
    assert not w.ended
    assert read_recording(rec).meta["complete"] is False
    line = summary(s)
    assert f"recording {rec} written" not in line
    assert f"recording {rec} incomplete: interrupted" in line
