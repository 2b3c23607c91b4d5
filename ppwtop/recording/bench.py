"""Throughput of the .ppw writer and readers: ``python -m ppwtop.recording.bench [DIR]``.

Owns nothing the app uses; it is the script behind the numbers in docs/recording.md
(210 MB of kernel records in 30 chunks, written with and without fsync, read back twice).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

from attribution.model import KernelBatch, StringTable
from ppwtop.recording.reader import iter_chunks, read_recording
from ppwtop.recording.writer import RecordingWriter


def main(argv: list[str]) -> int:
    directory = argv[0] if argv else tempfile.gettempdir()
    rows_per_chunk, n_chunks = 100_000, 30
    rng = np.random.default_rng(0)
    base = np.arange(rows_per_chunk, dtype=np.int64)
    chunk = KernelBatch.from_columns({
        "start_ns": base * 1000, "end_ns": base * 1000 + 500, "correlation": base,
        "name_id": rng.integers(0, 500, rows_per_chunk),
        "grid_x": rng.integers(1, 4096, rows_per_chunk)})
    path = os.path.join(directory, f"ppwtop-bench-{os.getpid()}.ppw")
    try:
        size = 0
        for fsync in (False, True):
            t0 = time.perf_counter()
            with RecordingWriter(path, {"bench": True}, [], fsync=fsync,
                                 strings=StringTable([f"k{i}" for i in range(500)])) as w:
                for _ in range(n_chunks):
                    w.write_batch("kernels", chunk)
            dt_s = time.perf_counter() - t0
            size = os.path.getsize(path)
            print(f"write fsync={fsync}: {size / 1e6:.0f} MB in {dt_s:.3f} s "
                  f"= {size / 1e6 / dt_s:.0f} MB/s")
        for _ in range(2):
            t0 = time.perf_counter()
            trace = read_recording(path)
            dt_s = time.perf_counter() - t0
            print(f"read_recording: {size / 1e6 / dt_s:.0f} MB/s ({len(trace.kernels)} rows)")
            del trace
            t0 = time.perf_counter()
            last_end_ns = 0
            for kind, batch in iter_chunks(path):
                if kind == "kernels":
                    last_end_ns = max(last_end_ns, int(batch.end_ns[-1]))
            dt_s = time.perf_counter() - t0
            print(f"iter_chunks: {size / 1e6 / dt_s:.0f} MB/s")
    finally:
        if os.path.exists(path):
            os.remove(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
