"""`ppwtop compare A B`: the TUI compare screen, baseline A and candidate B side by side."""

from __future__ import annotations

from pathlib import Path

from ppwtop.cli.common import parser
from ppwtop.snapshot_io import read_snapshot as load_snapshot
from ppwtop.terminal import need_terminal


def main(argv: list[str]) -> int:
    ap = parser("compare", "The TUI compare screen: two snapshots side by side.")
    ap.add_argument("baseline", help="baseline snapshot JSON")
    ap.add_argument("candidate", help="candidate snapshot JSON")
    args = ap.parse_args(argv)
    a = load_snapshot(args.baseline)
    b = load_snapshot(args.candidate)
    need_terminal("compare", "for a verdict without one, use 'ppwtop diff A B'")
    from ppwtop.tui.app import PpwtopApp
    from ppwtop.tui.feed import StaticFeed

    app = PpwtopApp(StaticFeed(b, label=Path(args.candidate).name), baseline=a,
                    start_compare=True,
                    names=(Path(args.baseline).name, Path(args.candidate).name))
    return app.run_for_status()
