"""Launches whose GPU records have not come yet: how far the live engine may settle.

Owns the set of launch calls (kernel launches, copies, memsets: the API kinds that put an
item on the GPU) whose kernel, copy or memset record has not arrived. CUPTI hands a GPU
item's record over when the item completes, so a fixed settling delay (``live.SETTLE_S``)
reduces time that an item still running overlaps whenever the item runs longer than the
delay: its busy time before the reduction was lost, its call was never counted, and the
readings taken while it ran were fitted as if the GPU were idle. An item cannot start
before its launch call does, so no time before the earliest pending launch can gain a
record: :meth:`PendingLaunches.floor_ns` is that time, and the engine settles no further.

Launch calls made while their thread captures a stream into a CUDA graph run nothing and are
not waited on. A launch pending longer than ``max_wait_ns`` is given up (a failed launch, a
dropped record) and kept in ``given_up_ns``; the engine then settles past it as it did
before, and the snapshot says so. A call name given up on more often than matched
(``DISTRUST_AFTER``) is not waited on until its matches catch up (its calls tracked one in
``UNTRUSTED_SAMPLE``).
An item that comes before its call's record (it ended before the call returned, or its
buffer came late) is matched against the call when it comes, among the latest
``EARLY_KEEP`` items that came with no call waiting.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.engine.deltas import GPU_ITEMS
from attribution.model import I64, ApiBatch, ApiKind, Trace

ISSUING = (int(ApiKind.LAUNCH), int(ApiKind.MEMCPY), int(ApiKind.MEMSET))
"""The API kinds whose call puts an item on the GPU."""
_ISSUING_LUT = np.isin(np.arange(256), ISSUING)
MAX_WAIT_S = 60.0
"""A launch whose record has not come this long after the call is given up. Host code can
queue work far ahead: with seconds-long kernels the simulator's launches run up to 21 s
ahead of their items' ends, and a 10 s wait gave up on them (the sweep in
docs/accuracy.md, "Items longer than the settling delay")."""
EARLY_KEEP = 8192
"""The latest items that came with no call waiting on them, kept to match a call whose
record comes after its item's (a kernel that ends before its launch call returns, a buffer
delivered late)."""
DISTRUST_AFTER = 8
"""Calls of a name given up on this many times, and more often than matched, are not waited
on (still tracked, so the name is waited on again once its matches catch up): a call the
collector classes as a launch that never has a GPU record of its own would otherwise hold
the view ``MAX_WAIT_S`` behind, again and again."""
UNTRUSTED_SAMPLE = 64
"""The calls of a name not waited on are tracked one in this many, counted per name (by
correlation id, a loop making 64 calls an iteration was never sampled: 2026-12-05)."""


def _member(a: I64, b: I64) -> npt.NDArray[np.bool_]:
    """``np.isin(a, b)`` for correlation ids: through a bitmap over their range where that is
    compact (ids grow with every call, so one update's span little more than its records),
    else by sorting."""
    if not len(a) or not len(b):
        return np.zeros(len(a), bool)
    lo = min(int(a.min()), int(b.min()))
    span = max(int(a.max()), int(b.max())) - lo + 1
    if span > 8 * (len(a) + len(b)) + 4096:
        return np.isin(a, b)
    bits = np.zeros(span, bool)
    bits[b - lo] = True
    return bits[a - lo]


def item_correlations(delta: Trace) -> I64:
    """The correlation ids of ``delta``'s kernels, copies and memsets."""
    return np.concatenate([getattr(delta, f).correlation for f in GPU_ITEMS]).astype(
        np.int64, copy=False)


class PendingLaunches:
    """The launch calls whose items have not arrived, as (correlation, call start, name key)
    columns, and per call name how many were matched and given up on."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_ns = int(max_wait_s * 1e9)
        self.corr: I64 = np.empty(0, np.int64)
        self.start_ns: I64 = np.empty(0, np.int64)
        self.key: I64 = np.empty(0, np.int64)
        self.names: list[str] = []
        """The call names seen, indexed by key."""
        self._key_of: dict[str, int] = {}
        self.matched: I64 = np.zeros(0, np.int64)
        """Per name key: calls whose item came."""
        self.given_up: I64 = np.zeros(0, np.int64)
        """Per name key: calls given up on."""
        self.untrusted_seen: I64 = np.zeros(0, np.int64)
        """Per name key: calls seen while the name was not waited on (the sampling's count)."""
        self._early: I64 = np.empty(0, np.int64)
        self.given_up_ns: I64 = np.empty(0, np.int64)
        """The call starts of the launches given up on (``given_up_since`` drops old ones)."""
        self.given_up_key: I64 = np.empty(0, np.int64)
        self._capturing: set[int] = set()  # threads inside a stream capture
        self._table: object = None  # the string table the name-id arrays are of
        self._key_by_id: I64 = np.empty(0, np.int64)
        self._mark_by_id: npt.NDArray[np.int8] = np.empty(0, np.int8)

    def __len__(self) -> int:
        return len(self.corr)

    def _lookup(self, delta: Trace, name_id: npt.NDArray[np.integer[Any]]
                ) -> tuple[I64, npt.NDArray[np.int8]]:
        """Per record: its call name's key and capture mark (+1 a ``…BeginCapture``, −1 an
        ``…EndCapture``, else 0), from arrays indexed by name id, filled for ids not seen
        before (a feed's string table only grows; another table starts them afresh)."""
        if delta.strings is not self._table:
            self._table = delta.strings
            self._key_by_id = np.empty(0, np.int64)
            self._mark_by_id = np.empty(0, np.int8)
        if not len(name_id):
            return np.empty(0, np.int64), np.empty(0, np.int8)
        if "" not in self._key_of and bool((name_id < 0).any()):
            self._new_key("")  # calls with no name (id −1): counts of their own, not id 0's
        top = max(int(name_id.max()) + 1, 0)
        if top > len(self._key_by_id):
            old = len(self._key_by_id)
            self._key_by_id = np.pad(self._key_by_id, (0, top - old), constant_values=-1)
            self._mark_by_id = np.pad(self._mark_by_id, (0, top - old))
            for nid in range(old, top):
                name = delta.strings[nid] if nid < len(delta.strings) else f"#{nid}"
                k = self._key_of.get(name)
                self._key_by_id[nid] = self._new_key(name) if k is None else k
                self._mark_by_id[nid] = (1 if "BeginCapture" in name
                                         else -1 if "EndCapture" in name else 0)
        named = name_id >= 0
        keys = np.full(len(name_id), self._key_of.get("", -1), np.int64)
        marks = np.zeros(len(name_id), np.int8)
        keys[named] = self._key_by_id[name_id[named]]
        marks[named] = self._mark_by_id[name_id[named]]
        return keys, marks

    def _new_key(self, name: str) -> int:
        """A key for a call name not seen before, its counts at 0."""
        k = self._key_of[name] = len(self.names)
        self.names.append(name)
        self.matched = np.append(self.matched, 0)
        self.given_up = np.append(self.given_up, 0)
        self.untrusted_seen = np.append(self.untrusted_seen, 0)
        return k

    def _sampled_out(self, key: I64) -> npt.NDArray[np.bool_]:
        """Calls of names not waited on that are not tracked: all but every
        ``UNTRUSTED_SAMPLE``-th call of each such name, counted per name (a loop whose calls
        repeat every 64 correlation ids would always miss a sample taken by id)."""
        u = np.flatnonzero(~self.trusted()[key])
        out = np.zeros(len(key), bool)
        if not len(u):
            return out
        ku = key[u]
        order = np.argsort(ku, kind="stable")
        sk = ku[order]
        run = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
        rank = np.empty(len(ku), np.int64)
        rank[order] = np.arange(len(sk)) - np.repeat(run, np.diff(np.r_[run, len(sk)]))
        ordinal = self.untrusted_seen[ku] + rank
        self.untrusted_seen += np.bincount(ku, minlength=len(self.untrusted_seen))
        out[u] = ordinal % UNTRUSTED_SAMPLE != 0
        return out

    def _take(self, keep: npt.NDArray[np.bool_]) -> None:
        self.corr, self.start_ns, self.key = self.corr[keep], self.start_ns[keep], self.key[keep]

    def update(self, delta: Trace) -> None:
        """Take one update's API records and GPU items."""
        items = item_correlations(delta)
        taken: list[I64] = []  # the calls matched in this update
        if len(self.corr) and len(items):
            came = _member(self.corr, items)
            if bool(came.any()):
                self.matched += np.bincount(self.key[came], minlength=len(self.matched))
                taken.append(self.corr[came])
                self._take(~came)
        a = delta.apis
        # (CUPTI writes 0 for both times of a call it could not time: no floor to hold)
        new = _ISSUING_LUT[a.kind] & (a.correlation > 0) & (a.start_ns > 0)
        keys, marks = self._lookup(delta, a.name_id)
        new &= ~self._captured(a, marks)
        if bool(new.any()):
            corr, start = a.correlation[new].astype(np.int64, copy=False), a.start_ns[new]
            key = keys[new]
            came = _member(corr, items)
            if len(self._early):  # (few, and far back: apart, not in the bitmap's range)
                came |= np.isin(corr, self._early)
            if bool(came.any()):
                self.matched += np.bincount(key[came], minlength=len(self.matched))
                taken.append(corr[came])
                corr, start, key = corr[~came], start[~came], key[~came]
            # a name not waited on is tracked on one call in UNTRUSTED_SAMPLE (its matches can
            # catch up) so that a name that never matches does not fill the columns
            out = self._sampled_out(key)
            if bool(out.any()):
                corr, start, key = corr[~out], start[~out], key[~out]
            self.corr = np.concatenate([self.corr, corr])
            self.start_ns = np.concatenate([self.start_ns, start.astype(np.int64, copy=False)])
            self.key = np.concatenate([self.key, key])
        # this update's items that no call matched: their call's record may still come
        # (the latest EARLY_KEEP are kept)
        if len(items):
            done = np.concatenate(taken) if taken else np.empty(0, np.int64)
            early = items[~_member(items, done)]
            self._early = np.concatenate([self._early, early])[-EARLY_KEEP:]

    def _captured(self, a: ApiBatch, ev: npt.NDArray[np.int8]) -> npt.NDArray[np.bool_]:
        """Per API record of ``a`` (``ev``: its capture mark, :meth:`_lookup`): made on a
        thread while it captured a stream into a CUDA graph (between its ``…BeginCapture``
        and ``…EndCapture`` calls), so nothing runs on the GPU for it. The capture state of
        each thread carries over updates."""
        out = np.zeros(len(a), bool)
        if not len(a) or (not bool(ev.any()) and not self._capturing):
            return out
        order = np.lexsort((a.start_ns, a.tid))  # each thread's calls in time order
        tid, mark = a.tid[order], ev[order]
        i = np.arange(len(order))
        first = np.maximum.accumulate(np.where(np.r_[True, tid[1:] != tid[:-1]], i, 0))
        last_mark = np.maximum.accumulate(np.where(mark != 0, i, -1))  # at or before i
        seen = last_mark >= first  # a begin or end earlier in the same thread's calls
        before = np.isin(tid, np.fromiter(self._capturing, np.int64, len(self._capturing)))
        open_ = np.where(seen, mark[np.maximum(last_mark, 0)] > 0, before)
        out[order] = open_ & (mark == 0)
        ends = np.r_[np.flatnonzero(tid[1:] != tid[:-1]), len(order) - 1]
        for t, still in zip(tid[ends].tolist(), open_[ends].tolist(), strict=True):
            if still:  # (one step per thread of the update)
                self._capturing.add(int(t))
            else:
                self._capturing.discard(int(t))
        return out

    def trusted(self) -> npt.NDArray[np.bool_]:
        """Per name key: waited on (``DISTRUST_AFTER``)."""
        return np.asarray((self.given_up < DISTRUST_AFTER) | (self.matched >= self.given_up),
                          bool)

    def floor_ns(self, now_ns: int) -> int | None:
        """The earliest call start of a launch still pending whose name is waited on (None:
        none), after giving up on those pending longer than ``max_wait_ns`` at ``now_ns``."""
        if not len(self.corr):
            return None
        old = self.start_ns < now_ns - self.max_wait_ns
        if bool(old.any()):
            self.given_up += np.bincount(self.key[old], minlength=len(self.given_up))
            self.given_up_ns = np.concatenate([self.given_up_ns, self.start_ns[old]])
            self.given_up_key = np.concatenate([self.given_up_key, self.key[old]])
            self._take(~old)
        wait = self.trusted()[self.key]
        return int(self.start_ns[wait].min()) if bool(wait.any()) else None

    def given_up_since(self, start_ns: int) -> list[tuple[str, int]]:
        """Per call name, the launches given up on whose call started at or after
        ``start_ns`` (and forget the earlier ones: the horizon's start only moves on)."""
        keep = self.given_up_ns >= start_ns
        self.given_up_ns, self.given_up_key = self.given_up_ns[keep], self.given_up_key[keep]
        counts = np.bincount(self.given_up_key, minlength=len(self.names))
        return [(self.names[k], int(counts[k])) for k in np.flatnonzero(counts).tolist()]

    def given_up_line(self, start_ns: int) -> str | None:
        """The snapshot's line for the launches given up on in a horizon starting at
        ``start_ns`` (:meth:`given_up_since`), None when there were none."""
        lost = self.given_up_since(start_ns)
        if not lost:
            return None
        trusted = self.trusted()
        return given_up_warning(lost, self.max_wait_ns * 1e-9,
                                [n for k, n in enumerate(self.names) if not trusted[k]])


def given_up_warning(lost: list[tuple[str, int]], max_wait_s: float,
                     not_waited: list[str]) -> str:
    """The snapshot's line when launches were given up on in its horizon."""
    calls = ", ".join(f"{n} × {name}" for name, n in lost)
    line = (f"launch calls with no kernel, copy or memset record {max_wait_s:.0f} s after the "
            f"call ({calls}: a failed launch, a dropped record, or work queued that long): "
            "their time was settled without them")
    if not_waited:
        line += ("; no longer waited on, given up on more often than matched: "
                 + ", ".join(not_waited))
    return line


WAIT_WARN_S = 1.0
"""A live view ending this much further behind ``now`` than the settling delay says why."""


def waiting_warning(wait_s: float) -> str:
    """The snapshot's line when the live view waits on a pending item (``WAIT_WARN_S``)."""
    return (f"the live view ends {wait_s:.1f} s before now: a kernel, copy or memset launched "
            "then has not completed (running or queued); that time is settled once its record "
            "comes")
