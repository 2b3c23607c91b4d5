"""Socket endpoints of the transport: the session's listening socket and the agent's connect.

Owns where the Unix socket lives (a fresh private directory, mode 0700, so no other user can
connect or pre-create the path), the connect-with-timeout the agent uses, and
:class:`FrameReader`, the session's non-blocking read loop over :class:`FrameDecoder`.
Standard library only (the agent imports :func:`connect`).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import tempfile
from pathlib import Path

from ppwtop.transport.frames import Frame, FrameDecoder, FrameError

RECV_BYTES = 1 << 20


class Listener:
    """A listening Unix socket in a private temporary directory (removed on :meth:`close`)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._dir: str | None = None
        if path is None:
            self._dir = tempfile.mkdtemp(prefix="ppwtop-")
            os.chmod(self._dir, 0o700)
            path = os.path.join(self._dir, "agent.sock")
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.bind(self.path)
            self.sock.listen(4)
        except OSError:
            self.close()
            raise

    def accept(self, timeout_s: float) -> socket.socket | None:
        """The next connection, or None after ``timeout_s``."""
        r, _, _ = select.select([self.sock], [], [], max(timeout_s, 0.0))
        if not r:
            return None
        conn, _ = self.sock.accept()
        return conn

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(path: str, timeout_s: float = 5.0) -> socket.socket:
    """Connect to a session's socket (OSError when nobody listens there)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        s.connect(path)
    except OSError:
        s.close()
        raise
    return s


class FrameReader:
    """Reads frames from a connected socket; :attr:`eof` once the peer closed it."""

    def __init__(self, sock: socket.socket, decoder: FrameDecoder | None = None) -> None:
        self.sock = sock
        self.decoder = decoder or FrameDecoder()
        self.eof = False
        self._error: FrameError | None = None
        sock.setblocking(False)

    def read(self, timeout_s: float) -> list[Frame]:
        """Frames that arrived within ``timeout_s`` (FrameError on a corrupt stream, raised
        after the good frames before it were returned)."""
        if self._error is not None:
            raise self._error
        if self.eof:
            return []
        r, _, _ = select.select([self.sock], [], [], max(timeout_s, 0.0))
        out: list[Frame] = []
        if not r:
            return out
        for _ in range(256):  # drain what is there, bounded so the caller gets to run
            try:
                got, closed = self.decoder.recv_from(self.sock, RECV_BYTES)
            except BlockingIOError:
                break
            except (ConnectionResetError, BrokenPipeError):
                got, closed = [], True
            except FrameError as e:
                if not out:
                    raise
                self._error = e
                break
            out.extend(got)
            if closed:
                self.eof = True
                break
        return out
