"""One helper for the tests that hand ppwtop a FIFO: should the code under test open it after
all (a regression of ``fileio``'s regular-file check), a timer opens its write end so the read
sees EOF and the test fails instead of hanging the suite."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def unblocked_after(fifo: Path, seconds: float = 5.0) -> Iterator[None]:
    """Run the block; if it is still running after ``seconds``, give ``fifo`` a writer."""
    def unblock() -> None:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    guard = threading.Timer(seconds, unblock)
    guard.start()
    try:
        yield
    finally:
        guard.cancel()
