"""`ppwtop replay FILE`: the live TUI driven by a recording, in wall-clock time.

FILE is a ``.ppw`` recording (Kineto JSON and nsys SQLite traces are accepted too).  The
replay follows DemoFeed's clock (``--speed`` x real time); when it reaches the end of the
recording the TUI shows "target disconnected" and keeps the last data.  ``--headless``
replays ``--seconds`` of the recording at once (default: all of it), writes the snapshot to
``--export`` and prints the summary ``ppwtop demo --headless`` prints.
"""

from __future__ import annotations

from pathlib import Path

from ppwtop.cli.common import UsageError, parser, positive_float, print_warnings
from ppwtop.errors import PpwtopError
from ppwtop.terminal import need_terminal


def main(argv: list[str]) -> int:
    ap = parser("replay", "The live TUI driven by a recording (.ppw, Kineto or nsys).")
    ap.add_argument("file", type=Path, metavar="FILE", help="ppwtop recording (.ppw)")
    ap.add_argument("--speed", type=positive_float, default=1.0,
                    help="replay speed, x real time (default: 1)")
    ap.add_argument("--gpu", metavar="MODEL", default=None,
                    help="sensor/power preset (default: from the recorded device name)")
    ap.add_argument("--headless", action="store_true",
                    help="no screen: attribute the recording at once, print a summary")
    ap.add_argument("--seconds", type=positive_float, default=None,
                    help="with --headless: only the first S seconds (default: all)")
    ap.add_argument("--export", type=Path, default=None,
                    help="with --headless: write the snapshot JSON here")
    ap.add_argument("--sla-ms", type=positive_float, default=None, metavar="X",
                    help="step-latency SLA: the header shows p95/p99 against it and the "
                         "share of steps within it")
    ap.add_argument("--export-dir", type=Path, default=None,
                    help="where 'e' in the TUI writes snapshots (default: current directory)")
    args = ap.parse_args(argv)
    if args.gpu is not None:
        from attribution.presets import get_preset

        try:
            get_preset(args.gpu)
        except KeyError as e:
            raise UsageError(f"ppwtop replay: --gpu: {e.args[0]}") from None
    if not args.headless and (args.export is not None or args.seconds is not None):
        raise PpwtopError("--export and --seconds need --headless "
                          "(press 'e' in the TUI to export)")
    if args.export is not None:
        from ppwtop.snapshot_io import check_output

        check_output(args.export, [args.file])
    from ppwtop.replay_feed import ReplayFeed

    feed = ReplayFeed.from_file(args.file, gpu=args.gpu, speed=args.speed)
    if args.headless:
        from ppwtop.cli.demo import summary

        if args.seconds is None:
            snap = feed.final_snapshot()
        else:
            # min before int: 1e300 s (inf ns) means all of it, not an OverflowError
            end_ns = feed.start_ns + int(min(args.seconds * 1e9, feed.end_ns - feed.start_ns))
            snap = feed.snapshot_at(end_ns, end_ns - feed.start_ns + 1, 200)
        if snap is None:
            raise PpwtopError(f"{args.file}: no GPU activity in the replayed span")
        from ppwtop.panel_feed import with_sla

        snap = with_sla(snap, args.sla_ms)
        # the reader's notes, then the snapshot's own lines (no power, a short run, ...), as
        # `attribute` prints them: a trace without power used to replay as 0 J with no word
        print_warnings(feed.notes, snap.warnings)
        if args.export is not None:
            from ppwtop.snapshot_io import write_snapshot

            write_snapshot(snap, args.export)
        print(summary(snap).replace("ppwtop demo:", f"ppwtop replay {args.file.name}:", 1))
        return 0
    need_terminal("replay", "use --headless")
    from ppwtop.panel_feed import PanelFeed
    from ppwtop.tui.app import PpwtopApp

    app = PpwtopApp(PanelFeed(feed, sla_ms=args.sla_ms), export_dir=args.export_dir)
    return app.run_for_status()
