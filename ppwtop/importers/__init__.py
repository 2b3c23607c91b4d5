"""Importers: files people already have → the one columnar data model (:class:`Trace`).

Owns format detection and dispatch.  Each format lives in its own module:
``kineto`` (PyTorch profiler Chrome-trace JSON), ``nsys`` (Nsight Systems SQLite export),
``smi_csv`` (nvidia-smi CSV power logs), and ppwtop's own recordings (``ppwtop.recording``).
Every importer raises :class:`ppwtop.errors.InputError` for a file it cannot use.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from attribution.model import Trace
from ppwtop.errors import InputError
from ppwtop.fileio import GZIP_MAGIC, read_head

PPW_MAGIC = b"PPWREC"
SQLITE_MAGIC = b"SQLite format 3\x00"


def sniff(path: str | Path) -> str:
    """The format of a file: 'kineto', 'nsys', 'smi_csv' or 'ppw'."""
    p = Path(path)
    head = read_head(p, 64)
    if not head:
        raise InputError(p, "file is empty")
    if head.startswith(PPW_MAGIC):
        return "ppw"
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC):
        head = _gzip_head(p, 64)
        if not head:
            raise InputError(p, "truncated or corrupt gzip")
        if not head.lstrip().startswith((b"{", b"[")) and b"," in head:
            return "smi_csv"  # a gzipped nvidia-smi log
        return "kineto"
    stripped = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if stripped.startswith((b"{", b"[")):
        return "kineto"
    if b"," in head or p.suffix.lower() == ".csv":
        return "smi_csv"
    raise InputError(p, "unknown file format (expected Kineto JSON, nsys SQLite, "
                        "nvidia-smi CSV or a ppwtop recording)")


def _gzip_head(p: Path, n: int) -> bytes:
    """The first ``n`` decompressed bytes of a gzip file (empty where it does not inflate)."""
    try:
        with gzip.open(p, "rb") as f:
            return f.read(n)
    except (EOFError, OSError, zlib.error):
        return b""


def load_trace(path: str | Path) -> Trace:
    """Load a trace (Kineto JSON[.gz], nsys SQLite or .ppw recording)."""
    kind = sniff(path)
    if kind == "kineto":
        from ppwtop.importers.kineto import load_kineto

        return load_kineto(path)
    if kind == "nsys":
        from ppwtop.importers.nsys import load_nsys

        return load_nsys(path)
    if kind == "ppw":
        return _recording(path)
    raise InputError(path, "is a CSV power log, not a trace (pass it with --power)")


def _recording(path: str | Path) -> Trace:
    """A recording read whole, or InputError where it was cut inside its header: it holds
    nothing of the run, and gave a 0 J snapshot and exit 0 from ``attribute`` and
    ``export`` while ``replay`` refused it (an audit, 2026-12-05)."""
    from ppwtop.recording import read_recording

    rec = read_recording(path)
    if rec.meta.get("header_complete") is False:
        notes = rec.meta.get("notes") or ["cut inside its header"]
        raise InputError(path, f"holds nothing to read: {notes[0]}")
    return rec


def import_notes(path: str | Path, trace: Trace) -> list[str]:
    """What the importer noted about a file (skipped rows, ignored events, a recording cut
    or corrupt part-way) and what a late-attach recording cannot hold, as warnings naming
    the file: every command that reads one says them (``attribute``, ``replay``,
    ``export``)."""
    notes = list(trace.meta.get("notes") or [])  # text: the importers and the recording
    # reader (which drops a crafted file's other notes, with a note) keep them so
    missing = trace.meta.get("late_attach_missing") if trace.meta.get("late_attach") else None
    if missing:  # a list of str as ppwtop writes it; anything else (a crafted file) as text
        what = missing if isinstance(missing, list) else [missing]
        notes.append("recorded by a late attach: missing " + "; ".join(map(str, what)))
    return [f"{path}: {n}" for n in notes]


def load_power(path: str | Path, tz: str | None = None) -> Trace:
    """Load a power source (nvidia-smi CSV or .ppw recording) as a Trace holding power,
    energy and clock batches.  ``tz`` names the zone of naive CSV timestamps."""
    kind = sniff(path)
    if kind == "smi_csv":
        from ppwtop.importers.smi_csv import load_smi_csv

        return load_smi_csv(path, tz=tz)
    if kind == "ppw":
        rec = _recording(path)  # its readings only: its records are the trace's business
        return Trace(strings=rec.strings, power=rec.power, energy=rec.energy, clocks=rec.clocks,
                     devices=list(rec.devices), meta=dict(rec.meta))
    raise InputError(path, f"is a {kind} trace, not a power log (nvidia-smi CSV or .ppw)")
