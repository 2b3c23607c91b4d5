"""The simulator's truth, counted the way the inefficiency ranking counts each mechanism.

``truth_mechanisms(sim)`` → {mechanism: joules} from :class:`attribution.sim.Truth` and the
exact simulated timeline (docs/ranking.md defines each mechanism):

* ``idle.<cause>``: the true idle energy of that cause; launch gaps inside tiny-kernel storms
  go to ``storm.tiny_kernels`` instead (their time: span − kernel time);
* ``storm.tiny_kernels``: true ``P_idle`` × the storms' spans (storms found on the trace's
  exact timestamps with the ranking's own rule);
* ``copy:<kind>/pageable``: the copies' true energy × the fraction of their time beyond
  their bytes at the simulator's pinned bandwidth (22 GB/s);
* ``clamp.<reason>``: true ``P_idle`` × Σ (duration × (1 − clock ratio)) of the kernels that
  started inside a clamp episode;
* ``precision.fp32``: half the true energy of FP32 matrix kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attribution.model import CLAMP_REASONS, CopyKind, MemKind
from attribution.precision import precision_of
from attribution.ranking.common import RankInputs
from attribution.ranking.efficiency import FP32_SPEEDUP, MATMUL
from attribution.ranking.storms import find_storms
from attribution.sim import SimResult

PINNED_GBPS = 22.0  # attribution/sim/workload.py _BW_GBPS for pinned copies


def truth_mechanisms(sim: SimResult) -> dict[str, float]:
    tr, tt = sim.trace, sim.truth
    p_idle = tt.active_idle_w
    out: dict[str, float] = {k: v for k, v in tt.idle_energy_j.items() if v > 0}
    # storms (find_storms only reads the trace)
    inp = RankInputs(tr, _NoArrays(), (), (), (), 0.0)  # type: ignore[arg-type]
    storms, _ = find_storms(inp)
    if len(storms):
        span_s = float((storms.end_ns - storms.start_ns).sum()) * 1e-9
        gap_s = span_s - float(storms.busy_ns.sum()) * 1e-9
        out["storm.tiny_kernels"] = p_idle * span_s
        out["idle.launch_gap"] = max(0.0, out.get("idle.launch_gap", 0.0) - p_idle * gap_s)
    # pageable copies
    cb = tr.copies
    pageable = (cb.src_mem == int(MemKind.PAGEABLE)) | (cb.dst_mem == int(MemKind.PAGEABLE))
    for kind, label in ((CopyKind.HTOD, "HtoD"), (CopyKind.DTOH, "DtoH")):
        key = f"copy:{label}/pageable"
        m = pageable & (cb.kind == int(kind))
        t = tt.class_time_s.get(key, 0.0)
        if bool(m.any()) and t > 0:
            need = float(cb.bytes[m].sum()) / (PINNED_GBPS * 1e9)
            out[key] = tt.class_energy_j[key] * max(0.0, 1.0 - need / t)
    # clamps (truth windows are host time; the trace is host + clock offset)
    kb = tr.kernels
    s = kb.start_ns - tt.clock_offset_ns
    dur = (kb.end_ns - kb.start_ns).astype(np.float64) * 1e-9
    for ep in tt.clamp_episodes:
        m = (s >= ep["start_ns"]) & (s < ep["end_ns"])
        lost = float(dur[m].sum()) * (1.0 - float(ep["clock_ratio"]))
        key = f"clamp.{CLAMP_REASONS[int(ep['reason'])]}"
        out[key] = out.get(key, 0.0) + p_idle * lost
    # FP32 matrix kernels
    fp32 = sum(e for k, e in tt.class_energy_j.items()
               if k.startswith("kernel:") and precision_of(k[7:]) == "fp32" and MATMUL.search(k))
    if fp32 > 0:
        out["precision.fp32"] = fp32 * (1.0 - 1.0 / FP32_SPEEDUP)
    return {k: v for k, v in out.items() if v > 0}


class _NoArrays:
    devices: tuple[Any, ...] = ()


def top_overlap(engine: list[str], truth: dict[str, float], k: int = 3) -> float:
    """|top-k(engine) ∩ top-k(truth)| / min(k, number of true mechanisms)."""
    top_t = sorted(truth, key=lambda m: -truth[m])[:k]
    if not top_t:
        return 1.0
    return len(set(engine[:k]) & set(top_t)) / len(top_t)
