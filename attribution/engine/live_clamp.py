"""Clock-clamp units of the live engine: which items ran under a clock clamp, and the unit ↔
class bookkeeping that sums them back into the class rows.

Owns :class:`ClockLog` (a device's clock-event samples over the horizon), :func:`unit_ids`
(each item's regressor unit), :class:`UnitIndex` / :class:`UnitMap` (unit → class) and the
grouping of units into regressors (:func:`ranked_groups`, :func:`unit_kinds`,
:func:`class_time_by_group`).  The rule is the batch engine's (``engine/clamp.py``,
``build._unit_groups``): a kernel whose nearest clock sample (within 1 s of its start) carries
a clamp reason is *clamped*; a kernel class's clamped and free instances are two regressor
units, ranked like classes for the 32-group limit, each with its own prior kind
(``2 × source + clamped``); copies and memsets are never split.  The live engine keeps a
clamped unit in its class table (``live_ring.Classes``) as one more entry whose label ends in
:data:`CLAMPED_SUFFIX`, so slabs, reading rows and steps carry per-unit columns without
knowing about clamps; the snapshot maps units back to classes with :class:`UnitMap`.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from attribution.engine.activity import KERNEL, Items
from attribution.engine.build import group_kinds, label_ranks, rank_units
from attribution.engine.clamp import CLAMP_MASK, MAX_GAP_NS, nearest_clamped, one_per_time
from attribution.engine.live_ring import Classes
from attribution.intsets import distinct_ints
from attribution.model import F64, I32, I64, B, ClockBatch

CLAMPED_SUFFIX = "\x1fclamped"
"""Appended to a class label to name its clamped unit (a control character: no real kernel
name or copy label carries it)."""


class ClockLog:
    """A device's clock samples (time and "carries a clamp reason"), sorted by time."""

    def __init__(self) -> None:
        self.t_ns = np.empty(0, np.int64)
        self.clamped = np.empty(0, bool)
        self._n_clamped = 0
        self._edges: I64 | None = None  # clamped_edges of the samples, built when asked

    def __len__(self) -> int:
        return len(self.t_ns)

    def add(self, clocks: ClockBatch, device: int) -> None:
        """Append the samples of ``device`` (a log without a device column counts for every
        device, as :func:`clamp.clamped_items` reads it)."""
        if not len(clocks):
            return
        on = clocks.device == device
        if not bool(on.any()):
            on = clocks.device < 0
        if not bool(on.any()):
            return
        t = np.asarray(clocks.t_ns[on], np.int64)
        c = (clocks.clock_reasons[on] & CLAMP_MASK) != 0
        t_all = np.concatenate([self.t_ns, t])
        c_all = np.concatenate([self.clamped, c])
        if bool(np.any(t_all[1:] < t_all[:-1])):  # samples of a slow poll arriving late
            order = np.argsort(t_all, kind="stable")
            t_all, c_all = t_all[order], c_all[order]
        self.t_ns, self.clamped = t_all, c_all
        self._n_clamped = int(c_all.sum())
        self._edges = None

    def expire(self, before_ns: int) -> None:
        """Drop the samples taken before ``before_ns``."""
        i = int(np.searchsorted(self.t_ns, before_ns))
        if i:
            self._n_clamped -= int(self.clamped[:i].sum())
            self.t_ns, self.clamped = self.t_ns[i:], self.clamped[i:]
            self._edges = None

    def clamped_at(self, start_ns: I64) -> B:
        """Whether the nearest sample (within 1 s) to each start carries a clamp reason."""
        if not self._n_clamped:
            return np.zeros(len(start_ns), bool)
        if self._edges is None:
            if len(start_ns) < 8 * len(self.t_ns):  # a tick's records: not worth the spans
                return nearest_clamped(self.t_ns, self.clamped, start_ns)
            self._edges = clamped_edges(self.t_ns, self.clamped)
        # one binary search per start into the few clamped spans, where the rule itself
        # (clamp.nearest_clamped) takes one into every sample and ~10 passes over the starts
        return np.asarray(np.searchsorted(self._edges, start_ns, side="right") % 2 == 1)


def clamped_edges(t_ns: I64, clamp: B) -> I64:
    """The start times :func:`~attribution.engine.clamp.nearest_clamped` calls clamped, as
    the edges ``[lo_0, hi_0, lo_1, hi_1, ...]`` (strictly increasing) of half-open spans
    ``[lo_i, hi_i)``: a start is clamped iff ``searchsorted(edges, start, "right")`` is odd.

    Samples sharing a time are one, clamped if any is (``clamp.one_per_time``).  Between
    two sample times ``t[k−1] < t[k]`` the rule picks ``t[k−1]`` for starts
    ``s ≤ ⌊(t[k−1] + t[k]) / 2⌋`` (ties go to the earlier one) and ``t[k]`` above; at or
    before the first time, the first sample; after the last time, the last sample; a pick
    further than ``MAX_GAP_NS`` says no.  Each piece is one
    integer span (closed spans ``[lo, hi]``, written half-open as ``[lo, hi + 1)``), in time
    order; touching spans are merged so that no edge repeats."""
    n = len(t_ns)
    if n == 0 or not bool(clamp.any()):
        return np.empty(0, np.int64)
    t, clamp = one_per_time(np.asarray(t_ns, np.int64), clamp)
    a, b = t[:-1], t[1:]  # each pair of neighbouring times, a < b
    mid = (a + b) // 2
    gap = np.int64(MAX_GAP_NS)
    # per piece, in time order: before the first time, then (below mid, above mid) per gap,
    # then after the last time
    n_pieces = 2 * (len(t) - 1) + 2
    lo = np.empty(n_pieces, np.int64)
    hi = np.empty(n_pieces, np.int64)
    on = np.empty(n_pieces, bool)
    lo[0], hi[0], on[0] = t[0] - gap, t[0], clamp[0]
    lo[1:-1:2], hi[1:-1:2], on[1:-1:2] = a + 1, np.minimum(mid, a + gap), clamp[:-1]
    lo[2:-1:2], hi[2:-1:2], on[2:-1:2] = np.maximum(mid + 1, b - gap), b, clamp[1:]
    lo[-1], hi[-1], on[-1] = t[-1] + 1, t[-1] + gap, clamp[-1]
    keep = on & (hi >= lo)
    lo, hi = lo[keep], hi[keep] + 1
    if not len(lo):
        return np.empty(0, np.int64)
    join = np.flatnonzero(hi[:-1] == lo[1:])  # span i ends where span i + 1 starts
    lo = np.delete(lo, join + 1)
    hi = np.delete(hi, join)
    edges = np.empty(2 * len(lo), np.int64)
    edges[0::2], edges[1::2] = lo, hi
    return edges


def unit_ids(classes: Classes, it: Items, clamped: B) -> I64:
    """Each item's unit in ``classes`` (registering new classes and clamped units): the
    class's own entry, or for a clamped kernel its class's clamped unit."""
    gl = classes.lut(it.labels, it.class_source, it.class_key)
    if not len(it):
        return np.empty(0, np.int64)
    out = gl[it.cls]
    m = clamped & (it.source == KERNEL)
    if not bool(m.any()):
        return out
    cm = it.cls[m]
    present = distinct_ints(cm)
    units = classes.lut(tuple(it.labels[c] + CLAMPED_SUFFIX for c in present.tolist()),
                        tuple(it.class_source[c] for c in present.tolist()),
                        tuple(it.class_key[c] for c in present.tolist()))
    full = np.zeros(len(it.labels), np.int64)
    full[present] = units
    out[m] = full[cm]
    return out


@dataclasses.dataclass(frozen=True)
class UnitMap:
    """Units (the class table's entries) → classes (what the snapshot reports)."""

    unit_class: I64  # unit → class index
    clamped: B  # unit is a clamped unit
    labels: tuple[str, ...]  # per class
    source: tuple[int, ...]
    key: tuple[tuple[str, str], ...]

    @property
    def n_units(self) -> int:
        return len(self.unit_class)

    @functools.cached_property
    def layers(self) -> list[tuple[I64, I64]]:
        """The units in layers in which each class has at most one unit (a class's free
        units in the first, its clamped ones in the second): (units, their classes)."""
        uc = np.asarray(self.unit_class, np.int64)
        order = np.argsort(uc, kind="stable")
        first = np.r_[0, np.flatnonzero(np.diff(uc[order])) + 1]
        rank = np.arange(len(uc)) - np.repeat(first, np.diff(np.r_[first, len(uc)]))
        layer = np.empty(len(uc), np.int64)
        layer[order] = rank
        return [(u, uc[u]) for u in (np.flatnonzero(layer == r)
                                     for r in range(int(layer.max(initial=-1)) + 1))]

    @functools.cached_property
    def unit_label_rank(self) -> I64:
        """Each unit's class label's rank in string order (``build.label_ranks``): the
        ranking's tie-break, kept while the class table is unchanged."""
        return label_ranks([self.labels[c] for c in self.unit_class.tolist()])

    def to_classes(self, per_unit: F64) -> F64:
        """Sum a per-unit vector (or the last axis of an array) into classes: one gather-add
        per layer (a dense (units × classes) product cost ~3 ms a call at 500 classes);
        the same floats as that product, whose terms other than a class's own units are
        exact zeros."""
        k = per_unit.shape[-1]
        out = np.zeros((*per_unit.shape[:-1], len(self.labels)))
        for units, cls in self.layers:
            m = units < k  # an array reduced before the newest units existed
            out[..., cls[m]] += per_unit[..., units[m]]
        return out


class UnitIndex:
    """:class:`UnitMap` of a growing class table, rebuilt only when it grew."""

    def __init__(self) -> None:
        self._map: UnitMap | None = None

    def of(self, classes: Classes) -> UnitMap:
        n = len(classes)
        if self._map is not None and self._map.n_units == n:
            return self._map
        index: dict[str, int] = {}
        labels: list[str] = []
        source: list[int] = []
        key: list[tuple[str, str]] = []
        uc = np.empty(n, np.int64)
        cl = np.zeros(n, bool)
        for u, lab in enumerate(classes.labels):
            base = lab[:-len(CLAMPED_SUFFIX)] if lab.endswith(CLAMPED_SUFFIX) else lab
            cl[u] = lab.endswith(CLAMPED_SUFFIX)
            c = index.get(base)
            if c is None:
                c = index[base] = len(labels)
                labels.append(base)
                source.append(classes.source[u])
                key.append(classes.key[u])
            uc[u] = c
        self._map = UnitMap(uc, cl, tuple(labels), tuple(source), tuple(key))
        return self._map


def ranked_groups(time_s: F64, um: UnitMap) -> tuple[I64, I32, int]:
    """Busiest ``MAX_GROUPS`` units get their own group, the rest share the last one (the
    batch engine's ranking, :func:`build.rank_units`): (units in rank order, unit → group,
    groups).  Units that did not run in the horizon (a clamp that has left it, a class seen
    before it) get group −1: no column, as in the batch engine, where they do not exist."""
    t = np.asarray(time_s[:um.n_units], np.float64)
    return rank_units(t, um.unit_label_rank, um.clamped, t > 0)


def unit_kinds(um: UnitMap, order: I64, group: I32, n_groups: int) -> I64:
    """Prior kind of each group (``2 × source + clamped``, as ``build._unit_groups``); a
    shared "rest" group takes the kind of its least busy unit (``order``, ``group``: from
    :func:`ranked_groups`)."""
    unit_kind = (2 * np.asarray(um.source, np.int64)[um.unit_class[order]]
                 + um.clamped[order].astype(np.int64))
    return group_kinds(order, group, n_groups, unit_kind).astype(np.int64)


def class_time_by_group(time_s: F64, um: UnitMap, group: I32, n_groups: int
                        ) -> tuple[F64, I32]:
    """(groups × classes busy time, each class's main group): a class's energy is
    ``Σ_g ΔP_g × time[g, c]``; its main group is its free unit's when that ran in the
    horizon, else its clamped unit's (``build._unit_groups``); −1 when neither ran."""
    n_cls = len(um.labels)
    g_c = np.zeros((n_groups, n_cls))
    ran = group >= 0
    np.add.at(g_c, (group[ran], um.unit_class[ran]), time_s[ran])
    main = np.full(n_cls, -1, np.int64)
    for want_clamped in (True, False):  # free units overwrite clamped ones
        m = ran & (um.clamped == want_clamped)
        main[um.unit_class[m]] = group[m]
    return g_c, main.astype(np.int32)
