"""The board's NVML view of the true power: published readings per power field, an
nvidia-smi-style poll stream, the energy counter and clock/thermal samples.

Owns :func:`sense`.  Reading k of a field with window W and lag D, published at
``t_k = s0 + k·T + jitter``, is ``gain × mean(true power over [t_k − D − W, t_k − D])``
rounded to mW; the energy counter is ``E0 + gain × ∫ true power`` in mJ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from attribution.model import (
    CLOCK_REASON_GPU_IDLE,
    F64,
    I64,
    ClockBatch,
    EnergyBatch,
    PowerBatch,
    PowerField,
)
from attribution.presets import GpuPreset, SensorModel
from attribution.sim.first_order import first_order
from attribution.sim.power import cumulative_j, integral_j

MS = 1_000_000
PUBLISH_JITTER_MS = 0.2
POLL_MS = 10.0  # nvidia-smi -lms 10
ENERGY_READ_MS = 100.0
CLOCK_READ_MS = 100.0

CLOCKS_MHZ = {  # (max SM clock, memory clock)
    "v100": (1530, 877), "a100": (1410, 1593), "h100": (1980, 2619), "h200": (1980, 3201),
    "rtx3090": (1695, 9751), "rtx4090": (2520, 10501),
}


@dataclasses.dataclass(frozen=True, slots=True)
class SensorSetup:
    fields: dict[PowerField, SensorModel]
    gain: float
    phase_ns: int


def setup(preset: GpuPreset, rng: np.random.Generator, lag_ms: float | None,
          average_only: bool) -> SensorSetup:
    if average_only:
        base = preset.sensors.get(PowerField.AVERAGE, SensorModel(PowerField.AVERAGE, 100, 1000))
        fields = {PowerField.AVERAGE: base}
    else:
        fields = dict(preset.sensors)
    if lag_ms is not None:
        fields = {f: dataclasses.replace(s, lag_ms=lag_ms) for f, s in fields.items()}
    gain = float(np.clip(1.0 + preset.gain_sigma * rng.standard_normal(), 0.95, 1.05))
    period = max(s.period_ms for s in fields.values())
    return SensorSetup(fields, gain, int(rng.uniform(0, period) * MS))


def _mw(values_w: F64, gain: float) -> I64:
    return np.rint(values_w * gain * 1000.0).astype(np.int64)


def sense(setup_: SensorSetup, power_w: F64, grid_t0_ns: int, span: tuple[int, int],
          rng: np.random.Generator, *, locked_polls: bool = False, clock_wander: bool = False
          ) -> tuple[PowerBatch, EnergyBatch]:
    """Published readings (fresh) + a poll stream (fresh=False), and the energy counter.
    ``locked_polls``: the poll stream runs in step with the fastest field's publishes
    (:func:`locked_poll_times`) instead of free.  ``clock_wander``: the publishes keep their
    period on the sensor's own clock, which wanders against the host's
    (:func:`clock_wander_ns`); locked polls follow them."""
    cum = cumulative_j(power_w)
    a, b = span
    wander = (clock_wander_ns(a, b, np.random.default_rng(setup_.phase_ns + 1))
              if clock_wander else None)
    parts: list[PowerBatch] = []
    by_period: dict[float, I64] = {}
    for field, sm in sorted(setup_.fields.items()):
        if sm.period_ms not in by_period:
            k = np.arange(int((b - a) / (sm.period_ms * MS)) + 1)
            jit = rng.normal(0.0, PUBLISH_JITTER_MS * MS, len(k))
            t_pub = (a + setup_.phase_ns + np.rint(k * sm.period_ms * MS + jit)).astype(np.int64)
            by_period[sm.period_ms] = t_pub if wander is None else t_pub + wander(t_pub)
        t = by_period[sm.period_ms]
        hi = t - round(sm.lag_ms * MS)
        lo = hi - round(sm.window_ms * MS)
        mean_w = integral_j(cum, grid_t0_ns, lo, hi) / (sm.window_ms * 1e-3)
        parts.append(PowerBatch.from_columns({
            "t_ns": t, "power_mw": _mw(mean_w, setup_.gain), "device": np.zeros(len(t)),
            "field": np.full(len(t), int(field)), "fresh": np.ones(len(t), bool)}))
    # nvidia-smi at -lms 10: each poll shows the latest reading of every field
    steps = POLL_MS * MS + rng.uniform(1.0, 4.0, int((b - a) / (POLL_MS * MS)) + 1) * MS
    polls = (a + 0.3e9 + np.cumsum(steps)).astype(np.int64)
    # the free polls are drawn either way, so that everything drawn after them (the energy
    # counter) is the same run's; locked polls come from a generator of their own
    if locked_polls:
        fast = min(sm.period_ms for sm in setup_.fields.values())
        polls = locked_poll_times(a + setup_.phase_ns, fast, int(polls[0]), b,
                                  np.random.default_rng(setup_.phase_ns), wander=wander)
    polls = polls[polls < b]
    for p in list(parts):
        idx = np.searchsorted(p.t_ns, polls, side="right") - 1
        ok = idx >= 0
        parts.append(PowerBatch.from_columns({
            "t_ns": polls[ok], "power_mw": p.power_mw[idx[ok]], "device": np.zeros(int(ok.sum())),
            "field": np.full(int(ok.sum()), int(p.field[0])),
            "fresh": np.zeros(int(ok.sum()), bool)}))
    power = PowerBatch.concat(parts).sorted_by("t_ns")
    te = (a + np.arange(int((b - a) / (ENERGY_READ_MS * MS)) + 1) * round(ENERGY_READ_MS * MS)
          + rng.integers(0, 200_000, int((b - a) / (ENERGY_READ_MS * MS)) + 1)).astype(np.int64)
    e0 = int(rng.integers(10**8, 10**9))
    ej = integral_j(cum, grid_t0_ns, np.full(len(te), grid_t0_ns), te)
    energy = EnergyBatch.from_columns({
        "t_ns": te, "energy_mj": e0 + np.floor(ej * setup_.gain * 1000.0).astype(np.int64),
        "device": np.zeros(len(te))})
    return power, energy


LOCKED_POLL_MS = 12.5
"""Poll spacing aimed at by a locked poll loop (the real A100 log: 8 polls per 101 ms)."""
LOCKED_WANDER_MS = (1.5, 5.0)
"""(sd, correlation time s) of the locked polls' slow phase wander against the publishes
(the real A100 log: the new value's poll within about ±3 ms of one phase for minutes)."""
LOCKED_JITTER_MS = 0.3
"""Each locked poll's own timing jitter (the real A100 log's stamp scatter, IQR 0.9 ms,
includes the stamps' ms truncation)."""


def ou_series(n: int, sd: float, step_over_tau: float, rng: np.random.Generator) -> F64:
    """``n`` samples of a stationary Ornstein-Uhlenbeck process (standard deviation ``sd``,
    sampled every ``step_over_tau`` correlation times), its first sample drawn from the
    stationary law (the draws: the n innovations, then the first sample)."""
    c = float(np.exp(-step_over_tau))
    shocks = rng.normal(0.0, sd * np.sqrt(1.0 - c * c), n)
    shocks[0] = rng.normal(0.0, sd)
    return first_order(1.0, c, shocks)


CLOCK_WANDER_MS = (8.0, 60.0, 5.0)
"""(sd, correlation time s, knot spacing s) of the sensor's publish clock against the host's,
with ``clock_wander``: smooth, from knots of an Ornstein-Uhlenbeck process joined by straight
lines (the real A100 200 s log: its locked stamps' phase on the publish grid moves about
±15 ms over minutes, 3-5 ms per 10 s, while its stamps scatter 0.07 of a poll gap about a
2 s running phase; and its readings fit the power better at their stamps than moved onto a
straight grid, so the publishes move with them)."""


def clock_wander_ns(a_ns: int, b_ns: int, rng: np.random.Generator
                    ) -> Callable[[I64], I64]:
    """The sensor's clock against the host's over ``[a_ns, b_ns]``: an Ornstein-Uhlenbeck
    offset (``CLOCK_WANDER_MS``) drawn at knots and interpolated; returns t ↦ offset."""
    sd_ms, tau_s, step_s = CLOCK_WANDER_MS
    n = int((b_ns - a_ns) / (step_s * 1e9)) + 2
    knots_ms = ou_series(n, sd_ms, step_s / tau_s, rng)
    knots_t = a_ns + np.arange(n) * step_s * 1e9

    def at(t_ns: I64) -> I64:
        return np.asarray(np.rint(np.interp(t_ns, knots_t, knots_ms) * MS), np.int64)

    return at


def locked_poll_times(grid0_ns: int, period_ms: float, first_ns: int, end_ns: int,
                      rng: np.random.Generator, *,
                      wander: Callable[[I64], I64] | None = None) -> I64:
    """nvidia-smi polls in step with a sensor publishing every ``period_ms`` from
    ``grid0_ns`` (seen in the real A100 and V100 logs in ../shared: the poll loop keeps the
    sensor's period, so each new value is first shown by the poll at about the same phase
    after its publish, for tens to thousands of readings): ``round(period / 12.5 ms)`` polls
    per period at even spacing, at a phase that wanders slowly (an Ornstein-Uhlenbeck
    process, ``LOCKED_WANDER_MS``) plus per-poll jitter, from ``first_ns`` to ``end_ns``;
    ``wander``: the sensor's clock against the host's, which the polls follow."""
    per_ns = period_ms * MS
    k = max(1, round(period_ms / LOCKED_POLL_MS))
    j0 = int(np.floor((first_ns - grid0_ns) / per_ns))
    n_per = max(int(np.ceil((end_ns - grid0_ns) / per_ns)) - j0 + 1, 1)
    sd_ms, tau_s = LOCKED_WANDER_MS
    wander_ms = ou_series(n_per, sd_ms, period_ms * 1e-3 / tau_s, rng)
    phase0_ms = rng.uniform(0.0, period_ms / k)
    j = j0 + np.arange(n_per)
    base = grid0_ns + j * per_ns + (phase0_ms + wander_ms) * MS
    if wander is not None:
        base = base + wander(np.rint(base).astype(np.int64))
    t = (base[:, None] + np.arange(k)[None, :] * (per_ns / k)).reshape(-1)
    t = t + rng.normal(0.0, LOCKED_JITTER_MS * MS, len(t))
    t = np.sort(np.rint(t).astype(np.int64))
    return t[(t >= first_ns) & (t < end_ns)]


def clocks(preset: GpuPreset, power_w: F64, grid_t0_ns: int, span: tuple[int, int], *,
           busy_start_ns: I64, busy_end_ns: I64,
           clamps: tuple[tuple[int, int, int, float], ...]) -> ClockBatch:
    a, b = span
    n = int((b - a) / (CLOCK_READ_MS * MS)) + 1
    t = a + np.arange(n, dtype=np.int64) * round(CLOCK_READ_MS * MS) + 37_000
    sm_max, mem = CLOCKS_MHZ.get(preset.key, (1500, 1500))
    sm = np.full(n, sm_max, dtype=np.int64)
    reasons = np.zeros(n, dtype=np.uint64)
    idx = np.searchsorted(busy_start_ns, t, side="right") - 1
    busy = (idx >= 0) & (busy_end_ns[np.clip(idx, 0, None)] > t)
    reasons[~busy] |= np.uint64(CLOCK_REASON_GPU_IDLE)
    for c0, c1, reason, ratio in clamps:
        m = (t >= c0) & (t < c1)
        sm[m] = (np.rint(sm_max * ratio / 15.0) * 15).astype(np.int64)
        reasons[m] |= np.uint64(reason)
    cum = cumulative_j(power_w)
    mean_w = integral_j(cum, grid_t0_ns, t - round(CLOCK_READ_MS * MS), t) / (CLOCK_READ_MS * 1e-3)
    # temperature: slow first-order response to power (tau 20 s), ambient 30 °C
    alpha = 1.0 - np.exp(-CLOCK_READ_MS / 20_000.0)
    level = 30.0 + 0.09 * mean_w[0] if n else 0.0
    x = 30.0 + 0.09 * mean_w
    temp = first_order(float(alpha), 1.0 - float(alpha), x - level) + level
    return ClockBatch.from_columns({
        "t_ns": t, "device": np.zeros(n), "sm_mhz": sm, "mem_mhz": np.full(n, mem),
        "temp_c": temp, "clock_reasons": reasons})

