"""`ppwtop record -o FILE [--seconds S] [--backend ...] -- CMD ...`: headless recording.

The same as ``ppwtop run --headless --record FILE``: launch CMD with the agent, record until
it exits (or for S seconds), print a one-line summary.
"""

from __future__ import annotations

from pathlib import Path

from ppwtop.cli.common import parser, session_seconds
from ppwtop.cli.run import add_live_options, check_gpu, split_command


def main(argv: list[str]) -> int:
    ap = parser("record", "Headless recording of a command to a .ppw file.  Usage: "
                          "ppwtop record -o FILE [options] -- CMD [ARGS...]")
    ap.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                    help="the .ppw recording to write")
    ap.add_argument("--seconds", type=session_seconds, default=None,
                    help="stop recording after S seconds (the command keeps running)")
    add_live_options(ap)
    opts, command = split_command(argv)
    args = ap.parse_args(opts)
    check_gpu(args.gpu)
    from ppwtop.live.launch import run_command

    return run_command(command, record=args.output, headless=True, seconds=args.seconds,
                       backend=args.backend, gpu=args.gpu, scenario=args.scenario,
                       seed=args.seed, verb="record")
