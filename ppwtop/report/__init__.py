"""Optimization reports (Markdown and HTML).

Owns the public entry points: :func:`load_snapshot` (a snapshot file → Snapshot, bad file →
:class:`~ppwtop.errors.InputError`) and :func:`write_report` (format from the output suffix).
The content is built in :mod:`.model` and rendered by :mod:`.markdown` / :mod:`.html`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from attribution.snapshot import Snapshot
from ppwtop.errors import InputError, PpwtopError

FORMATS = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}


def load_snapshot(path: str | Path) -> Snapshot:
    """Read a ``ppwtop.snapshot/1`` file (.json or .json.gz) with the project's reader."""
    reader: Any = None
    if not _is_gzip(path):  # ppwtop diff's reader also takes .json.gz
        try:
            reader = importlib.import_module("ppwtop.snapshot_io").read_snapshot
        except (ImportError, AttributeError):
            reader = None
    if reader is None:
        reader = importlib.import_module("ppwtop.cli.diff").read_snapshot
    snap = reader(path)
    if not isinstance(snap, Snapshot):
        raise InputError(path, "not a ppwtop.snapshot/1 file")
    return snap


def _is_gzip(path: str | Path) -> bool:
    try:
        with Path(path).open("rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False  # the reader names the problem


def report_format(out: str | Path) -> str:
    """'markdown' or 'html' from the output file's suffix; PpwtopError otherwise."""
    suffix = Path(out).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is None:
        raise PpwtopError(f"{out}: unknown report format {suffix or '(no suffix)'!r} "
                          "(use -o FILE.md or -o FILE.html)")
    return fmt


def render_report(snap: Snapshot, fmt: str, baseline: Snapshot | None = None,
                  title: str = "") -> str:
    """The report text in ``fmt`` ('markdown' | 'html'); the verdict when there is a baseline."""
    from ppwtop.report.model import build_report

    verdict = None
    if baseline is not None:
        from attribution.diff import diff

        try:
            verdict = diff(baseline, snap)
        except (ValueError, TypeError, ZeroDivisionError) as e:
            raise PpwtopError(f"cannot compare the snapshot with its baseline: {e}") from None
    report = build_report(snap, baseline, verdict, title)
    if fmt == "html":
        from ppwtop.report.html import render_html

        return render_html(report)
    from ppwtop.report.markdown import render_markdown

    return render_markdown(report)


def write_report(snap: Snapshot, out: str | Path, baseline: Snapshot | None = None,
                 title: str = "") -> str:
    """Render and write the report; returns the format written."""
    fmt = report_format(out)
    text = render_report(snap, fmt, baseline, title)
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(out, f"cannot write ({e.strerror or e})") from None
    return fmt
