"""The simulator: workloads, true board power, NVML sensor models; ground truth by construction.

``simulate(scenario, gpu, seconds, seed)`` returns a :class:`SimResult`: the :class:`Trace` a
profiler plus an NVML sampler would have recorded, the :class:`Truth` behind it and the true
board power on a 0.5 ms grid.  Pure numpy/scipy; seeded and deterministic.

``trace.power`` holds two streams per field: the sensor's published readings (``fresh=True``,
``t_ns`` = publication time) and an nvidia-smi ``-lms 10`` poll stream that repeats the latest
published reading at each poll (``fresh=False`` on every poll row, so filtering on ``fresh``
gives each published reading exactly once).
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from attribution.model import (
    F64,
    I64,
    ApiBatch,
    ApiKind,
    CopyBatch,
    CopyKind,
    DeviceInfo,
    KernelBatch,
    MarkerBatch,
    MarkerKind,
    MemKind,
    Trace,
)
from attribution.presets import get_preset
from attribution.sim.power import (
    CONSUMER,
    DATACENTER,
    GRID_DT_NS,
    binned_dynamic_w,
    boost_tail_w,
    drawn_consumer,
    drawn_datacenter,
    respond,
)
from attribution.sim.scenarios import SCENARIOS, STREAM2_CLASS, ScenarioSpec
from attribution.sim.sensor import SensorSetup, clocks, sense, setup
from attribution.sim.truth import Truth
from attribution.sim.workload import GAP_CAUSES, GAP_STALL, Timeline, build_timeline

__all__ = ["DEFAULT_WORKLOAD_SEED", "DEVICE_NAMES", "SCENARIOS", "SimResult", "Truth", "simulate"]

T0_NS = 1_768_471_200_000_000_000  # 2026-01-15T10:00:00Z
LEAD_NS = 2_500_000_000  # grid before the window (the 1 s average field needs history)
TRAIL_NS = 1_500_000_000
PID = 31337
DEFAULT_WORKLOAD_SEED = 0  # the workload every seed of a scenario realises unless told otherwise

DEVICE_NAMES = {
    "v100": ("Tesla V100-SXM2-32GB", 34_089_730_048, 80, "7.0"),
    "a100": ("NVIDIA A100-SXM4-80GB", 85_031_714_816, 108, "8.0"),
    "h100": ("NVIDIA H100 80GB HBM3", 85_045_477_376, 132, "9.0"),
    "h200": ("NVIDIA H200", 150_110_011_392, 132, "9.0"),
    "rtx3090": ("NVIDIA GeForce RTX 3090", 25_438_126_080, 82, "8.6"),
    "rtx4090": ("NVIDIA GeForce RTX 4090", 25_393_692_672, 128, "8.9"),
}
_API_NAMES = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemcpy", "cudaDeviceSynchronize")
_API_KINDS = (ApiKind.LAUNCH, ApiKind.MEMCPY, ApiKind.MEMCPY, ApiKind.SYNC)
_COPY_KIND = {"HtoD": CopyKind.HTOD, "DtoH": CopyKind.DTOH}
_MEM = {"pinned": MemKind.PINNED, "pageable": MemKind.PAGEABLE}
STREAM1, STREAM2 = 7, 13


@dataclasses.dataclass(frozen=True, slots=True)
class SimResult:
    trace: Trace
    truth: Truth
    true_power: tuple[I64, F64]  # bin start times (ns, host clock) and mean power in each bin


def simulate(scenario: str = "varied_mix", gpu: str | None = None, seconds: float = 90.0,
             seed: int = 0, workload_seed: int | None = None, *,
             spec: ScenarioSpec | None = None) -> SimResult:
    """Simulate ``seconds`` of a scenario on a GPU preset (default: the scenario's own).

    ``workload_seed`` (default :data:`DEFAULT_WORKLOAD_SEED`) draws the workload definition:
    the phase schedule and each phase's kernel-class mix.  ``seed`` draws one realisation of
    it: per-instance class picks, durations and ΔP, gaps, copies, the sensor's phase, gain and
    jitter, the CUPTI clock offset.  Two seeds of one workload are the same job re-run.

    ``spec`` replaces the named scenario's specification (its random streams stay those of
    ``scenario``): a variant of a scenario with one knob changed, as the diff calibration
    injects regressions.
    """
    if scenario not in SCENARIOS:
        raise KeyError(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
    if not seconds >= 1.0:
        raise ValueError(f"seconds must be >= 1, got {seconds}")
    spec = SCENARIOS[scenario] if spec is None else dataclasses.replace(spec, name=scenario)
    preset = get_preset(gpu or spec.default_gpu)
    rng = np.random.default_rng([seed, zlib.crc32(f"{scenario}/{preset.key}".encode())])
    t0 = T0_NS
    dyn_w = preset.tdp_w - preset.active_idle_w
    wseed = DEFAULT_WORKLOAD_SEED if workload_seed is None else int(workload_seed)
    tl = build_timeline(spec, rng, t0, seconds, dyn_w, workload_seed=wseed)
    # true power
    g0 = t0 - LEAD_NS
    n_bins = (tl.window_end_ns + TRAIL_NS - g0) // GRID_DT_NS
    resp = CONSUMER if preset.consumer_boost else DATACENTER
    if spec.board_draw:  # its own stream: the rest is unchanged
        draw = np.random.default_rng([seed, zlib.crc32(f"{scenario}/{preset.key}".encode()), 3])
        resp = drawn_consumer(draw) if preset.consumer_boost else drawn_datacenter(draw)
    dyn = respond(binned_dynamic_w(tl.start_ns, tl.end_ns, tl.dp_w, g0, n_bins=n_bins), resp)
    gap_end, gap_start = _idle_intervals(tl)
    tail = boost_tail_w(dyn, gap_start, gap_end, g0, resp=resp)
    power_w = preset.active_idle_w + dyn + tail
    t_grid = g0 + np.arange(n_bins, dtype=np.int64) * GRID_DT_NS
    # sensor, counter, clocks
    su = setup(preset, rng, spec.lag_ms, spec.average_only)
    span = (t0 - 1_000_000_000, tl.window_end_ns + 1_000_000_000)
    power, energy = sense(su, power_w, g0, span, rng, locked_polls=spec.locked_polls,
                          clock_wander=spec.clock_wander)
    s1 = ~tl.stream2
    clk = clocks(preset, power_w, g0, span, busy_start_ns=tl.start_ns[s1],
                 busy_end_ns=tl.end_ns[s1], clamps=tl.clamp_windows)
    offset_ns = int(rng.uniform(0.0, 2.0) * 1e6)
    trace, korder, corder = _trace(spec, tl, offset_ns)
    trace.power, trace.energy, trace.clocks = power, energy, clk
    name, mem, sms, cc = DEVICE_NAMES[preset.key]
    trace.devices = [DeviceInfo(0, name, f"GPU-sim-{preset.key}-{seed:08d}", mem, sms, cc)]
    trace.meta.update({"scenario": scenario, "seed": seed, "workload_seed": wseed,
                       "gpu": preset.key,
                       "source": "simulator", "format": "sim"})
    in_win = (t_grid >= tl.window_start_ns) & (t_grid < tl.window_end_ns)
    extras = float(tail[in_win].sum() * GRID_DT_NS * 1e-9)
    truth = _truth(spec, preset.key, seed, tl, p_idle=preset.active_idle_w, korder=korder,
                   corder=corder, su=su, off=offset_ns, extras=extras)
    if spec.board_draw:
        truth.notes.append(
            f"consumer response drawn: stages {resp.taus_ms[0]:.1f}/{resp.taus_ms[1]:.0f} ms, "
            f"slow weight {resp.weights[1]:.2f}, tail {resp.tail_frac:.2f} x "
            f"{resp.tail_tau_s:.2f} s in gaps over {resp.tail_min_gap_ms:.0f} ms"
            if preset.consumer_boost else f"board response drawn: tau {resp.taus_ms[0]:.2f} ms")
    span = (int(tl.start_ns.min()), int(tl.end_ns.max()))
    cum = np.concatenate([[0.0], np.cumsum(tail) * (GRID_DT_NS * 1e-9)])
    tail_span_j = float(np.diff(np.interp((np.array(span) - g0) / GRID_DT_NS,
                                          np.arange(len(cum)), cum))[0])
    span_j = (preset.active_idle_w * (span[1] - span[0]) * 1e-9 + truth.dynamic_energy_j
              + tail_span_j)
    truth = dataclasses.replace(truth, span_start_ns=span[0], span_end_ns=span[1],
                                span_energy_j=span_j, workload_seed=wseed)
    return SimResult(trace, truth, (t_grid, power_w))


def _idle_intervals(tl: Timeline) -> tuple[I64, I64]:
    s1 = ~tl.stream2
    st, en, gap = tl.start_ns[s1], tl.end_ns[s1], tl.gap_ns[s1]
    gs = np.concatenate([st - gap, [en[-1]]])
    ge = np.concatenate([st, [tl.window_end_ns]])
    return ge, gs


def _trace(spec: ScenarioSpec, tl: Timeline, off: int
           ) -> tuple[Trace, np.ndarray, np.ndarray]:
    tr = Trace()
    names = [c.name for c in spec.classes] + [STREAM2_CLASS.name]
    name_ids = tr.strings.intern_many(names)
    cls_all = [*spec.classes, STREAM2_CLASS]
    n = len(tl.start_ns)
    corr = 1000 + np.arange(n, dtype=np.int64)
    kern = np.flatnonzero(~tl.is_copy)
    korder = kern[np.argsort(tl.start_ns[kern], kind="stable")]
    ci = tl.cls[korder]
    grid = np.array([c.grid for c in cls_all])[ci]
    block = np.array([c.block for c in cls_all])[ci]
    tr.kernels = KernelBatch.from_columns({
        "start_ns": tl.start_ns[korder] + off, "end_ns": tl.end_ns[korder] + off,
        "device": np.zeros(len(korder)),
        "stream": np.where(tl.stream2[korder], STREAM2, STREAM1), "correlation": corr[korder],
        "name_id": name_ids[ci], "grid_x": grid[:, 0], "grid_y": grid[:, 1],
        "grid_z": grid[:, 2], "block_x": block[:, 0], "block_y": block[:, 1],
        "block_z": block[:, 2], "registers": np.array([c.registers for c in cls_all])[ci],
        "shared_mem_bytes": np.zeros(len(korder))})
    corder = np.flatnonzero(tl.is_copy)
    types = tl.copy_types or (("HtoD", "pinned"),)
    kinds = np.array([int(_COPY_KIND[k]) for k, _ in types])[tl.cls[corder]]
    mems = np.array([int(_MEM[m]) for _, m in types])[tl.cls[corder]]
    dev = int(MemKind.DEVICE)
    tr.copies = CopyBatch.from_columns({
        "start_ns": tl.start_ns[corder] + off, "end_ns": tl.end_ns[corder] + off,
        "device": np.zeros(len(corder)), "stream": np.full(len(corder), STREAM1),
        "correlation": corr[corder], "kind": kinds,
        "src_mem": np.where(kinds == int(CopyKind.HTOD), mems, dev),
        "dst_mem": np.where(kinds == int(CopyKind.DTOH), mems, dev),
        "bytes": tl.copy_bytes[corder]})
    api_ids = tr.strings.intern_many(_API_NAMES)
    item = tl.api_item
    tr.apis = ApiBatch.from_columns({
        "start_ns": tl.api_start_ns + off, "end_ns": tl.api_end_ns + off,
        "pid": np.full(len(item), PID), "tid": PID + tl.api_tid_off.astype(np.int64),
        # sync calls get correlation ids of their own, after the items'
        "correlation": np.where(item >= 0, corr[np.clip(item, 0, None)],
                                1000 + n + np.cumsum(item < 0)),
        "name_id": api_ids[tl.api_kind],
        "kind": np.array([int(k) for k in _API_KINDS])[tl.api_kind]}).sorted_by()
    ns = len(tl.step_start_ns)
    step_names = tr.strings.intern_many(f"ProfilerStep#{i}" for i in range(ns))
    tr.markers = MarkerBatch.from_columns({
        "start_ns": tl.step_start_ns + off, "end_ns": tl.step_end_ns + off,
        "device": np.full(ns, -1), "tid": np.full(ns, PID), "name_id": step_names,
        "kind": np.full(ns, int(MarkerKind.PROFILER_STEP))})
    return tr, korder, corder


def _truth(spec: ScenarioSpec, gpu: str, seed: int, tl: Timeline, *, p_idle: float,
           korder: np.ndarray, corder: np.ndarray, su: SensorSetup, off: int,
           extras: float) -> Truth:
    dur_s = (tl.end_ns - tl.start_ns) * 1e-9
    dyn_j = tl.dp_w * dur_s
    # full-cost share of P_idle: a stream-2 item halves its host kernel's share while it runs
    idle_share_s = dur_s.copy()
    s2 = np.flatnonzero(tl.stream2)
    if len(s2):
        s1i = np.flatnonzero(~tl.stream2)
        host = s1i[np.searchsorted(tl.start_ns[s1i], tl.start_ns[s2], side="right") - 1]
        idle_share_s[s2] = dur_s[s2] / 2
        np.subtract.at(idle_share_s, host, dur_s[s2] / 2)
    names = [c.name for c in spec.classes] + [STREAM2_CLASS.name]
    keys = np.array([f"kernel:{nm}" for nm in names] + [
        f"copy:{k}/{m}" for k, m in tl.copy_types], dtype=object)
    ncls = len(spec.classes)
    key_idx = np.where(tl.is_copy, ncls + 1 + tl.cls, np.where(tl.cls < 0, ncls, tl.cls))
    nk = len(keys)
    e = np.bincount(key_idx, weights=dyn_j, minlength=nk)
    full = np.bincount(key_idx, weights=dyn_j + p_idle * idle_share_s, minlength=nk)
    t = np.bincount(key_idx, weights=dur_s, minlength=nk)
    calls = np.bincount(key_idx, minlength=nk)
    used = calls > 0
    # idle by cause
    s1 = ~tl.stream2
    gap_s = tl.gap_ns[s1] * 1e-9
    cause = tl.gap_cause[s1]
    tail_s = (tl.window_end_ns - tl.end_ns[s1][-1]) * 1e-9
    idle_t = np.bincount(cause, weights=gap_s, minlength=4)
    idle_t[GAP_STALL] += tail_s
    window_s = (tl.window_end_ns - tl.window_start_ns) * 1e-9
    dyn_total = float(dyn_j.sum())
    # steps: items belong to the step whose range holds their start
    step = np.searchsorted(tl.step_start_ns, tl.start_ns, side="right") - 1
    step_e = np.bincount(step, weights=dyn_j, minlength=len(tl.step_start_ns)) + p_idle * (
        tl.step_end_ns - tl.step_start_ns) * 1e-9
    default = min(su.fields)
    for f in su.fields:
        if f.name == "INSTANT":
            default = f
    names_by_id = {i: k for i, k in enumerate(keys)}
    inseparable = [[str(names_by_id[i]) for i in g] for g in spec.fixed_groups]
    notes = []
    if spec.step_period_ms > 0:
        notes.append("steps are phase-locked to the sensor period: the sensor windows always "
                     "see the same part of each step (aliasing)")
    if extras > 0:
        notes.append("consumer boost tail: extra energy in long idle gaps, in extras_j")
    return Truth(
        scenario=spec.name, gpu=gpu, seed=seed, window_start_ns=tl.window_start_ns,
        window_end_ns=tl.window_end_ns, active_idle_w=p_idle,
        class_dynamic_j={str(keys[i]): float(e[i]) for i in range(nk) if used[i]},
        class_energy_j={str(keys[i]): float(full[i]) for i in range(nk) if used[i]},
        class_time_s={str(keys[i]): float(t[i]) for i in range(nk) if used[i]},
        class_calls={str(keys[i]): int(calls[i]) for i in range(nk) if used[i]},
        kernel_dynamic_j=dyn_j[korder], copy_dynamic_j=dyn_j[corder],
        idle_energy_j={GAP_CAUSES[c]: float(p_idle * idle_t[c]) for c in range(4)},
        idle_time_s={GAP_CAUSES[c]: float(idle_t[c]) for c in range(4)},
        extras_j={"boost_tail": extras} if extras > 0 else {},
        dynamic_energy_j=dyn_total,
        total_energy_j=p_idle * window_s + dyn_total + extras,
        step_energy_j=step_e,
        lag_ms=su.fields[default].lag_ms, default_field=default.label,
        sensors={f.label: {"period_ms": s.period_ms, "window_ms": s.window_ms,
                           "lag_ms": s.lag_ms} for f, s in su.fields.items()},
        gain=su.gain, clock_offset_ns=off, inseparable=inseparable,
        clamp_episodes=[{"start_ns": a, "end_ns": b, "reason": r, "clock_ratio": c}
                        for a, b, r, c in tl.clamp_windows],
        notes=notes)
