"""The table of every Kineto trace under /work/shared/data/real as ppwtop's importer reads it.

Owns the generator of the table in docs/importers_kineto.md.  Prints Markdown to stdout:
``python benchmarks/importer_table.py > /tmp/table.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ppwtop.errors import InputError
from ppwtop.importers.kineto import load_kineto

ROOT = Path("/work/shared/data/real")
SOURCES = ("hta", "tracelens", "kineto")


def rows() -> list[str]:
    out = ["| file | schema | kernels | memcpy | memset | runtime/driver calls | markers "
           "(steps) | GPU span ms | device | notes |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for src in SOURCES:
        for p in sorted((ROOT / src).rglob("*.json*")):
            rel = p.relative_to(ROOT)
            try:
                t = load_kineto(p)
            except InputError as e:
                out.append(f"| `{rel}` | - | - | - | - | - | - | - | - | refused: {e.what} |")
                continue
            span = t.gpu_span_ns()
            span_ms = f"{(span[1] - span[0]) / 1e6:.1f}" if span else "-"
            steps = int((t.markers.kind == 4).sum())
            names = sorted({d.name for d in t.devices if d.name}) or ["(none)"]
            notes = "; ".join(t.meta["notes"]) or ""
            out.append(
                f"| `{rel}` | {t.meta['schema']} | {len(t.kernels)} | {len(t.copies)} | "
                f"{len(t.memsets)} | {len(t.apis)} | {len(t.markers)} ({steps}) | {span_ms} | "
                f"{', '.join(names)} | {notes} |")
    return out


def main() -> int:
    if not ROOT.is_dir():
        print(f"{ROOT} not found", file=sys.stderr)
        return 1
    print("\n".join(rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
