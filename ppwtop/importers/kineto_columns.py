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
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.api_kinds import api_kind_of
from attribution.columns import UNKNOWN
from attribution.model import (
    ApiBatch,
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


def us_to_ns(ts_us: Sequence[float | int] | npt.NDArray[np.float64], base_ns: int) -> I64:
    """Float/int µs → int64 ns, rounded to the nearest ns (not truncated).

    The integer µs part and the fraction are converted separately, so values around 1.7e15 µs
    (epoch µs) keep every bit of resolution the float64 carries.
    """
    t = np.asarray(ts_us, dtype=np.float64)
    whole = np.floor(t)
    frac_ns = np.rint((t - whole) * 1000.0).astype(np.int64)
    return whole.astype(np.int64) * 1000 + frac_ns + np.int64(base_ns)


def dur_to_ns(dur_us: Sequence[float | int] | npt.NDArray[np.float64], *,
              clamp: bool = True) -> I64:
    """Durations in ns; a negative one is 0 unless ``clamp`` is False (GPU items keep it,
    so the importer can count and say them: ``trace_from_document``)."""
    d = np.rint(np.asarray(dur_us, dtype=np.float64) * 1000.0).astype(np.int64)
    return np.maximum(d, 0) if clamp else d


def int_column(values: Sequence[Any]) -> I64:
    """Integers from JSON values that may be ints, numeric strings or 'stream 7' strings
    (anything else reads as unknown, -1).  ValueError when one is beyond :data:`ID_MAX`."""
    try:
        arr = np.asarray(values, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        arr = np.fromiter((_to_int(v) for v in values), dtype=np.int64, count=len(values))
    if not _in_range(arr):
        raise ValueError("an id beyond ID_MAX")
    return arr


ID_MAX = 2**53
"""The bound on |value| of an id, size or dimension: float64 (the extraction matrix) holds
every integer below it exactly.  An event with a value beyond it (a device of 2**64) is
malformed: :func:`tolerant` drops it and says so, as for a ts that would wrap, instead of
the value wrapping in the int64 cast."""


def _in_range(arr: npt.NDArray[Any]) -> bool:
    return bool(((arr > -ID_MAX) & (arr < ID_MAX)).all())


_DIGITS = re.compile(r"-?\d+")


def _to_int(v: Any) -> int:
    """The integer a JSON value denotes: -1 when it is none, ``ID_MAX`` when it is beyond."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        v = int(v) if math.isfinite(v) else UNKNOWN
    elif isinstance(v, str):
        m = _DIGITS.search(v)
        v = int(m.group()) if m else UNKNOWN
    if not isinstance(v, int):
        return UNKNOWN
    return v if -ID_MAX < v < ID_MAX else ID_MAX


def _dims(values: list[Any]) -> npt.NDArray[np.int64]:
    """[x, y, z] lists → (n, 3) int64; anything else → -1s.  ValueError beyond ID_MAX."""
    try:
        arr = np.asarray(values, dtype=np.int64)
        if not (arr.ndim == 2 and arr.shape[1] == 3):
            raise ValueError("not [x, y, z]")
    except (ValueError, TypeError, OverflowError):
        fixed = [_dim(v) for v in values]
        arr = np.asarray([[_to_int(x) for x in v] for v in fixed], dtype=np.int64).reshape(-1, 3)
    if not _in_range(arr):
        raise ValueError("a dimension beyond ID_MAX")
    return arr


def _dim(v: Any) -> Any:
    return v if isinstance(v, list) and len(v) == 3 else _NO_DIM


_TOP_ID_KEYS = ("pid", "tid")
_ARG_ID_KEYS = ("device", "stream", "correlation", "registers per thread", "shared memory",
                "bytes")
_ARG_DIM_KEYS = ("grid", "block")


def _ids_in_range(e: Event, args: dict[str, Any]) -> bool:
    """No id, size or dimension an extractor reads is beyond ID_MAX."""
    vals = [e.get(k) for k in _TOP_ID_KEYS] + [args.get(k) for k in _ARG_ID_KEYS]
    for k in _ARG_DIM_KEYS:
        vals.extend(_dim(args.get(k)))
    return all(_to_int(v) != ID_MAX for v in vals)


# --------------------------------------------------------------------------------------------
# Tolerant wrapper
# --------------------------------------------------------------------------------------------


TIME_MAX_US = 4e15
"""The largest |ts| and |dur| (µs) an event may carry: 4e15 µs after the epoch is the year
2096, and int64 ns hold 9.2e15 µs.  An event beyond it is malformed (it would wrap)."""


def _valid(e: Any) -> bool:
    if not isinstance(e, dict):
        return False
    ts, dur = e.get("ts"), e.get("dur", 0)
    return (
        isinstance(ts, (int, float)) and abs(ts) < TIME_MAX_US
        and isinstance(dur, (int, float)) and abs(dur) < TIME_MAX_US
        and isinstance(e.get("name", ""), str)
        and isinstance(e.get("args", {}), dict)
        and _ids_in_range(e, e.get("args", {}))
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


def extract(ev: list[Event], top: tuple[str, ...] = (), arg_keys: tuple[str, ...] = (),
            dims: tuple[str, ...] = ()) -> tuple[npt.NDArray[np.float64], list[str]]:
    """One pass over the events: an (n, w) float64 matrix and the names.

    Columns: ts, dur, then ``top`` keys of the event, then ``arg_keys`` of ``args``, then the
    three components of every ``dims`` key of ``args`` ([x, y, z]).  Every id, size and
    dimension is a JSON number below :data:`ID_MAX`, so float64 holds it exactly.  Each event
    dict is touched once (the dicts are scattered in memory: one pass per column would be several
    cache misses per event per column).  When a key is missing or a value is not a number the
    slow per-column path fills the gap with -1 (a missing ``ts`` raises KeyError; a value
    beyond ``ID_MAX`` raises ValueError).
    """
    n = len(ev)
    width = 2 + len(top) + len(arg_keys) + 3 * len(dims)
    flat: list[Any] = []
    names: list[str] = []
    ext = flat.extend
    app = names.append
    g_top = itemgetter("ts", "dur", *top)
    g_arg = itemgetter(*arg_keys, *dims) if arg_keys or dims else None
    n_keys = len(arg_keys)
    try:
        if g_arg is None:
            for e in ev:
                ext(g_top(e))
                app(e["name"])
        elif not dims:
            for e in ev:
                ext(g_top(e))
                v = g_arg(e["args"])
                ext(v if n_keys > 1 else (v,))
                app(e["name"])
        else:
            for e in ev:
                ext(g_top(e))
                v = g_arg(e["args"])
                ext(v[:n_keys])
                for d in v[n_keys:]:
                    ext(d)
                app(e["name"])
        arr = np.asarray(flat, dtype=np.float64)
        if arr.size != n * width or np.isnan(arr).any():  # ragged, or a JSON null
            raise ValueError("ragged")
        m = arr.reshape(n, width)
        if not _in_range(m[:, 2:]):  # an id past ID_MAX: the slow path raises ValueError
            raise ValueError("out of range")
    except (KeyError, TypeError, ValueError, OverflowError, IndexError):
        m, names = _extract_slow(ev, top, arg_keys, dims), [e["name"] for e in ev]
    if not set(map(type, names)) <= {str}:  # a null or numeric name: the caller drops it
        raise TypeError("an event name that is not a string")
    if not (np.abs(m[:, :2]) < TIME_MAX_US).all():  # would wrap in int64 ns
        raise ValueError("ts or dur out of range")
    return m, names


def _extract_slow(ev: list[Event], top: tuple[str, ...], arg_keys: tuple[str, ...],
                  dims: tuple[str, ...]) -> npt.NDArray[np.float64]:
    out = np.empty((len(ev), 2 + len(top) + len(arg_keys) + 3 * len(dims)), dtype=np.float64)
    out[:, 0] = np.asarray([e["ts"] for e in ev], dtype=np.float64)
    out[:, 1] = np.asarray([e.get("dur", 0) for e in ev], dtype=np.float64)
    if not np.isfinite(out[:, :2]).all():
        raise ValueError("null ts or dur")
    j = 2
    for k in top:
        out[:, j] = int_column([e.get(k, UNKNOWN) for e in ev])
        j += 1
    args: list[dict[str, Any]] = [_args_of(e) for e in ev]
    for k in arg_keys:
        out[:, j] = int_column([a.get(k, UNKNOWN) for a in args])
        j += 1
    for d in dims:
        out[:, j:j + 3] = _dims([a.get(d, _NO_DIM) for a in args])
        j += 3
    return out


def _args_of(e: Event) -> dict[str, Any]:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


EPOCH_MAX_NS = 9 * 10**18
"""The bound on |time| in ns since the epoch once ``baseTimeNanoseconds`` is added: int64 ns
end at 9.22e18 (the year 2262).  Without a base time ts and dur stay below ``TIME_MAX_US``
each, so only a base time can push an event past it."""


class TimeRangeError(Exception):
    """``baseTimeNanoseconds`` puts event times past :data:`EPOCH_MAX_NS` (they would wrap).

    Not a ValueError: :func:`tolerant` must not drop the events as malformed, the base time
    is what is wrong (the importer names it)."""


def _times(m: npt.NDArray[np.float64], base_ns: int, *, clamp: bool = True
           ) -> tuple[I64, I64]:
    if base_ns:
        lim, b = EPOCH_MAX_NS / 1000.0, base_ns / 1000.0
        first = m[:, 0] + b
        if not ((np.abs(first) < lim) & (first + np.maximum(m[:, 1], 0.0) < lim)).all():
            raise TimeRangeError(base_ns)
    start = us_to_ns(m[:, 0], base_ns)
    return start, start + dur_to_ns(m[:, 1], clamp=clamp)


def _ints(m: npt.NDArray[np.float64], j: int) -> I64:
    return m[:, j].astype(np.int64)


_KERNEL_ARGS = ("device", "stream", "correlation", "registers per thread", "shared memory")


def kernels(ev: list[Event], strings: StringTable, base_ns: int) -> KernelBatch:
    if not ev:
        return KernelBatch.empty()
    m, names = extract(ev, (), _KERNEL_ARGS, ("grid", "block"))
    start, end = _times(m, base_ns, clamp=False)  # (counted: trace_from_document)
    intern = strings.intern
    v = m[:, 2:].astype(np.int64)
    return KernelBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "device": v[:, 0],
        "stream": v[:, 1],
        "correlation": v[:, 2],
        "name_id": np.asarray([intern(x) for x in names], dtype=np.int32),
        "grid_x": v[:, 5], "grid_y": v[:, 6], "grid_z": v[:, 7],
        "block_x": v[:, 8], "block_y": v[:, 9], "block_z": v[:, 10],
        "registers": v[:, 3],
        "shared_mem_bytes": v[:, 4],
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


_GPU_ARGS = ("device", "stream", "correlation", "bytes")


def copies(ev: list[Event], strings: StringTable, base_ns: int) -> CopyBatch:
    if not ev:
        return CopyBatch.empty()
    m, names = extract(ev, (), _GPU_ARGS)
    start, end = _times(m, base_ns, clamp=False)  # (counted: trace_from_document)
    kinds = np.asarray(_lookup(names, copy_kind_of), dtype=np.uint8).reshape(-1, 3)
    return CopyBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "device": _ints(m, 2),
        "stream": _ints(m, 3),
        "correlation": _ints(m, 4),
        "kind": kinds[:, 0], "src_mem": kinds[:, 1], "dst_mem": kinds[:, 2],
        "bytes": _ints(m, 5),
    }).sorted_by()


def memsets(ev: list[Event], strings: StringTable, base_ns: int) -> MemsetBatch:
    if not ev:
        return MemsetBatch.empty()
    m, names = extract(ev, (), _GPU_ARGS)
    start, end = _times(m, base_ns, clamp=False)  # (counted: trace_from_document)
    return MemsetBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "device": _ints(m, 2),
        "stream": _ints(m, 3),
        "correlation": _ints(m, 4),
        "mem": np.asarray(_lookup(names, memset_mem_of), dtype=np.uint8),
        "bytes": _ints(m, 5),
    }).sorted_by()


def apis(ev: list[Event], strings: StringTable, base_ns: int) -> ApiBatch:
    if not ev:
        return ApiBatch.empty()
    m, names = extract(ev, ("pid", "tid"), ("correlation",))
    start, end = _times(m, base_ns)
    intern = strings.intern
    return ApiBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "pid": _ints(m, 2),
        "tid": _ints(m, 3),
        "correlation": _ints(m, 4),
        "name_id": np.asarray([intern(x) for x in names], dtype=np.int32),
        "kind": np.asarray(_lookup(names, api_kind_of), dtype=np.uint8),
    }).sorted_by()


def markers(ev: list[Event], strings: StringTable, base_ns: int, kind: MarkerKind,
            on_gpu: bool) -> MarkerBatch:
    """Named ranges; a host range named ProfilerStep#N becomes a PROFILER_STEP marker.

    A GPU range's device is ``args.device`` when given, else the event's ``pid`` (Kineto
    writes GPU rows under pid = device index).
    """
    if not ev:
        return MarkerBatch.empty()
    m, names = extract(ev, ("pid", "tid"))
    start, end = _times(m, base_ns)
    intern = strings.intern
    if on_gpu:
        pid = _ints(m, 2)
        dev = int_column([e.get("args", {}).get("device", UNKNOWN) for e in ev])
        device = np.where(dev >= 0, dev, pid)
        kinds = np.full(len(ev), kind, dtype=np.uint8)
    else:
        device = np.full(len(ev), UNKNOWN, dtype=np.int64)
        step = np.fromiter((x.startswith(PROFILER_STEP_PREFIX) for x in names), dtype=bool,
                           count=len(names))
        kinds = np.where(step, np.uint8(MarkerKind.PROFILER_STEP), np.uint8(kind))
    return MarkerBatch.from_columns({
        "start_ns": start,
        "end_ns": end,
        "device": device,
        "tid": _ints(m, 3),
        "name_id": np.asarray([intern(x) for x in names], dtype=np.int32),
        "kind": kinds,
    }).sorted_by()


def step_ops(ev: list[Event]) -> list[Event]:
    """The cpu_op/Operator events that are ProfilerStep#N ranges."""
    p = PROFILER_STEP_PREFIX
    try:
        return [e for e in ev if e["name"].startswith(p)]
    except (KeyError, AttributeError, TypeError):
        return [e for e in ev if isinstance(e.get("name"), str) and e["name"].startswith(p)]
