"""`ppwtop show SNAPSHOT`: the TUI on one snapshot JSON (a StaticFeed)."""

from __future__ import annotations

from pathlib import Path

import orjson

from attribution.snapshot import Snapshot
from ppwtop.cli.common import parser
from ppwtop.errors import InputError


def load_snapshot(path: str | Path) -> Snapshot:
    """Read a ``ppwtop.snapshot/1`` JSON file; any problem becomes an InputError."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror or e}") from None
    try:
        d = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InputError(p, f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise InputError(p, "not a snapshot (top level is not an object)")
    try:
        return Snapshot.from_dict(d)
    except (ValueError, TypeError) as e:
        raise InputError(p, str(e)) from None


def main(argv: list[str]) -> int:
    ap = parser("show", "The TUI on one snapshot (ppwtop.snapshot/1 JSON).")
    ap.add_argument("snapshot", help="snapshot JSON written by attribute, demo or the TUI")
    ap.add_argument("--export-dir", type=Path, default=None,
                    help="where 'e' writes snapshots (default: the current directory)")
    args = ap.parse_args(argv)
    snap = load_snapshot(args.snapshot)
    from ppwtop.tui.app import PpwtopApp
    from ppwtop.tui.feed import StaticFeed

    PpwtopApp(StaticFeed(snap, label=Path(args.snapshot).name),
              export_dir=args.export_dir).run()
    return 0
