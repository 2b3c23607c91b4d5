"""Recordings whose crcs are valid but whose content no ppwtop writes (a buggy writer, a
hand-made file): the reader keeps the prefix before the bad chunk with a note, never
allocates what the chunk cannot hold, and the CLI says one line naming the file."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any, ClassVar

import orjson

from ppwtop.importers import import_notes
from ppwtop.recording import format as fmt
from ppwtop.recording import read_recording

HEADER: dict[str, Any] = {"format": fmt.FORMAT_NAME, "ppwtop_version": "0.1.0",
                          "created_ns": 1, "meta": {"pid": 1}, "devices": []}


def _file(path: Path, chunks: list[tuple[int, bytes]], header: dict[str, Any] = HEADER) -> Path:
    raw = fmt.encode_file_header(header)
    raw += b"".join(bytes(p) for p in fmt.json_chunk_parts(
        fmt.CHUNK_STRINGS, {"first_id": 0, "names": ["k"]}))  # a good chunk first
    for kind, body in chunks:
        padded = body + b" " * fmt.pad_len(len(body))
        raw += fmt.chunk_prefix(kind, len(padded), zlib.crc32(padded)) + padded
    path.write_bytes(raw)
    return path


def _batch_directory(d: dict[str, Any]) -> bytes:
    body = orjson.dumps(d)
    b = struct.pack("<I", len(body)) + body
    return b + b"\0" * fmt.pad_len(len(b))


def test_a_row_count_the_chunk_cannot_hold_is_corrupt_not_allocated(tmp_path: Path) -> None:
    p = _file(tmp_path / "r.ppw", [(fmt.CHUNK_BATCH, _batch_directory(
        {"batch": "kernels", "rows": 10**15, "columns": []}))])
    tr = read_recording(p)  # before: MemoryError (8 PB of default-filled columns)
    assert len(tr.kernels) == 0 and tr.strings.names() == ["k"]
    assert tr.meta["complete"] is False
    assert any("rows cannot fit" in n for n in tr.meta["notes"])


def test_a_meta_update_that_is_no_object_is_corrupt(tmp_path: Path) -> None:
    p = _file(tmp_path / "r.ppw", [(fmt.CHUNK_META, orjson.dumps({"meta": [[1, 2]]}))])
    tr = read_recording(p)  # before: dict.update took the pairs, meta[1] = 2
    assert list(tr.meta.items())[:1] == [("pid", 1)]  # not also 1: 2 from the pairs
    assert all(isinstance(k, str) for k in tr.meta)
    assert any("meta update is a list" in n for n in tr.meta["notes"])


def test_late_attach_missing_of_the_wrong_type_is_said_not_crashed_on(tmp_path: Path) -> None:
    hdr = {**HEADER, "meta": {"late_attach": True, "late_attach_missing": 5}}
    p = _file(tmp_path / "r.ppw", [], header=hdr)
    notes = import_notes(p, read_recording(p))  # before: TypeError
    assert any("late attach: missing 5" in n for n in notes)
    r = subprocess.run([sys.executable, "-m", "ppwtop", "attribute", "--trace", str(p), "-o",
                        str(tmp_path / "s.json")], capture_output=True, text=True,
                       check=False, timeout=120)
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert f"{p}: recorded by a late attach: missing 5" in r.stderr



def test_meta_notes_that_are_no_list_of_text_are_dropped_with_a_note(tmp_path: Path) -> None:
    end = (fmt.CHUNK_END, orjson.dumps({"rows": 0}))  # a clean close: the reader adds no note
    p = _file(tmp_path / "r.ppw", [(fmt.CHUNK_META, orjson.dumps({"meta": {"notes": 5}})), end])
    tr = read_recording(p)
    assert tr.meta["complete"] is True
    notes = import_notes(p, tr)  # before: TypeError, 'int' object is not iterable
    assert notes == [f"{p}: recording: meta notes is a int, not a list; ignored"]
    q = _file(tmp_path / "q.ppw", [(fmt.CHUNK_META, orjson.dumps(
        {"meta": {"notes": ["kept", 1, None]}})), end])
    assert read_recording(q).meta["notes"] == ["kept", "recording: 2 meta note(s) not text; "
                                               "ignored"]
    r = subprocess.run([sys.executable, "-m", "ppwtop", "attribute", "--trace", str(p), "-o",
                        str(tmp_path / "s.json")], capture_output=True, text=True,
                       check=False, timeout=120)
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert f"{p}: recording: meta notes is a int" in r.stderr


def _one_column_batch(name: str, values: Any) -> bytes:
    import numpy as np

    arr = np.asarray(values)
    d = _batch_directory({"batch": "kernels", "rows": len(arr),
                          "columns": [[name, arr.dtype.str, 256]]})
    return d + b"\0" * (256 - len(d)) + arr.tobytes()


def test_a_column_of_another_dtype_is_a_malformed_chunk(tmp_path: Path) -> None:
    import numpy as np

    bad = _one_column_batch("start_ns", np.array([np.nan, 1e300], dtype="<f8"))
    p = _file(tmp_path / "r.ppw", [(fmt.CHUNK_BATCH, bad)])
    tr = read_recording(p)  # before: NaN cast to int64 silently (RuntimeWarning), -5e11 J
    assert len(tr.kernels) == 0
    assert any("kernels column start_ns is <f8, not <i8" in n for n in tr.meta["notes"])
    ok = _one_column_batch("start_ns", np.array([5, 7], dtype="<i4"))  # a safe widening
    q = _file(tmp_path / "q.ppw", [(fmt.CHUNK_BATCH, ok)])
    assert read_recording(q).kernels.start_ns.tolist() == [5, 7]


def test_a_batch_without_its_time_column_is_corrupt_not_read_as_time_zero(
        tmp_path: Path) -> None:
    """Its rows read as stamped at 0 (the window from 1970 on: 3.9e11 J, an audit)."""
    import numpy as np

    from attribution.model import KernelBatch

    class NoStart:  # a kernels batch as a writer that forgot start_ns would write it
        DTYPES: ClassVar[dict[str, Any]] = {k: v for k, v in KernelBatch.DTYPES.items()
                                            if k != "start_ns"}

        def __len__(self) -> int:
            return 3

        def __getattr__(self, name: str) -> Any:
            return np.full(3, 5, self.DTYPES[name])

    parts = fmt.batch_chunk_parts("kernels", NoStart())  # type: ignore[arg-type]
    p = _file(tmp_path / "r.ppw", [(fmt.CHUNK_BATCH, b"".join(bytes(x) for x in parts[1:]))])
    tr = read_recording(p)
    assert len(tr.kernels) == 0
    assert any("kernels batch without its start_ns column" in n for n in tr.meta["notes"])
