"""Optimization reports (Markdown and HTML).

Owns the public entry points: :func:`load_snapshot` (a snapshot file → Snapshot, bad file →
:class:`~ppwtop.errors.InputError`) and :func:`write_report` (format from the output suffix).
The content is built in :mod:`.model` and rendered by :mod:`.markdown` / :mod:`.html`.
"""

from __future__ import annotations

from pathlib import Path

from attribution.snapshot import Snapshot
from ppwtop.errors import PpwtopError
from ppwtop.fileio import write_output
from ppwtop.snapshot_io import read_snapshot

FORMATS = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}


def load_snapshot(path: str | Path) -> Snapshot:
    """Read a ``ppwtop.snapshot/1`` file (.json or .json.gz) with the project's reader."""
    return read_snapshot(path)


def report_format(out: str | Path) -> str:
    """'markdown' or 'html' from the output file's suffix; PpwtopError otherwise."""
    if Path(out).is_dir():
        raise PpwtopError(f"{out}: is a directory (use -o DIR/FILE.md or -o DIR/FILE.html)")
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
    write_output(out, text.encode("utf-8"))
    return fmt
