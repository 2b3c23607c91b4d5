"""The .ppw recording: round trips, crash safety (truncation, corruption, disk full, Ctrl-C),
bad input, and that reading does not build per-record Python objects."""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attribution.columns import Columns
from attribution.model import (
    UNKNOWN_NAME,
    DeviceInfo,
    KernelBatch,
    PowerBatch,
    StringTable,
    Trace,
)
from ppwtop.errors import InputError, PpwtopError
from ppwtop.importers import load_trace, sniff
from ppwtop.recording import (
    BATCH_TYPES,
    MAGIC,
    RecordingFull,
    RecordingReader,
    RecordingWriter,
    iter_chunks,
    read_recording,
    write_recording,
)
from ppwtop.recording import format as fmt

DEVICES = [DeviceInfo(0, "NVIDIA H200", "GPU-abc", 150_000_000_000, 132, "9.0"),
           DeviceInfo(1, "NVIDIA H200", "GPU-def")]
META = {"command": ["python", "train.py", "--lr", "3e-4"], "pid": 4242,
        "sensor_field": "instant", "custom": {"nested": [1, 2.5, None]}}


C = TypeVar("C", bound=Columns)


def random_batch(cls: type[C], rows: int, rng: np.random.Generator, n_names: int) -> C:
    """Random values over each column's whole range (NaN included for floats)."""
    cols: dict[str, Any] = {}
    for name, dtype in cls.DTYPES.items():
        if name == "name_id":
            cols[name] = rng.integers(-1, max(n_names, 1), rows) if n_names else -np.ones(rows)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            cols[name] = rng.integers(info.min, info.max, rows, dtype=dtype, endpoint=True)
        elif dtype.kind == "f":
            v = rng.standard_normal(rows).astype(dtype) * 1e6
            v[rng.random(rows) < 0.1] = np.nan
            cols[name] = v
        else:
            cols[name] = rng.random(rows) < 0.5
    return cls.from_columns(cols, n=rows)


def assert_batches_equal(a: Columns, b: Columns) -> None:
    assert type(a) is type(b)
    assert len(a) == len(b)
    for name in a.DTYPES:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name


# ------------------------------------------------------------------------------------------
# Round trips
# ------------------------------------------------------------------------------------------


def test_round_trip_every_batch_type_with_names_added_between_chunks(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    path = tmp_path / "run.ppw"
    table = StringTable()
    written: dict[str, list[Columns]] = {k: [] for k in BATCH_TYPES}
    with RecordingWriter(path, META, DEVICES, strings=table) as w:
        for round_ in range(3):
            for i in range(4):  # names appear while recording, after earlier chunks
                table.intern(f"kernel_{round_}_{i}")
            for kind, cls in BATCH_TYPES.items():
                b = random_batch(cls, int(rng.integers(1, 40)), rng, len(table))
                w.write_batch(kind, b)
                written[kind].append(b)
    t = read_recording(path)
    assert t.strings.names() == table.names()
    assert len(t.strings) == 12
    for kind, cls in BATCH_TYPES.items():
        assert_batches_equal(getattr(t, kind), cls.concat(written[kind]))
    assert t.devices == DEVICES
    for k, v in META.items():
        assert t.meta[k] == v
    assert t.meta["complete"] is True
    assert "notes" not in t.meta
    assert t.meta["format"] == "ppw"


def test_stream_reader_yields_chunks_in_order_as_views(tmp_path: Path) -> None:
    path = tmp_path / "s.ppw"
    table = StringTable(["a"])
    with RecordingWriter(path, {}, [], strings=table) as w:
        w.write_batch("kernels", KernelBatch.from_columns({"start_ns": [1], "name_id": [0]}))
        table.intern("b")
        w.write_meta({"late": True})
        w.write_batch("power", PowerBatch.from_columns({"t_ns": [5], "power_mw": [70_000]}))
        w.write_batch("kernels", KernelBatch.from_columns({"start_ns": [2], "name_id": [1]}))
    kinds = [k for k, _ in iter_chunks(path)]
    # new names go out just before the next batch, whichever kind it is
    assert kinds == ["strings", "kernels", "meta", "strings", "power", "kernels"]
    r = RecordingReader(path)
    batches = [v for k, v in r.chunks() if k == "kernels"]
    assert not batches[0].start_ns.flags.writeable  # a view into the mapping, not a copy
    assert r.meta["late"] is True and r.complete
    t = read_recording(path)
    assert t.kernels.start_ns.flags.writeable and t.kernels.start_ns.flags.owndata
    assert [t.name(int(i)) for i in t.kernels.name_id] == ["a", "b"]


def test_append_trace_delta_writes_only_new_names(tmp_path: Path) -> None:
    path = tmp_path / "d.ppw"
    table = StringTable(["gemm"])
    with RecordingWriter(path, {"pid": 1}, DEVICES, fsync=True) as w:
        w.append_trace_delta(Trace(strings=table, kernels=KernelBatch.from_columns(
            {"start_ns": [1], "name_id": [0]})))
        table.intern("relu")
        w.append_trace_delta(Trace(strings=table, kernels=KernelBatch.from_columns(
            {"start_ns": [2, 3], "name_id": [1, 0]}), power=PowerBatch.from_columns(
            {"t_ns": [9], "power_mw": [123_456]})))
        w.flush()
    deltas = [v for k, v in iter_chunks(path) if k == "strings"]
    assert deltas == [["gemm"], ["relu"]]
    t = read_recording(path)
    assert [t.name(int(i)) for i in t.kernels.name_id] == ["gemm", "relu", "gemm"]
    assert t.power.power_mw.tolist() == [123_456]


def test_trace_helpers_and_importer_dispatch(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    trace = Trace(strings=StringTable(["x", "y"]), devices=DEVICES[:1], meta=dict(META))
    trace.kernels = random_batch(KernelBatch, 100, rng, 2)
    trace.power = random_batch(PowerBatch, 50, rng, 0)
    path = tmp_path / "t.ppw"
    write_recording(path, trace, chunk_rows=7)
    assert path.read_bytes()[:6] == MAGIC
    assert sniff(path) == "ppw"
    back = load_trace(path)
    assert_batches_equal(back.kernels, trace.kernels)
    assert_batches_equal(back.power, trace.power)
    assert len(back.copies) == 0
    # 100/7 -> 15 kernel chunks, 50/7 -> 8 power chunks, 1 strings chunk
    assert sum(1 for _ in iter_chunks(path)) == 15 + 8 + 1


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_random_batches_in_random_chunks_round_trip(tmp_path: Path,
                                                             data: st.DataObject) -> None:
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kinds = data.draw(st.lists(st.sampled_from(sorted(BATCH_TYPES)), min_size=1, max_size=12))
    table = StringTable()
    expected: dict[str, list[Columns]] = {k: [] for k in BATCH_TYPES}
    path = tmp_path / f"p{seed}.ppw"
    with RecordingWriter(path, {"seed": seed}, [], strings=table) as w:
        for kind in kinds:
            for _ in range(data.draw(st.integers(0, 3))):
                table.intern(f"n{len(table)}")
            rows = data.draw(st.integers(0, 60))
            b = random_batch(BATCH_TYPES[kind], rows, rng, len(table))
            w.write_batch(kind, b)
            expected[kind].append(b)
    t = read_recording(path)
    assert t.strings.names() == table.names()
    for kind, cls in BATCH_TYPES.items():
        assert_batches_equal(getattr(t, kind), cls.concat(expected[kind]))


# ------------------------------------------------------------------------------------------
# Crash safety
# ------------------------------------------------------------------------------------------


def _chunked_recording(
        path: Path) -> tuple[list[int], list[int], list[KernelBatch], list[int]]:
    """Five (strings, kernels) chunk pairs.

    Returns the header end and the end of every chunk, the end of every kernel chunk, the
    batches, and the rows held by the first i kernel chunks.
    """
    rng = np.random.default_rng(3)
    table = StringTable()
    ends: list[int] = []
    batch_ends: list[int] = []
    batches: list[KernelBatch] = []
    with RecordingWriter(path, META, DEVICES) as w:
        ends.append(w.bytes_written)
        for i in range(5):
            table.intern(f"k{i}")
            w.write_strings(table)
            ends.append(w.bytes_written)
            b = random_batch(KernelBatch, 6 + i, rng, len(table))
            assert isinstance(b, KernelBatch)
            w.write_batch("kernels", b)
            batches.append(b)
            ends.append(w.bytes_written)
            batch_ends.append(w.bytes_written)
    return ends, batch_ends, batches, [0, *np.cumsum([len(b) for b in batches]).tolist()]


def test_truncation_at_every_offset_of_the_last_chunks_gives_a_prefix(tmp_path: Path) -> None:
    full_path = tmp_path / "full.ppw"
    bounds, batch_ends, batches, rows_at = _chunked_recording(full_path)
    raw = full_path.read_bytes()
    assert len(raw) > bounds[-1]  # the end chunk follows the last batch
    all_rows = KernelBatch.concat(batches)
    rng = np.random.default_rng(4)
    offsets = list(range(bounds[-3], len(raw) + 1))  # last strings, batch and end chunks
    offsets += rng.integers(1, bounds[-3], 60).tolist()
    json_end = fmt.FILE_PREFIX.size + struct.unpack_from("<I", raw, 10)[0]
    assert bounds[0] - 8 < json_end <= bounds[0]  # then zero padding to 8
    offsets += [1, 5, 6, 17, 18, 19, json_end - 1, json_end]  # in the magic, prefix, header
    cut = tmp_path / "cut.ppw"
    for off in offsets:
        cut.write_bytes(raw[:off])
        t = read_recording(cut)
        complete_chunks = sum(1 for b in batch_ends if b <= off)
        n = rows_at[complete_chunks]
        assert_batches_equal(t.kernels, all_rows.take(slice(0, n)))
        assert t.meta["complete"] is (off == len(raw))
        if off < json_end:
            assert "inside its header" in t.meta["notes"][0]
        elif off == len(raw):
            assert "notes" not in t.meta
        elif off in bounds or off < bounds[0]:  # a cut in the header padding loses nothing
            assert "without an end chunk" in t.meta["notes"][0]
        else:
            assert t.meta["notes"][0].startswith(f"recording truncated at byte {off}: last chunk")
        if off >= json_end:
            assert t.devices == DEVICES and t.meta["pid"] == 4242
        # every name a surviving record uses resolves
        ids = t.kernels.name_id
        assert np.all(ids < len(t.strings))


def test_crc_corruption_is_detected_and_reading_stops_there(tmp_path: Path) -> None:
    path = tmp_path / "c.ppw"
    _, batch_ends, _, rows_at = _chunked_recording(path)
    raw = bytearray(path.read_bytes())
    # a bit flip inside the payload of the third batch chunk (past its 16-byte prefix);
    # batch_ends[1] is where the third strings chunk starts, so that one survives
    third = batch_ends[1]
    strings_len = 16 + struct.unpack_from("<I", raw, third + 4)[0]
    batch_start = third + strings_len
    bad = bytearray(raw)
    bad[batch_start + 40] ^= 0x10
    path.write_bytes(bytes(bad))
    t = read_recording(path)
    assert len(t.kernels) == rows_at[2]
    assert len(t.strings) == 3  # the names chunk before the bad batch was read
    assert t.meta["complete"] is False
    assert t.meta["notes"] == [f"recording corrupt at byte {batch_start}: chunk crc mismatch; "
                               f"reading stopped, {len(raw) - batch_start} bytes ignored"]
    # a corrupted length field is a corrupt prefix, not mistaken for a truncation
    bad = bytearray(raw)
    bad[batch_ends[0] + 4: batch_ends[0] + 8] = struct.pack("<I", 10**9)
    path.write_bytes(bytes(bad))
    t = read_recording(path)
    assert len(t.kernels) == rows_at[1]
    assert "chunk header crc mismatch" in t.meta["notes"][0]
    # a corrupt header is unusable
    bad = bytearray(raw)
    bad[fmt.FILE_PREFIX.size + 3] ^= 0x01
    path.write_bytes(bytes(bad))
    with pytest.raises(InputError, match="corrupt recording header"):
        read_recording(path)


def test_disk_full_raises_recording_full_and_keeps_what_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "full.ppw"
    real_write = os.write
    budget = {"left": 4000}

    def short_disk(fd: int, data: Any) -> int:
        n = min(len(memoryview(data).cast("B")), budget["left"])
        if n == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        budget["left"] -= n
        return real_write(fd, memoryview(data).cast("B")[:n])

    monkeypatch.setattr("ppwtop.recording.writer.os.write", short_disk)
    rng = np.random.default_rng(5)
    kept = 0
    w = RecordingWriter(path, META, DEVICES)
    with pytest.raises(RecordingFull) as info:
        for _ in range(100):
            w.write_batch("kernels", random_batch(KernelBatch, 8, rng, 0))
            kept += 8
    assert isinstance(info.value, PpwtopError)
    assert "disk full" in str(info.value) and str(path) in str(info.value)
    monkeypatch.setattr("ppwtop.recording.writer.os.write", real_write)
    # the partial chunk stays (the file never shrinks under a reader's mapping); readers
    # drop it as a truncated last chunk
    assert os.path.getsize(path) > w.bytes_written
    t = read_recording(path)
    assert len(t.kernels) == kept > 0
    assert t.meta["complete"] is False
    assert any(f"last chunk (from byte {w.bytes_written}) dropped" in n for n in t.meta["notes"])
    with pytest.raises(RecordingFull):
        w.write_batch("kernels", random_batch(KernelBatch, 1, rng, 0))
    w.close()  # no end chunk after a failure, and no error
    assert read_recording(path).meta["complete"] is False


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_dev_full_is_a_recording_full_error() -> None:
    with pytest.raises(RecordingFull, match="disk full"):
        RecordingWriter("/dev/full", META, DEVICES)


def test_interrupt_mid_chunk_leaves_a_valid_file_and_writer_can_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "int.ppw"
    rng = np.random.default_rng(6)
    b1, b2, b3 = (random_batch(KernelBatch, 20, rng, 0) for _ in range(3))
    real_write = os.write

    def interrupted(fd: int, data: Any) -> int:
        mv = memoryview(data).cast("B")
        real_write(fd, mv[: max(1, len(mv) // 2)])
        raise KeyboardInterrupt

    with RecordingWriter(path, {}, []) as w:
        w.write_batch("kernels", b1)
        monkeypatch.setattr("ppwtop.recording.writer.os.write", interrupted)
        with pytest.raises(KeyboardInterrupt):
            w.write_batch("kernels", b2)
        monkeypatch.setattr("ppwtop.recording.writer.os.write", real_write)
        w.write_batch("kernels", b3)
    t = read_recording(path)
    assert t.meta["complete"] is True and "notes" not in t.meta
    assert_batches_equal(t.kernels, KernelBatch.concat([b1, b3]))


def test_an_interrupted_chunk_is_overwritten_and_its_stale_tail_cut_at_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long chunk interrupted half-way, then a short one: the short one overwrites the
    start of the partial chunk.  Killed before the close, the file reads up to the short
    chunk (the stale bytes after it stop the reader); closed, the stale tail is cut off."""
    rng = np.random.default_rng(7)
    b1, b2, b3 = (random_batch(KernelBatch, k, rng, 0) for k in (20, 400, 3))
    real_write = os.write

    budget = {"bytes": sum(memoryview(p).nbytes
                           for p in fmt.batch_chunk_parts("kernels", b2)) // 2}

    def interrupted(fd: int, data: Any) -> int:  # half the chunk out, then Ctrl-C
        mv = memoryview(data).cast("B")[: budget["bytes"]]
        budget["bytes"] -= real_write(fd, mv)
        if budget["bytes"] == 0:
            raise KeyboardInterrupt
        return len(mv)

    path = tmp_path / "stale.ppw"
    w = RecordingWriter(path, {}, [])
    w.write_batch("kernels", b1)
    with monkeypatch.context() as m:
        m.setattr("ppwtop.recording.writer.os.write", interrupted)
        with pytest.raises(KeyboardInterrupt):
            w.write_batch("kernels", b2)
    stale_end = os.path.getsize(path)
    w.write_batch("kernels", b3)
    assert os.path.getsize(path) == stale_end > w.bytes_written  # overwritten, not cut
    t = read_recording(path)  # as a crash here would leave it
    assert_batches_equal(t.kernels, KernelBatch.concat([b1, b3]))
    assert t.meta["complete"] is False
    assert any(f"corrupt at byte {w.bytes_written}" in n for n in t.meta["notes"])
    w.close()
    assert os.path.getsize(path) == w.bytes_written
    t = read_recording(path)
    assert t.meta["complete"] is True and "notes" not in t.meta
    assert_batches_equal(t.kernels, KernelBatch.concat([b1, b3]))


def test_an_interrupt_after_the_whole_chunk_was_written_keeps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C landing after the last byte went out: the chunk is on disk whole, so it
    counts (it used to be cut off, under any reader that had already read it)."""
    rng = np.random.default_rng(8)
    b1, b2 = (random_batch(KernelBatch, 20, rng, 0) for _ in range(2))
    real_write = os.write
    left = {"bytes": sum(memoryview(p).nbytes for p in fmt.batch_chunk_parts("kernels", b2))}

    def late(fd: int, data: Any) -> int:
        k = real_write(fd, data)
        left["bytes"] -= k
        if left["bytes"] == 0:  # the chunk's last byte is out
            raise KeyboardInterrupt
        return k

    path = tmp_path / "late.ppw"
    with RecordingWriter(path, {}, []) as w:
        w.write_batch("kernels", b1)
        chunks = w.chunks_written
        with monkeypatch.context() as m:
            m.setattr("ppwtop.recording.writer.os.write", late)
            with pytest.raises(KeyboardInterrupt):
                w.write_batch("kernels", b2)
        assert w.chunks_written == chunks + 1 and w.bytes_written == os.path.getsize(path)
    t = read_recording(path)
    assert t.meta["complete"] is True
    assert_batches_equal(t.kernels, KernelBatch.concat([b1, b2]))


_LIVE_READER = """
import errno, mmap, os, sys
import numpy as np
from ppwtop.recording import RecordingReader, RecordingWriter
from ppwtop.recording import writer as wmod
path, how = sys.argv[1], sys.argv[2]
w = RecordingWriter(path, {}, [])
# a meta chunk that brings the file's good end onto a page boundary
need = -w.bytes_written % mmap.PAGESIZE
need += mmap.PAGESIZE if need < 64 else 0
w.write_meta({"pad": "y" * (need - 16 - 19)})
assert w.bytes_written % mmap.PAGESIZE == 0
real_write = os.write
readers = []

def cut(fd, data):  # the chunk's prefix and half its payload out, a reader maps the file,
    mv = memoryview(data).cast("B")  # then the write fails
    if len(mv) == 16:
        return real_write(fd, mv)
    real_write(fd, mv[: len(mv) // 2])
    readers.append(RecordingReader(path))
    if how == "interrupt":
        raise KeyboardInterrupt
    raise OSError(errno.ENOSPC, "No space left on device")

wmod.os.write = cut
try:
    w.write_meta({"big": "z" * 3 * mmap.PAGESIZE})
except (KeyboardInterrupt, wmod.RecordingFull):
    pass
wmod.os.write = real_write
kinds = [k for k, _ in readers[0].chunks()]
print(kinds, readers[0].notes)
w.close()
"""


@pytest.mark.parametrize("how", ["interrupt", "disk_full"])
def test_a_reader_mapping_a_live_recording_survives_a_failed_chunk(tmp_path: Path,
                                                                   how: str) -> None:
    """A reader maps the file while a chunk is half written; the write then fails.  The
    writer used to cut the partial chunk off at a page boundary, under the reader's mapping:
    the reader died of SIGBUS (no message).  Now the file does not shrink while written and
    the reader drops the partial chunk."""
    r = subprocess.run([sys.executable, "-c", _LIVE_READER, str(tmp_path / "live.ppw"), how],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "['meta']" in r.stdout and "last chunk (from byte" in r.stdout


# ------------------------------------------------------------------------------------------
# Bad input and forward compatibility
# ------------------------------------------------------------------------------------------


def test_not_a_recording_and_empty_files_are_input_errors(tmp_path: Path) -> None:
    p = tmp_path / "x.ppw"
    p.write_bytes(b"hello, this is not a recording at all")
    with pytest.raises(InputError, match="not a ppwtop recording"):
        read_recording(p)
    p.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        read_recording(p)
    with pytest.raises(InputError, match="no such file"):
        read_recording(tmp_path / "missing.ppw")
    with pytest.raises(InputError, match="directory"):
        read_recording(tmp_path)


def test_future_major_version_is_refused_future_minor_is_read(tmp_path: Path) -> None:
    p = tmp_path / "v.ppw"
    write_recording(p, Trace(kernels=KernelBatch.from_columns({"start_ns": [1, 2]})))
    raw = bytearray(p.read_bytes())
    future = bytearray(raw)
    future[6:8] = struct.pack("<H", fmt.VERSION_MAJOR + 1)
    p.write_bytes(bytes(future))
    with pytest.raises(InputError, match=r"version 2\.0 is newer"):
        read_recording(p)
    minor = bytearray(raw)
    minor[8:10] = struct.pack("<H", fmt.VERSION_MINOR + 7)
    p.write_bytes(bytes(minor))
    t = read_recording(p)
    assert t.kernels.start_ns.tolist() == [1, 2]
    assert t.meta["recording_version"] == f"{fmt.VERSION_MAJOR}.{fmt.VERSION_MINOR + 7}"


def test_unknown_chunk_kinds_are_skipped_with_a_note(tmp_path: Path) -> None:
    p = tmp_path / "u.ppw"
    with RecordingWriter(p, {}, []) as w:
        w.write_batch("kernels", KernelBatch.from_columns({"start_ns": [1]}))
        w._write_parts(fmt.json_chunk_parts(99, {"from": "the future"}))
        w.write_batch("kernels", KernelBatch.from_columns({"start_ns": [2]}))
    t = read_recording(p)
    assert t.kernels.start_ns.tolist() == [1, 2]
    assert t.meta["complete"] is True
    assert t.meta["notes"] == ["recording: skipped chunk kind 99 (written by a newer ppwtop)"]


def test_names_missing_from_the_table_read_as_unknown(tmp_path: Path) -> None:
    p = tmp_path / "n.ppw"
    with RecordingWriter(p, {}, []) as w:  # no strings table handed over: ids dangle
        w.write_strings(["only"])
        w.write_batch("kernels", KernelBatch.from_columns({"start_ns": [1, 2],
                                                           "name_id": [0, 5]}))
    t = read_recording(p)
    assert t.kernels.name_id.tolist() == [0, -1]
    assert "not in the table" in t.meta["notes"][0]


def test_names_outside_the_table_never_read_as_another_name(tmp_path: Path) -> None:
    # found by fuzzing: with the strings chunks gone the remapped -1 ids raised IndexError;
    # on a non-empty table strings[-1] would have named them after the last name
    p = tmp_path / "n.ppw"
    with RecordingWriter(p, {}, []) as w:
        w.write_strings(["first", "last"])
        w.write_batch("kernels", KernelBatch.from_columns({"start_ns": [1, 2, 3],
                                                           "name_id": [0, 9, -7]}))
    t = read_recording(p)
    assert t.kernels.name_id.tolist() == [0, -1, -1]
    assert "not in the table" in t.meta["notes"][0]
    assert [t.name(int(i)) for i in t.kernels.name_id] == ["first", UNKNOWN_NAME, UNKNOWN_NAME]


def _with_header(p: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the recording's file header (with a valid crc) through ``change``."""
    raw = p.read_bytes()
    header_len = fmt.FILE_PREFIX.unpack_from(raw)[3]
    body_end = fmt.FILE_PREFIX.size + header_len
    header = orjson.loads(raw[fmt.FILE_PREFIX.size:body_end])
    change(header)
    p.write_bytes(fmt.encode_file_header(header) + raw[body_end + fmt.pad_len(body_end):])


@pytest.mark.parametrize("devices", [True, 5, "GPU 0", {"index": 0}])
def test_a_header_devices_field_that_is_no_list_is_an_input_error(tmp_path: Path,
                                                                  devices: Any) -> None:
    # found by fuzzing: "devices": true raised TypeError (an internal error)
    p = tmp_path / "d.ppw"
    write_recording(p, Trace(kernels=KernelBatch.from_columns({"start_ns": [1]}),
                             devices=DEVICES))
    _with_header(p, lambda h: h.update(devices=devices))
    with pytest.raises(InputError, match=r"d\.ppw: corrupt recording header \(devices is a "):
        read_recording(p)


@pytest.mark.parametrize("bad", [{"name": 5}, {"index": "0"}, {"index": True},
                                 {"sm_count": 1.5}, {"uuid": None}])
def test_a_header_device_field_of_the_wrong_type_skips_that_device(
        tmp_path: Path, bad: dict[str, Any]) -> None:
    # found by fuzzing: a device name 5 reached the preset lookup (TypeError there)
    p = tmp_path / "d.ppw"
    write_recording(p, Trace(kernels=KernelBatch.from_columns({"start_ns": [1]}),
                             devices=DEVICES))
    _with_header(p, lambda h: h["devices"][0].update(bad))
    t = read_recording(p)
    assert t.devices == DEVICES[1:]
    assert any("skipped an unreadable device entry" in n for n in t.meta["notes"])


@pytest.mark.parametrize("entry", [["start_ns"], ["start_ns", "<i8"], ["start_ns", "<i8", 8, 0],
                                   "start_ns", 7])
def test_a_batch_directory_entry_of_the_wrong_shape_stops_reading_there(
        tmp_path: Path, entry: Any) -> None:
    # found by fuzzing: an entry of 0 or 2 elements raised IndexError past the chunk loop's
    # handler (an internal error); it is a malformed chunk like any other
    directory = orjson.dumps({"batch": "kernels", "rows": 0, "columns": [entry]})
    payload = struct.pack("<I", len(directory)) + directory
    payload += b"\0" * fmt.pad_len(len(payload))
    with pytest.raises(ValueError, match="bad batch directory entry"):
        fmt.decode_batch(memoryview(payload))
    p = tmp_path / "b.ppw"
    with RecordingWriter(p, {}, []) as w:
        w.write_batch("kernels", KernelBatch.from_columns({"start_ns": [1]}))
        w._write_parts([fmt.chunk_prefix(fmt.CHUNK_BATCH, len(payload), zlib.crc32(payload)),
                        payload])
        w.write_batch("kernels", KernelBatch.from_columns({"start_ns": [2]}))
    t = read_recording(p)
    assert t.kernels.start_ns.tolist() == [1]
    assert any("malformed chunk (bad batch directory entry" in n for n in t.meta["notes"])


def test_writer_rejects_wrong_batches(tmp_path: Path) -> None:
    with RecordingWriter(tmp_path / "w.ppw", {}, []) as w:
        with pytest.raises(ValueError, match="unknown batch kind"):
            w.write_batch("kernel", KernelBatch.empty())
        with pytest.raises(TypeError, match="KernelBatch"):
            w.write_batch("kernels", PowerBatch.empty())


# ------------------------------------------------------------------------------------------
# Memory: columns, not per-record objects
# ------------------------------------------------------------------------------------------


def test_reading_50_mb_allocates_about_the_data_once_and_streaming_almost_nothing(
        tmp_path: Path) -> None:
    rows = 720_000  # 70 bytes a kernel row -> ~50 MB
    base = np.arange(rows, dtype=np.int64)
    k = KernelBatch.from_columns({"start_ns": base * 1000, "end_ns": base * 1000 + 500,
                                  "name_id": (base % 97).astype(np.int32),
                                  "grid_x": (base % 1024).astype(np.int32)})
    data_bytes = k.nbytes()
    assert data_bytes > 48e6
    path = tmp_path / "big.ppw"
    with RecordingWriter(path, {}, [], strings=StringTable([f"k{i}" for i in range(97)]),
                         max_chunk_bytes=4 << 20) as w:
        w.write_batch("kernels", k)
    del k
    assert os.path.getsize(path) >= data_bytes

    tracemalloc.start()
    try:
        t = read_recording(path)
        _, peak_read = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        before_stream, _ = tracemalloc.get_traced_memory()
        total = 0
        n_kernel_chunks = 0
        for kind, batch in iter_chunks(path):
            if kind == "kernels":
                total += int(batch.start_ns.sum() // 1000)
                n_kernel_chunks += 1
        _, peak_stream = tracemalloc.get_traced_memory()
        peak_stream -= before_stream
    finally:
        tracemalloc.stop()
    assert len(t.kernels) == rows
    assert int(t.kernels.end_ns[-1]) == (rows - 1) * 1000 + 500
    assert total == int(base.sum())
    assert n_kernel_chunks == -(-data_bytes // (4 << 20))  # split at max_chunk_bytes
    # The trace's own arrays are traced (numpy reports its buffers), so the peak cannot be
    # below the data; per-record objects or a read() of the whole file would double it.
    assert 0.95 * data_bytes < peak_read < 1.25 * data_bytes
    # Streaming sees views into the mapping: a small fraction of the data at most.
    assert peak_stream < 0.05 * data_bytes
