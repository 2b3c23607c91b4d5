"""Stdlib-only environment probe for scripts/gpu_check.py (works on a bare lent machine).

Owns :func:`bare_environment`: the Python version, what nvidia-smi reports (GPU list and the
``-q -d POWER`` page, which names the power fields and sample durations this driver has),
which of the modules the checks need can be imported, and :func:`smi_poll`, a 3 s
nvidia-smi poll at 10 ms whose value changes estimate the sensor period.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

SMI_QUERIES = {
    "gpus": ["--query-gpu=name,uuid,driver_version,power.draw,power.limit",
             "--format=csv,noheader"],
    "power_page": ["-q", "-d", "POWER"],
}


def nvidia_smi() -> dict[str, Any]:
    """nvidia-smi's GPU list and power page (lines), or the reason it could not run."""
    out: dict[str, Any] = {}
    for key, args in SMI_QUERIES.items():
        try:
            r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                               timeout=20, check=False)
            out[key] = r.stdout.strip().splitlines()[:80] or r.stderr.strip()[:500]
        except (OSError, subprocess.SubprocessError) as e:
            out[key] = f"{type(e).__name__}: {e}"
    return out


def bare_environment() -> dict[str, Any]:
    """What a machine says without any Python GPU library: nvidia-smi and importable modules."""
    mods: dict[str, Any] = {}
    for mod in ("numpy", "scipy", "orjson", "pynvml", "cupti", "torch", "cupy"):
        try:
            __import__(mod)
            mods[mod] = True
        except Exception as e:
            mods[mod] = f"{type(e).__name__}: {e}"
    return {"python": sys.version.split()[0], "executable": sys.executable,
            "nvidia_smi": nvidia_smi(), "importable": mods, "smi_poll": smi_poll()}


def _ms_of(stamp: str) -> float | None:
    """Milliseconds since midnight of an nvidia-smi timestamp ``YYYY/MM/DD HH:MM:SS.mmm``."""
    try:
        hms = stamp.strip().split(" ")[-1]
        h, m, sec = hms.split(":")
        return (int(h) * 60 + int(m)) * 60_000 + float(sec) * 1000
    except ValueError:
        return None


def smi_poll(seconds: float = 3.0) -> dict[str, Any]:
    """``nvidia-smi --query-gpu=timestamp,<power> -lms 10`` for ``seconds``: how often the
    value changes (an estimate of the sensor period when numpy/pynvml are missing)."""
    for field in ("power.draw.instant", "power.draw"):
        try:
            r = subprocess.run(
                ["timeout", str(seconds), "nvidia-smi", f"--query-gpu=timestamp,{field}",
                 "--format=csv,noheader,nounits", "-lms", "10", "-i", "0"],
                capture_output=True, text=True, timeout=seconds + 10, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            return {"error": f"{type(e).__name__}: {e}"}
        rows = [ln.split(",") for ln in r.stdout.strip().splitlines() if "," in ln]
        if not rows or "not supported" in r.stdout.lower() or "invalid" in r.stdout.lower():
            continue
        change_ms: list[float] = []
        prev = None
        for row in rows:
            t, val = _ms_of(row[0]), row[-1]
            if t is not None and val.strip() != prev:
                change_ms.append(t)
            prev = val.strip()
        gaps = sorted(b - a for a, b in itertools.pairwise(change_ms))
        return {"field": field, "rows": len(rows), "changes": len(change_ms),
                "median_change_ms": gaps[len(gaps) // 2] if gaps else None,
                "first_rows": [",".join(x) for x in rows[:5]]}
    return {"error": "nvidia-smi gave no power readings"}
