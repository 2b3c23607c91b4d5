"""Starting the agent inside a target: from ``ppwtop run``'s environment or by late attach.

Owns the environment contract between ``ppwtop run`` and the child (:func:`child_env`:
PYTHONPATH with the bootstrap ``sitecustomize`` first, ``PPWTOP_SOCKET``, ``PPWTOP_BACKEND``,
``NVTX_INJECTION64_PATH`` on the real backend, the sim run's ``PPWTOP_SIM_*``), the start
from those variables (:func:`from_env`, called by ``_site/sitecustomize.py`` before the
user's code, hence before CUDA initialises), and :func:`attach_entry`, the one function the
attach injector calls inside an already-running Python process.

The child's own children do not start agents: :func:`from_env` removes ``PPWTOP_SOCKET``
from the environment once read, so only the launched process is profiled.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

ENV_SOCKET = "PPWTOP_SOCKET"
ENV_BACKEND = "PPWTOP_BACKEND"
ENV_DEPS = "PPWTOP_DEPS_PATH"
"""Where ppwtop's own dependencies (numpy, cupti-python) live, for a child whose interpreter
lacks them: the agent appends these to ``sys.path`` only when an import fails
(:func:`import_with_deps`), so the target's own packages keep precedence."""
SITE_DIR = Path(__file__).resolve().parent / "_site"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


def child_env(socket_path: str, backend: str, base: Mapping[str, str] | None = None,
              *, extra: Mapping[str, str] | None = None,
              libcupti: str | None = None) -> dict[str, str]:
    """The environment ``ppwtop run`` gives the command it launches."""
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH", "")
    parts = [str(SITE_DIR), str(PACKAGE_ROOT)] + ([old] if old else [])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env[ENV_SOCKET] = socket_path
    env[ENV_BACKEND] = backend
    env[ENV_DEPS] = os.pathsep.join(_deps_path())
    if backend == "cupti" and libcupti:
        env.setdefault("NVTX_INJECTION64_PATH", libcupti)
    env.update(extra or {})
    return env


def _deps_path() -> list[str]:
    """This interpreter's site-packages, the user's too (ppwtop's dependencies)."""
    import site

    found = [*site.getsitepackages(), site.getusersitepackages()]
    return [p for p in dict.fromkeys(found) if Path(p).is_dir()]


def import_with_deps(name: str) -> ModuleType:
    """``importlib.import_module(name)``; where a module it needs is missing, with the
    ``PPWTOP_DEPS_PATH`` entries appended to ``sys.path`` and one more try (a child started
    by ``ppwtop run`` under an interpreter outside ppwtop's environment).  A dependency built
    for another Python version still fails there: the error then names what is missing."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        extra = [p for p in os.environ.get(ENV_DEPS, "").split(os.pathsep)
                 if p and p not in sys.path]
        if not extra:
            raise
        sys.path.extend(extra)
        try:
            return importlib.import_module(name)
        except ImportError as e2:
            raise ImportError(f"this interpreter ({sys.executable}, Python "
                              f"{sys.version_info[0]}.{sys.version_info[1]}) cannot import "
                              f"{e.name or name} even from ppwtop's environment: {e2}; run "
                              "the command with ppwtop's Python or install ppwtop there"
                              ) from None


def find_libcupti() -> str | None:
    """Path of the libcupti cupti-python ships (for NVTX_INJECTION64_PATH), if any."""
    try:
        import cupti as cupti_pkg
    except ImportError:
        return None
    site = Path(cupti_pkg.__file__).resolve().parent.parent
    for cand in sorted(site.glob("nvidia/cu*/lib/libcupti.so*"), reverse=True):
        return str(cand)
    return None


def from_env() -> None:
    """Start the agent if ``PPWTOP_SOCKET`` is set (called from the bootstrap sitecustomize)."""
    path = os.environ.pop(ENV_SOCKET, None)
    if not path:
        return
    backend = os.environ.get(ENV_BACKEND, "cupti")
    from ppwtop import agent

    try:
        agent.start(path, backend)
    except agent.AgentError as e:
        sys.stderr.write(f"ppwtop agent: not started: {e}\n")


def attach_entry(socket_path: str, backend: str) -> None:
    """Start the agent in a running process (late attach); returns once the agent's imports
    are done (0.3–0.4 s here with the simulator's fake: numpy, cupti-python's record
    layouts, the simulator; about a second where the compiled recursion is not built and the
    simulator falls back to scipy.signal).

    The connection, handshake and collector start happen on a thread, so the injector's
    call is not held for the session.  The handshake says ``late_attach: true``: records of
    work that completed before this moment and NVTX ranges (NVTX injection is only read at
    CUDA start-up) are not seen.
    """
    from ppwtop import agent

    # what the agent's thread imports, imported here on the injected call's thread (the
    # target's main thread, holding the GIL throughout). On the agent's own thread each of
    # the imports' file reads hands the GIL back to a CPU-bound main thread for a switch
    # interval (5 ms): measured in a busy target, numpy took 1.7 s there and the simulator
    # (scipy) 15 s, so an attach took ~20 s to connect and a short session saw no kernel
    with contextlib.suppress(Exception):
        import_with_deps("ppwtop.collectors.cupti_raw")  # numpy, cupti-python
        if backend == "sim":
            import_with_deps("ppwtop.fakes.paced_cupti")
            import_with_deps("attribution.sim")  # the fake's run (scipy)

    def run() -> None:
        try:
            agent.start(socket_path, backend, late_attach=True)
        except Exception as e:
            sys.stderr.write(f"ppwtop agent: attach failed: {e}\n")

    threading.Thread(target=run, name="ppwtop-agent-attach", daemon=True).start()
