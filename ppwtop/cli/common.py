"""Helpers every subcommand shares: an argparse parser whose errors are one line, and
small argument types."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

from ppwtop.errors import PpwtopError, one_line


class UsageError(PpwtopError):
    """A bad command line."""


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def parser(command: str, description: str) -> Parser:
    return Parser(prog=f"ppwtop {command}", description=description)


MAX_SIM_SECONDS = 900.0
"""The longest simulated run ``simulate`` and ``demo`` take (~1.7 M kernels: the Kineto
file is then ~70 MB, and the demo simulates its whole run up front)."""


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be finite: {text!r}")
    return v


def bounded_float(lo: float, hi: float, what: str) -> Callable[[str], float]:
    """An argument type: a number in ``[lo, hi]`` (``lo`` may be 0, meaning > 0); ``what``
    says the unit in the message (a poll interval of 1e308 s killed serve's poller thread,
    a noise floor of 5 read as 500 %)."""

    def parse(text: str) -> float:
        v = positive_float(text)
        if not lo <= v <= hi:
            span = f"over 0 and at most {hi:g}" if lo == 0 else f"from {lo:g} to {hi:g}"
            raise argparse.ArgumentTypeError(f"must be {span} {what}: {text!r}")
        return v

    parse.__name__ = "number"  # argparse names the type in its message
    return parse


def nonempty_path(text: str) -> Path:
    """A path argument that is not the empty string (``Path('')`` is the current directory:
    ``simulate --out ''`` wrote its files there)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return Path(text)


def print_warnings(*groups: Iterable[str]) -> None:
    """Each distinct line of ``groups``, in order, as ``ppwtop: warning: …`` on stderr: the
    notes of the readers, the merge and the snapshot, printed alike by every command."""
    for w in dict.fromkeys(w for g in groups for w in g):
        print(f"ppwtop: warning: {one_line(w)}", file=sys.stderr)


def require_power_for_gpus(command: str, power_gpus: object, power: object) -> None:
    """``--power-gpus`` maps a ``--power`` log's GPUs: without ``--power``, a usage error."""
    if power_gpus is not None and not power:
        raise UsageError(f"ppwtop {command}: --power-gpus maps a --power log's GPUs: give "
                         "--power")


def gpu_list(text: str) -> list[int]:
    """``--power-gpus``: comma-separated GPU indices, each a small non-negative integer, no
    index twice (``3`` or ``3,5``: a job's ``CUDA_VISIBLE_DEVICES``)."""
    parts = [t.strip() for t in text.split(",")]
    if not all(t.isdigit() and t.isascii() and int(t) <= 1023 for t in parts):
        raise argparse.ArgumentTypeError(
            f"not a list of GPU indices (0-1023, comma-separated, as 3 or 3,5): {text!r}")
    out = [int(t) for t in parts]
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"a GPU index appears twice: {text!r}")
    return out


def utf8_text(text: str) -> str:
    """A text argument written into an output file (a title, a range name, a zone): valid
    UTF-8.  Argument bytes that are not arrive as lone surrogates, which no UTF-8 file holds."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"not valid UTF-8: {text!r}") from None
    return text


MAX_SESSION_SECONDS = 1e7
"""The longest ``--seconds`` a live session takes (~116 days; beyond, its nanoseconds
overflow)."""


session_seconds = bounded_float(0.0, MAX_SESSION_SECONDS, "s")
"""A live session's ``--seconds``: > 0, finite, at most ``MAX_SESSION_SECONDS``."""

sim_seconds = bounded_float(1.0, MAX_SIM_SECONDS, "s")
"""``simulate``'s and ``demo``'s ``--seconds``: 1 to ``MAX_SIM_SECONDS`` (both simulate the
whole run up front)."""


def seed_int(text: str) -> int:
    """A simulator seed: a whole number ≥ 0 (numpy's generators take no negative seed) and
    below 2**63 (the seed is written into JSON, which ppwtop keeps to 64-bit integers)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0: {text!r}")
    if v >= 2**63:
        raise argparse.ArgumentTypeError(f"must be below 2**63: {text!r}")
    return v


def not_built(command: str, issue: int, argv: list[str]) -> int:
    """Body of a contract subcommand that has not landed: answers --help, else exit 2."""
    from ppwtop.errors import NotBuiltError

    if "-h" in argv or "--help" in argv:
        print(f"usage: ppwtop {command} ...\n\nNot built yet (issue #{issue}).")
        return 0
    raise NotBuiltError(command, issue)
