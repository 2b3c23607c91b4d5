"""The live screen: header, power graph, ranked kernel/copy/idle tables, top inefficiencies.

Renders whatever Snapshot the app hands it (:meth:`LiveScreen.show_snapshot`); rows are
updated by key so the cursor stays on the same class while the numbers move.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Sparkline, Static

from attribution.snapshot import CopyRow, IdleRow, KernelRow, Snapshot
from ppwtop.tui.feed import PowerTrace
from ppwtop.tui.widgets import (
    NOT_RESOLVABLE,
    Cell,
    ci_cell,
    clip,
    esc,
    fmt_num,
    name_cell,
    num_cell,
    pct_cell,
    selected_key,
    short_name,
    sync_table,
)

SORT_KEYS = ("energy", "time", "calls", "name")
# column index per sort key, per table (kernels / copies / idle)
_KERNEL_SORT = {"energy": 1, "time": 4, "calls": 5, "name": 0}
_OTHER_SORT = {"energy": 1, "time": 3, "calls": 4, "name": 0}
GRAPH_POINTS = 200

Row = KernelRow | CopyRow | IdleRow


def kernel_key(k: KernelRow) -> str:
    return f"k:{k.gpu}:{k.name}"


def copy_key(c: CopyRow) -> str:
    return f"c:{c.gpu}:{c.kind}/{c.memory}"


def idle_key(i: IdleRow) -> str:
    return f"i:{i.gpu}:{i.cause}"


def header_text(snap: Snapshot | None, label: str, *, connected: bool, paused: bool,
                power: PowerTrace, sort_key: str, name_filter: str) -> str:
    """The two header lines (Rich markup)."""
    flags = []
    if not connected:
        flags.append("[b reverse red] target disconnected [/] (last data kept)")
    if paused:
        flags.append("[b reverse yellow] paused [/]")
    if snap is None:
        return f"[b]ppwtop[/] · {esc(label)} · waiting for data…  " + "  ".join(flags)
    gpu = snap.gpus[0] if snap.gpus else None
    gpu_s = (f"{esc(clip(gpu.name, 28))} ({gpu.model}, sensor {gpu.sensor.field} "
             f"{fmt_num(gpu.sensor.period_ms)} ms)") if gpu else "no GPU"
    if len(snap.gpus) > 1:
        gpu_s += f" +{len(snap.gpus) - 1} GPU"
    t = snap.totals
    dur_s = snap.window.duration_s
    avg_w = t.energy_j / dur_s if dur_s > 0 else math.nan
    now_w = float(power[1][-1]) if len(power[1]) else avg_w
    line1 = f"[b]ppwtop[/] · [b]{esc(clip(label, 36))}[/] · {gpu_s}  " + "  ".join(flags)
    no_power = (gpu is None or gpu.sensor.field == "none") and not len(power[1])
    if no_power:
        parts = [f"[yellow]no power data: times only[/] · {fmt_num(dur_s)} s"]
    else:
        parts = [
            f"[b]{fmt_num(now_w)} W[/] now",
            f"{fmt_num(avg_w)} W avg",
            f"[b]{fmt_num(t.energy_j)} J[/] in {fmt_num(dur_s)} s",
            *_so_far(snap),
        ]
    if t.measured_energy_j > 0:
        parts.append(f"closure {t.closure_error * 100:+.1f}%")
    line2 = " · ".join(parts)
    line3 = "" if no_power else f"P_idle {fmt_num(t.active_idle_w)} W · "
    st = snap.steps
    if st is not None and st.count > 0:
        line3 += (f"[b]{fmt_num(st.energy_j.mean)} J/step[/] ({st.count} steps) · "
                  f"p95 {fmt_num(st.latency_ms.p95)} ms p99 {fmt_num(st.latency_ms.p99)} ms · ")
    line3 += f"sort: [b]{sort_key}[/]"
    if name_filter:
        line3 += f" · filter: [b]{esc(name_filter)}[/]"
    if snap.warnings:
        line3 += f" · [yellow]{len(snap.warnings)} warning(s): {esc(snap.warnings[0])}[/]"
    return "\n".join((line1, line2, line3))


def _so_far(snap: Snapshot) -> list[str]:
    """"X J so far" when the feed says how much the run used since it started."""
    e = snap.meta.get("energy_so_far_j")
    if not isinstance(e, int | float):
        return []
    el = snap.meta.get("elapsed_s")
    tail = f" ({fmt_num(float(el))} s)" if isinstance(el, int | float) else ""
    return [f"{fmt_num(float(e))} J so far{tail}"]


def ineff_text(snap: Snapshot, limit: int = 6) -> str:
    """The ranked inefficiencies: mechanism, J, fix, owner (Rich markup)."""
    if not snap.inefficiencies:
        return "[dim]none found[/]"
    lines = []
    for ie in sorted(snap.inefficiencies, key=lambda i: i.rank)[:limit]:
        mark = "" if ie.resolvable else " ≈"
        owner = f" [dim]({esc(ie.owner)})[/]" if ie.owner else ""
        lines.append(f"{ie.rank}. [b]{esc(ie.mechanism)}[/] {fmt_num(ie.energy_j)} J{mark}"
                     f" → {esc(ie.fix)}{owner}")
    return "\n".join(lines)


class LiveScreen(Screen[None]):
    """Header + power graph + kernels table + copies/idle tables + inefficiencies."""

    CSS_PATH = Path(__file__).with_name("live.tcss")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "app.detail", "detail"),
        Binding("escape", "clear_filter", "clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: Snapshot | None = None
        self.rows: dict[str, Row] = {}
        self._name_w = 40
        self._power: PowerTrace = (np.empty(0, np.int64), np.empty(0, np.float64))

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Sparkline([], id="power", summary_function=max)
        with Vertical(id="tables"):
            yield DataTable(id="kernels", cursor_type="row", zebra_stripes=True)
            with Horizontal(id="bottom"):
                yield DataTable(id="other", cursor_type="row")
                yield Static(id="ineff")
        yield Input(placeholder="filter kernels by name (enter to apply, esc to clear)",
                    id="filter")
        yield Footer()

    def on_mount(self) -> None:
        k = self.query_one("#kernels", DataTable)
        name_w = self._name_w = max(20, self.app.size.width - 66)
        for label, key, width in (("kernel", "name", name_w), ("energy J", "e", 8),
                                  ("share", "share", 6), ("avg W", "w", 5),
                                  ("time s", "t", 6), ("calls", "n", 6),
                                  ("90% CI dyn J", "ci", 16)):
            k.add_column(label, key=key, width=width)
        o = self.query_one("#other", DataTable)
        for label, key, width in (("class", "name", 18), ("J", "e", 6), ("share", "share", 6),
                                  ("time s", "t", 6), ("calls", "n", 6)):
            o.add_column(label, key=key, width=width)
        k.border_title = "kernels"
        o.border_title = "copies & idle causes"
        self.query_one("#ineff", Static).border_title = "top inefficiencies"
        k.focus()
        self.refresh_view()

    # ------------------------------------------------------------------ rendering

    def show_snapshot(self, snap: Snapshot | None, power: PowerTrace) -> None:
        if snap is not None:
            self.snapshot = snap
        if len(power[0]):
            self._power = power
        self.refresh_view(tables=snap is not None)

    def refresh_view(self, tables: bool = True) -> None:
        if not self.is_mounted:
            return
        app: Any = self.app
        sort_key: str = getattr(app, "sort_key", "energy")
        name_filter: str = getattr(app, "name_filter", "")
        self.query_one("#header", Static).update(header_text(
            self.snapshot, getattr(app, "label", ""), connected=getattr(app, "connected", True),
            paused=getattr(app, "paused", False), power=self._power, sort_key=sort_key,
            name_filter=name_filter))
        p = self._power[1][-GRAPH_POINTS:]
        self.query_one("#power", Sparkline).data = [float(x) for x in p]
        snap = self.snapshot
        if snap is None or not tables:
            return
        total = snap.totals.energy_j if snap.totals.energy_j > 0 else math.nan
        rows: dict[str, Row] = {}
        needle = name_filter.lower()

        multi_gpu = len({k.gpu for k in snap.kernels}) > 1
        krows = []
        for kr in snap.kernels:
            if needle and needle not in kr.name.lower():
                continue
            key = kernel_key(kr)
            rows[key] = kr
            style = "" if kr.resolvable else "dim italic"
            krows.append((key, [
                name_cell(f"{kr.gpu}│{short_name(kr.name)}" if multi_gpu else short_name(kr.name),
                          self._name_w, style), num_cell(kr.energy_j),
                pct_cell(kr.energy_j / total), num_cell(kr.avg_power_w),
                num_cell(kr.time_s), num_cell(kr.calls),
                ci_cell(kr.dynamic_energy_ci_j) if kr.resolvable
                else Cell(-1.0, NOT_RESOLVABLE, justify="left", style="yellow"),
            ]))
        sync_table(self.query_one("#kernels", DataTable), krows, _KERNEL_SORT[sort_key],
                   reverse=sort_key != "name")

        orows = []
        for cr in snap.copies:
            key = copy_key(cr)
            rows[key] = cr
            orows.append((key, [name_cell(f"copy {cr.kind}/{cr.memory}", 18),
                                num_cell(cr.energy_j), pct_cell(cr.energy_j / total),
                                num_cell(cr.time_s), num_cell(cr.calls)]))
        for ir in snap.idle:
            key = idle_key(ir)
            rows[key] = ir
            orows.append((key, [name_cell(f"idle {ir.cause}", 18), num_cell(ir.energy_j),
                                pct_cell(ir.energy_j / total), num_cell(ir.time_s),
                                num_cell(ir.count)]))
        sync_table(self.query_one("#other", DataTable), orows, _OTHER_SORT[sort_key],
                   reverse=sort_key != "name")
        self.query_one("#ineff", Static).update(ineff_text(snap))
        self.rows = rows

    # ------------------------------------------------------------------ selection, filter

    def selected_row(self) -> Row | None:
        """The row under the cursor of the focused table (kernels if none is focused)."""
        focused = self.focused
        tables = list(self.query(DataTable))
        table = focused if focused in tables else self.query_one("#kernels", DataTable)
        if not isinstance(table, DataTable):
            return None
        key = selected_key(table)
        return self.rows.get(key) if key else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id in ("kernels", "other"):
            app: Any = self.app
            app.action_detail()

    def open_filter(self) -> None:
        inp = self.query_one("#filter", Input)
        inp.display = True
        inp.value = getattr(self.app, "name_filter", "")
        inp.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.app.name_filter = event.value  # type: ignore[attr-defined]
        self.refresh_view()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        self.query_one("#kernels", DataTable).focus()

    def action_clear_filter(self) -> None:
        inp = self.query_one("#filter", Input)
        inp.value = ""
        inp.display = False
        self.app.name_filter = ""  # type: ignore[attr-defined]
        self.query_one("#kernels", DataTable).focus()
        self.refresh_view()
