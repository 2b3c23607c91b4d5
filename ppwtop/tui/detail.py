"""The detail screen: everything the snapshot says about one kernel, copy or idle class."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from attribution.snapshot import CopyRow, IdleRow, KernelRow, Snapshot
from ppwtop.tui.widgets import esc, fmt_num


def detail_text(row: KernelRow | CopyRow | IdleRow, snap: Snapshot | None) -> str:
    total = snap.totals.energy_j if snap is not None and snap.totals.energy_j > 0 else 0.0
    share = f" ({row.energy_j / total * 100:.1f}% of {fmt_num(total)} J)" if total else ""
    lines: list[str] = []
    if isinstance(row, KernelRow):
        lo, hi = row.dynamic_energy_ci_j
        lines += [
            f"[b]kernel[/] {esc(row.name)}",
            f"GPU {row.gpu} · precision {esc(row.precision or '–')}",
            "",
            f"energy        [b]{fmt_num(row.energy_j)} J[/]{share}",
            f"dynamic       {fmt_num(row.dynamic_energy_j)} J, "
            f"90% CI [{fmt_num(lo)}, {fmt_num(hi)}] J",
            f"avg power     {fmt_num(row.avg_power_w)} W, above idle "
            f"{fmt_num(row.dynamic_energy_j / row.time_s if row.time_s else float('nan'))} W "
            f"(90% CI [{fmt_num(lo / row.time_s if row.time_s else float('nan'))}, "
            f"{fmt_num(hi / row.time_s if row.time_s else float('nan'))}] W)",
            f"time          {fmt_num(row.time_s)} s",
            f"calls         {row.calls}",
            f"per call      {fmt_num(row.energy_j / row.calls if row.calls else float('nan'))} J",
            "",
            "resolvable    " + ("[green]yes[/]" if row.resolvable
                                else "[yellow]no: ≈ not resolvable, a prior-based split[/]"),
        ]
        if row.cluster:
            lines.append(f"inseparable from: {esc(row.cluster)}")
        lines.append(f"why: {esc(row.why or '–')}")
    elif isinstance(row, CopyRow):
        lo, hi = row.dynamic_energy_ci_j
        gbps = row.bytes / row.time_s / 1e9 if row.time_s > 0 else float("nan")
        lines += [
            f"[b]copy[/] {esc(row.kind)}/{esc(row.memory)}",
            f"GPU {row.gpu}",
            "",
            f"energy        [b]{fmt_num(row.energy_j)} J[/]{share}",
            f"dynamic       {fmt_num(row.dynamic_energy_j)} J, "
            f"90% CI [{fmt_num(lo)}, {fmt_num(hi)}] J",
            f"avg power     {fmt_num(row.energy_j / row.time_s if row.time_s else float('nan'))} W",
            f"time          {fmt_num(row.time_s)} s",
            f"calls         {row.calls}",
            f"bytes         {fmt_num(row.bytes / 1e9)} GB ({fmt_num(gbps)} GB/s)",
            "resolvable    " + ("[green]yes[/]" if row.resolvable else "[yellow]no[/]"),
        ]
        if row.why:
            lines.append(f"why: {esc(row.why)}")
    else:
        lines += [
            f"[b]idle[/] {esc(row.cause)}",
            f"GPU {row.gpu}",
            "",
            f"energy        [b]{fmt_num(row.energy_j)} J[/]{share}",
            f"avg power     {fmt_num(row.energy_j / row.time_s if row.time_s else float('nan'))} W",
            f"time          {fmt_num(row.time_s)} s",
            f"gaps          {row.count}",
        ]
    owner = "–"
    if snap is not None:
        name = (f"kernel:{row.name}" if isinstance(row, KernelRow)
                else f"copy:{row.kind}/{row.memory}" if isinstance(row, CopyRow)
                else f"idle.{row.cause}")
        for ie in snap.inefficiencies:
            if ie.mechanism == name:
                owner = ie.owner or "–"
                lines += ["", f"[b]inefficiency #{ie.rank}[/]: {esc(ie.evidence)}",
                          f"fix: {esc(ie.fix)}"]
    lines.insert(3, f"owner         {esc(owner)}")
    if isinstance(row, KernelRow):
        lines += ["", *class_panels(row, snap)]
    return "\n".join(lines)


def _us(ns: float) -> str:
    if ns < 1e6:
        return f"{ns / 1e3:.4g} µs"
    return f"{ns / 1e6:.4g} ms" if ns < 1e9 else f"{ns / 1e9:.4g} s"


def class_panels(row: KernelRow, snap: Snapshot | None, bar_w: int = 30) -> list[str]:
    """Duration histogram and launches over time (``extra["panels"]``), as text bars."""
    panels = snap.extra.get("panels") if snap is not None else None
    cs = panels.get("classes", {}).get(f"{row.gpu}:{row.name}") if isinstance(
        panels, dict) else None
    if not isinstance(cs, dict):
        return ["[dim]duration histogram and launches over time: not in this snapshot "
                "(live and replay feeds add them)[/]"]
    counts = [int(c) for c in cs["hist_counts"]]
    lo_ns = float(cs["hist_min_ns"])
    nz = [i for i, c in enumerate(counts) if c]
    out = ["[b]launch durations[/] (log2 bins)"]
    top = max(counts) if counts else 0
    for i in range(nz[0], nz[-1] + 1) if nz else ():
        a = 0.0 if i == 0 else lo_ns * 2 ** (i - 1)
        b = lo_ns * 2**i
        bar = "█" * max(1 if counts[i] else 0, round(counts[i] / top * bar_w)) if top else ""
        out.append(f"  {_us(a):>9s}–{_us(b):<9s} {bar} {counts[i]}")
    launches = [int(x) for x in cs["launches"]]
    peak = max(launches) if launches else 0
    chars = " ▁▂▃▄▅▆▇█"
    spark = "".join(chars[round(x / peak * 8)] if peak else " " for x in launches)
    out += ["", f"[b]launches over the window[/] ({len(launches)} bins of "
            f"{_us(int(cs['launch_bin_ns']))}, peak {peak})",
            f"  [$success]{spark}[/]"]
    return out


class DetailScreen(Screen[None]):
    CSS_PATH = Path(__file__).with_name("detail.tcss")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,backspace", "app.pop_screen", "back")]

    def __init__(self, row: KernelRow | CopyRow | IdleRow, snap: Snapshot | None) -> None:
        super().__init__()
        self.row = row
        self.snap = snap

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail-box"):
            yield Static(detail_text(self.row, self.snap), id="detail")
        yield Footer()

    def follow(self, snap: Snapshot) -> None:
        """Show ``snap``'s numbers for the same class (kept as they were if it is gone)."""
        rows: tuple[KernelRow | CopyRow | IdleRow, ...] = (*snap.kernels, *snap.copies,
                                                           *snap.idle)
        key = row_key(self.row)
        new = next((r for r in rows if row_key(r) == key), None)
        if new is None:
            return
        self.row, self.snap = new, snap
        if self.is_mounted:
            self.query_one("#detail", Static).update(detail_text(new, snap))


def row_key(row: KernelRow | CopyRow | IdleRow) -> str:
    """The class identity used by the tables: ``k:<gpu>:<name>``, ``c:…``, ``i:…``."""
    if isinstance(row, KernelRow):
        return f"k:{row.gpu}:{row.name}"
    if isinstance(row, CopyRow):
        return f"c:{row.gpu}:{row.kind}/{row.memory}"
    return f"i:{row.gpu}:{row.cause}"
