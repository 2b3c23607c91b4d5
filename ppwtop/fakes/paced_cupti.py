"""The sim backend's libcupti: :class:`FakeCuptiLib` fed a simulated run in wall-clock time.

Owns the pacing: on every ``cuptiActivityFlushAll`` (the agent's ~100 ms flush, and the forced
flush at stop) the records of the anchored run (:func:`ppwtop.fakes.sim_run.anchored_run`)
that *completed* since the previous flush (``end_ns <= time.time_ns()``) are laid out and
delivered through the registered callbacks, exactly as libcupti hands over completed
records.  It also counts what it delivered (kernels, copies, ...) independently of the
transport and the decoder, so tests can check the recording against it, and answers
``cuptiGetTimestamp`` with the host clock (the simulated CUPTI clock is the host clock plus
the run's fixed offset, already applied to the records).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from attribution.columns import Columns
from attribution.model import Trace
from ppwtop.fakes.cupti_lib import CUPTI_SUCCESS, FakeCuptiLib
from ppwtop.fakes.sim_run import SimRunConfig, anchored_run

CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39
_PACED = ("kernels", "copies", "memsets", "apis", "markers")


class PacedSimCuptiLib(FakeCuptiLib):
    """A fake libcupti that releases a simulated run's records as wall-clock time passes.

    ``busy`` makes ``cuptiActivityRegisterCallbacks`` fail as it does when another profiler
    already holds CUPTI (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED).  ``late``: a late
    attach, whose CUPTI sees only what runs from its subscription on: records that
    completed before ``cuptiActivityRegisterCallbacks`` are never delivered (the anchored run
    starts with ppwtop, and an attach used to ship the seconds before it as a backlog).
    """

    def __init__(self, cfg: SimRunConfig, *, busy: bool = False, late: bool = False,
                 clock: Callable[[], int] = time.time_ns) -> None:
        super().__init__()
        self.cfg = cfg
        self.busy = busy
        self.late = late
        self.clock = clock
        res = anchored_run(cfg)
        tr = res.trace
        self.run_trace = tr
        self._sorted: dict[str, Columns] = {k: getattr(tr, k).sorted_by("end_ns")
                                            for k in _PACED}
        self._next: dict[str, int] = dict.fromkeys(_PACED, 0)
        self.delivered: dict[str, int] = dict.fromkeys(_PACED, 0)
        self.released_until_ns = 0

    def cuptiActivityRegisterCallbacks(self, request: Any, complete: Any) -> int:
        if self.busy:
            self.calls.append("cuptiActivityRegisterCallbacks")
            return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
        if self.late:  # what completed before the subscription was never recorded
            now = self.clock()
            for k in _PACED:
                end: Any = getattr(self._sorted[k], "end_ns")  # noqa: B009
                self._next[k] = max(self._next[k], int(np.searchsorted(end, now, "right")))
        return super().cuptiActivityRegisterCallbacks(request, complete)

    def cuptiGetTimestamp(self, out: Any) -> int:
        out[0] = self.clock()
        return CUPTI_SUCCESS

    def cuptiGetResultString(self, result: int, out: Any) -> int:
        if int(result) == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
            self._err = ctypes.c_char_p(b"CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
            out[0] = self._err
            return CUPTI_SUCCESS
        return super().cuptiGetResultString(result, out)

    def release(self, now_ns: int) -> dict[str, int]:
        """Queue the records that completed in ``(last release, now_ns]``; counts by batch."""
        parts: dict[str, Any] = {}
        counts: dict[str, int] = {}
        for k in _PACED:
            b = self._sorted[k]
            end: Any = getattr(b, "end_ns")  # noqa: B009 - every paced batch has end_ns
            i0 = self._next[k]
            i1 = int(np.searchsorted(end, now_ns, side="right"))
            if i1 > i0:
                parts[k] = b.take(slice(i0, i1))
                counts[k] = i1 - i0
                self._next[k] = i1
        if parts:
            self.add_trace(Trace(strings=self.run_trace.strings, **parts))
        self.released_until_ns = now_ns
        return counts

    def cuptiActivityFlushAll(self, flag: int) -> int:
        counts = self.release(self.clock()) if self._request is not None else {}
        rc = super().cuptiActivityFlushAll(flag)
        if rc == CUPTI_SUCCESS:
            for k, n in counts.items():
                self.delivered[k] += n
        return rc
