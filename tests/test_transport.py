"""Transport: framing under arbitrary partial reads, corrupt/oversized frames, and the
never-blocking send queue (a reader that never reads costs the target drops, not time)."""

from __future__ import annotations

import random
import socket
import time

import pytest

from ppwtop.transport import frames
from ppwtop.transport.endpoint import FrameReader, Listener, connect
from ppwtop.transport.frames import FrameDecoder, FrameError, FrameType
from ppwtop.transport.sender import Sender


def _stream() -> tuple[bytes, list[tuple[FrameType, bytes]]]:
    rng = random.Random(7)
    want: list[tuple[FrameType, bytes]] = []
    out = bytearray()
    for i in range(40):
        if i % 3 == 0:
            data = rng.randbytes(rng.randrange(0, 5000))
            parts = frames.encode_buffer_parts(data, seq=i, context=5, stream_id=2,
                                               dropped_records=i, names={0x1000 + i: f"k{i}"})
            raw = b"".join(parts)
            want.append((FrameType.BUFFER, raw[frames.HEADER_BYTES:]))
        else:
            raw = frames.encode_json(FrameType.STATS, {"i": i, "pad": "x" * rng.randrange(300)})
            want.append((FrameType.STATS, raw[frames.HEADER_BYTES:]))
        out += raw
    return bytes(out), want


@pytest.mark.parametrize("split", ["bytewise", "random", "whole"])
def test_frames_survive_any_split_of_the_stream(split: str) -> None:
    stream, want = _stream()
    dec = FrameDecoder()
    got: list[frames.Frame] = []
    if split == "bytewise":
        for i in range(len(stream)):
            got += dec.feed(stream[i:i + 1])
    elif split == "random":
        rng = random.Random(1)
        i = 0
        while i < len(stream):
            n = rng.randrange(1, 9000)
            got += dec.feed(stream[i:i + n])
            i += n
    else:
        got = dec.feed(stream)
    assert [(f.type, bytes(f.payload)) for f in got] == want
    assert dec.pending_bytes == 0
    b = frames.decode_buffer(got[3].payload)
    assert (b.seq, b.context, b.stream_id, b.dropped_records, b.names) == (3, 5, 2, 3,
                                                                          {0x1003: "k3"})
    assert got[1].json()["i"] == 1


def test_partial_frame_waits_for_the_rest() -> None:
    raw = frames.encode_json(FrameType.HELLO, {"pid": 1})
    dec = FrameDecoder()
    assert dec.feed(raw[:-1]) == []
    assert dec.pending_bytes == len(raw) - 1
    (f,) = dec.feed(raw[-1:])
    assert f.type is FrameType.HELLO and f.json() == {"pid": 1}


def test_oversized_length_is_an_error_as_soon_as_the_header_arrives() -> None:
    head = frames.HEADER.pack(frames.MAGIC, frames.PROTOCOL_VERSION, int(FrameType.BUFFER),
                              frames.MAX_PAYLOAD_BYTES + 1, 0)
    with pytest.raises(FrameError, match="over"):
        FrameDecoder().feed(head)  # no payload sent: it must not wait for 64 MiB


@pytest.mark.parametrize("corrupt", ["magic", "version", "type", "crc", "json"])
def test_corrupt_frames_are_errors(corrupt: str) -> None:
    raw = bytearray(frames.encode_json(FrameType.STATS, {"a": 1}))
    if corrupt == "magic":
        raw[0:2] = b"XX"
    elif corrupt == "version":
        raw[2] = 99
    elif corrupt == "type":
        raw[3] = 200
    elif corrupt == "crc":
        raw[-2] ^= 0xFF
    else:
        raw = bytearray(frames.encode(FrameType.STATS, b"[1, 2"))
    with pytest.raises(FrameError):
        for f in FrameDecoder().feed(bytes(raw)):
            f.json()


def test_bad_buffer_meta_is_an_error() -> None:
    with pytest.raises(FrameError):
        frames.decode_buffer(b"\xff\xff\x00\x00{}")
    with pytest.raises(FrameError):
        frames.decode_buffer(b"\x02\x00\x00\x00{}")  # no seq


def test_sender_never_blocks_when_the_reader_never_reads() -> None:
    a, b = socket.socketpair()
    try:
        s = Sender(a, max_queue_bytes=4 << 20, max_queue_frames=64)
        payload = b"\0" * (1 << 20)
        worst = 0.0
        t0 = time.perf_counter()
        accepted = 0
        for i in range(200):
            parts = frames.encode_buffer_parts(payload, seq=i + 1, context=0, stream_id=0,
                                               dropped_records=0, names={})
            t = time.perf_counter()
            accepted += s.offer(parts)
            worst = max(worst, time.perf_counter() - t)
        total = time.perf_counter() - t0
        # the socket buffer and the 4 MiB queue take a few; the rest are refused and counted
        assert s.frames_refused == 200 - accepted
        assert s.frames_refused > 150
        assert s.queued_bytes <= 4 << 20
        assert worst < 0.05, f"one offer took {worst * 1e3:.1f} ms"
        assert total < 2.0
        assert s.connected
    finally:
        b.close()
    deadline = time.monotonic() + 3.0
    while s.connected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not s.connected, "peer close not noticed"
    assert s.offer([b"x"]) is False
    s.close(timeout_s=1.0)


def test_sender_delivers_everything_in_order_to_a_reader() -> None:
    with Listener() as lis:
        c = connect(lis.path)
        conn = lis.accept(2.0)
        assert conn is not None
        s = Sender(c)
        for i in range(300):
            assert s.offer([frames.encode_json(FrameType.STEP, {"i": i})])
        r = FrameReader(conn)
        got: list[int] = []
        deadline = time.monotonic() + 5.0
        while len(got) < 300 and time.monotonic() < deadline:
            got += [f.json()["i"] for f in r.read(0.1)]
        s.close()
        assert got == list(range(300))
        deadline = time.monotonic() + 2.0
        while not r.eof and time.monotonic() < deadline:
            r.read(0.1)
        assert r.eof


def test_socket_reader_reassembles_frames_written_in_odd_pieces() -> None:
    stream, want = _stream()
    a, b = socket.socketpair()
    r = FrameReader(b)
    rng = random.Random(3)
    got: list[frames.Frame] = []
    i = 0
    while i < len(stream):  # header and payload boundaries fall anywhere between reads
        n = rng.choice([1, 5, 11, 13, 700, 4096])
        a.sendall(stream[i:i + n])
        i += n
        got += r.read(0.01)
    a.close()
    deadline = time.monotonic() + 3
    while not r.eof and time.monotonic() < deadline:
        got += r.read(0.05)
    assert [(f.type, bytes(f.payload)) for f in got] == want
    assert r.eof


def test_socket_reader_rejects_a_corrupt_header_without_waiting() -> None:
    a, b = socket.socketpair()
    r = FrameReader(b)
    a.sendall(frames.HEADER.pack(b"PW", frames.PROTOCOL_VERSION, int(FrameType.BUFFER),
                                 1 << 31, 0))
    with pytest.raises(FrameError, match="over"):
        for _ in range(10):
            r.read(0.1)
    a.close()
    b.close()
