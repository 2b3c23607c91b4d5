"""Python >= 3.14 targets: ``sys.remote_exec`` run by the target's own interpreter (PEP 768).

Owns the command (``/proc/PID/exe -I -c "import sys; sys.remote_exec(PID, PATH)"``) and the
mapping of its failures. ``sys.remote_exec`` only schedules the script: the target runs it
at its next safe point, so the caller learns it ran through the connect-back.
UNVERIFIED: no 3.14 interpreter was available where this was written (docs/attach.md).
"""

from __future__ import annotations

import subprocess

from ppwtop.inject.errors import AttachError

# (pattern in the interpreter's stderr, message, hint): the first match wins.
REMOTE_FAILURES: list[tuple[str, str, str | None]] = [
    ("Operation not permitted",
     "the target's interpreter was not permitted to attach (ptrace: EPERM)",
     "run as the target's user or root; check kernel.yama.ptrace_scope "
     "(sudo sysctl kernel.yama.ptrace_scope=0)"),
    ("emote debugging is not enabled",
     "remote debugging is disabled in the target",
     "it was started with PYTHON_DISABLE_REMOTE_DEBUG or -X disable_remote_debug"),
    ("No such process", "no such process", None),
    ("has no attribute 'remote_exec'",
     "the target's interpreter has no sys.remote_exec (needs Python >= 3.14)", None),
]


def remote_exec_command(interpreter: str, pid: int, script_path: str) -> list[str]:
    """The command run by ppwtop: the target's interpreter, isolated from our environment."""
    return [interpreter, "-I", "-c", f"import sys; sys.remote_exec({pid}, {script_path!r})"]


def map_remote_exec(pid: int, rc: int, stderr: str) -> AttachError | None:
    """None on success; else the one-line error the interpreter's stderr means."""
    if rc == 0:
        return None
    for pattern, message, hint in REMOTE_FAILURES:
        if pattern in stderr:
            return AttachError(pid, message, hint)
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return AttachError(pid, "sys.remote_exec failed: "
                            + (lines[-1] if lines else f"exit status {rc}"))


def inject_remote_exec(pid: int, script_path: str, *, timeout_s: float,
                       interpreter: str | None = None) -> None:
    """Schedule ``script_path`` in ``pid``; returns once the target accepted it."""
    cmd = remote_exec_command(interpreter or f"/proc/{pid}/exe", pid, script_path)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise AttachError(pid, f"sys.remote_exec did not finish within {timeout_s:g} s") \
            from None
    except OSError as e:
        raise AttachError(pid, f"cannot run the target's interpreter: {e.strerror}") from None
    err = map_remote_exec(pid, proc.returncode, proc.stderr)
    if err is not None:
        raise err
