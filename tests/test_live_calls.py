"""The live view's rows: calls and bytes per class are the items that overlap the horizon,
so a horizon whose start cuts a long kernel or copy counts it (before 2026-12-05 slabs
counted an item where it started only, and such a row read ``calls = 0`` with busy time);
a class flagged before its interval was drawn says that its interval is a placeholder."""

from __future__ import annotations

import numpy as np

from attribution.engine.live import LiveEngine
from attribution.model import (
    ApiBatch,
    ApiKind,
    CopyBatch,
    DeviceInfo,
    KernelBatch,
    StringTable,
    Trace,
)
from attribution.sim import simulate
from tests.test_live_engine import drive, ticks


def _long_items(seed: int) -> Trace:
    """One GPU running 0.6–1.4 s kernels of two names and 0.3–0.9 s copies with short gaps
    (every horizon start is likely to cut one), 30 s, no power readings."""
    rng = np.random.default_rng(seed)
    k_s, k_e, k_n, c_s, c_e, c_b = [], [], [], [], [], []
    t = 1_000_000_000
    while t < 31_000_000_000:
        if rng.random() < 0.75:
            d = int(rng.uniform(0.6e9, 1.4e9))
            k_s.append(t)
            k_e.append(t + d)
            k_n.append(int(rng.integers(2)))
        else:
            d = int(rng.uniform(0.3e9, 0.9e9))
            c_s.append(t)
            c_e.append(t + d)
            c_b.append(int(rng.integers(1, 1 << 30)))
        t += d + int(rng.uniform(1e6, 30e6))
    nk, nc = len(k_s), len(c_s)
    kernels = KernelBatch.from_columns({
        "start_ns": np.array(k_s), "end_ns": np.array(k_e), "device": np.zeros(nk, np.int16),
        "stream": np.full(nk, 7), "correlation": np.arange(1, nk + 1),
        "name_id": np.array(k_n, np.int32)})
    copies = CopyBatch.from_columns({
        "start_ns": np.array(c_s), "end_ns": np.array(c_e), "device": np.zeros(nc, np.int16),
        "stream": np.full(nc, 8), "correlation": np.arange(nk + 1, nk + nc + 1),
        "kind": np.ones(nc, np.uint8), "src_mem": np.ones(nc, np.uint8),
        "dst_mem": np.full(nc, 3, np.uint8), "bytes": np.array(c_b)})
    # each item's launch call, 0.05–5 ms before it starts
    starts = np.r_[np.array(k_s), np.array(c_s)] - rng.uniform(5e4, 5e6, nk + nc).astype(int)
    apis = ApiBatch.from_columns({
        "start_ns": starts, "end_ns": starts + 10_000, "pid": np.ones(nk + nc, np.int64),
        "tid": np.ones(nk + nc, np.int64), "correlation": np.arange(1, nk + nc + 1),
        "name_id": np.r_[np.full(nk, 2), np.full(nc, 3)].astype(np.int32),
        "kind": np.r_[np.full(nk, int(ApiKind.LAUNCH)),
                      np.full(nc, int(ApiKind.MEMCPY))].astype(np.uint8)})
    return Trace(strings=StringTable(["gemm_long", "reduce_long", "cudaLaunchKernel",
                                      "cudaMemcpyAsync"]), kernels=kernels, copies=copies,
                 apis=apis, devices=[DeviceInfo(index=0, name="NVIDIA H100 80GB HBM3")])


def test_a_horizon_counts_the_items_it_overlaps() -> None:
    cut = 0
    for seed in range(4):
        trace = _long_items(seed)
        live = drive(trace, LiveEngine(devices=trace.devices, horizon_s=7.3))
        assert live is not None
        w0, w1 = live.window.start_ns, live.window.end_ns
        k, c = trace.kernels, trace.copies
        k_in = (k.start_ns < w1) & (k.end_ns > w0)
        c_in = (c.start_ns < w1) & (c.end_ns > w0)
        cut += int(((k.start_ns < w0) & (k.end_ns > w0)).sum() + (
            (c.start_ns < w0) & (c.end_ns > w0)).sum())
        for row in live.kernels:
            nid = ["gemm_long", "reduce_long"].index(row.name)
            assert row.calls == int((k_in & (k.name_id == nid)).sum()), (seed, row.name)
            assert row.calls >= 1 and row.time_s > 0
        assert len(live.copies) == 1
        assert live.copies[0].calls == int(c_in.sum())
        assert live.copies[0].bytes == int(c.bytes[c_in].sum())
    assert cut >= 3  # the horizons' starts cut items (the case this guards)


def test_a_class_flagged_before_its_interval_is_drawn_says_so() -> None:
    """Until the bootstrap pool holds enough replicates a class's interval is a placeholder
    (0 to twice the estimate); a class flagged for another reason then said only that
    reason, next to an interval no bootstrap drew."""
    trace = simulate(scenario="varied_mix", gpu="h100", seconds=20.0, seed=3).trace
    eng = LiveEngine(devices=trace.devices, horizon_s=10.0)
    first = None
    last = None
    for now, delta in ticks(trace):
        eng.update(delta, now)
        snap = eng.snapshot()
        if snap is not None:
            first = first or snap
            last = snap
    assert first is not None and last is not None and first is not last
    assert first.kernels and all(not k.resolvable for k in first.kernels)
    assert all(k.why is not None and "not computed yet" in k.why for k in first.kernels)
    assert any(k.why is not None and not k.why.startswith("new") for k in first.kernels)
    assert not any(k.why is not None and "not computed yet" in k.why for k in last.kernels)
