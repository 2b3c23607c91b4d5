"""Small building blocks shared by the screens: sortable table cells, number formatting,
keyed DataTable synchronisation (no ``clear()`` per tick) and the live header."""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

NOT_RESOLVABLE = "≈ not resolvable"


class Cell:
    """A table cell that renders ``text`` and sorts by ``value``."""

    __slots__ = ("justify", "style", "text", "value")

    def __init__(self, value: Any, text: str, justify: str = "right", style: str = "") -> None:
        self.value = value
        self.text = text
        self.justify = justify
        self.style = style

    def __rich__(self) -> Text:
        return Text(self.text, justify=self.justify, style=self.style)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cell) and (self.text, self.style) == (other.text, other.style)

    def __hash__(self) -> int:
        return hash((self.text, self.style))

    def __repr__(self) -> str:
        return f"Cell({self.text!r})"


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def name_cell(name: str, width: int = 48, style: str = "") -> Cell:
    shown = name if len(name) <= width else name[: width - 1] + "…"
    return Cell(name.lower(), shown, justify="left", style=style)


def fmt_num(x: float, digits: int = 3) -> str:
    """A compact number: 3 significant digits, k/M suffixes for large ones."""
    if x is None or not math.isfinite(x):
        return "–"
    ax = abs(x)
    if isinstance(x, int) and ax < 1e5:
        return str(x)
    if ax >= 1e6:
        return f"{x / 1e6:.{max(digits - 1, 0)}f}M"
    if ax >= 1e4:
        return f"{x / 1e3:.{max(digits - 2, 0)}f}k"
    if ax >= 100 or ax == 0:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    if ax < 0.01:
        return f"{x:.1e}".replace("e-0", "e-")  # 7.1e-5: fits a narrow column
    return f"{x:.{digits}g}"


def num_cell(x: float, unit: str = "", style: str = "") -> Cell:
    v = x if x is not None and math.isfinite(x) else -math.inf
    return Cell(v, fmt_num(x) + unit, style=style)


def pct_cell(share: float) -> Cell:
    if not math.isfinite(share):
        return Cell(-math.inf, "–")
    return Cell(share, f"{share * 100:.1f}%")


def ci_cell(ci: Sequence[float]) -> Cell:
    lo, hi = (float(ci[0]), float(ci[1])) if len(ci) == 2 else (math.nan, math.nan)
    return Cell(hi - lo if math.isfinite(hi - lo) else -math.inf,
                f"[{fmt_num(lo)}, {fmt_num(hi)}]")


def sync_table(
    table: DataTable[Any],
    rows: Sequence[tuple[str, Sequence[Cell]]],
    sort_col: int | None = None,
    reverse: bool = True,
) -> None:
    """Make ``table`` show ``rows`` (key, cells) with keyed updates, keeping the cursor on
    the same row key across the update (rows are added/removed/updated, never cleared)."""
    cursor_key: str | None = None
    if table.row_count:
        try:
            cursor_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            cursor_key = None
    col_keys = [c.value for c in table.columns]
    wanted = {k for k, _ in rows}
    if len(wanted) != len(rows):  # the callers make them unique, where they map key → row
        raise ValueError("sync_table: row keys must be unique (unique_key)")
    for rk in [rk for rk in table.rows if rk.value not in wanted]:
        table.remove_row(rk)
    existing = {rk.value for rk in table.rows}
    for key, cells in rows:
        if key in existing:
            old = table.get_row(key)
            for ck, new, prev in zip(col_keys, cells, old, strict=False):
                if new != prev:
                    table.update_cell(key, ck, new)  # type: ignore[arg-type]
        else:
            table.add_row(*cells, key=key)
    if sort_col is not None and table.row_count > 1:
        name_col = 0

        def sort_key(row: tuple[Any, ...]) -> Any:
            c = row[sort_col]
            n = row[name_col]
            return (c.value, n.value) if not reverse else (c.value, _Rev(n.value))

        table.sort(key=sort_key, reverse=reverse)
    if cursor_key is not None and cursor_key in wanted:
        idx = table.get_row_index(cursor_key)
        if idx != table.cursor_row:
            table.move_cursor(row=idx, animate=False)


class _Rev:
    """Inverts the order of a value (ties broken ascending by name in a descending sort)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Rev) -> bool:
        return bool(self.v > other.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Rev) and bool(self.v == other.v)

    def __hash__(self) -> int:
        return hash(self.v)


def selected_key(table: DataTable[Any]) -> str | None:
    if not table.row_count:
        return None
    try:
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
    except Exception:
        return None


def esc(text: object) -> str:
    """``text`` made literal inside Textual markup (C++ kernel names are full of ``[``)."""
    return str(text).replace("[", "\\[")


def unique_key(key: str, taken: Container[str]) -> str:
    """``key``, or ``key#2``, ``key#3``, ... if taken: a snapshot from a file may hold two
    rows of one class (the contract says it should not), and a table's row keys must not
    repeat."""
    n, out = 1, key
    while out in taken:
        n += 1
        out = f"{key}#{n}"
    return out


def short_name(name: str, template_max: int = 16) -> str:
    """A readable kernel name for a table cell: no ``void``, no ``(anonymous namespace)::``,
    no trailing parameter list, long template argument lists folded to ``<…>``."""
    s = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            ch = s[i]
            if ch == ")":
                depth += 1
            elif ch == "(":
                depth -= 1
                if depth == 0:
                    if i > 0:
                        s = s[:i]
                    break
    out: list[str] = []
    depth = 0
    start = 0
    for ch in s:
        if ch == "<":
            if depth == 0:
                start = len(out)
            depth += 1
            out.append(ch)
        elif ch == ">" and depth > 0:
            depth -= 1
            out.append(ch)
            if depth == 0 and len(out) - start - 2 > template_max:
                out[start:] = ["<", "…", ">"]
        else:
            out.append(ch)
    return "".join(out).strip() or name


def short_class(name: str) -> str:
    """A class key (``kernel:<name>``, ``copy:…``, ``idle.…``) with a kernel's C++ name
    folded by :func:`short_name`."""
    return f"kernel:{short_name(name[7:])}" if name.startswith("kernel:") else name


def fit_name(name: str, width: int) -> str:
    """:func:`short_name`, and where that is wider than ``width`` also without the namespaces
    before the kernel's own name (``at::native::``, ``cutlass::``): on an 80-column screen
    every PyTorch kernel would otherwise read ``at::native::…`` alike. The detail screen and
    the filter keep the full name."""
    s = short_name(name)
    if len(s) <= width:
        return s
    head = s.find("<")
    cut = s.rfind("::", 0, head if head >= 0 else len(s))
    return s[cut + 2:] if cut >= 0 else s
