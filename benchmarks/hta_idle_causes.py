"""Side by side with Holistic Trace Analysis: idle time by cause on the real Kineto traces.

HTA's ``get_idle_time_breakdown`` splits each CUDA stream's gaps into ``host_wait`` (the next
item's runtime call started after the previous item on the stream ended), ``kernel_wait``
(otherwise, a gap under 30 µs) and ``other``; per stream, on HTA's whole-µs timestamps (a
ns-resolution event's start rounded up, its end down).  ppwtop splits each *device's* idle
time (no kernel, copy or memset on any stream) into ``launch_gap``, ``sync_wait``,
``host_stall`` and ``other`` (``attribution.idle``).  Three columns per trace, all over the
same events:

* HTA itself;
* HTA's rule evaluated on ppwtop's importer columns (:func:`hta_rule`): agreement here says
  the two read the same events, so what differs below is the definition;
* ppwtop's own causes over the GPU span (first item start to last item end, HTA's span).

Every column reads the items HTA keeps (``hta_compare.hta_window``: with two or more profiler
steps, HTA drops the last iteration).

Run::

    pip install -e '.[peers]'   # holistictraceanalysis (pulls pandas)
    python benchmarks/hta_idle_causes.py [DATA_DIR]
"""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from attribution.idle import idle_intervals, work_devices
from attribution.model import Trace
from attribution.snapshot import IDLE_CAUSES
from ppwtop.importers.kineto import load_kineto

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hta_compare import hta_window, real_traces  # HTA's last-iteration filter; the traces

KERNEL_WAIT_US = 30
"""HTA's default ``consecutive_kernel_delay`` (its timestamps are µs)."""
HTA_CATS = ("host_wait", "kernel_wait", "other")


def _items(tr: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start_ns, end_ns, device, stream, correlation) of every kernel, copy and memset."""
    parts = (tr.kernels, tr.copies, tr.memsets)
    return tuple(np.concatenate([getattr(p, f) for p in parts]).astype(np.int64)  # type: ignore[return-value]
                 for f in ("start_ns", "end_ns", "device", "stream", "correlation"))


def hta_rule(tr: Trace) -> dict[str, float]:
    """HTA's per-stream idle categories (µs), computed on our columns at HTA's µs resolution."""
    s, e, dev, stream, corr = _items(tr)
    # HTA moves ns-resolution events inward to whole µs: start up, end down
    s_us, e_us = -(-s // 1000), e // 1000
    api_start = dict(zip(tr.apis.correlation.tolist(), (-(-tr.apis.start_ns // 1000)).tolist(),
                         strict=True))
    out = dict.fromkeys(HTA_CATS, 0.0)
    for key in sorted(set(zip(dev.tolist(), stream.tolist(), strict=True))):
        on = np.flatnonzero((dev == key[0]) & (stream == key[1]))
        on = on[np.argsort(s_us[on], kind="stable")]
        for prev, cur in itertools.pairwise(on):
            gap = float(s_us[cur] - e_us[prev])
            run = api_start.get(int(corr[cur]))
            if run is not None and run > e_us[prev]:
                out["host_wait"] += gap
            elif gap < KERNEL_WAIT_US:
                out["kernel_wait"] += gap
            else:
                out["other"] += gap
    return out


def ours(tr: Trace) -> tuple[dict[str, float], int]:
    """ppwtop's idle time (µs) per cause over the GPU span, summed over devices; devices."""
    s, e, dev, _stream, _corr = _items(tr)
    out = dict.fromkeys(IDLE_CAUSES, 0.0)
    devices = work_devices(tr)
    for d in devices:
        on = dev == d
        gaps = idle_intervals(tr, int(s[on].min()), int(e[on].max()), [d])
        for c, name in enumerate(IDLE_CAUSES):
            out[name] += float(gaps.duration_ns[gaps.cause == c].sum()) / 1e3
    return out, len(devices)


def crosstab(tr: Trace) -> dict[tuple[str, str], float]:
    """On a one-stream trace (each stream gap is a device gap): idle ms by (HTA's category, our
    cause), HTA's rule taken at ns on the same gaps, so only the rules differ."""
    span = tr.gpu_span_ns()
    assert span is not None  # (only traces with GPU items are compared)
    gaps = idle_intervals(tr, *span)
    s, e, _dev, _stream, corr = _items(tr)
    order = np.argsort(s, kind="stable")
    s, e, corr = s[order], e[order], corr[order]
    api_start = dict(zip(tr.apis.correlation.tolist(), tr.apis.start_ns.tolist(), strict=True))
    nxt = np.searchsorted(s, gaps.end_ns)  # the item that ends each gap
    out: dict[tuple[str, str], float] = {}
    for g in range(len(gaps)):
        if nxt[g] >= len(s):
            continue
        run = api_start.get(int(corr[nxt[g]]))
        dur_ns = int(gaps.duration_ns[g])
        h = ("host_wait" if run is not None and run > gaps.start_ns[g]
             else "kernel_wait" if dur_ns < KERNEL_WAIT_US * 1000 else "other")
        key = (h, IDLE_CAUSES[int(gaps.cause[g])])
        out[key] = out.get(key, 0.0) + dur_ns / 1e6
    return out


def hta(path: Path) -> dict[str, float]:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, d)
        a = TraceAnalysis(trace_dir=d)
        # the trace's own rank (HTA asks for rank 0 unless told, and fails on other ranks)
        df, _ = a.get_idle_time_breakdown(ranks=sorted(a.t.traces), visualize=False)
    got = df.groupby("idle_category")["idle_time"].sum()
    return {c: float(got.get(c, 0.0)) for c in HTA_CATS}


def _fmt(d: dict[str, float], keys: tuple[str, ...]) -> str:
    return " ".join(f"{d[k] / 1e3:9.2f}" for k in keys)


def main(argv: list[str]) -> int:
    found = real_traces(argv)
    if found is None:
        return 0
    root, files = found
    print("idle ms per cause; HTA per stream (host_wait kernel_wait other), HTA's rule on our "
          "columns, ours per device (launch_gap sync_wait host_stall other)")
    one_stream: list[tuple[str, Trace]] = []  # their gaps are the device's: crosstab below
    for p in files:
        name = str(p.relative_to(root))[-52:]
        tr = load_kineto(p)
        if len(tr.kernels) + len(tr.copies) + len(tr.memsets) == 0:
            print(f"{name:52s} no GPU items")
            continue
        try:
            h = hta(p)
            h_txt = _fmt(h, HTA_CATS)
        except Exception as exc:  # HTA's own failures are part of the comparison
            h_txt = f"HTA fails: {type(exc).__name__}: {exc}"[:29].ljust(29)
        tr = hta_window(tr)  # every column over HTA's events: it drops the last iteration
        r = hta_rule(tr)
        o, n_dev = ours(tr)
        streams = len({(int(a), int(b)) for a, b in zip(*_items(tr)[2:4], strict=True)})
        print(f"{name:52s} {n_dev}d/{streams:<2d}s | {h_txt} | {_fmt(r, HTA_CATS)} | "
              f"{_fmt(o, IDLE_CAUSES)}")
        if streams == 1:
            one_stream.append((name, tr))
    print("\none-stream traces, idle ms by (HTA's rule at ns, our cause), the same gaps:")
    for name, tr in one_stream:
        cells = crosstab(tr)
        txt = ", ".join(f"{h}→{o} {ms:.2f}" for (h, o), ms in sorted(cells.items()) if ms >= 0.005)
        print(f"{name:52s} {txt}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
