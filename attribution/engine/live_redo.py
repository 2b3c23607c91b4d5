"""A refit that moved the lag, applied to the live engine's rows over ticks.

Owns :class:`Redo`, :func:`redo_rows` and :func:`redo_finish`.  When a live refit
(``live_lag``) lands with a new lag, response or boost model, the reading rows whose windows
the refit's span covers (the last ~20 s, ~200 rows at a 100 ms sensor period; on a consumer
board the 60 s its refit read, ~600 rows) are recomputed at the new values: the first step
gathers their records as of the refit, each later step recomputes up to ``rows`` of them
into a side buffer (steps that read nothing newer than the refit, so the engine runs them
between updates), and once all are done the next update writes them all into the ring,
recomputes the rows reduced meanwhile and makes the new values the device's.  Every
snapshot therefore reads one lag's rows; doing all ~200 in the refit's tick took 14–20 ms.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from attribution.engine.activity import items_for_device
from attribution.engine.deltas import GPU_ITEMS
from attribution.engine.live_boost import Boost, row_columns
from attribution.engine.live_reduce import (
    LOOKBACK_NS,
    ChunkBuffer,
    QueryBusy,
    busy_from,
    row_reach_ns,
)
from attribution.model import F64, I64

if TYPE_CHECKING:
    from attribution.engine.live import DeviceState


LagParams = tuple[float, float, Boost, tuple[float, float]]
"""What a refit sets: (lag ms, τ ms, boost model, how far below and above the lag the
interval's refits sit)."""


@dataclasses.dataclass
class Redo:
    """A refit that moved the lag, applied over ticks: the new (lag, τ, boost), the rows to
    redo, the records and busy function gathered once (at the first step) as of the refit,
    and the refit's ``now`` (the gap in progress closes there, as if all rows were redone at
    once).  The redone columns are written into the ring, and the new values become the
    device's, when the last row is done (with the rows reduced meanwhile recomputed too):
    until then every row and the snapshot are the refit's predecessor's, not a mix."""

    params: LagParams  # (lag ms, τ ms, boost, lag ends) of the refit
    t_ns: I64  # the rows to redo, in time order
    lo_ns: int  # the records from here on reach every one of them
    now_ns: int
    done: int = 0  # rows redone so far
    busy: QueryBusy | None = None
    start_ns: I64 | None = None
    end_ns: I64 | None = None
    n_cls: int = 0
    xs: list[F64] = dataclasses.field(default_factory=list)  # x, x_lo, x_hi (rows × n_cls)
    hs: list[F64] | None = None  # the tail column at the three lags (consumer boards)

    @property
    def complete(self) -> bool:
        """Every row redone (the records gathered first): ready for :func:`redo_finish`."""
        return self.busy is not None and self.done == len(self.t_ns)


def redo_rows(st: DeviceState, chunks: ChunkBuffer, rows: float) -> None:
    """One step of ``st.redo``'s work: the first gathers the records and builds their busy
    function (as of the refit); each later one computes up to ``rows`` rows' columns at the
    refit's values into the side buffer (a row's columns depend only on its own windows, the
    records and the refit's ``now``: the same values as all at once).  It reads nothing
    newer than the refit, so it may run ahead of the update that applies it."""
    r = st.redo
    assert r is not None
    lag_ms, tau_ms, boost, ends_ms = r.params
    if r.busy is None:  # the records the buffer held at the refit (completed by then)
        it = items_for_device(chunks.recent(r.lo_ns, kinds=GPU_ITEMS), st.device)
        unit = st.unit_ids(it)
        m = it.end_ns <= r.now_ns
        r.n_cls = len(st.classes)
        r.start_ns, r.end_ns = it.start_ns[m], it.end_ns[m]
        r.busy = QueryBusy(r.start_ns, r.end_ns, unit[m], r.n_cls,
                           need_from_ns=r.lo_ns)  # the rows' windows start after lo
        r.xs = [np.zeros((len(r.t_ns), r.n_cls)) for _ in range(3)]
        if not math.isinf(rows):
            return
    assert r.start_ns is not None and r.end_ns is not None
    k = len(r.t_ns) if math.isinf(rows) else min(len(r.t_ns), r.done + max(int(rows), 1))
    new, hs = row_columns(r.busy, r.t_ns[r.done:k], window_ms=st.window_ms, lag_ms=lag_ms,
                          tau_ms=tau_ms, boost=boost, start_ns=r.start_ns,
                          end_ns=r.end_ns, prev_end_ns=None, now_ns=r.now_ns, ends_ms=ends_ms)
    for x, xn in zip(r.xs, new, strict=True):
        x[r.done:k] = xn
    if hs is not None:
        if r.hs is None:
            r.hs = [np.zeros((len(r.t_ns), h.shape[1])) for h in hs]
        for h, hn in zip(r.hs, hs, strict=True):
            h[r.done:k] = hn
    r.done = k


def _widened_view(st: DeviceState) -> tuple[I64, F64, F64, F64, F64]:
    """The row ring's view with a column for every class and unit the table holds now."""
    n_cls = len(st.classes)
    if st.rows.n_cls < n_cls:
        z = np.zeros((0, n_cls))
        st.rows.append(np.empty(0, np.int64), np.empty(0), (z, z, z))
    return st.rows.view()


def redo_finish(st: DeviceState, chunks: ChunkBuffer, now_ns: int) -> None:
    """A complete ``st.redo`` applied: its rows written into the ring, every row at once,
    the rows reduced since the refit recomputed from the buffer, and the refit's values made
    the device's."""
    r = st.redo
    assert r is not None and r.complete
    lag_ms, tau_ms, boost, ends_ms = r.params
    st.redo = None  # done: into the ring, every row at once, and the values current
    st.set_lag_params(r.params)
    t, _, *xs = _widened_view(st)
    at = np.searchsorted(t, r.t_ns)
    ok = at < len(t)
    ok[ok] = t[at[ok]] == r.t_ns[ok]  # a row gone from the ring (expired) is skipped
    tails = st.tail_rows.view()[2:] if len(st.tail_rows) == len(t) else None
    for x, xn in zip(xs, r.xs, strict=True):
        x[at[ok], :r.n_cls] = xn[ok]
    if r.hs is not None and tails is not None:
        for h, hn in zip(tails, r.hs, strict=True):
            h[at[ok]] = hn[ok]
    # the rows reduced since the refit (at its predecessor's values): from the buffer now
    after = np.flatnonzero(t > (int(r.t_ns[-1]) if len(r.t_ns) else r.now_ns))
    if not len(after):
        return
    lo = max(r.lo_ns, int(t[after[0]]) - row_reach_ns(lag_ms, st.window_ms,
                                                       boost.reach_ms(), ends_ms[1])
             - LOOKBACK_NS)
    it = items_for_device(chunks.recent(lo, kinds=GPU_ITEMS), st.device)
    unit = st.unit_ids(it)  # the wider read may hold units not seen before (a new clamp)
    t, _, *xs = _widened_view(st)
    busy = busy_from(it, unit, len(st.classes), lo)
    new, hs = row_columns(busy, t[after], window_ms=st.window_ms, lag_ms=lag_ms,
                          tau_ms=tau_ms, boost=boost, start_ns=it.start_ns,
                          end_ns=it.end_ns, prev_end_ns=None, now_ns=now_ns, ends_ms=ends_ms)
    for x, xn in zip(xs, new, strict=True):
        x[after, :xn.shape[1]] = xn
    if hs is not None and tails is not None:
        for h, hn in zip(tails, hs, strict=True):
            h[after] = hn

