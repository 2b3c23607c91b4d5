"""``inject(pid, code, timeout_s=...)``: preflight, pick the method, stage the code, run it.

Owns the choice of method (``remote_exec`` for Python >= 3.14; below that the built-in
ptrace caller on x86-64 Linux, gdb elsewhere or when asked) and the staging: the code goes
to a private temp file, and what crosses into the target is a one-line bootstrap that reads
that file, deletes it and ``exec``s it with every exception caught, so no quoting of user
code is involved and nothing raised can escape into the target.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Literal

from ppwtop.inject import gdb as gdb_mod
from ppwtop.inject import ptrace_call
from ppwtop.inject.errors import AttachError
from ppwtop.inject.preflight import TargetInfo, inspect_target
from ppwtop.inject.remote_exec import inject_remote_exec

Method = Literal["auto", "remote_exec", "ptrace", "gdb"]

_BOOT_INNER = """\
try:
    import os as _o
    with open(_p, "rb") as _f:
        _src = _f.read()
    for _n in _o.listdir(_d):
        _o.unlink(_o.path.join(_d, _n))
    _o.rmdir(_d)
    exec(compile(_src, "<ppwtop-inject>", "exec"), {"__name__": "__ppwtop_inject__"})
except BaseException:
    pass
"""


def bootstrap_source(payload_path: str, staging_dir: str) -> str:
    """The one line that crosses into the target: exec of a fixed snippet in a fresh dict."""
    return f"exec({_BOOT_INNER!r}, {{'_p': {payload_path!r}, '_d': {staging_dir!r}}})"


@dataclass(frozen=True)
class Injected:
    """What ``inject`` did: the method, and for ptrace whether the code ran at once."""

    method: str
    detail: str = ""


def choose_method(info: TargetInfo, method: Method = "auto") -> str:
    """The concrete method for this target (AttachError if the asked one cannot work)."""
    if method != "auto":
        if method == "remote_exec" and info.python < (3, 14):
            raise AttachError(info.pid, f"sys.remote_exec needs Python >= 3.14; the target "
                                        f"runs {info.python[0]}.{info.python[1]}")
        return method
    if info.python >= (3, 14):
        return "remote_exec"
    if ptrace_call.supported():
        return "ptrace"
    return "gdb"


def _stage(code: str, uid: int) -> tuple[str, str]:
    d = tempfile.mkdtemp(prefix="ppwtop-inject-")
    payload = os.path.join(d, "payload.py")
    with open(payload, "w", encoding="utf-8") as f:
        f.write(code)
    if uid != os.geteuid() and os.geteuid() == 0:
        for p in (d, payload):
            os.chown(p, uid, -1)
    return d, payload


def inject(pid: int, code: str, *, timeout_s: float, method: Method = "auto",
           info: TargetInfo | None = None) -> Injected:
    """Run ``code`` (Python source) in ``pid``'s main thread; AttachError (one line) if not.

    Returns once the code has run (gdb; ptrace ``now:``) or is queued to run at the target's
    next bytecode (ptrace ``pending``; ``remote_exec``): use ``ConnectBack`` to know it ran.
    """
    info = info or inspect_target(pid)
    if not info.may_ptrace:
        raise AttachError(pid, "not permitted to attach", info.ptrace_note)
    chosen = choose_method(info, method)
    gdb_path = None
    if chosen == "gdb":
        gdb_path = gdb_mod.find_gdb()
        if gdb_path is None:
            raise AttachError(pid, "gdb is not installed (needed to attach to Python "
                                   f"{info.python[0]}.{info.python[1]} on this machine)",
                              "install gdb (apt-get install gdb) or set PPWTOP_GDB")
        problem = gdb_mod.gdb_problem(gdb_path)
        if problem is not None:
            raise AttachError(pid, f"gdb cannot inject here: {problem}",
                              'inject(method="ptrace"), what ppwtop attach uses on x86-64'
                              if ptrace_call.supported() else None)
    staging, payload = _stage(code, info.uid)
    boot = bootstrap_source(payload, staging)
    keep = False
    try:
        if chosen == "remote_exec":
            script = os.path.join(staging, "boot.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(boot + "\n")
            if info.uid != os.geteuid() and os.geteuid() == 0:
                os.chown(script, info.uid, -1)
            inject_remote_exec(pid, script, timeout_s=timeout_s)
            keep = True  # the target deletes the staging directory when it runs
            return Injected("remote_exec", "scheduled")
        if chosen == "ptrace":
            how = ptrace_call.run_simple_string(pid, boot.encode(), timeout_s=timeout_s)
            keep = how == "pending"
            return Injected("ptrace", how)
        gdb_mod.inject_gdb(pid, boot, os.path.join(staging, "gdb.cmd"), timeout_s=timeout_s,
                           gdb=gdb_path)
        return Injected("gdb", "ran")
    finally:
        if not keep:
            shutil.rmtree(staging, ignore_errors=True)
