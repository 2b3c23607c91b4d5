"""Reading input files: every read problem becomes one :class:`InputError` naming the file.

Owns the error wording for missing, directory, unreadable and corrupt-gzip inputs, so the
importers, the snapshot reader, the owners file and the exporters all say the same thing;
:func:`unwritable`, the one check an output path gets before a long run; and
:func:`write_atomic`, how a finished output replaces what was at its path (all or nothing),
with :func:`write_output`, the same with the one-line error every command gives.
Only regular files are read: a FIFO would block the read forever and a device (``/dev/zero``)
never ends, so either is refused before it is opened.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import secrets
import stat
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from ppwtop.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"


def unwritable(p: Path) -> str | None:
    """Why ``p`` cannot be written as a file, where that is knowable without creating it (a
    directory there, a missing or non-directory parent, no permission); None otherwise."""
    if p.is_dir():
        return "is a directory"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        return f"no such directory {str(parent)!r}"
    if not parent.is_dir():
        return f"{str(parent)!r} is not a directory"
    if not os.access(p, os.W_OK) if p.exists() else not os.access(parent, os.W_OK | os.X_OK):
        return "permission denied"
    return None


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` as the file at ``path``, all or nothing: into a new file beside it,
    then renamed over it, so a failed write (disk full, Ctrl-C) leaves what was there (an
    audit: ``attribute -o`` on a full disk left the old snapshot as 28 KB of cut JSON).  The
    new file takes an existing one's permissions; a symlink stays a symlink (the file it
    leads to is replaced).  What is not a regular file (``/dev/stdout``, a FIFO) is written
    in place, and so is a file whose directory takes no new file (a writable file in a
    directory ppwtop may not write, a name too long for the temporary's prefix).  OSError on
    failure, the temporary file removed."""
    try:
        old: os.stat_result | None = os.stat(path)  # (through a symlink)
    except OSError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        # /dev/stdout, a FIFO, >(cmd): written as given (its real path may be a pipe's
        # /proc name, where no file can be made)
        _write_in_place(Path(path), data)
        return
    target = Path(os.path.realpath(path))
    # a fresh name each time, created exclusively: two writers never share one, and a link
    # planted at the name is not followed
    tmp = target.with_name(f".{target.name[:120]}.{os.getpid()}.{secrets.token_hex(4)}"
                           ".ppwtop-tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # (umask applies)
    except OSError as e:
        if old is None or e.errno not in (errno.EACCES, errno.EPERM, errno.ENAMETOOLONG):
            raise
        _write_in_place(target, data)
        return
    try:
        with os.fdopen(fd, "wb") as f:
            if old is not None:
                with contextlib.suppress(OSError):
                    os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_output(path: str | Path, data: bytes) -> None:
    """:func:`write_atomic`, a failure as :class:`InputError` naming the file ("cannot
    write: No space left on device")."""
    try:
        write_atomic(path, data)
    except OSError as e:
        raise InputError(path, f"cannot write: {e.strerror or e}") from None


def _write_in_place(target: Path, data: bytes) -> None:
    with open(target, "wb") as f:
        f.write(data)


def overwrites_input(out: str | Path, inputs: Iterable[str | Path | None]
                     ) -> str | Path | None:
    """The input that ``out`` names (the same file, through links or another spelling), or
    None: writing the output would destroy it (``attribute --trace r.ppw -o r.ppw``).
    ``inputs`` may hold None (an optional input not given)."""
    try:
        if not Path(out).exists():
            return None
    except OSError:
        return None
    for i in inputs:
        if i is None:
            continue
        with contextlib.suppress(OSError):
            if os.path.samefile(out, i):
                return i
    return None


def check_regular(p: Path) -> None:
    """Raise OSError (FileNotFoundError, ...) or :class:`InputError` unless ``p`` is a
    regular file (symlinks followed)."""
    mode = p.stat().st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError
    if not stat.S_ISREG(mode):
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                "a socket" if stat.S_ISSOCK(mode) else "a special file")
        raise InputError(p, f"is {kind}, not a regular file")


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[Path]:
    """Open/read ``path`` inside the block; OS errors become one :class:`InputError`, and so
    does a path that is not a regular file (checked before the block runs)."""
    p = Path(path)
    try:
        check_regular(p)
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
