"""The real transient-response runs with their trailing idle in the window, the
quiet-readings hold on and off, against the PMD meter (docs/accuracy.md, "Real meter rows").

``accuracy_real``'s rows end at the last kernel; a profiler that keeps running records the
idle after it too.  This runs each row with a host call spanning to the last edge of
``timestamps.csv`` twice: as the engine is, and with ``quiet_idle`` answering None (held
P_idle then goes to the board table's value, as before 2026-12-05), and prints both.

    PYTHONPATH=. python benchmarks/real_trailing_idle.py [--data ../shared/data/real]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attribution.engine import build
from benchmarks.accuracy_real import FIELDS, RUNS, real_row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "data" / "real")
    args = ap.parse_args()
    names = vars(build)  # build's own name for the rule, patched below
    rule = names["quiet_idle"]
    for label, folder, preset, name in RUNS:
        if not label.startswith("TR/"):
            continue
        for field in FIELDS:
            rows = []
            for on in (False, True):
                names["quiet_idle"] = rule if on else (lambda *a, **k: None)
                try:
                    rows.append(real_row(args.data, label, folder, preset=preset,
                                         device_name=name, field=field, trailing_idle=True))
                finally:
                    names["quiet_idle"] = rule
            if "skipped" in rows[0]:
                continue
            for said, r in zip(("off", "on "), rows, strict=True):
                print(f"{label:9s} {field:8s} quiet {said}  P_idle {r['engine_idle_w']:6.1f} W "
                      f"(meter idle {r['meter_idle_w']:5.1f})  kernel full "
                      f"{100 * r['engine_full_err']:+6.2f} %  dynamic "
                      f"{100 * r['engine_dyn_err']:+7.2f} %")


if __name__ == "__main__":
    main()
