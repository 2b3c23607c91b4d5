"""The .ppw recording format: ppwtop's own append-only, chunked, crash-safe trace file.

Owns the public API; the byte layout is in :mod:`.format` (described in docs/recording.md),
writing in :mod:`.writer`, reading in :mod:`.reader`.
"""

from __future__ import annotations

from attribution.model import BATCH_TYPES
from ppwtop.recording.format import MAGIC, VERSION_MAJOR, VERSION_MINOR
from ppwtop.recording.reader import RecordingReader, iter_chunks, read_recording
from ppwtop.recording.writer import (
    RecordingError,
    RecordingFull,
    RecordingWriter,
    write_recording,
)

__all__ = [
    "BATCH_TYPES",
    "MAGIC",
    "VERSION_MAJOR",
    "VERSION_MINOR",
    "RecordingError",
    "RecordingFull",
    "RecordingReader",
    "RecordingWriter",
    "iter_chunks",
    "read_recording",
    "write_recording",
]
