"""HTML rendering of a :class:`~ppwtop.report.model.Report`: one self-contained file.

Owns the page layout and the plotly charts (energy breakdown, before/after operating points,
power timeline).  plotly.js is embedded inline in the first chart only, so the file opens
offline and no script is fetched from the network.  Every name from a trace is escaped with
:func:`html.escape`, in tables and in chart labels alike.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from ppwtop.report.markdown import (
    NOT_RESOLVABLE,
    ci_cell,
    closure_line,
    num,
    pct,
    share_of_delta,
    signed_pct,
)
from ppwtop.report.model import Report

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:90%}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.n{text-align:right;font-variant-numeric:tabular-nums}
.nr{color:#a00;font-weight:bold} .warn{background:#fff4d6;padding:6px 10px;margin:4px 0}
.verdict{font-size:120%} .better{color:#070} .worse{color:#a00}
"""


def e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _code(text: str) -> str:
    """Our own text with `backticks` turned into <code> (escaped first)."""
    chunks = e(text).split("`")
    return "".join(f"<code>{c}</code>" if i % 2 else c for i, c in enumerate(chunks))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]],
           numeric: Sequence[bool] | None = None) -> str:
    """A table from already-escaped cell HTML."""
    numeric = numeric or [False] * len(header)
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if numeric[i] else f"<td>{c}</td>"
                         for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class _Charts:
    """Turns figures into divs; plotly.js goes inline into the first one only."""

    def __init__(self) -> None:
        self.count = 0

    def div(self, fig: go.Figure, div_id: str) -> str:
        include: bool = self.count == 0
        self.count += 1
        fig.update_layout(margin={"l": 60, "r": 20, "t": 50, "b": 60}, height=380)
        out: str = pio.to_html(fig, include_plotlyjs=include, full_html=False,
                               div_id=div_id, config={"displaylogo": False})
        return out


def render_html(r: Report) -> str:
    charts = _Charts()
    parts: list[str] = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{e(r.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(r.title)}</h1>",
        f"<p>Window: {r.duration_s:.3f} s on {e(', '.join(r.gpus) or 'no GPU listed')}. "
        f"{e(closure_line(r.closure_error))}</p>",
    ]
    parts += [f'<div class="warn">warning: {e(w)}</div>' for w in r.warnings]

    # headline operating points
    parts.append("<h2>Headline operating points</h2>")
    if r.has_baseline:
        rows = []
        for o in r.operating_points:
            cls = o.mark or ""
            rows.append([e(o.label), e(o.unit), num(o.before), num(o.after),
                         f'<span class="{cls}">{signed_pct(o.change)}</span>'])
        parts.append(_table(["metric", "unit", "before", "after", "change"], rows,
                            [False, False, True, True, True]))
        parts.append(charts.div(_operating_chart(r), "ppw-operating-points"))
    else:
        parts.append(_table(["metric", "unit", "value"],
                            [[e(o.label), e(o.unit), num(o.after)] for o in r.operating_points],
                            [False, False, True]))

    # energy breakdown
    parts.append("<h2>Energy breakdown</h2>")
    bh = ["category", "energy J", "share"] + (["before J"] if r.has_baseline else [])
    brows = [[e(b.category), num(b.energy_j), pct(b.share)]
             + ([num(b.before_energy_j)] if r.has_baseline else []) for b in r.breakdown]
    parts.append(_table(bh, brows, [False] + [True] * (len(bh) - 1)))
    if r.energy_known:  # a treemap of 0 J is empty
        parts.append(charts.div(_breakdown_chart(r), "ppw-energy-breakdown"))

    # bottlenecks
    parts.append("<h2>Bottleneck ranking</h2>")
    if r.bottlenecks:
        rows = []
        for i in r.bottlenecks:
            ci = ("n/a" if i.energy_ci_j is None
                  else f"[{num(i.energy_ci_j[0])}, {num(i.energy_ci_j[1])}]")
            mech = e(i.mechanism) + ("" if i.resolvable
                                     else f' <span class="nr">{NOT_RESOLVABLE}</span>')
            rows.append([str(i.rank), mech, num(i.energy_j), ci, pct(i.share), e(i.evidence),
                         _code(i.fix), e(i.owner), _code(i.validation)])
        parts.append(_table(["#", "mechanism", "energy J", "90 % CI J", "share", "evidence",
                             "fix", "owner", "validation"], rows,
                            [True, False, True, True, True, False, False, False, False]))
    else:
        parts.append("<p>No inefficiencies were ranked in this snapshot.</p>")

    # kernels
    parts.append(f"<h2>Kernels (top {len(r.kernels)} of {r.kernel_count} by {r.order})</h2>")
    if r.kernels:
        rows = []
        for k in r.kernels:
            res = ("n/a" if k.resolvable is None else "yes" if k.resolvable
                   else f'<span class="nr">{NOT_RESOLVABLE}</span>: {e(k.note)}')
            rows.append([e(k.name), str(k.gpu), str(k.calls), num(k.time_s), num(k.energy_j),
                         pct(k.share), num(k.dynamic_energy_j), ci_cell(k.dynamic_ci_j),
                         num(k.avg_power_w), res])
        parts.append(_table(["kernel", "gpu", "calls", "time s", "energy J", "share",
                             "dynamic J", "dynamic 90 % CI J", "avg W", "resolvable"], rows,
                            [False] + [True] * 8 + [False]))
    else:
        parts.append("<p>No kernels in this snapshot.</p>")

    # idle
    parts.append("<h2>Idle by cause</h2>")
    if r.idle:
        parts.append(_table(["cause", "time s", "energy J", "share", "gaps"],
                            [[e(i.cause), num(i.time_s), num(i.energy_j), pct(i.share),
                              str(i.count)] for i in r.idle],
                            [False, True, True, True, True]))
    else:
        parts.append("<p>No idle intervals.</p>")

    # power timeline
    if r.power:
        parts.append("<h2>Power timeline</h2>")
        parts.append(charts.div(_power_chart(r), "ppw-power-timeline"))

    # interventions
    parts.append("<h2>Intervention plan</h2>")
    if r.interventions:
        items = "".join(
            f"<li><b>{e(v.mechanism)}</b> ({num(v.energy_j)} J), owner {e(v.owner)}"
            f"<ul><li>fix: {_code(v.fix)}</li>"
            + (f"<li>expected effect: {_code(v.validation)}</li>" if v.validation else "")
            + f"<li>confirm (rollback-safe): {_code(v.check)}</li></ul></li>"
            for v in r.interventions)
        parts.append(f"<ol>{items}</ol>")
    else:
        parts.append(f"<p>{e(r.no_plan)}</p>" + ("<ul>" + "".join(
            f"<li>{e(v)}</li>" for v in r.time_view) + "</ul>" if r.time_view else ""))

    # verdict
    parts.append("<h2>Verdict</h2>")
    parts.append(_verdict_html(r))
    parts.append("</body></html>")
    return "\n".join(parts)


def _verdict_html(r: Report) -> str:
    v = r.verdict
    if v is None:
        return "<p>No baseline given (<code>--baseline</code>): no verdict.</p>"
    unit = "J/step" if v.metric == "energy_per_step_j" else "W"
    rel = "" if v.relative_delta is None else f" ({signed_pct(v.relative_delta)})"
    out = [f'<p class="verdict"><b>{e(v.verdict)}</b> on {e(v.metric)}: {num(v.baseline)} '
           f"&rarr; {num(v.candidate)} {unit}, delta {v.delta:+.4g}{rel}, 90 % CI "
           f"[{v.delta_ci[0]:+.4g}, {v.delta_ci[1]:+.4g}], comparability "
           f"{v.comparability:.2f}.</p>"]
    if v.mechanisms:
        out.append(_table(["mechanism", "delta J", "share of delta"],
                          [[e(m.mechanism), f"{m.delta_j:+.4g}",
                            share_of_delta(v, m.share_of_delta)]
                           for m in v.mechanisms[:10]], [False, True, True]))
    if v.reasons:
        out.append("<ul>" + "".join(f"<li>{e(w)}</li>" for w in v.reasons) + "</ul>")
    return "\n".join(out)


def _breakdown_chart(r: Report) -> go.Figure:
    """Treemap: kernels (top classes + the rest), copies, idle by cause."""
    labels, parents, values = ["kernels", "copies", "idle"], ["", "", ""], [0.0, 0.0, 0.0]
    totals = {b.category: max(b.energy_j or 0.0, 0.0) for b in r.breakdown}
    hover = ["kernels", "copies", "idle"]
    shown = 0.0
    for i, k in enumerate(r.kernels):
        label = e(short(k.name))
        labels.append(f"{label} #{i + 1}" if label in labels else label)
        hover.append(e(k.name))
        parents.append("kernels")
        j = max(k.energy_j or 0.0, 0.0)  # (drawn only where energies are known)
        values.append(j)
        shown += j
    rest = totals.get("kernels", 0.0) - shown
    if rest > 0:
        labels.append("other kernels")
        hover.append("other kernels")
        parents.append("kernels")
        values.append(rest)
    idle_shown = 0.0
    for i_line in r.idle:
        labels.append(f"idle.{e(i_line.cause)}")
        hover.append(f"idle.{e(i_line.cause)}")
        parents.append("idle")
        j = max(i_line.energy_j or 0.0, 0.0)
        values.append(j)
        idle_shown += j
    values[0] = max(totals.get("kernels", 0.0), shown)
    values[1] = totals.get("copies", 0.0)
    values[2] = max(totals.get("idle", 0.0), idle_shown)
    fig = go.Figure(go.Treemap(labels=labels, parents=parents, values=values,
                               branchvalues="total", textinfo="label+value+percent root",
                               hovertext=hover, hoverinfo="text+value+percent root"))
    fig.update_layout(title="Energy breakdown (J)")
    return fig


def short(name: str, width: int = 48) -> str:
    """A name cut to ``width`` characters for a chart label (escape after cutting)."""
    return name if len(name) <= width else name[: width - 1] + "\u2026"


def _operating_chart(r: Report) -> go.Figure:
    """Grouped bars, each metric normalised to its baseline (= 1) so units can share an axis."""
    ops = [o for o in r.operating_points if o.before not in (None, 0) and o.after is not None]
    labels = [f"{o.label} ({o.unit})" for o in ops]
    before = [1.0] * len(ops)
    after = [float(o.after) / float(o.before) for o in ops  # type: ignore[arg-type]
             if o.before is not None]
    fig = go.Figure([
        go.Bar(name="before", x=labels, y=before,
               text=[num(o.before) for o in ops], textposition="auto"),
        go.Bar(name="after", x=labels, y=after,
               text=[num(o.after) for o in ops], textposition="auto"),
    ])
    fig.update_layout(barmode="group", title="Operating points, after relative to before",
                      yaxis_title="relative to baseline")
    return fig


def _power_chart(r: Report) -> go.Figure:
    fig = go.Figure([go.Scatter(x=list(s.t_s), y=list(s.power_w), mode="lines",
                                name=f"GPU {s.gpu}") for s in r.power])
    fig.update_layout(title="Board power", xaxis_title="time (s)", yaxis_title="power (W)")
    return fig
