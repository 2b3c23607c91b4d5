"""The live screen: header, power graph, ranked kernel/copy/idle tables, top inefficiencies.

Renders whatever Snapshot the app hands it (:meth:`LiveScreen.show_snapshot`); rows are
updated by key so the cursor stays on the same class while the numbers move.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Sparkline, Static

from attribution.snapshot import CopyRow, IdleRow, KernelRow, Snapshot, Totals, energy_known
from ppwtop.tui.detail import row_key
from ppwtop.tui.feed import PowerTrace
from ppwtop.tui.widgets import (
    NOT_RESOLVABLE,
    Cell,
    ci_cell,
    clip,
    esc,
    fit_name,
    fmt_num,
    name_cell,
    num_cell,
    pct_cell,
    selected_key,
    sync_table,
    unique_key,
)

SORT_KEYS = ("energy", "time", "calls", "name")
# column index per sort key, per table (kernels / copies / idle)
_KERNEL_SORT = {"energy": 1, "time": 4, "calls": 5, "name": 0}
_KERNEL_COLUMNS = (("kernel", "name", 0), ("energy J", "e", 8), ("share", "share", 6),
                   ("avg W", "w", 5), ("time s", "t", 6), ("calls", "n", 6),
                   ("90% CI dyn J", "ci", 16))  # the name's width follows the screen's
_OTHER_SORT = {"energy": "e", "time": "t", "calls": "n", "name": "name"}  # column keys
_OTHER_COLUMNS = (("class", "name", 19), ("J", "e", 6), ("share", "share", 6),
                  ("avg W", "w", 5), ("time s", "t", 6), ("calls", "n", 6),
                  ("90% CI dyn J", "ci", 16))
_OTHER_KEYS = tuple(k for _, k, _ in _OTHER_COLUMNS)


def other_column_keys(width: int) -> tuple[str, ...]:
    """The copies & idle table's columns on a screen ``width`` wide (live.tcss's
    breakpoints; all of them need 78 cells with their padding): from 150 columns it is 84
    wide, all shown; from 110 it shares the row at 66, its interval left out; under 110 it
    takes the row, a few cells short (the border, a scrollbar), its average W left out
    (for an idle row that is P_idle). A column cut by the edge behind a scrollbar took a
    row of the table at 80x24 and hid the interval at 120 columns."""
    drop = () if width >= 150 else ("ci",) if width >= 110 else ("w",)
    return tuple(k for _, k, _ in _OTHER_COLUMNS if k not in drop)
GRAPH_POINTS = 200

Row = KernelRow | CopyRow | IdleRow


def fit_line(parts: list[tuple[int, str]], width: int, sep: str = " · ") -> str:
    """Join markup ``parts`` (priority, text) with ``sep``, dropping the lowest-priority
    parts (highest number) until the line fits ``width`` cells; the rest keep their order."""
    keep = list(parts)
    while keep:
        line = sep.join(t for _, t in keep)
        if Text.from_markup(line).cell_len <= width or len(keep) == 1:
            return line
        worst = max(range(len(keep)), key=lambda i: (keep[i][0], i))
        del keep[worst]
    return ""


def _closure(t: Totals) -> str:
    c = t.closure_error
    colour = "green" if abs(c) < 0.05 else "yellow" if abs(c) < 0.10 else "red"
    return f"closure [{colour}]{c * 100:+.1f}%[/]"


def header_text(snap: Snapshot | None, label: str, *, connected: bool, paused: bool,
                power: PowerTrace, width: int = 200, gpu: int | None = None) -> str:
    """The three header lines (Rich markup), each fitted to ``width`` cells: the lowest
    priority items go first on a narrow terminal, nothing wraps."""
    width = max(width - 2, 20)  # the header's padding
    flags: list[tuple[int, str]] = []
    if not connected:
        flags.append((0, "[b reverse red] target disconnected [/]"))
    if paused:
        flags.append((0, "[b reverse yellow] paused [/]"))
    if snap is None:
        return fit_line([(0, "[b]ppwtop[/]"), (1, esc(clip(label, 40))), *flags,
                         (2, "waiting for data…")], width)
    gi = next((g for g in snap.gpus if g.index == gpu), snap.gpus[0] if snap.gpus else None)
    line1: list[tuple[int, str]] = [(0, "[b]ppwtop[/]"), (1, f"[b]{esc(clip(label, 36))}[/]")]
    line1 += flags
    if gi is not None:
        sel = f"GPU {gi.index}/{len(snap.gpus)} " if len(snap.gpus) > 1 else ""
        line1.append((2, f"{sel}{esc(clip(gi.name, 28))}"))
        line1.append((3, f"{gi.sensor.field} {fmt_num(gi.sensor.period_ms)} ms"))
        if gpu is None and len(snap.gpus) > 1:
            line1.append((2, "all GPUs"))
    rec = snap.meta.get("recording")
    if isinstance(rec, str) and rec:
        line1.append((1, f"[red]●[/] rec {esc(clip(Path(rec).name, 24))}"))
    dropped = snap.meta.get("dropped_records")
    if isinstance(dropped, int):
        colour = "red" if dropped else "dim"
        line1.append((2, f"[{colour}]dropped {fmt_num(dropped)}[/]"))
    t = snap.totals
    dur_s = snap.window.duration_s
    one = one_of_several(snap, gpu)  # its own figures; None: the run's
    energy_j, p_idle_w = shown_energy_j(snap, one), shown_idle_w(snap, one)
    avg_w = energy_j / dur_s if dur_s > 0 else math.nan
    now_w = float(power[1][-1]) if len(power[1]) else avg_w
    no_power = (gi is None or gi.sensor.field == "none") and not len(power[1])
    if no_power:
        line2: list[tuple[int, str]] = [
            (0, f"[yellow]no power data: times only[/] · {fmt_num(dur_s)} s")]
    else:
        # the run's figures (energy so far, closure against the counter) only for all GPUs
        # "now" is the power trace's latest reading: a snapshot file has none to show
        has_now = len(power[1]) > 0
        line2 = [*([(0, f"[b]{fmt_num(now_w)} W[/] now")] if has_now else []),
                 (1 if has_now else 0, f"{fmt_num(avg_w)} W avg"),
                 (2, f"[b]{fmt_num(energy_j)} J[/] in {fmt_num(dur_s)} s"),
                 *[(1, x) for x in (_so_far(snap) if one is None else ())],
                 (4, f"P_idle {fmt_num(p_idle_w)} W")]
    if t.measured_energy_j > 0 and one is None:
        line2.append((3, _closure(t)))
    line3: list[tuple[int, str]] = []
    st = snap.steps
    if st is not None and st.count > 0:
        line3.append((0, f"[b]{fmt_num(st.energy_j.mean)} J/step[/]"))
        if st.items_per_j is not None:
            line3.append((1, f"[b]{fmt_num(st.items_per_j)} items/J[/]"))
        lat = f"p95 {fmt_num(st.latency_ms.p95)} p99 {fmt_num(st.latency_ms.p99)} ms"
        if st.sla_ms is not None:
            over = st.latency_ms.p99 > st.sla_ms
            colour = "red" if over else "green"
            lat += f" [{colour}]vs SLA {fmt_num(st.sla_ms)} ms[/]"
            if st.sla_compliance is not None:
                lat += f" ({st.sla_compliance * 100:.0f}% in)"
        line3.append((1, lat))
        line3.append((3, f"{st.count} steps"))
    else:
        line3.append((3, "[dim]no steps[/]"))
    if snap.warnings:
        line3.append((2, f"[yellow]⚠ {len(snap.warnings)}: {esc(snap.warnings[0])}[/]"))
    return "\n".join(_clip_markup(fit_line(x, width), width) for x in (line1, line2, line3))


def one_of_several(snap: Snapshot, gpu: int | None) -> int | None:
    """The GPU whose own figures are shown: the one selected, where there are several."""
    return gpu if gpu is not None and len(snap.gpus) > 1 else None


def shown_energy_j(snap: Snapshot, gpu: int | None) -> float:
    """The window's energy: one GPU's (its kernels, copies and idle partition it), or the
    run's (None)."""
    if gpu is None:
        return snap.totals.energy_j
    return float(sum(r.energy_j for r in snap.kernels if r.gpu == gpu)
                 + sum(r.energy_j for r in snap.copies if r.gpu == gpu)
                 + sum(r.energy_j for r in snap.idle if r.gpu == gpu))


def shown_idle_w(snap: Snapshot, gpu: int | None) -> float:
    """Active idle power: one GPU's, read off its idle rows (energy = P_idle × time), or the
    run's (None, or a GPU that was never idle)."""
    rows = [r for r in snap.idle if r.gpu == gpu and r.time_s > 0] if gpu is not None else []
    time_s = sum(r.time_s for r in rows)
    return sum(r.energy_j for r in rows) / time_s if time_s > 0 else snap.totals.active_idle_w


def _clip_markup(line: str, width: int) -> str:
    """A last resort: a single part wider than the line is cut (as markup-safe text)."""
    text = Text.from_markup(line)
    if text.cell_len <= width:
        return line
    text.truncate(width, overflow="ellipsis")
    return text.markup


def _so_far(snap: Snapshot) -> list[str]:
    """"X J so far" when the feed says how much the run used since it started."""
    e = snap.meta.get("energy_so_far_j")
    if not isinstance(e, int | float):
        return []
    el = snap.meta.get("elapsed_s")
    tail = f" ({fmt_num(float(el))} s)" if isinstance(el, int | float) else ""
    return [f"{fmt_num(float(e))} J so far{tail}"]


def ineff_text(snap: Snapshot, limit: int = 6) -> str:
    """The ranked inefficiencies, one line each: mechanism, J, owner, fix (Rich markup)."""
    if not snap.inefficiencies:
        return "[dim]none found[/]"
    lines = []
    for ie in sorted(snap.inefficiencies, key=lambda i: i.rank)[:limit]:
        mark = "" if ie.resolvable else " ≈"
        owner = f" [dim]({esc(ie.owner)})[/]" if ie.owner else ""
        lines.append(f"{ie.rank}. [b]{esc(ie.mechanism)}[/] {fmt_num(ie.energy_j)} J{mark}"
                     f"{owner} → {esc(ie.fix)}")
    return "\n".join(lines)


BAND_CHARS = " ▁▂▃▄▅▆▇█"


def bucket_means(values: np.ndarray, width: int) -> np.ndarray:
    """``values`` averaged into ``width`` buckets the way Sparkline splits its data (NaN
    where a bucket has no finite value).  Fewer values than cells: each value spans the
    cells Sparkline stretches it over (cell i shows value ⌊i·n/width⌋), so a band cell sits
    under its bar (the values were left-packed: under the wrong times)."""
    n = len(values)
    if n == 0 or width <= 0:
        return np.full(max(width, 0), np.nan)
    if n <= width:
        return values.astype(np.float64)[(np.arange(width) * n) // width]
    edges = (np.arange(width + 1) * n) // width
    out = np.full(width, np.nan)
    for i in range(width):  # width is a screen width (< 300), not a record count
        seg = values[edges[i]:edges[i + 1]]
        seg = seg[np.isfinite(seg)]
        if len(seg):
            out[i] = float(seg.mean())
    return out


def busy_band(snap: Snapshot | None, power: PowerTrace, gpu: int, width: int) -> str:
    """One line: GPU busy fraction (0–1) at the time of each power point, bucketed like the
    power graph above it, so a column of the band sits under the same time as the bar."""
    label = "busy "
    w = width - len(label)
    panels = snap.extra.get("panels") if snap is not None else None
    series = None
    if isinstance(panels, dict):
        series = next((b for b in panels.get("busy", []) if b.get("gpu") == gpu), None)
    t_ns = power[0][-GRAPH_POINTS:]
    if series is None or not len(t_ns) or w <= 0:
        return f"[dim]{label}{'·' * max(w, 0)}[/]" if w > 0 else ""
    frac = np.asarray(series["fraction"], dtype=np.float64)
    idx = (t_ns - int(series["t0_ns"])) // int(series["bin_ns"])
    ok = (idx >= 0) & (idx < len(frac))
    vals = np.where(ok, frac[np.clip(idx, 0, max(len(frac) - 1, 0))], np.nan)
    cells = bucket_means(vals, w)
    chars = "".join("·" if not math.isfinite(v) else BAND_CHARS[round(v * 8)]
                    for v in cells)
    return f"[dim]{label}[/][$success]{chars}[/]"


def clock_strip(snap: Snapshot | None, gpu: int) -> str:
    """SM/memory clock, temperature and clamp state of one GPU (from ``extra["panels"]``)."""
    panels = snap.extra.get("panels") if snap is not None else None
    ck = None
    if isinstance(panels, dict):
        ck = next((c for c in panels.get("clocks", []) if c.get("gpu") == gpu), None)
    if ck is None:
        return "[dim]clocks: no clock samples[/]"
    now = ck.get("clamped_now") or []
    clamp = (f"[b reverse red] clamped: {', '.join(now)} [/]" if now
             else "[green]not clamped[/]")
    share = float(ck.get("clamped_share", 0.0))
    by = ck.get("clamp_share_by_reason") or {}
    hist = (f" · clamped {share * 100:.0f}% of window ({', '.join(sorted(by))})"
            if share > 0 else "")
    return (f"SM {ck['sm_mhz']} MHz (peak {ck['sm_mhz_max']}) · mem {ck['mem_mhz']} MHz · "
            f"{fmt_num(float(ck['temp_c']))} °C (max {fmt_num(float(ck['temp_c_max']))}) · "
            f"{clamp}{hist}")


def gpus_of(snap: Snapshot | None) -> list[int]:
    if snap is None:
        return []
    return sorted({g.index for g in snap.gpus} | {k.gpu for k in snap.kernels})


NAME_MIN_W = 13
"""The kernel-name column's narrowest width; it takes whatever the numbers leave."""
NUMBERS_W = 67
"""What the kernels table's number columns, padding and borders take of the width."""


def name_width(width: int) -> int:
    """The kernel-name column's width on a screen ``width`` columns wide."""
    return max(NAME_MIN_W, width - NUMBERS_W)


class LiveScreen(Screen[None]):
    """Header + power graph and busy band + kernels + copies/idle + inefficiencies + clocks."""

    CSS_PATH = Path(__file__).with_name("live.tcss")
    # Textual declares these as instance-typed lists: ClassVar would fail mypy
    HORIZONTAL_BREAKPOINTS = [  # noqa: RUF012
        (0, "-narrow"), (110, "-medium"), (150, "-wide")]
    VERTICAL_BREAKPOINTS = [  # noqa: RUF012
        (0, "-short"), (30, "-tall")]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "app.detail", "detail"),
        Binding("escape", "clear_filter", "clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: Snapshot | None = None
        self.rows: dict[str, Row] = {}
        self._name_w = 40
        self._other_keys: tuple[str, ...] = _OTHER_KEYS
        self._power: PowerTrace = (np.empty(0, np.int64), np.empty(0, np.float64))

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Sparkline([], id="power", summary_function=max)
        yield Static(id="busy")
        with Vertical(id="tables"):
            yield DataTable(id="kernels", cursor_type="row", zebra_stripes=True)
            with Horizontal(id="bottom"):
                yield DataTable(id="other", cursor_type="row")
                yield Static(id="ineff")
        yield Static(id="clocks")
        yield Input(placeholder="filter kernels by name (enter to apply, esc to clear)",
                    id="filter")
        yield Footer()

    def _kernel_columns(self, name_w: int) -> None:
        """(Re)build the kernels table's columns, the name column ``name_w`` wide (its rows
        come back on the next refresh)."""
        self._name_w = name_w
        k = self.query_one("#kernels", DataTable)
        k.clear(columns=True)
        for label, key, width in _KERNEL_COLUMNS:
            k.add_column(label, key=key, width=name_w if key == "name" else width)

    def _other_columns(self, keys: tuple[str, ...]) -> None:
        """(Re)build the copies & idle table's columns (:func:`other_column_keys`)."""
        self._other_keys = keys
        o = self.query_one("#other", DataTable)
        o.clear(columns=True)
        for label, key, width in _OTHER_COLUMNS:
            if key in keys:
                o.add_column(label, key=key, width=width)

    def on_mount(self) -> None:
        k = self.query_one("#kernels", DataTable)
        self._kernel_columns(name_width(self.app.size.width))
        self._other_columns(other_column_keys(self.app.size.width))
        self.query_one("#other", DataTable).border_title = "copies & idle causes"
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

    def on_resize(self) -> None:
        # the kernel-name column follows the terminal's width (the other columns are fixed)
        width = self.size.width or self.app.size.width
        name_w, other = name_width(width), other_column_keys(width)
        if (name_w != self._name_w or other != self._other_keys) and self.is_mounted:
            self._kernel_columns(name_w)
            self._other_columns(other)
            self.refresh_view(tables=True)
        else:
            self.refresh_view(tables=False)

    def refresh_view(self, tables: bool = True) -> None:
        if not self.is_mounted:
            return
        try:
            self._refresh_view(tables)
        except NoMatches:  # a message that arrived while the app was closing
            return

    def _refresh_view(self, tables: bool) -> None:
        app: Any = self.app
        sort_key: str = getattr(app, "sort_key", "energy")
        if sort_key == "energy" and self.snapshot is not None and not energy_known(
                self.snapshot):  # every energy 0 (no power readings): by time, said so
            sort_key = "time"
        name_filter: str = getattr(app, "name_filter", "")
        gpu_sel: int | None = getattr(app, "gpu", None)
        width = self.size.width or app.size.width
        self.query_one("#header", Static).update(header_text(
            self.snapshot, getattr(app, "label", ""), connected=getattr(app, "connected", True),
            paused=getattr(app, "paused", False), power=self._power, width=width,
            gpu=gpu_sel))
        p = self._power[1][-GRAPH_POINTS:]
        self.query_one("#power", Sparkline).data = [float(x) for x in p]
        shown_gpu = gpu_sel if gpu_sel is not None else (gpus_of(self.snapshot) or [0])[0]
        self.query_one("#busy", Static).update(
            busy_band(self.snapshot, self._power, shown_gpu, max(width - 2, 0)))
        self.query_one("#clocks", Static).update(clock_strip(self.snapshot, shown_gpu))
        k = self.query_one("#kernels", DataTable)
        title = f"kernels · sort: {sort_key}" + (
            " (no power readings)" if sort_key != getattr(app, "sort_key", sort_key) else "")
        if name_filter:
            title += f" · filter: {esc(name_filter)}"
        if gpu_sel is not None:
            title += f" · GPU {gpu_sel}"
        k.border_title = title
        snap = self.snapshot
        if snap is None or not tables:
            return
        shown_j = shown_energy_j(snap, one_of_several(snap, gpu_sel))  # shares of what is shown
        total = shown_j if shown_j > 0 else math.nan
        rows: dict[str, Row] = {}
        needle = name_filter.lower()

        multi_gpu = len({k.gpu for k in snap.kernels}) > 1 and gpu_sel is None
        krows = []
        for kr in snap.kernels:
            if needle and needle not in kr.name.lower():
                continue
            if gpu_sel is not None and kr.gpu != gpu_sel:
                continue
            key = unique_key(row_key(kr), rows)
            rows[key] = kr
            style = "" if kr.resolvable else "dim italic"
            krows.append((key, [
                name_cell(f"{kr.gpu}│{fit_name(kr.name, self._name_w - 2)}" if multi_gpu
                          else fit_name(kr.name, self._name_w), self._name_w, style),
                num_cell(kr.energy_j),
                pct_cell(kr.energy_j / total), num_cell(kr.avg_power_w),
                num_cell(kr.time_s), num_cell(kr.calls),
                ci_cell(kr.dynamic_energy_ci_j) if kr.resolvable
                else Cell(-1.0, NOT_RESOLVABLE, justify="left", style="yellow"),
            ]))
        sync_table(k, krows, _KERNEL_SORT[sort_key], reverse=sort_key != "name")

        orows = []
        for cr in snap.copies:
            if gpu_sel is not None and cr.gpu != gpu_sel:
                continue
            key = unique_key(row_key(cr), rows)
            rows[key] = cr
            orows.append((key, dict(zip(_OTHER_KEYS, (
                name_cell(f"{cr.gpu}│" * multi_gpu + f"copy {cr.kind}/{cr.memory}", 19,
                          "" if cr.resolvable else "dim"),
                num_cell(cr.energy_j), pct_cell(cr.energy_j / total),
                num_cell(cr.energy_j / cr.time_s if cr.time_s > 0 else math.nan),
                num_cell(cr.time_s), num_cell(cr.calls),
                ci_cell(cr.dynamic_energy_ci_j) if cr.resolvable
                else Cell(-1.0, NOT_RESOLVABLE, justify="left", style="yellow")),
                strict=True))))
        for ir in snap.idle:
            if (gpu_sel is not None and ir.gpu != gpu_sel) or (ir.time_s <= 0 and not ir.count):
                continue  # a cause that never happened is not worth a row
            key = unique_key(row_key(ir), rows)
            rows[key] = ir
            orows.append((key, dict(zip(_OTHER_KEYS, (
                name_cell(f"{ir.gpu}│" * multi_gpu + f"idle {ir.cause}", 19),
                num_cell(ir.energy_j),
                pct_cell(ir.energy_j / total),
                num_cell(ir.energy_j / ir.time_s if ir.time_s > 0 else math.nan),
                num_cell(ir.time_s), num_cell(ir.count),
                Cell(-math.inf, "P_idle × t", justify="left", style="dim")), strict=True))))
        shown = self._other_keys
        sync_table(self.query_one("#other", DataTable),
                   [(key, [cells[c] for c in shown]) for key, cells in orows],
                   shown.index(_OTHER_SORT[sort_key]), reverse=sort_key != "name")
        ineff = self.query_one("#ineff", Static)
        ineff.update(ineff_text(snap))
        ineff.border_title = ("top inefficiencies · all GPUs" if gpu_sel is not None
                              else "top inefficiencies")
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
