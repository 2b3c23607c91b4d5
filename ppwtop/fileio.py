"""Reading input files: every read problem becomes one :class:`InputError` naming the file.

Owns the error wording for missing, directory, unreadable and corrupt-gzip inputs, so the
importers, the snapshot reader, the owners file and the exporters all say the same thing.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

from ppwtop.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[Path]:
    """Open/read ``path`` inside the block; OS errors become one :class:`InputError`."""
    p = Path(path)
    try:
        yield p
    except FileNotFoundError:
        raise InputError(p, "no such file") from None
    except IsADirectoryError:
        raise InputError(p, "is a directory, not a file") from None
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror or e}") from None


def read_bytes(path: str | Path, *, gunzip: bool = True) -> bytes:
    """The file's bytes, decompressed when it is gzip (and ``gunzip``)."""
    with reading(path) as p:
        raw = p.read_bytes()
    if gunzip and raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error):
            raise InputError(p, "truncated or corrupt gzip") from None
    return raw


def read_head(path: str | Path, n: int) -> bytes:
    """The first ``n`` bytes of the file (for format sniffing)."""
    with reading(path) as p, p.open("rb") as f:
        return f.read(n)
