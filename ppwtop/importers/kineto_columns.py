"""Column extraction for the Kineto importer: grouped trace events → columnar batches.

Owns the per-category mapping from Kineto/Chrome-trace event dicts (both the modern schema and
the 2021 legacy schema) to :mod:`attribution.model` batches, the µs → ns conversion, and the
name classifiers (copy direction and memory kinds, memset memory kind, API kind).

Every extractor works column by column with list comprehensions over one category's events
(no per-event objects are kept); a category whose events lack an expected key falls back to a
slower tolerant path that drops the malformed events and says how many in the notes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.model import (
    UNKNOWN,
    ApiBatch,
    ApiKind,
    CopyBatch,
    CopyKind,
    KernelBatch,
    MarkerBatch,
    MarkerKind,
    MemKind,
    MemsetBatch,
    StringTable,
)

Event = dict[str, Any]
I64 = npt.NDArray[np.int64]

KERNEL_CATS = ("kernel", "Kernel")
COPY_CATS = ("gpu_memcpy", "Memcpy")
MEMSET_CATS = ("gpu_memset", "Memset")
API_CATS = ("cuda_runtime", "cuda_driver", "Runtime")
HOST_MARKER_CATS = ("user_annotation",)
GPU_MARKER_CATS = ("gpu_user_annotation",)
STEP_CATS = ("cpu_op", "Operator")  # scanned only for ProfilerStep#N
LEGACY_CATS = frozenset({"Kernel", "Memcpy", "Memset", "Runtime", "Operator"})
PROFILER_STEP_PREFIX = "ProfilerStep#"

WANTED_CATS: tuple[str, ...] = (
    KERNEL_CATS + COPY_CATS + MEMSET_CATS + API_CATS + HOST_MARKER_CATS + GPU_MARKER_CATS
    + STEP_CATS + ("cuda_profiler_range",)
)

_NO_DIM = (UNKNOWN, UNKNOWN, UNKNOWN)


# --------------------------------------------------------------------------------------------
# Grouping and time conversion
# --------------------------------------------------------------------------------------------


def group_by_cat(events: Sequence[Any]) -> dict[str, list[Event]]:
    """One pass: the events of every wanted category, in file order.

    Raises TypeError/AttributeError when an element is not an object (the caller reports it).
    """
    groups: dict[str, list[Event]] = {c: [] for c in WANTED_CATS}
    get = groups.get
    for e in events:
        lst = get(e.get("cat"))
        if lst is not None:
            lst.append(e)
    return groups


def us_to_ns(ts_us: Sequence[float | int], base_ns: int) -> I64:
    """Float/int µs → int64 ns, rounded to the nearest ns (not truncated).

    The integer µs part and the fraction are converted separately, so values around 1.7e15 µs
    (epoch µs) keep every bit of resolution the float64 carries.
    """
    t = np.asarray(ts_us, dtype=np.float64)
    whole = np.floor(t)
    frac_ns = np.rint((t - whole) * 1000.0).astype(np.int64)
    return whole.astype(np.int64) * 1000 + frac_ns + np.int64(base_ns)


def dur_to_ns(dur_us: Sequence[float | int]) -> I64:
    d = np.rint(np.asarray(dur_us, dtype=np.float64) * 1000.0).astype(np.int64)
    return np.maximum(d, 0)


def int_column(values: Sequence[Any]) -> I64:
    """Integers from JSON values that may be ints, numeric strings or 'stream 7' strings."""
    try:
        return np.asarray(values, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        return np.fromiter((_to_int(v) for v in values), dtype=np.int64, count=len(values))


_DIGITS = re.compile(r"-?\d+")


def _to_int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if math.isfinite(v) else UNKNOWN
    if isinstance(v, str):
        m = _DIGITS.search(v)
        return int(m.group()) if m else UNKNOWN
    return UNKNOWN


def _dims(values: list[Any]) -> npt.NDArray[np.int64]:
    """[x, y, z] lists → (n, 3) int64; anything else → -1s."""
    try:
        arr = np.asarray(values, dtype=np.int64)
        if arr.ndim == 2 and arr.shape[1] == 3:
            return arr
    except (ValueError, TypeError, OverflowError):
        pass
    fixed = [v if isinstance(v, list) and len(v) == 3 else _NO_DIM for v in values]
    return np.asarray([[_to_int(x) for x in v] for v in fixed], dtype=np.int64).reshape(-1, 3)


# --------------------------------------------------------------------------------------------
# Tolerant wrapper
# --------------------------------------------------------------------------------------------


def _valid(e: Any) -> bool:
    return (
        isinstance(e, dict)
        and isinstance(e.get("ts"), (int, float))
        and isinstance(e.get("dur", 0), (int, float))
        and isinstance(e.get("name", ""), str)
        and isinstance(e.get("args", {}), dict)
    )


def _normalise(e: Event) -> Event:
    if "dur" in e and "args" in e and "name" in e:
        return e
    out = dict(e)
    out.setdefault("dur", 0)
    out.setdefault("args", {})
    out.setdefault("name", "")
    return out


def tolerant(
    fn: Callable[[list[Event], StringTable, int], Any],
    events: list[Event],
    strings: StringTable,
    base_ns: int,
    *,
    what: str,
    notes: list[str],
) -> Any:
    """Run the fast extractor; on malformed events drop them, note it, and retry."""
    try:
        return fn(events, strings, base_ns)
    except (KeyError, TypeError, ValueError, AttributeError):
        good = [_normalise(e) for e in events if _valid(e)]
        dropped = len(events) - len(good)
        if dropped:
            notes.append(f"dropped {dropped} malformed {what} event(s)")
        return fn(good, strings, base_ns)


# --------------------------------------------------------------------------------------------
# Extractors
# --------------------------------------------------------------------------------------------


def kernels(ev: list[Event], strings: StringTable, base_ns: int) -> KernelBatch:
    if not ev:
        return KernelBatch.empty()
    start = us_to_ns([e["ts"] for e in ev], base_ns)
    end = start + dur_to_ns([e["dur"] for e in ev])
    args = [e["args"] for e in ev]
    intern = strings.intern
    grid = _dims([a.get("grid", _NO_DIM) for a in args])
    block = _dims([a.get("block", _NO_DIM) for a in args])
    return KernelBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "device": int_column([a.get("device", UNKNOWN) for a in args]),
        "stream": int_column([a.get("stream", UNKNOWN) for a in args]),
        "correlation": int_column([a.get("correlation", UNKNOWN) for a in args]),
        "name_id": np.asarray([intern(e["name"]) for e in ev], dtype=np.int32),
        "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
        "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
        "registers": int_column([a.get("registers per thread", UNKNOWN) for a in args]),
        "shared_mem_bytes": int_column([a.get("shared memory", UNKNOWN) for a in args]),
    }).sorted_by()


_COPY_NAME = re.compile(r"Memcpy\s+(\w+)(?:\s*\((\w+)\s*->\s*(\w+)\))?")
_COPY_KINDS = {
    "htod": CopyKind.HTOD, "dtoh": CopyKind.DTOH, "dtod": CopyKind.DTOD,
    "htoh": CopyKind.HTOH, "ptop": CopyKind.PTOP,
}
_MEM_KINDS = {
    "pageable": MemKind.PAGEABLE, "pinned": MemKind.PINNED, "device": MemKind.DEVICE,
    "array": MemKind.ARRAY, "managed": MemKind.MANAGED,
}


def copy_kind_of(name: str) -> tuple[CopyKind, MemKind, MemKind]:
    """'Memcpy HtoD (Pageable -> Device)' → (HTOD, PAGEABLE, DEVICE)."""
    m = _COPY_NAME.search(name)
    if not m:
        return CopyKind.OTHER, MemKind.UNKNOWN, MemKind.UNKNOWN
    kind = _COPY_KINDS.get(m.group(1).lower(), CopyKind.OTHER)
    src = _MEM_KINDS.get((m.group(2) or "").lower(), MemKind.UNKNOWN)
    dst = _MEM_KINDS.get((m.group(3) or "").lower(), MemKind.UNKNOWN)
    return kind, src, dst


def memset_mem_of(name: str) -> MemKind:
    """'Memset (Device)' → DEVICE."""
    m = re.search(r"\((\w+)\)", name)
    return _MEM_KINDS.get(m.group(1).lower(), MemKind.UNKNOWN) if m else MemKind.UNKNOWN


def _lookup(names: list[str], classify: Callable[[str], Any]) -> list[Any]:
    cache: dict[str, Any] = {}
    out = []
    for n in names:
        v = cache.get(n)
        if v is None:
            v = cache[n] = classify(n)
        out.append(v)
    return out


def copies(ev: list[Event], strings: StringTable, base_ns: int) -> CopyBatch:
    if not ev:
        return CopyBatch.empty()
    start = us_to_ns([e["ts"] for e in ev], base_ns)
    end = start + dur_to_ns([e["dur"] for e in ev])
    args = [e["args"] for e in ev]
    kinds = np.asarray(_lookup([e["name"] for e in ev], copy_kind_of), dtype=np.uint8)
    kinds = kinds.reshape(-1, 3)
    return CopyBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "device": int_column([a.get("device", UNKNOWN) for a in args]),
        "stream": int_column([a.get("stream", UNKNOWN) for a in args]),
        "correlation": int_column([a.get("correlation", UNKNOWN) for a in args]),
        "kind": kinds[:, 0], "src_mem": kinds[:, 1], "dst_mem": kinds[:, 2],
        "bytes": int_column([a.get("bytes", UNKNOWN) for a in args]),
    }).sorted_by()


def memsets(ev: list[Event], strings: StringTable, base_ns: int) -> MemsetBatch:
    if not ev:
        return MemsetBatch.empty()
    start = us_to_ns([e["ts"] for e in ev], base_ns)
    end = start + dur_to_ns([e["dur"] for e in ev])
    args = [e["args"] for e in ev]
    return MemsetBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "device": int_column([a.get("device", UNKNOWN) for a in args]),
        "stream": int_column([a.get("stream", UNKNOWN) for a in args]),
        "correlation": int_column([a.get("correlation", UNKNOWN) for a in args]),
        "mem": np.asarray(_lookup([e["name"] for e in ev], memset_mem_of), dtype=np.uint8),
        "bytes": int_column([a.get("bytes", UNKNOWN) for a in args]),
    }).sorted_by()


_VERSION_SUFFIX = re.compile(r"_v\d+$")
_LAUNCH = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch",
           "cuGraphLaunch", "cudaLaunchCooperativeKernel", "cuLaunchKernelEx",
           "cuLaunchCooperativeKernel")
_SYNC = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
         "cudaStreamWaitEvent", "cuCtxSynchronize", "cuStreamSynchronize",
         "cuEventSynchronize", "cuStreamWaitEvent")


def api_kind_of(name: str) -> ApiKind:
    """Classify a CUDA runtime/driver call by name (a ``_v2``-style suffix is ignored)."""
    n = _VERSION_SUFFIX.sub("", name)
    if n in _LAUNCH or n.startswith(("cudaLaunch", "cuLaunch")):
        return ApiKind.LAUNCH
    if n in _SYNC:
        return ApiKind.SYNC
    if n.startswith(("cudaMemcpy", "cuMemcpy")):
        return ApiKind.MEMCPY
    if n.startswith(("cudaMemset", "cuMemset")):
        return ApiKind.MEMSET
    if n.startswith(("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree")):
        return ApiKind.ALLOC
    return ApiKind.OTHER


def apis(ev: list[Event], strings: StringTable, base_ns: int) -> ApiBatch:
    if not ev:
        return ApiBatch.empty()
    start = us_to_ns([e["ts"] for e in ev], base_ns)
    end = start + dur_to_ns([e["dur"] for e in ev])
    names = [e["name"] for e in ev]
    intern = strings.intern
    return ApiBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "pid": int_column([e.get("pid", UNKNOWN) for e in ev]),
        "tid": int_column([e.get("tid", UNKNOWN) for e in ev]),
        "correlation": int_column([e["args"].get("correlation", UNKNOWN) for e in ev]),
        "name_id": np.asarray([intern(n) for n in names], dtype=np.int32),
        "kind": np.asarray(_lookup(names, api_kind_of), dtype=np.uint8),
    }).sorted_by()


def markers(ev: list[Event], strings: StringTable, base_ns: int, kind: MarkerKind,
            on_gpu: bool) -> MarkerBatch:
    """Named ranges; a host range named ProfilerStep#N becomes a PROFILER_STEP marker."""
    if not ev:
        return MarkerBatch.empty()
    start = us_to_ns([e["ts"] for e in ev], base_ns)
    end = start + dur_to_ns([e["dur"] for e in ev])
    names = [e["name"] for e in ev]
    intern = strings.intern
    if on_gpu:
        device = int_column([e["args"].get("device", e.get("pid", UNKNOWN)) for e in ev])
        kinds = np.full(len(ev), kind, dtype=np.uint8)
    else:
        device = np.full(len(ev), UNKNOWN, dtype=np.int64)
        step = np.fromiter((n.startswith(PROFILER_STEP_PREFIX) for n in names), dtype=bool,
                           count=len(names))
        kinds = np.where(step, np.uint8(MarkerKind.PROFILER_STEP), np.uint8(kind))
    return MarkerBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "device": device,
        "tid": int_column([e.get("tid", UNKNOWN) for e in ev]),
        "name_id": np.asarray([intern(n) for n in names], dtype=np.int32),
        "kind": kinds,
    }).sorted_by()


def step_ops(ev: list[Event]) -> list[Event]:
    """The cpu_op/Operator events that are ProfilerStep#N ranges."""
    p = PROFILER_STEP_PREFIX
    return [e for e in ev if isinstance(e.get("name"), str) and e["name"].startswith(p)]
