"""Entry point: dispatches ``ppwtop <command>`` to ``ppwtop.cli.<command>.main(argv)``.

Owns the command table, ``--version``/``--help``, and the rule that a user error is one
``ppwtop: error:`` line with exit 2 (3 for a gated regression), never a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from ppwtop import __version__
from ppwtop.errors import PpwtopError, Regression, one_line

COMMANDS: dict[str, str] = {
    "demo": "the live TUI on the built-in simulated GPU (no hardware needed)",
    "simulate": "write a simulated Kineto trace, nvidia-smi CSV and ground truth",
    "attribute": "offline attribution of a trace (+ power log) to a snapshot JSON",
    "run": "launch a command with the in-process agent (live TUI or headless recording)",
    "attach": "inject the agent into a running Python process",
    "record": "headless recording of a command to a .ppw file (a running process: "
              "attach --headless --record)",
    "replay": "the live TUI driven by a recording",
    "show": "the TUI on one snapshot",
    "compare": "the TUI compare screen, two snapshots side by side",
    "diff": "verdict on two snapshots (exit 3 on regression with --fail-on-regression)",
    "report": "the perf-per-watt optimization report (Markdown or HTML)",
    "export": "Chrome/Perfetto trace with power counters and energy-annotated slices",
    "serve": "Prometheus exporter of attributed energy",
}


def _usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = [
        "usage: ppwtop [--version] <command> [options]",
        "",
        "A top for GPU energy: joules per kernel, copy and idle cause, with error bars.",
        "",
        "commands:",
    ]
    lines += [f"  {c.ljust(width)}  {d}" for c, d in COMMANDS.items()]
    lines += ["", "Run 'ppwtop <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if not args:  # the usage on stdout, and the one error line the contract promises
            print(_usage())
            raise PpwtopError("a command is required (see 'ppwtop --help')")
        if args[0] in ("-h", "--help"):
            print(_usage())
            return 0
        if args[0] == "--version":
            print(f"ppwtop {__version__}")
            return 0
        name = args[0]
        if name not in COMMANDS:
            raise PpwtopError(f"unknown command {name!r} (see 'ppwtop --help')")
        module = importlib.import_module(f"ppwtop.cli.{name}")
        rc: int = module.main(args[1:])
        return rc
    except Regression as e:
        if str(e):
            print(f"ppwtop: {one_line(str(e))}", file=sys.stderr)
        return Regression.exit_code
    except PpwtopError as e:
        print(f"ppwtop: error: {one_line(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:  # Ctrl-C; a live command's SIGTERM/SIGHUP says which
        print(f"ppwtop: {getattr(e, 'reason', 'interrupted')}", file=sys.stderr)
        return int(getattr(e, "exit_code", 130))
    except BrokenPipeError:
        return 0
    except Exception as e:
        if os.environ.get("PPWTOP_DEBUG", "") not in ("", "0"):
            raise
        print(
            f"ppwtop: error: internal error: {type(e).__name__}: {one_line(str(e))} "
            "(set PPWTOP_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 2


def entry() -> None:
    sys.exit(main())
