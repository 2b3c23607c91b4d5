"""The one error type of the injector: ``AttachError`` names the pid and what is wrong.

Owns the message shape ``pid N: <what>[ (hint)]`` so every preflight check, every debugger
failure and the connect-back timeout read the same way after ``ppwtop: error:``.
"""

from __future__ import annotations

from ppwtop.errors import PpwtopError


class AttachError(PpwtopError):
    """Attaching to ``pid`` failed or was refused; the message is one line with a hint."""

    def __init__(self, pid: int, what: str, hint: str | None = None) -> None:
        self.pid = pid
        self.what = what
        self.hint = hint
        line = f"pid {pid}: {what}"
        if hint:
            line += f" ({hint})"
        super().__init__(line)
