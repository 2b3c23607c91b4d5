"""The CUPTI activity raw-buffer path, run inside the target process.

This module owns the ctypes registration of ``cuptiActivityRegisterCallbacks`` against a lib
object (the real ``libcupti.so`` or :class:`ppwtop.fakes.cupti_lib.FakeCuptiLib`), the buffer
pool handed to CUPTI, the copy of each completed buffer's valid bytes (one
``ctypes.string_at``), the kernel/marker name cache (``string_at`` only for pointer values
not seen before) and the periodic ``cuptiActivityFlushAll``.

GIL work per completed buffer: one memcpy of ``validSize`` bytes, one vectorised walk over
the record kinds to find name pointers (see :func:`cupti_layout.walk`) and one ``string_at``
per *new* name.  Decoding into batches happens in the ppwtop process
(:class:`cupti_decode.Decoder`).  The sink must not block: it returns False when it cannot
take the buffer (slow socket), and the whole buffer is dropped and counted.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from cupti import cupti

from ppwtop.collectors import cupti_layout
from ppwtop.collectors.cupti_layout import DEFAULT, Layout

AK = cupti.ActivityKind

ENABLED_KINDS: tuple[int, ...] = tuple(int(k) for k in (
    AK.CONCURRENT_KERNEL, AK.MEMCPY, AK.MEMSET, AK.RUNTIME, AK.SYNCHRONIZATION, AK.MARKER,
    AK.OVERHEAD))
"""Activity kinds the agent enables."""

FLUSH_FORCED = int(cupti.ActivityFlag.FLUSH_FORCED)
BUFFER_SIZE = 8 << 20  # bytes per activity buffer (CUPTI's samples use 8-32 MiB)
BUFFER_ALIGN = 8  # CUPTI requires 8-byte aligned buffers

REQUEST_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)),
                              ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
COMPLETE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32,
                               ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t, ctypes.c_size_t)


class CuptiError(RuntimeError):
    """A CUPTI call returned an error code."""


@dataclasses.dataclass(frozen=True, slots=True)
class RawBuffer:
    """One completed activity buffer as shipped to the ppwtop process.

    ``names`` holds only the pointer -> name pairs first seen in this buffer; the receiver's
    :class:`cupti_decode.Decoder` keeps them (``add_names``).
    """

    data: bytes
    context: int
    stream_id: int
    dropped_records: int
    names: dict[int, str]
    seq: int


@dataclasses.dataclass(slots=True)
class RawStats:
    buffers: int = 0
    bytes: int = 0
    dropped_records: int = 0  # cuptiActivityGetNumDroppedRecords totals
    dropped_buffers: int = 0  # the sink refused them
    names_resolved: int = 0
    callback_errors: int = 0


def configure_prototypes(lib: Any) -> None:
    """Set argtypes/restype on a real ``ctypes.CDLL`` (a fake's methods are left alone)."""
    if not isinstance(lib, ctypes.CDLL):
        return
    i32, u32 = ctypes.c_int, ctypes.c_uint32
    protos: dict[str, list[Any]] = {
        "cuptiActivityRegisterCallbacks": [REQUEST_FN, COMPLETE_FN],
        "cuptiActivityEnable": [i32],
        "cuptiActivityDisable": [i32],
        "cuptiActivityFlushAll": [u32],
        "cuptiActivityGetNumDroppedRecords": [ctypes.c_void_p, u32,
                                              ctypes.POINTER(ctypes.c_size_t)],
        "cuptiGetResultString": [i32, ctypes.POINTER(ctypes.c_char_p)],
    }
    for name, args in protos.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = i32


def load_libcupti() -> ctypes.CDLL:
    """The libcupti cupti-python uses (its wheel's copy, else the loader's search path)."""
    import pathlib

    import cupti as cupti_pkg

    site = pathlib.Path(cupti_pkg.__file__).resolve().parent.parent
    for cand in sorted(site.glob("nvidia/cu*/lib/libcupti.so*"), reverse=True):
        return ctypes.CDLL(str(cand))
    return ctypes.CDLL("libcupti.so")


class NameCache:
    """Pointer -> name, filled by ``string_at`` only for pointers not seen before.

    :meth:`scan` first tries a walk-free check: every 8-byte-aligned word whose low half is a
    named kind (CONCURRENT_KERNEL, KERNEL, MARKER) is treated as a possible record start and
    the word at that kind's ``name`` offset as a possible pointer.  Every real record is among
    these candidates, so if all candidate pointers are already known (the steady state) the
    buffer has no new names and no walk is needed.  Otherwise (a new name, or a field that
    happens to look like a kind) the buffer is walked properly; ``string_at`` is only ever
    called on pointers taken from real record boundaries.
    """

    def __init__(self, layout: Layout = DEFAULT) -> None:
        self.known: dict[int, str] = {}
        self.layout = layout
        self._sorted = np.empty(0, dtype=np.int64)
        self._name_offsets = [
            (k, int(dt.fields["name"][1])) for k, dt in layout.dtypes.items()
            if k in cupti_layout.NAMED_KINDS and dt.fields and "name" in dt.fields]
        kinds = [k for k, _ in self._name_offsets] or [0]
        self._lo, self._hi = min(kinds), max(kinds)
        self.fast_hits = 0
        self.walks = 0

    def forget(self, ptrs: Any) -> None:
        for p in ptrs:
            self.known.pop(p, None)
        self._sorted = np.array(sorted(self.known), dtype=np.int64)

    def _all_known(self, data: bytes) -> bool:
        n8 = len(data) >> 3
        if n8 == 0:
            return True
        words = np.frombuffer(data, dtype="<i8", count=n8)
        low = words.view("<u4")[0::2]  # the kind-sized word at each 8-aligned offset
        # one pass for all named kinds: candidates in [lo, hi], then split by kind
        cand = np.flatnonzero((low - np.uint32(self._lo)) <= np.uint32(self._hi - self._lo))
        cand_kinds = low[cand]
        for kind, name_off in self._name_offsets:
            at = cand[cand_kinds == kind] + (name_off >> 3)
            ptrs = words[at[at < n8]]
            ptrs = ptrs[ptrs != 0]
            if len(ptrs) == 0:
                continue
            if len(self._sorted) == 0:
                return False
            pos = np.searchsorted(self._sorted, ptrs).clip(0, len(self._sorted) - 1)
            if not bool(np.all(self._sorted[pos] == ptrs)):
                return False
        return True

    def scan(self, data: bytes) -> dict[int, str]:
        """Names first seen in this buffer (pointer -> name)."""
        if self._all_known(data):
            self.fast_hits += 1
            return {}
        self.walks += 1
        runs = cupti_layout.walk(data, None, self.layout)
        return self.new_names(cupti_layout.name_pointers(data, runs, self.layout))

    def new_names(self, ptrs: np.ndarray[Any, Any]) -> dict[int, str]:
        out: dict[int, str] = {}
        known = self.known
        for p in ptrs.tolist():
            if p not in known:
                name = ctypes.string_at(p).decode("utf-8", "replace")
                known[p] = name
                out[p] = name
        if out:
            self._sorted = np.array(sorted(known), dtype=np.int64)
        return out


class RawCollector:
    """Registers the buffer callbacks with ``lib`` and ships completed buffers to ``sink``."""

    def __init__(self, lib: Any, sink: Callable[[RawBuffer], bool], *,
                 buffer_size: int = BUFFER_SIZE, layout: Layout = DEFAULT,
                 kinds: tuple[int, ...] = ENABLED_KINDS, resolve_names: bool = True) -> None:
        self.lib = lib
        self.sink = sink
        self.buffer_size = int(buffer_size)
        self.layout = layout
        self.kinds = kinds
        self.resolve_names = resolve_names
        self.stats = RawStats()
        self.names = NameCache(layout)
        self._live: dict[int, ctypes.Array[ctypes.c_uint8]] = {}  # address -> buffer
        self._free: list[ctypes.Array[ctypes.c_uint8]] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        # keep the thunks alive as long as libcupti may call them
        self._request_cb = REQUEST_FN(self._on_request)
        self._complete_cb = COMPLETE_FN(self._on_complete)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self, flush_period_s: float | None = 0.1) -> None:
        configure_prototypes(self.lib)
        self._check(self.lib.cuptiActivityRegisterCallbacks(self._request_cb,
                                                            self._complete_cb),
                    "cuptiActivityRegisterCallbacks")
        for kind in self.kinds:
            self._check(self.lib.cuptiActivityEnable(kind), f"cuptiActivityEnable({kind})")
        if flush_period_s:
            self._flusher = threading.Thread(target=self._flush_loop, args=(flush_period_s,),
                                             name="ppwtop-cupti-flush", daemon=True)
            self._flusher.start()

    def flush(self, forced: bool = False) -> None:
        self._check(self.lib.cuptiActivityFlushAll(FLUSH_FORCED if forced else 0),
                    "cuptiActivityFlushAll")

    def stop(self) -> None:
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None
        self.flush(forced=True)
        for kind in self.kinds:
            self.lib.cuptiActivityDisable(kind)

    def _flush_loop(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            try:
                self.flush()
            except CuptiError:
                self.stats.callback_errors += 1

    def _check(self, rc: int, what: str) -> None:
        if rc:
            text = ctypes.c_char_p()
            msg = f"error {rc}"
            if hasattr(self.lib, "cuptiGetResultString") and self.lib.cuptiGetResultString(
                    rc, ctypes.pointer(text)) == 0 and text.value:
                msg = text.value.decode(errors="replace")
            raise CuptiError(f"{what}: {msg}")

    # --- the callbacks libcupti calls (on its own threads) ---------------------------------

    def _on_request(self, buf_pp: Any, size_p: Any, max_records_p: Any) -> None:
        try:
            with self._lock:
                buf = self._free.pop() if self._free else (ctypes.c_uint8 * self.buffer_size)()
                addr = ctypes.addressof(buf)
                self._live[addr] = buf
            if addr % BUFFER_ALIGN:  # ctypes arrays come from malloc: 16-aligned in practice
                raise ValueError("unaligned activity buffer")
            buf_pp[0] = ctypes.cast(buf, ctypes.POINTER(ctypes.c_uint8))
            size_p[0] = self.buffer_size
            max_records_p[0] = 0  # fill the buffer
        except Exception:  # never raise into libcupti
            self.stats.callback_errors += 1
            size_p[0] = 0

    def _on_complete(self, context: int | None, stream_id: int, buf_p: Any, size: int,
                     valid_size: int) -> None:
        try:
            addr = ctypes.cast(buf_p, ctypes.c_void_p).value or 0
            data = ctypes.string_at(addr, valid_size) if valid_size else b""
            with self._lock:
                buf = self._live.pop(addr, None)
                if buf is not None:
                    self._free.append(buf)
            dropped = ctypes.c_size_t(0)
            self.lib.cuptiActivityGetNumDroppedRecords(context, stream_id,
                                                       ctypes.pointer(dropped))
            names: dict[int, str] = {}
            if self.resolve_names and data:
                names = self.names.scan(data)
                self.stats.names_resolved += len(names)
            st = self.stats
            st.buffers += 1
            st.bytes += valid_size
            st.dropped_records += int(dropped.value)
            self._seq += 1
            raw = RawBuffer(data, int(context or 0), int(stream_id), int(dropped.value),
                            names, self._seq)
            if not self.sink(raw):
                st.dropped_buffers += 1
                self.names.forget(names)  # resend these names with a later buffer
        except Exception:  # never raise into libcupti
            self.stats.callback_errors += 1
