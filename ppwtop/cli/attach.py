"""`ppwtop attach PID [options]`: inject the agent into a running Python process.

The live TUI (or, with ``--headless``, no screen) over the session; ``--record FILE`` keeps it
in a ``.ppw`` recording.  Injection and its one-line refusals live in :mod:`ppwtop.inject`
(docs/attach.md); the session is the one ``ppwtop run`` serves.  Late attach cannot see
work that completed before it, nor NVTX ranges: the run metadata says so.
"""

from __future__ import annotations

from ppwtop.cli.common import parser
from ppwtop.cli.run import add_live_options, add_session_options, check_gpu, check_headless
from ppwtop.errors import PpwtopError


def main(argv: list[str]) -> int:
    ap = parser("attach", "Inject the agent into a running Python process (CUDA work it "
                          "launches from now on is attributed): live TUI, or headless "
                          "recording.")
    ap.add_argument("pid", type=int, metavar="PID", help="the Python process to attach to")
    add_session_options(ap, "target")
    add_live_options(ap)
    args = ap.parse_args(argv)
    if args.pid <= 0:
        raise PpwtopError(f"PID: not a process id: {args.pid}")
    check_headless(args, "attach")
    check_gpu(args.gpu)
    from ppwtop.live.launch import attach_process

    return attach_process(args.pid, record=args.record, headless=args.headless,
                          seconds=args.seconds, backend=args.backend, gpu=args.gpu,
                          scenario=args.scenario, seed=args.seed)
