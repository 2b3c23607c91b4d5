"""The .ppw byte layout: constants, the file header, chunk prefixes and batch payloads.

Owns the encoding and decoding of every byte of a recording; no file handling (that is
:mod:`ppwtop.recording.writer` and :mod:`ppwtop.recording.reader`).  docs/recording.md is
the human description of the same layout.

File::

    magic b"PPWREC" | u16 major | u16 minor | u32 header_len | u32 header_crc32
    | orjson header (header_len bytes) | zero pad to a multiple of 8
    then chunks, each 8-aligned:
    u32 kind | u32 payload_len | u32 payload_crc32 | u32 prefix_crc32 (of the first 12 bytes)
    | payload (payload_len bytes, a multiple of 8)

All integers little-endian.  A batch payload is ``u32 dir_len | orjson directory | pad to 8 |
columns``, each column at its directory offset (8-aligned), ``rows * itemsize`` bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson

from attribution.columns import Columns

MAGIC: Final = b"PPWREC"
VERSION_MAJOR: Final = 1
VERSION_MINOR: Final = 0
FORMAT_NAME: Final = "ppwtop.recording"

FILE_PREFIX = struct.Struct("<6sHHII")  # magic, major, minor, header_len, header_crc
CHUNK_PREFIX = struct.Struct("<IIII")  # kind, payload_len, payload_crc, prefix_crc
ALIGN: Final = 8

CHUNK_BATCH: Final = 1
CHUNK_STRINGS: Final = 2
CHUNK_META: Final = 3
CHUNK_END: Final = 15

MAX_PAYLOAD_BYTES: Final = 0xFFFF_FFF0
"""Largest payload a u32 length can describe (padded to 8)."""


_JSON_OPTS: Final = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def pad_len(n: int) -> int:
    """Bytes of zero padding that bring ``n`` to a multiple of :data:`ALIGN`."""
    return (-n) % ALIGN


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=_JSON_OPTS)


def encode_file_header(header: Mapping[str, Any]) -> bytes:
    """The file's first bytes: prefix, orjson header and padding (length a multiple of 8)."""
    body = dumps(header)
    prefix = FILE_PREFIX.pack(MAGIC, VERSION_MAJOR, VERSION_MINOR, len(body), zlib.crc32(body))
    raw = prefix + body
    return raw + b"\x00" * pad_len(len(raw))


def chunk_prefix(kind: int, payload_len: int, payload_crc: int) -> bytes:
    head = struct.pack("<III", kind, payload_len, payload_crc)
    return head + struct.pack("<I", zlib.crc32(head))


def json_chunk_parts(kind: int, obj: Any) -> list[bytes | memoryview]:
    """A chunk whose payload is one orjson document (strings, meta, end)."""
    body = dumps(obj)
    body += b" " * pad_len(len(body))  # JSON tolerates trailing whitespace
    return [chunk_prefix(kind, len(body), zlib.crc32(body)), body]


def batch_chunk_parts(kind: str, batch: Columns) -> list[bytes | memoryview]:
    """A batch chunk as a list of buffers to write in order (columns are not copied)."""
    rows = len(batch)
    cols: list[tuple[str, npt.NDArray[Any]]] = []
    for name, dtype in batch.DTYPES.items():
        col = np.ascontiguousarray(getattr(batch, name), dtype=dtype.newbyteorder("<"))
        cols.append((name, col))
    # The directory's length depends on the offsets it lists; iterate to a fixed point.
    offset_base = 0
    while True:
        directory, offsets, end = _directory(kind, rows, cols, offset_base)
        head_len = 4 + len(directory)
        start = head_len + pad_len(head_len)
        if start == offset_base:
            break
        offset_base = start
    parts: list[bytes | memoryview] = [struct.pack("<I", len(directory)), directory,
                                       b"\x00" * pad_len(head_len)]
    pos = offset_base
    for (_, col), off in zip(cols, offsets, strict=True):
        if off > pos:
            parts.append(b"\x00" * (off - pos))
        mv = col.view(np.uint8).data
        parts.append(mv)
        pos = off + mv.nbytes
    parts.append(b"\x00" * (end - pos))
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    if end > MAX_PAYLOAD_BYTES:
        raise ValueError(f"batch chunk of {end} bytes exceeds the u32 payload limit")
    return [chunk_prefix(CHUNK_BATCH, end, crc), *parts]


def _directory(kind: str, rows: int, cols: Sequence[tuple[str, npt.NDArray[Any]]],
               base: int) -> tuple[bytes, list[int], int]:
    offsets: list[int] = []
    pos = base
    entries: list[list[Any]] = []
    for name, col in cols:
        pos += pad_len(pos)
        offsets.append(pos)
        entries.append([name, col.dtype.str, pos])
        pos += col.nbytes
    end = pos + pad_len(pos)
    directory = dumps({"batch": kind, "rows": rows, "columns": entries})
    return directory, offsets, end


def decode_batch(payload: memoryview) -> tuple[str, int, dict[str, npt.NDArray[Any]]]:
    """(kind, rows, column views) of a batch payload; views share the payload's memory.

    Raises ValueError on a malformed payload.
    """
    if len(payload) < 4:
        raise ValueError("batch payload shorter than its directory length")
    (dir_len,) = struct.unpack_from("<I", payload, 0)
    if 4 + dir_len > len(payload):
        raise ValueError("batch directory overruns its chunk")
    try:
        d = orjson.loads(payload[4:4 + dir_len])
        kind = str(d["batch"])
        rows = int(d["rows"])
        entries = d["columns"]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"bad batch directory: {e}") from None
    if rows < 0:
        raise ValueError("negative row count")
    if rows > len(payload):  # every column has >= 1 byte a row: more rows cannot be in it
        raise ValueError(f"{rows} rows cannot fit in a {len(payload)}-byte chunk")
    if not isinstance(entries, list):
        raise ValueError("bad batch directory: columns is not a list")
    cols: dict[str, npt.NDArray[Any]] = {}
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 3:
            raise ValueError(f"bad batch directory entry {str(entry)[:60]} (expected "
                             "[name, dtype, offset])")
        name, dtype_str, off = str(entry[0]), str(entry[1]), int(entry[2])
        dtype = np.dtype(dtype_str)
        if dtype.kind not in "biuf" or dtype.hasobject:
            raise ValueError(f"column {name}: unsupported dtype {dtype_str}")
        nbytes = rows * dtype.itemsize
        if off < 0 or off + nbytes > len(payload):
            raise ValueError(f"column {name} overruns its chunk")
        arr = np.frombuffer(payload, dtype=dtype, count=rows, offset=off)
        if not dtype.isnative:
            arr = arr.astype(dtype.newbyteorder("="))
        cols[name] = arr
    return kind, rows, cols
