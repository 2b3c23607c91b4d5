"""The attribution engine: sensor identification, regression over sensor windows, intervals.

``attribute(trace)`` → :class:`attribution.snapshot.Snapshot`; ``attribute_arrays(trace)`` →
per-record energies (:class:`attribution.engine.build.Arrays`).  Modules: ``activity``
(classes, busy-time functions), ``timebase`` (field, T/W, lag), ``regress`` (non-negative
fit, bootstrap), ``split`` (the naive time-overlap baseline), ``build`` (per-device
pipeline), ``rows`` (snapshot aggregation).  See docs/attribution.md.
"""

from __future__ import annotations

import dataclasses

from attribution.engine.build import N_BOOT, Arrays, DeviceResult, attribute_arrays
from attribution.engine.rows import build_snapshot
from attribution.engine.timing_checks import backwards_warning, forward_items
from attribution.model import Trace
from attribution.owners import OwnerMap
from attribution.snapshot import Snapshot

__all__ = ["Arrays", "DeviceResult", "attribute", "attribute_arrays", "build_snapshot"]


def attribute(trace: Trace, *, gpu: str | None = None, sla_ms: float | None = None,
              n_boot: int = N_BOOT, step_range: str | None = None,
              owners: OwnerMap | None = None) -> Snapshot:
    """Attribute a trace's GPU energy to kernels, copies and idle causes."""
    trace, backwards = forward_items(trace)  # the rows read the arrays' times
    arrays = attribute_arrays(trace, gpu=gpu, n_boot=n_boot)
    if backwards:
        arrays = dataclasses.replace(
            arrays, warnings=(backwards_warning(backwards), *arrays.warnings))
    return build_snapshot(trace, arrays, sla_ms=sla_ms, step_range=step_range, owners=owners)
