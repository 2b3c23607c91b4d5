"""Shared pieces of the inefficiency ranking: the candidate record and the ranking inputs.

Owns :class:`Candidate` (one mechanism's wasted joules, interval, evidence, fix, validation
and the names an owner rule may match) and :class:`RankInputs` (what every mechanism module
reads: the trace, the engine's per-record arrays, the snapshot rows).  Pure; no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from attribution.model import F64, I64, MarkerKind, Trace
from attribution.snapshot import CopyRow, IdleRow, KernelRow

if TYPE_CHECKING:
    from attribution.engine.build import Arrays


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """One mechanism before ranking.  ``energy_j`` is the energy it wastes: an upper bound of
    what its fix can recover (docs/ranking.md says, per mechanism, how it is counted)."""

    mechanism: str
    energy_j: float
    energy_ci_j: tuple[float, float] | None
    evidence: str
    fix: str
    validation: str
    resolvable: bool = True
    owner_names: tuple[str, ...] = ()  # kernel / NVTX-range names an owner rule may match
    unresolved_why: str = ""
    """Why the number is not resolvable, where the general reason (classes the data cannot
    separate) is not it."""


@dataclasses.dataclass(frozen=True, slots=True)
class RankInputs:
    trace: Trace
    arrays: Arrays
    kernels: tuple[KernelRow, ...]
    copies: tuple[CopyRow, ...]
    idle: tuple[IdleRow, ...]
    total_j: float

    def p_idle_w(self, device: int) -> float:
        for r in self.arrays.devices:
            if r.device == device:
                return float(r.p_idle_w)
        return 0.0

    def p_idle_ci_w(self, device: int) -> tuple[float, float]:
        for r in self.arrays.devices:
            if r.device == device:
                return (float(r.p_idle_ci_w[0]), float(r.p_idle_ci_w[1]))
        return (0.0, 0.0)


    def per_record(self, device: I64) -> tuple[F64, F64, F64]:
        """(P_idle, its 90 % low, high) for each entry of a device column (vectorised)."""
        devs = np.array([r.device for r in self.arrays.devices] or [-1], dtype=np.int64)
        vals = np.array([[r.p_idle_w, r.p_idle_ci_w[0], r.p_idle_ci_w[1]]
                         for r in self.arrays.devices] or [[0.0, 0.0, 0.0]], dtype=np.float64)
        if len(devs) == 1 and len(device) and bool(np.all(device == devs[0])):  # one GPU
            v = np.empty((len(device), 3))
            v[:] = vals[0]  # the same (n, 3) layout as below: callers' dot products match
            return v[:, 0], v[:, 1], v[:, 2]
        o = np.argsort(devs)
        k = np.clip(np.searchsorted(devs[o], device), 0, len(devs) - 1)
        hit = devs[o][k] == device
        v = np.where(hit[:, None], vals[o][k], 0.0)
        return v[:, 0], v[:, 1], v[:, 2]


@dataclasses.dataclass(frozen=True, slots=True)
class RowInputs:
    """What the row-level mechanisms read: the snapshot rows only (the live engine's view)."""

    kernels: tuple[KernelRow, ...]
    copies: tuple[CopyRow, ...]
    idle: tuple[IdleRow, ...]
    total_j: float


RANGE_KINDS = (int(MarkerKind.NVTX), int(MarkerKind.USER_ANNOTATION))


def has_ranges(trace: Trace) -> bool:
    """Whether the trace has any NVTX / user-annotation range :func:`enclosing_ranges` could
    name (callers skip gathering their spans when it has none)."""
    mk = trace.markers
    return bool((np.isin(mk.kind, RANGE_KINDS) & (mk.end_ns > mk.start_ns)).any())


def enclosing_ranges(trace: Trace, start_ns: I64, end_ns: I64, top: int = 2) -> tuple[str, ...]:
    """Names of the NVTX / user-annotation ranges that hold the most of the given spans'
    time (by the range holding each span's midpoint; innermost = latest-starting range)."""
    mk = trace.markers
    m = np.isin(mk.kind, RANGE_KINDS) & (mk.end_ns > mk.start_ns)
    if not bool(m.any()) or len(start_ns) == 0:
        return ()
    s, e, nid = mk.start_ns[m], mk.end_ns[m], mk.name_id[m]
    order = np.argsort(s, kind="stable")
    s, e, nid = s[order], e[order], nid[order]
    mid = start_ns // 2 + end_ns // 2
    k = np.searchsorted(s, mid, side="right") - 1
    ok = (k >= 0) & (e[np.clip(k, 0, None)] >= mid)
    if not bool(ok.any()):
        return ()
    w: F64 = (end_ns - start_ns)[ok].astype(np.float64)
    ids = nid[k[ok]]
    uniq, inv = np.unique(ids, return_inverse=True)
    tot = np.bincount(inv, weights=w)
    best = np.argsort(-tot, kind="stable")[:top]
    return tuple(trace.name(int(uniq[i])) for i in best)


def fmt_j(v: float) -> str:
    return f"{v:.3g} J"


def scaled_ci(ci: tuple[float, float] | None, factor: float) -> tuple[float, float] | None:
    if ci is None:
        return None
    return (ci[0] * factor, ci[1] * factor)
