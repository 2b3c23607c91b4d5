"""A fake ``libcupti.so`` for the raw-buffer activity path, driven by a :class:`Trace`.

:class:`FakeCuptiLib` has the functions :mod:`ppwtop.collectors.cupti_raw` calls
(``cuptiActivityRegisterCallbacks``, ``cuptiActivityEnable``, ``cuptiActivityFlushAll``,
``cuptiActivityGetNumDroppedRecords``, ...).  On a flush it lays the pending records out
byte for byte in cupti-python's record dtypes (the layouts of ``CUpti_ActivityKernel13``,
``Memcpy7``, ``Memset5``, ``API``, ``Marker2``, ``Overhead3``), asks for buffers through the
registered *buffer requested* callback and hands them back through the *buffer completed*
callback, both called through C function pointers as libcupti would call them.

Kernel and marker names are C strings owned by the fake; records hold their addresses, so
``ctypes.string_at`` on a record's ``name`` works in this process as it does in a target.
Encoding conventions: a model correlation of -1 is written as 0 (CUPTI ids start at 1);
runtime API names are encoded as the lowest cbid with that name.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
from cupti import cupti

from attribution.model import CopyKind, MemKind, Trace
from ppwtop.collectors.cupti_layout import (
    DEFAULT,
    MARKER_FLAG_END,
    MARKER_FLAG_START,
    RUNTIME_CBID_BY_NAME,
    Layout,
)

AK = cupti.ActivityKind
_MK = cupti.ActivityMemcpyKind

CUPTI_SUCCESS = 0
CUPTI_ERROR_INVALID_PARAMETER = 1
CUPTI_ERROR_NOT_INITIALIZED = 15
CUPTI_ERROR_INSUFFICIENT_MEMORY = 6

REQUEST_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)),
                              ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
"""void bufferRequested(uint8_t **buffer, size_t *size, size_t *maxNumRecords)"""
COMPLETE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32,
                               ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t, ctypes.c_size_t)
"""void bufferCompleted(CUcontext ctx, uint32_t streamId, uint8_t *buffer, size_t size,
size_t validSize)"""

_COPY_TO_CUPTI = {
    CopyKind.OTHER: int(_MK.UNKNOWN), CopyKind.HTOD: int(_MK.HTOD),
    CopyKind.DTOH: int(_MK.DTOH), CopyKind.DTOD: int(_MK.DTOD), CopyKind.HTOH: int(_MK.HTOH),
    CopyKind.PTOP: int(_MK.PTOP),
}


def _fn_ptr(cb: Any, proto: Any) -> Any:
    """The callback as a bare C function pointer, as libcupti stores it."""
    addr = ctypes.cast(cb, ctypes.c_void_p).value
    if not addr:
        raise ValueError("null callback")
    return proto(addr)


def _corr_u32(c: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
    return np.where(c < 0, 0, c).astype(np.uint32)


class FakeCuptiLib:
    """Stand-in for libcupti's activity API (see module docstring)."""

    def __init__(self, trace: Trace | None = None, *, layout: Layout = DEFAULT,
                 context: int = 0x5A5A0000, stream_id: int = 0) -> None:
        self.layout = layout
        self.context = context
        self.stream_id = stream_id
        self.enabled: set[int] = set()
        self.calls: list[str] = []
        self._request: Any = None
        self._complete: Any = None
        self._pending: list[tuple[int, int, bytes]] = []  # (time key, kind, record bytes)
        self._dropped = 0
        self._keep: dict[str, ctypes.Array[ctypes.c_char]] = {}
        self.buffers_completed = 0
        self._lock = threading.RLock()  # flushes come from the collector's flush thread
        if trace is not None:
            self.add_trace(trace)

    # --- driving the fake ---------------------------------------------------------------

    def name_ptr(self, name: str) -> int:
        """Address of a NUL-terminated copy of ``name`` owned by the fake."""
        buf = self._keep.get(name)
        if buf is None:
            buf = ctypes.create_string_buffer(name.encode())
            self._keep[name] = buf
        return ctypes.addressof(buf)

    def add_trace(self, trace: Trace) -> None:
        """Queue records for the trace's kernels, copies, memsets, API calls and markers."""
        dts = self.layout.dtypes
        s = trace.strings
        k = trace.kernels
        if len(k):
            r = np.zeros(len(k), dtype=dts[int(AK.CONCURRENT_KERNEL)])
            r["kind"] = int(AK.CONCURRENT_KERNEL)
            r["start"], r["end"] = k.start_ns, k.end_ns
            r["completed"] = k.end_ns
            r["device_id"], r["context_id"], r["stream_id"] = k.device, 1, k.stream
            for f in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"):
                r[f] = getattr(k, f)
            r["registers_per_thread"] = np.clip(k.registers, 0, None)
            r["dynamic_shared_memory"] = np.clip(k.shared_mem_bytes, 0, None)
            r["correlation_id"] = _corr_u32(k.correlation)
            r["name"] = self._ptrs(s.names(), k.name_id)
            self._queue(k.start_ns, r)
        c = trace.copies
        if len(c):
            r = np.zeros(len(c), dtype=dts[int(AK.MEMCPY)])
            r["kind"] = int(AK.MEMCPY)
            r["start"], r["end"], r["bytes"] = c.start_ns, c.end_ns, c.bytes
            lut = np.zeros(256, dtype=np.uint8)
            for ck, code in _COPY_TO_CUPTI.items():
                lut[int(ck)] = code
            r["copy_kind"] = lut[c.kind]
            r["src_kind"], r["dst_kind"] = c.src_mem, c.dst_mem  # MemKind == CUPTI codes 0..5
            r["device_id"], r["context_id"], r["stream_id"] = c.device, 1, c.stream
            r["correlation_id"] = _corr_u32(c.correlation)
            self._queue(c.start_ns, r)
        m = trace.memsets
        if len(m):
            r = np.zeros(len(m), dtype=dts[int(AK.MEMSET)])
            r["kind"] = int(AK.MEMSET)
            r["start"], r["end"], r["bytes"] = m.start_ns, m.end_ns, m.bytes
            r["memory_kind"] = m.mem
            r["device_id"], r["context_id"], r["stream_id"] = m.device, 1, m.stream
            r["correlation_id"] = _corr_u32(m.correlation)
            self._queue(m.start_ns, r)
        a = trace.apis
        if len(a):
            r = np.zeros(len(a), dtype=dts[int(AK.RUNTIME)])
            r["kind"] = int(AK.RUNTIME)
            names = s.names()
            cbids = np.array([RUNTIME_CBID_BY_NAME.get(n, 0) for n in names] or [0],
                             dtype=np.uint32)
            r["cbid"] = cbids[np.clip(a.name_id, 0, None)]
            r["start"], r["end"] = a.start_ns, a.end_ns
            r["process_id"], r["thread_id"] = a.pid, a.tid
            r["correlation_id"] = _corr_u32(a.correlation)
            self._queue(a.start_ns, r)
        mk = trace.markers
        if len(mk):
            n = len(mk)
            r = np.zeros(2 * n, dtype=dts[int(AK.MARKER)])
            r["kind"] = int(AK.MARKER)
            ids = np.arange(n, dtype=np.uint32) + 1 + len(self._pending)
            ptrs = self._ptrs(s.names(), mk.name_id)
            r["flags_"][:n], r["flags_"][n:] = MARKER_FLAG_START, MARKER_FLAG_END
            r["timestamp"][:n], r["timestamp"][n:] = mk.start_ns, mk.end_ns
            r["id"][:n], r["id"][n:] = ids, ids
            r["name"][:n] = ptrs
            r["object_kind"] = int(cupti.ActivityObjectKind.THREAD)
            pt = r["object_id"]["pt"]
            pt["thread_id"][:n], pt["thread_id"][n:] = mk.tid, mk.tid
            self._queue(np.concatenate([mk.start_ns, mk.end_ns]), r)

    def add_overhead(self, start_ns: int, end_ns: int, overhead_kind: int) -> None:
        r = np.zeros(1, dtype=self.layout.dtypes[int(AK.OVERHEAD)])
        r["kind"] = int(AK.OVERHEAD)
        r["overhead_kind"], r["start"], r["end"] = overhead_kind, start_ns, end_ns
        self._queue(np.array([start_ns]), r)

    def add_raw(self, record: bytes, time_key: int = 2**62) -> None:
        """Queue bytes verbatim as one record (e.g. a kind the decoder does not know)."""
        with self._lock:
            self._pending.append((time_key, -1, bytes(record)))

    def drop_records(self, n: int) -> None:
        """Report ``n`` dropped records with the next completed buffer."""
        self._dropped += n

    def _ptrs(self, names: list[str], name_id: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
        table = np.zeros(len(names) + 1, dtype=np.int64)
        used = np.unique(name_id[name_id >= 0])
        for i in used.tolist():
            table[i] = self.name_ptr(names[i])
        return table[np.where(name_id >= 0, name_id, len(names))]

    def _queue(self, keys: npt.NDArray[np.int64], recs: npt.NDArray[Any]) -> None:
        kind = int(recs["kind"][0])
        raw = recs.tobytes()
        size = recs.dtype.itemsize
        with self._lock:
            self._pending.extend((int(t), kind, raw[i * size:(i + 1) * size])
                                 for i, t in enumerate(keys.tolist()))

    # --- the libcupti functions cupti_raw calls ----------------------------------------

    def cuptiActivityRegisterCallbacks(self, request: Any, complete: Any) -> int:
        self.calls.append("cuptiActivityRegisterCallbacks")
        if request is None or complete is None:
            return CUPTI_ERROR_INVALID_PARAMETER
        self._request = _fn_ptr(request, REQUEST_FN)
        self._complete = _fn_ptr(complete, COMPLETE_FN)
        return CUPTI_SUCCESS

    def cuptiActivityEnable(self, kind: int) -> int:
        self.calls.append(f"cuptiActivityEnable({int(kind)})")
        self.enabled.add(int(kind))
        return CUPTI_SUCCESS

    def cuptiActivityDisable(self, kind: int) -> int:
        self.calls.append(f"cuptiActivityDisable({int(kind)})")
        self.enabled.discard(int(kind))
        return CUPTI_SUCCESS

    def cuptiActivityGetNumDroppedRecords(self, context: Any, stream_id: int,
                                          dropped: Any) -> int:
        dropped[0] = self._dropped
        self._dropped = 0
        return CUPTI_SUCCESS

    def cuptiGetResultString(self, result: int, out: Any) -> int:
        self._err = ctypes.c_char_p(f"CUPTI_ERROR_{int(result)}".encode())
        out[0] = self._err
        return CUPTI_SUCCESS

    def cuptiActivityFlushAll(self, flag: int) -> int:
        """Deliver every pending record of an enabled kind through the callbacks."""
        self.calls.append(f"cuptiActivityFlushAll({int(flag)})")
        if self._request is None:
            return CUPTI_ERROR_NOT_INITIALIZED
        with self._lock:
            pending = sorted(self._pending, key=lambda p: p[0])
            self._pending = []
        recs = [raw for _, kind, raw in pending if kind < 0 or kind in self.enabled
                or (kind == int(AK.CONCURRENT_KERNEL) and int(AK.KERNEL) in self.enabled)]
        i = 0
        while i < len(recs) or self._dropped:
            buf_p = ctypes.POINTER(ctypes.c_uint8)()
            size = ctypes.c_size_t(0)
            max_records = ctypes.c_size_t(0)
            self._request(ctypes.byref(buf_p), ctypes.byref(size), ctypes.byref(max_records))
            if not buf_p or size.value == 0:
                return CUPTI_ERROR_INSUFFICIENT_MEMORY
            limit = max_records.value or len(recs)
            chunk, used, n = self._fill(recs[i:], size.value, limit)
            if n == 0 and i < len(recs):
                return CUPTI_ERROR_INSUFFICIENT_MEMORY  # a record larger than a buffer
            ctypes.memmove(buf_p, chunk, used)
            i += n
            self._complete(ctypes.c_void_p(self.context), self.stream_id, buf_p, size.value,
                           used)
            self.buffers_completed += 1
            if n == 0:
                break
        return CUPTI_SUCCESS

    @staticmethod
    def _fill(recs: list[bytes], size: int, limit: int) -> tuple[bytes, int, int]:
        used = 0
        n = 0
        for r in recs:
            if n >= limit or used + len(r) > size:
                break
            used += len(r)
            n += 1
        return b"".join(recs[:n]), used, n


def deliver(lib: FakeCuptiLib, traces: Iterable[Trace],
            between: Callable[[], None] | None = None) -> None:
    """Feed traces one after another, flushing after each (``between`` runs after a flush)."""
    for tr in traces:
        lib.add_trace(tr)
        lib.cuptiActivityFlushAll(0)
        if between is not None:
            between()


__all__ = ["COMPLETE_FN", "REQUEST_FN", "FakeCuptiLib", "MemKind", "deliver"]
