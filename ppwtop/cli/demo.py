"""`ppwtop demo`: not built yet (issue #5); answers --help and exits 2 otherwise."""

from __future__ import annotations

from ppwtop.cli.common import not_built


def main(argv: list[str]) -> int:
    return not_built("demo", 5, argv)
