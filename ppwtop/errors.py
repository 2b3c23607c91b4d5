"""User-facing errors: every one becomes a single ``ppwtop: error: ...`` line and exit 2.

Owns the exception types the CLI turns into that line, so no module prints errors itself.
"""

from __future__ import annotations

from pathlib import Path


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
