"""Writers for simulated runs: the files a real profiler and nvidia-smi would have left.

Owns ``write_kineto`` (PyTorch-profiler/Kineto Chrome-trace JSON.gz, modern schema:
``baseTimeNanoseconds`` with float-µs ``ts`` relative to it), ``write_smi_csv`` (nvidia-smi
``--query-gpu=... --format=csv -lms 10`` output with local-time stamps) and ``write_truth``
(the ground truth as orjson), used by ``ppwtop simulate``; and ``through_files``, a trace
written by those writers and read back as ``ppwtop attribute --trace … --power …`` reads it
(the accuracy benchmark's ``--files`` and the tests of the poll-stamped path).
"""

from __future__ import annotations

import gzip
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from attribution.model import CopyKind, MemKind, PowerField, Trace
from attribution.sim import SimResult
from attribution.sim.truth import Truth
from ppwtop.fileio import write_atomic

_CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemcpy": 31,
         "cudaDeviceSynchronize": 165, "cudaStreamSynchronize": 131}
_MEM_TITLE = {MemKind.PAGEABLE: "Pageable", MemKind.PINNED: "Pinned", MemKind.DEVICE: "Device",
              MemKind.MANAGED: "Managed", MemKind.ARRAY: "Array", MemKind.UNKNOWN: "Unknown"}


def _us(rel_ns: np.ndarray) -> list[float]:
    return (np.asarray(rel_ns, dtype=np.float64) / 1000.0).round(3).tolist()  # type: ignore[no-any-return]


def kineto_document(trace: Trace) -> dict[str, Any]:
    """The Chrome-trace JSON object Kineto writes for this trace."""
    span = trace.gpu_span_ns()
    starts = [span[0]] if span else []
    starts += [int(b.start_ns.min()) for b in (trace.apis, trace.markers) if len(b)]
    first = min(starts) if starts else 0
    base = (first // 1_000_000_000 - 1) * 1_000_000_000
    pid = int(trace.apis.pid[0]) if len(trace.apis) else 1
    ev: list[dict[str, Any]] = []
    k = trace.kernels
    names = trace.strings.names()
    kn = [names[i] for i in k.name_id.tolist()]
    for nm, ts, du, st, co, gx, gy, gz, bx, by, bz, rg in zip(
            kn, _us(k.start_ns - base), _us(k.end_ns - k.start_ns), k.stream.tolist(),
            k.correlation.tolist(), k.grid_x.tolist(), k.grid_y.tolist(), k.grid_z.tolist(),
            k.block_x.tolist(), k.block_y.tolist(), k.block_z.tolist(), k.registers.tolist(),
            strict=True):
        ev.append({"ph": "X", "cat": "kernel", "name": nm, "pid": 0, "tid": st, "ts": ts,
                   "dur": du, "args": {"External id": co, "queued": 0, "device": 0,
                                       "context": 1, "stream": st, "correlation": co,
                                       "registers per thread": rg, "shared memory": 0,
                                       "grid": [gx, gy, gz], "block": [bx, by, bz]}})
    c = trace.copies
    dur_ns = np.maximum(c.end_ns - c.start_ns, 1)
    bw = (c.bytes / dur_ns).tolist()  # bytes/ns == GB/s
    for kind, src, dst, ts, du, st, co, nb, g in zip(
            c.kind.tolist(), c.src_mem.tolist(), c.dst_mem.tolist(), _us(c.start_ns - base),
            _us(c.end_ns - c.start_ns), c.stream.tolist(), c.correlation.tolist(),
            c.bytes.tolist(), bw, strict=True):
        nm = (f"Memcpy {CopyKind(kind).label} ({_MEM_TITLE[MemKind(src)]} -> "
              f"{_MEM_TITLE[MemKind(dst)]})")
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": nm, "pid": 0, "tid": st, "ts": ts,
                   "dur": du, "args": {"External id": co, "device": 0, "context": 1,
                                       "stream": st, "correlation": co, "bytes": nb,
                                       "memory bandwidth (GB/s)": g}})
    a = trace.apis
    for ni, ts, du, tid, co in zip(a.name_id.tolist(), _us(a.start_ns - base),
                                   _us(a.end_ns - a.start_ns), a.tid.tolist(),
                                   a.correlation.tolist(), strict=True):
        nm = names[ni]
        args: dict[str, Any] = {"cbid": _CBID.get(nm, 0), "correlation": co}
        if co >= 0:
            args["External id"] = co
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": nm, "pid": pid, "tid": tid,
                   "ts": ts, "dur": du, "args": args})
    m = trace.markers
    for i, (ni, ts, du, tid) in enumerate(zip(m.name_id.tolist(), _us(m.start_ns - base),
                                              _us(m.end_ns - m.start_ns), m.tid.tolist(),
                                              strict=True)):
        ev.append({"ph": "X", "cat": "user_annotation", "name": names[ni], "pid": pid,
                   "tid": tid, "ts": ts, "dur": du, "args": {"External id": 1 + i}})
    ev.append({"name": "process_name", "ph": "M", "ts": 0.0, "pid": pid, "tid": 0,
               "args": {"name": "python"}})
    ev.append({"name": "process_name", "ph": "M", "ts": 0.0, "pid": 0, "tid": 0,
               "args": {"name": "GPU 0"}})
    props = []
    for d in trace.devices:
        major, _, minor = d.compute_capability.partition(".")
        props.append({"id": d.index, "name": d.name, "totalGlobalMem": d.total_memory_bytes,
                      "computeMajor": int(major or 0), "computeMinor": int(minor or 0),
                      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
                      "regsPerBlock": 65536, "warpSize": 32, "numSms": d.sm_count})
    return {"schemaVersion": 1, "deviceProperties": props, "baseTimeNanoseconds": base,
            "displayTimeUnit": "ms", "traceName": "ppwtop-simulate", "traceEvents": ev}


def write_kineto(trace: Trace, path: Path) -> None:
    data = orjson.dumps(kineto_document(trace))
    write_atomic(path, gzip.compress(data, compresslevel=3, mtime=0))


def _local_offset_ns(t_ns: np.ndarray) -> np.ndarray:
    """UTC offset of the local zone (TZ env / system) at each time, in ns."""
    if hasattr(time, "tzset"):
        time.tzset()
    hours = t_ns // 3_600_000_000_000
    uniq, inv = np.unique(hours, return_inverse=True)
    offs = np.array([time.localtime(int(h) * 3600 + 1800).tm_gmtoff for h in uniq.tolist()],
                    dtype=np.int64)
    return offs[inv] * 1_000_000_000


def smi_csv_text(trace: Trace) -> str:
    """The nvidia-smi CSV a ``-lms 10`` poll would have logged for this trace's sensor."""
    p = trace.power
    polls = ~p.fresh
    fields = [f for f in (PowerField.INSTANT, PowerField.DRAW, PowerField.AVERAGE)
              if bool(np.any(polls & (p.field == int(f))))]
    if PowerField.INSTANT in fields and PowerField.AVERAGE in fields:
        fields.remove(PowerField.AVERAGE)  # the query the brief names has instant + draw
    cols: list[np.ndarray] = []
    t: np.ndarray | None = None
    for f in fields:
        m = polls & (p.field == int(f))
        tf, vf = p.t_ns[m], p.power_mw[m]
        if t is None:
            t, cols = tf, [vf]
        else:
            common, ia, ib = np.intersect1d(t, tf, return_indices=True)
            t, cols = common, [c[ia] for c in cols] + [vf[ib]]
    if t is None:
        t = np.empty(0, np.int64)
    clk = trace.clocks
    ci = np.clip(np.searchsorted(clk.t_ns, t, side="right") - 1, 0, max(len(clk) - 1, 0))
    sm = clk.sm_mhz[ci] if len(clk) else np.zeros(len(t), np.int32)
    temp = clk.temp_c[ci] if len(clk) else np.zeros(len(t), np.float32)
    why = clk.clock_reasons[ci] if len(clk) else np.zeros(len(t), np.uint64)
    local = (t + _local_offset_ns(t)).astype("datetime64[ns]").astype("datetime64[ms]")
    stamps = [s.replace("-", "/").replace("T", " ") for s in
              np.datetime_as_string(local, unit="ms").tolist()]
    name = trace.devices[0].name if trace.devices else "NVIDIA GPU"
    head = ["timestamp", "index", "name"] + [
        {PowerField.INSTANT: "power.draw.instant [W]", PowerField.DRAW: "power.draw [W]",
         PowerField.AVERAGE: "power.draw.average [W]"}[f] for f in fields] + [
        "clocks.current.sm [MHz]", "temperature.gpu", "clocks_event_reasons.active"]
    watts = [[f"{v / 1000:.2f} W" for v in c.tolist()] for c in cols]
    lines = [", ".join(head)]
    for i, s in enumerate(stamps):
        row = [s, "0", name] + [w[i] for w in watts] + [
            f"{int(sm[i])} MHz", f"{float(temp[i]):.0f}", f"0x{int(why[i]):016X}"]
        lines.append(", ".join(row))
    return "\n".join(lines) + "\n"


def write_smi_csv(trace: Trace, path: Path) -> None:
    write_atomic(path, smi_csv_text(trace).encode("utf-8"))


def write_truth(truth: Truth, path: Path) -> None:
    write_atomic(path, orjson.dumps(truth.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY))


def write_all(res: SimResult, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "trace.json.gz", out_dir / "power.csv", out_dir / "truth.json"]
    write_kineto(res.trace, paths[0])
    write_smi_csv(res.trace, paths[1])
    write_truth(res.truth, paths[2])
    return paths


def through_files(trace: Trace) -> Trace:
    """``trace`` written as Kineto JSON + nvidia-smi CSV and read back by the importers,
    merged as ``ppwtop attribute`` merges a power log (poll-stamped readings, ms stamps)."""
    from ppwtop.cli.attribute import merge_power
    from ppwtop.importers import load_power, load_trace

    with tempfile.TemporaryDirectory() as d:
        tp, pp = Path(d) / "trace.json.gz", Path(d) / "power.csv"
        write_kineto(trace, tp)
        write_smi_csv(trace, pp)
        merged, _ = merge_power(load_trace(tp), load_power(pp), str(pp))
    return merged
