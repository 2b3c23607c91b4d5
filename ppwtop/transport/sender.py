"""The target side of the transport: a bounded queue and one sender thread that never lets a
slow (or dead) ppwtop block the target.

Owns the connection from the target to ppwtop after the handshake.  :meth:`Sender.offer` is
what the agent's hot path calls: it appends a frame's parts to a deque if the queue has room
(by bytes and by frames) and returns at once; otherwise it returns False and the caller counts
the drop.  The sender thread writes the queue to a non-blocking socket with ``select``
timeouts, so it notices :meth:`close` within ~0.2 s even when the reader never reads.  When the
peer goes away (EPIPE, ECONNRESET, EOF) ``connected`` turns False and every later offer is
refused: the target carries on, unprofiled.  Standard library only (runs in the target).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence

DEFAULT_MAX_QUEUE_BYTES = 64 << 20
DEFAULT_MAX_QUEUE_FRAMES = 4096
_POLL_S = 0.2


class Sender:
    """Ships frames (lists of byte parts) over ``sock`` from its own thread."""

    def __init__(self, sock: socket.socket, *, max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
                 max_queue_frames: int = DEFAULT_MAX_QUEUE_FRAMES,
                 on_disconnect: Callable[[], None] | None = None) -> None:
        self.sock = sock
        self.max_queue_bytes = max_queue_bytes
        self.max_queue_frames = max_queue_frames
        self.on_disconnect = on_disconnect
        self._q: collections.deque[tuple[Sequence[bytes | memoryview], int]] = \
            collections.deque()
        self._queued_bytes = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._connected = True
        self.frames_sent = 0
        self.bytes_sent = 0
        self.frames_refused = 0
        self.error: str | None = None
        sock.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="ppwtop-agent-sender",
                                        daemon=True)
        self._thread.start()

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def offer(self, parts: Sequence[bytes | memoryview]) -> bool:
        """Queue one frame; False (at once) when not connected or the queue is full."""
        n = 0
        for p in parts:
            n += len(p)
        with self._lock:
            if (not self._connected or self._closing
                    or self._queued_bytes + n > self.max_queue_bytes
                    or len(self._q) >= self.max_queue_frames):
                self.frames_refused += 1
                return False
            idle = not self._q
            self._q.append((parts, n))
            self._queued_bytes += n
        if idle:  # a busy sender thread finds the frame without a wake-up
            self._wake.set()
        return True

    def close(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (up to ``timeout_s``), then close the socket."""
        with self._lock:
            self._closing = True
        self._wake.set()
        self._thread.join(timeout_s)
        with self._lock:
            self._connected = False
            self._q.clear()
            self._queued_bytes = 0
        with contextlib.suppress(OSError):
            self.sock.close()

    def abandon(self) -> None:
        """In a forked child: drop everything and close this copy of the socket, so the
        session still sees EOF when the parent exits (the sender thread was not forked)."""
        self._connected = False
        self._closing = True
        self._q.clear()
        self._queued_bytes = 0
        with contextlib.suppress(OSError):
            self.sock.close()

    # --- the sender thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    item = self._q[0] if self._q else None
                    closing = self._closing
                if item is None:
                    if closing:
                        return
                    self._wake.wait(_POLL_S)
                    self._wake.clear()
                    if not self._peer_alive():
                        self._lost("ppwtop closed the connection")
                        return
                    continue
                parts, n = item
                for p in parts:
                    if not self._send_all(memoryview(p).cast("B")):
                        return
                with self._lock:
                    if self._q and self._q[0] is item:
                        self._q.popleft()
                        self._queued_bytes -= n
                self.frames_sent += 1
                self.bytes_sent += n
        except Exception as e:  # never let the thread die with an exception in the target
            self._lost(f"sender failed: {type(e).__name__}: {e}")

    def _send_all(self, mv: memoryview) -> bool:
        deadline: float | None = None
        while mv.nbytes:
            try:
                k = self.sock.send(mv)
                mv = mv[k:]
                continue
            except BlockingIOError:
                pass
            except OSError as e:
                self._lost(f"send failed: {errno.errorcode.get(e.errno or 0, e)}")
                return False
            if self._closing:
                # flushing on close: give up after a bound rather than hang the target's exit
                deadline = deadline or time.monotonic() + 1.0
                if time.monotonic() > deadline:
                    self._lost("ppwtop did not read the last frames")
                    return False
            select.select([], [self.sock], [], _POLL_S)
        return True

    def _peer_alive(self) -> bool:
        """False when the peer closed its end (readable with EOF)."""
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
            if r:
                return self.sock.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False
        return True

    def _lost(self, why: str) -> None:
        with self._lock:
            was = self._connected
            self._connected = False
            self._q.clear()
            self._queued_bytes = 0
            if self.error is None:
                self.error = why
        if was and self.on_disconnect is not None:
            with contextlib.suppress(Exception):
                self.on_disconnect()
