"""Writing .ppw recordings: an append-only, chunk-at-a-time writer and a whole-trace helper.

Owns the file side of recording: every chunk goes to the OS with ``os.write`` as soon as it
is appended (no user-space buffer), so a crash or Ctrl-C loses at most the chunk being
written; ``fsync=True`` also makes each chunk durable against power loss.  A full disk raises
:class:`RecordingFull` with everything already written left in place.  The file never shrinks
while it is written (a reader may have it mapped: :meth:`RecordingWriter._write_parts`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from attribution.columns import Columns
from attribution.model import BATCH_TYPES, DeviceInfo, StringTable, Trace
from ppwtop import __version__
from ppwtop.errors import PpwtopError
from ppwtop.recording import format as fmt

DEFAULT_MAX_CHUNK_BYTES = 64 << 20
"""Batches larger than this are split into several chunks (bounds what a crash can lose)."""

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class RecordingError(PpwtopError):
    """A recording could not be written (names the file and what went wrong)."""

    def __init__(self, path: str | Path, what: str) -> None:
        self.path = str(path)
        self.what = what
        super().__init__(f"{self.path}: {what}")


class RecordingFull(RecordingError):
    """The disk (or quota) filled up while recording.

    Everything written before the failing chunk stays in the file and reads back; the partial
    chunk is cut off again when the OS allows it.  The writer refuses further writes.
    """


class RecordingWriter:
    """Appends chunks to a new .ppw file.

    ``meta`` is JSON-able run metadata; conventional keys are ``command`` (list of str),
    ``pid``, ``sensor_field`` (a :class:`PowerField` label) — anything else is kept as is.
    With ``strings`` given, every :meth:`write_batch` first writes the names that table gained
    since the last chunk, so ``name_id`` columns always resolve in any prefix of the file.
    """

    def __init__(self, path: str | Path, meta: Mapping[str, Any] | None = None,
                 devices: Sequence[DeviceInfo] = (), *, strings: StringTable | None = None,
                 fsync: bool = False, max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._max_chunk_bytes = max(1, min(max_chunk_bytes, fmt.MAX_PAYLOAD_BYTES // 2))
        self._strings = strings
        self._n_strings = 0
        self._chunks = 0
        self._rows: dict[str, int] = {}
        self._closed = False
        self._failed = False
        self._ended = False
        self._good_end = 0
        self._tail_end = 0  # the furthest an interrupted chunk reached (see _write_parts)
        header = {
            "format": fmt.FORMAT_NAME,
            "ppwtop_version": __version__,
            "created_ns": time.time_ns(),
            "meta": dict(meta or {}),
            "devices": [dataclasses.asdict(d) for d in devices],
        }
        try:
            raw = fmt.encode_file_header(header)
        except TypeError as e:
            raise ValueError(f"recording meta is not JSON-able: {e}") from None
        self._fd, created = self._create()
        try:
            self._write_parts([raw], chunk=False)
        except BaseException:
            os.close(self._fd)
            self._closed = True
            if created:  # no header, no recording: leave no empty file behind
                with contextlib.suppress(OSError):
                    self.path.unlink()
            raise

    def _create(self) -> tuple[int, bool]:
        """The file opened for writing, empty; and whether this call created it (a file
        that was there is never removed on a failed header, only replaced).

        A regular file already at the path is unlinked and a new one created in its place,
        not truncated in place: a reader may have the old one mapped (``replay`` of the run
        before), and truncation under its mapping kills it with SIGBUS; the new file takes the
        old one's permissions.  A symlink to a regular file stays a symlink: the file it leads
        to is replaced so.  Anything else there (``/dev/null``, a FIFO) is opened and truncated
        as asked."""
        flags = os.O_WRONLY | os.O_CREAT
        try:
            try:
                return os.open(self.path, flags | os.O_EXCL, 0o644), True
            except FileExistsError:
                pass
            try:
                target = os.path.realpath(self.path)  # the path itself unless a symlink
                old = os.stat(target)
                if stat.S_ISREG(old.st_mode):
                    os.unlink(target)
                    fd = os.open(target, flags | os.O_EXCL, 0o600)
                    with contextlib.suppress(OSError):  # the old file's permissions
                        os.fchmod(fd, stat.S_IMODE(old.st_mode))
                    return fd, False
            except OSError:  # gone, raced, or a directory we may not unlink in: truncate
                pass
            return os.open(self.path, flags | os.O_TRUNC, 0o644), False
        except OSError as e:
            raise RecordingError(self.path, f"cannot create recording: {e.strerror or e}") \
                from None

    # -- public API ---------------------------------------------------------------------------

    @property
    def bytes_written(self) -> int:
        """Bytes of complete header and chunks in the file."""
        return self._good_end

    @property
    def chunks_written(self) -> int:
        return self._chunks

    @property
    def ended(self) -> bool:
        """The end chunk is written: the file reads back as complete."""
        return self._ended

    def write_strings(self, names: StringTable | Sequence[str]) -> int:
        """Append names to the recording's string table; returns how many were written.

        A :class:`StringTable` writes only the names past those already written (it must be
        the same growing table each time); a plain sequence is appended as new names.
        """
        new = names.names()[self._n_strings:] if isinstance(names, StringTable) else list(names)
        if not new:
            return 0
        self._write_parts(fmt.json_chunk_parts(
            fmt.CHUNK_STRINGS, {"first_id": self._n_strings, "names": new}))
        self._n_strings += len(new)
        return len(new)

    def write_batch(self, kind: str, batch: Columns) -> None:
        """Append one batch (``kind`` is a :class:`Trace` field name such as ``"kernels"``)."""
        cls = BATCH_TYPES.get(kind)
        if cls is None:
            raise ValueError(f"unknown batch kind {kind!r} (one of {sorted(BATCH_TYPES)})")
        if not isinstance(batch, cls):
            raise TypeError(f"{kind} wants a {cls.__name__}, got {type(batch).__name__}")
        if self._strings is not None:
            self.write_strings(self._strings)
        n = len(batch)
        if n == 0:
            return
        row_bytes = max(1, batch.nbytes() // n)
        step = max(1, self._max_chunk_bytes // row_bytes)
        for lo in range(0, n, step):
            part = batch if step >= n else batch.take(slice(lo, lo + step))
            self._write_parts(fmt.batch_chunk_parts(kind, part))
        self._rows[kind] = self._rows.get(kind, 0) + n

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        """Append a metadata update; the reader merges it over the header's ``meta``."""
        self._write_parts(fmt.json_chunk_parts(fmt.CHUNK_META, {"meta": dict(meta)}))

    def append_trace_delta(self, trace: Trace) -> None:
        """Write the names ``trace.strings`` gained since the last call and all its batches.

        For a recorder that keeps one growing :class:`StringTable` and hands over each new
        slice of records as a :class:`Trace` sharing that table.
        """
        self.write_strings(trace.strings)
        for kind in Trace.BATCH_FIELDS:
            batch = getattr(trace, kind)
            if len(batch):
                self.write_batch(kind, batch)

    def flush(self, fsync: bool | None = None) -> None:
        """Chunks are already with the OS; ``fsync`` (default: the writer's flag) syncs them."""
        if self._closed or self._failed:
            return
        if self._fsync if fsync is None else fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        """Write the end chunk (marks a clean close) and close the file.  Idempotent."""
        if self._closed:
            return
        try:
            if not self._failed:
                self._write_parts(fmt.json_chunk_parts(fmt.CHUNK_END, {
                    "end_ns": time.time_ns(), "chunks": self._chunks, "rows": self._rows,
                    "strings": self._n_strings}))
                self._ended = True
                self._cut_stale_tail()
                if self._fsync:
                    os.fsync(self._fd)
        finally:
            self._closed = True
            os.close(self._fd)

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, RecordingFull):
            self._failed = True
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _write_parts(self, parts: Sequence[bytes | memoryview], chunk: bool = True) -> None:
        """Write one chunk (or the header) whole, or leave the file a valid prefix plus at
        most a partial chunk after it.

        The file never shrinks while it is being written: another process may have it mapped
        (``replay`` or ``attribute`` on a live recording), and a page cut off under a mapping
        kills that reader with SIGBUS.  A partial chunk left by an interrupt is overwritten
        by the next chunk (and whatever of it outlasts the end chunk cut off at
        :meth:`close`); one left by a failed write stays, and readers drop it as a
        truncated last chunk."""
        if self._closed:
            raise ValueError("recording is closed")
        if self._failed:
            raise RecordingFull(self.path, "disk full: recording stopped earlier, "
                                           f"{self._good_end} bytes kept")
        total = sum(memoryview(p).nbytes for p in parts)
        try:
            for p in parts:
                mv = memoryview(p).cast("B")
                while mv.nbytes:
                    k = os.write(self._fd, mv)
                    mv = mv[k:]
        except OSError as e:
            self._failed = True  # the partial chunk stays: see the docstring
            if e.errno in _FULL_ERRNOS:
                raise RecordingFull(self.path, f"disk full while recording ({e.strerror}): "
                                    f"kept the first {self._good_end} bytes "
                                    f"({self._chunks} chunks)") from None
            raise RecordingError(self.path, f"write failed: {e.strerror or e}") from None
        except BaseException:
            # Interrupted (Ctrl-C): a chunk already whole on disk counts; a partial one is
            # overwritten by the next chunk, so the writer may go on or close cleanly.
            try:
                at = os.lseek(self._fd, 0, os.SEEK_CUR)
                self._tail_end = max(self._tail_end, at)
                if at - self._good_end == total:
                    self._good_end = at
                    self._chunks += int(chunk)
                else:
                    os.lseek(self._fd, self._good_end, os.SEEK_SET)
            except OSError:
                self._failed = True
            raise
        self._good_end = os.lseek(self._fd, 0, os.SEEK_CUR)
        if chunk:
            self._chunks += 1
        if self._fsync:
            os.fsync(self._fd)

    def _cut_stale_tail(self) -> None:
        """After the end chunk: cut off what an interrupted chunk left beyond it.  Safe for a
        reader mapping the file: it stops at the end chunk, or before it at a header it
        cannot read, and both lie inside what stays."""
        if self._ended and self._tail_end > self._good_end:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._good_end)


def write_recording(path: str | Path, trace: Trace, *, chunk_rows: int | None = None,
                    fsync: bool = False) -> None:
    """Write a whole :class:`Trace` as one recording (``chunk_rows`` splits batches)."""
    with RecordingWriter(path, trace.meta, trace.devices, fsync=fsync) as w:
        w.write_strings(trace.strings)
        for kind in Trace.BATCH_FIELDS:
            batch = getattr(trace, kind)
            n = len(batch)
            if chunk_rows is None or chunk_rows >= n:
                if n:
                    w.write_batch(kind, batch)
                continue
            for lo in range(0, n, max(1, chunk_rows)):
                w.write_batch(kind, batch.take(slice(lo, lo + chunk_rows)))
