"""User-facing errors: every one becomes a single ``ppwtop: error: ...`` line and exit 2.

Owns the exception types the CLI turns into that line, so no module prints errors itself,
and :func:`one_line`, which keeps that line one line whatever a file name holds.
"""

from __future__ import annotations

import re
from pathlib import Path

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\x1b``): a file name or an
    argument holding a newline split the error line in two, and an escape sequence in one
    was sent to the terminal as it was (an audit, 2026-12-05)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class PpwtopError(Exception):
    """A problem the user can fix; its message is the whole line after ``ppwtop: error:``."""

    exit_code = 2


class InputError(PpwtopError):
    """A file that cannot be used: names the file and what is wrong with it."""

    def __init__(self, path: str | Path, what: str) -> None:
        self.path = str(path)
        self.what = what
        super().__init__(f"{self.path}: {what}")


class NotBuiltError(PpwtopError):
    """A contract subcommand whose implementation has not landed yet."""

    def __init__(self, command: str, issue: int) -> None:
        super().__init__(f"'ppwtop {command}' is not built yet (tracked in issue #{issue})")


class Regression(Exception):
    """Raised by ``diff --fail-on-regression`` to exit 3 after printing the verdict."""

    exit_code = 3
