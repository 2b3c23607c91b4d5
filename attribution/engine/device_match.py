"""Whether the power log numbers the GPUs as the trace does.

Owns :func:`other_log_device`.  A trace numbers the GPUs its process saw: under
``CUDA_VISIBLE_DEVICES=3`` the machine's GPU 3 is the trace's GPU 0.  nvidia-smi numbers all of
the machine's.  Merged by index, a GPU's work meets another board's readings: with an idle
board there, every class fitted at 0 W under a line about readings in step with the workload,
and the GPU that did the work was left out as "another process's".  The check compares how
well the readings logged under the trace's index follow its activity (Pearson r with the stamps
as logged, within the lag search's reach: ``clock_shift``'s near correlation) with how well the
readings of each GPU the trace has no work on do, and names the one that clearly follows.  It
says so and flags the device's classes; it does not remap (a correlation is a guess the user
confirms with ``ppwtop attribute --power-gpus``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from attribution.engine.clock_shift import MIN_BEST_R, MIN_GAIN_R, log_shift
from attribution.model import F64, I64


@dataclasses.dataclass(frozen=True)
class OtherDevice:
    """The log's GPU whose readings follow a trace GPU's activity, where its own do not."""

    device: int
    log_device: int
    r_own: float
    """Near correlation of the readings logged under ``device`` (0: none, or flat)."""
    r_other: float


def other_log_device(device: int, busy: Callable[[I64], F64], r_own: float,
                     others: Callable[[], Mapping[int, tuple[I64, F64]]], win: tuple[int, int]
                     ) -> OtherDevice | None:
    """The GPU among ``others()`` (log index → readings; read only where needed) whose
    readings follow ``device``'s activity at least ``MIN_BEST_R`` and ``MIN_GAIN_R`` better
    than its own do (``r_own``: their near correlation, ``clock_shift.LogShift.r_near``, 0
    where there is too little to tell); None where none does, or its own follow."""
    if r_own >= MIN_BEST_R:
        return None
    r = {}
    for e, (t, w) in others().items():
        s = log_shift(busy, t, w, win)
        r[e] = 0.0 if s is None else s.r_near
    if not r:
        return None
    best = max(r, key=lambda e: (r[e], -e))
    if r[best] >= MIN_BEST_R and r[best] - r_own >= MIN_GAIN_R:
        return OtherDevice(device, best, r_own, r[best])
    return None


def other_device_warning(m: OtherDevice) -> str:
    """The snapshot's line for :func:`other_log_device`'s finding."""
    return (f"GPU {m.device}: the power log's GPU {m.log_device} follows this GPU's work "
            f"(correlation {m.r_other:.2f}) and its GPU {m.device} does not ({m.r_own:.2f}): "
            "the trace numbers the GPUs its job saw (CUDA_VISIBLE_DEVICES), the log all of the "
            "machine's; every class flagged. If the job ran on the machine's GPU "
            f"{m.log_device}, pass --power-gpus with the log's index of each trace GPU in "
            f"turn (here {m.log_device} for GPU {m.device})")


def other_device_why(m: OtherDevice) -> str:
    """Each flagged class's reason."""
    return (f"the power log's GPU {m.log_device}, not its GPU {m.device}, follows this GPU's "
            "work")
