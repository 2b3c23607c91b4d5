"""Accuracy against a real external power meter (GPU_Power_Benchmark, ElmorLabs PMD = truth).

Owns the real-data rows of ``benchmarks/accuracy.py``: builds a Trace with one kernel per
``[e0,e1]`` interval of ``timestamps.csv`` (host UTC) and the nvidia-smi readings of one field
(``gpudata.csv``, local time UTC+1), runs the engine and compares the kernels' energy with the
meter's energy inside the same intervals.  Also reports the naive methods: nvidia-smi power
integrated over the kernel intervals (what the dataset README quotes as −34…−37 %) and the
time-overlap split of ``benchmarks/naive.py``.

Meter idle power (for the dynamic comparison) is the median meter power over the second half of
every idle gap (the first half still holds the board's decay after a kernel ends); before the
first kernel when there is a single kernel.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.engine import attribute
from attribution.model import PowerField
from benchmarks.naive import naive_split
from ppwtop.importers.pmd import load_pmd, run_trace

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BASE = Path("gpu_power_benchmark/plotting/data")
RUNS: tuple[tuple[str, str, str, str], ...] = (
    # label, folder under BASE, preset, device name
    ("5050/3090", "5050/3090", "rtx3090", "NVIDIA GeForce RTX 3090"),
    ("TR/A100", "Transient_Response/A100_TR", "a100", "NVIDIA A100-PCIE-40GB"),
    ("TR/3090", "Transient_Response/3090_TR", "rtx3090", "NVIDIA GeForce RTX 3090"),
    ("TR/4090", "Transient_Response/4090_TR", "rtx4090", "NVIDIA GeForce RTX 4090"),
)
FIELDS = {"instant": PowerField.INSTANT, "draw": PowerField.DRAW}


def _cum_energy_j(t_ns: I64, power_w: F64, at_ns: I64) -> F64:
    """∫ P dt from the first sample to each ``at_ns`` (sample-and-hold), in J."""
    dt = np.diff(t_ns).astype(np.float64) * 1e-9
    cum = np.r_[0.0, np.cumsum(power_w[:-1] * dt)]
    return np.asarray(np.interp(at_ns.astype(np.float64), t_ns.astype(np.float64), cum),
                      dtype=np.float64)


def _interval_energy_j(t_ns: I64, power_w: F64, s_ns: I64, e_ns: I64) -> float:
    return float((_cum_energy_j(t_ns, power_w, e_ns) - _cum_energy_j(t_ns, power_w, s_ns)).sum())


def _meter_idle_w(t_ns: I64, power_w: F64, s_ns: I64, e_ns: I64) -> float:
    if len(s_ns) > 1:
        g0 = e_ns[:-1] + (s_ns[1:] - e_ns[:-1]) // 2
        g1 = s_ns[1:]
    else:
        g0 = np.array([t_ns[0]], np.int64)
        g1 = np.array([s_ns[0] - 50_000_000], np.int64)
    idx = np.searchsorted(g0, t_ns, side="right") - 1
    ok = (idx >= 0) & (t_ns < g1[np.clip(idx, 0, None)])
    return float(np.median(power_w[ok]))


def real_row(root: Path, label: str, folder: str, *, preset: str, device_name: str,
             field: str, trailing_idle: bool = False) -> dict[str, Any]:
    """One run's row; ``trailing_idle``: the trace runs on to the last edge of
    ``timestamps.csv`` (a host call spanning it, as a profiler that keeps running records),
    so the idle after the last kernel is in the window (``real_trailing_idle.py``)."""
    d = root / BASE / folder
    trace = run_trace(d, device_name, FIELDS[field], trailing_idle=trailing_idle)
    pw = trace.power
    if len(pw) == 0:
        return {"run": label, "field": field, "skipped": f"no power.{field} column"}
    s_ns, e_ns = trace.kernels.start_ns, trace.kernels.end_ns
    meter = load_pmd(d / "PMD_data.bin", d / "PMD_start_ts.txt")
    mt, mp = meter.t_ns.astype(np.int64), meter.power_mw.astype(np.float64) / 1000.0
    t0 = time.perf_counter()
    snap = attribute(trace, gpu=preset)
    wall_s = time.perf_counter() - t0
    k = snap.kernels[0]
    busy_s = float((e_ns - s_ns).sum()) * 1e-9
    m_full = _interval_energy_j(mt, mp, s_ns, e_ns)
    m_idle_w = _meter_idle_w(mt, mp, s_ns, e_ns)
    m_dyn = m_full - m_idle_w * busy_s
    st, sp = pw.t_ns.astype(np.int64), pw.power_mw.astype(np.float64) / 1000.0
    o = np.argsort(st, kind="stable")
    smi_full = _interval_energy_j(st[o], sp[o], s_ns, e_ns)
    p_idle = snap.totals.active_idle_w
    naive_dyn = naive_split(trace, 0, p_idle, FIELDS[field], fresh_only=False).get(
        "kernel:square_wave", 0.0)
    lo, hi = k.dynamic_energy_ci_j

    def rel(x: float, ref: float) -> float:
        return (x - ref) / ref if ref else float("nan")

    return {
        "run": label, "field": field, "gpu": preset, "kernels": len(s_ns), "busy_s": busy_s,
        "meter_kernel_j": m_full, "meter_idle_w": m_idle_w, "meter_dynamic_j": m_dyn,
        "engine_kernel_j": k.energy_j, "engine_dynamic_j": k.dynamic_energy_j,
        "engine_ci_j": [lo, hi], "engine_idle_w": p_idle,
        "engine_full_err": rel(k.energy_j, m_full),
        "engine_dyn_err": rel(k.dynamic_energy_j, m_dyn),
        "ci_covers_meter": bool(lo <= m_dyn <= hi),
        "resolvable": bool(k.resolvable), "why": k.why,
        "smi_integral_err": rel(smi_full, m_full),
        "naive_split_full_err": rel(naive_dyn + p_idle * busy_s, m_full),
        "naive_split_dyn_err": rel(naive_dyn, m_dyn),
        "sensor": f"{snap.gpus[0].sensor.field} T={snap.gpus[0].sensor.period_ms:.0f}ms "
                  f"W={snap.gpus[0].sensor.window_ms:.0f}ms "
                  f"lag={snap.gpus[0].sensor.lag_ms:.1f}ms",
        "wall_s": wall_s,
        "pass": bool(abs(rel(k.energy_j, m_full)) <= 0.05),
    }


def real_rows(root: Path, quick: bool) -> list[dict[str, Any]]:
    """All real-meter rows (the 5050 run only when ``quick``); [] when the data is absent."""
    if not (root / BASE).is_dir():
        return []
    out: list[dict[str, Any]] = []
    runs = RUNS[:1] if quick else RUNS
    for label, folder, preset, name in runs:
        for field in FIELDS:
            try:
                out.append(real_row(root, label, folder, preset=preset, device_name=name,
                                    field=field))
            except Exception as e:  # report, keep the other rows
                out.append({"run": label, "field": field, "skipped": f"{type(e).__name__}: {e}"})
    return out
