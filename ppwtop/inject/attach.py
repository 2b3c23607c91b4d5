"""One call for ``ppwtop attach``: start the agent in a running process and confirm it.

Owns the order preflight -> connect-back socket -> ``attach_code`` -> ``inject`` -> wait for
the report, so the CLI only has to pick the session socket and the backend.
"""

from __future__ import annotations

from collections.abc import Mapping

from ppwtop.inject.connect_back import DEFAULT_ENTRY, ConnectBack, attach_code, ppwtop_sys_path
from ppwtop.inject.injector import Injected, Method, inject
from ppwtop.inject.preflight import inspect_target


def start_agent(pid: int, socket_path: str, backend: str, *, timeout_s: float = 10.0,
                report_timeout_s: float = 15.0, method: Method = "auto",
                entry: str = DEFAULT_ENTRY, env: Mapping[str, str] | None = None
                ) -> tuple[Injected, dict[str, object]]:
    """Inject the agent into ``pid`` (it will connect to ``socket_path``) and wait for its
    report; returns how it was injected and the report. Raises AttachError (one line)."""
    info = inspect_target(pid)
    with ConnectBack(target_uid=info.uid) as cb:
        code = attach_code(socket_path, backend, ppwtop_sys_path(), report_path=cb.path,
                           entry=entry, env=env)
        done = inject(pid, code, timeout_s=timeout_s, method=method, info=info)
        report = cb.wait(pid, timeout_s=report_timeout_s)
    return done, report
