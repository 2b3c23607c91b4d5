"""Checks made before anything touches the target: ``inspect_target(pid) -> TargetInfo``.

Owns the one-line refusals for a dead pid, a pid that is not Python, another user's pid,
ptrace being forbidden (Yama ``ptrace_scope``, missing ``CAP_SYS_PTRACE``), and the Python
version of the target, read from ``/proc/PID/exe`` and ``/proc/PID/maps`` only. Nothing here
stops, signals or writes to the target.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

from ppwtop.inject.errors import AttachError

_PY_NAME = re.compile(r"(?:^|/)(?:lib)?python(\d)\.(\d+)[a-z]*(?:[-.]|$)")
_CAP_SYS_PTRACE = 19
PTRACE_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")
SYSCTL_HINT = "or allow it: sudo sysctl kernel.yama.ptrace_scope=0"


@dataclass(frozen=True)
class TargetInfo:
    """What preflight learned about a target process."""

    pid: int
    exe: str
    python: tuple[int, int]
    uid: int
    may_ptrace: bool
    ptrace_note: str = ""
    libpython: str | None = None


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def python_version_from_paths(exe: str, mapped: list[str]) -> tuple[int, int] | None:
    """(major, minor) from ``libpython3.X`` among the mapped files, else the exe's name."""
    for path in [*mapped, exe]:
        m = _PY_NAME.search(path)
        if m and m.group(1) == "3":
            return int(m.group(1)), int(m.group(2))
    return None


def _status_field(pid: int, name: str) -> list[str]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split()[1:]
    return []


def has_cap_sys_ptrace() -> bool:
    """True if this process's effective capabilities include CAP_SYS_PTRACE."""
    caps = _status_field(os.getpid(), "CapEff")
    return bool(caps) and bool(int(caps[0], 16) >> _CAP_SYS_PTRACE & 1)


def is_descendant(pid: int, ancestor: int) -> bool:
    """True if ``ancestor`` is a (grand)parent of ``pid``."""
    seen = 0
    while pid > 1 and seen < 256:
        try:
            pid = int(_status_field(pid, "PPid")[0])
        except (OSError, IndexError, ValueError):
            return False
        if pid == ancestor:
            return True
        seen += 1
    return False


def ptrace_permission(pid: int, target_uid: int, *, scope: int | None = None,
                      euid: int | None = None, cap: bool | None = None,
                      descendant: bool | None = None) -> tuple[bool, str]:
    """Whether we may ptrace ``pid``, and if not why, with a hint. Keywords are for tests."""
    if scope is None:
        try:
            scope = int(PTRACE_SCOPE.read_text().strip())
        except (OSError, ValueError):
            scope = 0  # no Yama: classic same-uid rule
    euid = os.geteuid() if euid is None else euid
    cap = has_cap_sys_ptrace() if cap is None else cap
    if target_uid != euid and not cap:
        return False, (f"it belongs to user {_user(target_uid)} and ppwtop runs as "
                       f"{_user(euid)}; run ppwtop as that user or as root")
    if scope >= 3:
        return False, ("ptrace is disabled on this machine (kernel.yama.ptrace_scope=3, "
                       "only a reboot changes it)")
    if scope == 2 and not cap:
        return False, ("ptrace needs CAP_SYS_PTRACE here (kernel.yama.ptrace_scope=2): "
                       "run ppwtop as root")
    if scope == 1 and not cap:
        if descendant is None:
            descendant = is_descendant(pid, os.getpid())
        if not descendant:
            return False, ("ptrace of a non-child process is restricted "
                           "(kernel.yama.ptrace_scope=1): run ppwtop as root, "
                           + SYSCTL_HINT)
    return True, ""


def inspect_target(pid: int) -> TargetInfo:
    """Look at ``pid`` without touching it; raise AttachError (one line) if we cannot attach."""
    if pid <= 0:
        raise AttachError(pid, "not a valid process id")
    proc = Path(f"/proc/{pid}")
    try:
        uid = int(_status_field(pid, "Uid")[1])  # effective uid
        state = _status_field(pid, "State")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        raise AttachError(pid, "no such process") from None
    if state and state[0] in ("Z", "X"):
        raise AttachError(pid, "the process has exited (zombie)")
    tracer = _status_field(pid, "TracerPid")
    if tracer and tracer[0] != "0":
        raise AttachError(pid, f"it is already being traced by pid {tracer[0]} (a debugger "
                               "or profiler)", "detach that first: a process has one tracer")
    try:
        exe = str((proc / "exe").readlink()).removesuffix(" (deleted)")
        mapped = sorted({line.split(None, 5)[5].strip()
                         for line in (proc / "maps").read_text().splitlines()
                         if len(line.split(None, 5)) == 6})
    except FileNotFoundError:
        raise AttachError(pid, "no such process") from None
    except PermissionError:
        ok, why = ptrace_permission(pid, uid)
        raise AttachError(pid, "cannot read the process's executable and memory map",
                          why or "run ppwtop as the target's user or as root") from None
    version = python_version_from_paths(exe, mapped)
    if version is None:
        raise AttachError(pid, f"not a Python process ({exe})",
                          "no python executable or libpython is mapped")
    libpython = next((p for p in mapped if "/libpython3" in p), None)
    ok, why = ptrace_permission(pid, uid)
    return TargetInfo(pid=pid, exe=exe, python=version, uid=uid, may_ptrace=ok,
                      ptrace_note=why, libpython=libpython)
