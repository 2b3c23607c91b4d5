"""Signals around a live session: what may interrupt ppwtop, and when it may not.

Owns :class:`Terminated` and :func:`terminate_ends_session`: for the whole of a live
command (from before its socket exists until its command has been waited for) SIGTERM and
SIGHUP end it as Ctrl-C does (the socket directory removed, the recording closed with its
end chunk, the launched command terminated) instead of killing ppwtop on the spot.  And
:func:`deferred_interrupts`, which holds SIGINT, SIGTERM and SIGHUP back while a session
finishes its recording (the last NVML readings, the final meta, the end chunk: milliseconds),
so a second Ctrl-C cannot leave the recording without its end chunk; a signal that came
meanwhile is raised again, to the handler that was there before, once the file is closed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_installed: set[int] = set()


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, ``docker stop``, a job scheduler) or SIGHUP (its terminal
    closed, no screen to draw on): it ends as Ctrl-C does (the recording closed with its
    end chunk, the command ppwtop launched terminated), not on the spot."""

    def __init__(self, signum: signal.Signals = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum
        self.reason = ("terminated (SIGTERM)" if signum == signal.SIGTERM
                       else f"ended by {signum.name}")
        self.exit_code = 128 + int(signum)


def _install(signals: tuple[signal.Signals, ...], handler: Any) -> dict[int, Any]:
    """``handler`` for each of ``signals`` that is not ignored (SIGHUP under ``nohup`` stays
    ignored; a handler set outside Python, None, is left alone); the handlers it replaced."""
    old: dict[int, Any] = {}
    for sig in signals:
        current = signal.getsignal(sig)
        if current is not None and current is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, handler)
    return old


def _restore(old: dict[int, Any]) -> None:
    for signum, handler in old.items():
        signal.signal(signum, handler)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signal.Signals(signum))


@contextlib.contextmanager
def terminate_ends_session() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the body (on the main thread; a
    signal the caller ignores, SIGHUP under ``nohup``, stays ignored); the previous
    handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = _install(ENDING_SIGNALS, _raise_terminated)
    _installed.update(old)
    try:
        yield
    finally:
        _installed.difference_update(old)
        _restore(old)


def reinstall_terminate_handlers() -> None:
    """Put :func:`terminate_ends_session`'s handlers back where something replaced them
    (the TUI's event loop resets SIGTERM and SIGHUP to the default when it closes)."""
    if threading.current_thread() is threading.main_thread():
        for sig in _installed:
            signal.signal(sig, _raise_terminated)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Record :data:`HELD_SIGNALS` instead of acting on them during the body, then raise
    the first one again.  Python handlers are per process, so this holds whichever thread
    the kernel delivers to; off the main thread (where handlers cannot be set) a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        got.append(signum)

    old = _install(HELD_SIGNALS, hold)
    try:
        yield
    finally:
        _restore(old)
        if got:
            signal.raise_signal(got[0])  # acted on now, as it would have been then


__all__ = ["ENDING_SIGNALS", "HELD_SIGNALS", "Terminated", "deferred_interrupts",
           "reinstall_terminate_handlers", "terminate_ends_session"]
