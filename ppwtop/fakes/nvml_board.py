"""The board behind the fake NVML library: true power over time and what its sensor publishes.

Owns :class:`BoardModel`, :class:`VirtualClock` (time a test advances), :func:`square_wave`
and :func:`board_from_sim` (a board replaying a simulator run), and the list of C functions a
board may declare unsupported.  :mod:`ppwtop.fakes.nvml_lib` answers NVML calls from it.

Sensor model (DESIGN.md §3): reading *k* is published at ``p_k = phase + k·T`` and is the mean
true power over ``[p_k − lag − W, p_k − lag]``, times the board's gain, in integer mW.  Its
NVML timestamp is ``p_k`` in µs (CPU clock since the epoch).  ``NVML_FI_DEV_POWER_INSTANT``
answers the latest reading, ``NVML_FI_DEV_POWER_AVERAGE`` the same but over the 1 s window,
``nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES)`` the instant readings newer than
``lastSeenTimeStamp`` (at most ``samples_capacity`` of them), ``nvmlDeviceGetPowerUsage`` the
mean over ``power_usage_window_ms`` (the 1 s average of Ampere-non-GA100/Ada/Hopper) and
``nvmlDeviceGetTotalEnergyConsumption`` the exact integral of true power, in mJ.  True power
is a step function on the grid ``t_ns`` (``power_w[i]`` holds on ``[t_ns[i], t_ns[i+1])``) and
``idle_w`` outside it, so every window mean is exact.  pynvml is imported for its field-id
constants only.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pynvml

if TYPE_CHECKING:
    from attribution.sim import SimResult

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

C_FUNCTIONS: frozenset[str] = frozenset({
    "nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString",
    "nvmlSystemGetDriverVersion", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetFieldValues", "nvmlDeviceGetSamples",
    "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetPowerUsage",
})
"""Every C function the fake library exports (pynvml looks them up by these names)."""

DEVICE_CALLS: frozenset[str] = frozenset(
    n for n in C_FUNCTIONS if n.startswith("nvmlDeviceGet")
    and n not in ("nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2")
)
"""Per-board calls a :class:`BoardModel` may declare unsupported (NVML_ERROR_NOT_SUPPORTED)."""

POWER_FIELDS: frozenset[int] = frozenset({
    pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_AVERAGE,
})


def _ms_to_ns(ms: float) -> int:
    return round(ms * 1e6)


@dataclasses.dataclass(frozen=True, eq=False)
class BoardModel:
    """One fake GPU: its identity, true power over time and its sensor.

    ``t_ns``/``power_w`` is the true-power step function (ns since the epoch, W).  Clocks,
    temperature and clock-event reasons are sample-and-hold on ``state_t_ns`` (or constants
    when ``state_t_ns`` is empty).  ``supported`` lists the device calls that answer; the
    others return NVML_ERROR_NOT_SUPPORTED.  ``fields`` lists the field ids that answer.
    ``readings`` optionally replays recorded published readings instead of the sensor model:
    ``"instant"`` / ``"average"`` / ``"draw"`` → (publication ``t_ns``, ``power_mw``), sorted.
    ``field_timestamps`` says what the field values' timestamps are (we do not know what real
    drivers put there: scripts/gpu_check.py measures it).
    """

    name: str
    uuid: str
    t_ns: I64
    power_w: F64
    period_ms: float = 100.0
    window_ms: float = 25.0
    lag_ms: float = 1.5
    idle_w: float = 60.0
    phase_ns: int | None = None  # a publication instant; default t_ns[0]
    gain: float = 1.0
    average_window_ms: float = 1000.0
    power_usage_window_ms: float = 1000.0
    samples_capacity: int = 120
    energy_offset_mj: int = 1_000_000
    supported: frozenset[str] = DEVICE_CALLS
    fields: frozenset[int] = POWER_FIELDS
    state_t_ns: I64 = dataclasses.field(default_factory=lambda: np.empty(0, np.int64))
    sm_mhz: npt.ArrayLike = 1980
    mem_mhz: npt.ArrayLike = 2619
    temp_c: npt.ArrayLike = 45
    clock_reasons: npt.ArrayLike = 0
    readings: Mapping[str, tuple[I64, I64]] = dataclasses.field(default_factory=dict)
    field_timestamps: str = "publication"  # or "query" (the call's time) or "none" (0)
    _edges: I64 = dataclasses.field(init=False, repr=False)
    _cum_j: F64 = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        t = np.ascontiguousarray(self.t_ns, dtype=np.int64)
        p = np.ascontiguousarray(self.power_w, dtype=np.float64)
        if t.ndim != 1 or t.shape != p.shape or len(t) < 1:
            raise ValueError("BoardModel: t_ns and power_w must be equal-length 1-D, non-empty")
        if len(t) > 1 and bool(np.any(np.diff(t) <= 0)):
            raise ValueError("BoardModel: t_ns must be strictly increasing")
        object.__setattr__(self, "t_ns", t)
        object.__setattr__(self, "power_w", p)
        object.__setattr__(self, "state_t_ns", np.asarray(self.state_t_ns, dtype=np.int64))
        # Cumulative energy (J) at each grid point; the last step lasts until the grid's end,
        # which is one median step after the last point.
        step = int(np.median(np.diff(t))) if len(t) > 1 else 1_000_000
        edges = np.append(t, t[-1] + step)
        cum = np.concatenate([[0.0], np.cumsum(p * np.diff(edges) * 1e-9)])
        object.__setattr__(self, "_edges", edges)
        object.__setattr__(self, "_cum_j", cum)

    # --- true power ----------------------------------------------------------------------

    @property
    def period_ns(self) -> int:
        return _ms_to_ns(self.period_ms)

    @property
    def end_ns(self) -> int:
        return int(self._edges[-1])

    def energy_j(self, t_ns: npt.ArrayLike) -> F64:
        """True energy (J) from the grid start to ``t_ns`` (idle power outside the grid)."""
        t = np.asarray(t_ns, dtype=np.int64)
        edges, cum, p = self._edges, self._cum_j, self.power_w
        i = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(p) - 1)
        # Differences in int64 first: ns since the epoch do not fit a float64 exactly.
        inside = cum[i] + (t - edges[i]).astype(np.float64) * 1e-9 * p[i]
        before = (t - edges[0]).astype(np.float64) * 1e-9 * self.idle_w
        after = cum[-1] + (t - edges[-1]).astype(np.float64) * 1e-9 * self.idle_w
        out = np.where(t < edges[0], before, np.where(t > edges[-1], after, inside))
        return np.asarray(out, dtype=np.float64)

    def _energy_one(self, t: int) -> float:
        """:meth:`energy_j` for one time, with the same float operations (bit-identical)."""
        e_first, e_last = int(self._edges[0]), int(self._edges[-1])
        if t < e_first:
            return float(t - e_first) * 1e-9 * self.idle_w
        if t > e_last:
            return float(self._cum_j[-1]) + float(t - e_last) * 1e-9 * self.idle_w
        i = min(int(np.searchsorted(self._edges, t, side="right")) - 1, len(self.power_w) - 1)
        return (float(self._cum_j[i]) + float(t - int(self._edges[i])) * 1e-9
                * float(self.power_w[i]))

    def _published_one(self, pub_ns: int, window_ms: float | None = None) -> int:
        w_ns = _ms_to_ns(self.window_ms if window_ms is None else window_ms)
        end = pub_ns - _ms_to_ns(self.lag_ms)
        mean = (self._energy_one(end) - self._energy_one(end - w_ns)) / (w_ns * 1e-9)
        return round(self.gain * mean * 1e3)

    def mean_w(self, end_ns: npt.ArrayLike, window_ns: int) -> F64:
        """Mean true power over ``[end − window, end]``."""
        end = np.asarray(end_ns, dtype=np.int64)
        de = self.energy_j(end) - self.energy_j(end - window_ns)
        return np.asarray(de / (window_ns * 1e-9), dtype=np.float64)

    # --- the sensor --------------------------------------------------------------------------

    def publication_index(self, now_ns: int) -> int:
        """Index ``k`` of the latest reading published at or before ``now_ns``."""
        phase = int(self.t_ns[0]) if self.phase_ns is None else self.phase_ns
        return (now_ns - phase) // self.period_ns

    def publication_ns(self, k: npt.ArrayLike) -> I64:
        phase = int(self.t_ns[0]) if self.phase_ns is None else self.phase_ns
        return np.asarray(phase + np.asarray(k, dtype=np.int64) * self.period_ns, dtype=np.int64)

    def published_mw(self, pub_ns: npt.ArrayLike, window_ms: float | None = None) -> I64:
        """The reading (mW) published at ``pub_ns`` for a window (default: the sensor's)."""
        w_ns = _ms_to_ns(self.window_ms if window_ms is None else window_ms)
        end = np.asarray(pub_ns, dtype=np.int64) - _ms_to_ns(self.lag_ms)
        return np.asarray(np.rint(self.gain * self.mean_w(end, w_ns) * 1e3), dtype=np.int64)

    def _replayed(self, label: str, now_ns: int) -> tuple[int, int] | None:
        stream = self.readings.get(label)
        if stream is None:
            return None
        i = int(np.searchsorted(stream[0], now_ns, side="right")) - 1
        return None if i < 0 else (int(stream[0][i]) // 1000, int(stream[1][i]))

    def latest_reading(self, now_ns: int, field: str = "instant") -> tuple[int, int]:
        """``(timestamp_us, power_mw)`` of the latest reading of ``field`` ("instant" or
        "average") published at or before ``now_ns``."""
        got = self._replayed(field, now_ns)
        if got is not None:
            return got
        pub = int(self.publication_ns(self.publication_index(now_ns)))
        window = self.average_window_ms if field == "average" else None
        return pub // 1000, self._published_one(pub, window)

    def readings_after(self, last_seen_us: int, now_ns: int) -> tuple[I64, I64]:
        """Published instant readings with timestamp > ``last_seen_us`` (the newest
        ``samples_capacity`` of them): ``(timestamp_us, power_mw)``."""
        stream = self.readings.get("instant")
        if stream is not None:
            hi = int(np.searchsorted(stream[0], now_ns, side="right"))
            sel = slice(max(hi - self.samples_capacity, 0), hi)
            ts_us, mw = stream[0][sel] // 1000, stream[1][sel]
            keep = ts_us > last_seen_us
            return ts_us[keep], mw[keep]
        k_hi = self.publication_index(now_ns)
        k_lo = k_hi - self.samples_capacity + 1
        pub = self.publication_ns(np.arange(k_lo, k_hi + 1))
        pub = pub[pub // 1000 > last_seen_us]
        return pub // 1000, self.published_mw(pub)

    def energy_mj(self, now_ns: int) -> int:
        """The energy counter: offset + gain × true energy, in whole mJ."""
        return self.energy_offset_mj + math.floor(self.gain * self._energy_one(now_ns) * 1e3)

    def power_usage_mw(self, now_ns: int) -> int:
        got = self._replayed("draw", now_ns)
        if got is not None:
            return got[1]
        pub = int(self.publication_ns(self.publication_index(now_ns)))
        return self._published_one(pub, self.power_usage_window_ms)

    def state_at(self, now_ns: int) -> tuple[int, int, int, int]:
        """``(sm_mhz, mem_mhz, temp_c, clock_reasons)`` held at ``now_ns``."""
        vals = []
        for v in (self.sm_mhz, self.mem_mhz, self.temp_c, self.clock_reasons):
            arr = np.atleast_1d(np.asarray(v))
            if len(self.state_t_ns) == 0 or len(arr) == 1:
                vals.append(int(arr[0]))
            else:
                i = int(np.searchsorted(self.state_t_ns, now_ns, side="right")) - 1
                vals.append(int(arr[max(i, 0)]))
        return vals[0], vals[1], vals[2], vals[3]

    def without(self, *calls: str) -> BoardModel:
        """The same board with ``calls`` unsupported (device calls or ``"field:<id>"``)."""
        fields = {int(c.split(":", 1)[1]) for c in calls if c.startswith("field:")}
        names = {c for c in calls if not c.startswith("field:")}
        return dataclasses.replace(
            self, supported=self.supported - names, fields=self.fields - fields
        )


def square_wave(
    start_ns: int, seconds: float, low_w: float, high_w: float, period_s: float,
    *, step_ms: float = 1.0,
) -> tuple[I64, F64]:
    """A true-power grid alternating ``low_w``/``high_w`` every half ``period_s``."""
    step = _ms_to_ns(step_ms)
    t = start_ns + np.arange(round(seconds * 1e9 / step), dtype=np.int64) * step
    phase = ((t - start_ns) % round(period_s * 1e9)) < round(period_s * 1e9 / 2)
    return t, np.where(phase, low_w, high_w).astype(np.float64)


class VirtualClock:
    """A thread-safe clock (ns since the epoch) that moves only when the test moves it."""

    def __init__(self, start_ns: int) -> None:
        self._now = int(start_ns)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ns: int) -> int:
        with self._lock:
            self._now += int(ns)
            return self._now

    def advance_ms(self, ms: float) -> int:
        return self.advance(_ms_to_ns(ms))


_FIELD_ID_OF_LABEL = {"instant": pynvml.NVML_FI_DEV_POWER_INSTANT,
                      "average": pynvml.NVML_FI_DEV_POWER_AVERAGE}


def board_from_sim(res: SimResult, device: int = 0) -> BoardModel:
    """A board that replays a simulator run (``attribution.sim.simulate``).

    True power is the run's grid; the power fields answer the run's *published* readings
    (``trace.power`` rows with ``fresh=True``, jitter included), the energy counter is the
    run's (same offset and gain), clocks and temperature follow ``trace.clocks``.  Fields the
    run's sensor lacks (e.g. an average-only board) answer NVML_ERROR_NOT_SUPPORTED.
    """
    from attribution.model import PowerField

    tr, truth = res.trace, res.truth
    t_grid, power_w = res.true_power
    info = next(d for d in tr.devices if d.index == device)
    pw = tr.power.take((tr.power.device == device) & tr.power.fresh)
    readings: dict[str, tuple[I64, I64]] = {}
    for f in (PowerField.INSTANT, PowerField.AVERAGE, PowerField.DRAW):
        rows = pw.take(pw.field == f).sorted_by("t_ns")
        if len(rows):
            readings[f.label] = (rows.t_ns, rows.power_mw)
    sensor = truth.sensors.get("instant") or truth.sensors[truth.default_field]
    board = BoardModel(
        name=info.name, uuid=info.uuid, t_ns=np.asarray(t_grid), power_w=np.asarray(power_w),
        period_ms=float(sensor["period_ms"]), window_ms=float(sensor["window_ms"]),
        lag_ms=float(sensor["lag_ms"]), idle_w=float(truth.active_idle_w),
        gain=float(truth.gain),
        average_window_ms=float(truth.sensors.get("average", {}).get("window_ms", 1000.0)),
        fields=frozenset(_FIELD_ID_OF_LABEL[k] for k in readings if k in _FIELD_ID_OF_LABEL),
        readings=readings,
    )
    if "instant" not in readings:
        board = board.without("nvmlDeviceGetSamples")
    if "draw" not in readings:
        board = board.without("nvmlDeviceGetPowerUsage")
    en = tr.energy.take(tr.energy.device == device)
    if len(en):
        e0 = int(en.energy_mj[0]) - (board.energy_mj(int(en.t_ns[0])) - board.energy_offset_mj)
        board = dataclasses.replace(board, energy_offset_mj=e0)
    else:
        board = board.without("nvmlDeviceGetTotalEnergyConsumption")
    ck = tr.clocks.take(tr.clocks.device == device)
    if len(ck):
        board = dataclasses.replace(
            board, state_t_ns=ck.t_ns, sm_mhz=ck.sm_mhz, mem_mhz=ck.mem_mhz,
            temp_c=np.rint(ck.temp_c).astype(np.int64), clock_reasons=ck.clock_reasons)
    return board
