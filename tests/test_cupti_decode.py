"""The CUPTI raw-buffer path without a GPU: the fake libcupti lays records out in cupti-python's
dtypes and calls the callbacks cupti_raw registered through C function pointers; the decoder
must give back exactly what went in."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable

import numpy as np
import pytest
from cupti import cupti
from hypothesis import given, settings
from hypothesis import strategies as st

from attribution.model import (
    ApiBatch,
    ApiKind,
    CopyBatch,
    CopyKind,
    KernelBatch,
    MarkerBatch,
    MemKind,
    MemsetBatch,
    StringTable,
    Trace,
)
from ppwtop.collectors import cupti_decode as cd
from ppwtop.collectors import cupti_layout as cl
from ppwtop.collectors.cupti_raw import ENABLED_KINDS, RawBuffer, RawCollector
from ppwtop.fakes.cupti_lib import FakeCuptiLib

AK = cupti.ActivityKind
T0 = 1_768_471_200_000_000_000


def _run(lib: FakeCuptiLib, buffer_size: int = 16 * 1024,
         sink_ok: bool = True) -> tuple[RawCollector, list[RawBuffer]]:
    got: list[RawBuffer] = []

    def sink(b: RawBuffer) -> bool:
        if sink_ok:
            got.append(b)
        return sink_ok

    col = RawCollector(lib, sink, buffer_size=buffer_size)
    col.start(flush_period_s=None)
    col.flush()
    return col, got


def _decode(bufs: list[RawBuffer], dec: cd.Decoder | None = None) -> tuple[cd.Decoder, Trace]:
    dec = dec or cd.Decoder()
    parts = []
    for b in bufs:
        dec.add_names(b.names)
        parts.append(dec.decode(b.data, dropped_records=b.dropped_records))
    tr = Trace(strings=dec.strings)
    tr.kernels = KernelBatch.concat(p.kernels for p in parts)
    tr.copies = CopyBatch.concat(p.copies for p in parts)
    tr.memsets = MemsetBatch.concat(p.memsets for p in parts)
    tr.apis = ApiBatch.concat(p.apis for p in parts)
    tr.markers = MarkerBatch.concat(p.markers for p in parts)
    return dec, tr


def _names(tr: Trace, ids: np.ndarray) -> list[str | None]:
    return [tr.strings[i] if i >= 0 else None for i in ids.tolist()]


def _sorted_names(tr: Trace, ids: np.ndarray) -> list[str]:
    """:func:`_names`, sorted: every name must be resolved (``sorted`` cannot order None)."""
    names = _names(tr, ids)
    known = [n for n in names if n is not None]
    assert len(known) == len(names), names
    return sorted(known)


def _keep_into(got: list[RawBuffer]) -> Callable[[RawBuffer], bool]:
    """A sink that keeps every buffer in ``got`` and accepts it."""
    def sink(b: RawBuffer) -> bool:
        got.append(b)
        return True
    return sink


def _hand_trace() -> Trace:
    """Small ids avoid 10 and 12 in 8-aligned fields (they look like kernel/marker kinds to
    the agent's walk-free name check; see the fallback test)."""
    s = StringTable()
    tr = Trace(strings=s)
    gemm, add = s.intern("sm90_gemm_bf16"), s.intern("vectorized_elementwise_kernel<4>")
    launch, sync = s.intern("cudaLaunchKernel"), s.intern("cudaStreamSynchronize")
    tr.kernels = KernelBatch.from_columns({
        "start_ns": T0 + np.array([100, 300, 900]), "end_ns": T0 + np.array([250, 800, 950]),
        "device": [0, 1, 0], "stream": [7, 13, 7], "correlation": [31, 32, 33],
        "name_id": [gemm, add, gemm], "grid_x": [132, 64, 132], "grid_y": [1, 2, 1],
        "grid_z": [1, 1, 3], "block_x": [128, 256, 128], "block_y": [1, 1, 2],
        "block_z": [1, 1, 1], "registers": [168, 32, 168], "shared_mem_bytes": [0, 4096, 0]})
    kinds = [CopyKind.HTOD, CopyKind.DTOH, CopyKind.DTOD, CopyKind.HTOH, CopyKind.PTOP]
    tr.copies = CopyBatch.from_columns({
        "start_ns": T0 + 1000 + 10 * np.arange(5), "end_ns": T0 + 1005 + 10 * np.arange(5),
        "device": [0] * 5, "stream": [7] * 5, "correlation": [20, 21, 22, 23, 24],
        "kind": [int(k) for k in kinds],
        "src_mem": [MemKind.PINNED, MemKind.DEVICE, MemKind.DEVICE, MemKind.PAGEABLE,
                    MemKind.DEVICE],
        "dst_mem": [MemKind.DEVICE, MemKind.PAGEABLE, MemKind.MANAGED, MemKind.PINNED,
                    MemKind.DEVICE],
        "bytes": [1 << 20, 4096, 1 << 30, 8, (1 << 33) + 5]})
    tr.memsets = MemsetBatch.from_columns({
        "start_ns": T0 + np.array([50, 1200]), "end_ns": T0 + np.array([60, 1300]),
        "device": [0, 0], "stream": [7, 7], "correlation": [5, -1],
        "mem": [MemKind.DEVICE, MemKind.MANAGED], "bytes": [256, 1 << 24]})
    tr.apis = ApiBatch.from_columns({
        "start_ns": T0 + np.array([10, 40, 1400]), "end_ns": T0 + np.array([30, 45, 1500]),
        "pid": [4242] * 3, "tid": [4243, 4243, 4250], "correlation": [31, 32, -1],
        "name_id": [launch, launch, sync],
        "kind": [ApiKind.LAUNCH, ApiKind.LAUNCH, ApiKind.SYNC]})
    return tr


# --------------------------------------------------------------------------------------------


def test_hand_made_trace_round_trips_through_the_callbacks() -> None:
    src = _hand_trace()
    lib = FakeCuptiLib(src)
    col, bufs = _run(lib, buffer_size=512)  # a few records per buffer: many buffers
    assert len(bufs) > 3 and col.stats.callback_errors == 0
    _, out = _decode(bufs)
    for field in ("kernels", "copies", "memsets", "apis"):
        a, b = getattr(src, field).sorted_by(), getattr(out, field).sorted_by()
        assert len(a) == len(b), field
        for col_name in a.DTYPES:
            if col_name == "name_id":
                assert _names(src, a.name_id) == _names(out, b.name_id), field
            else:
                np.testing.assert_array_equal(getattr(a, col_name), getattr(b, col_name),
                                              err_msg=f"{field}.{col_name}")


def test_simulated_trace_round_trips_exactly() -> None:
    from attribution.sim import simulate

    src = simulate("two_streams", "h200", 1.0, 3).trace
    assert len(src.kernels) > 100 and len(src.apis) > 100
    lib = FakeCuptiLib(src)
    _, bufs = _run(lib, buffer_size=64 * 1024)
    dec, out = _decode(bufs)
    ks, ko = src.kernels.sorted_by(), out.kernels.sorted_by()
    np.testing.assert_array_equal(ks.start_ns, ko.start_ns)
    np.testing.assert_array_equal(ks.end_ns, ko.end_ns)
    np.testing.assert_array_equal(ks.stream, ko.stream)
    np.testing.assert_array_equal(ks.correlation, ko.correlation)
    assert _names(src, ks.name_id) == _names(out, ko.name_id)
    a_s, a_o = src.apis.sorted_by(), out.apis.sorted_by()
    np.testing.assert_array_equal(a_s.kind, a_o.kind)  # classified from the cbid's name
    assert _names(src, a_s.name_id) == _names(out, a_o.name_id)
    cs, co = src.copies.sorted_by(), out.copies.sorted_by()
    np.testing.assert_array_equal(cs.bytes, co.bytes)
    np.testing.assert_array_equal(cs.src_mem, co.src_mem)
    ms, mo = src.markers.sorted_by(), out.markers.sorted_by()
    np.testing.assert_array_equal(ms.start_ns, mo.start_ns)
    np.testing.assert_array_equal(ms.end_ns, mo.end_ns)
    assert _names(src, ms.name_id) == _names(out, mo.name_id)
    # every record counted once by kind
    assert dec.stats.records[int(AK.CONCURRENT_KERNEL)] == len(src.kernels)
    assert dec.stats.records[int(AK.RUNTIME)] == len(src.apis)
    assert dec.stats.records[int(AK.MARKER)] == 2 * len(src.markers)
    assert dec.stats.undecodable_buffers == 0 and dec.stats.unresolved_names == 0


def test_collector_enables_the_kinds_and_registers_c_callbacks() -> None:
    lib = FakeCuptiLib(_hand_trace())
    col, _ = _run(lib)
    assert lib.enabled == set(ENABLED_KINDS)
    assert {int(AK.CONCURRENT_KERNEL), int(AK.MEMCPY), int(AK.MEMSET), int(AK.RUNTIME),
            int(AK.SYNCHRONIZATION), int(AK.MARKER), int(AK.OVERHEAD)} == set(ENABLED_KINDS)
    assert lib.calls[0] == "cuptiActivityRegisterCallbacks"
    col.stop()
    forced = int(cupti.ActivityFlag.FLUSH_FORCED)
    assert lib.calls[-len(ENABLED_KINDS) - 1] == f"cuptiActivityFlushAll({forced})"
    assert not lib.enabled


def test_disabled_kinds_are_not_delivered() -> None:
    lib = FakeCuptiLib(_hand_trace())
    got: list[RawBuffer] = []
    col = RawCollector(lib, _keep_into(got),
                       kinds=(int(AK.CONCURRENT_KERNEL),))
    col.start(flush_period_s=None)
    col.flush()
    _, out = _decode(got)
    assert len(out.kernels) == 3 and len(out.copies) == 0 and len(out.apis) == 0


def test_names_are_read_once_per_pointer_and_shipped_once() -> None:
    src = _hand_trace()
    lib = FakeCuptiLib(src)
    col, first = _run(lib)
    assert sorted(n for b in first for n in b.names.values()) == sorted(
        ["sm90_gemm_bf16", "vectorized_elementwise_kernel<4>"])
    lib.add_trace(src)  # the same kernels again: same name pointers
    got: list[RawBuffer] = []
    col.sink = _keep_into(got)
    col.flush()
    assert got and all(not b.names for b in got)
    assert col.names.fast_hits >= 1  # known pointers only: no walk in the target
    dec, _ = _decode(first)
    _, again = _decode(got, dec)  # the decoder kept the names from the first buffers
    assert _sorted_names(again, again.kernels.name_id) == _sorted_names(
        src, src.kernels.name_id)


def test_unresolvable_name_pointer_gives_unknown_id_not_a_crash() -> None:
    lib = FakeCuptiLib(_hand_trace())
    _, bufs = _run(lib)
    dec = cd.Decoder()  # names never added
    parts = [dec.decode(b.data) for b in bufs]
    k = KernelBatch.concat(p.kernels for p in parts)
    assert (k.name_id == -1).all() and dec.stats.unresolved_names == 3


def test_dropped_records_are_surfaced() -> None:
    lib = FakeCuptiLib(_hand_trace())
    lib.drop_records(17)
    col, bufs = _run(lib)
    assert col.stats.dropped_records == 17
    assert sum(b.dropped_records for b in bufs) == 17
    dec, _ = _decode(bufs)
    assert dec.stats.dropped_records == 17


def test_sink_refusal_drops_whole_buffers_and_resends_names() -> None:
    src = _hand_trace()
    lib = FakeCuptiLib(src)
    col, _ = _run(lib, sink_ok=False)
    assert col.stats.dropped_buffers == col.stats.buffers > 0
    got: list[RawBuffer] = []
    col.sink = _keep_into(got)
    lib.add_trace(src)
    col.flush()
    names = {n for b in got for n in b.names.values()}
    assert names == {"sm90_gemm_bf16", "vectorized_elementwise_kernel<4>"}


def test_overhead_records_are_counted_with_their_time() -> None:
    lib = FakeCuptiLib(_hand_trace())
    flush_kind = int(cupti.ActivityOverheadKind.CUPTI_BUFFER_FLUSH)
    lib.add_overhead(T0 + 10, T0 + 510, flush_kind)
    lib.add_overhead(T0 + 600, T0 + 700, flush_kind)
    _, bufs = _run(lib)
    dec, _ = _decode(bufs)
    assert dec.stats.overhead_records == 2
    assert dec.stats.overhead_ns == {flush_kind: 600}


def _record(dtype: np.dtype, kind: int, **fields: int) -> bytes:
    r = np.zeros(1, dtype=dtype)
    r["kind"] = kind
    for k, v in fields.items():
        r[k] = v
    return r.tobytes()


def test_known_but_undecoded_kind_is_skipped_and_counted() -> None:
    kdt = cl.DEFAULT_LAYOUTS[int(AK.CONCURRENT_KERNEL)]
    ctx = cupti.activity_context4_dtype
    buf = (_record(kdt, int(AK.CONCURRENT_KERNEL), start=1, end=2, correlation_id=1)
           + _record(ctx, int(AK.CONTEXT), context_id=9)
           + _record(kdt, int(AK.CONCURRENT_KERNEL), start=3, end=4, correlation_id=2))
    dec = cd.Decoder()
    out = dec.decode(buf)
    np.testing.assert_array_equal(out.kernels.start_ns, [1, 3])
    assert dec.stats.skipped_records == 1 and dec.stats.undecodable_buffers == 0


def test_unknown_kind_stops_the_walk_counted_not_a_crash() -> None:
    src = _hand_trace()
    lib = FakeCuptiLib(src)
    lib.add_raw(struct.pack("<iI", 9999, 0) + bytes(40))  # delivered after every timed record
    col, bufs = _run(lib, buffer_size=1 << 16)
    assert col.stats.callback_errors == 0
    dec, out = _decode(bufs)
    assert dec.stats.unknown_kinds == {9999: 1}
    assert dec.stats.undecodable_bytes == 48
    assert len(out.kernels) == 3 and len(out.apis) == 3  # everything before it decoded


def test_memcpy_and_memory_kinds_follow_cuptis_enum_values() -> None:
    # CUPTI_ACTIVITY_MEMCPY_KIND_*: 1 HtoD 2 DtoH 3 HtoA 4 AtoH 5 AtoA 6 AtoD 7 DtoA 8 DtoD
    # 9 HtoH 10 PtoP; arrays live in device memory.
    expect = {1: CopyKind.HTOD, 2: CopyKind.DTOH, 3: CopyKind.HTOD, 4: CopyKind.DTOH,
              5: CopyKind.DTOD, 6: CopyKind.DTOD, 7: CopyKind.DTOD, 8: CopyKind.DTOD,
              9: CopyKind.HTOH, 10: CopyKind.PTOP, 0: CopyKind.OTHER}
    mdt = cl.DEFAULT_LAYOUTS[int(AK.MEMCPY)]
    buf = b"".join(_record(mdt, int(AK.MEMCPY), copy_kind=k, src_kind=k % 8, dst_kind=7)
                   for k in expect)
    out = cd.Decoder().decode(buf)
    assert out.copies.kind.tolist() == [int(v) for v in expect.values()]
    # memory kinds 1 pageable 2 pinned 3 device 4 array 5 managed, 6/7 static variants
    assert out.copies.src_mem.tolist() == [
        [0, 1, 2, 3, 4, 5, 3, 5][k % 8] for k in expect]
    assert set(out.copies.dst_mem.tolist()) == {int(MemKind.MANAGED)}


@pytest.mark.parametrize(("name", "kind"), [
    ("cudaLaunchKernel", ApiKind.LAUNCH), ("cudaGraphLaunch", ApiKind.LAUNCH),
    ("cudaStreamSynchronize", ApiKind.SYNC), ("cudaDeviceSynchronize", ApiKind.SYNC),
    ("cudaMemcpyAsync", ApiKind.MEMCPY), ("cudaMemsetAsync", ApiKind.MEMSET),
    ("cudaMalloc", ApiKind.ALLOC), ("cudaFreeAsync", ApiKind.ALLOC),
    ("cudaGraphAddMemcpyNode", ApiKind.OTHER), ("cudaGetDevice", ApiKind.OTHER)])
def test_api_classification(name: str, kind: ApiKind) -> None:
    cbid = cl.RUNTIME_CBID_BY_NAME[name]
    adt = cl.DEFAULT_LAYOUTS[int(AK.RUNTIME)]
    dec = cd.Decoder()
    out = dec.decode(_record(adt, int(AK.RUNTIME), cbid=cbid, start=5, end=9))
    assert out.apis.kind.tolist() == [int(kind)]
    assert dec.strings[int(out.apis.name_id[0])] == name


def test_synchronization_records_become_sync_intervals() -> None:
    sdt = cl.DEFAULT_LAYOUTS[int(AK.SYNCHRONIZATION)]
    t = int(cupti.ActivitySynchronizationType.STREAM_SYNCHRONIZE)
    dec = cd.Decoder()
    out = dec.decode(_record(sdt, int(AK.SYNCHRONIZATION), type=t, start=10, end=90,
                             correlation_id=4))
    assert out.syncs.kind.tolist() == [int(ApiKind.SYNC)]
    assert (out.syncs.end_ns - out.syncs.start_ns).tolist() == [80]
    assert dec.strings[int(out.syncs.name_id[0])] == "sync:stream_synchronize"


_SIZES = {int(AK.CONCURRENT_KERNEL): cl.DEFAULT_LAYOUTS[int(AK.CONCURRENT_KERNEL)],
          int(AK.RUNTIME): cl.DEFAULT_LAYOUTS[int(AK.RUNTIME)],
          int(AK.MEMCPY): cl.DEFAULT_LAYOUTS[int(AK.MEMCPY)],
          int(AK.CONTEXT): cupti.activity_context4_dtype}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(_SIZES)), min_size=0, max_size=300))
def test_walk_recovers_any_kind_sequence(kinds: list[int]) -> None:
    buf = b"".join(_record(_SIZES[k], k) for k in kinds)
    runs = cl.walk(buf)
    seq = [k for k, c in zip(runs.kind, runs.count, strict=True) for _ in range(c)]
    assert seq == kinds
    assert runs.end_offset == len(buf) and runs.unknown_kind is None
    # maximal runs: neighbours differ
    assert all(a != b for a, b in zip(runs.kind, runs.kind[1:], strict=False))


def test_single_kind_buffer_is_one_run() -> None:
    kdt = cl.DEFAULT_LAYOUTS[int(AK.CONCURRENT_KERNEL)]
    r = np.zeros(5000, dtype=kdt)
    r["kind"] = int(AK.CONCURRENT_KERNEL)
    r["start"] = np.arange(5000)
    runs = cl.walk(r.tobytes())
    assert runs.count == [5000] and runs.offset == [0]
    out = cd.Decoder().decode(r.tobytes())
    np.testing.assert_array_equal(out.kernels.start_ns, np.arange(5000))


def test_truncated_tail_is_counted() -> None:
    kdt = cl.DEFAULT_LAYOUTS[int(AK.CONCURRENT_KERNEL)]
    buf = _record(kdt, int(AK.CONCURRENT_KERNEL), start=1) * 2
    dec = cd.Decoder()
    out = dec.decode(buf, valid_size=len(buf) - 8)  # the second record is cut
    assert len(out.kernels) == 1
    assert dec.stats.undecodable_buffers == 1 and dec.stats.undecodable_bytes == kdt.itemsize - 8


def test_fake_passes_records_through_c_pointers() -> None:
    # the registered callbacks are called through addresses, not as Python objects
    lib = FakeCuptiLib(_hand_trace())
    col, bufs = _run(lib)
    assert bufs
    assert ctypes.cast(col._complete_cb, ctypes.c_void_p).value == ctypes.cast(
        lib._complete, ctypes.c_void_p).value


def test_names_can_be_read_from_the_target_memory_instead() -> None:
    import os

    src = _hand_trace()
    lib = FakeCuptiLib(src)
    got: list[RawBuffer] = []
    col = RawCollector(lib, _keep_into(got), resolve_names=False)
    col.start(flush_period_s=None)
    col.flush()
    assert got and all(not b.names for b in got)  # the target walked nothing
    resolver = cd.ProcessMemoryNames(os.getpid())  # the fake's names live in this process
    _, out = _decode(got, cd.Decoder(names=resolver))
    assert _sorted_names(out, out.kernels.name_id) == _sorted_names(src, src.kernels.name_id)
    assert resolver(0) is None  # unmapped: None, not a crash
    resolver.close()


def test_periodic_flush_thread_delivers_every_record_once() -> None:
    import threading
    import time

    src = _hand_trace()
    lib = FakeCuptiLib()
    got: list[RawBuffer] = []
    threads: set[str] = set()

    def sink(b: RawBuffer) -> bool:
        threads.add(threading.current_thread().name)
        got.append(b)
        return True

    col = RawCollector(lib, sink, buffer_size=1024)
    col.start(flush_period_s=0.005)
    lib.add_trace(src)
    deadline = time.monotonic() + 5.0
    while not got and time.monotonic() < deadline:
        time.sleep(0.005)
    lib.add_trace(src)  # a second batch, delivered by the flush thread or by stop()
    col.stop()
    assert "ppwtop-cupti-flush" in threads  # the callback ran on the non-main thread
    _, out = _decode(got)
    assert len(out.kernels) == 2 * len(src.kernels) and len(out.apis) == 2 * len(src.apis)
    assert col.stats.callback_errors == 0


def test_wrong_struct_version_is_surfaced_not_silently_decoded() -> None:
    # records written as Kernel13 (248 bytes), decoded with a table claiming Kernel11 (224)
    k13, k11 = cupti.activity_kernel13_dtype, cupti.activity_kernel11_dtype
    buf = b"".join(_record(k13, int(AK.CONCURRENT_KERNEL), start=i, end=i + 1)
                   for i in range(1, 5))
    wrong = cl.Layout.build({int(AK.CONCURRENT_KERNEL): k11})
    dec = cd.Decoder(layout=wrong)
    out = dec.decode(buf)
    assert len(out.kernels) < 4  # it cannot walk past the first record boundary it misjudges
    assert dec.stats.undecodable_buffers == 1 and dec.stats.undecodable_bytes > 0


def test_field_that_looks_like_a_kind_falls_back_to_a_walk() -> None:
    # an API record's correlation id (an 8-aligned field) equal to CONCURRENT_KERNEL's kind
    # value makes the walk-free check see a candidate kernel with an unknown "name" word
    src = _hand_trace()
    lib = FakeCuptiLib(src)
    col, _ = _run(lib, buffer_size=1 << 16)
    walks = col.names.walks
    tricky = Trace(strings=src.strings)
    tricky.apis = ApiBatch.from_columns({
        "start_ns": [T0 + 5], "end_ns": [T0 + 6], "pid": [1], "tid": [1],
        "correlation": [int(AK.CONCURRENT_KERNEL)], "name_id": [src.apis.name_id[0]],
        "kind": [int(ApiKind.LAUNCH)]})
    tricky.kernels = src.kernels
    tricky.apis = ApiBatch.concat([tricky.apis, ApiBatch.from_columns({
        "start_ns": [T0 + 7], "end_ns": [T0 + 8], "pid": [1 << 20], "tid": [1 << 20],
        "correlation": [1 << 20], "name_id": [src.apis.name_id[0]],
        "kind": [int(ApiKind.LAUNCH)]})])
    got: list[RawBuffer] = []
    col.sink = _keep_into(got)
    lib.add_trace(tricky)
    col.flush()
    assert col.names.walks == walks + 1 and col.stats.callback_errors == 0
    assert all(not b.names for b in got)  # the walk found no new real pointers

