"""Snapshot files: write and read ``ppwtop.snapshot/1`` JSON with orjson.

Owns the file side of :class:`attribution.snapshot.Snapshot`; every read problem becomes an
:class:`ppwtop.errors.InputError` naming the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from attribution.snapshot import Snapshot
from ppwtop.errors import InputError
from ppwtop.fileio import overwrites_input, read_bytes, unwritable, write_output
from ppwtop.recording.format import MAGIC as RECORDING_MAGIC


def _default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def _utf8(obj: Any) -> Any:
    """``obj`` with every string made valid UTF-8: a path argument whose bytes are not UTF-8
    holds lone surrogates, written as the bytes' escapes (``t\\xff.json``)."""
    if isinstance(obj, str):
        try:
            return obj.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            return obj.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(obj, dict):
        return {_utf8(k): _utf8(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_utf8(v) for v in obj]
    return obj


def dumps(snapshot: Snapshot) -> bytes:
    d = snapshot.to_dict()
    opts = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    try:
        return orjson.dumps(d, option=opts, default=_default)
    except orjson.JSONEncodeError:  # a string that is not UTF-8 (see _utf8); else re-raised
        return orjson.dumps(_utf8(d), option=opts, default=_default)


def check_output(path: str | Path, inputs: Sequence[str | Path | None] = ()) -> None:
    """InputError unless ``path`` looks writable as a file: said before a long run rather
    than after it (``attribute -o DIR`` printed the run's warnings, then the error).  Checks
    what is knowable without creating the file: an empty name, a directory, a missing or
    non-directory parent, no write permission; and that it is none of the command's
    ``inputs`` and no ppwtop recording (none of its callers writes one), which the output
    would replace with no way back (an audit: ``attribute --trace r.ppw -o r.ppw`` exited 0 with the
    recording gone)."""
    if str(path) == "":
        raise InputError(path, "cannot write: the output path is empty")
    why = unwritable(Path(path))
    if why is not None:
        raise InputError(path, f"cannot write: {why}")
    same = overwrites_input(path, inputs)
    if same is not None:
        raise InputError(path, f"is also this command's input ({str(same)!r}): writing the "
                               "output there would destroy it; choose another output path")
    if is_recording(Path(path)):
        raise InputError(path, "is a ppwtop recording: writing this output over it would "
                               "lose the recording; choose another path (or remove it first)")


def is_recording(p: Path) -> bool:
    """Whether ``p`` is a regular file that starts as a ppwtop recording."""
    try:
        if not p.is_file():
            return False
        with p.open("rb") as f:
            return f.read(len(RECORDING_MAGIC)) == RECORDING_MAGIC
    except OSError:
        return False


def write_snapshot(snapshot: Snapshot, path: str | Path) -> None:
    write_output(path, dumps(snapshot))


def read_snapshot(path: str | Path) -> Snapshot:
    """Read a ``ppwtop.snapshot/1`` file (``.json`` or ``.json.gz``)."""
    p = Path(path)
    raw = read_bytes(p)
    if raw.startswith(RECORDING_MAGIC):  # the commonest wrong file: say what it is
        raise InputError(p, "is a ppwtop recording, not a snapshot: attribute it first "
                            f"(ppwtop attribute --trace {p} -o SNAPSHOT.json)")
    try:
        d = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InputError(p, f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise InputError(p, "not a ppwtop.snapshot/1 file (top level is not an object)")
    try:
        return Snapshot.from_dict(d)
    except (ValueError, TypeError) as e:
        raise InputError(p, str(e)) from None
