"""The one data model: columnar record batches shared by importers, collectors, recordings,
the engine and the UI.

Every batch is a frozen dataclass of equal-length numpy columns whose names carry their units
(``start_ns``, ``power_mw``, ``energy_mj``).  All times are integer nanoseconds since the Unix
epoch (CLOCK_REALTIME), whatever the source.  Names (kernels, API calls, markers) are interned
in one :class:`StringTable` per :class:`Trace`; batches hold ``name_id`` integers into it.

This module owns the schema (column names and dtypes, enum codes); the generic column
operations (validation, concatenation, selection, sorting) are :mod:`attribution.columns`'s.
It does no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from attribution.columns import UNKNOWN, Columns

I8 = npt.NDArray[np.int8]
I16 = npt.NDArray[np.int16]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


class CopyKind(enum.IntEnum):
    """Direction of a memory copy (CUPTI_ACTIVITY_MEMCPY_KIND_* collapsed to what matters)."""

    OTHER = 0
    HTOD = 1
    DTOH = 2
    DTOD = 3
    HTOH = 4
    PTOP = 5

    @property
    def label(self) -> str:
        return _COPY_LABELS[self]


_COPY_LABELS = {
    CopyKind.OTHER: "other",
    CopyKind.HTOD: "HtoD",
    CopyKind.DTOH: "DtoH",
    CopyKind.DTOD: "DtoD",
    CopyKind.HTOH: "HtoH",
    CopyKind.PTOP: "PtoP",
}


class MemKind(enum.IntEnum):
    """Memory kind of a copy endpoint or memset target (CUPTI_ACTIVITY_MEMORY_KIND_*)."""

    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2
    DEVICE = 3
    ARRAY = 4
    MANAGED = 5

    @property
    def label(self) -> str:
        return self.name.lower()


class ApiKind(enum.IntEnum):
    """What a runtime/driver API call does, as far as idle-cause classification cares."""

    OTHER = 0
    LAUNCH = 1
    SYNC = 2
    MEMCPY = 3
    MEMSET = 4
    ALLOC = 5


class MarkerKind(enum.IntEnum):
    """Origin of a named range."""

    NVTX = 1
    USER_ANNOTATION = 2  # host-side record_function / user_annotation
    GPU_USER_ANNOTATION = 3  # the GPU-side projection Kineto writes
    PROFILER_STEP = 4  # ProfilerStep#N
    STEP_MARK = 5  # ppwtop.mark_step(items=N)


class PowerField(enum.IntEnum):
    """Which NVML/nvidia-smi power signal a sample comes from (sensor models differ)."""

    DRAW = 0  # nvidia-smi power.draw / nvmlDeviceGetPowerUsage (GPU-dependent meaning)
    INSTANT = 1  # power.draw.instant / NVML_FI_DEV_POWER_INSTANT
    AVERAGE = 2  # power.draw.average / NVML_FI_DEV_POWER_AVERAGE (1 s window)
    SAMPLES = 3  # nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES)
    METER = 4  # an external meter (ground truth in accuracy runs)

    @property
    def label(self) -> str:
        return self.name.lower()


def _dt(s: str) -> np.dtype[Any]:
    return np.dtype(s)


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class KernelBatch(Columns):
    """Kernel executions on the GPU."""

    start_ns: I64
    end_ns: I64
    device: I16
    stream: I32
    correlation: I64
    name_id: I32
    grid_x: I32
    grid_y: I32
    grid_z: I32
    block_x: I32
    block_y: I32
    block_z: I32
    registers: I32
    shared_mem_bytes: I64

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {
        "start_ns": _dt("i8"),
        "end_ns": _dt("i8"),
        "device": _dt("i2"),
        "stream": _dt("i4"),
        "correlation": _dt("i8"),
        "name_id": _dt("i4"),
        "grid_x": _dt("i4"),
        "grid_y": _dt("i4"),
        "grid_z": _dt("i4"),
        "block_x": _dt("i4"),
        "block_y": _dt("i4"),
        "block_z": _dt("i4"),
        "registers": _dt("i4"),
        "shared_mem_bytes": _dt("i8"),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class CopyBatch(Columns):
    """Memory copies (``kind`` is a :class:`CopyKind`, memories are :class:`MemKind`)."""

    start_ns: I64
    end_ns: I64
    device: I16
    stream: I32
    correlation: I64
    kind: U8
    src_mem: U8
    dst_mem: U8
    bytes: I64

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {
        "start_ns": _dt("i8"),
        "end_ns": _dt("i8"),
        "device": _dt("i2"),
        "stream": _dt("i4"),
        "correlation": _dt("i8"),
        "kind": _dt("u1"),
        "src_mem": _dt("u1"),
        "dst_mem": _dt("u1"),
        "bytes": _dt("i8"),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class MemsetBatch(Columns):
    """Memsets on the GPU."""

    start_ns: I64
    end_ns: I64
    device: I16
    stream: I32
    correlation: I64
    mem: U8
    bytes: I64

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {
        "start_ns": _dt("i8"),
        "end_ns": _dt("i8"),
        "device": _dt("i2"),
        "stream": _dt("i4"),
        "correlation": _dt("i8"),
        "mem": _dt("u1"),
        "bytes": _dt("i8"),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ApiBatch(Columns):
    """Host-side CUDA runtime/driver calls (``kind`` is an :class:`ApiKind`)."""

    start_ns: I64
    end_ns: I64
    pid: I64
    tid: I64
    correlation: I64
    name_id: I32
    kind: U8

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {
        "start_ns": _dt("i8"),
        "end_ns": _dt("i8"),
        "pid": _dt("i8"),
        "tid": _dt("i8"),
        "correlation": _dt("i8"),
        "name_id": _dt("i4"),
        "kind": _dt("u1"),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class MarkerBatch(Columns):
    """Named ranges: NVTX, user annotations, ProfilerStep#N, mark_step (``device`` -1 = host).

    ``items`` is the work-unit count of a step mark (NaN when none was given).
    """

    start_ns: I64
    end_ns: I64
    device: I16
    tid: I64
    name_id: I32
    kind: U8
    items: F64

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {
        "start_ns": _dt("i8"),
        "end_ns": _dt("i8"),
        "device": _dt("i2"),
        "tid": _dt("i8"),
        "name_id": _dt("i4"),
        "kind": _dt("u1"),
        "items": _dt("f8"),
    }


POLL_TIME_KEY = "power_time"
POLL_TIME = "poll"
"""``Trace.meta[POLL_TIME_KEY] == POLL_TIME``: the power rows are timestamped when a poller
(nvidia-smi, zeus) read them, not when the sensor published them; a reading was published
some time since the previous poll, and the engine averages its activity over that time
(``engine/timebase.py``).  Kept by :meth:`Trace.merged_with`."""


@dataclasses.dataclass(frozen=True, slots=True)
class PowerBatch(Columns):
    """Board power readings.

    ``t_ns`` is the reading's own timestamp when the source gives one (NVML field values and
    samples carry one), else the poll time.  ``fresh`` is False for a poll that repeated the
    previous reading of the same device and field (nvidia-smi polls faster than the sensor
    publishes); such rows are kept so the engine can see the poll cadence.
    """

    t_ns: I64
    power_mw: I64
    device: I16
    field: U8
    fresh: B

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {
        "t_ns": _dt("i8"),
        "power_mw": _dt("i8"),
        "device": _dt("i2"),
        "field": _dt("u1"),
        "fresh": _dt("?"),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class EnergyBatch(Columns):
    """Energy-counter readings (nvmlDeviceGetTotalEnergyConsumption, mJ since driver load)."""

    t_ns: I64
    energy_mj: I64
    device: I16

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {
        "t_ns": _dt("i8"),
        "energy_mj": _dt("i8"),
        "device": _dt("i2"),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ClockBatch(Columns):
    """Clock and thermal samples; ``clock_reasons`` holds nvmlClocksEventReason* bits."""

    t_ns: I64
    device: I16
    sm_mhz: I32
    mem_mhz: I32
    temp_c: F32
    clock_reasons: U64

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {
        "t_ns": _dt("i8"),
        "device": _dt("i2"),
        "sm_mhz": _dt("i4"),
        "mem_mhz": _dt("i4"),
        "temp_c": _dt("f4"),
        "clock_reasons": _dt("u8"),
    }


# nvmlClocksEventReason* bit values (nvml.h)
CLOCK_REASON_GPU_IDLE = 0x1
CLOCK_REASON_APP_SETTING = 0x2
CLOCK_REASON_SW_POWER_CAP = 0x4
CLOCK_REASON_HW_SLOWDOWN = 0x8
CLOCK_REASON_SYNC_BOOST = 0x10
CLOCK_REASON_SW_THERMAL = 0x20
CLOCK_REASON_HW_THERMAL = 0x40
CLOCK_REASON_HW_POWER_BRAKE = 0x80
CLOCK_REASON_DISPLAY_CLOCK = 0x100

CLAMP_REASONS: Mapping[int, str] = {
    CLOCK_REASON_SW_POWER_CAP: "sw_power_cap",
    CLOCK_REASON_HW_SLOWDOWN: "hw_slowdown",
    CLOCK_REASON_SW_THERMAL: "sw_thermal",
    CLOCK_REASON_HW_THERMAL: "hw_thermal",
    CLOCK_REASON_HW_POWER_BRAKE: "hw_power_brake",
}
"""The clock-event reasons that mean the GPU was held below the clock it asked for."""


# --------------------------------------------------------------------------------------------
# String table, devices, the whole trace
# --------------------------------------------------------------------------------------------


UNKNOWN_NAME = "<unknown name>"
"""What :meth:`Trace.name` answers for an id not in the table (-1: a record whose name a
damaged recording lost), so such a record is never read as another record's name."""


class StringTable:
    """Interned names.  ``intern`` is O(1); ids are dense and stable for the table's life.

    Indexing takes ids ``0 <= i < len``: a negative id is an IndexError, not the name counted
    from the end (which would label a record with another record's name).
    """

    __slots__ = ("_ids", "_names")

    def __init__(self, names: Sequence[str] = ()) -> None:
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        for n in names:
            self.intern(n)

    def intern(self, name: str) -> int:
        i = self._ids.get(name)
        if i is None:
            i = len(self._names)
            self._names.append(name)
            self._ids[name] = i
        return i

    def intern_many(self, names: Iterable[str]) -> I32:
        return np.fromiter((self.intern(n) for n in names), dtype=np.int32)

    def get(self, name: str) -> int | None:
        return self._ids.get(name)

    def __getitem__(self, i: int) -> str:
        if i < 0:
            raise IndexError(f"name id {i} is not in the string table")
        return self._names[i]

    def __len__(self) -> int:
        return len(self._names)

    def names(self) -> list[str]:
        return list(self._names)

    def remap_from(self, other: StringTable) -> I32:
        """Intern all of ``other``'s names here; return the old-id → new-id map."""
        return np.fromiter((self.intern(n) for n in other._names), dtype=np.int32,
                           count=len(other))


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One GPU as the source describes it."""

    index: int
    name: str = ""
    uuid: str = ""
    total_memory_bytes: int = UNKNOWN
    sm_count: int = UNKNOWN
    compute_capability: str = ""
    vendor: str = "nvidia"  # "amd" for ROCm traces (which ppwtop refuses)


@dataclasses.dataclass(slots=True)
class Trace:
    """Everything one source gave: batches, names, devices and run metadata.

    ``meta`` holds JSON-able run metadata (command, pid, source path and format, sensor field,
    ppwtop version, what late attach could not see, importer notes such as skipped rows).
    """

    strings: StringTable = dataclasses.field(default_factory=StringTable)
    kernels: KernelBatch = dataclasses.field(default_factory=KernelBatch.empty)
    copies: CopyBatch = dataclasses.field(default_factory=CopyBatch.empty)
    memsets: MemsetBatch = dataclasses.field(default_factory=MemsetBatch.empty)
    apis: ApiBatch = dataclasses.field(default_factory=ApiBatch.empty)
    markers: MarkerBatch = dataclasses.field(default_factory=MarkerBatch.empty)
    power: PowerBatch = dataclasses.field(default_factory=PowerBatch.empty)
    energy: EnergyBatch = dataclasses.field(default_factory=EnergyBatch.empty)
    clocks: ClockBatch = dataclasses.field(default_factory=ClockBatch.empty)
    devices: list[DeviceInfo] = dataclasses.field(default_factory=list)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    BATCH_FIELDS: ClassVar[tuple[str, ...]] = (
        "kernels", "copies", "memsets", "apis", "markers", "power", "energy", "clocks",
    )

    def gpu_span_ns(self) -> tuple[int, int] | None:
        """First start and last end over kernels, copies and memsets (None if none)."""
        starts = [b.start_ns.min() for b in (self.kernels, self.copies, self.memsets) if len(b)]
        ends = [b.end_ns.max() for b in (self.kernels, self.copies, self.memsets) if len(b)]
        if not starts:
            return None
        return int(min(starts)), int(max(ends))

    def name(self, name_id: int) -> str:
        """The name of ``name_id``; :data:`UNKNOWN_NAME` for an id not in the table."""
        if 0 <= name_id < len(self.strings):
            return self.strings[name_id]
        return UNKNOWN_NAME

    def merged_with(self, other: Trace) -> Trace:
        """A new trace holding both traces' records, names re-interned into one table."""
        strings = StringTable(self.strings.names())
        remap = strings.remap_from(other.strings)
        out = Trace(strings=strings, devices=list(self.devices), meta=dict(self.meta))
        if POLL_TIME_KEY in other.meta and POLL_TIME_KEY not in out.meta:
            out.meta[POLL_TIME_KEY] = other.meta[POLL_TIME_KEY]
        known = {d.index for d in out.devices}
        out.devices.extend(d for d in other.devices if d.index not in known)
        for f in self.BATCH_FIELDS:
            a = getattr(self, f)
            b = getattr(other, f)
            if "name_id" in b.DTYPES and len(b):
                cols = b.columns()
                ids = cols["name_id"]
                cols["name_id"] = np.where(ids >= 0, remap[np.clip(ids, 0, None)], ids)
                b = type(b)(**cols)
            setattr(out, f, type(a).concat([a, b]))
        return out


BATCH_TYPES: Mapping[str, type[Columns]] = {
    "kernels": KernelBatch,
    "copies": CopyBatch,
    "memsets": MemsetBatch,
    "apis": ApiBatch,
    "markers": MarkerBatch,
    "power": PowerBatch,
    "energy": EnergyBatch,
    "clocks": ClockBatch,
}
"""Batch kind (the :class:`Trace` field name, in ``Trace.BATCH_FIELDS`` order) → batch class:
the recording format's kinds and the live engine's record buffer both use it."""
