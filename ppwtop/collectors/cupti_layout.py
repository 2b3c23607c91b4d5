"""Where the records are in a raw CUPTI activity buffer, and what their codes mean.

Owns the record layouts (activity kind -> cupti-python numpy record dtype, and the struct sizes
of kinds that are stepped over), the walk over a buffer's record boundaries into runs of
same-kind records, gathering those runs as structured arrays, the name-pointer scan the agent
uses, and the mapping of CUPTI enum codes (copy kinds, memory kinds, API callback ids) onto
:mod:`attribution.model`'s enums.  :mod:`ppwtop.collectors.cupti_decode` turns gathered
records into batches.

Layout assumptions (see docs/collectors_cupti.md):

* a buffer is records packed back to back, each starting with a little-endian ``int32`` kind
  (``CUpti_ActivityKind``) and occupying ``sizeof`` of that kind's struct for the CUPTI version
  in use;
* every activity struct is declared ``packed, aligned(8)``, so ``sizeof`` is a multiple of 8
  and the next record starts right after the previous one (the walker still rounds the stride
  up to 8, a no-op for every dtype in :data:`DEFAULT_LAYOUTS`);
* which struct version a kind uses depends on the CUPTI library version; the default table
  takes the newest version cupti-python ships.  Pass another table for other versions.

A kind the table does not decode but whose size is known is skipped and counted; a kind whose
size is unknown ends the walk of that buffer (the remaining bytes are counted as undecodable),
because the record boundary after it cannot be found.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from cupti import cupti

from attribution.model import CopyKind, MemKind

AK = cupti.ActivityKind

NameResolver = Callable[[int], str | None] | Mapping[int, str]
"""Kernel/marker name lookup by the ``const char*`` value stored in the record."""

MARKER_FLAG_INSTANTANEOUS = 1  # CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS
MARKER_FLAG_START = 2  # CUPTI_ACTIVITY_FLAG_MARKER_START
MARKER_FLAG_END = 4  # CUPTI_ACTIVITY_FLAG_MARKER_END (absent from cupti-python's enum)

DEFAULT_LAYOUTS: dict[int, np.dtype[Any]] = {
    int(AK.KERNEL): cupti.activity_kernel13_dtype,
    int(AK.CONCURRENT_KERNEL): cupti.activity_kernel13_dtype,
    int(AK.MEMCPY): cupti.activity_memcpy7_dtype,
    int(AK.MEMSET): cupti.activity_memset5_dtype,
    int(AK.RUNTIME): cupti.activity_api_dtype,
    int(AK.DRIVER): cupti.activity_api_dtype,
    int(AK.SYNCHRONIZATION): cupti.activity_synchronization2_dtype,
    int(AK.MARKER): cupti.activity_marker2_dtype,
    int(AK.OVERHEAD): cupti.activity_overhead3_dtype,
}
"""Kinds this module decodes, with the struct each is laid out as (newest cupti-python has)."""

_SKIP_DTYPES: dict[str, str] = {
    "DEVICE": "activity_device6_dtype",
    "CONTEXT": "activity_context4_dtype",
    "NAME": "activity_name_dtype",
    "MARKER_DATA": "activity_marker_data2_dtype",
    "CDP_KERNEL": "activity_cdp_kernel_dtype",
    "PREEMPTION": "activity_preemption_dtype",
    "ENVIRONMENT": "activity_environment_dtype",
    "MEMCPY2": "activity_memcpy_pto_p4_dtype",
    "UNIFIED_MEMORY_COUNTER": "activity_unified_memory_counter3_dtype",
    "FUNCTION": "activity_function_dtype",
    "MODULE": "activity_module_dtype",
    "DEVICE_ATTRIBUTE": "activity_device_attribute_dtype",
    "OPENACC_DATA": "activity_open_acc_data_dtype",
    "OPENACC_LAUNCH": "activity_open_acc_launch_dtype",
    "OPENACC_OTHER": "activity_open_acc_other_dtype",
    "CUDA_EVENT": "activity_cuda_event2_dtype",
    "STREAM": "activity_stream_dtype",
    "EXTERNAL_CORRELATION": "activity_external_correlation_dtype",
    "MEMORY2": "activity_memory4_dtype",
    "MEMORY_POOL": "activity_memory_pool3_dtype",
    "OPENMP": "activity_open_mp_dtype",
    "INTERNAL_LAUNCH_API": "activity_api_dtype",
    "GRAPH_TRACE": "activity_graph_trace2_dtype",
    "JIT": "activity_jit2_dtype",
    "DEVICE_GRAPH_TRACE": "activity_device_graph_trace_dtype",
    "MEM_DECOMPRESS": "activity_mem_decompress_dtype",
    "ROTATION": "activity_confidential_compute_rotation_dtype",
    "GRAPH_HOST_NODE": "activity_graph_host_node_dtype",
    "COMPUTE_ENGINE_CTX_SWITCH": "activity_compute_engine_ctx_switch_dtype",
    "HOST_LAUNCH": "activity_host_launch_dtype",
    "GREEN_CONTEXT": "activity_green_context3_dtype",
}


def _skip_sizes() -> dict[int, int]:
    out: dict[int, int] = {}
    for kind_name, dtype_name in _SKIP_DTYPES.items():
        kind = getattr(AK, kind_name, None)
        dtype = getattr(cupti, dtype_name, None)
        if kind is not None and dtype is not None:
            out[int(kind)] = int(dtype.itemsize)
    return out


SKIP_SIZES: dict[int, int] = _skip_sizes()
"""Kinds that are not decoded but can be stepped over (their struct size is known)."""

MAX_KIND = int(AK.COUNT)


def _stride(itemsize: int) -> int:
    return (itemsize + 7) & ~7


# --------------------------------------------------------------------------------------------
# Enum mappings (built from cupti-python's own enums, so a renumbering there shows up here)
# --------------------------------------------------------------------------------------------


def _lut(pairs: Mapping[int, int], size: int, default: int) -> npt.NDArray[np.uint8]:
    lut = np.full(size, default, dtype=np.uint8)
    for k, v in pairs.items():
        lut[k] = v
    return lut


_MK = cupti.ActivityMemcpyKind
COPY_KIND_LUT = _lut({
    int(_MK.HTOD): CopyKind.HTOD, int(_MK.DTOH): CopyKind.DTOH,
    int(_MK.HTOA): CopyKind.HTOD, int(_MK.ATOH): CopyKind.DTOH,
    int(_MK.ATOA): CopyKind.DTOD, int(_MK.ATOD): CopyKind.DTOD, int(_MK.DTOA): CopyKind.DTOD,
    int(_MK.DTOD): CopyKind.DTOD, int(_MK.HTOH): CopyKind.HTOH, int(_MK.PTOP): CopyKind.PTOP,
}, 256, CopyKind.OTHER)
"""CUPTI_ACTIVITY_MEMCPY_KIND_* -> CopyKind (arrays are device memory)."""

_MEM = cupti.ActivityMemoryKind
MEM_KIND_LUT = _lut({
    int(_MEM.PAGEABLE): MemKind.PAGEABLE, int(_MEM.PINNED): MemKind.PINNED,
    int(_MEM.DEVICE): MemKind.DEVICE, int(_MEM.ARRAY): MemKind.ARRAY,
    int(_MEM.MANAGED): MemKind.MANAGED, int(_MEM.DEVICE_STATIC): MemKind.DEVICE,
    int(_MEM.MANAGED_STATIC): MemKind.MANAGED,
}, 65536, MemKind.UNKNOWN)
"""CUPTI_ACTIVITY_MEMORY_KIND_* -> MemKind (static variants folded into their base kind)."""

_SUFFIX = re.compile(r"_v\d+$")


def api_name(cbid_name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (``_ptsz``/``_ptds`` are kept)."""
    return _SUFFIX.sub("", cbid_name)


def _cbid_names(enum_cls: Any) -> dict[int, str]:
    out: dict[int, str] = {}
    for m in enum_cls:
        if m.name.startswith(("INVALID", "SIZE", "FORCE_INT")):
            continue
        out.setdefault(int(m.value), api_name(m.name))
    return out


RUNTIME_CBID_NAMES: dict[int, str] = _cbid_names(cupti.RuntimeApiTraceCbid)
DRIVER_CBID_NAMES: dict[int, str] = _cbid_names(cupti.DriverApiTraceCbid)
RUNTIME_CBID_BY_NAME: dict[str, int] = {v: k for k, v in sorted(RUNTIME_CBID_NAMES.items(),
                                                                  reverse=True)}
"""Lowest cbid for each runtime API name (used by the fake to encode names)."""


# --------------------------------------------------------------------------------------------
# The walk
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """Kind -> decoded dtype, and kind -> stride for every kind that can be stepped over."""

    dtypes: Mapping[int, np.dtype[Any]]
    strides: npt.NDArray[np.int64]  # indexed by kind, 0 = unknown size

    @classmethod
    def build(cls, dtypes: Mapping[int, np.dtype[Any]] | None = None,
              skip_sizes: Mapping[int, int] | None = None) -> Layout:
        dts = dict(DEFAULT_LAYOUTS if dtypes is None else dtypes)
        strides = np.zeros(MAX_KIND, dtype=np.int64)
        for k, size in (SKIP_SIZES if skip_sizes is None else skip_sizes).items():
            strides[k] = _stride(size)
        for k, dt in dts.items():
            strides[k] = _stride(dt.itemsize)
        return cls(dts, strides)


DEFAULT = Layout.build()


@dataclasses.dataclass(slots=True)
class Runs:
    """Maximal runs of same-kind records: ``kind``, byte ``offset``, ``count``."""

    kind: list[int]
    offset: list[int]
    count: list[int]
    end_offset: int  # where the walk stopped (== valid size unless an unknown kind was met)
    unknown_kind: int | None  # the kind value that stopped the walk, if any
    _arrays: tuple[npt.NDArray[np.int64], ...] | None = None

    def arrays(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                              npt.NDArray[np.int64]]:
        """(kind, offset, count) as int64 arrays (converted once)."""
        if self._arrays is None:
            self._arrays = (np.asarray(self.kind, dtype=np.int64),
                            np.asarray(self.offset, dtype=np.int64),
                            np.asarray(self.count, dtype=np.int64))
        k, o, c = self._arrays
        return k, o, c


def walk(buf: bytes | memoryview | npt.NDArray[np.uint8], valid_size: int | None = None,
         layout: Layout = DEFAULT) -> Runs:
    """Find the runs of same-kind records in a buffer.

    Records are stepped over in plain Python (reading one ``int32`` kind each) for the first
    8 of a run; a longer run is then extended by reading the kinds at the next 1024, 2048, ...
    candidate boundaries at once through a strided numpy view.  A run of n records costs
    O(n) numpy work plus O(log n) Python steps; a buffer whose kind changes at every record
    costs one short Python step per record.
    """
    raw = np.frombuffer(buf, dtype=np.uint8)
    n = len(raw) if valid_size is None else min(int(valid_size), len(raw))
    nwords = n >> 2
    words = raw[: nwords * 4].view("<i4")
    kinds_at = words.data.cast("B").cast("i") if nwords else memoryview(b"")
    steps = (layout.strides >> 2).tolist()
    out_kind: list[int] = []
    out_off: list[int] = []
    out_count: list[int] = []
    unknown: int | None = None
    pos = 0  # in words
    while pos < nwords:
        kind = kinds_at[pos]
        step = steps[kind] if 0 <= kind < MAX_KIND else 0
        if step == 0:
            unknown = kind
            break
        if pos + step > nwords:  # a record cut by valid_size
            break
        start = pos
        count = 0
        while True:
            count += 1
            pos += step
            if pos + step > nwords or kinds_at[pos] != kind:
                break
            if count == 8:  # a long run: extend it with numpy (one call ~ 10 Python steps)
                probe = 1024
                while True:
                    max_more = (nwords - pos) // step
                    if max_more == 0:
                        break
                    m = min(probe, max_more)
                    ks = words[pos: pos + m * step: step]
                    bad = np.flatnonzero(ks != kind)
                    if len(bad):
                        count += int(bad[0])
                        pos += int(bad[0]) * step
                        break
                    count += m
                    pos += m * step
                    probe *= 2
                break
        out_kind.append(kind)
        out_off.append(start << 2)
        out_count.append(count)
    return Runs(out_kind, out_off, out_count, pos << 2, unknown)


def record_offsets(runs: Runs, kind: int, layout: Layout = DEFAULT
                   ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(run offsets, run counts, every record's byte offset) for one kind."""
    k, o, c = runs.arrays()
    sel = k == kind
    offs = o[sel]
    counts = c[sel]
    total = int(counts.sum())
    first = np.cumsum(counts) - counts
    within = np.arange(total, dtype=np.int64) - np.repeat(first, counts)
    rec = np.repeat(offs, counts) + within * layout.strides[kind]
    return offs, counts, rec


_LONG_RUN = 32


def gather(buf: bytes | memoryview | npt.NDArray[np.uint8], runs: Runs, kinds: set[int],
           layout: Layout = DEFAULT) -> dict[int, npt.NDArray[Any]]:
    """Structured arrays of every record of the given kinds, in buffer order.

    A buffer that is one run is viewed in place (no copy); otherwise long runs are copied as
    8-byte words slice by slice and short runs with one fancy index.
    """
    raw = np.frombuffer(buf, dtype=np.uint8)
    out: dict[int, npt.NDArray[Any]] = {}
    present = set(runs.kind)
    for kind in kinds & present:
        dt = layout.dtypes.get(kind)
        if dt is None:
            continue
        stride = int(layout.strides[kind])
        offs, counts, rec = record_offsets(runs, kind, layout)
        if len(offs) == 1 and stride == dt.itemsize:
            out[kind] = np.frombuffer(raw, dtype=dt, count=int(counts[0]), offset=int(offs[0]))
            continue
        total = len(rec)
        iw = dt.itemsize // 8
        res = np.empty(total, dtype=dt)
        res_w = res.view(np.uint8).reshape(total, dt.itemsize).view("<u8")
        words = raw[: len(raw) - len(raw) % 8].view("<u8")
        sw = stride // 8
        first = np.cumsum(counts) - counts
        long_runs = np.flatnonzero(counts >= _LONG_RUN)
        for r in long_runs.tolist():
            o, c, f = int(offs[r]) // 8, int(counts[r]), int(first[r])
            res_w[f: f + c] = words[o: o + c * sw].reshape(c, sw)[:, :iw]
        if len(long_runs) < len(counts):
            short = np.repeat(counts < _LONG_RUN, counts)
            idx = (rec[short] // 8)[:, None] + np.arange(iw)
            res_w[short] = words[idx]
        out[kind] = res
    return out


def name_pointers(buf: bytes | memoryview | npt.NDArray[np.uint8], runs: Runs,
                  layout: Layout = DEFAULT) -> npt.NDArray[np.int64]:
    """Distinct non-null ``name`` pointers of kernel and marker records in a buffer.

    Reads only the 8-byte name field of each such record (no structured copy)."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    words = raw[: len(raw) - len(raw) % 8].view("<i8")
    ptrs: list[npt.NDArray[np.int64]] = []
    for kind in _NAMED_KINDS & set(runs.kind):
        dt = layout.dtypes.get(kind)
        fields = dt.fields if dt is not None else None
        if fields is None or "name" not in fields:
            continue
        name_off = int(fields["name"][1])
        _, _, rec = record_offsets(runs, kind, layout)
        ptrs.append(words[(rec + name_off) // 8])
    if not ptrs:
        return np.empty(0, dtype=np.int64)
    u: npt.NDArray[np.int64] = np.unique(np.concatenate(ptrs))
    nonzero: npt.NDArray[np.int64] = u[u != 0]
    return nonzero


_KERNEL_KINDS = {int(AK.KERNEL), int(AK.CONCURRENT_KERNEL)}
NAMED_KINDS = frozenset(_KERNEL_KINDS | {int(AK.MARKER)})
_NAMED_KINDS = NAMED_KINDS
_API_KINDS = {int(AK.RUNTIME), int(AK.DRIVER)}
