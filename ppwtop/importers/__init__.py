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
    gz = head.startswith(GZIP_MAGIC)
    if gz:
        head = _gzip_head(p, 64)
        if not head:
            raise InputError(p, "truncated or corrupt gzip")
    stripped = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if stripped.startswith((b"{", b"[")):
        return "kineto"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 (Excel's "Unicode text"):
        return "smi_csv"  # the CSV reader says what it is not
    # a CSV is text: random bytes (named .csv, or gzipped) were called "a CSV power log"
    if _texty(head) and (b"," in head or (not gz and p.suffix.lower() == ".csv")):
        return "smi_csv"
    raise InputError(p, "unknown file format (" + ("a gzip of " if gz else "")
                     + ("binary data" if not _texty(head) else "text that is no CSV")
                     + "; expected Kineto JSON, nsys SQLite, nvidia-smi CSV or a ppwtop "
                       "recording)")


def _texty(head: bytes) -> bool:
    """Whether a file's first bytes read as text: no control bytes but tab, CR, LF and form
    feed, and valid UTF-8 (a character cut at the end of ``head`` allowed)."""
    if any(b < 0x20 and b not in (0x09, 0x0A, 0x0C, 0x0D) for b in head) or 0x7F in head:
        return False
    for cut in range(4):
        try:
            head[:len(head) - cut].decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


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
    if kind == "kineto" and b"ppwtop.snapshot" in read_head(Path(path), 256):
        raise InputError(path, "is a ppwtop snapshot, not a power log (nvidia-smi CSV or .ppw)")
    what = "a JSON document (a Kineto trace?)" if kind == "kineto" else f"a {kind} trace"
    raise InputError(path, f"is {what}, not a power log (nvidia-smi CSV or .ppw)")
