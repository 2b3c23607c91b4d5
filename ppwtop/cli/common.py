"""Helpers every subcommand shares: an argparse parser whose errors are one line, and
small argument types."""

from __future__ import annotations

import argparse
from typing import NoReturn

from ppwtop.errors import PpwtopError


class UsageError(PpwtopError):
    """A bad command line."""


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def parser(command: str, description: str) -> Parser:
    return Parser(prog=f"ppwtop {command}", description=description)


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return v


def not_built(command: str, issue: int, argv: list[str]) -> int:
    """Body of a contract subcommand that has not landed: answers --help, else exit 2."""
    from ppwtop.errors import NotBuiltError

    if "-h" in argv or "--help" in argv:
        print(f"usage: ppwtop {command} ...\n\nNot built yet (issue #{issue}).")
        return 0
    raise NotBuiltError(command, issue)
