"""A recording whose header cannot be written leaves no empty ``.ppw`` behind (it would
read as "file is empty"), but never removes a file ppwtop did not create; a recording that
replaces a file leaves a reader of the old one alone."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ppwtop.recording import RecordingFull, RecordingReader, RecordingWriter


def _no_space(fd: int, data: Any) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_header_write_removes_the_file_it_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.ppw"
    monkeypatch.setattr("ppwtop.recording.writer.os.write", _no_space)
    with pytest.raises(RecordingFull, match="disk full"):
        RecordingWriter(path, {"pid": 1})
    assert not path.exists()


def test_a_failed_header_write_leaves_a_file_it_did_not_create(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.ppw"
    path.write_bytes(b"old")
    monkeypatch.setattr("ppwtop.recording.writer.os.write", _no_space)
    with pytest.raises(RecordingFull):
        RecordingWriter(path, {"pid": 1})
    assert path.exists()  # replaced (truncated) as asked, but not unlinked


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_dev_full_is_not_removed() -> None:
    with pytest.raises(RecordingFull):
        RecordingWriter("/dev/full", {})
    assert os.path.exists("/dev/full")


_OLD_READER = """
import sys
from ppwtop.recording import RecordingReader, RecordingWriter
path = sys.argv[1]
with RecordingWriter(path, {"run": 1}) as w:
    for i in range(200):
        w.write_meta({"pad": "x" * 4000, "i": i})
old = RecordingReader(path)  # replay of the last run, say
RecordingWriter(path, {"run": 2}).close()  # ... while a new recording takes the path
n = sum(1 for _ in old.chunks())
print(n, old.complete, RecordingReader(path).meta["run"])
"""


def test_a_new_recording_at_a_path_leaves_a_reader_of_the_old_one_alone(
        tmp_path: Path) -> None:
    """The old file used to be truncated in place, under the reader's mapping: the reader
    then read the new recording's bytes (here: its end chunk, so 0 of the 200 chunks), or
    died of SIGBUS on a page past the new end.  Now the new recording is a new file at the
    path; the old one reads whole."""
    r = subprocess.run([sys.executable, "-c", _OLD_READER, str(tmp_path / "r.ppw")],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.split() == ["200", "True", "2"]


def test_a_replaced_recording_keeps_the_old_files_permissions(tmp_path: Path) -> None:
    path = tmp_path / "r.ppw"
    path.write_bytes(b"old contents")
    path.chmod(0o640)
    with path.open("rb") as held:  # a reader of the old file (its inode stays in use)
        RecordingWriter(path, {"pid": 1}).close()
        assert os.fstat(held.fileno()).st_ino != path.stat().st_ino
        assert held.read() == b"old contents"  # a new file, not the old one truncated
    assert path.stat().st_mode & 0o777 == 0o640


def test_where_the_old_file_cannot_be_unlinked_it_is_truncated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writable file in a directory ppwtop may not change: replaced in place, as before."""
    path = tmp_path / "r.ppw"
    path.write_bytes(b"old contents")
    inode = path.stat().st_ino

    def refuse(p: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("ppwtop.recording.writer.os.unlink", refuse)
    RecordingWriter(path, {"pid": 1}).close()
    assert path.stat().st_ino == inode
    assert RecordingReader(path).meta["pid"] == 1


def test_a_recording_through_a_symlink_replaces_the_file_it_leads_to(tmp_path: Path) -> None:
    """The symlink stays a symlink (``-o latest.ppw`` pointing into a runs folder), and a
    reader of the old target keeps reading it whole; before, the target was truncated in
    place under the reader."""
    target = tmp_path / "runs" / "r.ppw"
    target.parent.mkdir()
    target.write_bytes(b"old contents")
    target.chmod(0o640)
    link = tmp_path / "latest.ppw"
    link.symlink_to(target)
    with target.open("rb") as held:
        RecordingWriter(link, {"pid": 7}).close()
        assert held.read() == b"old contents"
        assert os.fstat(held.fileno()).st_ino != target.stat().st_ino
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert RecordingReader(link).meta["pid"] == 7
    assert target.stat().st_mode & 0o777 == 0o640


def test_a_dangling_symlink_is_written_through(tmp_path: Path) -> None:
    link = tmp_path / "latest.ppw"
    link.symlink_to(tmp_path / "new.ppw")
    RecordingWriter(link, {"pid": 8}).close()
    assert link.is_symlink()
    assert RecordingReader(tmp_path / "new.ppw").meta["pid"] == 8
