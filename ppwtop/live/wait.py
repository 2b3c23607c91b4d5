"""Waiting for the command ``ppwtop run``/``record`` launched, once the session has ended.

Owns what ppwtop says and returns while it waits: the command's status as a shell gives it;
on Ctrl-C, whether the command ended too (a terminal's Ctrl-C reaches the whole process
group) or keeps running, naming its pid; on SIGTERM or SIGHUP (:class:`Terminated`), the
command terminated with ppwtop.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess

from ppwtop.live.signals import Terminated
from ppwtop.live.status_out import StatusOut

FIRST_WAIT_S = 2.0
"""Quiet wait: the target usually exits right after its agent said bye."""
AFTER_INTERRUPT_S = 1.0
"""How long a Ctrl-C'd wait still gives the command to end of the same Ctrl-C."""
AFTER_TERMINATE_S = 5.0
"""How long the command has to exit after ppwtop passed SIGTERM on."""


def exit_status(returncode: int, out: StatusOut) -> int:
    """The command's status as a shell gives it: 128 + N for a command killed by signal N
    (Popen's −N passed to sys.exit would read as 256 − N), with a line saying so."""
    if returncode >= 0:
        return returncode
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "unknown signal"
    print(f"ppwtop: the command was killed by signal {-returncode} ({name})", file=out,
          flush=True)
    return 128 - returncode


def wait_for_command(child: subprocess.Popen[bytes], failed: int, out: StatusOut, *,
                     terminated: Terminated | None = None) -> int:
    """Wait for ``child``; ``failed`` (non-zero: the session's own failure) wins over its
    status.  Ctrl-C stops waiting, SIGTERM/SIGHUP terminate the command (see module), as
    does ``terminated``: the signal that ended the session itself."""
    if terminated is not None:
        return _stopped_waiting(child, terminated, failed, out)
    try:
        try:
            child.wait(timeout=FIRST_WAIT_S)
        except subprocess.TimeoutExpired:
            print(f"ppwtop: waiting for the command (pid {child.pid}) to exit; "
                  "Ctrl-C stops waiting", file=out, flush=True)
            child.wait()
    except KeyboardInterrupt as e:
        return _stopped_waiting(child, e, failed, out)
    return failed or exit_status(int(child.returncode), out)


def _stopped_waiting(child: subprocess.Popen[bytes], e: KeyboardInterrupt, failed: int,
                     out: StatusOut) -> int:
    if isinstance(e, Terminated):
        if child.poll() is None:
            child.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
            child.wait(timeout=AFTER_TERMINATE_S)
        state = "terminated" if child.poll() is not None else \
            f"sent SIGTERM, still running after {AFTER_TERMINATE_S:g} s"
        print(f"ppwtop: {e.reason}: the command (pid {child.pid}) {state}", file=out,
              flush=True)
        return failed or e.exit_code
    with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
        child.wait(timeout=AFTER_INTERRUPT_S)  # a terminal's Ctrl-C reached it as well
    if child.poll() is None:
        print(f"ppwtop: stopped waiting; the command (pid {child.pid}) keeps running",
              file=out, flush=True)
        return 130
    print(f"ppwtop: interrupted; the command (pid {child.pid}) ended too", file=out,
          flush=True)
    return failed or exit_status(int(child.returncode), out) or 130


__all__ = ["exit_status", "wait_for_command"]
