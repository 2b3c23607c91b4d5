"""Side by side with Holistic Trace Analysis: GPU idle and busy time on the real Kineto traces.

HTA's temporal breakdown (``get_temporal_breakdown``) defines, per rank, kernel_time = last
GPU event end − first GPU event start over every event on a stream (kernels, memcpy, memset),
and idle_time = kernel_time − the union of those events.  ppwtop computes the same union with
``attribution.idle.busy_segments`` over its own importer's columns.  Run:

    pip install -e '.[peers]'   # holistictraceanalysis (pulls pandas)
    python benchmarks/hta_compare.py [DATA_DIR]

Prints one row per trace: HTA idle %, ppwtop idle %, and the difference in µs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from attribution.idle import busy_segments, device_indices
from attribution.model import MarkerKind, Trace
from ppwtop.importers.kineto import load_kineto

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"


def hta_window(tr: Trace) -> Trace:
    """HTA's filter: with two or more ProfilerStep ranges, keep only GPU items whose launching
    host call started before the last ProfilerStep began (HTA drops the last iteration and
    items without a launcher).  Returns the trace unchanged otherwise."""
    steps = tr.markers.take(tr.markers.kind == MarkerKind.PROFILER_STEP)
    if len(steps) < 2:
        return tr
    cutoff = int(steps.start_ns.max())
    ok_corr = tr.apis.correlation[tr.apis.start_ns < cutoff]
    out = Trace(strings=tr.strings, apis=tr.apis, markers=tr.markers, devices=tr.devices)
    out.kernels = tr.kernels.take(np.isin(tr.kernels.correlation, ok_corr))
    out.copies = tr.copies.take(np.isin(tr.copies.correlation, ok_corr))
    out.memsets = tr.memsets.take(np.isin(tr.memsets.correlation, ok_corr))
    return out


def ours(path: Path, hta_compat: bool) -> tuple[float, float, float]:
    """(span_us, idle_us, seconds) over all devices of the trace, HTA's definition."""
    t0 = time.perf_counter()
    tr = load_kineto(path)
    if hta_compat:
        tr = hta_window(tr)
    starts, ends = [], []
    for dev in device_indices(tr):
        s, e = busy_segments(tr, dev)
        starts.append(s)
        ends.append(e)
    s = np.concatenate(starts)
    e = np.concatenate(ends)
    span_ns = float(e.max() - s.min())
    busy_ns = float((e - s).sum())
    return span_ns / 1e3, (span_ns - busy_ns) / 1e3, time.perf_counter() - t0


def hta(path: Path) -> tuple[float, float, float]:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, d)
        t0 = time.perf_counter()
        a = TraceAnalysis(trace_dir=d)
        df = a.get_temporal_breakdown(visualize=False)
        dt = time.perf_counter() - t0
    return float(df["kernel_time(us)"].sum()), float(df["idle_time(us)"].sum()), dt


def real_traces(argv: list[str]) -> tuple[Path, list[Path]] | None:
    """The data folder (``argv[0]``, else ``DEFAULT``) and its Kineto traces HTA can read
    (not the AMD one); None, with a line, where the folder is not there."""
    root = Path(argv[0]) if argv else DEFAULT
    if not root.exists():
        print(f"skip: {root} not found")
        return None
    return root, sorted(p for p in root.rglob("*.json.gz") if "amd_trace" not in str(p))


def main(argv: list[str]) -> int:
    found = real_traces(argv)
    if found is None:
        return 0
    root, files = found
    print(f"{'trace':58s} {'HTA idle%':>9s} {'ours idle%':>10s} {'Δidle µs':>10s} "
          f"{'Δspan µs':>9s} {'compat Δidle µs':>15s} {'HTA s':>6s} {'ours s':>6s}")
    for p in files:
        try:
            h_span, h_idle, h_s = hta(p)
        except Exception as exc:
            print(f"{p.relative_to(root)!s:58s} HTA failed: {type(exc).__name__}: {exc}"[:140])
            continue
        try:
            o_span, o_idle, o_s = ours(p, hta_compat=False)
            _c_span, c_idle, _ = ours(p, hta_compat=True)
        except Exception as exc:
            print(f"{p.relative_to(root)!s:58s} ppwtop failed: {type(exc).__name__}: {exc}")
            continue
        print(f"{str(p.relative_to(root))[-58:]:58s} {100 * h_idle / h_span:9.2f} "
              f"{100 * o_idle / o_span:10.2f} {o_idle - h_idle:10.1f} {o_span - h_span:9.1f} "
              f"{c_idle - h_idle:15.1f} {h_s:6.2f} {o_s:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
