"""The naive "nvidia-smi × time" baseline the attribution engine is measured against.

Owns ``naive_split``: each power reading ``P_i`` (published at ``t_i``) stands for the energy
``(P_i − P_idle) × (t_i − t_{i−1})`` above the active idle; that energy is split among the GPU
item classes active in ``(t_{i−1}, t_i]`` in proportion to their busy time there.  No lag, no
sensor window, no regression: what a user multiplying nvidia-smi readings by kernel time gets.
Energy of an interval in which nothing runs is dropped (it is idle by this method's lights).

Vectorised: the busy time of every class at every reading time comes from the engine's
cumulative busy-time function (sorted starts/ends + cumulative sums), so the cost is
``O((items + readings) log items)`` per class.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from attribution.engine.activity import busy_at, items_for_device
from attribution.model import PowerField, Trace

F64 = npt.NDArray[np.float64]


def readings(trace: Trace, device: int, field: PowerField, *, fresh_only: bool = True
             ) -> tuple[npt.NDArray[np.int64], F64]:
    """Sorted (t_ns, power_w) of one device's readings of ``field`` (published ones only when
    ``fresh_only`` and any row is fresh)."""
    p = trace.power
    m = (p.device == device) & (p.field == int(field))
    if fresh_only and bool((m & p.fresh).any()):
        m &= p.fresh
    t = p.t_ns[m]
    order = np.argsort(t, kind="stable")
    return t[order].astype(np.int64), p.power_mw[m][order].astype(np.float64) / 1000.0


def naive_split(trace: Trace, device: int, p_idle_w: float, field: PowerField, *,
                fresh_only: bool = True) -> dict[str, float]:
    """Dynamic energy (J) per class label (``kernel:<name>``, ``copy:<kind>/<memory>``)."""
    items = items_for_device(trace, device)
    labels = items.labels
    if len(items) == 0:
        return {}
    t_ns, power_w = readings(trace, device, field, fresh_only=fresh_only)
    if len(t_ns) < 2:
        return {lab: 0.0 for lab in labels}
    origin = int(t_ns[0])
    busy = busy_at(items.start_ns, items.end_ns, items.cls, len(labels), t_ns, origin_ns=origin)
    x = np.diff(busy, axis=0)  # (readings − 1, classes): busy seconds in (t_{i−1}, t_i]
    dt_s = np.diff(t_ns).astype(np.float64) * 1e-9
    above_j = np.clip(power_w[1:] - p_idle_w, 0.0, None) * dt_s
    tot = x.sum(axis=1)
    share = np.divide(x, tot[:, None], out=np.zeros_like(x), where=tot[:, None] > 0)
    est = above_j @ share
    return {lab: float(v) for lab, v in zip(labels, est.tolist(), strict=True)}
