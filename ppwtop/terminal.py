"""Whether the TUI has a terminal to draw on.

Owns :func:`need_terminal`, called by every command that opens the TUI (``demo``, ``show``,
``compare``, ``replay``, ``run``, ``attach``) once its other checks passed and before it
starts anything: with stdin or stdout redirected (a pipe, a file, a CI job) Textual would
write escape codes into the file and wait for keys that never come.
"""

from __future__ import annotations

import sys

from ppwtop.errors import PpwtopError


def need_terminal(command: str, instead: str) -> None:
    """Raise the one-line error, naming what to use ``instead``, where stdin and stdout
    are not both a terminal."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise PpwtopError(f"{command}: the TUI needs a terminal (stdin and stdout are not "
                          f"both one); {instead}")
