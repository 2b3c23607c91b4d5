"""The in-target agent's public API: ``start``, ``stop``, ``mark_step``.

``ppwtop run`` starts the agent for you (see :mod:`ppwtop.agent.bootstrap`); code that wants
to embed it calls :func:`start` itself with the socket path a ppwtop session listens on.
One agent per process; :func:`mark_step` is a cheap no-op when no agent runs.
"""

from __future__ import annotations

import threading
from typing import Any

from ppwtop.agent.core import Agent, AgentError

_lock = threading.Lock()
_agent: list[Agent] = []  # the running agent, if any


def start(socket_path: str, backend: str = "cupti", **kwargs: Any) -> Agent:
    """Start the agent (idempotent: a second call returns the running one, while it is
    connected; one whose ppwtop went away — an attach whose session ended — is stopped and
    replaced, so the process can be attached to again).

    Raises :class:`AgentError` when no ppwtop listens at ``socket_path``.
    """
    with _lock:
        if _agent and _agent[0].connected:
            return _agent[0]
        if _agent:
            _agent.pop().stop()
        a = Agent(socket_path, backend, **kwargs)
        a.start()
        _agent.append(a)
        return a


def stop() -> None:
    """Flush, say goodbye and disconnect; the process carries on unprofiled."""
    with _lock:
        a = _agent.pop() if _agent else None
    if a is not None:
        a.stop()


def running() -> Agent | None:
    return _agent[0] if _agent else None


def mark_step(items: float | None = None) -> None:
    """End the current step (started by the previous call) with ``items`` work units.

    Recorded as a STEP_MARK marker; the first call only starts the first step.
    """
    if _agent:
        _agent[0].mark_step(items)


__all__ = ["Agent", "AgentError", "mark_step", "running", "start", "stop"]
