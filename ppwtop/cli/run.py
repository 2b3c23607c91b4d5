"""`ppwtop run [options] -- CMD ...`: launch CMD with the in-process agent.

The live TUI (or, with ``--headless``, no screen) over the session; ``--record FILE`` keeps
everything in a ``.ppw`` recording that ``ppwtop replay`` and ``ppwtop attribute --trace``
read.  ``--backend sim`` runs the whole live path against the simulator (no GPU needed).
"""

from __future__ import annotations

from pathlib import Path

from ppwtop.cli.common import Parser, parser, positive_float
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
    ap.add_argument("--seed", type=int, default=0,
                    help="with --backend sim: simulator seed (default: 0)")


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
    ap.add_argument("--record", type=Path, default=None, metavar="FILE",
                    help="write a .ppw recording of the run")
    ap.add_argument("--headless", action="store_true",
                    help="no screen: collect (and record) until the command exits or --seconds")
    ap.add_argument("--seconds", type=positive_float, default=None,
                    help="stop collecting after S seconds (the command keeps running)")
    add_live_options(ap)
    opts, command = split_command(argv)
    args = ap.parse_args(opts)
    if args.headless and args.record is None:
        raise PpwtopError("ppwtop run: --headless needs --record FILE (nothing would be kept)")
    check_gpu(args.gpu)
    from ppwtop.live.launch import run_command

    return run_command(command, record=args.record, headless=args.headless,
                       seconds=args.seconds, backend=args.backend, gpu=args.gpu,
                       scenario=args.scenario, seed=args.seed, verb="run")
