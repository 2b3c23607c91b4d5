"""`ppwtop show SNAPSHOT`: the TUI on one snapshot JSON (a StaticFeed)."""

from __future__ import annotations

from pathlib import Path

from ppwtop.cli.common import parser
from ppwtop.snapshot_io import read_snapshot
from ppwtop.terminal import need_terminal


def main(argv: list[str]) -> int:
    ap = parser("show", "The TUI on one snapshot (ppwtop.snapshot/1 JSON).")
    ap.add_argument("snapshot", help="snapshot JSON written by attribute, demo or the TUI")
    ap.add_argument("--export-dir", type=Path, default=None,
                    help="where 'e' writes snapshots (default: the current directory)")
    args = ap.parse_args(argv)
    snap = read_snapshot(args.snapshot)
    need_terminal("show", "for a file, use 'ppwtop report SNAPSHOT -o FILE.md'")
    from ppwtop.tui.app import PpwtopApp
    from ppwtop.tui.feed import StaticFeed

    app = PpwtopApp(StaticFeed(snap, label=Path(args.snapshot).name),
                    export_dir=args.export_dir)
    return app.run_for_status()
