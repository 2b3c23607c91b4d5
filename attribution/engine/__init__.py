"""The attribution engine: sensor identification, regression over sensor windows, intervals.

``attribute(trace)`` → :class:`attribution.snapshot.Snapshot`; ``attribute_arrays(trace)`` →
per-record energies (:class:`attribution.engine.build.Arrays`).  Modules: ``activity``
(classes, busy-time functions), ``timebase`` (field, T/W, lag), ``regress`` (non-negative
fit, bootstrap), ``split`` (the naive time-overlap baseline), ``build`` (per-device
pipeline), ``rows`` (snapshot aggregation).  See docs/attribution.md.

The package imports its pipeline (and with it scipy) on first use, not on import: a process
that needs only a light part of it (``live_pending`` and ``deltas`` in a ``ppwtop record``
session, which runs no attribution) starts ~0.4 s sooner.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attribution.engine.build import N_BOOT, Arrays, DeviceResult, attribute_arrays
    from attribution.engine.rows import build_snapshot
    from attribution.model import Trace
    from attribution.owners import OwnerMap
    from attribution.snapshot import Snapshot

__all__ = ["N_BOOT", "Arrays", "DeviceResult", "attribute", "attribute_arrays",
           "build_snapshot"]

_LAZY = {"N_BOOT": "build", "Arrays": "build", "DeviceResult": "build",
         "attribute_arrays": "build", "build_snapshot": "rows"}


def __getattr__(name: str) -> Any:
    """The pipeline's names, imported when first asked for (submodules import as usual)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def attribute(trace: Trace, *, gpu: str | None = None, sla_ms: float | None = None,
              n_boot: int | None = None, step_range: str | None = None,
              owners: OwnerMap | None = None) -> Snapshot:
    """Attribute a trace's GPU energy to kernels, copies and idle causes (``n_boot``
    bootstrap draws; default ``build.N_BOOT``)."""
    from attribution.engine.build import N_BOOT, attribute_arrays
    from attribution.engine.rows import build_snapshot

    arrays = attribute_arrays(trace, gpu=gpu, n_boot=N_BOOT if n_boot is None else n_boot)
    return build_snapshot(trace, arrays, sla_ms=sla_ms, step_range=step_range, owners=owners)
