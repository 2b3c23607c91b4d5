"""The NVML sampler: board power, energy counter, clocks and thermals as columnar batches.

Owns everything ppwtop reads from NVML in the ppwtop process (the only app module importing
``pynvml``): which GPUs to sample (explicit indices, else ``CUDA_VISIBLE_DEVICES`` as indices or
UUIDs, else all), a one-time probe of what each board supports (remembered; an unsupported call
gives a sentinel and a note, never an exception), the polling thread, and the hand-over of
:class:`~attribution.model.PowerBatch` / :class:`EnergyBatch` / :class:`ClockBatch` rows by
:meth:`NvmlSampler.drain`.

Per poll (``poll_hz``, default 50): ``NVML_FI_DEV_POWER_INSTANT`` and ``..._AVERAGE`` through
``nvmlDeviceGetFieldValues`` (each value carries its own µs timestamp: ``t_ns`` is that
timestamp and ``fresh`` is True only when it differs from the previous one), and
``nvmlDeviceGetTotalEnergyConsumption`` (mJ, stamped with the poll time).  At ``samples_hz``
(default ``clock_hz``): the ``nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES)`` buffer drained
since the last seen timestamp.  At ``clock_hz`` (default 5): SM/memory clocks, GPU temperature
and the clock-event reasons.  ``nvmlDeviceGetPowerUsage`` is read only as a fallback when the
instant field is unsupported (it is a 1 s average on Ampere-non-GA100/Ada/Hopper; a note says so).

The sampler measures its own cost: CPU time of the polling thread inside polls over wall time.
Its pure parts (device-list parsing, de-duplication state, row buffer, cadence report) live
in :mod:`ppwtop.collectors.nvml_rows`.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pynvml

from attribution.columns import UNKNOWN
from attribution.model import DeviceInfo, PowerField, Trace
from ppwtop.collectors.nvml_rows import (
    FieldState,
    RowBuffer,
    cadence_report,
    parse_cuda_visible_devices,
)

FIELD_IDS: Mapping[PowerField, int] = {
    PowerField.INSTANT: pynvml.NVML_FI_DEV_POWER_INSTANT,
    PowerField.AVERAGE: pynvml.NVML_FI_DEV_POWER_AVERAGE,
}
_FIELD_OF_ID = {v: k for k, v in FIELD_IDS.items()}

_VALUE_ATTR = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}

_REASON_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetCurrentClocksThrottleReasons")


class NvmlUnavailableError(RuntimeError):
    """NVML could not be initialised (no driver, no library, no permission)."""


def _value(v: Any, value_type: int) -> int:
    """A power value (mW) from an nvmlValue_t union of the given type."""
    raw: float = getattr(v, _VALUE_ATTR.get(value_type, "uiVal"))
    return round(raw)


class _Device:
    """What the probe found on one board, plus the de-duplication state."""

    def __init__(self, device_id: int, nvml_index: int, handle: Any, name: str,
                 uuid: str) -> None:
        self.device_id = device_id
        self.nvml_index = nvml_index
        self.handle = handle
        self.name = name
        self.uuid = uuid
        self.field_ids: list[int] = []
        self.stats: dict[int, FieldState] = {f: FieldState() for f in FIELD_IDS.values()}
        self.samples = False
        self.samples_last_us = 0
        self.power_usage = False  # fallback DRAW signal
        self.last_usage_mw = -1
        self.energy = False
        self.sm_clock = False
        self.mem_clock = False
        self.temperature = False
        self.reasons_call: str | None = None
        self.lost = False

    def describe(self) -> dict[str, Any]:
        return {
            "device": self.device_id, "nvml_index": self.nvml_index, "name": self.name,
            "uuid": self.uuid,
            "fields": [_FIELD_OF_ID[f].label for f in self.field_ids],
            "samples_buffer": self.samples, "power_usage_fallback": self.power_usage,
            "energy_counter": self.energy, "sm_clock": self.sm_clock,
            "mem_clock": self.mem_clock, "temperature": self.temperature,
            "clock_reasons": self.reasons_call is not None, "lost": self.lost,
            "field_stats": {_FIELD_OF_ID[f].label: self.stats[f].describe()
                            for f in self.field_ids},
        }


class NvmlSampler:
    """Samples NVML on one thread (:meth:`start`/:meth:`stop`) or by :meth:`poll_once`.

    ``devices``: NVML indices to sample; None means ``CUDA_VISIBLE_DEVICES`` (then the batches'
    ``device`` is the CUDA ordinal, i.e. the position in that list) or else all GPUs (then it
    is the NVML index).  ``clock`` gives ns since the epoch (tests pass a virtual clock).
    """

    def __init__(
        self,
        devices: list[int] | None = None,
        poll_hz: float = 50.0,
        clock_hz: float = 5.0,
        clock: Callable[[], int] = time.time_ns,
        *,
        samples_hz: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if poll_hz <= 0 or clock_hz <= 0:
            raise ValueError("poll_hz and clock_hz must be positive")
        self.requested = None if devices is None else list(devices)
        self.poll_hz = float(poll_hz)
        self.clock_hz = float(clock_hz)
        self.samples_hz = float(samples_hz if samples_hz is not None else clock_hz)
        self.clock = clock
        self._env = os.environ if env is None else env
        self.notes: list[str] = []
        self.errors: Counter[str] = Counter()
        self.driver_version = ""
        self.selection = "all"
        self._devices: list[_Device] = []
        self._rows = RowBuffer()
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._opened = False
        self._closed = False
        self._next_clock_ns = 0
        self._next_samples_ns = 0
        self.polls = 0
        self.overruns = 0
        self._busy_cpu_ns = 0
        self._busy_wall_ns = 0  # time inside polls, blocked or not (slow NVML calls show here)
        self._wall_start_ns = 0
        self._wall_end_ns: int | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        """Initialise NVML, select the GPUs and probe what each supports (once)."""
        if self._opened:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise NvmlUnavailableError(f"NVML is not available: {e}") from e
        try:
            self._discover()
        except BaseException:
            pynvml.nvmlShutdown()
            raise
        self._opened = True
        self._wall_start_ns = time.monotonic_ns()

    def _discover(self) -> None:
        self.driver_version = self._try(pynvml.nvmlSystemGetDriverVersion, "", "driver version")
        count = int(pynvml.nvmlDeviceGetCount())
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        uuids = [self._try(pynvml.nvmlDeviceGetUUID, "", "uuid", h) for h in handles]
        for nvml_index, device_id in self._select(count, uuids):
            h = handles[nvml_index]
            name = self._try(pynvml.nvmlDeviceGetName, "", "name", h)
            dev = _Device(device_id, nvml_index, h, str(name), str(uuids[nvml_index]))
            self._probe(dev)
            self._devices.append(dev)
        if not self._devices:
            self._note("no GPU selected: the sampler produces no rows")

    def _select(self, count: int, uuids: Sequence[str]) -> list[tuple[int, int]]:
        """``(nvml_index, device_id)`` pairs to sample."""
        if self.requested is not None:
            self.selection = "explicit"
            bad = [i for i in self.requested if not 0 <= i < count]
            if bad:
                raise ValueError(f"no GPU with NVML index {bad} (this machine has {count})")
            return [(i, i) for i in dict.fromkeys(self.requested)]
        cvd = self._env.get("CUDA_VISIBLE_DEVICES")
        if cvd is None:
            return [(i, i) for i in range(count)]
        self.selection = "CUDA_VISIBLE_DEVICES"
        picked, notes = parse_cuda_visible_devices(cvd, uuids)
        for n in notes:
            self._note(n)
        if (count > 1 and self._env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"
                and any(re.fullmatch(r"\s*\d+\s*", e) for e in cvd.split(","))):
            self._note("CUDA_VISIBLE_DEVICES integers read as NVML (PCI-bus) indices; CUDA's "
                       "default order may differ: set CUDA_DEVICE_ORDER=PCI_BUS_ID or use UUIDs")
        return [(idx, pos) for pos, idx in enumerate(picked)]

    def _probe(self, d: _Device) -> None:
        tag = f"GPU {d.device_id} ({d.name})"
        try:
            vals = pynvml.nvmlDeviceGetFieldValues(d.handle, list(FIELD_IDS.values()))
            for v in vals:
                if v.nvmlReturn == pynvml.NVML_SUCCESS:
                    d.field_ids.append(int(v.fieldId))
                else:
                    label = _FIELD_OF_ID[int(v.fieldId)].label
                    self._note(f"{tag}: power field '{label}' unsupported "
                               f"({pynvml.NVMLError(v.nvmlReturn)})")
        except pynvml.NVMLError as e:
            self._note(f"{tag}: nvmlDeviceGetFieldValues unsupported ({e})")
        if pynvml.NVML_FI_DEV_POWER_INSTANT not in d.field_ids:
            d.power_usage = self._supported(tag, "power usage", pynvml.nvmlDeviceGetPowerUsage,
                                            d.handle)
            if d.power_usage:
                self._note(f"{tag}: instant power unavailable; falling back to "
                           "nvmlDeviceGetPowerUsage (a 1 s average on Ampere-non-GA100, Ada and "
                           "Hopper): readings are smoothed and stamped with the poll time")
        try:
            _, samples = pynvml.nvmlDeviceGetSamples(d.handle, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
            d.samples = True
            if samples:
                d.samples_last_us = max(int(s.timeStamp) for s in samples)
        except pynvml.NVMLError_NotFound:
            d.samples = True  # supported, nothing buffered yet
        except pynvml.NVMLError as e:
            self._note(f"{tag}: power samples buffer unsupported ({e})")
        d.energy = self._supported(tag, "energy counter",
                                   pynvml.nvmlDeviceGetTotalEnergyConsumption, d.handle)
        if not d.energy:
            self._note(f"{tag}: no energy counter: no closure reference for this GPU")
        d.sm_clock = self._supported(tag, "SM clock", pynvml.nvmlDeviceGetClockInfo,
                                     d.handle, pynvml.NVML_CLOCK_SM)
        d.mem_clock = self._supported(tag, "memory clock", pynvml.nvmlDeviceGetClockInfo,
                                      d.handle, pynvml.NVML_CLOCK_MEM)
        d.temperature = self._supported(tag, "temperature", pynvml.nvmlDeviceGetTemperature,
                                        d.handle, pynvml.NVML_TEMPERATURE_GPU)
        for call in _REASON_CALLS:
            try:
                getattr(pynvml, call)(d.handle)
                d.reasons_call = call
                break
            except pynvml.NVMLError_FunctionNotFound:
                continue
            except pynvml.NVMLError as e:
                self._note(f"{tag}: clock-event reasons unsupported ({e})")
                break

    def _supported(self, tag: str, what: str, fn: Callable[..., Any], *args: Any) -> bool:
        try:
            fn(*args)
            return True
        except pynvml.NVMLError as e:
            self._note(f"{tag}: {what} unsupported ({e})")
            return False

    def _try(self, fn: Callable[..., Any], default: Any, what: str, *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            self._note(f"NVML {what} unavailable ({e})")
            return default

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def start(self) -> None:
        """Open (if needed) and start the polling thread."""
        if self._thread is not None:
            return
        if self._closed:
            raise RuntimeError("this NvmlSampler was stopped; make a new one")
        self.open()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ppwtop-nvml", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread (if running) and shut NVML down.  Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self._note("NVML polling thread did not stop in time")
            self._thread = None
        self.close()

    def close(self) -> None:
        if self._opened and not self._closed:
            self._closed = True
            self._wall_end_ns = time.monotonic_ns()
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as e:
                self._note(f"nvmlShutdown failed ({e})")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        period_ns = round(1e9 / self.poll_hz)
        next_ns = time.monotonic_ns()
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception as e:  # a bug must not kill collection silently
                self.errors["poll"] += 1
                self._note(f"NVML poll failed: {type(e).__name__}: {e}")
            next_ns += period_ns
            delay_ns = next_ns - time.monotonic_ns()
            if delay_ns < 0:
                self.overruns += 1
                next_ns = time.monotonic_ns()
                delay_ns = 0
            self._stop.wait(delay_ns / 1e9)

    # --- polling -------------------------------------------------------------------------------

    def poll_once(self) -> None:
        """One poll of every selected GPU (clocks and samples when they are due)."""
        if not self._opened:
            self.open()
        if self._closed:
            return
        with self._poll_lock:
            cpu0 = time.thread_time_ns()
            wall0 = time.perf_counter_ns()
            rows = RowBuffer()
            now = int(self.clock())
            clocks_due = now >= self._next_clock_ns
            samples_due = now >= self._next_samples_ns
            if clocks_due:
                self._next_clock_ns = now + round(1e9 / self.clock_hz)
            if samples_due:
                self._next_samples_ns = now + round(1e9 / self.samples_hz)
            for d in self._devices:
                if d.lost:
                    continue
                self._poll_power(d, now, rows)
                if samples_due and d.samples and not d.lost:
                    self._poll_samples(d, rows)
                if clocks_due and not d.lost:
                    self._poll_clocks(d, now, rows)
            with self._lock:
                self._rows.extend(rows)
            self.polls += 1
            self._busy_cpu_ns += time.thread_time_ns() - cpu0
            self._busy_wall_ns += time.perf_counter_ns() - wall0

    def _call(self, d: _Device, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None after counting (and noting once) an error."""
        try:
            return fn(*args)
        except pynvml.NVMLError_GpuIsLost:
            d.lost = True
            self._note(f"GPU {d.device_id} ({d.name}) is lost: sampling of it stopped")
        except pynvml.NVMLError as e:
            self.errors[what] += 1
            self._note(f"GPU {d.device_id}: {what} failed at least once ({e})")
        return None

    def _poll_power(self, d: _Device, now: int, rows: RowBuffer) -> None:
        if d.field_ids:
            vals = self._call(d, "field values", pynvml.nvmlDeviceGetFieldValues,
                              d.handle, d.field_ids)
            for v in vals if vals is not None else ():
                if v.nvmlReturn != pynvml.NVML_SUCCESS:
                    self.errors["field value"] += 1
                    continue
                fid = int(v.fieldId)
                mw = _value(v.value, int(v.valueType))
                ts_us = int(v.timestamp)
                if ts_us <= 0:
                    self._note(f"GPU {d.device_id}: field values carry no timestamp; "
                               "using poll time and de-duplicating on the value")
                t_ns, fresh = d.stats[fid].add(ts_us, mw, now)
                rows.power(t_ns, mw, d.device_id, _FIELD_OF_ID[fid], fresh)
        elif d.power_usage:
            mw = self._call(d, "power usage", pynvml.nvmlDeviceGetPowerUsage, d.handle)
            if mw is not None:
                rows.power(now, int(mw), d.device_id, PowerField.DRAW, mw != d.last_usage_mw)
                d.last_usage_mw = int(mw)
        if d.energy and not d.lost:
            mj = self._call(d, "energy counter", pynvml.nvmlDeviceGetTotalEnergyConsumption,
                            d.handle)
            if mj is not None:
                rows.e_t.append(now)
                rows.e_mj.append(int(mj))
                rows.e_dev.append(d.device_id)

    def _poll_samples(self, d: _Device, rows: RowBuffer) -> None:
        try:
            vtype, samples = pynvml.nvmlDeviceGetSamples(
                d.handle, pynvml.NVML_TOTAL_POWER_SAMPLES, d.samples_last_us)
        except pynvml.NVMLError_NotFound:
            return  # nothing new
        except pynvml.NVMLError as e:
            self.errors["samples"] += 1
            self._note(f"GPU {d.device_id}: power samples failed at least once ({e})")
            return
        for s in samples:
            ts_us = int(s.timeStamp)
            if ts_us <= d.samples_last_us:
                continue
            rows.power(ts_us * 1000, _value(s.sampleValue, int(vtype)), d.device_id,
                       PowerField.SAMPLES, True)
            d.samples_last_us = ts_us

    def _poll_clocks(self, d: _Device, now: int, rows: RowBuffer) -> None:
        sm = mem = reasons = None
        temp = None
        if d.sm_clock:
            sm = self._call(d, "SM clock", pynvml.nvmlDeviceGetClockInfo, d.handle,
                            pynvml.NVML_CLOCK_SM)
        if d.mem_clock:
            mem = self._call(d, "memory clock", pynvml.nvmlDeviceGetClockInfo, d.handle,
                             pynvml.NVML_CLOCK_MEM)
        if d.temperature:
            temp = self._call(d, "temperature", pynvml.nvmlDeviceGetTemperature, d.handle,
                              pynvml.NVML_TEMPERATURE_GPU)
        if d.reasons_call is not None:
            reasons = self._call(d, "clock reasons", getattr(pynvml, d.reasons_call), d.handle)
        rows.c_t.append(now)
        rows.c_dev.append(d.device_id)
        rows.c_sm.append(UNKNOWN if sm is None else int(sm))
        rows.c_mem.append(UNKNOWN if mem is None else int(mem))
        rows.c_temp.append(float("nan") if temp is None else float(temp))
        rows.c_reasons.append(0 if reasons is None else int(reasons))

    # --- hand-over ---------------------------------------------------------------------------

    @property
    def cost_fraction(self) -> float:
        """CPU time spent polling / wall time since open (fraction of one core)."""
        if not self._opened:
            return 0.0
        end = self._wall_end_ns if self._wall_end_ns is not None else time.monotonic_ns()
        wall = max(end - self._wall_start_ns, 1)
        return self._busy_cpu_ns / wall

    @property
    def device_infos(self) -> list[DeviceInfo]:
        return [DeviceInfo(index=d.device_id, name=d.name, uuid=d.uuid) for d in self._devices]

    def meta(self) -> dict[str, Any]:
        """JSON-able run metadata: what was read, what is unsupported, and the cost."""
        for d in self._devices:
            for f in d.field_ids:
                if d.stats[f].looks_like_query_time():
                    self._note(f"GPU {d.device_id}: '{_FIELD_OF_ID[f].label}' timestamps advance"
                               " on every poll while the value repeats: they look like query "
                               "times, so fresh=True does not mean a new sensor reading")
        return {"nvml": {
            "driver_version": self.driver_version,
            "selection": self.selection,
            "poll_hz": self.poll_hz, "clock_hz": self.clock_hz, "samples_hz": self.samples_hz,
            "devices": [d.describe() for d in self._devices],
            "notes": list(self.notes),
            "errors": dict(self.errors),
            "polls": self.polls,
            "overruns": self.overruns,
            "cost_fraction": self.cost_fraction,
            "poll_cpu_us_mean": self._busy_cpu_ns / 1e3 / max(self.polls, 1),
            "poll_wall_us_mean": self._busy_wall_ns / 1e3 / max(self.polls, 1),
        }}

    def drain(self) -> Trace:
        """Every row collected since the last drain (thread-safe), each batch sorted by time."""
        with self._lock:
            r, self._rows = self._rows, RowBuffer()
        power, energy, clocks = r.to_batches()
        return Trace(power=power, energy=energy, clocks=clocks, devices=self.device_infos,
                     meta=self.meta())


# --- characterisation on a real GPU (for scripts/gpu_check.py) ------------------------------


def characterize(seconds: float = 10.0, poll_hz: float = 200.0, devices: list[int] | None = None,
                 repeats: int = 50, clock: Callable[[], int] = time.time_ns) -> dict[str, Any]:
    """Run the sampler for ``seconds`` at ``poll_hz`` and report, per GPU, what this board's
    NVML really does: spacing of fresh instant timestamps (T), how often polls see a new one,
    samples-buffer spacing, energy-counter update period and its ratio to the mean instant
    power × time (≈ 1 under a steady load), each call's mean latency, and the sampler's cost
    (in ``meta``).  JSON-able.
    """
    s = NvmlSampler(devices, poll_hz=poll_hz, clock_hz=5.0, clock=clock, samples_hz=5.0)
    s.open()
    latency: dict[str, dict[str, float]] = {}
    for d in s._devices:
        calls: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
            "field_values": (pynvml.nvmlDeviceGetFieldValues, (d.handle, d.field_ids)),
            "energy": (pynvml.nvmlDeviceGetTotalEnergyConsumption, (d.handle,)),
            "sm_clock": (pynvml.nvmlDeviceGetClockInfo, (d.handle, pynvml.NVML_CLOCK_SM)),
            "power_usage": (pynvml.nvmlDeviceGetPowerUsage, (d.handle,)),
        }
        for name, (fn, args) in calls.items():
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            try:
                for _ in range(repeats):
                    fn(*args)
            except pynvml.NVMLError:
                continue
            latency[f"{d.device_id}:{name}"] = {
                "wall_us": (time.perf_counter_ns() - w0) / 1e3 / repeats,
                "cpu_us": (time.thread_time_ns() - c0) / 1e3 / repeats}
    s.start()
    time.sleep(seconds)
    s.stop()
    tr = s.drain()
    return {"meta": tr.meta, "latency": latency, "devices": cadence_report(tr)}
