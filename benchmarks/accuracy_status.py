"""Where issue #3's accuracy goals stand, computed from the kept accuracy suites.

Owns one thing: reading the JSON files ``benchmarks/accuracy.py`` keeps (``SUITES``) and
judging each of the issue's accuracy goals on each suite, so that the status table at the
top of docs/accuracy.md is the files' own numbers rather than a transcription.  The table
sits between two marker lines in the doc; ``--check`` fails (exit 1) when the doc's copy
differs from what the kept files say (the test suite runs it), ``--write`` rewrites it.

    python benchmarks/accuracy_status.py                      # print the table
    python benchmarks/accuracy_status.py --write docs/accuracy.md
    python benchmarks/accuracy_status.py --check docs/accuracy.md

The goals (issue #3, "Measure"): energy-weighted error of per-class dynamic energy ≤ 5 % over
resolvable classes on every preset (≤ 3 % on v100 and rtx3090), pooled 90 % coverage
85–95 %, inseparable classes flagged or covered, idle error ≤ 3 % of the total, closure
≤ 0.1 %; on the real meter runs, kernel-interval energy within 5 % of the meter.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
BEGIN = "<!-- accuracy_status:begin (benchmarks/accuracy_status.py --write) -->"
END = "<!-- accuracy_status:end -->"
GPUS = ("v100", "a100", "h100", "h200", "rtx3090", "rtx4090")
TIGHT = ("v100", "rtx3090")  # presets whose goal is 3 %
ERR_GOAL, TIGHT_GOAL, IDLE_GOAL, CLOSURE_GOAL, REAL_GOAL = 0.05, 0.03, 0.03, 0.001, 0.05
COVERAGE_GOAL = (0.85, 0.95)


@dataclasses.dataclass(frozen=True)
class Suite:
    """One kept run of ``benchmarks/accuracy.py``: its column name, file and command."""

    name: str
    file: str
    command: str


SUITES = (
    Suite("seed 7", "accuracy_results.json", "accuracy.py"),
    Suite("seed 3", "accuracy_seed3_results.json", "accuracy.py --seed 3"),
    Suite("20 s", "accuracy_20s_results.json",
          "accuracy.py --seconds 20 --seed 11 --workload-seed 5"),
    Suite("drawn boards", "accuracy_drawn_results.json", "accuracy.py --board-draw"),
    Suite("files", "accuracy_files_results.json", "accuracy.py --files"),
    Suite("locked polls", "accuracy_files_locked_results.json",
          "accuracy.py --files --locked-polls"),
)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One goal judged on one suite: the figure shown and whether the goal is met there
    (None: a figure shown for context, no goal)."""

    text: str
    met: bool | None


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f} %"


def _resolved(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r["resolvable"] > 0 and r["err"] is not None]


def err_goal(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Rows with a resolvable class whose error is within their preset's goal."""
    res = _resolved(rows)
    ok = [r for r in res if r["err"] <= (TIGHT_GOAL if r["gpu"] in TIGHT else ERR_GOAL)]
    worst = max((r["err"] for r in res), default=0.0)
    return Cell(f"{len(ok)} / {len(res)} rows (max {_pct(worst, 2)})", len(ok) == len(res))


def gain_beside(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Context: the worst row's error against the truth as the board's gain scales it (the
    part of the error no method corrects taken out: DESIGN.md's ±5 % sensor gain)."""
    res = [r for r in _resolved(rows) if r.get("err_vs_sensor_scale") is not None]
    return Cell(f"max {_pct(max((r['err_vs_sensor_scale'] for r in res), default=0.0))}", None)


def presets_goal(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """'On every preset': the presets with no resolvable class at all."""
    seen = [g for g in GPUS if any(r["gpu"] == g for r in rows)]
    empty = [g for g in seen if not any(r["resolvable"] for r in rows if r["gpu"] == g)]
    return Cell(f"none on {', '.join(empty)}" if empty else f"all {len(seen)}", not empty)


def tight_goal(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """The 3 % presets: rows with a resolvable class within 3 %, per preset."""
    parts, met = [], True
    for g in TIGHT:
        res = [r for r in _resolved(rows) if r["gpu"] == g]
        ok = sum(r["err"] <= TIGHT_GOAL for r in res)
        met = met and bool(res) and ok == len(res)
        parts.append(f"{g} {ok} / {len(res)}")
    return Cell(", ".join(parts), met)


def coverage_goal(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Pooled coverage of the resolvable classes' 90 % intervals."""
    n = sum(r["resolvable"] for r in rows)
    if not n:
        return Cell("no resolvable class", False)
    c = sum(r["covered"] for r in rows) / n
    return Cell(f"{_pct(c)} ({sum(r['covered'] for r in rows)} / {n})",
                COVERAGE_GOAL[0] <= c <= COVERAGE_GOAL[1])


def coverage_all(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Context: the same over every class, flagged or not."""
    n = sum(r["classes_with_ci"] for r in rows)
    c = sum(r["covered_all_classes"] for r in rows)
    return Cell(f"{_pct(c / max(n, 1))} ({c} / {n})", None)


def insep_goal(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Classes the scenario makes inseparable: flagged or covered."""
    n = sum(r["inseparable"] for r in rows)
    ok = sum(r["inseparable_ok"] for r in rows)
    return Cell(f"{ok} / {n}", ok == n)


def idle_goal(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Rows whose idle energy is within 3 % of the total; the worst row."""
    ok = sum(r["idle_err"] <= IDLE_GOAL for r in rows)
    w = max(rows, key=lambda r: r["idle_err"])
    return Cell(f"{ok} / {len(rows)} (max {_pct(w['idle_err'])}, {w['scenario']}/{w['gpu']})",
                ok == len(rows))


def closure_goal(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Rows whose partition closes to 0.1 %."""
    ok = sum(r["closure"] <= CLOSURE_GOAL for r in rows)
    return Cell(f"{ok} / {len(rows)} (max {_pct(max(r['closure'] for r in rows), 3)})",
                ok == len(rows))


def _median(v: Sequence[float]) -> float:
    s = sorted(x for x in v if x is not None and not math.isnan(x))
    return s[len(s) // 2] if s else float("nan")


def naive_beside(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Context: median error, ours / the naive time-overlap split, resolvable classes."""
    res = _resolved(rows)
    return Cell(f"{_pct(_median([r['err'] for r in res]))} / "
                f"{_pct(_median([r['naive_err'] for r in res]))}", None)


def all_classes(rows: Sequence[Mapping[str, Any]], consumer: bool) -> Cell:
    """Context: median error over all classes (flagged too), ours / naive, on the
    consumer presets or on the others."""
    sel = [r for r in rows if (r["gpu"] in ("rtx3090", "rtx4090")) == consumer]
    if not sel:
        return Cell("(not run)", None)
    return Cell(f"{_pct(_median([r['err_all_classes'] for r in sel]))} / "
                f"{_pct(_median([r['naive_err_all_classes'] for r in sel]))}", None)


def consumer_held(rows: Sequence[Mapping[str, Any]]) -> Cell:
    """Context: the consumer presets' classes (all flagged) whose interval holds the truth."""
    sel = [r for r in rows if r["gpu"] in ("rtx3090", "rtx4090")]
    n = sum(r["classes_with_ci"] for r in sel)
    c = sum(r["covered_all_classes"] for r in sel)
    return Cell(f"{_pct(c / n)} ({c} / {n})" if n else "(not run)", None)


GOALS: tuple[tuple[str, Callable[[Sequence[Mapping[str, Any]]], Cell]], ...] = (
    ("error ≤ 5 % (≤ 3 % v100, rtx3090), rows with a resolvable class", err_goal),
    ("… against the truth × the board's gain (context)", gain_beside),
    ("… on every preset: presets with a resolvable class", presets_goal),
    ("≤ 3 % on the tight presets, rows with a resolvable class", tight_goal),
    ("pooled 90 % coverage 85–95 %, resolvable classes", coverage_goal),
    ("coverage over every class, flagged too (context)", coverage_all),
    ("inseparable classes flagged or covered", insep_goal),
    ("idle energy within 3 % of the total", idle_goal),
    ("closure ≤ 0.1 %", closure_goal),
    ("median error, ours / naive split, resolvable classes (context)", naive_beside),
    ("median error over all classes, ours / naive: data-centre (context)",
     lambda rows: all_classes(rows, consumer=False)),
    ("… consumer presets, every class flagged (context)",
     lambda rows: all_classes(rows, consumer=True)),
    ("… consumer classes their (flagged) intervals hold (context)", consumer_held),
)


def _mark(cells: Sequence[Cell]) -> str:
    judged = [c.met for c in cells if c.met is not None]
    if not judged:
        return ""
    n_ok = sum(bool(m) for m in judged)
    return "**yes**" if n_ok == len(judged) else f"no ({n_ok} of {len(judged)} suites)"


def real_lines(real: Sequence[Mapping[str, Any]]) -> list[str]:
    """The real meter rows: full cost within 5 % of the meter, beside the naive figures."""
    rows = [r for r in real if "skipped" not in r]
    if not rows:
        return ["Real meter rows: not in the kept seed-7 file (run it with ../shared present)."]
    ok = sum(abs(r["engine_full_err"]) <= REAL_GOAL for r in rows)
    worst = max(rows, key=lambda r: abs(r["engine_full_err"]))
    naive = max(abs(r["naive_split_full_err"]) for r in rows)
    smi = max(abs(r["smi_integral_err"]) for r in rows)
    covers = sum(bool(r["ci_covers_meter"]) for r in rows)
    res = sum(bool(r.get("resolvable")) for r in rows)
    return [
        f"Real meter rows (seed-7 file; PMD meter as truth): kernel-interval energy within 5 % "
        f"of the meter on **{ok} of {len(rows)}** rows "
        f"(worst {100 * worst['engine_full_err']:+.2f} %, {worst['run']} `{worst['field']}`), "
        f"against up to {_pct(naive)} off for the naive "
        f"split and {_pct(smi)} for nvidia-smi × time; the dynamic interval holds the meter "
        f"on {covers} of {len(rows)}; {res} of {len(rows)} rows called resolvable.",
    ]


SHORT_RUNS = "short_runs_results.json"
"""The kept short-run sweep (``benchmarks/short_runs.py --out``), when present."""


def short_lines(short: Mapping[str, Any] | None) -> list[str]:
    """The short-run sweep: the coverage goal on 1-5 s runs, now and with the rules before,
    pooled and per duration."""
    if short is None:
        return []
    durations: Mapping[str, Any] = short["durations"]

    def pooled(tag: str) -> tuple[int, int]:
        return (sum(d[tag]["held"] for d in durations.values()),
                sum(d[tag]["resolvable"] for d in durations.values()))
    held, res = pooled("now")
    b_held, b_res = pooled("before")
    cov = held / max(res, 1)
    met = COVERAGE_GOAL[0] <= cov <= COVERAGE_GOAL[1]
    per = ", ".join(f"{k} s {d['now']['held']} / {d['now']['resolvable']}"
                    for k, d in durations.items())
    runs = sum(d["now"]["runs"] for d in durations.values())
    idle = sum(d["now"]["idle_over_3pct"] for d in durations.values())
    return [
        f"Short runs (`{short['command'].strip()}` → `benchmarks/{SHORT_RUNS}`, "
        f"{short.get('engine_version', '?')}, {str(short.get('date', '?'))[:10]}; "
        f"every scenario × preset at {', '.join(durations)} s, seeds "
        f"{', '.join(str(x) for x in short['seeds'])}: {runs} runs): the resolvable classes' "
        f"90 % intervals hold the truth on **{_pct(cov)}** ({held} / {res}; "
        f"{'met' if met else 'not met'} against 85–95 %), with the rules before "
        f"{_pct(b_held / max(b_res, 1))} ({b_held} / {b_res}); per duration {per}; "
        f"idle over 3 % of the total on {idle} of {runs} runs.",
    ]


def render(suites: Sequence[tuple[Suite, Mapping[str, Any]]],
           short: Mapping[str, Any] | None = None) -> str:
    """The Markdown block: one column per suite, one row per goal, and whether it is met
    on every suite."""
    head = "| goal (issue #3) | " + " | ".join(s.name for s, _ in suites) + " | met |"
    lines = [head, "|" + "---|" * (len(suites) + 2)]
    for label, judge in GOALS:
        cells = [judge(d["sim"]) for _, d in suites]
        lines.append(f"| {label} | " + " | ".join(c.text for c in cells)
                     + f" | {_mark(cells)} |")
    lines.append("")
    lines.append("Suites (`python benchmarks/<command>`, 72 runs each, 60 s but the 20 s check; "
                 "the file's engine commit and date):")
    for s, d in suites:
        lines.append(f"`{s.name}`: `{s.command}` → `benchmarks/{s.file}` "
                     f"({d.get('engine_version', '?')}, {str(d.get('date', '?'))[:10]}).")
    lines.append("")
    first = next((d for s, d in suites if s.file == SUITES[0].file), None)
    lines += real_lines(first.get("real") or [] if first is not None else [])
    if short is not None:
        lines.append("")
        lines += short_lines(short)
    return "\n".join(lines) + "\n"


def load(folder: Path = HERE) -> list[tuple[Suite, dict[str, Any]]]:
    """The kept suites that exist in ``folder``, in ``SUITES`` order."""
    return [(s, orjson.loads((folder / s.file).read_bytes()))
            for s in SUITES if (folder / s.file).exists()]


def splice(doc: str, block: str) -> str:
    """``doc`` with the text between the markers replaced by ``block``."""
    i, j = doc.find(BEGIN), doc.find(END)
    if i < 0 or j < i:
        raise ValueError("the status markers are missing")
    return doc[:i + len(BEGIN)] + "\n" + block + doc[j:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", type=Path, help="rewrite the status block of this doc")
    g.add_argument("--check", type=Path, help="exit 1 when this doc's block is stale")
    a = ap.parse_args(argv)
    short_path = HERE / SHORT_RUNS
    short = orjson.loads(short_path.read_bytes()) if short_path.exists() else None
    block = render(load(), short)
    if a.write is None and a.check is None:
        sys.stdout.write(block)
        return 0
    path: Path = a.write or a.check
    doc = path.read_text(encoding="utf-8")
    new = splice(doc, block)
    if a.write is not None:
        path.write_text(new, encoding="utf-8")
        return 0
    if new != doc:
        print(f"{path}: the accuracy status block is stale: run "
              f"python benchmarks/accuracy_status.py --write {path}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
