"""`ppwtop diff A B [--json] [--fail-on-regression]`: the verdict on two snapshots.

Owns reading the two ``ppwtop.snapshot/1`` files (and an optional owners file), printing the
verdict (human-readable, or the ``ppwtop.diff/1`` JSON with ``--json``) and the exit-3 gate.
The comparison itself is :func:`attribution.diff.diff`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import orjson

from attribution.diff import DiffResult, diff
from attribution.owners import OwnerMap, load_owners
from ppwtop.cli.common import bounded_float, parser, seed_int
from ppwtop.errors import InputError, Regression
from ppwtop.fileio import read_bytes
from ppwtop.snapshot_io import read_snapshot

TOP_MECHANISMS = 5


def main(argv: list[str]) -> int:
    p = parser("diff", "Verdict on two snapshots: did the candidate use more energy "
                       "per step (or per second) than the baseline?")
    p.add_argument("baseline", metavar="A", help="baseline snapshot (ppwtop.snapshot/1 JSON)")
    p.add_argument("candidate", metavar="B", help="candidate snapshot (ppwtop.snapshot/1 JSON)")
    p.add_argument("--json", action="store_true", help="print the ppwtop.diff/1 JSON")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 3 after printing when the verdict is regression")
    p.add_argument("--owners", metavar="FILE", help="owners file (TOML) to name who owns "
                   "each mechanism")
    p.add_argument("--noise-floor", type=bounded_float(0.0, 1.0, "(a fraction, 1 = 100%)"),
                   default=0.02, metavar="FRACTION",
                   help="relative change treated as noise, over 0 and at most 1 (default "
                        "0.02 = 2%%)")
    p.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed (default 0)")
    args = p.parse_args(argv)

    base = read_snapshot(args.baseline)
    cand = read_snapshot(args.candidate)
    owners = read_owners(args.owners) if args.owners else None
    try:
        result = diff(base, cand, noise_floor=args.noise_floor, seed=args.seed, owners=owners)
    except (ValueError, TypeError, ZeroDivisionError) as e:  # numbers missing or null
        raise InputError(f"{args.baseline} vs {args.candidate}",
                         f"cannot compare: {e}") from None

    if args.json:
        sys.stdout.buffer.write(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2))
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
    else:
        print_human(result, sys.stdout)
    if args.fail_on_regression and result.verdict == "regression":
        raise Regression(f"regression: {_metric_line(result)}")
    return 0


def read_owners(path: str | Path) -> OwnerMap:
    data = read_bytes(path)
    try:
        return load_owners(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(path, "owners file is not UTF-8 text") from None
    except ValueError as e:
        raise InputError(path, str(e)) from None


def _unit(result: DiffResult) -> str:
    return "J/step" if result.metric == "energy_per_step_j" else "W"


def _metric_line(r: DiffResult) -> str:
    u = _unit(r)
    rel = "" if r.relative_delta is None else f" ({r.relative_delta:+.1%})"
    return (f"{r.metric} {r.baseline:.4g} -> {r.candidate:.4g} {u}, "
            f"delta {r.delta:+.4g}{rel} [90% CI {r.delta_ci[0]:+.4g}, {r.delta_ci[1]:+.4g}]")


def print_human(r: DiffResult, out: TextIO) -> None:
    out.write(f"verdict: {r.verdict}\n")
    out.write(f"  {_metric_line(r)}\n")
    factors = ", ".join(f"{k} {v:.2f}" for k, v in r.comparability_factors.items())
    out.write(f"  comparability {r.comparability:.2f} ({factors})\n")
    out.write(f"  noise floor +-{r.noise_floor:.1%}, interval: {r.interval_method}\n")
    shown = r.mechanisms[:TOP_MECHANISMS]
    if shown:
        per = "per step" if r.metric == "energy_per_step_j" else "per second"
        share_of = ("share of delta" if r.delta_is_clear
                    else "share n/a: the delta's 90 % interval spans 0")
        out.write(f"top mechanisms (delta J {per}, {share_of}):\n")
        for m in shown:  # numbers first: a kernel's name runs to hundreds of characters
            owner = f"  (owner: {m.owner})" if m.owner is not None else ""
            share = f"{m.share_of_delta:+7.1%}" if r.delta_is_clear else f"{'n/a':>7}"
            out.write(f"  {m.delta_j:+10.4g}  {share}  {m.mechanism}{owner}\n")
    if r.reasons:
        out.write("why:\n")
        for why in r.reasons:
            out.write(f"  - {why}\n")
