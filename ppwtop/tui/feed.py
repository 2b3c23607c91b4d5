"""What the TUI reads from: the :class:`SnapshotFeed` protocol and :class:`StaticFeed`.

A feed hands out immutable :class:`~attribution.snapshot.Snapshot` objects; the app polls it
from a worker thread at 10 Hz (never from the UI thread), so ``next_snapshot`` may block for
a while.  ``None`` means "nothing new since the last call".  The TUI never knows whether the
data comes from a live target, a recording, the simulator or a file.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from attribution.snapshot import Snapshot

PowerTrace = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]


def empty_power_trace() -> PowerTrace:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)


@runtime_checkable
class SnapshotFeed(Protocol):
    def next_snapshot(self) -> Snapshot | None:
        """A new snapshot, or None when nothing changed since the last call."""
        ...

    def power_trace(self) -> PowerTrace:
        """Recent board power: (t_ns, power_w), oldest first, for the power graph."""
        ...

    @property
    def connected(self) -> bool:
        """False once the target is gone; the app then keeps showing the last data."""
        ...

    @property
    def label(self) -> str:
        """What is being watched: "demo", a command line, "pid 1234", a file name."""
        ...


class StaticFeed:
    """One snapshot (``ppwtop show``): delivered once, then nothing new."""

    def __init__(self, snapshot: Snapshot, label: str = "snapshot",
                 power: PowerTrace | None = None) -> None:
        self._snapshot = snapshot
        self._label = label
        self._power = power if power is not None else empty_power_trace()
        self._sent = False

    def next_snapshot(self) -> Snapshot | None:
        if self._sent:
            return None
        self._sent = True
        return self._snapshot

    def power_trace(self) -> PowerTrace:
        return self._power

    @property
    def connected(self) -> bool:
        return True

    @property
    def label(self) -> str:
        return self._label
