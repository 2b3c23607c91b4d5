"""GIL cost per CUPTI activity record: the raw-buffer path vs an object-per-record baseline.

Builds N activity records (about half RUNTIME launch records, the rest kernels, copies and
memsets) laid out in cupti-python's record dtypes, split into 8 MiB buffers held in ctypes
memory as libcupti would fill them, then times on the same buffers:

(a) in the target: the raw path's completion callback (``RawCollector``, called through its C
    function pointer): copy the valid bytes out (one ``string_at``), walk the record kinds,
    read names only for new pointers; also (a0) the copy alone (``resolve_names=False``);
(b) in the ppwtop process: ``Decoder.decode`` into model batches;
(c1) baseline: one cupti-python record object per record (``ActivityKernel13.from_ptr`` etc.,
    which copy the struct into a Python object) and reading the five fields a consumer needs.
    cupti-python's own buffer callback also walks with ``cuptiActivityGetNextRecord`` and
    builds its list, which this stand-in does not do, so the real per-record cost is higher;
(c2) baseline: a Python dict per record from ``struct.unpack_from`` (a pure-Python stand-in).

Two layouts: ``runs`` (records of one kind in runs of 256, as per-thread API buffers and
per-context device buffers tend to give) and ``alternating`` (every record changes kind, the
walker's worst case).  Run: ``python benchmarks/agent_overhead.py [--records N]``.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from cupti import cupti

from ppwtop.collectors.cupti_decode import Decoder
from ppwtop.collectors.cupti_layout import DEFAULT_LAYOUTS, RUNTIME_CBID_BY_NAME
from ppwtop.collectors.cupti_raw import COMPLETE_FN, RawBuffer, RawCollector

AK = cupti.ActivityKind
KERNEL, RUNTIME, MEMCPY, MEMSET = (int(AK.CONCURRENT_KERNEL), int(AK.RUNTIME),
                                   int(AK.MEMCPY), int(AK.MEMSET))
BUFFER_BYTES = 8 << 20
T0 = 1_768_471_200_000_000_000


def build_records(n: int, layout: str, rng: np.random.Generator,
                  name_ptrs: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], ...]:
    """All records as one uint8 array, in the given kind order."""
    if layout == "alternating":
        kinds = np.where(np.arange(n) % 2 == 0, RUNTIME, KERNEL)
        extra = np.flatnonzero(np.arange(n) % 50 == 1)
        kinds[extra] = MEMCPY
        kinds[extra[::2] + 2 if len(extra) else extra] = MEMSET
        kinds = kinds[:n]
    else:
        block = np.repeat(np.array([RUNTIME, KERNEL, RUNTIME, KERNEL, MEMCPY, MEMSET]),
                          [256, 256, 256, 240, 16, 8])
        kinds = np.resize(block, n)
    sizes = np.array([DEFAULT_LAYOUTS[k].itemsize for k in kinds.tolist()], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    t = T0 + np.arange(n, dtype=np.int64) * 2_000
    for kind in (KERNEL, RUNTIME, MEMCPY, MEMSET):
        idx = np.flatnonzero(kinds == kind)
        dt = DEFAULT_LAYOUTS[kind]
        r = np.zeros(len(idx), dtype=dt)
        r["kind"] = kind
        r["start"], r["end"] = t[idx], t[idx] + 1_500
        r["correlation_id"] = idx + 1
        if kind == KERNEL:
            r["name"] = name_ptrs[rng.integers(0, len(name_ptrs), len(idx))]
            r["device_id"], r["stream_id"], r["grid_x"], r["block_x"] = 0, 7, 132, 128
        elif kind == RUNTIME:
            r["cbid"] = RUNTIME_CBID_BY_NAME["cudaLaunchKernel"]
            r["process_id"] = r["thread_id"] = 4242
        elif kind == MEMCPY:
            r["copy_kind"], r["src_kind"], r["dst_kind"], r["bytes"] = 1, 2, 3, 1 << 20
        else:
            r["memory_kind"], r["bytes"] = 3, 4096
        rows = r.view(np.uint8).reshape(len(idx), dt.itemsize)
        out[offsets[idx][:, None] + np.arange(dt.itemsize)] = rows
    return out, kinds, offsets, sizes


def split_buffers(data: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any],
                  sizes: np.ndarray[Any, Any]) -> list[tuple[Any, int, int]]:
    """Cut at record boundaries into ctypes buffers of BUFFER_BYTES: (array, valid, nrec)."""
    ends = offsets + sizes
    bufs = []
    start_rec = 0
    while start_rec < len(offsets):
        base = offsets[start_rec]
        stop = int(np.searchsorted(ends, base + BUFFER_BYTES, side="right"))
        valid = int(ends[stop - 1] - base)
        arr = (ctypes.c_uint8 * BUFFER_BYTES)()
        ctypes.memmove(arr, data[base: base + valid].ctypes.data, valid)
        bufs.append((arr, valid, stop - start_rec))
        start_rec = stop
    return bufs


class _Lib:
    def cuptiActivityGetNumDroppedRecords(self, ctx: Any, stream: int, out: Any) -> int:
        out[0] = 0
        return 0


def time_raw(bufs: list[tuple[Any, int, int]], resolve_names: bool,
             keep: list[RawBuffer] | None = None) -> tuple[float, int]:
    """Completion callbacks through the C pointer.  The timed sink lets each buffer go (as a
    socket writer does, so the allocator recycles its memory); pass ``keep`` to collect them
    (that run pays a page fault per fresh page and is not the one reported)."""
    def sink(b: RawBuffer) -> bool:
        if keep is not None:
            keep.append(b)
        return True

    col = RawCollector(_Lib(), sink, resolve_names=resolve_names)
    addr = ctypes.cast(col._complete_cb, ctypes.c_void_p).value
    assert addr is not None
    fn = COMPLETE_FN(addr)  # as libcupti does
    t = time.perf_counter()
    for arr, valid, _ in bufs:
        fn(None, 0, ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint8)), BUFFER_BYTES, valid)
    dt = time.perf_counter() - t
    assert col.stats.callback_errors == 0 and col.stats.buffers == len(bufs)
    return dt, col.stats.names_resolved


def time_decode(raw: list[RawBuffer]) -> tuple[float, int]:
    dec = Decoder()
    t = time.perf_counter()
    n = 0
    for b in raw:
        dec.add_names(b.names)
        d = dec.decode(b.data)
        n += len(d.kernels) + len(d.apis) + len(d.copies) + len(d.memsets)
    return time.perf_counter() - t, n


_CLASSES: dict[int, Any] = {KERNEL: cupti.ActivityKernel13, RUNTIME: cupti.ActivityAPI,
                            MEMCPY: cupti.ActivityMemcpy7, MEMSET: cupti.ActivityMemset5}


def time_objects(bufs: list[tuple[Any, int, int]], kinds: np.ndarray[Any, Any],
                 offsets: np.ndarray[Any, Any], limit: int) -> tuple[float, int]:
    """(c1): one cupti-python record object per record, five fields read."""
    rec = 0
    done = 0
    t = time.perf_counter()
    sink: list[Any] = []
    for arr, _, nrec in bufs:
        base_addr = ctypes.addressof(arr)
        base_off = int(offsets[rec])
        for i in range(rec, rec + nrec):
            o = _CLASSES[int(kinds[i])].from_ptr(base_addr + int(offsets[i]) - base_off)
            sink.append((o.kind, o.start, o.end, o.correlation_id,
                         getattr(o, "name", None) or getattr(o, "cbid", 0)))
            done += 1
            if done >= limit:
                return time.perf_counter() - t, done
        rec += nrec
    return time.perf_counter() - t, done


_FMT: dict[int, tuple[struct.Struct, tuple[str, ...]]] = {}
for _k in (KERNEL, RUNTIME, MEMCPY, MEMSET):
    _dt = DEFAULT_LAYOUTS[_k]
    _names = ("kind", "start", "end", "correlation_id")
    _by_name = _dt.fields
    assert _by_name is not None  # a record layout: a structured dtype
    _fields = [(_by_name[f][1], _by_name[f][0].char) for f in _names]
    _FMT[_k] = (struct.Struct("<" + "".join(
        f"{(off - prev_end)}x{c}" if off > prev_end else c
        for (off, c), prev_end in zip(_fields, [0] + [o + np.dtype(c).itemsize
                                                     for o, c in _fields[:-1]], strict=True))),
        _names)


def time_dicts(data: np.ndarray[Any, Any], kinds: np.ndarray[Any, Any],
               offsets: np.ndarray[Any, Any], limit: int) -> tuple[float, int]:
    """(c2): a dict per record from struct.unpack_from."""
    mv = memoryview(data.tobytes())
    out: list[dict[str, int]] = []
    kl = kinds[:limit].tolist()
    ol = offsets[:limit].tolist()
    t = time.perf_counter()
    for k, o in zip(kl, ol, strict=True):
        s, names = _FMT[k]
        out.append(dict(zip(names, s.unpack_from(mv, o), strict=True)))
    return time.perf_counter() - t, len(out)


def _best(fn: Callable[[], tuple[float, int]], repeat: int) -> tuple[float, int]:
    runs = [fn() for _ in range(repeat)]
    return min(r[0] for r in runs), runs[0][1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--baseline-records", type=int, default=200_000)
    ap.add_argument("--names", type=int, default=200, help="distinct kernel names")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    keep = [ctypes.create_string_buffer(f"void kernel_{i}<float, {i % 7}>(float*, int)".encode())
            for i in range(args.names)]
    ptrs = np.array([ctypes.addressof(b) for b in keep], dtype=np.int64)
    print(f"{args.records} records, {args.names} kernel names, {BUFFER_BYTES >> 20} MiB buffers;"
          f" best of {args.repeat}")
    for layout in ("runs", "alternating"):
        data, kinds, offsets, sizes = build_records(args.records, layout, rng, ptrs)
        bufs = split_buffers(data, offsets, sizes)
        n = args.records
        a0, _ = _best(functools.partial(time_raw, bufs, False), args.repeat)
        a, names = _best(functools.partial(time_raw, bufs, True), args.repeat)
        raw: list[RawBuffer] = []
        time_raw(bufs, True, raw)
        b, decoded = _best(functools.partial(time_decode, raw), args.repeat)
        assert decoded == n, (decoded, n)
        c1, m1 = time_objects(bufs, kinds, offsets, args.baseline_records)
        c2, m2 = time_dicts(data, kinds, offsets, args.baseline_records)
        us = 1e6
        print(f"\n[{layout}] {len(bufs)} buffers, {len(data) / 1e6:.0f} MB,"
              f" {names} names read")
        print(f"  (a0) target, copy out only        {a0 / n * us:8.4f} us/record")
        print(f"  (a)  target, copy + name cache    {a / n * us:8.4f} us/record")
        print(f"  (b)  ppwtop process, decode       {b / n * us:8.4f} us/record")
        print(f"  (c1) cupti-python object/record   {c1 / m1 * us:8.4f} us/record"
              f"  (stand-in: from_ptr + 5 fields, no GetNextRecord; {m1} records)")
        print(f"  (c2) Python dict/record (struct)  {c2 / m2 * us:8.4f} us/record"
              f"  (stand-in; {m2} records)")
        print(f"  target GIL ratio (c1)/(a) = {c1 / m1 / (a / n):.0f}x,"
              f" (c2)/(a) = {c2 / m2 / (a / n):.0f}x, (c1)/(a0) = {c1 / m1 / (a0 / n):.0f}x;"
              f" budget 0.1 us/record: (a) {'met' if a / n * us <= 0.1 else 'NOT met'},"
              f" (a0) {'met' if a0 / n * us <= 0.1 else 'NOT met'}")


if __name__ == "__main__":
    main()
