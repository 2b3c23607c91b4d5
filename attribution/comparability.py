"""How comparable two snapshots are (part of the ``ppwtop.diff/1`` verdict).

Owns the comparability score: per-factor scores in [0, 1] whose product is the
comparability (GPU model, sensor field, driver, temperature, kernel-set overlap), the reasons
given for each mismatch, and the energy-weighted kernel overlap.  Pure, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from attribution.snapshot import Snapshot

# comparability factors for a mismatch (1.0 when they match or are not recorded)
SENSOR_MISMATCH = 0.6
DRIVER_MISMATCH = 0.85
TEMP_NEAR_C, TEMP_FAR_C = 5.0, 15.0
TEMP_MID, TEMP_FAR = 0.85, 0.6


def comparability_factors(a: Snapshot, b: Snapshot) -> tuple[dict[str, float], list[str]]:
    """Per-factor scores in [0, 1] (their product is the comparability) and the reasons."""
    f: dict[str, float] = {}
    why: list[str] = []
    ma = sorted(g.model if g.model != "unknown" else g.name for g in a.gpus)
    mb = sorted(g.model if g.model != "unknown" else g.name for g in b.gpus)
    f["gpu_model"] = 1.0 if ma == mb else 0.0
    if ma != mb:
        why.append(f"GPU model differs: {', '.join(ma) or 'none'} vs {', '.join(mb) or 'none'}")
    sa = sorted(g.sensor.field for g in a.gpus)
    sb = sorted(g.sensor.field for g in b.gpus)
    f["sensor_field"] = 1.0 if sa == sb else SENSOR_MISMATCH
    if sa != sb:
        why.append(f"power sensor field differs: {', '.join(sa)} vs {', '.join(sb)}")
    da, db = _meta_str(a.meta, "driver_version", "driver"), _meta_str(b.meta, "driver_version",
                                                                       "driver")
    if da is not None and db is not None:
        f["driver"] = 1.0 if da == db else DRIVER_MISMATCH
        if da != db:
            why.append(f"driver differs: {da} vs {db}")
    temp = _temperature_factor(a.meta, b.meta, why)
    if temp is not None:
        f["temperature"] = temp
    j = kernel_overlap(a, b)
    f["kernel_overlap"] = math.sqrt(j)
    if j < 0.9:
        why.append(f"kernel sets overlap {j:.0%} (energy-weighted Jaccard)")
    return f, why


def kernel_overlap(a: Snapshot, b: Snapshot) -> float:
    """Energy-weighted Jaccard of kernel names: sum(min(share)) / sum(max(share))."""
    ea = _shares(_kernel_energy(a))
    eb = _shares(_kernel_energy(b))
    if not ea and not eb:
        return 1.0
    names = sorted(set(ea) | set(eb))
    pa = np.array([ea.get(n, 0.0) for n in names])
    pb = np.array([eb.get(n, 0.0) for n in names])
    den = float(np.maximum(pa, pb).sum())
    return float(np.minimum(pa, pb).sum()) / den if den > 0 else 1.0


def _kernel_energy(s: Snapshot) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in s.kernels:
        out[k.name] = out.get(k.name, 0.0) + max(0.0, k.energy_j)
    return out


def _shares(e: Mapping[str, float]) -> dict[str, float]:
    total = sum(e.values())
    if total <= 0:
        return {n: 1.0 / len(e) for n in e} if e else {}
    return {n: v / total for n, v in e.items()}


def _meta_str(meta: Mapping[str, Any], *keys: str) -> str | None:
    for k in keys:
        v = meta.get(k)
        if v is not None and str(v).strip():
            return str(v).strip()
    return None


def _meta_float(meta: Mapping[str, Any], *keys: str) -> float | None:
    for k in keys:
        v = meta.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def _temperature_factor(
    ma: Mapping[str, Any], mb: Mapping[str, Any], why: list[str]
) -> float | None:
    keys = ("temperature_c", "gpu_temperature_c", "temp_c")
    ta, tb = _meta_float(ma, *keys), _meta_float(mb, *keys)
    if ta is not None and tb is not None:
        gap = abs(ta - tb)
        if gap <= TEMP_NEAR_C:
            return 1.0
        why.append(f"GPU temperature differs by {gap:.0f} °C ({ta:.0f} vs {tb:.0f})")
        return TEMP_MID if gap <= TEMP_FAR_C else TEMP_FAR
    ba, bb = _meta_str(ma, "temperature_band"), _meta_str(mb, "temperature_band")
    if ba is not None and bb is not None:
        if ba == bb:
            return 1.0
        why.append(f"temperature band differs: {ba} vs {bb}")
        return TEMP_MID
    return None
