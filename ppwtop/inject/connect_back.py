"""Knowing the injected code ran: a one-shot Unix socket and the wrapper that reports to it.

Owns ``ConnectBack`` (the caller listens, with a timeout, for one JSON line ``{"ok": true}``
or ``{"error": "..."}``) and ``attach_code`` (the Python source injected into the target:
makes ppwtop importable, checks the backend's imports, calls the agent's ``attach_entry``,
reports back, and never raises inside the target).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from ppwtop.inject.errors import AttachError

# Modules a backend needs in the target, with the name the user installs.
BACKEND_IMPORTS: dict[str, list[tuple[str, str]]] = {
    "cupti": [("cupti", "cupti-python")],
    "sim": [],
}
DEFAULT_ENTRY = "ppwtop.agent.bootstrap:attach_entry"
_MAX_LINE = 1 << 16


def ppwtop_sys_path() -> list[str]:
    """Where this ppwtop and its dependencies live, for a target in another environment."""
    import site

    import ppwtop

    paths = [str(Path(ppwtop.__file__).resolve().parents[1])]
    for p in site.getsitepackages():
        if p not in paths and Path(p).is_dir():
            paths.append(p)
    return paths


class ConnectBack:
    """A listening Unix socket in a fresh private directory; ``wait`` reads one report.

    ``target_uid``: when ppwtop runs as root for another user's process, the directory and
    socket are handed to that user so the target can connect.
    """

    def __init__(self, target_uid: int | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="ppwtop-ack-")
        self.path = os.path.join(self.dir, "ack.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(1)
        if target_uid is not None and target_uid != os.geteuid() and os.geteuid() == 0:
            os.chown(self.dir, target_uid, -1)
            os.chown(self.path, target_uid, -1)

    def wait(self, pid: int, timeout_s: float) -> dict[str, object]:
        """The target's report; AttachError on an ``error`` report, garbage or timeout."""
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(timeout_s)
        try:
            conn, _ = self.sock.accept()
        except TimeoutError:
            raise AttachError(pid, f"the injected code did not report back within "
                                   f"{timeout_s:g} s",
                              "the main thread may be blocked outside Python (a long sleep "
                              "or C call); the code runs at its next bytecode") from None
        with conn:
            data = b""
            while not data.endswith(b"\n") and len(data) < _MAX_LINE:
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = conn.recv(4096)
                except TimeoutError:
                    break
                if not chunk:
                    break
                data += chunk
        try:
            report = json.loads(data.decode("utf-8", "replace"))
        except ValueError:
            raise AttachError(pid, "the injected code sent an unreadable report: "
                                   f"{data[:80]!r}") from None
        if not isinstance(report, dict):
            raise AttachError(pid, f"the injected code sent an unexpected report: {report!r}")
        if report.get("error"):
            raise AttachError(pid, str(report["error"]).splitlines()[0])
        if report.get("ok") is not True:
            raise AttachError(pid, f"the injected code sent an unexpected report: {report!r}")
        return report

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ConnectBack:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_WRAPPER = '''\
def _ppwtop_attach(report_path, socket_path, backend, extra_sys_path, required, entry, env):
    import json, os, socket, sys

    def report(msg):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5.0)
            s.connect(report_path)
            s.sendall((json.dumps(msg) + "\\n").encode("utf-8"))
            s.close()
        except OSError:
            pass

    def one_line(e):
        text = (type(e).__name__ + ": " + str(e)).splitlines()
        return text[0] if text else type(e).__name__

    try:
        try:
            import ppwtop
        except ImportError:
            # ppwtop is not in the target's environment: append (not prepend, so the
            # target's own packages keep precedence) where this ppwtop lives.
            for p in extra_sys_path:
                if p not in sys.path:
                    sys.path.append(p)
            try:
                import ppwtop
            except ImportError as e:
                report({"error": "target Python cannot import ppwtop: " + one_line(e)})
                return
        import importlib
        for module, dist in required:
            try:
                importlib.import_module(module)
            except Exception as e:
                report({"error": "target Python cannot import " + dist + ": " + one_line(e)})
                return
        mod_name, func_name = entry.split(":")
        try:
            func = getattr(importlib.import_module(mod_name), func_name)
        except Exception as e:
            report({"error": "target Python cannot import " + entry + ": " + one_line(e)})
            return
        os.environ.update(env)
        func(socket_path, backend)
        report({"ok": True, "pid": os.getpid(),
                "python": list(sys.version_info[:3])})
    except BaseException as e:
        report({"error": "attach failed in the target: " + one_line(e)})


_ppwtop_attach({args})
del _ppwtop_attach
'''


def attach_code(socket_path: str, backend: str, extra_sys_path: list[str], *,
                report_path: str | None = None, entry: str = DEFAULT_ENTRY,
                env: Mapping[str, str] | None = None) -> str:
    """Python source that starts the agent in the target and reports to ``report_path``.

    ``report_path`` defaults to ``socket_path + ".ack"``; ``entry`` is ``module:function``,
    called as ``function(socket_path, backend)`` (tests point it at a stand-in); ``env``
    (only ``PPWTOP_*`` names: the sim backend's run description) is set in the target's
    ``os.environ`` before the call.
    """
    env = dict(env or {})
    bad = [k for k in env if not k.startswith("PPWTOP_")]
    if bad:
        raise ValueError(f"attach_code sets PPWTOP_* variables only, not {bad}")
    if backend not in BACKEND_IMPORTS:
        raise ValueError(f"unknown backend {backend!r}")
    args = ", ".join(repr(a) for a in (
        report_path or socket_path + ".ack", socket_path, backend, list(extra_sys_path),
        BACKEND_IMPORTS[backend], entry, env))
    return _WRAPPER.replace("{args}", args)
