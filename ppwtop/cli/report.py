"""`ppwtop report SNAPSHOT [--baseline SNAPSHOT] -o FILE.md|FILE.html`.

Owns the command line only: reads the snapshot(s), picks the format from the ``-o`` suffix and
writes the perf-per-watt optimization report (built by :mod:`ppwtop.report`).
"""

from __future__ import annotations

import sys

from ppwtop.cli.common import parser, utf8_text
from ppwtop.report import load_snapshot, report_format, write_report
from ppwtop.snapshot_io import check_output


def main(argv: list[str]) -> int:
    p = parser("report", "The perf-per-watt optimization report of a snapshot (Markdown or "
                         "self-contained HTML), with before/after columns and a verdict when "
                         "a baseline is given.")
    p.add_argument("snapshot", metavar="SNAPSHOT", help="snapshot (ppwtop.snapshot/1 JSON)")
    p.add_argument("--baseline", metavar="SNAPSHOT",
                   help="baseline snapshot: adds before/after columns and the diff verdict")
    p.add_argument("-o", "--output", metavar="FILE", required=True,
                   help="output file; the format follows the suffix (.md or .html)")
    p.add_argument("--title", default="", type=utf8_text, help="report title")
    args = p.parse_args(argv)

    report_format(args.output)  # fail on a bad suffix before reading anything
    check_output(args.output, [args.snapshot, args.baseline])
    snap = load_snapshot(args.snapshot)
    base = load_snapshot(args.baseline) if args.baseline else None
    fmt = write_report(snap, args.output, base, args.title)
    print(f"wrote {fmt} report to {args.output}", file=sys.stderr)
    return 0
