"""The sections of scripts/gpu_check.py, each ``fn(ctx) -> JSON-able dict``.

Owns what each section measures and how it is summarised; :data:`TABLE` maps a section name
to its function and its share of the time budget.  A section returns ``{"skipped": why}``
when it cannot run here, raises on failure (the runner records the error) and watches
``ctx.section_deadline`` in its loops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import pathlib
import platform
import time
from collections.abc import Callable
from typing import Any

import gpu_check_sensor as gs
import gpu_check_smi as smi
import numpy as np
import pynvml

from attribution.engine.lag_refine import LAG_SLACK_MS
from attribution.engine.timebase import LAG_COARSE_MS, TAU_GRID_MS
from attribution.model import DeviceInfo, KernelBatch, PowerField, Trace
from attribution.presets import PRESETS, get_preset

HALF_PERIODS_MS = [37.0, 61.0, 173.0]  # incommensurate with a 100 ms (or 20 ms) sensor period
SIM_SCENARIO = "varied_mix"
SIM_GPU = "h200"


@dataclasses.dataclass
class Context:
    fake: bool
    device: int
    deadline: float
    logs_prefix: pathlib.Path  # raw logs go to <prefix>-smi-<k>.csv, beside the findings
    section_deadline: float = 0.0
    rig: Any = None
    run: gs.Run | None = None
    fit: dict[str, Any] | None = None
    stack: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)
    _fake_nvml: bool = False

    def left_s(self) -> float:
        return max(min(self.section_deadline, self.deadline) - time.monotonic(), 0.0)

    def fake_nvml(self) -> None:
        """Install (once) a fake libnvidia-ml replaying a simulator run on the wall clock."""
        if not self.fake or self._fake_nvml:
            return
        from attribution.sim import simulate
        from ppwtop.fakes.nvml_board import board_from_sim
        from ppwtop.fakes.nvml_lib import FakeNvmlLib, installed

        res = simulate(SIM_SCENARIO, SIM_GPU, seconds=15.0, seed=1)
        board = board_from_sim(res)
        sim0 = int(board.t_ns[0]) + 2_000_000_000
        wall0 = time.time_ns()

        def clock() -> int:
            return sim0 + (time.time_ns() - wall0)

        self.sim_clock = clock
        self.stack.enter_context(installed(FakeNvmlLib([board], clock=clock)))
        self._fake_nvml = True

    def close(self) -> None:
        self.stack.close()


# --- 1. environment --------------------------------------------------------------------------


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        v = fn(*args)
        return v.decode() if isinstance(v, bytes) else v
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def environment(ctx: Context) -> dict[str, Any]:
    ctx.fake_nvml()
    out: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        out["nvml_error"] = f"{type(e).__name__}: {e}"
        out["gpus"] = []
    else:
        try:
            out["driver_version"] = _try(pynvml.nvmlSystemGetDriverVersion)
            out["cuda_driver_version"] = _try(pynvml.nvmlSystemGetCudaDriverVersion_v2)
            out["nvml_version"] = _try(pynvml.nvmlSystemGetNVMLVersion)
            gpus = []
            for i in range(int(pynvml.nvmlDeviceGetCount())):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                gpus.append({"index": i, "name": _try(pynvml.nvmlDeviceGetName, h),
                             "uuid": _try(pynvml.nvmlDeviceGetUUID, h)})
            out["gpus"] = gpus
        finally:
            pynvml.nvmlShutdown()
    libs: dict[str, Any] = {}
    for mod in ("torch", "cupy", "cupti", "pynvml", "numpy"):
        try:
            m = importlib.import_module(mod)
            libs[mod] = str(getattr(m, "__version__", "present"))
        except Exception as e:
            libs[mod] = None if isinstance(e, ImportError) else f"{type(e).__name__}: {e}"
    if libs.get("torch"):
        import torch

        libs["torch_cuda"] = torch.version.cuda
        libs["torch_cuda_available"] = bool(torch.cuda.is_available())
    out["libraries"] = libs
    if not ctx.fake:
        from gpu_check_bare import nvidia_smi, smi_poll

        out["nvidia_smi"] = nvidia_smi()
        out["smi_poll"] = smi_poll(3.0)
    names = [g["name"] for g in out["gpus"]]
    out["summary"] = (f"driver {out.get('driver_version')}, {len(names)} GPU(s) {names}, "
                      f"torch {libs.get('torch')}, cupy {libs.get('cupy')}")
    if "nvml_error" in out:  # recorded above, with the libraries and nvidia-smi
        out["error"] = out["nvml_error"]
    return out


# --- 2. nvml -----------------------------------------------------------------------------------


def nvml(ctx: Context) -> dict[str, Any]:
    from ppwtop.collectors.nvml import characterize

    ctx.fake_nvml()
    seconds = min(10.0 if not ctx.fake else 1.0, max(ctx.left_s() - 2.0, 0.5))
    clock = ctx.sim_clock if ctx.fake else time.time_ns
    out = characterize(seconds=seconds, poll_hz=200.0, devices=[ctx.device], clock=clock)
    dev = out["devices"][0] if out["devices"] else {}
    lat = {k.split(":", 1)[1]: round(v["wall_us"], 1) for k, v in out["latency"].items()}
    out["summary"] = (f"instant period {dev.get('instant_period_ms')} ms, fresh fraction "
                      f"{dev.get('instant_fresh_fraction')}, call wall µs {lat}")
    return out


# --- 3. sensor -----------------------------------------------------------------------------


def _rig(ctx: Context) -> Any:
    if ctx.rig is None:
        if ctx.fake:
            from attribution.presets import get_preset
            from attribution.sim import simulate

            truth = simulate(SIM_SCENARIO, SIM_GPU, seconds=2.0, seed=1).truth
            sensor = truth.sensors["instant"]
            preset = get_preset(SIM_GPU)
            ctx.rig = gs.FakeRig(float(sensor["period_ms"]), float(sensor["window_ms"]),
                                 float(sensor["lag_ms"]), low_w=preset.active_idle_w,
                                 high_w=0.8 * preset.tdp_w, smi_prefix=ctx.logs_prefix)
        else:
            ctx.rig = gs.RealRig(ctx.logs_prefix, ctx.device)
    return ctx.rig


def sensor(ctx: Context) -> dict[str, Any]:
    rig = _rig(ctx)
    each_s = 5.0 if ctx.fake else min(20.0, max((ctx.left_s() - 8.0) / 3, 2.0))
    run = rig.run(gs.square_schedule(HALF_PERIODS_MS, each_s), ctx.section_deadline)
    ctx.run = run
    t_i, p_i, ts_info = gs.readings_for_fit(run, PowerField.INSTANT)
    period_ms, phase_ns = gs.period_and_phase(t_i)
    out: dict[str, Any] = {"load": rig.kind, "half_periods_ms": HALF_PERIODS_MS,
                           "seconds_each": each_s, "bursts": len(run.on_start_ns),
                           "instant_period_ms": period_ms, "instant_phase_ns": phase_ns,
                           "instant_readings": len(t_i), "instant_timestamps": ts_info,
                           "samples_buffer": run.samples_buffer,
                           "sampler": {k: run.sampler_meta.get(k) for k in
                                       ("notes", "errors", "polls", "overruns",
                                        "poll_wall_us_mean")}}
    if ctx.fake:
        out["fake_board"] = rig.truth()
    fit = gs.fit_window_lag(t_i, p_i, run.on_start_ns, run.on_end_ns)
    out["fit_instant"] = fit
    per: dict[str, Any] = {}
    for h in HALF_PERIODS_MS:  # one fit per square wave (bursts of that length)
        m = np.abs((run.on_end_ns - run.on_start_ns) / 1e6 - h) < max(0.2 * h, 3.0)
        if m.sum() >= 4:
            lo, hi = int(run.on_start_ns[m][0]) - 200_000_000, int(run.on_end_ns[m][-1])
            sel = (t_i >= lo) & (t_i <= hi + 200_000_000)
            f = gs.fit_window_lag(t_i[sel], p_i[sel], run.on_start_ns, run.on_end_ns)
            per[f"{h:g}ms"] = {k: f.get(k) for k in ("window_ms", "lag_ms", "rms_w", "error")}
    out["fit_per_wave"] = per
    t_s, p_s, _ = gs.readings_for_fit(run, PowerField.SAMPLES)
    if len(t_s) >= 8:
        out["samples_period_ms"] = gs.period_and_phase(t_s)[0]
        fs = gs.fit_window_lag(t_s, p_s, run.on_start_ns, run.on_end_ns)
        out["fit_samples"] = {k: fs.get(k) for k in ("window_ms", "lag_ms", "rms_w", "error")}
    if "error" not in fit:
        ctx.fit = {**fit, "period_ms": period_ms, "phase_ns": phase_ns}
        out["summary"] = (f"T {period_ms:.2f} ms, W {fit['window_ms']} ms, D {fit['lag_ms']} ms"
                          f", low {fit['low_w']:.0f} W, high {fit['high_w']:.0f} W, rms "
                          f"{fit['rms_w']:.1f} W over {fit['readings']} readings")
    else:
        out["summary"] = f"fit failed: {fit['error']}"
    return out


# --- 3b. the nvidia-smi log's publish grid --------------------------------------------------


def poll_grid(ctx: Context) -> dict[str, Any]:
    """What ``ppwtop attribute --power smi.csv`` makes of an nvidia-smi log taken beside the
    sensor run, against the publish times NVML reports (docs/attribution.md, "Timebase")."""
    run = ctx.run
    if run is None:
        return {"skipped": "no sensor run"}
    if run.smi_csv is None:
        return {"skipped": f"no nvidia-smi log beside the sensor run: {run.smi_note}"}
    from ppwtop.importers.smi_csv import load_smi_csv

    t_pub, _, info = gs.readings_for_fit(run, PowerField.INSTANT)
    stamps = str(info.get("timestamps", ""))
    if not stamps.startswith("publication"):
        return {"skipped": f"NVML's instant timestamps are {stamps}: no publish times"}
    log = load_smi_csv(run.smi_csv, tz="+00:00" if ctx.fake else None)
    out = smi.check(log, t_pub)
    out["smi_csv"] = run.smi_csv.name
    if "error" in out:
        return out
    out["summary"] = (f"{out['readings']} readings: publish intervals "
                      f"{out['poll_interval_ms_median']:.1f} -> {out['narrowed_ms_median']:.1f} ms,"
                      f" {out['publish_inside_fraction']:.1%} hold NVML's publish time; period "
                      f"{out['grid_period_ms']:.2f} ms (NVML {out['nvml_period_ms']:.2f}); "
                      + {True: "polls locked to the sensor", False: "polls free",
                         None: "polls not judged"}[out["polls_locked"]])
    if out.get("placed_delay_ms_quartiles"):
        d25, _, d75 = out["placed_delay_ms_quartiles"]
        out["summary"] += (f"; {out['delay_flip_share']:.1%} placed back a poll gap, delay "
                           f"after placing IQR {d75 - d25:.1f} ms")
    if out.get("grid_delay_ms_quartiles"):
        g25, _, g75 = out["grid_delay_ms_quartiles"]
        out["summary"] += f"; moved onto the sensor's grid, delay IQR {g75 - g25:.1f} ms"
    return out


# --- 4. energy counter ----------------------------------------------------------------------


def energy(ctx: Context) -> dict[str, Any]:
    if ctx.run is None or ctx.fit is None:
        return {"skipped": "no sensor run/fit to compare against"}
    f = ctx.fit
    out: dict[str, Any] = {"square_wave": gs.energy_check(ctx.run, f["low_w"], f["high_w"])}
    sch = (gs.blind_schedule(f["period_ms"], f["window_ms"], f["lag_ms"], phase_ns=f["phase_ns"],
                             seconds=4.0 if ctx.fake else min(15.0, ctx.left_s() - 4.0))
           if f.get("period_ms") and f.get("phase_ns") else None)
    if sch is None:
        out["blind_bursts"] = {"skipped": "the sensor windows leave no unseen gap"}
    else:
        run = _rig(ctx).run(sch, ctx.section_deadline)
        out["blind_bursts"] = gs.blind_verdict(run, f["low_w"], f["high_w"])
    sq, bb = out["square_wave"], out["blind_bursts"]
    out["summary"] = (f"counter/instant {sq.get('counter_over_instant')}, counter/schedule "
                      f"{sq.get('counter_over_model')}; blind bursts: "
                      f"{bb.get('verdict', bb.get('skipped', bb.get('error')))}")
    return out


# --- 5. cupti ------------------------------------------------------------------------------


def _collect(lib: Any, work: Callable[[], None]) -> Trace:
    from ppwtop.collectors import cupti_decode as cd
    from ppwtop.collectors.cupti_raw import RawBuffer, RawCollector

    got: list[RawBuffer] = []
    def sink(b: RawBuffer) -> bool:
        got.append(b)
        return True

    col = RawCollector(lib, sink)
    col.start(flush_period_s=None)
    try:
        work()
    finally:
        col.stop()
    dec = cd.Decoder()
    parts = []
    for b in got:
        dec.add_names(b.names)
        parts.append(dec.decode(b.data, dropped_records=b.dropped_records))
    tr = Trace(strings=dec.strings)
    tr.kernels = KernelBatch.concat(p.kernels for p in parts)
    if parts:
        tr.copies = type(parts[0].copies).concat(p.copies for p in parts)
        tr.memsets = type(parts[0].memsets).concat(p.memsets for p in parts)
    tr.meta["stats"] = {"buffers": col.stats.buffers, "bytes": col.stats.bytes,
                        "dropped_records": col.stats.dropped_records,
                        "callback_errors": col.stats.callback_errors}
    tr.apis = type(parts[0].apis).concat(p.apis for p in parts) if parts else tr.apis
    return tr


def launch_matching(tr: Trace) -> dict[str, list[int]]:
    """Per launch-like call name (``live_pending.ISSUING``): [calls whose correlation id a
    kernel, copy or memset record carries, calls]. The live engine waits on the calls whose
    record has not come; a name with calls and no matches (say driver calls the runtime made
    under ids of their own) would be given up on, and after a few not waited on
    (docs/attribution.md, "Settled time")."""
    from attribution.engine.live_pending import ISSUING, item_correlations

    a = tr.apis
    on = np.isin(a.kind, ISSUING)
    got = np.isin(a.correlation[on], item_correlations(tr))
    ids, inv = np.unique(a.name_id[on], return_inverse=True)
    calls = np.bincount(inv, minlength=len(ids))
    matched = np.bincount(inv, weights=got, minlength=len(ids)).astype(np.int64)
    return {(tr.strings[i] if i >= 0 else "?"): [int(m), int(c)]
            for i, m, c in zip(ids.tolist(), matched.tolist(), calls.tolist(), strict=True)}


def cupti(ctx: Context) -> dict[str, Any]:
    try:
        importlib.import_module("cupti")
    except ImportError:
        return {"skipped": "cupti-python not installed"}
    if ctx.fake:
        try:
            from ppwtop.fakes.cupti_lib import FakeCuptiLib
        except ImportError:
            return {"skipped": "fake not available"}
        from attribution.sim import simulate

        src = simulate("launch_bound", SIM_GPU, seconds=1.0, seed=2).trace
        lib = FakeCuptiLib()
        tr = _collect(lib, lambda: lib.add_trace(src))
        same_t = (len(tr.kernels) == len(src.kernels)
                  and bool(np.array_equal(np.sort(tr.kernels.start_ns),
                                          np.sort(src.kernels.start_ns))))
        return {"launched": len(src.kernels), "kernels_decoded": len(tr.kernels),
                "apis_launched": len(src.apis), "apis_decoded": len(tr.apis),
                "launch_calls_matched": launch_matching(tr),
                "timestamps_match": same_t, "stats": tr.meta["stats"],
                "summary": f"{len(tr.kernels)}/{len(src.kernels)} kernels decoded, "
                           f"timestamps match {same_t}"}
    try:
        import torch
    except ImportError:
        return {"skipped": "torch not installed (needed for the workload)"}
    from ppwtop.collectors.cupti_raw import load_libcupti

    n = 200
    x = torch.zeros(1 << 16, device=f"cuda:{ctx.device}")
    torch.cuda.synchronize()

    def work() -> None:
        for _ in range(n):
            x.add_(1.0)
        torch.cuda.synchronize()

    t0 = time.time_ns()
    tr = _collect(load_libcupti(), work)
    t1 = time.time_ns()
    k = tr.kernels
    names = [tr.strings[i] if i >= 0 else "?" for i in k.name_id.tolist()]
    in_run = int(((k.start_ns >= t0) & (k.end_ns <= t1)).sum()) if len(k) else 0
    matching = launch_matching(tr)
    unmatched = {name: t - m for name, (m, t) in matching.items() if m < t}
    return {"launched": n, "kernels_decoded": len(k), "kernels_in_host_window": in_run,
            "kernel_names": sorted(set(names))[:10], "apis_decoded": len(tr.apis),
            "launch_calls_matched": matching,
            "stats": tr.meta["stats"], "host_window_ns": [t0, t1],
            "summary": f"{len(k)} kernels decoded for {n} launches ({in_run} inside the host "
                       "window: CUPTI timestamps on the host clock if equal); launch calls "
                       f"without a GPU record: {unmatched or 'none'}"}


# --- 6. overhead --------------------------------------------------------------------------


def overhead(ctx: Context) -> dict[str, Any]:
    agent = importlib.import_module("ppwtop.agent")
    start = getattr(agent, "start", None)
    if not callable(start):
        return {"skipped": "agent not built (issue #4)"}
    if ctx.fake:
        return {"skipped": "no launch-bound workload without a GPU"}
    import torch

    x = torch.zeros(256, device=f"cuda:{ctx.device}")

    def rate(seconds: float) -> float:
        torch.cuda.synchronize()
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            for _ in range(100):
                x.add_(1.0)
            n += 100
        torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)

    import threading

    from ppwtop.transport.endpoint import FrameReader, Listener

    sec = max(min(ctx.left_s() / 5, 5.0), 0.5)
    base = rate(sec)
    frames_in = [0]
    with Listener() as lis:  # a ppwtop-side reader that drains what the agent ships
        start(lis.path, "cupti")
        conn = lis.accept(10.0)
        done = threading.Event()

        def drain() -> None:
            if conn is None:
                return
            r = FrameReader(conn)
            while not done.is_set() and not r.eof:
                frames_in[0] += len(r.read(0.1))

        th = threading.Thread(target=drain, daemon=True)
        th.start()
        try:
            with_agent = rate(sec)
        finally:
            stop = getattr(agent, "stop", None)
            if callable(stop):
                stop()
            done.set()
            th.join(5.0)
    base2 = rate(sec)
    slow = 1 - with_agent / ((base + base2) / 2)
    return {"launches_per_s": {"without": base, "with": with_agent, "without_after": base2},
            "slowdown": slow, "target": 0.02, "frames_received": frames_in[0],
            "summary": f"slowdown {slow * 100:.2f} % (target ≤ 2 %)"}


# --- 7. attribute -------------------------------------------------------------------------


def attribute(ctx: Context) -> dict[str, Any]:
    if ctx.run is None:
        return {"skipped": "no sensor run"}
    from attribution.engine import attribute as attribute_trace

    run = ctx.run
    tr = Trace(power=run.trace.power, energy=run.trace.energy, clocks=run.trace.clocks)
    name = tr.strings.intern("square_wave_on")
    n = len(run.on_start_ns)
    tr.kernels = KernelBatch.from_columns({
        "start_ns": run.on_start_ns, "end_ns": run.on_end_ns, "device": np.zeros(n),
        "stream": np.full(n, 7), "correlation": np.arange(1, n + 1),
        "name_id": np.full(n, name)})
    tr.devices = [DeviceInfo(0, "NVIDIA H200", "GPU-gpu-check")] if ctx.fake else [
        DeviceInfo(0, d.name, d.uuid) for d in run.trace.devices[:1]]
    snap = attribute_trace(tr, gpu=SIM_GPU if ctx.fake else None, n_boot=50)
    tot = snap.totals
    en = run.trace.energy.sorted_by("t_ns")
    lo, hi = int(run.on_start_ns[0]), int(run.on_end_ns[-1])
    e_at = np.interp([lo, hi], en.t_ns.astype(np.float64), en.energy_mj.astype(np.float64))
    ctr_j = float(e_at[1] - e_at[0]) / 1e3
    out: dict[str, Any] = {
        "totals": dataclasses.asdict(tot), "counter_over_kernels_span_j": ctr_j,
        "kernel_over_counter": tot.kernel_energy_j / ctr_j if ctr_j else None,
        "kernel_rows": [dataclasses.asdict(k) for k in snap.kernels][:3],
    }
    if ctx.fit is not None:
        on_s = float((run.on_end_ns - run.on_start_ns).sum()) / 1e9
        out["kernel_model_j"] = ctx.fit["high_w"] * on_s
        out["kernel_dynamic_model_j"] = (ctx.fit["high_w"] - ctx.fit["low_w"]) * on_s
    # the board table's active idle against what this board shows (the H200's is assumed to
    # be the H100's): the engine's P_idle, the square wave's low level, and the engine's
    # lines on it ("kept, as the readings pin it" / "fit is degenerate" / "busy throughout")
    table = get_preset(snap.gpus[0].model) if snap.gpus and snap.gpus[0].model in PRESETS \
        else None
    out["active_idle"] = {
        "table_w": table.active_idle_w if table is not None else None,
        "engine_w": tot.active_idle_w,
        "square_wave_low_w": ctx.fit["low_w"] if ctx.fit is not None else None,
        "engine_lines": [w for w in snap.warnings if "idle" in w][:4],
        "kernel_why": snap.kernels[0].why if snap.kernels else None,
    }
    # the board's response time constant as fitted on its grid: one at the grid's last point
    # (timebase.TAU_GRID_MS) says the board is slower than the grid reaches
    tau_ms = snap.meta.get("response_ms", {}).get("0")
    out["response"] = {"response_ms": tau_ms, "grid_ms": list(TAU_GRID_MS),
                       "at_grid_edge": tau_ms is not None and tau_ms >= TAU_GRID_MS[-1]}
    # the engine's own lag uncertainty before its 0.5 ms floor: whether the floor may come
    # down to 0.25 ms rests on it (docs/accuracy.md, "Where it fails" 8); the floor stands
    # for timing a real board may have and the simulator does not (there: 0.03-0.15 ms)
    profile = snap.meta.get("lag_profile_ms", {}).get("0")
    out["lag_slack"] = {"measured_ms": profile, "floor_ms": LAG_SLACK_MS,
                        "ceiling_ms": LAG_COARSE_MS}
    lag_txt = "none resolved" if profile is None else f"{profile:.3f} ms"
    out["summary"] = (f"kernel {tot.kernel_energy_j:.1f} J, idle {tot.idle_energy_j:.1f} J, "
                      f"total {tot.energy_j:.1f} J vs counter {ctr_j:.1f} J over the bursts; "
                      f"closure {tot.closure_error:+.3f}; lag uncertainty without its floor "
                      f"{lag_txt}")
    return out


TABLE: dict[str, tuple[Callable[[Context], dict[str, Any]], float]] = {
    "environment": (environment, 0.03),
    "nvml": (nvml, 0.06),
    "sensor": (sensor, 0.40),
    "poll_grid": (poll_grid, 0.03),
    "energy": (energy, 0.15),
    "cupti": (cupti, 0.08),
    "overhead": (overhead, 0.12),
    "attribute": (attribute, 0.10),
}
