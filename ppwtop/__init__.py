"""ppwtop: a `top` for GPU energy (the application: collectors, agent, importers, CLI, TUI).

The package root also carries ``ppwtop.mark_step(items=N)``, the contract's spelling of the
agent's step marker (:func:`ppwtop.agent.mark_step`): resolved on first use, so that
``import ppwtop`` in a profiled process loads nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ppwtop.agent import mark_step as mark_step

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "mark_step":
        from ppwtop.agent import mark_step

        globals()["mark_step"] = mark_step  # later look-ups skip this hook
        return mark_step
    raise AttributeError(f"module 'ppwtop' has no attribute {name!r}")
