"""Signals around a live session: what may interrupt ppwtop, and when it may not.

Owns :func:`deferred_interrupts`, which holds SIGINT, SIGTERM and SIGHUP back while a session
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

    old: dict[int, Any] = {}
    for sig in HELD_SIGNALS:
        current = signal.getsignal(sig)
        if current is not None and current is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        if got:
            signal.raise_signal(got[0])  # acted on now, as it would have been then


__all__ = ["HELD_SIGNALS", "deferred_interrupts"]
