"""Launching a command under ppwtop: the shared body of ``ppwtop run`` and ``ppwtop record``.

Owns the checks done before anything starts (a command after ``--``, a writable recording
path, a known backend and sim scenario), the child's environment (the agent bootstrap, see
:mod:`ppwtop.agent.bootstrap`) and the call to :func:`ppwtop.live.serve_session`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ppwtop.errors import PpwtopError
from ppwtop.fileio import unwritable
from ppwtop.live.signals import terminate_ends_session
from ppwtop.terminal import need_terminal

BACKENDS = ("cupti", "sim")
ATTACH_CONNECT_TIMEOUT_S = 60.0
"""How long an injected agent may take to set up (CUPTI, or the simulated run) and connect."""


def check_record_path(path: Path) -> None:
    """Fail early (exit 2) when the recording cannot be created where asked."""
    if path.is_dir():
        raise PpwtopError(f"{path}: is a directory (--record wants a file name)")
    try:
        mode = path.stat().st_mode
    except OSError:  # not there yet (or a dangling link): created below
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # a named pipe would block the open until a reader came; a device or a socket
        # cannot hold a recording that is read back and cut to its last whole chunk
        raise PpwtopError(f"{path}: not a regular file (a named pipe, device or socket): "
                          "a recording must be a file")
    why = unwritable(path)
    if why is not None:
        raise PpwtopError(f"{path}: cannot create recording: {why}")


def sim_config(backend: str, scenario: str | None, gpu: str | None, seconds: float | None,
               seed: int) -> Any:
    """The simulated run both ends replay on ``--backend sim`` (None on the real backend)."""
    if backend not in BACKENDS:
        raise PpwtopError(f"--backend: one of {', '.join(BACKENDS)}")
    if backend != "sim":
        if scenario is not None:
            raise PpwtopError("--scenario needs --backend sim")
        return None
    from attribution.sim import SCENARIOS
    from ppwtop.fakes.sim_run import DEFAULT_SCENARIO, DEFAULT_SECONDS, SimRunConfig

    name = scenario or DEFAULT_SCENARIO
    if name not in SCENARIOS:
        raise PpwtopError(f"--scenario: unknown scenario {name!r} "
                          f"(one of {', '.join(SCENARIOS)})")
    length = max(DEFAULT_SECONDS, (seconds or 0.0) + 10.0)
    if os.environ.get("PPWTOP_SIM_SECONDS"):  # a longer simulated job, on request
        try:
            length = max(1.0, float(os.environ["PPWTOP_SIM_SECONDS"]))
        except ValueError:
            raise PpwtopError("PPWTOP_SIM_SECONDS: not a number") from None
    return SimRunConfig(scenario=name, gpu=gpu, seconds=length, seed=seed,
                        anchor_ns=time.time_ns())


def attach_process(pid: int, *, record: Path | None, headless: bool, seconds: float | None,
                   backend: str, gpu: str | None, scenario: str | None, seed: int,
                   on_session: Callable[[Any], None] | None = None) -> int:
    """``ppwtop attach``: inject the agent into a running Python process and serve its
    session.  Nothing is started (no recording file, no sampler) before the target passed
    the injector's checks; the target keeps running when the session ends."""
    from ppwtop.inject.attach import start_agent
    from ppwtop.inject.preflight import inspect_target
    from ppwtop.live import serve_session
    from ppwtop.transport.endpoint import Listener

    sim = sim_config(backend, scenario, gpu, seconds, seed)
    if record is not None:
        check_record_path(record)
    info = inspect_target(pid)
    if not headless:
        need_terminal("attach", "use --headless --record FILE")
    with terminate_ends_session(), Listener() as listener:
        if info.uid != os.geteuid() and os.geteuid() == 0:  # let the target connect
            os.chown(os.path.dirname(listener.path), info.uid, -1)
            os.chown(listener.path, info.uid, -1)

        def launch() -> None:
            start_agent(pid, listener.path, backend,
                        env=sim.env() if sim is not None else None)

        return serve_session(listener, label=f"pid {pid}", record_path=record,
                             headless=headless, seconds=seconds, backend=backend, gpu=gpu,
                             sim=sim, launch=launch, meta={"pid": pid},
                             accept_timeout_s=ATTACH_CONNECT_TIMEOUT_S,
                             seconds_from_connect=True, on_session=on_session)


def run_command(command: list[str], *, record: Path | None, headless: bool,
                seconds: float | None, backend: str, gpu: str | None, scenario: str | None,
                seed: int, verb: str, on_session: Callable[[Any], None] | None = None) -> int:
    if not command:
        raise PpwtopError(f"ppwtop {verb}: no command to run (put it after --, e.g. "
                          f"'ppwtop {verb} -- python train.py')")
    if shutil.which(command[0]) is None and not os.path.exists(command[0]):
        raise PpwtopError(f"ppwtop {verb}: command not found: {command[0]}")
    if record is not None:
        check_record_path(record)
    sim = sim_config(backend, scenario, gpu, seconds, seed)
    if not headless:
        need_terminal(verb, "use --headless --record FILE")
    extra = sim.env() if sim is not None else {}
    from ppwtop.agent.bootstrap import child_env, find_libcupti
    from ppwtop.live import serve_session
    from ppwtop.transport.endpoint import Listener

    log_path: str | None = None
    # SIGTERM/SIGHUP from here until the command is waited for end the session as Ctrl-C
    # does: the socket directory removed, the command terminated, the recording closed
    with terminate_ends_session(), Listener() as listener:
        env = child_env(listener.path, backend, extra=extra,
                        libcupti=find_libcupti() if backend == "cupti" else None)

        def launch() -> subprocess.Popen[bytes]:
            nonlocal log_path
            kw: dict[str, Any] = {}
            if not headless:  # the command's output would draw over the TUI
                fd, log_path = tempfile.mkstemp(prefix="ppwtop-run-", suffix=".log")
                kw = {"stdout": fd, "stderr": fd, "stdin": subprocess.DEVNULL}
            try:
                return subprocess.Popen(command, env=env, **kw)
            except OSError as e:
                raise PpwtopError(f"cannot run {command[0]}: {e.strerror or e}") from None
            finally:
                if "stdout" in kw:
                    os.close(kw["stdout"])

        rc = serve_session(listener, label=shlex.join(command), record_path=record,
                           headless=headless, seconds=seconds, backend=backend, gpu=gpu,
                           sim=sim, launch=launch, meta={"command": command},
                           nvml_env=env, on_session=on_session)
    if log_path is not None:
        tell_log(Path(log_path))
    return rc


def tell_log(path: Path) -> None:
    """Say where the command's output went; a log the command wrote nothing to is removed
    instead (every TUI run would otherwise leave an empty file in the temp directory)."""
    try:
        if path.stat().st_size == 0:
            path.unlink()
            return
    except OSError:
        return
    print(f"ppwtop: the command's output is in {path}", file=sys.stderr)
