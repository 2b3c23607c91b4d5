"""The compare screen: a baseline and a candidate snapshot side by side.

Per-class deltas are normalised like the verdict (per step, else per second) and sorted by
|Δ|.  The verdict and its mechanism decomposition are :func:`attribution.diff.diff`'s."""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from attribution.diff import METRIC_STEP, diff
from attribution.snapshot import Snapshot
from ppwtop.tui.widgets import (
    Cell,
    clip,
    esc,
    fmt_num,
    name_cell,
    num_cell,
    short_class,
    sync_table,
)


def class_energies(s: Snapshot) -> dict[str, float]:
    """Energy per class name (``kernel:<name>``, ``copy:<kind>/<memory>``, ``idle.<cause>``)."""
    out: dict[str, float] = {}
    for k in s.kernels:
        out[f"kernel:{k.name}"] = out.get(f"kernel:{k.name}", 0.0) + k.energy_j
    for c in s.copies:
        key = f"copy:{c.kind}/{c.memory}"
        out[key] = out.get(key, 0.0) + c.energy_j
    for i in s.idle:
        out[f"idle.{i.cause}"] = out.get(f"idle.{i.cause}", 0.0) + i.energy_j
    return out


def per_unit(a: Snapshot, b: Snapshot) -> tuple[str, float, float]:
    """How both sides are normalised, as the verdict does: per step when both have steps,
    else per second of window.  Returns (unit, baseline divisor, candidate divisor)."""
    if a.steps is not None and a.steps.count and b.steps is not None and b.steps.count:
        return "J/step", float(a.steps.count), float(b.steps.count)
    da, db = a.window.duration_s, b.window.duration_s
    if da > 0 and db > 0:
        return "J/s", da, db
    return "J", 1.0, 1.0


def deltas(a: Snapshot, b: Snapshot) -> tuple[str, list[tuple[str, float, float, float]]]:
    """The unit and (class, baseline, candidate, delta) in that unit, largest |delta| first."""
    unit, na, nb = per_unit(a, b)
    ea, eb = class_energies(a), class_energies(b)
    rows = [(k, ea.get(k, 0.0) / na, eb.get(k, 0.0) / nb, eb.get(k, 0.0) / nb - ea.get(k, 0.0) / na)
            for k in set(ea) | set(eb)]
    rows.sort(key=lambda r: (-abs(r[3]), r[0]))
    return unit, rows


def verdict_and_mechanisms(a: Snapshot, b: Snapshot) -> tuple[str, str]:
    """The verdict line and the mechanism decomposition (top 6 by |Δ|) from
    :func:`attribution.diff.diff`; the reason in place of the verdict when two snapshots
    cannot be compared (e.g. no energy in the baseline window)."""
    try:
        r = diff(a, b)
    except (ValueError, TypeError, ZeroDivisionError) as e:
        return esc(f"verdict: unavailable ({type(e).__name__}: {e})"), ""
    colour = {"regression": "red", "improvement": "green"}.get(r.verdict, "yellow")
    unit = "J/step" if r.metric == METRIC_STEP else "J/s"
    ci = r.delta_ci
    verdict = (f"verdict: [b {colour}]{r.verdict}[/]  Δ {fmt_num(r.delta)} {unit} "
               f"(90% CI [{fmt_num(ci[0])}, {fmt_num(ci[1])}]), "
               f"comparability {r.comparability:.2f}")
    mechs = sorted(r.mechanisms, key=lambda m: -abs(m.delta_j))[:6]
    lines = []
    for m in mechs:
        c = "red" if m.delta_j > 0 else "green" if m.delta_j < 0 else "dim"
        owner = f" [dim]({esc(m.owner)})[/]" if m.owner else ""
        name = short_class(m.mechanism)  # C++ names folded as in the tables, one line each
        share = f"{m.share_of_delta * 100:+.0f}%  " if r.delta_is_clear else ""
        lines.append(f"[{c}]{m.delta_j:+.3g}[/] {unit} {share}"
                     f"{esc(clip(name, 60))}{owner}")
    return verdict, "\n".join(lines) if lines else "[dim]no mechanism moved[/]"


def verdict_text(a: Snapshot, b: Snapshot) -> str:
    return verdict_and_mechanisms(a, b)[0]


def summary_text(title: str, s: Snapshot) -> str:
    dur = s.window.duration_s
    gpu = s.gpus[0].name if s.gpus else "no GPU"
    lines = [f"[b]{esc(title)}[/] · {esc(gpu)}",
             f"energy {fmt_num(s.totals.energy_j)} J in {fmt_num(dur)} s "
             f"({fmt_num(s.totals.energy_j / dur if dur > 0 else math.nan)} W)"]
    if s.steps is not None and s.steps.count:
        lines.append(f"{fmt_num(s.steps.energy_j.mean)} J/step over {s.steps.count} steps, "
                     f"p95 {fmt_num(s.steps.latency_ms.p95)} ms")
    else:
        lines.append("no steps")
    return "\n".join(lines)


class CompareScreen(Screen[None]):
    CSS_PATH = Path(__file__).with_name("compare.tcss")
    # Textual declares these as instance-typed lists: ClassVar would fail mypy
    HORIZONTAL_BREAKPOINTS = [  # noqa: RUF012
        (0, "-narrow"), (120, "-wide")]
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "back")]

    def __init__(self, baseline: Snapshot, candidate: Snapshot,
                 names: tuple[str, str] = ("baseline", "candidate")) -> None:
        super().__init__()
        self.baseline = baseline
        self.candidate = candidate
        self.names = names

    def compose(self) -> ComposeResult:
        with Horizontal(id="sides"):
            yield Static(summary_text(self.names[0], self.baseline), id="side-a")
            yield Static(summary_text(self.names[1], self.candidate), id="side-b")
        verdict, mechs = verdict_and_mechanisms(self.baseline, self.candidate)
        yield Static(verdict, id="verdict")
        with Horizontal(id="lower"):
            yield DataTable(id="deltas", cursor_type="row", zebra_stripes=True)
            yield Static(mechs, id="mechanisms")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#deltas", DataTable)
        unit, drows = deltas(self.baseline, self.candidate)
        for label, key, width in (("class", "name", 30), ("baseline", "a", 10),
                                  ("candidate", "b", 10), ("Δ", "d", 9), ("Δ%", "p", 8)):
            t.add_column(label, key=key, width=width)
        rows = []
        for i, (name, ea, eb, d) in enumerate(drows):
            pct = d / ea * 100 if ea else math.inf if d else 0.0
            style = "red" if d > 0 else "green" if d < 0 else ""
            rows.append((name, [name_cell(short_class(name), 30), num_cell(ea), num_cell(eb),
                                Cell(-i, f"{d:+.3g}", style=style),
                                Cell(pct, "new" if math.isinf(pct) else f"{pct:+.1f}%",
                                     style=style)]))
        sync_table(t, rows, 3, reverse=True)
        t.border_title = f"per class, {unit}: Δ = candidate - baseline, largest |Δ| first"
        self.query_one("#mechanisms", Static).border_title = "where the Δ comes from"
        t.focus()
