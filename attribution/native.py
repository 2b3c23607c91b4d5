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

from attribution.model import F64, I32, I64

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
