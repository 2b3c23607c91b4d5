"""A recording whose header cannot be written leaves no empty ``.ppw`` behind (it would
read as "file is empty"), but never removes a file ppwtop did not create."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from ppwtop.recording import RecordingFull, RecordingWriter


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
