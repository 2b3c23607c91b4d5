"""`ppwtop run [options] -- CMD ...`: launch CMD with the in-process agent.

The live TUI (or, with ``--headless``, no screen) over the session; ``--record FILE`` keeps
everything in a ``.ppw`` recording that ``ppwtop replay`` and ``ppwtop attribute --trace``
read.  ``--backend sim`` runs the whole live path against the simulator (no GPU needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ppwtop.cli.common import Parser, parser, seed_int, session_seconds
from ppwtop.errors import PpwtopError


def add_live_options(ap: Parser) -> None:
    ap.add_argument("--backend", choices=("cupti", "sim"), default="cupti",
                    help="cupti: the real GPU (default); sim: the simulator behind a fake "
                         "libcupti and a fake NVML (no GPU needed)")
    ap.add_argument("--gpu", metavar="MODEL", default=None,
                    help="sensor/power preset for attribution; with --backend sim also the "
                         "simulated GPU")
    ap.add_argument("--scenario", default=None,
                    help="with --backend sim: simulator scenario (default: demo)")
    ap.add_argument("--seed", type=seed_int, default=0,
                    help="with --backend sim: simulator seed (default: 0)")


def add_session_options(ap: Parser, what: str) -> None:
    """``--record``, ``--headless``, ``--seconds`` of the interactive live commands (``what``:
    "command" for run, "target" for attach)."""
    ap.add_argument("--record", type=Path, default=None, metavar="FILE",
                    help="write a .ppw recording of the session")
    ap.add_argument("--headless", action="store_true",
                    help=f"no screen: collect (and record) until the {what} exits or --seconds")
    ap.add_argument("--seconds", type=session_seconds, default=None,
                    help=f"stop collecting after S seconds (the {what} keeps running)")


def check_headless(args: Any, verb: str) -> None:
    if args.headless and args.record is None:
        raise PpwtopError(f"ppwtop {verb}: --headless needs --record FILE (nothing would be "
                          "kept)")


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def check_gpu(gpu: str | None) -> None:
    if gpu is None:
        return
    from attribution.presets import get_preset

    try:
        get_preset(gpu)
    except KeyError as e:
        raise PpwtopError(f"--gpu: {e.args[0]}") from None


def main(argv: list[str]) -> int:
    ap = parser("run", "Launch a command with the in-process agent: live TUI, or headless "
                       "recording.  Usage: ppwtop run [options] -- CMD [ARGS...]")
    add_session_options(ap, "command")
    add_live_options(ap)
    opts, command = split_command(argv)
    args = ap.parse_args(opts)
    check_headless(args, "run")
    check_gpu(args.gpu)
    from ppwtop.live.launch import run_command

    return run_command(command, record=args.record, headless=args.headless,
                       seconds=args.seconds, backend=args.backend, gpu=args.gpu,
                       scenario=args.scenario, seed=args.seed, verb="run")
