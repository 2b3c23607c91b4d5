"""The compiled sweeps, when they were built: the one door to ``attribution._native``.

Owns whether the engine uses them and the typed calls into them.  ``csrc/`` holds the C
(built by ``pip install`` as an optional extension: with no compiler the install still
succeeds and the engine runs its numpy forms).  Each sweep does one per-record pass that numpy
would do as several, and gives the same bits as the numpy form it stands in for, which stays
in the module that owns the pass as the reference and the fallback (tests/test_native.py runs
both on the same inputs).  ``PPWTOP_NATIVE=0`` in the environment turns the sweeps off.

The callers check :func:`enabled` each time (tests switch it with :func:`use`), pass arrays of
the documented dtypes, and get their outputs in arrays they allocated.
"""

from __future__ import annotations

import os
from types import ModuleType

import numpy as np

from attribution.model import F64, I32, I64, U8, B

_c: ModuleType | None
try:
    from attribution import _native as _c
except ImportError:  # not built (no compiler at install time): the numpy forms serve
    _c = None

_state = {"on": _c is not None and os.environ.get("PPWTOP_NATIVE", "1") != "0"}


def built() -> bool:
    """Whether the extension was compiled and imports."""
    return _c is not None


def enabled() -> bool:
    """Whether the engine uses the sweeps now."""
    return _state["on"]


def use(on: bool) -> bool:
    """Turn the sweeps on or off (on only if built); returns the previous setting."""
    was = _state["on"]
    _state["on"] = bool(on) and _c is not None
    return was


def _lib() -> ModuleType:
    if _c is None or not _state["on"]:
        raise RuntimeError("attribution._native is not in use")
    return _c


COARSE_STEP = 8
"""Every 8th knot goes into the coarse index :func:`interp_groups` searches on a jump."""


def coarse_index(x: F64) -> F64:
    """The coarse index of knots ``x`` for :func:`interp_groups`."""
    return np.ascontiguousarray(x[::COARSE_STEP], np.float64)


def interp_groups(parts: list[tuple[F64, F64, F64]], t_ns: I64, origin_ns: int,
                  n_rows: int, n_cols: int) -> F64:
    """``np.interp((t_ns - origin_ns) * 1e-9, x, b, left=0.0, right=b[-1])`` for every
    group's ``(x, b, coarse_index(x))`` of ``parts`` (``x`` strictly increasing; an empty
    group reads 0), laid out (n_cols, n_rows, groups): query ``r * n_cols + c`` lands at
    ``[c, r, g]``.  One pass over the queries serves every group, each search resuming from
    that group's previous answer, so nearly sorted queries cost a few comparisons."""
    out = np.empty((n_cols, n_rows, len(parts)), np.float64)
    _lib().interp_groups([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts],
                         np.ascontiguousarray(t_ns, np.int64), int(origin_ns), out,
                         int(n_rows), int(n_cols))
    return out


def knots_grouped(start_ns: I64, end_ns: I64, group: I32, n_groups: int, origin_ns: int
                  ) -> tuple[F64, F64, I64, I64]:
    """Knots of every group's busy function where its instances run one after another:
    ``(x, b, off, length)`` with group g's knots ``x[off[g]:off[g] + length[g]]`` and B there
    in ``b``, as ``activity._knots`` of the group's times in row order gives them;
    ``length[g] = -1`` for a group whose instances overlap or come out of order (its events
    need a sort: the caller's)."""
    n = len(start_ns)
    x = np.empty(2 * n, np.float64)
    b = np.empty(2 * n, np.float64)
    off = np.empty(n_groups + 1, np.int64)
    length = np.empty(n_groups, np.int64)
    _lib().knots_grouped(np.ascontiguousarray(start_ns, np.int64),
                         np.ascontiguousarray(end_ns, np.int64),
                         np.ascontiguousarray(group, np.int32), int(n_groups), int(origin_ns),
                         x, b, off, length)
    return x, b, off, length


def merge_order(start_ns: I64) -> I64 | None:
    """``np.argsort(start_ns, kind="stable")`` when ``start_ns`` is at most 8 ascending runs
    (a device's kernels, then copies, then memsets), by merging them; None otherwise (the
    caller sorts)."""
    order = np.empty(len(start_ns), np.int64)
    ok = _lib().merge_order(np.ascontiguousarray(start_ns, np.int64), order)
    return order if ok else None


def union_gaps(runs: list[tuple[I64, I64, I64]], *, window_ns: tuple[int, int]
               ) -> tuple[I64, I64, I64] | None:
    """The idle gaps of 1-3 runs of items ``(start_ns, end_ns, correlation)`` (each sorted by
    start, all overlapping the window) taken in the order a stable sort of their
    concatenation gives, as ``idle.idle_intervals`` builds them: (gap starts, gap ends,
    correlation id of the item after each gap, −1 after the last), an empty first or last
    gap dropped; None when a run is not sorted."""
    n = sum(len(r[0]) for r in runs)
    gs, ge, nc = (np.empty(n + 1, np.int64) for _ in range(3))
    k = _lib().union_gaps([np.ascontiguousarray(r[0], np.int64) for r in runs],
                          [np.ascontiguousarray(r[1], np.int64) for r in runs],
                          [np.ascontiguousarray(r[2], np.int64) for r in runs],
                          int(window_ns[0]), int(window_ns[1]), gs, ge, nc)
    return (gs[:k], ge[:k], nc[:k]) if k >= 0 else None


def issue_ends(api_kind: U8, api_corr: I64, api_end_ns: I64, query: I64, *, sync_kind: int,
               max_per_row: int) -> tuple[I64, B] | None:
    """``idle._issue_end_ns``'s table form: the end of the call that issued each queried
    correlation id and whether there was one (ends where not found are 0, not the numpy
    form's arbitrary value: callers mask by found); None when the ids are not increasing
    and dense (the caller searches)."""
    end = np.empty(len(query), np.int64)
    found = np.empty(len(query), np.bool_)
    ok = _lib().issue_ends(np.ascontiguousarray(api_kind, np.uint8),
                           np.ascontiguousarray(api_corr, np.int64),
                           np.ascontiguousarray(api_end_ns, np.int64), int(sync_kind),
                           int(max_per_row), np.ascontiguousarray(query, np.int64), end,
                           found.view(np.uint8))
    return (end, found) if ok else None


def gap_causes(gap_s: I64, gap_e: I64, issue_end_ns: I64, found: B, *, sync: tuple[I64, I64],
               have_api: bool, launch_tol_ns: int, stall_ns: int, sync_cover: float) -> U8:
    """Each gap's cause code as ``idle.idle_intervals`` assigns it (sorted, disjoint gaps
    and ``sync`` = (starts, ends) of the sync calls' union; the cover by one merge walk)."""
    cause = np.empty(len(gap_s), np.uint8)
    _lib().gap_causes(np.ascontiguousarray(gap_s, np.int64),
                      np.ascontiguousarray(gap_e, np.int64),
                      np.ascontiguousarray(issue_end_ns, np.int64),
                      np.ascontiguousarray(found, np.bool_).view(np.uint8),
                      np.ascontiguousarray(sync[0], np.int64),
                      np.ascontiguousarray(sync[1], np.int64), bool(have_api),
                      int(launch_tol_ns), int(stall_ns), float(sync_cover), cause)
    return cause


def share_serial(start_ns: I64, end_ns: I64, order: I64, origin_ns: int) -> F64 | None:
    """``activity._share_one_at_a_time`` with the items' start order given: each item's
    time share when no two overlap, else None."""
    out = np.empty(len(start_ns), np.float64)
    ok = _lib().share_serial(np.ascontiguousarray(start_ns, np.int64),
                             np.ascontiguousarray(end_ns, np.int64),
                             np.ascontiguousarray(order, np.int64), int(origin_ns), out)
    return out if ok else None


def window_block(parts: list[tuple[F64, F64, F64]], t_ns: I64, cols_ns: I64, hi: I64, lo: I64,
                 *, window_s: float, origin_ns: int) -> F64:
    """``timebase.iter_window_fractions``' fraction table without the table of edge values:
    ``out[k, r, g] = (B_g(t_r − cols[hi[k]]) − B_g(t_r − cols[lo[k]])) / window_s`` for the
    groups' ``(x, b, coarse_index(x))`` (``cols_ns`` descending offsets, so each reading's
    times ascend), shaped (len(hi), len(t_ns), groups): the same values, one pass."""
    out = np.empty((len(hi), len(t_ns), len(parts)), np.float64)
    _lib().window_block([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts],
                        np.ascontiguousarray(t_ns, np.int64),
                        np.ascontiguousarray(cols_ns, np.int64), np.ascontiguousarray(hi, np.int64),
                        np.ascontiguousarray(lo, np.int64), float(window_s), int(origin_ns), out)
    return out


def first_order(b0: float, a: float, x: F64) -> F64:
    """``scipy.signal.lfilter([b0], [1, -a], x)`` of a 1-D float64 ``x``, same bits: the
    simulator's recursion (reference and fallback: ``attribution.sim.first_order``)."""
    xs = np.ascontiguousarray(x, np.float64)
    out = np.empty(len(xs), np.float64)
    _lib().first_order(float(b0), float(a), xs, out)
    return out
