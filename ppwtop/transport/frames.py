"""The wire format between the in-target agent and the ppwtop session: typed, length-prefixed
frames on a Unix stream socket.

Owns the frame header, the frame types, how each frame's payload is laid out, and the
incremental :class:`FrameDecoder` that turns an arbitrary split of the byte stream (partial
reads) back into frames.  Imports only the standard library: it runs inside the target.

Frame = 12-byte header + payload::

    magic   2 bytes  b"PW"
    version u8       PROTOCOL_VERSION
    type    u8       a :class:`FrameType`
    length  u32 LE   payload bytes (<= MAX_PAYLOAD_BYTES)
    crc     u32 LE   zlib.crc32 of the payload (0 for BUFFER frames: see below)

Control frames (HELLO, CLOCK, STATS, STEP, BYE) carry one UTF-8 JSON object.  A BUFFER frame
carries ``u32 meta_len`` + a JSON object (seq, context, stream_id, dropped_records, names,
sent_ns) +
the raw CUPTI activity bytes; its CRC is 0 because computing it would cost the target a pass
over every buffer (the socket is a local, reliable stream).  A bad magic, an unknown version,
a payload over the limit or a CRC mismatch raise :class:`FrameError`: the receiver closes the
connection instead of waiting for bytes that will never make sense.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import socket
import struct
import zlib
from typing import Any

MAGIC = b"PW"
PROTOCOL_VERSION = 1
HEADER = struct.Struct("<2sBBII")
HEADER_BYTES = HEADER.size
MAX_PAYLOAD_BYTES = 64 << 20
"""Largest frame accepted (a CUPTI buffer is 8 MiB; names and meta are small)."""
_META_LEN = struct.Struct("<I")


class FrameType(enum.IntEnum):
    HELLO = 1  # handshake: versions, pid, argv, backend, clock pair, CUPTI status
    CLOCK = 2  # a fresh clock pair (every few seconds)
    BUFFER = 3  # one completed CUPTI activity buffer (RawBuffer)
    STEP = 4  # step marks (ppwtop.agent.mark_step)
    STATS = 5  # agent counters: buffers sent/dropped, CUPTI dropped records, ...
    BYE = 6  # the agent is stopping (last stats inside)


class FrameError(ValueError):
    """The byte stream is not a valid frame sequence (corrupt, oversized, wrong version)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    type: FrameType
    payload: bytes | bytearray | memoryview

    def json(self) -> dict[str, Any]:
        """The JSON object of a control frame."""
        try:
            obj = json.loads(bytes(self.payload))
        except ValueError as e:
            raise FrameError(f"{self.type.name} frame: bad JSON ({e})") from None
        if not isinstance(obj, dict):
            raise FrameError(f"{self.type.name} frame: JSON payload is not an object")
        return obj


@dataclasses.dataclass(frozen=True, slots=True)
class BufferFrame:
    """A BUFFER frame's content (mirror of ``cupti_raw.RawBuffer`` without importing it)."""

    data: bytes | memoryview
    context: int
    stream_id: int
    dropped_records: int
    names: dict[int, str]
    seq: int
    sent_ns: int = 0  # time.time_ns() when the agent queued it (0: not given)


def encode(ftype: FrameType, payload: bytes, *, crc: bool = True) -> bytes:
    """One frame as bytes (header + payload)."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise FrameError(f"payload of {len(payload)} bytes is over {MAX_PAYLOAD_BYTES}")
    c = zlib.crc32(payload) if crc else 0
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, int(ftype), len(payload), c) + payload


def encode_json(ftype: FrameType, obj: dict[str, Any]) -> bytes:
    return encode(ftype, json.dumps(obj, separators=(",", ":")).encode())


def encode_buffer_parts(data: bytes, *, seq: int, context: int, stream_id: int,
                        dropped_records: int, names: dict[int, str],
                        sent_ns: int = 0) -> list[bytes]:
    """A BUFFER frame as parts to send back to back (the data is not copied again)."""
    if names:
        meta = json.dumps({"seq": seq, "context": context, "stream_id": stream_id,
                           "dropped_records": dropped_records, "sent_ns": sent_ns,
                           "names": {str(k): v for k, v in names.items()}},
                          separators=(",", ":")).encode()
    else:  # the steady state (no new names): skip the JSON encoder
        meta = (f'{{"seq":{int(seq)},"context":{int(context)},"stream_id":{int(stream_id)},'
                f'"dropped_records":{int(dropped_records)},"sent_ns":{int(sent_ns)},'
                '"names":{}}').encode()
    n = _META_LEN.size + len(meta) + len(data)
    if n > MAX_PAYLOAD_BYTES:
        raise FrameError(f"buffer frame of {n} bytes is over {MAX_PAYLOAD_BYTES}")
    head = HEADER.pack(MAGIC, PROTOCOL_VERSION, int(FrameType.BUFFER), n, 0)
    return [head + _META_LEN.pack(len(meta)) + meta, data]


def decode_buffer(payload: bytes | bytearray | memoryview) -> BufferFrame:
    mv = memoryview(payload)
    if len(mv) < _META_LEN.size:
        raise FrameError("BUFFER frame shorter than its meta length")
    (meta_len,) = _META_LEN.unpack_from(mv, 0)
    end = _META_LEN.size + meta_len
    if end > len(mv):
        raise FrameError("BUFFER frame: meta length past the frame end")
    try:
        meta = json.loads(bytes(mv[_META_LEN.size:end]))
        names = {int(k): str(v) for k, v in meta.get("names", {}).items()}
        return BufferFrame(mv[end:], int(meta.get("context", 0)),
                           int(meta.get("stream_id", 0)), int(meta.get("dropped_records", 0)),
                           names, int(meta["seq"]), int(meta.get("sent_ns", 0)))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise FrameError(f"BUFFER frame: bad meta ({e})") from None


class FrameDecoder:
    """Incremental decoder: :meth:`feed` any bytes (or :meth:`recv_from` a socket), get back
    the complete frames.

    A state machine over one header buffer and one payload buffer allocated at the frame's
    announced size: every byte is copied once (:meth:`recv_from` reads straight into the
    payload buffer).  Raises :class:`FrameError` as soon as a header is invalid, so it never
    waits for a payload it would reject.
    """

    def __init__(self, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> None:
        self.max_payload_bytes = max_payload_bytes
        self._head = bytearray(HEADER_BYTES)
        self._head_n = 0
        self._payload: bytearray | None = None
        self._pay_n = 0
        self._type = FrameType.HELLO
        self._crc = 0
        self.frames = 0
        self.bytes = 0

    @property
    def pending_bytes(self) -> int:
        return self._head_n + self._pay_n

    def _start_payload(self) -> None:
        magic, version, ftype, length, crc = HEADER.unpack(self._head)
        if magic != MAGIC:
            raise FrameError(f"bad frame magic {bytes(magic)!r} at stream byte "
                             f"{self.bytes - HEADER_BYTES}")
        if version != PROTOCOL_VERSION:
            raise FrameError(f"protocol version {version}, this ppwtop speaks "
                             f"{PROTOCOL_VERSION}")
        if length > self.max_payload_bytes:
            raise FrameError(f"frame of {length} bytes is over the "
                             f"{self.max_payload_bytes}-byte limit")
        try:
            self._type = FrameType(ftype)
        except ValueError:
            raise FrameError(f"unknown frame type {ftype}") from None
        self._crc = crc
        self._payload = bytearray(length)
        self._pay_n = 0

    def _finish(self, out: list[Frame]) -> None:
        payload = self._payload
        assert payload is not None
        if self._crc and zlib.crc32(payload) != self._crc:
            raise FrameError(f"{self._type.name} frame: CRC mismatch")
        out.append(Frame(self._type, payload))
        self.frames += 1
        self._payload = None
        self._head_n = self._pay_n = 0

    def feed(self, data: bytes | memoryview) -> list[Frame]:
        mv = memoryview(data).cast("B")
        self.bytes += len(mv)
        out: list[Frame] = []
        while True:
            if self._payload is None:
                k = min(HEADER_BYTES - self._head_n, len(mv))
                self._head[self._head_n:self._head_n + k] = mv[:k]
                self._head_n += k
                mv = mv[k:]
                if self._head_n < HEADER_BYTES:
                    return out
                self._start_payload()
            payload = self._payload
            assert payload is not None
            k = min(len(payload) - self._pay_n, len(mv))
            payload[self._pay_n:self._pay_n + k] = mv[:k]
            self._pay_n += k
            mv = mv[k:]
            if self._pay_n < len(payload):
                return out
            self._finish(out)
            if not len(mv):
                return out

    def recv_from(self, sock: socket.socket, max_bytes: int = 1 << 20) -> tuple[list[Frame], bool]:
        """One ``recv`` into the frame being assembled: (frames completed, peer closed).

        BlockingIOError propagates (nothing to read on a non-blocking socket).
        """
        out: list[Frame] = []
        if self._payload is None:
            mv = memoryview(self._head)[self._head_n:]
            k = sock.recv_into(mv, len(mv))
            if k == 0:
                return out, True
            self.bytes += k
            self._head_n += k
            if self._head_n < HEADER_BYTES:
                return out, False
            self._start_payload()
        payload = self._payload
        assert payload is not None
        if self._pay_n < len(payload):
            mv = memoryview(payload)[self._pay_n:]
            k = sock.recv_into(mv, min(len(mv), max_bytes))
            if k == 0:
                return out, True
            self.bytes += k
            self._pay_n += k
        if self._pay_n == len(payload):
            self._finish(out)
        return out, False
