"""Live path figures: transport throughput vs a raw socket copy, agent cost per buffer on the
sim backend, and end-to-end buffer latency through ``ppwtop run --backend sim``.

(1) Throughput: N frames of a given payload size go through the agent's :class:`Sender`
    (bounded queue + sender thread) to a :class:`FrameReader` + ``decode_buffer`` on the other
    end of a Unix socket, against the same bytes sent with ``sendall`` and read with
    ``recv_into`` (the floor).  Both ends run in this process on threads, interleaved rounds,
    medians; the ratio is measured side by side.
(2) Agent cost: the sim backend's fake libcupti releases a simulated "demo" job in 100 ms
    slices (what one periodic flush hands over); per completed buffer we time the collector's
    completion callback (copy out + name scan) and the agent's sink (frame encode + queue),
    i.e. the target's GIL time per buffer, and per record.
(3) Latency: one headless ``ppwtop run --backend sim`` of a 6 s target; the session stamps
    each buffer's arrival against the agent's send stamp (same host clock) and writes the
    p50/p95 into the recording's meta.

Run: ``python benchmarks/live_transport.py [--rounds 5]`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ppwtop.transport import frames
from ppwtop.transport.endpoint import FrameReader
from ppwtop.transport.sender import Sender


def framed(n: int, size: int) -> float:
    a, b = socket.socketpair()
    payload = os.urandom(size)
    s = Sender(a, max_queue_bytes=(size + 4096) * (n + 1), max_queue_frames=n + 1)
    r = FrameReader(b)
    got = 0

    def read() -> None:
        nonlocal got
        while got < n:
            for f in r.read(0.5):
                frames.decode_buffer(f.payload)
                got += 1

    t0 = time.perf_counter()
    th = threading.Thread(target=read)
    th.start()
    for i in range(n):
        s.offer(frames.encode_buffer_parts(payload, seq=i + 1, context=0, stream_id=0,
                                           dropped_records=0, names={}))
    th.join()
    dt = time.perf_counter() - t0
    s.close()
    b.close()
    return dt


def raw(n: int, size: int) -> float:
    a, b = socket.socketpair()
    payload = os.urandom(size)
    total = n * size
    buf = bytearray(1 << 20)

    def read() -> None:
        left = total
        mv = memoryview(buf)
        while left:
            left -= b.recv_into(mv, min(len(buf), left))

    t0 = time.perf_counter()
    th = threading.Thread(target=read)
    th.start()
    for _ in range(n):
        a.sendall(payload)
    th.join()
    dt = time.perf_counter() - t0
    a.close()
    b.close()
    return dt


def throughput(rounds: int) -> None:
    print("(1) transport throughput, frames/s (median of rounds; ratio = framed / raw time)")
    for size, n in ((64 << 10, 2000), (1 << 20, 300), (8 << 20, 40)):
        f_t, r_t = [], []
        for _ in range(rounds):
            f_t.append(framed(n, size))
            r_t.append(raw(n, size))
        fm, rm = statistics.median(f_t), statistics.median(r_t)
        ratios = [f / r for f, r in zip(f_t, r_t, strict=True)]
        print(f"  {size >> 10:6d} KiB: framed {n / fm:9.0f} frames/s ({n * size / fm / 1e9:5.2f}"
              f" GB/s), raw copy {n / rm:9.0f}/s ({n * size / rm / 1e9:5.2f} GB/s), "
              f"time ratio {statistics.median(ratios):.2f}")


def agent_cost(rounds: int, markers: bool = True) -> None:
    import ppwtop.collectors.cupti_raw as raw_mod
    from ppwtop.agent.core import Agent
    from ppwtop.fakes.paced_cupti import PacedSimCuptiLib
    from ppwtop.fakes.sim_run import SimRunConfig
    from ppwtop.transport.endpoint import Listener

    cb_ns: list[int] = []
    cb_cpu_ns: list[int] = []
    recs: list[int] = []

    class Timed(raw_mod.RawCollector):
        def _on_complete(self, context: Any, stream_id: int, buf_p: Any, size: int,
                         valid_size: int) -> None:
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            super()._on_complete(context, stream_id, buf_p, size, valid_size)
            cb_cpu_ns.append(time.thread_time_ns() - c0)
            cb_ns.append(time.perf_counter_ns() - t0)

    orig = raw_mod.RawCollector
    raw_mod.RawCollector = Timed  # type: ignore[misc]
    try:
        now = [0]
        cfg = SimRunConfig(scenario="demo", gpu="h100", seconds=30.0, anchor_ns=10**18)
        lib = PacedSimCuptiLib(cfg, clock=lambda: now[0])
        if not markers:  # no ProfilerStep#N ranges: every name repeats, no walk needed
            lib._sorted["markers"] = lib._sorted["markers"].take(slice(0, 0))
        with Listener() as lis:
            a = Agent(lis.path, "sim", lib=lib, flush_period_s=0)
            a.start()
            conn = lis.accept(5.0)
            assert conn is not None
            r = FrameReader(conn)
            stop = threading.Event()

            def drain() -> None:
                while not stop.is_set():
                    r.read(0.1)

            th = threading.Thread(target=drain, daemon=True)
            th.start()
            now[0] = cfg.anchor_ns
            for _ in range(250):  # 25 s of the job, one flush per 100 ms
                now[0] += 100_000_000
                before = sum(lib.delivered.values())
                lib.cuptiActivityFlushAll(0)
                recs.append(sum(lib.delivered.values()) - before)
            sink_us = a.sink_ns / 1e3 / max(a.buffers_offered, 1)
            n_buf = a.buffers_offered
            a.stop()
            stop.set()
    finally:
        raw_mod.RawCollector = orig  # type: ignore[misc]
    wall = statistics.median(cb_ns) / 1e3
    cpu = statistics.median(cb_cpu_ns) / 1e3
    per_buf_records = sum(recs) / max(n_buf, 1)
    what = "with a new ProfilerStep#N marker name in every buffer" if markers \
        else "kernels, copies and API records only (all names known)"
    print(f"(2) agent cost per buffer (sim 'demo' job, {what}; 100 ms flushes, {n_buf} buffers, "
          f"{per_buf_records:.0f} records/buffer): completion callback (sink included) median "
          f"{cpu:.1f} us thread CPU ({wall:.1f} us wall, GIL waits included), of which sink "
          f"(encode + queue) {sink_us:.1f} us CPU; = {cpu * 1e3 / max(per_buf_records, 1):.0f} "
          f"ns/record CPU at this buffer size")


def latency() -> None:
    from ppwtop.recording import read_recording

    with tempfile.TemporaryDirectory() as d:
        rec = Path(d) / "r.ppw"
        subprocess.run([sys.executable, "-m", "ppwtop", "record", "-o", str(rec), "--backend",
                        "sim", "--", sys.executable, "-c", "import time; time.sleep(6)"],
                       check=True, capture_output=True, timeout=120)
        s = read_recording(rec).meta["session"]
    print(f"(3) end-to-end buffer latency (agent sink -> decoded in the session): p50 "
          f"{s['buffer_latency_ms_p50']:.2f} ms, p95 {s['buffer_latency_ms_p95']:.2f} ms over "
          f"{s['buffers']} buffers; session decode {s['decode_us_per_buffer']:.0f} us/buffer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    throughput(args.rounds)
    agent_cost(args.rounds, markers=True)
    agent_cost(args.rounds, markers=False)
    latency()


if __name__ == "__main__":
    main()
