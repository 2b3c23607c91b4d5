"""Find exported function addresses in a running process from its ELF files on disk.

Owns the tiny ELF64 reader the built-in ptrace injector needs: the dynamic symbol table
(``.dynsym``/``.dynstr``) of the Python executable or ``libpython``, and the load bias of
that file in the target, read from ``/proc/PID/maps``. Only little-endian ELF64 (x86-64).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

_SHT_DYNSYM = 11
_PT_LOAD = 1
_STT_FUNC = 2


@dataclass(frozen=True)
class Mapping:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    offset: int
    path: str


def read_maps(pid: int) -> list[Mapping]:
    """Parse /proc/PID/maps (raises OSError when the process is gone or not readable)."""
    out: list[Mapping] = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        lo, hi = parts[0].split("-")
        path = parts[5].strip() if len(parts) == 6 else ""
        out.append(Mapping(int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16), path))
    return out


def dynamic_symbols(path: str, names: set[str]) -> dict[str, int]:
    """Return {name: st_value} for the defined functions among ``names`` in ``path``'s .dynsym."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    found: dict[str, int] = {}
    for i in range(shnum):
        sh = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        if sh[1] != _SHT_DYNSYM:
            continue
        sym_off, sym_size, link, entsize = sh[4], sh[5], sh[6], sh[9]
        strtab = struct.unpack_from("<IIQQQQIIQQ", data, shoff + link * shentsize)
        str_off = strtab[4]
        for j in range(sym_size // entsize):
            name_i, info, _other, shndx, value, _size = struct.unpack_from(
                "<IBBHQQ", data, sym_off + j * entsize)
            if shndx == 0 or info & 0xF != _STT_FUNC:
                continue
            end = data.index(b"\0", str_off + name_i)
            name = data[str_off + name_i:end].decode("ascii", "replace")
            if name in names:
                found[name] = value
    return found


def load_bias(file: str, path: str, maps: list[Mapping]) -> int:
    """Where ``path`` (read from ``file``) is loaded: its lowest mapping minus its first
    PT_LOAD's page-aligned vaddr."""
    data = Path(file).read_bytes()[:4096]
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    vaddrs = []
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr = struct.unpack_from("<IIQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            vaddrs.append((p_offset, p_vaddr))
    first = min(m.start - m.offset for m in maps if m.path == path)
    lowest_offset, lowest_vaddr = min(vaddrs)
    return int(first - ((lowest_vaddr - lowest_offset) & ~0xFFF))


def resolve(pid: int, names: set[str]) -> dict[str, int]:
    """Absolute addresses of ``names`` in ``pid``: searched in libpython, then the executable.

    Raises LookupError naming what is missing.
    """
    maps = read_maps(pid)
    exe = str(Path(f"/proc/{pid}/exe").readlink()).removesuffix(" (deleted)")
    root = f"/proc/{pid}/root"
    candidates: list[str] = []
    for m in maps:
        base = m.path.rsplit("/", 1)[-1]
        if base.startswith("libpython3") and m.path not in candidates:
            candidates.append(m.path)
    if exe not in candidates:
        candidates.append(exe)
    out: dict[str, int] = {}
    for path in candidates:
        if not any(m.path == path for m in maps):
            continue
        try:
            syms = dynamic_symbols(root + path, names - out.keys())
        except (OSError, ValueError, struct.error):
            continue
        if syms:
            bias = load_bias(root + path, path, maps)
            out.update({k: v + bias for k, v in syms.items()})
        if out.keys() >= names:
            return out
    raise LookupError("symbols not found in the target: " + ", ".join(sorted(names - out.keys())))
