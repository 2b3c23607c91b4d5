"""Activity classes and their busy time over arbitrary windows.

Owns the mapping of GPU items (kernels, copies, memsets) to classes -- one per kernel name,
copy kind/memory, or memset memory, per device -- and the cumulative busy-time functions
``B_c(t) = Σ_i |[start_i, end_i] ∩ (-∞, t]|`` that turn any set of windows into per-class
busy time with two ``searchsorted`` calls.  Concurrent instances of a class add (two streams
running the same kernel count twice), matching the additive power model ``ΔP_c`` per
running instance.  Also owns the time-share function used to split ``P_idle`` among
concurrent items.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attribution import native
from attribution.intsets import distinct_ints, relabel, unique_inverse
from attribution.model import F64, I32, I64, MemKind, Trace

KERNEL, COPY, MEMSET = 0, 1, 2


@dataclasses.dataclass(frozen=True, slots=True)
class Items:
    """All GPU items of one device, in one table (kernels first, then copies, then memsets).

    ``row`` is the index into the source batch (``source`` says which: KERNEL/COPY/MEMSET);
    ``cls`` indexes ``labels`` (``kernel:<name>``, ``copy:<kind>/<memory>``).
    """

    device: int
    start_ns: I64
    end_ns: I64
    source: I32  # KERNEL, COPY or MEMSET
    row: I64
    cls: I32
    labels: tuple[str, ...]
    class_source: tuple[int, ...]
    class_key: tuple[tuple[str, str], ...]  # (name, "") for kernels, (kind, memory) for copies

    def __len__(self) -> int:
        return len(self.start_ns)

    @property
    def duration_ns(self) -> I64:
        return self.end_ns - self.start_ns


def copy_memory_label(src_mem: int, dst_mem: int) -> str:
    """The memory a copy is labelled by: its host side if any (pageable beats pinned)."""
    mems = (src_mem, dst_mem)
    for m in (MemKind.PAGEABLE, MemKind.PINNED, MemKind.MANAGED, MemKind.ARRAY, MemKind.DEVICE):
        if int(m) in mems:
            return m.label
    return MemKind.UNKNOWN.label


def items_for_device(trace: Trace, device: int) -> Items:
    """Collect the device's kernels, copies and memsets and assign classes."""
    from attribution.model import CopyKind

    k, c, m = trace.kernels, trace.copies, trace.memsets
    k_rows = _device_rows(k.device, device)
    c_rows, m_rows = np.flatnonzero(c.device == device), np.flatnonzero(m.device == device)
    # one device (the common case): its kernel columns as they are, no gather
    k_sel = slice(None) if k_rows is None else k_rows
    nk = len(k) if k_rows is None else len(k_rows)
    nc, nm = len(c_rows), len(m_rows)
    n_all = nk + nc + nm
    labels: list[str] = []
    src: list[int] = []
    keys: list[tuple[str, str]] = []
    index: dict[str, int] = {}

    def add(label: str, source: int, key: tuple[str, str]) -> int:
        i = index.get(label)
        if i is None:
            i = len(labels)
            index[label] = i
            labels.append(label)
            src.append(source)
            keys.append(key)
        return i

    cls = np.empty(n_all, np.int32)
    # kernels: one class per name id (ids in sorted order, as np.unique gives them)
    kid = k.name_id[k_sel]
    uk = distinct_ints(kid)
    names = [_name(trace, int(u)) for u in uk.tolist()]
    kmap = np.array([add("kernel:" + n, KERNEL, (n, "")) for n in names], dtype=np.int32)
    relabel(kid, uk, kmap, out=cls[:nk])
    # copies: one class per (kind, memory label)
    ckey = (c.kind[c_rows].astype(np.int64) * 64 + c.src_mem[c_rows].astype(np.int64) * 8
            + c.dst_mem[c_rows].astype(np.int64))
    uc, cinv = unique_inverse(ckey)
    cl: list[int] = []
    for u in uc:
        kv = int(u) // 64
        kind = CopyKind(kv).label if kv in CopyKind._value2member_map_ else "other"
        mem = copy_memory_label((int(u) // 8) % 8, int(u) % 8)
        cl.append(add(f"copy:{kind}/{mem}", COPY, (kind, mem)))
    if nc:
        cls[nk:nk + nc] = np.array(cl, dtype=np.int32)[cinv]
    mkey = m.mem[m_rows].astype(np.int64)
    um, minv = unique_inverse(mkey)
    ml: list[int] = []
    for u in um:
        mem = MemKind(int(u)).label if int(u) in MemKind._value2member_map_ else "unknown"
        ml.append(add(f"copy:memset/{mem}", MEMSET, ("memset", mem)))
    if nm:
        cls[nk + nc:] = np.array(ml, dtype=np.int32)[minv]
    source = np.empty(n_all, np.int32)
    source[:nk] = KERNEL
    source[nk:nk + nc] = COPY
    source[nk + nc:] = MEMSET
    row = np.arange(n_all, dtype=np.int64) if k_rows is None else np.empty(n_all, np.int64)
    if k_rows is not None:
        row[:nk] = k_rows
    row[nk:nk + nc] = c_rows
    row[nk + nc:] = m_rows
    return Items(
        device=device,
        start_ns=np.concatenate([k.start_ns[k_sel], c.start_ns[c_rows], m.start_ns[m_rows]]),
        end_ns=np.concatenate([k.end_ns[k_sel], c.end_ns[c_rows], m.end_ns[m_rows]]),
        source=source,
        row=row,
        cls=cls,
        labels=tuple(labels),
        class_source=tuple(src),
        class_key=tuple(keys),
    )


def _device_rows(device_col: np.ndarray, device: int) -> I64 | None:
    """The rows of a batch on ``device``; None when that is every row (no index built)."""
    on = device_col == device
    if int(np.count_nonzero(on)) == len(device_col):
        return None
    return np.flatnonzero(on)


def _name(trace: Trace, name_id: int) -> str:
    if 0 <= name_id < len(trace.strings):
        return trace.strings[name_id]
    return f"<kernel {name_id}>"


class BusyFunction:
    """``B_g(t)`` in seconds for every group g.

    ``B_g`` is piecewise linear with knots at the group's starts and ends (slope = number of
    instances running).  The knots and ``B_g`` at each knot are built once (one sort per
    group, a cumulative sum of ``count × gap`` that adds only small positive terms), so each
    call is one ``np.interp`` per group: one binary search per query instead of two, exact up
    to float rounding.
    """

    def __init__(self, start_ns: I64, end_ns: I64, group: I32, n_groups: int, *,
                 origin_ns: int) -> None:
        self.origin_ns = origin_ns
        self.n_groups = n_groups
        self._parts: list[tuple[F64, F64]] = []
        self._coarse: list[tuple[F64, F64, F64]] | None = None
        in_range = (bool(len(group)) and n_groups <= 1 << 16 and int(group.min()) >= 0
                    and int(group.max()) < n_groups)
        if in_range and native.enabled():
            self._parts = _knots_native(start_ns, end_ns, group, n_groups, origin_ns)
            return
        s_all = (start_ns - origin_ns).astype(np.float64) * 1e-9
        e_all = (end_ns - origin_ns).astype(np.float64) * 1e-9
        if in_range:
            # few groups: a radix sort of the narrow key and bounds from the counts
            key = group.astype(np.uint8 if n_groups <= 256 else np.uint16)
            order = np.argsort(key, kind="stable") if n_groups > 1 else np.arange(len(group))
            bounds = np.r_[0, np.cumsum(np.bincount(key, minlength=n_groups))]
        else:
            order = np.argsort(group, kind="stable")
            bounds = np.searchsorted(group[order], np.arange(n_groups + 1))
        for g in range(n_groups):
            sel = order[bounds[g]:bounds[g + 1]]
            self._parts.append(_knots(s_all[sel], e_all[sel]))

    def __call__(self, t_ns: I64) -> F64:
        out = np.zeros((len(t_ns), self.n_groups), np.float64)
        if native.enabled() and self.n_groups:
            return self._native(t_ns, len(t_ns), 1).reshape(len(t_ns), self.n_groups)
        order, values = self._values(t_ns)
        for g, v in values:
            if order is None:
                out[:, g] = v
            else:
                out[order, g] = v
        return out

    def by_group(self, t_ns: I64, shape: tuple[int, int]) -> F64:
        """``self(t_ns)`` laid out (shape[1], shape[0], groups) for queries that form a
        (shape[0], shape[1]) block in row order: the lag search's layout, written once rather
        than as a (queries, groups) array and then a transposed copy of it."""
        if native.enabled() and self.n_groups:
            return self._native(t_ns, shape[0], shape[1])
        order, values = self._values(t_ns)
        if order is not None:  # queries not in the block layout the method is meant for
            full = self(t_ns).reshape(shape[0], shape[1], self.n_groups)
            return np.ascontiguousarray(full.transpose(1, 0, 2))
        out = np.zeros((shape[1], shape[0], self.n_groups), np.float64)
        for g, v in values:
            out[:, :, g] = v.reshape(shape).T
        return out

    def window_block(self, t_ns: I64, cols_ns: I64, hi: I64, lo: I64, window_s: float
                     ) -> F64 | None:
        """``(B(t − cols[hi]) − B(t − cols[lo])) / window_s`` for every reading, (len(hi),
        len(t), groups), by the compiled sweeps (None when they are off: the caller reads the
        edges itself); ``cols_ns`` descending."""
        if not native.enabled() or not self.n_groups:
            return None
        if self._coarse is None:
            self._coarse = [(x, b, native.coarse_index(x)) for x, b in self._parts]
        return native.window_block(self._coarse, t_ns, cols_ns, hi, lo, window_s=window_s,
                                   origin_ns=self.origin_ns)

    def _native(self, t_ns: I64, n_rows: int, n_cols: int) -> F64:
        """The compiled form of :meth:`_values` (same bits): (n_cols, n_rows, groups) for
        queries in (n_rows, n_cols) row order, whatever the queries' order."""
        if self._coarse is None:
            self._coarse = [(x, b, native.coarse_index(x)) for x, b in self._parts]
        return native.interp_groups(self._coarse, t_ns, self.origin_ns, n_rows, n_cols)

    def _values(self, t_ns: I64) -> tuple[I64 | None, list[tuple[int, F64]]]:
        """B_g at the queries for each group with items: (order, [(g, values)]); the values
        are in query order when ``order`` is None, else in the order ``order``."""
        t = (t_ns - self.origin_ns).astype(np.float64) * 1e-9
        # np.interp starts each search from the previous key's position: sorted queries (the
        # lag search asks for clusters of nearby times) are ~1.6x cheaper than the caller's
        # order.  Nearly sorted queries (a few sorted runs in order of their starts, as
        # timebase.iter_window_fractions lays them out) are answered as they come: each step
        # back costs one full search, less than sorting.
        order = None if _nearly_sorted(t) else np.argsort(t, kind="stable")
        ts = t if order is None else t[order]
        return order, [(g, np.interp(ts, x, b, left=0.0, right=float(b[-1])))
                       for g, (x, b) in enumerate(self._parts) if len(x)]


def _nearly_sorted(t: F64) -> bool:
    """Sorted runs, few of them, each starting after the previous run's start."""
    steps_back = np.flatnonzero(t[1:] < t[:-1])
    if len(steps_back) == 0:
        return True
    if len(steps_back) * 64 > len(t):
        return False
    starts = t[np.r_[0, steps_back + 1]]
    return bool(np.all(starts[1:] >= starts[:-1]))


def _knots(s: F64, e: F64) -> tuple[F64, F64]:
    """Distinct knot times of ``B(t) = Σ_i |[s_i, e_i] ∩ (-∞, t]|`` and B at each knot."""
    n = len(s)
    if n == 0:
        return np.empty(0, np.float64), np.empty(0, np.float64)
    # one instance after another (one stream, in order: the common case): the knots are
    # s0 e0 s1 e1 ... already, with 1 instance running after each start and 0 after each end
    ts = np.empty(2 * n, np.float64)
    ts[0::2] = s
    ts[1::2] = e
    dt = np.diff(ts)
    b = np.empty(len(ts), np.float64)
    b[0] = 0.0
    if bool((dt >= 0.0).all()):
        term = dt.copy()
        term[1::2] = 0.0
        np.cumsum(term, out=b[1:])
    else:
        t = np.concatenate([s, e])
        order = np.argsort(t, kind="stable")
        ts = t[order]
        running = np.cumsum(np.where(order < n, 1, -1))  # instances running after each knot
        dt = np.diff(ts)
        np.cumsum(running[:-1] * dt, out=b[1:])
    last = np.empty(len(ts), bool)  # equal times: keep one knot (B is continuous)
    np.greater(dt, 0.0, out=last[:-1])
    last[-1] = True
    return ts[last], b[last]


def _knots_native(start_ns: I64, end_ns: I64, group: I32, n_groups: int, origin_ns: int
                  ) -> list[tuple[F64, F64]]:
    """Every group's :func:`_knots` (same bits) from one compiled pass over the items; a group
    whose instances overlap or come out of order gets the numpy form over its own items."""
    x, b, off, length = native.knots_grouped(start_ns, end_ns, group, n_groups, origin_ns)
    parts: list[tuple[F64, F64]] = []
    for g in range(n_groups):
        a, m = int(off[g]), int(length[g])
        if m >= 0:
            parts.append((x[a:a + m], b[a:a + m]))
            continue
        sel = np.flatnonzero(group == g)
        parts.append(_knots((start_ns[sel] - origin_ns).astype(np.float64) * 1e-9,
                            (end_ns[sel] - origin_ns).astype(np.float64) * 1e-9))
    return parts


def busy_at(start_ns: I64, end_ns: I64, group: I32, n_groups: int, t_ns: I64, *,
            origin_ns: int) -> F64:
    """``B_g(t)`` in seconds for every group g and time t: shape ``(len(t), n_groups)``."""
    return BusyFunction(start_ns, end_ns, group, n_groups, origin_ns=origin_ns)(t_ns)


def idle_share_s(start_ns: I64, end_ns: I64, origin_ns: int) -> F64:
    """Each item's share of busy wall time: ∫ over the item of 1/k(t), k = items running.

    The shares of all items sum to the length of their union, so ``P_idle × share`` splits
    the idle baseline of busy time among concurrent items by time share.
    """
    n = len(start_ns)
    if n == 0:
        return np.empty(0, np.float64)
    if native.enabled():  # the same bits as _share_one_at_a_time, in one merge and one pass
        order = native.merge_order(start_ns)
        if order is None:
            order = np.argsort(start_ns, kind="stable").astype(np.int64)
        quick = native.share_serial(start_ns, end_ns, order, origin_ns)
    else:
        quick = _share_one_at_a_time(start_ns, end_ns, origin_ns)
    if quick is not None:
        return quick
    t = np.concatenate([start_ns, end_ns]) - origin_ns
    # sort by (time, ends before starts): one stable sort of 2t + (is start)
    key = t * 2
    key[:n] += 1
    order = np.argsort(key, kind="stable")
    ts = t[order].astype(np.float64) * 1e-9
    k = np.cumsum(np.where(order < n, 1, -1))
    seg = np.diff(ts)
    rate = np.where(k[:-1] > 0, 1.0 / np.maximum(k[:-1], 1), 0.0)
    g = np.r_[0.0, np.cumsum(seg * rate)]
    # G at each item's own start and end: where the sort put them (G is flat across equal
    # times, so this is what interpolating G there gives, without a search)
    pos = np.empty(2 * n, np.intp)
    pos[order] = np.arange(2 * n)
    return np.asarray(np.maximum(g[pos[n:]] - g[pos[:n]], 0.0), dtype=np.float64)


def _share_one_at_a_time(start_ns: I64, end_ns: I64, origin_ns: int) -> F64 | None:
    """:func:`idle_share_s` when no two items overlap (one stream, serialised: the common
    case), else None.  In start order the events are then s0 e0 s1 e1 ... with one item
    running after each start and none after each end, so G needs no sort of the events and
    no search; the sums are the same, term for term (equal times add zero-length terms)."""
    ordered = bool(np.all(start_ns[1:] >= start_ns[:-1]))
    by_start = None if ordered else np.argsort(start_ns, kind="stable")
    s = start_ns if by_start is None else start_ns[by_start]
    e = end_ns if by_start is None else end_ns[by_start]
    t = np.empty(2 * len(s), np.int64)
    t[0::2] = s
    t[1::2] = e
    t -= origin_ns
    if not bool(np.all(t[1:] >= t[:-1])):
        return None
    seg = np.diff(t.astype(np.float64) * 1e-9)
    seg[1::2] = 0.0  # nothing runs between an end and the next start
    g = np.empty(len(t), np.float64)
    g[0] = 0.0
    np.cumsum(seg, out=g[1:])
    share = np.maximum(g[1::2] - g[0::2], 0.0)
    if by_start is None:
        return share
    out = np.empty(len(share), np.float64)
    out[by_start] = share
    return out
