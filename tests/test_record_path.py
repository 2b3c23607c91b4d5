"""The recording path is checked before anything starts: a named pipe (whose open would block
until a reader came: ppwtop hung with no output), a device or a socket is one error line,
exit 2; a regular file, a new name or a link to a regular file is accepted."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ppwtop.errors import PpwtopError
from ppwtop.live.launch import check_record_path


def test_a_named_pipe_device_or_socket_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        for p in (fifo, Path("/dev/null"), sock_path):
            with pytest.raises(PpwtopError, match="not a regular file"):
                check_record_path(p)


def test_regular_files_new_names_and_links_to_files_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "old.ppw").write_bytes(b"x")
    (tmp_path / "link.ppw").symlink_to(tmp_path / "old.ppw")
    for name in ("old.ppw", "new.ppw", "link.ppw"):
        check_record_path(tmp_path / name)


def test_record_to_a_fifo_is_one_line_exit_2_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "r.ppw"
    os.mkfifo(fifo)
    try:
        r = subprocess.run([sys.executable, "-m", "ppwtop", "record", "-o", str(fifo),
                            "--backend", "sim", "--", sys.executable, "-c", "pass"],
                           capture_output=True, text=True, timeout=20, check=False)
    finally:  # should it hang after all: a reader lets the open return
        with open(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), "rb"):
            pass
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"ppwtop: error: {fifo}: not a regular file (a named pipe, device or socket): "
        "a recording must be a file"]
