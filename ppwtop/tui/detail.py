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
            f"avg power     {fmt_num(row.avg_power_w)} W",
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
    if snap is not None:
        name = (f"kernel:{esc(row.name)}" if isinstance(row, KernelRow)
                else f"copy:{row.kind}/{row.memory}" if isinstance(row, CopyRow)
                else f"idle.{row.cause}")
        for ie in snap.inefficiencies:
            if ie.mechanism == name:
                lines += ["", f"[b]inefficiency #{ie.rank}[/]: {esc(ie.evidence)}",
                          f"fix: {esc(ie.fix)}", f"owner: {esc(ie.owner)}"]
    return "\n".join(lines)


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
