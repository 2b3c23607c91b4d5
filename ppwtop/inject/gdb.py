"""gdb batch injection for Python < 3.14 targets (the approach memray's attach takes).

Owns the gdb command line and script (``PyGILState_Ensure`` -> ``PyRun_SimpleString`` ->
``PyGILState_Release`` -> detach), the probe that tells whether this gdb can write registers
on this CPU, and the mapping of gdb's failure output to one-line errors. The source run in
the target is a one-liner that reads a file, so no user code passes through gdb's quoting.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import lru_cache

from ppwtop.inject.errors import AttachError

MARKER = "PPWTOP_RC="
_XSTATE = "Couldn't write extended state status"

# (pattern in gdb's output, message, hint): the first match wins.
GDB_FAILURES: list[tuple[str, str, str | None]] = [
    ("ptrace: Operation not permitted",
     "gdb was not permitted to attach (ptrace: Operation not permitted)",
     "run as the target's user or root; check kernel.yama.ptrace_scope "
     "(sudo sysctl kernel.yama.ptrace_scope=0) and the container's CAP_SYS_PTRACE/seccomp"),
    ("ptrace: No such process", "no such process", None),
    (_XSTATE,
     "this gdb cannot write the CPU's extended register state (AMX: gdb's XSAVE buffer is "
     "too small)",
     "use the built-in injector (method=\"ptrace\", ppwtop attach's default on x86-64) "
     "or a newer gdb"),
    ('No symbol "PyGILState_Ensure"',
     "gdb found no Python C API symbols in the target", "is it a CPython process?"),
    ("No symbol table is loaded",
     "gdb found no Python C API symbols in the target", "is it a CPython process?"),
    ("was signaled while in a function called from GDB",
     "the target received a fatal signal inside the injected call", None),
    ("stopped while in a function called from GDB",
     "the target stopped inside the injected call (a breakpoint or signal)", None),
    ("Can't attach to process", "gdb could not attach to the process", None),
]


def find_gdb() -> str | None:
    """``$PPWTOP_GDB`` or ``gdb`` on PATH."""
    return os.environ.get("PPWTOP_GDB") or shutil.which("gdb")


def c_string(text: str) -> str:
    """``text`` as a C string literal gdb accepts (backslash, quote and control chars escaped)."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def gdb_script(source: str) -> str:
    """The gdb commands that run ``source`` (short; no NUL) in the target and detach."""
    return "\n".join([
        "set pagination off",
        "set confirm off",
        "set $ppw_gil = (int) PyGILState_Ensure()",
        f"set $ppw_rc = (int) PyRun_SimpleString({c_string(source)})",
        "call (void) PyGILState_Release($ppw_gil)",
        f'printf "{MARKER}%d\\n", $ppw_rc',
        "detach",
        "quit",
        "",
    ])


def gdb_command(gdb: str, pid: int, script_path: str) -> list[str]:
    """The non-interactive gdb invocation (no init files, no auto-loaded scripts)."""
    return [gdb, "-nx", "-batch", "-q", "-iex", "set auto-load off", "-p", str(pid),
            "-x", script_path]


def map_gdb_output(pid: int, rc: int, output: str) -> AttachError | None:
    """None if gdb ran the source; else the one-line error its output means."""
    m = re.search(re.escape(MARKER) + r"(-?\d+)", output)
    for pattern, message, hint in GDB_FAILURES:
        if pattern in output:
            return AttachError(pid, message, hint)
    if m is None:
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit status {rc}"
        return AttachError(pid, f"gdb injection failed: {last}")
    if m.group(1) != "0":
        return AttachError(pid, "the injected code raised inside the target "
                                "(PyRun_SimpleString returned -1)")
    return None


@lru_cache(maxsize=4)
def gdb_problem(gdb: str) -> str | None:
    """Why this gdb cannot do injection on this machine, probed on a throwaway child
    process (never the target); None if it can. Cached per gdb path."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        proc = subprocess.run(
            [gdb, "-nx", "-batch", "-q", "-iex", "set auto-load off", "-p", str(child.pid),
             "-ex", "set $xmm0.v4_int32[0] = 12345", "-ex", "set $rax = $rax"],
            capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"gdb probe failed: {e}"
    finally:
        child.kill()
        child.wait()
    out = proc.stdout + proc.stderr
    if _XSTATE in out:
        return ("this gdb cannot write the CPU's extended register state "
                "(Couldn't write extended state status: Bad address; AMX CPU)")
    if "ptrace: Operation not permitted" in out:
        return "ptrace is not permitted (gdb: ptrace: Operation not permitted)"
    return None


def inject_gdb(pid: int, source: str, script_path: str, *, timeout_s: float,
               gdb: str | None = None) -> None:
    """Run ``source`` in ``pid`` through gdb; AttachError with gdb's reason on failure."""
    gdb = gdb or find_gdb()
    if gdb is None:
        raise AttachError(pid, "gdb is not installed (needed to attach to Python < 3.14)",
                          "install gdb (apt-get install gdb) or set PPWTOP_GDB")
    with open(script_path, "w") as f:
        f.write(gdb_script(source))
    try:
        proc = subprocess.run(gdb_command(gdb, pid, script_path), capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                              check=False)
    except subprocess.TimeoutExpired:
        raise AttachError(pid, f"gdb did not finish within {timeout_s:g} s; it was stopped "
                               "mid-call and the target may be left hung",
                          "gdb calls in wherever the main thread is; the built-in "
                          "injector (method=\"ptrace\", the default on x86-64) avoids "
                          "that") from None
    err = map_gdb_output(pid, proc.returncode, proc.stdout + proc.stderr)
    if err is not None:
        raise err
