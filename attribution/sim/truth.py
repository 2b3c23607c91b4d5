"""Ground truth of one simulated run, by construction.

Owns the :class:`Truth` dataclass and its JSON-able form.  Per-instance dynamic energy is
``ΔP × duration`` (exact: the board's response filter moves energy in time, never changes it);
idle energy is ``P_idle × time`` with no kernel and no copy running, split by the cause the
simulator generated the gap with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from attribution.model import F64


@dataclasses.dataclass(frozen=True, slots=True)
class Truth:
    """What really happened.  Energies in J, times in s unless the name says otherwise."""

    scenario: str
    gpu: str
    seed: int
    window_start_ns: int  # host/NVML clock
    window_end_ns: int
    active_idle_w: float
    class_dynamic_j: dict[str, float]  # "kernel:<name>" / "copy:<kind>/<memory>" → J
    class_energy_j: dict[str, float]  # dynamic + share of P_idle × duration
    class_time_s: dict[str, float]
    class_calls: dict[str, int]
    kernel_dynamic_j: F64  # aligned with trace.kernels rows
    copy_dynamic_j: F64  # aligned with trace.copies rows
    idle_energy_j: dict[str, float]  # "idle.<cause>" → J
    idle_time_s: dict[str, float]
    extras_j: dict[str, float]  # labelled energy no item causes (consumer boost tail)
    dynamic_energy_j: float
    total_energy_j: float  # P_idle × T + Σ dynamic + Σ extras over the window
    step_energy_j: F64  # per ProfilerStep (dynamic + P_idle × duration), aligned with markers
    lag_ms: float  # the sensor's true lag (default field)
    default_field: str
    sensors: dict[str, dict[str, float]]  # field → period_ms, window_ms, lag_ms
    gain: float
    clock_offset_ns: int  # trace (CUPTI) time − true (host/NVML) time
    inseparable: list[list[str]]  # fixed-mix groups
    clamp_episodes: list[dict[str, Any]]
    span_start_ns: int = 0  # first item start .. last item end (host clock): the GPU span
    span_end_ns: int = 0
    span_energy_j: float = 0.0  # true energy over the GPU span (window minus lead/tail idle)
    notes: list[str] = dataclasses.field(default_factory=list)
    workload_seed: int = 0  # the workload definition this run realises (see simulate)

    @property
    def effective_lag_ms(self) -> float:
        """Lag an engine fitting readings against trace times should find.

        Reading times are host time and are used as they are on the trace axis.  A reading
        published at ``t`` averages host times ``[t − D − W, t − D]``, which are trace times
        ``[t − (D − off) − W, t − (D − off)]`` (trace = host + off): the lag is ``D − off``.
        """
        return self.lag_ms - self.clock_offset_ns / 1e6

    def span_idle_time_s(self) -> dict[str, float]:
        """``idle_time_s`` over the GPU span (first item start .. last item end), the window an
        engine attributes: the window's idle before the first item and after the last, which
        the simulator counts as host stall, taken off."""
        out = dict(self.idle_time_s)
        outside_s = ((self.span_start_ns - self.window_start_ns)
                     + (self.window_end_ns - self.span_end_ns)) * 1e-9
        out["idle.host_stall"] = out.get("idle.host_stall", 0.0) - outside_s
        return out

    def span_idle_energy_j(self) -> float:
        """True idle energy over the GPU span, as CONTRACT.md counts it: active idle × the
        span's idle time (:meth:`span_idle_time_s`).  The window's energy outside the span is
        not idle alone on a consumer board: its boost tail (``extras_j``) runs on into the
        trailing idle, 5-21 J on 60 s runs, most of the tail on a run of 1-2 s."""
        return self.active_idle_w * sum(self.span_idle_time_s().values())

    def misplaced_idle_share(self, got_s: Mapping[str, float]) -> float:
        """How much of the GPU span's idle time an engine put under another cause than the one
        the simulator made the gap with: half the L1 distance between ``got_s`` (cause →
        seconds, keyed ``idle.<cause>``) and :meth:`span_idle_time_s`, over the span's true
        idle time (NaN when it has none)."""
        true = self.span_idle_time_s()
        moved = sum(abs(got_s.get(k, 0.0) - true.get(k, 0.0)) for k in set(got_s) | set(true))
        total = sum(true.values())
        return moved / 2 / total if total > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.tolist() if isinstance(v, np.ndarray) else v
        out["effective_lag_ms"] = self.effective_lag_ms
        out["schema"] = "ppwtop.truth/1"
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Truth:
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}
        for k in ("kernel_dynamic_j", "copy_dynamic_j", "step_energy_j"):
            kw[k] = np.asarray(kw.get(k, []), dtype=np.float64)
        return cls(**kw)
