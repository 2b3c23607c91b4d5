"""`ppwtop attach PID [options]`: inject the agent into a running Python process.

The live TUI (or, with ``--headless``, no screen) over the session; ``--record FILE`` keeps it
in a ``.ppw`` recording.  Injection and its one-line refusals live in :mod:`ppwtop.inject`
(docs/attach.md); the session is the one ``ppwtop run`` serves.  Late attach cannot see
work that completed before it, nor NVTX ranges: the run metadata says so.
"""

from __future__ import annotations

from pathlib import Path

from ppwtop.cli.common import parser, positive_float
from ppwtop.cli.run import add_live_options, check_gpu
from ppwtop.errors import PpwtopError


def main(argv: list[str]) -> int:
    ap = parser("attach", "Inject the agent into a running Python process (CUDA work it "
                          "launches from now on is attributed): live TUI, or headless "
                          "recording.")
    ap.add_argument("pid", type=int, metavar="PID", help="the Python process to attach to")
    ap.add_argument("--record", type=Path, default=None, metavar="FILE",
                    help="write a .ppw recording of the session")
    ap.add_argument("--headless", action="store_true",
                    help="no screen: collect (and record) until the target exits or --seconds")
    ap.add_argument("--seconds", type=positive_float, default=None,
                    help="stop collecting after S seconds (the target keeps running)")
    add_live_options(ap)
    args = ap.parse_args(argv)
    if args.pid <= 0:
        raise PpwtopError(f"PID: not a process id: {args.pid}")
    if args.headless and args.record is None:
        raise PpwtopError("ppwtop attach: --headless needs --record FILE (nothing would be "
                          "kept)")
    check_gpu(args.gpu)
    from ppwtop.live.launch import attach_process

    return attach_process(args.pid, record=args.record, headless=args.headless,
                          seconds=args.seconds, backend=args.backend, gpu=args.gpu,
                          scenario=args.scenario, seed=args.seed)
