"""The replay feed: a recorded (or imported) :class:`Trace` replayed in wall-clock time.

``ReplayFeed`` is :class:`~ppwtop.demo_feed.DemoFeed` without the simulator: it takes the
trace read from a ``.ppw`` recording (``ppwtop.recording.read_recording``; Kineto and nsys
files work too through ``ppwtop.importers.load_trace``) and reuses DemoFeed's sliding
horizon, duty-cycled attribution, power graph and end-of-run ``connected = False``.
Only the construction differs, so this module owns nothing but that and the file loading.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attribution.model import Columns, Trace
from ppwtop.demo_feed import _ITEM_BATCHES, _SAMPLE_BATCHES, DemoFeed, _engine
from ppwtop.errors import InputError


class ReplayFeed(DemoFeed):
    """A :class:`~ppwtop.tui.feed.SnapshotFeed` over a recorded trace."""

    def __init__(self, trace: Trace, *, label: str = "replay", gpu: str | None = None,
                 horizon_s: float = 15.0, refresh_s: float = 0.5, speed: float = 1.0,
                 n_boot: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        # DemoFeed.__init__ would run the simulator; set up the same state from `trace`.
        _, self._attribute = _engine()
        self.trace = trace
        self.gpu = gpu  # type: ignore[assignment]  # None: the engine reads the device name
        self.horizon_ns = int(horizon_s * 1e9)
        self.refresh_s = refresh_s
        self.speed = speed
        self.n_boot = n_boot
        self._clock = clock
        self._label = label
        self._sorted: dict[str, Columns] = {}
        for name in _ITEM_BATCHES:
            self._sorted[name] = getattr(trace, name).sorted_by("start_ns")
        for name in _SAMPLE_BATCHES:
            self._sorted[name] = getattr(trace, name).sorted_by("t_ns")
        span = trace.gpu_span_ns()
        self.start_ns, self.end_ns = span if span is not None else (0, 0)
        pw = trace.power
        keep = pw.fresh & (pw.device == (pw.device.min() if len(pw) else 0))
        if len(pw) and keep.any():
            fields = pw.field[keep]
            keep &= pw.field == np.bincount(fields).argmax()
        order = np.argsort(pw.t_ns[keep], kind="stable")
        self._power_t_ns = pw.t_ns[keep][order]
        self._power_w = pw.power_mw[keep][order] / 1000.0
        self._wall0: float | None = None
        self._next_due = -np.inf
        self.last_cost_s = 0.0
        self._last_sim_ns = -1
        self.attributions = 0

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ReplayFeed:
        """Load a recording (or Kineto / nsys trace); InputError if it has no GPU activity."""
        from ppwtop.importers import load_trace

        trace = load_trace(path)
        if trace.gpu_span_ns() is None or (not len(trace.kernels) and not len(trace.copies)):
            raise InputError(path, "has no kernels or copies to replay")
        kwargs.setdefault("label", f"replay {Path(path).name}")
        return cls(trace, **kwargs)
