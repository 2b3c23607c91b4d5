"""Decode raw CUPTI activity buffers into :mod:`attribution.model` batches.

Owns the decoder: records found by :mod:`ppwtop.collectors.cupti_layout`'s walk become
kernel, copy, memset, API, synchronisation and marker batches with names interned in one
string table, plus the counters a collector surfaces (skipped, undecodable, dropped, overhead,
unresolved names) and the name lookup in the target's memory.  It runs in the ppwtop process
on bytes that :mod:`ppwtop.collectors.cupti_raw` copied out of the target; the only per-record
work is numpy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from cupti import cupti

from attribution.api_kinds import api_kind_of
from attribution.model import (
    ApiBatch,
    ApiKind,
    CopyBatch,
    KernelBatch,
    MarkerBatch,
    MarkerKind,
    MemsetBatch,
    StringTable,
)
from ppwtop.collectors.cupti_layout import (
    AK,
    COPY_KIND_LUT,
    DEFAULT,
    DRIVER_CBID_NAMES,
    MARKER_FLAG_END,
    MARKER_FLAG_INSTANTANEOUS,
    MARKER_FLAG_START,
    MAX_KIND,
    MEM_KIND_LUT,
    RUNTIME_CBID_NAMES,
    Layout,
    NameResolver,
    gather,
    walk,
)


class ProcessMemoryNames:
    """Resolve name pointers by reading the target's memory (``/proc/<pid>/mem``).

    The alternative to shipping names from the agent: the target then does no walk at all,
    only the copy.  Needs ptrace-read permission on the target (ppwtop's own child, or the
    same user with ``kernel.yama.ptrace_scope`` 0); a pointer that is no longer mapped gives
    None (EFAULT/EIO), never a crash.  Results are cached by pointer.
    """

    def __init__(self, pid: int, max_len: int = 4096) -> None:
        self.pid = pid
        self.max_len = max_len
        self._cache: dict[int, str | None] = {}
        self._file: Any = None

    def __call__(self, ptr: int) -> str | None:
        if ptr in self._cache:
            return self._cache[ptr]
        name: str | None = None
        try:
            if self._file is None:
                self._file = open(f"/proc/{self.pid}/mem", "rb", buffering=0)  # noqa: SIM115
            chunks = []
            for off in range(0, self.max_len, 256):  # short reads: a name may end a page
                self._file.seek(ptr + off)
                chunk = self._file.read(256)
                end = chunk.find(b"\0")
                chunks.append(chunk if end < 0 else chunk[:end])
                if end >= 0 or not chunk:
                    break
            name = b"".join(chunks).decode("utf-8", "replace")
        except (OSError, OverflowError, ValueError):
            name = None
        self._cache[ptr] = name
        return name

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# --------------------------------------------------------------------------------------------
# Decode
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class DecodeStats:
    """Counters a collector surfaces (all since the decoder was created)."""

    buffers: int = 0
    bytes: int = 0
    records: dict[int, int] = dataclasses.field(default_factory=dict)  # by kind
    skipped_records: int = 0  # known size, not decoded
    undecodable_buffers: int = 0  # walk stopped at a kind of unknown size
    undecodable_bytes: int = 0
    unknown_kinds: dict[int, int] = dataclasses.field(default_factory=dict)
    dropped_records: int = 0  # cuptiActivityGetNumDroppedRecords, as reported with buffers
    dropped_buffers: int = 0  # whole buffers the agent dropped (slow socket)
    overhead_records: int = 0
    overhead_ns: dict[int, int] = dataclasses.field(default_factory=dict)  # by overhead kind
    unresolved_names: int = 0


@dataclasses.dataclass(slots=True)
class Decoded:
    """The batches decoded from one or more buffers (names interned in the decoder's table)."""

    kernels: KernelBatch
    copies: CopyBatch
    memsets: MemsetBatch
    apis: ApiBatch
    syncs: ApiBatch  # SYNCHRONIZATION records (kind SYNC; name "sync:<type>")
    markers: MarkerBatch


class Decoder:
    """Decodes buffers into batches, interning names into one :class:`StringTable`.

    ``names`` resolves a record's name pointer; pointer -> name pairs shipped with buffers are
    added with :meth:`add_names` and kept for the decoder's life.
    """

    def __init__(self, strings: StringTable | None = None, layout: Layout = DEFAULT,
                 names: NameResolver | None = None) -> None:
        self.strings = strings if strings is not None else StringTable()
        self.layout = layout
        self.stats = DecodeStats()
        self._names: dict[int, str] = {}
        self._resolver = names
        self._ptr_ids: dict[int, int] = {}
        self._open_markers: dict[int, tuple[int, int, int]] = {}  # id -> (start, tid, name_id)

    def add_names(self, table: Mapping[int, str]) -> None:
        self._names.update(table)

    def _resolve(self, ptr: int) -> str | None:
        name = self._names.get(ptr)
        if name is None and self._resolver is not None:
            r = self._resolver
            name = r.get(ptr) if isinstance(r, Mapping) else r(ptr)
        return name

    def _name_ids(self, ptrs: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
        u, inv = np.unique(ptrs.astype(np.int64), return_inverse=True)
        ids = np.empty(len(u), dtype=np.int32)
        for i, p in enumerate(u.tolist()):  # one step per distinct name, not per record
            nid = self._ptr_ids.get(p)
            if nid is None:
                name = self._resolve(p) if p else None
                if name is None:
                    if p:
                        self.stats.unresolved_names += int(np.count_nonzero(inv == i))
                    ids[i] = -1
                    continue
                nid = self.strings.intern(name)
                self._ptr_ids[p] = nid
            ids[i] = nid
        return ids[inv.reshape(-1)]

    def decode(self, buf: bytes | memoryview | npt.NDArray[np.uint8],
               valid_size: int | None = None, *, dropped_records: int = 0) -> Decoded:
        """Decode one buffer."""
        st = self.stats
        runs = walk(buf, valid_size, self.layout)
        n = len(buf) if valid_size is None else int(valid_size)
        st.buffers += 1
        st.bytes += n
        st.dropped_records += int(dropped_records)
        if runs.unknown_kind is not None or runs.end_offset + 4 <= n:
            st.undecodable_buffers += 1
            st.undecodable_bytes += n - runs.end_offset
            if runs.unknown_kind is not None:
                uk = runs.unknown_kind
                st.unknown_kinds[uk] = st.unknown_kinds.get(uk, 0) + 1
        kinds, _, counts = runs.arrays()
        per_kind = np.bincount(kinds, weights=counts, minlength=MAX_KIND).astype(np.int64)
        for kind in np.flatnonzero(per_kind).tolist():
            count = int(per_kind[kind])
            st.records[kind] = st.records.get(kind, 0) + count
            if kind not in self.layout.dtypes:
                st.skipped_records += count
        recs = gather(buf, runs, set(self.layout.dtypes), self.layout)
        return self._batches(recs)

    def _batches(self, recs: dict[int, npt.NDArray[Any]]) -> Decoded:
        st = self.stats
        k = [recs[x] for x in (int(AK.CONCURRENT_KERNEL), int(AK.KERNEL)) if x in recs]
        kernels = KernelBatch.empty()
        if k:
            r = k[0] if len(k) == 1 else np.concatenate(k)
            kernels = KernelBatch.from_columns({
                "start_ns": r["start"].astype(np.int64), "end_ns": r["end"].astype(np.int64),
                "device": r["device_id"], "stream": r["stream_id"],
                "correlation": _corr(r["correlation_id"]), "name_id": self._name_ids(r["name"]),
                "grid_x": r["grid_x"], "grid_y": r["grid_y"], "grid_z": r["grid_z"],
                "block_x": r["block_x"], "block_y": r["block_y"], "block_z": r["block_z"],
                "registers": r["registers_per_thread"],
                "shared_mem_bytes": r["static_shared_memory"].astype(np.int64)
                + r["dynamic_shared_memory"]})
        copies = CopyBatch.empty()
        if (rc := recs.get(int(AK.MEMCPY))) is not None:
            r = rc
            copies = CopyBatch.from_columns({
                "start_ns": r["start"].astype(np.int64), "end_ns": r["end"].astype(np.int64),
                "device": r["device_id"], "stream": r["stream_id"],
                "correlation": _corr(r["correlation_id"]),
                "kind": COPY_KIND_LUT[r["copy_kind"]], "src_mem": MEM_KIND_LUT[r["src_kind"]],
                "dst_mem": MEM_KIND_LUT[r["dst_kind"]], "bytes": r["bytes"].astype(np.int64)})
        memsets = MemsetBatch.empty()
        if (rm := recs.get(int(AK.MEMSET))) is not None:
            r = rm
            memsets = MemsetBatch.from_columns({
                "start_ns": r["start"].astype(np.int64), "end_ns": r["end"].astype(np.int64),
                "device": r["device_id"], "stream": r["stream_id"],
                "correlation": _corr(r["correlation_id"]),
                "mem": MEM_KIND_LUT[r["memory_kind"]], "bytes": r["bytes"].astype(np.int64)})
        apis = ApiBatch.concat(
            self._apis(recs[x], names) for x, names in
            ((int(AK.RUNTIME), RUNTIME_CBID_NAMES), (int(AK.DRIVER), DRIVER_CBID_NAMES))
            if x in recs)
        syncs = ApiBatch.empty()
        if (rs := recs.get(int(AK.SYNCHRONIZATION))) is not None:
            r = rs
            syncs = self._syncs(r)
        if (ro := recs.get(int(AK.OVERHEAD))) is not None:
            r = ro
            st.overhead_records += len(r)
            dur = r["end"].astype(np.int64) - r["start"].astype(np.int64)
            for ok in np.unique(r["overhead_kind"]).tolist():
                tot = int(dur[r["overhead_kind"] == ok].sum())
                st.overhead_ns[ok] = st.overhead_ns.get(ok, 0) + tot
        markers = MarkerBatch.empty()
        if (rk := recs.get(int(AK.MARKER))) is not None:
            r = rk
            markers = self._markers(r)
        return Decoded(kernels, copies, memsets, apis, syncs, markers)

    def _apis(self, r: npt.NDArray[Any], names: Mapping[int, str]) -> ApiBatch:
        u, inv = np.unique(r["cbid"], return_inverse=True)
        ids = np.empty(len(u), dtype=np.int32)
        kinds = np.empty(len(u), dtype=np.uint8)
        for i, cbid in enumerate(u.tolist()):  # one step per distinct call id
            name = names.get(cbid, f"cbid_{cbid}")
            ids[i] = self.strings.intern(name)
            kinds[i] = api_kind_of(name)
        inv = inv.reshape(-1)
        return ApiBatch.from_columns({
            "start_ns": r["start"].astype(np.int64), "end_ns": r["end"].astype(np.int64),
            "pid": r["process_id"], "tid": r["thread_id"],
            "correlation": _corr(r["correlation_id"]), "name_id": ids[inv], "kind": kinds[inv]})

    def _syncs(self, r: npt.NDArray[Any]) -> ApiBatch:
        types = {int(m.value): m.name.lower() for m in cupti.ActivitySynchronizationType}
        u, inv = np.unique(r["type"], return_inverse=True)
        ids = np.array([self.strings.intern(f"sync:{types.get(t, t)}") for t in u.tolist()],
                       dtype=np.int32)
        return ApiBatch.from_columns({
            "start_ns": r["start"].astype(np.int64), "end_ns": r["end"].astype(np.int64),
            "correlation": _corr(r["correlation_id"]), "name_id": ids[inv.reshape(-1)],
            "kind": np.full(len(r), int(ApiKind.SYNC))})

    def _markers(self, r: npt.NDArray[Any]) -> MarkerBatch:
        """Pair START/END records by id into ranges; an unmatched START waits for a later
        buffer; instantaneous marks become zero-length ranges."""
        flags = r["flags_"]
        ts = r["timestamp"].astype(np.int64)
        tid = r["object_id"]["pt"]["thread_id"].astype(np.int64)
        name_ids = self._name_ids(r["name"])
        rows: list[tuple[int, int, int, int]] = []
        for i in np.flatnonzero(flags & (MARKER_FLAG_START | MARKER_FLAG_END
                                         | MARKER_FLAG_INSTANTANEOUS)).tolist():
            f = int(flags[i])
            mid = int(r["id"][i])
            if f & MARKER_FLAG_START:
                self._open_markers[mid] = (int(ts[i]), int(tid[i]), int(name_ids[i]))
            elif f & MARKER_FLAG_END:
                opened = self._open_markers.pop(mid, None)
                if opened is not None:
                    rows.append((opened[0], int(ts[i]), opened[1], opened[2]))
            else:
                rows.append((int(ts[i]), int(ts[i]), int(tid[i]), int(name_ids[i])))
        if not rows:
            return MarkerBatch.empty()
        a = np.array(rows, dtype=np.int64)
        return MarkerBatch.from_columns({
            "start_ns": a[:, 0], "end_ns": a[:, 1], "tid": a[:, 2], "name_id": a[:, 3],
            "device": np.full(len(a), -1), "kind": np.full(len(a), int(MarkerKind.NVTX))})


def _corr(c: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """CUPTI correlation ids start at 1; 0 means none (-1 in the model)."""
    out = c.astype(np.int64)
    out[out == 0] = -1
    return out
