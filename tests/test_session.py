"""The session against a hand-driven peer: corrupt streams end it cleanly, sequence gaps
count as dropped buffers, step marks become STEP_MARK markers, the recording stays valid."""

from __future__ import annotations

import io
import socket
import threading
from pathlib import Path

import numpy as np

from attribution.model import MarkerKind
from ppwtop.live.session import Session
from ppwtop.recording import read_recording
from ppwtop.transport import frames
from ppwtop.transport.endpoint import Listener
from ppwtop.transport.frames import FrameType


def _serve(tmp_path: Path, send: bytes) -> tuple[Session, str]:
    rec = tmp_path / "r.ppw"
    with Listener() as lis:
        s = Session(lis, label="t", backend="sim", record_path=rec, out=io.StringIO())
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(lis.path)

        def peer() -> None:
            c.sendall(send)
            c.close()

        th = threading.Thread(target=peer)
        th.start()
        reason = s.run(seconds=10)
        th.join()
    return s, reason


def test_corrupt_stream_ends_the_session_and_keeps_the_recording(tmp_path: Path) -> None:
    hello = frames.encode_json(FrameType.HELLO, {"pid": 42, "late_attach": False})
    _, reason = _serve(tmp_path, hello + b"garbage that is not a frame header")
    assert "corrupt data" in reason
    tr = read_recording(tmp_path / "r.ppw")
    assert tr.meta["complete"] is True and tr.meta["pid"] == 42
    assert "corrupt" in tr.meta["end_reason"]


def test_sequence_gaps_count_as_dropped_buffers_and_steps_are_recorded(tmp_path: Path) -> None:
    out = frames.encode_json(FrameType.HELLO, {"pid": 7, "late_attach": True})
    for seq in (1, 2, 5):
        out += b"".join(frames.encode_buffer_parts(b"", seq=seq, context=0, stream_id=0,
                                                   dropped_records=3, names={}))
    out += frames.encode_json(FrameType.STEP, {"steps": [
        {"start_ns": 10, "end_ns": 20, "items": 8, "tid": 1},
        {"start_ns": 20, "end_ns": 35, "items": None, "tid": 1}]})
    out += frames.encode_json(FrameType.BYE, {"pid": 7})
    s, reason = _serve(tmp_path, out)
    assert reason == "the target exited"
    assert s.counts.seq_gaps == 2 and s.counts.buffers == 3
    assert s.decoder.stats.dropped_records == 9
    tr = read_recording(tmp_path / "r.ppw")
    assert tr.meta["session"]["buffers_dropped_by_agent"] == 2
    assert tr.meta["late_attach"] is True and tr.meta["late_attach_missing"]
    assert "data lost" in (s.feed.loss_note or "")
    st = tr.markers.take(tr.markers.kind == MarkerKind.STEP_MARK)
    assert st.start_ns.tolist() == [10, 20] and st.end_ns.tolist() == [20, 35]
    assert st.items[0] == 8 and np.isnan(st.items[1])
