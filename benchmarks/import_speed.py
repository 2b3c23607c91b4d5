"""Kineto import speed: ``load_kineto`` against the floor (gzip.decompress + orjson.loads).

Owns the import-speed benchmark.  Times both, median of N interleaved runs each (default 5), on

* the largest real Kineto trace in /work/shared/data/real (HTA ``df_index_resolver``), skipped
  with a message when /work/shared is absent, and
* a synthetic modern-schema trace with ``--kernels`` kernels (default 1 000 000) and one
  ``cudaLaunchKernel`` per kernel, generated into a temp dir.

Prints the medians and the ratios.  ``load_kineto`` turns the cyclic GC off while it decodes
and walks the document, so the floor is also timed that way (the like-for-like ratio).
Run: ``python benchmarks/import_speed.py``.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from ppwtop.importers.kineto import load_kineto

REAL = Path("/work/shared/data/real/hta/tests/data/df_index_resolver/df_index_resolver.json.gz")
KERNEL_NAMES = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)",
    "ampere_sgemm_128x64_tn",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>"
    "(cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >"
    "(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4>)",
    "triton_poi_fused_add_cos_sin_0",
]


def floor(path: Path) -> None:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    orjson.loads(raw)


def floor_no_gc(path: Path) -> None:
    """The floor with the cyclic GC off during the decode, as load_kineto runs it."""
    gc.disable()
    try:
        floor(path)
    finally:
        gc.enable()


def medians_s(fns: list[Callable[[Path], object]], path: Path, runs: int) -> list[float]:
    """Median seconds of each function; the runs are interleaved (round-robin) so that a
    change in machine load during the benchmark hits all of them alike."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            gc.collect()
            t0 = time.perf_counter()
            fn(path)
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def synthetic(path: Path, n_kernels: int, chunk: int = 50_000) -> None:
    """A modern-schema trace: n kernels on 4 streams, each with its cudaLaunchKernel."""
    base_ns = 1_750_000_000_000_000_000
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,
              "computeMajor": 9, "computeMinor": 0, "numSms": 132}]
    head = {"schemaVersion": 1, "deviceProperties": props, "displayTimeUnit": "ms",
            "baseTimeNanoseconds": base_ns, "distributedInfo": {"rank": 0, "world_size": 1}}
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(orjson.dumps(head)[:-1] + b',"traceEvents":[')
        first = True
        for lo in range(0, n_kernels, chunk):
            events = []
            for i in range(lo, min(lo + chunk, n_kernels)):
                ts = 1_400_000_000_000.0 + i * 7.125
                corr = 100_000 + i
                events.append({
                    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                    "pid": 4242, "tid": 4242, "ts": round(ts - 3.5, 3), "dur": 4.218,
                    "args": {"External id": i, "cbid": 211, "correlation": corr}})
                events.append({
                    "ph": "X", "cat": "kernel", "name": KERNEL_NAMES[i % len(KERNEL_NAMES)],
                    "pid": 0, "tid": 7 + i % 4, "ts": round(ts, 3), "dur": 5.312,
                    "args": {"External id": i, "queued": 0, "device": 0, "context": 1,
                             "stream": 7 + i % 4, "correlation": corr,
                             "registers per thread": 32 + i % 64, "shared memory": 4096,
                             "blocks per SM": 1.5, "warps per SM": 12.0,
                             "grid": [128 + i % 512, 1, 1], "block": [256, 1, 1],
                             "est. achieved occupancy %": 50}})
            body = orjson.dumps(events)[1:-1]
            f.write(body if first else b"," + body)
            first = False
        f.write(b"]}")


def compare(label: str, path: Path, runs: int) -> None:
    f, f0, t = medians_s([floor, floor_no_gc, load_kineto], path, runs)
    tr = load_kineto(path)
    print(f"{label}: {path.stat().st_size / 1e6:.1f} MB gz, {len(tr.kernels)} kernels, "
          f"{len(tr.apis)} runtime calls")
    print(f"  floor (gzip.decompress + orjson.loads): {f:8.3f} s  (median of {runs})")
    print(f"  floor with gc disabled:                 {f0:8.3f} s  (median of {runs})")
    print(f"  load_kineto (disables gc itself):       {t:8.3f} s  (median of {runs})")
    print(f"  ratio load_kineto / floor: {t / f:.2f}x;  / floor without gc: {t / f0:.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-synthetic", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_real:
        if REAL.is_file():
            compare("real (HTA df_index_resolver)", REAL, args.runs)
        else:
            print(f"skipping the real trace: {REAL} not found (/work/shared absent)")
    if not args.skip_synthetic:
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "synthetic.json.gz"
            t0 = time.perf_counter()
            synthetic(p, args.kernels)
            print(f"(generated {p.name} in {time.perf_counter() - t0:.1f} s)")
            compare(f"synthetic ({args.kernels} kernels + launches)", p, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
