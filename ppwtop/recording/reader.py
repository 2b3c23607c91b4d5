"""Reading .ppw recordings: a streaming chunk reader over mmap and ``read_recording``.

Owns validation on the way in: the file header (magic, version, crc), every chunk's crc, and
stopping cleanly at the first truncated or corrupt chunk with a note saying where.  Columns are
numpy views into the memory-mapped file (no per-record Python objects); ``read_recording``
concatenates them into one owned array per column.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from attribution.columns import Columns
from attribution.model import BATCH_TYPES, DeviceInfo, StringTable, Trace
from ppwtop.errors import InputError
from ppwtop.fileio import reading
from ppwtop.recording import format as fmt

_DEVICE_FIELDS: dict[str, type] = {
    f.name: int if f.type == "int" else str for f in dataclasses.fields(DeviceInfo)}
"""Each DeviceInfo field's JSON type (every field is an int or a str)."""


def _device(d: Any) -> DeviceInfo | None:
    """A header device entry as a DeviceInfo; None when it is no object or a field has the
    wrong type (a name that is a number would reach the preset lookup as one)."""
    if not isinstance(d, dict) or not isinstance(d.get("index"), int):
        return None
    kw = {k: v for k, v in d.items() if k in _DEVICE_FIELDS}
    if any(type(v) is not _DEVICE_FIELDS[k] for k, v in kw.items()):
        return None
    return DeviceInfo(**kw)


class RecordingReader:
    """One recording opened for reading.

    After construction ``meta``, ``devices``, ``version`` and ``header_complete`` describe the
    header; iterating :meth:`chunks` fills ``strings``, merges metadata updates into ``meta``,
    sets ``complete`` (an end chunk was found) and appends to ``notes`` what was dropped.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.meta: dict[str, Any] = {}
        self.devices: list[DeviceInfo] = []
        self.strings = StringTable()
        self.notes: list[str] = []
        self.complete = False
        self.version: tuple[int, int] = (0, 0)
        self.header: dict[str, Any] = {}
        self.header_complete = False
        self._mm: mmap.mmap | None = None
        self._size = 0
        self._data_start = 0
        self._open()

    # -- header -------------------------------------------------------------------------------

    def _open(self) -> None:
        with reading(self.path) as p, p.open("rb") as f:
            size = f.seek(0, 2)
            if size == 0:
                raise InputError(p, "file is empty")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._size = size
        mm = self._mm
        head = mm[:fmt.FILE_PREFIX.size]
        n_magic = min(len(head), len(fmt.MAGIC))
        if head[:n_magic] != fmt.MAGIC[:n_magic]:
            raise InputError(p, "not a ppwtop recording (bad magic)")
        if len(head) < fmt.FILE_PREFIX.size:
            self._truncated_header()
            return
        _, major, minor, header_len, header_crc = fmt.FILE_PREFIX.unpack(head)
        self.version = (major, minor)
        if major > fmt.VERSION_MAJOR:
            raise InputError(p, f"recording format version {major}.{minor} is newer than this "
                                f"ppwtop reads ({fmt.VERSION_MAJOR}.x): upgrade ppwtop")
        if major < 1:
            raise InputError(p, f"unknown recording format version {major}.{minor}")
        body_end = fmt.FILE_PREFIX.size + header_len
        if body_end > size:
            self._truncated_header()
            return
        body = mm[fmt.FILE_PREFIX.size:body_end]
        if zlib.crc32(body) != header_crc:
            raise InputError(p, "corrupt recording header (crc mismatch)")
        try:
            header = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise InputError(p, "corrupt recording header (not JSON)") from None
        if not isinstance(header, dict) or header.get("format") != fmt.FORMAT_NAME:
            raise InputError(p, "not a ppwtop recording (header names another format)")
        self.header = header
        self.header_complete = True
        meta = header.get("meta")
        self.meta = dict(meta) if isinstance(meta, dict) else {}
        devices = header.get("devices") or []
        if not isinstance(devices, list):
            raise InputError(p, f"corrupt recording header (devices is a "
                                f"{type(devices).__name__}, not a list)")
        for d in devices:
            dev = _device(d)
            if dev is None:
                self.notes.append(f"recording: skipped an unreadable device entry {d!r:.80}")
            else:
                self.devices.append(dev)
        self._data_start = body_end + fmt.pad_len(body_end)

    def _truncated_header(self) -> None:
        self.notes.append(f"recording truncated at byte {self._size} inside its header: "
                          "no metadata and no records")
        self._data_start = self._size

    # -- chunks -------------------------------------------------------------------------------

    def chunks(self) -> Iterator[tuple[str, Any]]:
        """Yield ``(kind, value)`` per chunk in file order until the end or the first bad one.

        ``kind`` is a batch kind (``"kernels"``, ``"power"``, ...; value: the batch, columns
        are read-only views into the file), ``"strings"`` (value: the list of new names, also
        appended to ``self.strings``) or ``"meta"`` (value: the update, also merged into
        ``self.meta``).  The end chunk is not yielded; it sets ``self.complete``.
        """
        mm = self._mm
        assert mm is not None
        buf = memoryview(mm)
        size = self._size
        pos = self._data_start
        skipped_kinds: set[int] = set()
        psize = fmt.CHUNK_PREFIX.size
        while pos < size:
            if size - pos < psize:
                self._truncated(pos)
                return
            kind, length, crc, prefix_crc = fmt.CHUNK_PREFIX.unpack_from(buf, pos)
            if zlib.crc32(buf[pos:pos + 12]) != prefix_crc:
                self._corrupt(pos, "chunk header crc mismatch")
                return
            start = pos + psize
            end = start + length
            if end > size:
                self._truncated(pos)
                return
            payload = buf[start:end]
            if zlib.crc32(payload) != crc:
                self._corrupt(pos, "chunk crc mismatch")
                return
            try:
                if kind == fmt.CHUNK_BATCH:
                    item = self._batch(payload, pos)
                    if item is not None:
                        yield item
                elif kind == fmt.CHUNK_STRINGS:
                    new = self._strings_delta(payload)
                    yield "strings", new
                elif kind == fmt.CHUNK_META:
                    update = orjson.loads(payload)["meta"]
                    if not isinstance(update, dict):
                        raise TypeError(f"meta update is a {type(update).__name__}, "
                                        "not an object")
                    self.meta.update(update)
                    yield "meta", update
                elif kind == fmt.CHUNK_END:
                    self.complete = True
                    if end < size:
                        self.notes.append(f"recording: {size - end} bytes after the end "
                                          "chunk ignored")
                    return
                elif kind not in skipped_kinds:
                    skipped_kinds.add(kind)
                    self.notes.append(f"recording: skipped chunk kind {kind} (written by a "
                                      "newer ppwtop)")
            except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
                self._corrupt(pos, f"malformed chunk ({e})")
                return
            pos = end + fmt.pad_len(end)
        if self.header_complete:
            self.notes.append(f"recording ends at byte {size} without an end chunk: the writer "
                              "did not close it (it may be cut short)")

    def _batch(self, payload: memoryview, pos: int) -> tuple[str, Columns] | None:
        kind, rows, cols = fmt.decode_batch(payload)
        cls = BATCH_TYPES.get(kind)
        if cls is None:
            self.notes.append(f"recording: skipped a batch of unknown kind {kind!r} "
                              f"at byte {pos}")
            return None
        # rows without their start (items) or stamp (samples) would read as at time 0, the
        # window then reaching back to 1970 (3.9e11 J, an audit); a missing end_ns reads as
        # 0 too, but that is an item ending before it starts, which the engine repairs
        missing = [t for t in ("start_ns", "t_ns") if t in cls.DTYPES and t not in cols]
        if missing and rows:
            raise ValueError(f"{kind} batch without its {missing[0]} column")
        for name, want in cls.DTYPES.items():  # a float where an int belongs cast NaN and
            got = cols.get(name)                 # 1e300 to garbage ints (−5e11 J) silently
            if got is not None and not np.can_cast(got.dtype, want, casting="safe"):
                raise ValueError(f"{kind} column {name} is {got.dtype.str}, not "
                                 f"{np.dtype(want).str}")
        batch = cls.from_columns(cols, n=rows)
        if "name_id" in cls.DTYPES and rows:
            ids = batch.columns()["name_id"]
            if int(ids.max()) >= len(self.strings) or int(ids.min()) < -1:
                self.notes.append(f"recording: chunk at byte {pos} names strings not in the "
                                  "table; they read as unknown (-1)")
                fixed = batch.columns()
                fixed["name_id"] = np.where((ids >= 0) & (ids < len(self.strings)), ids, -1)
                batch = cls(**fixed)
        return kind, batch

    def _strings_delta(self, payload: memoryview) -> list[str]:
        d = orjson.loads(payload)
        first = int(d["first_id"])
        names = [str(n) for n in d["names"]]
        if first != len(self.strings):
            raise ValueError(f"string delta starts at id {first}, table has "
                             f"{len(self.strings)}")
        for n in names:
            self.strings.intern(n)
        if len(self.strings) != first + len(names):
            raise ValueError("string delta repeats a name")
        return names

    def _truncated(self, pos: int) -> None:
        self.notes.append(f"recording truncated at byte {self._size}: last chunk (from byte "
                          f"{pos}) dropped")

    def _corrupt(self, pos: int, what: str) -> None:
        self.notes.append(f"recording corrupt at byte {pos}: {what}; reading stopped, "
                          f"{self._size - pos} bytes ignored")

    def close(self) -> None:
        """Release the mapping (left to the GC while batch views into it are alive)."""
        if self._mm is not None:
            with contextlib.suppress(BufferError):
                self._mm.close()
            self._mm = None

    def trace_meta(self) -> dict[str, Any]:
        """``meta`` plus what the reader knows: source, format version, complete, notes."""
        meta = dict(self.meta)
        meta["format"] = "ppw"
        meta["source"] = str(self.path)
        meta["recording_version"] = f"{self.version[0]}.{self.version[1]}"
        recorded_with = self.header.get("ppwtop_version")
        if recorded_with is not None:
            meta.setdefault("ppwtop_version", recorded_with)
        if "created_ns" in self.header:
            meta["recording_created_ns"] = self.header["created_ns"]
        meta["complete"] = self.complete
        if not self.header_complete:  # cut inside its header: nothing of the run is known
            meta["header_complete"] = False
        notes = list(self.notes)
        if "notes" in meta:  # the writer's notes: a list of str; anything else is dropped
            old = meta.pop("notes")
            if not isinstance(old, list):
                notes.insert(0, f"recording: meta notes is a {type(old).__name__}, not a "
                                "list; ignored")
                old = []
            kept = [n for n in old if isinstance(n, str)]
            if len(kept) < len(old):
                notes.insert(0, f"recording: {len(old) - len(kept)} meta note(s) not text; "
                                "ignored")
            notes = [*kept, *notes]
        if notes:
            meta["notes"] = notes
        return meta


def iter_chunks(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Stream a recording's chunks as ``(kind, value)`` (see :meth:`RecordingReader.chunks`)."""
    yield from RecordingReader(path).chunks()


def read_recording(path: str | Path) -> Trace:
    """The whole recording as one :class:`Trace` (one owned array per column).

    A truncated or corrupt tail is dropped with a note in ``meta["notes"]``;
    ``meta["complete"]`` says whether the writer closed the file cleanly.
    """
    reader = RecordingReader(path)
    parts: dict[str, list[Columns]] = {k: [] for k in Trace.BATCH_FIELDS}
    for kind, value in reader.chunks():
        if kind in parts:
            parts[kind].append(value)
    trace = Trace(strings=reader.strings, devices=reader.devices, meta=reader.trace_meta())
    for kind in Trace.BATCH_FIELDS:
        items = parts.pop(kind)
        cls = BATCH_TYPES[kind]
        if items:
            # np.concatenate copies even a single part: the trace owns its memory, not the map
            setattr(trace, kind, cls(**{c: np.concatenate([getattr(b, c) for b in items])
                                        for c in cls.DTYPES}))
        del items
    reader.close()
    return trace
