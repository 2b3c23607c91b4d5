"""Markdown rendering of a :class:`~ppwtop.report.model.Report`: plain GitHub tables.

Owns the text layout only; every number comes from :mod:`ppwtop.report.model`.  Names from
traces are escaped (HTML special characters and ``|``) so a kernel called ``<script>`` or
``a|b`` cannot break the page or a table.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from attribution.diff import DiffResult
from ppwtop.report.model import OperatingPoint, Report

NOT_RESOLVABLE = "not resolvable"


def esc(text: str) -> str:
    """Escape a name for a Markdown table cell."""
    return (html.escape(str(text), quote=False).replace("|", "\\|")
            .replace("\n", " ").replace("`", "\\`"))


def prose(text: str) -> str:
    """Escape our own text (a ranked inefficiency's fix and validation) for a table cell or a
    line, keeping its `code spans` (``esc`` escapes backticks: they are literal in names)."""
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def num(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "n/a"
    return f"{v:.{digits}g}"


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def closure_line(closure_error: float | None) -> str:
    """The header's sentence on the partition against the energy counter."""
    if closure_error is None:
        return ("Attribution closure against a measured energy counter: not measured (no "
                "energy counter reading at both ends of the window in the inputs).")
    return f"Attribution closure error vs measured energy: {pct(closure_error)}."


def ci_cell(ci: tuple[float, float] | None) -> str:
    return "n/a" if ci is None else f"[{num(ci[0])}, {num(ci[1])}]"


def signed_pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:+.1f} %"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def share_of_delta(v: DiffResult, share: float) -> str:
    """A mechanism's share of the delta, where the delta is clear of 0 (else n/a)."""
    return signed_pct(share) if v.delta_is_clear else "n/a"


def _op_row(r: Report, op: OperatingPoint) -> list[str]:
    cells = [esc(op.label), op.unit]
    if r.has_baseline:
        cells += [num(op.before), num(op.after),
                  signed_pct(op.change) + (f" ({op.mark})" if op.mark else "")]
    else:
        cells.append(num(op.after))
    return cells


def render_markdown(r: Report) -> str:
    lines: list[str] = [f"# {esc(r.title)}", ""]
    lines.append(f"Window: {r.duration_s:.3f} s on " + (", ".join(esc(g) for g in r.gpus)
                                                        or "no GPU listed") + ".")
    lines.append(closure_line(r.closure_error))
    lines.append("")
    for w in r.warnings:
        lines.append(f"> **warning:** {esc(w)}")
    if r.warnings:
        lines.append("")

    lines += ["## Headline operating points", ""]
    if r.has_baseline:
        header = ["metric", "unit", "before", "after", "change"]
    else:
        header = ["metric", "unit", "value"]
    lines += table(header, [_op_row(r, o) for o in r.operating_points])
    lines.append("")

    lines += ["## Energy breakdown", ""]
    bheader = ["category", "energy J", "share"] + (["before J"] if r.has_baseline else [])
    brows = []
    for b in r.breakdown:
        row = [b.category, num(b.energy_j), pct(b.share)]
        if r.has_baseline:
            row.append(num(b.before_energy_j))
        brows.append(row)
    lines += table(bheader, brows)
    lines.append("")

    lines += ["## Bottleneck ranking", ""]
    if r.bottlenecks:
        rows = []
        for i in r.bottlenecks:
            ci = ("n/a" if i.energy_ci_j is None
                  else f"[{num(i.energy_ci_j[0])}, {num(i.energy_ci_j[1])}]")
            mech = esc(i.mechanism) + ("" if i.resolvable else f" ({NOT_RESOLVABLE})")
            rows.append([str(i.rank), mech, num(i.energy_j), ci, pct(i.share), esc(i.evidence),
                         prose(i.fix), esc(i.owner), prose(i.validation)])
        lines += table(["#", "mechanism", "energy J", "90 % CI J", "share", "evidence", "fix",
                        "owner", "validation"], rows)
    else:
        lines.append("No inefficiencies were ranked in this snapshot.")
    lines.append("")

    lines += [f"## Kernels (top {len(r.kernels)} of {r.kernel_count} by {r.order})", ""]
    if r.kernels:
        rows = []
        for k in r.kernels:
            res = ("n/a" if k.resolvable is None else "yes" if k.resolvable
                   else f"**{NOT_RESOLVABLE}**: {esc(k.note)}")
            rows.append([esc(k.name), str(k.gpu), str(k.calls), num(k.time_s), num(k.energy_j),
                         pct(k.share), num(k.dynamic_energy_j), ci_cell(k.dynamic_ci_j),
                         num(k.avg_power_w), res])
        lines += table(["kernel", "gpu", "calls", "time s", "energy J", "share",
                        "dynamic J", "dynamic 90 % CI J", "avg W", "resolvable"], rows)
        if any(k.resolvable is False for k in r.kernels):
            lines += ["", f"Rows marked *{NOT_RESOLVABLE}* carry numbers the readings do not pin "
                          "down; each gives its reason (a cluster names the classes it cannot "
                          "be told apart from)."]
    else:
        lines.append("No kernels in this snapshot.")
    lines.append("")

    lines += ["## Idle by cause", ""]
    if r.idle:
        lines += table(["cause", "time s", "energy J", "share", "gaps"],
                       [[esc(i.cause), num(i.time_s), num(i.energy_j), pct(i.share),
                         str(i.count)] for i in r.idle])
    else:
        lines.append("No idle intervals.")
    lines.append("")

    lines += ["## Intervention plan", ""]
    if r.interventions:
        for v in r.interventions:
            lines.append(f"{v.rank}. **{esc(v.mechanism)}** ({num(v.energy_j)} J), "
                         f"owner {esc(v.owner)}")
            lines.append(f"   - fix: {prose(v.fix)}")
            if v.validation:
                lines.append(f"   - expected effect: {prose(v.validation)}")
            lines.append(f"   - confirm (rollback-safe): {v.check}")
    else:
        lines.append(r.no_plan)
        if r.time_view:
            lines += [""] + [f"- {esc(v)}" for v in r.time_view]
    lines.append("")

    lines += ["## Verdict", ""]
    lines += verdict_lines(r)
    lines.append("")
    return "\n".join(lines)


def verdict_lines(r: Report) -> list[str]:
    v = r.verdict
    if v is None:
        return ["No baseline given (`--baseline`): no verdict."]
    unit = "J/step" if v.metric == "energy_per_step_j" else "W"
    rel = "" if v.relative_delta is None else f" ({signed_pct(v.relative_delta)})"
    out = [f"**{v.verdict}** on {v.metric}: {num(v.baseline)} → {num(v.candidate)} {unit}, "
           f"delta {v.delta:+.4g}{rel}, 90 % CI [{v.delta_ci[0]:+.4g}, {v.delta_ci[1]:+.4g}], "
           f"comparability {v.comparability:.2f}.", ""]
    if v.mechanisms:
        out += table(["mechanism", "delta J", "share of delta"],
                     [[esc(m.mechanism), f"{m.delta_j:+.4g}", share_of_delta(v, m.share_of_delta)]
                      for m in v.mechanisms[:10]])
        out.append("")
    for why in v.reasons:
        out.append(f"- {esc(why)}")
    return out
