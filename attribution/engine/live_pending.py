"""Launches whose GPU records have not come yet: how far the live engine may settle.

Owns the set of launch calls (kernel launches, copies, memsets: the API kinds that put an
item on the GPU) whose kernel, copy or memset record has not arrived. CUPTI hands a GPU
item's record over when the item completes, so a fixed settling delay (``live.SETTLE_S``)
reduces time that an item still running overlaps whenever the item runs longer than the
delay: its busy time before the reduction was lost, its call was never counted, and the
readings taken while it ran were fitted as if the GPU were idle. An item cannot start
before its launch call does, so no time before the earliest pending launch can gain a
record: :meth:`PendingLaunches.floor_ns` is that time, and the engine settles no further.

A launch pending longer than ``max_wait_ns`` is given up (a failed launch, a dropped
record, or a memcpy the GPU never ran) and kept in ``given_up_ns``; the engine then settles
past it as it did before, and the snapshot says so. Correlations are matched within the
update that brings the item and the one before it (an item completing before its launch
call returns can arrive one update ahead of that call's record).
"""

from __future__ import annotations

import numpy as np

from attribution.model import I64, ApiKind, Trace

ISSUING = (int(ApiKind.LAUNCH), int(ApiKind.MEMCPY), int(ApiKind.MEMSET))
"""The API kinds whose call puts an item on the GPU."""
MAX_WAIT_S = 10.0
"""A launch whose record has not come this long after the call is given up."""


def _items_correlation(delta: Trace) -> I64:
    return np.concatenate([delta.kernels.correlation, delta.copies.correlation,
                           delta.memsets.correlation]).astype(np.int64, copy=False)


class PendingLaunches:
    """The launch calls whose items have not arrived, as (correlation, call start) columns."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_ns = int(max_wait_s * 1e9)
        self.corr: I64 = np.empty(0, np.int64)
        self.start_ns: I64 = np.empty(0, np.int64)
        self._prev_items: I64 = np.empty(0, np.int64)
        self.given_up_ns: I64 = np.empty(0, np.int64)
        """The call starts of the launches given up on (:meth:`expire` drops old ones)."""

    def __len__(self) -> int:
        return len(self.corr)

    def update(self, delta: Trace) -> None:
        """Take one update's API records and GPU items."""
        items = _items_correlation(delta)
        if len(self.corr) and len(items):
            keep = ~np.isin(self.corr, items)
            self.corr, self.start_ns = self.corr[keep], self.start_ns[keep]
        a = delta.apis
        new = np.isin(a.kind, ISSUING) & (a.correlation > 0)
        if bool(new.any()):
            corr, start = a.correlation[new], a.start_ns[new]
            seen = np.concatenate([items, self._prev_items])
            if len(seen):
                fresh = ~np.isin(corr, seen)
                corr, start = corr[fresh], start[fresh]
            self.corr = np.concatenate([self.corr, corr.astype(np.int64, copy=False)])
            self.start_ns = np.concatenate([self.start_ns, start.astype(np.int64, copy=False)])
        self._prev_items = items

    def floor_ns(self, now_ns: int) -> int | None:
        """The earliest call start of a launch still pending (None: none), after giving up on
        those pending longer than ``max_wait_ns`` at ``now_ns``."""
        if not len(self.corr):
            return None
        old = self.start_ns < now_ns - self.max_wait_ns
        if bool(old.any()):
            self.given_up_ns = np.concatenate([self.given_up_ns, self.start_ns[old]])
            self.corr, self.start_ns = self.corr[~old], self.start_ns[~old]
            if not len(self.corr):
                return None
        return int(self.start_ns.min())


    def given_up_since(self, start_ns: int) -> int:
        """Launches given up on whose call started at or after ``start_ns`` (and forget the
        earlier ones: the horizon's start only moves on)."""
        self.given_up_ns = self.given_up_ns[self.given_up_ns >= start_ns]
        return len(self.given_up_ns)


def given_up_warning(n: int, max_wait_s: float) -> str:
    """The snapshot's line when launches were given up on in its horizon."""
    return (f"{n} launch call(s) had no kernel, copy or memset record {max_wait_s:.0f} s after "
            "the call (a failed launch, a dropped record, or a copy the GPU did not run): "
            "their time was settled without them")


WAIT_WARN_S = 1.0
"""A live view ending this much further behind ``now`` than the settling delay says why."""


def waiting_warning(wait_s: float) -> str:
    """The snapshot's line when the live view waits on a pending item (``WAIT_WARN_S``)."""
    return (f"the live view ends {wait_s:.1f} s before now: a kernel, copy or memset launched "
            "then has not completed (running or queued); that time is settled once its record "
            "comes")
