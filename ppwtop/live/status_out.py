"""Status output that can never stop a live session.

Owns :class:`StatusOut`, the stream every ``ppwtop:`` status line of a live session goes to
(the session's notices, the summary, the wait for the command).  A write that fails (stderr
piped into ``head`` or ``grep -m1`` that has exited: ``BrokenPipeError``; a closed or full
stream) is swallowed and turns every later status write into a no-op, so collection goes on
for the time asked and the recording ends as it would have with a terminal attached.
"""

from __future__ import annotations

from typing import TextIO


class StatusOut:
    """A write-only text stream over ``inner`` whose failures are swallowed (see module)."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self.inner.write(text)
            except (OSError, ValueError):  # ValueError: write to a closed file
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.inner.flush()
            except (OSError, ValueError):
                self.broken = True


def status_out(out: TextIO | StatusOut) -> StatusOut:
    """``out`` wrapped once (an already wrapped stream is returned as is)."""
    return out if isinstance(out, StatusOut) else StatusOut(out)


__all__ = ["StatusOut", "status_out"]
