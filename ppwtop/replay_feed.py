"""The replay feed: a recorded (or imported) :class:`Trace` replayed in wall-clock time.

``ReplayFeed`` is :class:`~ppwtop.demo_feed.TraceFeed` (what DemoFeed also builds on): it takes the
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

from attribution.engine.timing_checks import repaired
from attribution.model import Trace
from ppwtop.demo_feed import TraceFeed
from ppwtop.errors import InputError


class ReplayFeed(TraceFeed):
    """A :class:`~ppwtop.tui.feed.SnapshotFeed` over a recorded trace."""

    def __init__(self, trace: Trace, *, label: str = "replay", gpu: str | None = None,
                 horizon_s: float = 15.0, refresh_s: float = 0.5, speed: float = 1.0,
                 n_boot: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(trace, label=label, gpu=gpu, horizon_s=horizon_s,
                         refresh_s=refresh_s, speed=speed, n_boot=n_boot, clock=clock)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ReplayFeed:
        """Load a recording (or Kineto / nsys trace); InputError if it has no GPU activity."""
        from ppwtop.importers import load_trace

        trace = load_trace(path)
        # repaired first as the batch engine repairs (timing_checks.repaired): the replay
        # clock starts at the earliest record, so one stamped at 0 put the run days of replay
        # time away
        trace, lines = repaired(trace)
        if trace.gpu_span_ns() is None or (not len(trace.kernels) and not len(trace.copies)):
            raise InputError(path, "has no kernels or copies to replay")
        kwargs.setdefault("label", f"replay {Path(path).name}")
        from ppwtop.importers import import_notes

        feed = cls(trace, **kwargs)
        # (a cut or corrupt recording says so)
        feed.notes = tuple(import_notes(path, trace) + [f"{path}: {w}" for w in lines])
        return feed
