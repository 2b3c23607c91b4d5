"""GPU presets: what each board's power sensor does and what its power envelope looks like.

Owns the model table (sensor update period T, averaging window W, typical lag D per field,
active-idle and peak board power, gain spread) and the matching of device names from traces,
nvsmi logs and NVML to a preset key.  Figures come from ../shared/DESIGN.md §3 (Yang, Adámek,
Armour, SC'24 and its raw data) and vendor TDPs; where a figure is a guess it says so.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from attribution.model import PowerField

NOMINAL_LAG_MS = 1.5
"""The sensor's lag where the readings cannot place it (phase-locked: both engines, and the
live engine before its first fit)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SensorModel:
    """One power field's behaviour: a boxcar mean over ``window_ms`` published every
    ``period_ms`` and seen ``lag_ms`` late."""

    field: PowerField
    period_ms: float
    window_ms: float
    lag_ms: float = NOMINAL_LAG_MS

    @property
    def coverage(self) -> float:
        """Fraction of wall time the published readings see."""
        return min(1.0, self.window_ms / self.period_ms)


@dataclasses.dataclass(frozen=True, slots=True)
class GpuPreset:
    """A GPU model: sensors by field plus the power envelope the simulator draws from."""

    key: str
    display_name: str
    sensors: Mapping[PowerField, SensorModel]
    default_field: PowerField
    active_idle_w: float
    tdp_w: float
    consumer_boost: bool = False  # two-stage boost ramp and slow tail (GeForce cards)
    gain_sigma: float = 0.02  # board-to-board gain spread (±5 % bound)
    energy_counter: bool = True

    def sensor(self, field: PowerField | None = None) -> SensorModel:
        f = self.default_field if field is None else field
        if f in self.sensors:
            return self.sensors[f]
        if f is PowerField.DRAW:
            return self.sensors[self.default_field]
        raise KeyError(f"{self.key} has no {f.label} power field")


def _s(field: PowerField, t: float, w: float, lag: float = 1.5) -> SensorModel:
    return SensorModel(field, t, w, lag)


_I, _A, _D = PowerField.INSTANT, PowerField.AVERAGE, PowerField.DRAW

PRESETS: Mapping[str, GpuPreset] = {
    p.key: p
    for p in (
        # V100: power.draw is a 10 ms mean published every 20 ms (50 % seen).
        GpuPreset("v100", "Tesla V100", {_D: _s(_D, 20, 10), _I: _s(_I, 20, 10)}, _D, 40.0, 300.0),
        # A100 GA100: power.draw == instant, 25 ms window every 100 ms (25 % seen).
        GpuPreset(
            "a100", "NVIDIA A100",
            {_D: _s(_D, 100, 25), _I: _s(_I, 100, 25), _A: _s(_A, 100, 1000)}, _I, 62.0, 400.0,
        ),
        GpuPreset(
            "h100", "NVIDIA H100",
            {_D: _s(_D, 100, 25), _I: _s(_I, 100, 25), _A: _s(_A, 100, 1000)}, _I, 70.0, 700.0,
        ),
        # H200: assumed like H100 (DESIGN.md: "presumably alike"); unverified on hardware.
        GpuPreset(
            "h200", "NVIDIA H200",
            {_D: _s(_D, 100, 25), _I: _s(_I, 100, 25), _A: _s(_A, 100, 1000)}, _I, 75.0, 700.0,
        ),
        # RTX 3090: instant is a 100 ms mean every 100 ms; power.draw is a ~1 s average.
        GpuPreset(
            "rtx3090", "NVIDIA GeForce RTX 3090",
            {_I: _s(_I, 100, 100), _D: _s(_D, 100, 1000), _A: _s(_A, 100, 1000)}, _I, 130.0,
            350.0, consumer_boost=True,
        ),
        GpuPreset(
            "rtx4090", "NVIDIA GeForce RTX 4090",
            {_I: _s(_I, 100, 100), _D: _s(_D, 100, 1000), _A: _s(_A, 100, 1000)}, _I, 30.0,
            450.0, consumer_boost=True,
        ),
    )
}

# Ordered: the first pattern that matches a device name wins.
_NAME_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), k)
    for p, k in (
        (r"\bH200\b", "h200"),
        (r"\bH100\b|\bH800\b|GH100", "h100"),
        (r"\bA100\b|\bA800\b|A100-|PG509", "a100"),
        (r"\bV100\b|V100-", "v100"),
        (r"RTX\s*4090", "rtx4090"),
        (r"RTX\s*3090", "rtx3090"),
    )
)


def preset_for_name(device_name: str) -> GpuPreset | None:
    """The preset whose model a device name denotes, or None for an unknown board."""
    for pat, key in _NAME_PATTERNS:
        if pat.search(device_name):
            return PRESETS[key]
    return None


def get_preset(key: str) -> GpuPreset:
    """The preset for a ``--gpu`` key (case-insensitive); KeyError names the known ones."""
    k = key.strip().lower()
    if k not in PRESETS:
        raise KeyError(f"unknown GPU model {key!r} (known: {', '.join(PRESETS)})")
    return PRESETS[k]
