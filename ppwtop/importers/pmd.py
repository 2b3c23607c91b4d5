"""ElmorLabs PMD external power meter (GPU_Power_Benchmark ``PMD_data.bin``) → PowerBatch.

Owns the decoding of the raw meter file into ``PowerField.METER`` rows (ground truth in
accuracy runs), the reading of the benchmark's ``timestamps.csv`` kernel edges, and a run
as a trace (:func:`run_trace`: its kernels from those edges, its nvidia-smi readings).

Format (see docs/importers_nsys_csv.md): 18-byte records of 9 little-endian uint16
``[tick, c1..c8]``.  ``tick`` is a wrapping 16-bit counter at 2934.5 ticks per ms; sample 0 lies
at ``PMD_start_ts − 50 000 µs``.  Each channel decodes as ``raw = (int16(c) >> 4) & 0x0FFF``,
zeroed when bit 11 of ``raw`` is set; (V, I) pairs are (c1,c2), (c3,c4), (c5,c6), (c7,c8) with
V = raw·0.007568 V, I = raw·0.0488 A, and total power = V1·I1 + V2·I2 + V4·I4 +
(raw5·0.0075)·(raw6·0.0488).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from attribution.model import (
    POLL_TIME_KEY,
    ApiBatch,
    ApiKind,
    DeviceInfo,
    KernelBatch,
    PowerBatch,
    PowerField,
    StringTable,
    Trace,
)
from ppwtop.errors import InputError
from ppwtop.importers.smi_csv import load_smi_csv

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

RECORD_BYTES = 18
TICKS_PER_MS = 2934.5
START_OFFSET_US = -50_000
VOLT_PER_LSB = 0.007568
AMP_PER_LSB = 0.0488
VOLT_PER_LSB_CH3 = 0.0075


def decode_pmd(raw: bytes, start_us: int) -> tuple[I64, F64]:
    """Sample times (ns since the epoch) and total power (W) of a PMD_data.bin image."""
    n = len(raw) // RECORD_BYTES
    rec = np.frombuffer(raw, dtype="<u2", count=n * 9).reshape(n, 9)
    tick = rec[:, 0].astype(np.int64)
    step = np.diff(tick)
    step[step < 0] += 65536
    cum = np.concatenate(([0], np.cumsum(step)))
    t_ns = (np.int64(start_us + START_OFFSET_US) * 1000
            + np.rint(cum * (1e6 / TICKS_PER_MS)).astype(np.int64))
    ch = (rec[:, 1:].view(np.int16) >> 4).astype(np.int64) & 0x0FFF
    ch[(ch & 0x800) != 0] = 0
    v = ch.astype(np.float64) * VOLT_PER_LSB
    i = ch.astype(np.float64) * AMP_PER_LSB
    power_w = (v[:, 0] * i[:, 1] + v[:, 2] * i[:, 3] + v[:, 6] * i[:, 7]
               + (ch[:, 4] * VOLT_PER_LSB_CH3) * (ch[:, 5] * AMP_PER_LSB))
    return t_ns, power_w


def load_pmd(bin_path: str | Path, start_ts_path: str | Path, device: int = 0) -> PowerBatch:
    """Decode PMD_data.bin (+ PMD_start_ts.txt, µs since the epoch) into METER power rows."""
    bp, sp = Path(bin_path), Path(start_ts_path)
    try:
        raw = bp.read_bytes()
    except OSError as e:
        raise InputError(bp, f"cannot read: {e.strerror or e}") from None
    try:
        start_us = int(float(sp.read_text().strip()))
    except OSError as e:
        raise InputError(sp, f"cannot read: {e.strerror or e}") from None
    except ValueError:
        raise InputError(sp, "expected one integer (µs since the epoch)") from None
    if len(raw) < RECORD_BYTES:
        raise InputError(bp, "no PMD record (file shorter than 18 bytes)")
    t_ns, power_w = decode_pmd(raw, start_us)
    n = len(t_ns)
    return PowerBatch.from_columns({
        "t_ns": t_ns, "power_mw": np.rint(power_w * 1000.0).astype(np.int64),
        "device": np.full(n, device), "field": np.full(n, int(PowerField.METER)),
        "fresh": np.ones(n, dtype=bool),
    })


def load_edges(timestamps_csv: str | Path) -> tuple[I64, I64]:
    """Kernel [start, end] ns from a GPU_Power_Benchmark timestamps.csv (µs, values doubled).

    The unique values are the edges e0 < e1 < e2 ...; kernels are [e0,e1], [e2,e3], ...
    A trailing unpaired edge (the end of the final idle period) is not a kernel.
    """
    ns = load_edge_values(timestamps_csv)
    ns = ns[: len(ns) // 2 * 2]
    return ns[0::2].copy(), ns[1::2].copy()


def load_window(timestamps_csv: str | Path) -> tuple[int, int]:
    """The run window [first edge, last edge] in ns (includes a trailing idle edge)."""
    ns = load_edge_values(timestamps_csv)
    return int(ns[0]), int(ns[-1])


def load_edge_values(timestamps_csv: str | Path) -> I64:
    """All unique edges of a timestamps.csv, ascending, in ns since the epoch."""
    p = Path(timestamps_csv)
    try:
        lines = p.read_text().split()
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror or e}") from None
    body = lines[1:] if lines and not lines[0].lstrip("-").isdigit() else lines
    try:
        us = np.unique(np.array(body, dtype=np.int64))
    except ValueError:
        raise InputError(p, "expected one integer µs timestamp per line") from None
    if len(us) < 2:
        raise InputError(p, "fewer than two kernel edges")
    return us * 1000


def run_trace(run_dir: str | Path, device_name: str, field: PowerField, *,
              trailing_idle: bool = False, tz: str = "+01:00") -> Trace:
    """A GPU_Power_Benchmark run as a :class:`Trace`: one ``square_wave`` kernel per edge
    pair of ``timestamps.csv`` and the ``gpudata.csv`` readings of ``field`` (the logs are
    local time UTC+1; poll-stamped, as ``ppwtop attribute`` knows them).  ``trailing_idle``:
    a host call spans from the first kernel to the last edge, so the idle after the last
    kernel is in the window, as a profiler that keeps running records it.  The runs carry
    no trace of their own: the benchmarks and tests that compare with the meter build it
    here."""
    d = Path(run_dir)
    s_ns, e_ns = load_edges(d / "timestamps.csv")
    smi = load_smi_csv(d / "gpudata.csv", tz=tz)
    n = len(s_ns)
    strings = StringTable(["square_wave"])
    trace = Trace(strings=strings, kernels=KernelBatch.from_columns({
        "start_ns": s_ns, "end_ns": e_ns, "device": np.zeros(n, np.int16),
        "stream": np.full(n, 7), "correlation": np.arange(1, n + 1),
        "name_id": np.zeros(n, np.int32)}),
        power=smi.power.take(np.flatnonzero(smi.power.field == int(field))),
        devices=[DeviceInfo(index=0, name=device_name)],
        meta={POLL_TIME_KEY: smi.meta[POLL_TIME_KEY]})
    if trailing_idle:
        trace.apis = ApiBatch.from_columns({
            "start_ns": s_ns[:1] - 1000, "end_ns": load_edge_values(d / "timestamps.csv")[-1:],
            "correlation": np.full(1, -1),
            "name_id": np.full(1, strings.intern("cudaDeviceSynchronize"), np.int32),
            "kind": np.full(1, int(ApiKind.SYNC), np.uint8)})
    return trace
