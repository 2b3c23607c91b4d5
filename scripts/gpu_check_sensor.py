"""Square-wave sensor characterisation for scripts/gpu_check.py.

Owns the square-wave load runs (a real GPU driven by torch or cupy, or a fake board built from
the same schedule and read through the fake ``libnvidia-ml``), the NVML sampler around them,
the grid-search fit of the sensor's averaging window W and lag D, and the energy-counter
analyses (counter delta against the instant readings' integral and against the on/off
schedule, and a "blind burst" run whose bursts fall between the sensor's windows).

Model fitted: the reading published at timestamp ``t`` is ``low + (high − low) · f(t)`` where
``f`` is the fraction of ``[t − D − W, t − D]`` during which the load was on.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gpu_check_smi as smi
import numpy as np
import numpy.typing as npt
import pynvml

from attribution.model import PowerField, Trace
from ppwtop.collectors.nvml import NvmlSampler

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Schedule = Callable[[int], tuple[I64, I64]]  # run start (ns) -> absolute on intervals

LEAD_NS = 1_000_000_000  # idle before the first burst and after the last
POLL_HZ = 500.0
FAKE_POLL_HZ = 250.0  # still > 2/T; halves the fake's CPU time


@dataclasses.dataclass
class Run:
    """One load run: the on intervals actually produced and what NVML recorded."""

    on_start_ns: I64
    on_end_ns: I64
    trace: Trace  # sampler rows: power (instant/average/samples), energy, clocks
    start_ns: int
    end_ns: int
    samples_buffer: dict[str, Any]
    sampler_meta: dict[str, Any]
    smi_csv: Path | None = None  # the nvidia-smi log beside the run (gpu_check_smi)
    smi_note: str = ""  # why there is none


# --- schedules --------------------------------------------------------------------------------


def square_schedule(half_periods_ms: list[float], seconds_each: float) -> Schedule:
    """On for ``h`` ms, off for ``h`` ms, for ``seconds_each`` per half period ``h``."""

    def make(t0_ns: int) -> tuple[I64, I64]:
        starts: list[I64] = []
        ends: list[I64] = []
        t = t0_ns + LEAD_NS
        for h in half_periods_ms:
            h_ns = round(h * 1e6)
            n = max(int(seconds_each * 1e9 // (2 * h_ns)), 1)
            st = t + np.arange(n, dtype=np.int64) * 2 * h_ns
            starts.append(st)
            ends.append(st + h_ns)
            t += n * 2 * h_ns
        return np.concatenate(starts), np.concatenate(ends)

    return make


def blind_schedule(period_ms: float, window_ms: float, lag_ms: float, *, phase_ns: int,
                   seconds: float, margin_ms: float = 3.0) -> Schedule | None:
    """Bursts between the sensor windows: for publication ``p``, the window is
    ``[p − D − W, p − D]`` so ``(p − D + margin, p + T − D − W − margin)`` is never seen.
    None when the windows leave no such gap."""
    t_ns, d_ns, w_ns = round(period_ms * 1e6), round(lag_ms * 1e6), round(window_ms * 1e6)
    m_ns = round(margin_ms * 1e6)
    length = t_ns - w_ns - 2 * m_ns
    if length < 2_000_000:
        return None

    def make(t0_ns: int) -> tuple[I64, I64]:
        first = t0_ns + LEAD_NS
        k0 = -(-(first - phase_ns) // t_ns)
        n = max(int(seconds * 1e9 // t_ns), 1)
        pub = phase_ns + (k0 + np.arange(n, dtype=np.int64)) * t_ns
        st = pub - d_ns + m_ns
        return st, st + length

    return make


# --- fitting ---------------------------------------------------------------------------------


def on_time_before(t_ns: I64, on_start_ns: I64, on_end_ns: I64) -> I64:
    """Total on time (ns) before each ``t_ns`` (intervals sorted, non-overlapping)."""
    dur = on_end_ns - on_start_ns
    cum = np.concatenate([[0], np.cumsum(dur)]).astype(np.int64)
    i = np.searchsorted(on_start_ns, t_ns, side="right") - 1
    ic = np.clip(i, 0, max(len(dur) - 1, 0))
    part = np.clip(t_ns - on_start_ns[ic], 0, dur[ic]) if len(dur) else np.zeros_like(t_ns)
    return np.where(i < 0, 0, cum[ic] + part).astype(np.int64)


def fit_window_lag(t_ns: I64, power_w: F64, on_start_ns: I64, on_end_ns: I64, *,
                   w_max_ms: float = 160.0, d_max_ms: float = 40.0,
                   step_ms: float = 0.5) -> dict[str, Any]:
    """Grid search for (W, D): least-squares ``low``/``high`` per cell, best RMS residual."""
    t = np.asarray(t_ns, np.int64)
    r = np.asarray(power_w, np.float64)
    if len(t) < 8:
        return {"error": f"only {len(t)} readings to fit"}
    step_ns = round(step_ms * 1e6)
    n_d = int(d_max_ms / step_ms) + 1
    n_w = int(w_max_ms / step_ms)
    offs = np.arange(n_d + n_w, dtype=np.int64) * step_ns  # offsets back from t
    c = on_time_before(t[None, :] - offs[:, None], on_start_ns, on_end_ns).astype(np.float64)
    d_idx = np.arange(n_d)
    w_idx = np.arange(1, n_w + 1)
    w_ns = (w_idx * step_ns).astype(np.float64)
    # frac[d, w, k] = (C(t - D) - C(t - D - W)) / W
    frac = (c[d_idx[:, None]] - c[d_idx[:, None] + w_idx[None, :]]) / w_ns[None, :, None]
    fm = frac.mean(axis=2)
    rm = r.mean()
    fc = frac - fm[..., None]
    var = (fc * fc).sum(axis=2)
    cov = (fc * (r - rm)[None, None, :]).sum(axis=2)
    sst = float(((r - rm) ** 2).sum())
    ok = var > 1e-12
    slope = np.where(ok, cov / np.where(ok, var, 1.0), 0.0)
    sse = np.where(ok, sst - slope * cov, np.inf)
    best = np.unravel_index(int(np.argmin(sse)), sse.shape)
    b = float(slope[best])
    a = float(rm - b * fm[best])
    rms = float(np.sqrt(max(float(sse[best]), 0.0) / len(r)))
    # how sharp the optimum is: cells within 10 % extra SSE of the best
    near = sse <= sse[best] * 1.1 + 1e-9
    d_near, w_near = np.nonzero(near)
    return {
        "window_ms": float((best[1] + 1) * step_ms), "lag_ms": float(best[0] * step_ms),
        "low_w": a, "high_w": a + b, "rms_w": rms, "readings": len(r),
        "swing_w": b, "rms_over_swing": rms / abs(b) if b else None,
        "window_ms_range": [float((w_near.min() + 1) * step_ms),
                            float((w_near.max() + 1) * step_ms)],
        "lag_ms_range": [float(d_near.min() * step_ms), float(d_near.max() * step_ms)],
        "grid": {"w_max_ms": w_max_ms, "d_max_ms": d_max_ms, "step_ms": step_ms},
    }


def period_and_phase(t_ns: I64) -> tuple[float | None, int | None]:
    """Median spacing (ms) of reading timestamps and a publication instant on that grid."""
    t = np.asarray(t_ns, np.int64)
    if len(t) < 3:
        return None, None
    d = np.diff(t)
    period_ns = int(np.median(d))
    if period_ns <= 0:
        return None, None
    k = np.rint((t - t[0]) / period_ns)
    # refine T and phase by a line fit through the timestamps
    slope, icpt = np.polyfit(k, (t - t[0]).astype(np.float64), 1)
    return float(slope / 1e6), int(t[0] + round(icpt))


def fresh(tr: Trace, field: PowerField) -> tuple[I64, F64]:
    p = tr.power.take((tr.power.field == field) & tr.power.fresh).sorted_by("t_ns")
    return p.t_ns, p.power_mw.astype(np.float64) / 1e3


def readings_for_fit(run: Run, field: PowerField) -> tuple[I64, F64, dict[str, Any]]:
    """Fresh readings of ``field`` checked for what their timestamps are.

    Timestamps that advance on (nearly) every poll while the value repeats are query times:
    then only value changes count as new readings.  Timestamps far from the run's host
    CLOCK_REALTIME span are on another clock: returned empty (the fit would be meaningless).
    """
    t, p = fresh(run.trace, field)
    info: dict[str, Any] = {"timestamps": "publication (host realtime)"}
    if len(t) == 0:
        return t, p, {"timestamps": "no readings"}
    mid = int(np.median(t))
    if not run.start_ns - 5_000_000_000 <= mid <= run.end_ns + 5_000_000_000:
        info["timestamps"] = (f"not on the host realtime clock (median {mid} ns vs run "
                              f"{run.start_ns}..{run.end_ns})")
        return t[:0], p[:0], info
    d = np.diff(t)
    same = np.diff(p) == 0
    if len(d) > 50 and float(np.median(d)) < 5e6 and float(same.mean()) > 0.5:
        keep = np.concatenate([[True], ~same])
        t, p = t[keep], p[keep]
        info["timestamps"] = "query time (deduplicated on value changes)"
    return t, p, info


# --- energy ----------------------------------------------------------------------------------


def energy_check(run: Run, low_w: float, high_w: float) -> dict[str, Any]:
    """Counter delta vs the instant readings' integral and vs the schedule model."""
    en = run.trace.energy.sorted_by("t_ns")
    if len(en) < 2:
        return {"error": "no energy-counter rows"}
    a, b = int(en.t_ns[0]), int(en.t_ns[-1])
    dur_s = (b - a) / 1e9
    ctr_j = float(en.energy_mj[-1] - en.energy_mj[0]) / 1e3
    t_i, p_i, _ = readings_for_fit(run, PowerField.INSTANT)
    sel = (t_i >= a) & (t_i <= b)
    inst_j = float(p_i[sel].mean()) * dur_s if sel.any() else None
    on_s = float(on_time_before(np.array([b]), run.on_start_ns, run.on_end_ns)[0]
                 - on_time_before(np.array([a]), run.on_start_ns, run.on_end_ns)[0]) / 1e9
    model_j = low_w * dur_s + (high_w - low_w) * on_s
    upd = np.diff(en.t_ns[np.flatnonzero(np.diff(en.energy_mj) != 0) + 1])
    return {
        "span_s": dur_s, "on_s": on_s, "counter_j": ctr_j, "instant_integral_j": inst_j,
        "schedule_model_j": model_j,
        "counter_over_instant": ctr_j / inst_j if inst_j else None,
        "counter_over_model": ctr_j / model_j if model_j else None,
        "counter_update_ms": float(np.median(upd) / 1e6) if len(upd) else None,
    }


def blind_verdict(run: Run, low_w: float, high_w: float) -> dict[str, Any]:
    """Bursts the windows never see: does the counter still count them?"""
    out = energy_check(run, low_w, high_w)
    if "error" in out:
        return out
    extra_model = (high_w - low_w) * out["on_s"]
    extra_ctr = out["counter_j"] - low_w * out["span_s"]
    inst = out["instant_integral_j"]
    extra_inst = None if inst is None else inst - low_w * out["span_s"]
    seen = extra_ctr / extra_model if extra_model > 0 else None
    out.update({
        "burst_energy_model_j": extra_model, "burst_energy_counter_j": extra_ctr,
        "burst_energy_instant_j": extra_inst, "counter_sees_fraction": seen,
        "instant_sees_fraction": (extra_inst / extra_model
                                  if extra_inst is not None and extra_model > 0 else None),
        "placement_ok": (extra_inst is not None and extra_model > 0
                         and abs(extra_inst) < 0.2 * extra_model),
        "verdict": ("unknown" if seen is None else
                    "integrates all time" if seen > 0.7 else
                    "sensor windows only" if seen < 0.3 else "partial"),
    })
    return out


# --- rigs ----------------------------------------------------------------------------------


def _samples_buffer(handle: Any) -> dict[str, Any]:
    """Depth and spacing of ``nvmlDeviceGetSamples`` from the beginning of its buffer."""
    try:
        _, smp = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    except pynvml.NVMLError as e:
        return {"error": str(e)}
    ts = np.array(sorted(int(s.timeStamp) for s in smp), np.int64)
    d = np.diff(ts)
    return {"depth": len(ts),
            "period_ms": float(np.median(d) / 1e3) if len(d) else None,
            "span_ms": float((ts[-1] - ts[0]) / 1e3) if len(ts) > 1 else None}


class RealRig:
    """Drives a real GPU with a matmul loop (torch, else cupy, else a PTX kernel through the
    CUDA driver API); burst edges in host CLOCK_REALTIME ns around the synchronise."""

    def __init__(self, smi_prefix: Path, device: int = 0) -> None:
        self.device = device
        self.kind = ""
        self.smi_prefix = smi_prefix  # where the nvidia-smi logs go (gpu_check_smi.new_path)
        self._mm: Callable[[], Any]
        self._sync: Callable[[], Any]
        why: list[str] = []
        try:
            self._torch(device)
        except ImportError as e:
            why.append(f"torch: {e}")
            try:
                self._cupy(device)
            except ImportError as e2:
                why.append(f"cupy: {e2}")
                from gpu_check_cuda import DriverLoad

                try:
                    load = DriverLoad(device, launch_ms=0.25)
                except Exception as e3:
                    raise RuntimeError(f"no GPU load available ({'; '.join(why)}; CUDA "
                                       f"driver: {type(e3).__name__}: {e3})") from e3
                self._mm, self._sync, self.kind = load.launch, load.sync, load.kind
        self._mm()
        self._sync()

    def _torch(self, device: int) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch is installed but torch.cuda is not available")
        dev = torch.device("cuda", device)
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        self._mm = lambda: torch.matmul(a, b)
        self._sync = torch.cuda.synchronize
        self.kind = f"torch {torch.__version__} bf16 4096² matmul"

    def _cupy(self, device: int) -> None:
        import cupy

        with cupy.cuda.Device(device):
            a = cupy.random.rand(4096, 4096, dtype=cupy.float32)
        self._mm = lambda: a @ a
        self._sync = cupy.cuda.Device(device).synchronize
        self.kind = f"cupy {cupy.__version__} fp32 4096² matmul"

    def _busy_until(self, end_ns: int) -> None:
        while time.time_ns() < end_ns:
            for _ in range(4):
                self._mm()
            self._sync()

    def run(self, schedule: Schedule, deadline: float) -> Run:
        s = NvmlSampler([self.device], poll_hz=POLL_HZ, clock_hz=5.0, samples_hz=2.0)
        s.open()
        s.start()
        smi_path = smi.new_path(self.smi_prefix)
        log = smi.start(self.device, smi_path)
        try:
            t0 = time.time_ns()
            st, en = schedule(t0)
            got_s, got_e = [], []
            for a, b in zip(st.tolist(), en.tolist(), strict=True):
                if time.monotonic() > deadline:
                    break
                while time.time_ns() < a:
                    time.sleep(min(max((a - time.time_ns()) / 1e9 - 0.002, 0.0), 0.05))
                on0 = time.time_ns()
                self._busy_until(b)
                got_s.append(on0)
                got_e.append(time.time_ns())
            time.sleep(min(LEAD_NS / 1e9, max(deadline - time.monotonic(), 0.0)))
            t1 = time.time_ns()
        finally:
            s.stop()
            note = smi.stop(log)
            if note:
                smi_path.unlink(missing_ok=True)
        handle = s._devices[0].handle if s._devices else None
        buf = _samples_buffer(handle) if handle is not None else {"error": "no device"}
        tr = s.drain()
        meta = tr.meta.get("nvml", {})
        s.close()
        return Run(np.array(got_s, np.int64), np.array(got_e, np.int64), tr, t0, t1, buf, meta,
                   smi_csv=None if note else smi_path, smi_note=note)


class FakeRig:
    """The same schedule on a fake board (sensor from the simulator's h200 preset), read
    through the fake libnvidia-ml on a virtual clock (no wall time passes)."""

    T0_NS = 1_768_471_200_000_000_000

    def __init__(self, period_ms: float, window_ms: float, lag_ms: float, *, low_w: float,
                 high_w: float, smi_prefix: Path, phase_offset_ms: float = 37.3) -> None:
        self.period_ms, self.window_ms, self.lag_ms = period_ms, window_ms, lag_ms
        self.low_w, self.high_w = low_w, high_w
        self.phase_ns = self.T0_NS + round(phase_offset_ms * 1e6)
        self.kind = "fake board"
        self._start = self.T0_NS
        self.smi_prefix = smi_prefix  # where the nvidia-smi logs go (gpu_check_smi.new_path)

    def truth(self) -> dict[str, float]:
        return {"period_ms": self.period_ms, "window_ms": self.window_ms,
                "lag_ms": self.lag_ms, "low_w": self.low_w, "high_w": self.high_w}

    @contextmanager
    def _lib(self, st: I64, en: I64, t0: int, t1: int) -> Iterator[Any]:
        from ppwtop.fakes.nvml_board import BoardModel, VirtualClock
        from ppwtop.fakes.nvml_lib import FakeNvmlLib, installed

        edges = np.concatenate([[t0 - 2 * LEAD_NS], np.ravel(np.column_stack([st, en])),
                                [t1 + LEAD_NS]]).astype(np.int64)
        power = np.full(len(edges), self.low_w)
        power[1:-1:2] = self.high_w
        board = BoardModel(name="NVIDIA H200", uuid="GPU-fake-gpu-check", t_ns=edges,
                           power_w=power, period_ms=self.period_ms, window_ms=self.window_ms,
                           lag_ms=self.lag_ms, idle_w=self.low_w, phase_ns=self.phase_ns)
        clock = VirtualClock(t0)
        with installed(FakeNvmlLib([board], clock=clock)) as lib:
            yield lib, clock

    def run(self, schedule: Schedule, deadline: float) -> Run:
        t0 = self._start
        st, en = schedule(t0)
        t1 = int(en[-1]) + LEAD_NS
        self._start = t1 + LEAD_NS  # the next run starts later on the same board
        with self._lib(st, en, t0, t1) as (_, clock):
            s = NvmlSampler([0], poll_hz=FAKE_POLL_HZ, clock_hz=5.0, samples_hz=2.0,
                            clock=clock)
            s.open()
            step_ns = round(1e9 / FAKE_POLL_HZ)
            n_polls = (t1 - t0) // step_ns
            done = 0
            for done in range(1, n_polls + 1):
                clock.advance(step_ns)
                s.poll_once()
                if done % 500 == 0 and time.monotonic() > deadline:
                    break
            end = int(clock())
            buf = _samples_buffer(s._devices[0].handle)
            tr = s.drain()
            s.close()
        keep = en <= end
        pub = tr.power.take((tr.power.field == PowerField.INSTANT) & tr.power.fresh
                            ).sorted_by("t_ns")
        smi_path = smi.new_path(self.smi_prefix)
        smi.write_fake(pub.t_ns, pub.power_mw, t0, end, smi_path)
        return Run(st[keep], en[keep], tr, t0, end, buf, tr.meta.get("nvml", {}),
                   smi_csv=smi_path)
