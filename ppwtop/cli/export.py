"""`ppwtop export INPUT --perfetto OUT.json [--snapshot SNAPSHOT]`.

Owns the command line only: decides whether INPUT is a snapshot or a trace (Kineto JSON,
nsys SQLite, .ppw recording), builds the Chrome/Perfetto trace-event document with
:mod:`ppwtop.exporters.perfetto` and writes it.
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

from ppwtop.cli.common import parser
from ppwtop.errors import InputError

SNAPSHOT_TAG = b'"ppwtop.snapshot/1"'


def is_snapshot(path: str | Path) -> bool:
    """True when the file is a ppwtop snapshot (its schema tag sits in the first bytes)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            head = f.read(65536)
    except FileNotFoundError:
        raise InputError(p, "no such file") from None
    except IsADirectoryError:
        raise InputError(p, "is a directory, not a file") from None
    except OSError as e:
        raise InputError(p, f"cannot read ({e.strerror or e})") from None
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 65536)
        except zlib.error:
            return False
    return SNAPSHOT_TAG in head[:4096]


def main(argv: list[str]) -> int:
    p = parser("export", "Export a trace (Kineto JSON, nsys SQLite, .ppw recording) or a "
                         "snapshot as a Chrome/Perfetto trace with power/clock counter tracks "
                         "and energy-annotated slices.")
    p.add_argument("input", metavar="INPUT", help="trace or snapshot file")
    p.add_argument("--perfetto", metavar="OUT.json", required=True,
                   help="write the Chrome trace-event JSON here (open in ui.perfetto.dev)")
    p.add_argument("--snapshot", metavar="SNAPSHOT",
                   help="for a trace: give each record its class's energy from this snapshot "
                        "(class energy x duration share) instead of the engine's")
    args = p.parse_args(argv)

    from ppwtop.exporters.perfetto import export_snapshot, export_trace, write_perfetto
    from ppwtop.report import load_snapshot

    if is_snapshot(args.input):
        if args.snapshot:
            raise InputError(args.snapshot, "--snapshot only applies when INPUT is a trace")
        doc = export_snapshot(load_snapshot(args.input), source=str(args.input))
    else:
        from ppwtop.importers import load_trace

        snap = load_snapshot(args.snapshot) if args.snapshot else None
        trace = load_trace(args.input)
        doc = export_trace(trace, snap, source=str(args.input))
    write_perfetto(doc, args.perfetto)
    md = doc["metadata"]
    n = sum(1 for e in doc["traceEvents"] if e["ph"] != "M")
    print(f"wrote {n} events to {args.perfetto} (energy: {md['energy_method']}, kernels "
          f"{md['kernel_energy_j']:.4g} J)", file=sys.stderr)
    return 0

