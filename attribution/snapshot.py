"""The attribution snapshot (``ppwtop.snapshot/1``): immutable result of one attribution.

Owns the typed form of the contract's snapshot JSON and its conversion to and from plain
dicts (the app writes them with orjson).  Keys the contract requires are always present;
extra keys (``warnings``, ``meta``, ``clusters``, ...) may be added, never removed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

T = TypeVar("T")
R = TypeVar("R", "KernelRow", "CopyRow", "IdleRow")

SCHEMA = "ppwtop.snapshot/1"

IDLE_CAUSES = ("launch_gap", "sync_wait", "host_stall", "other")


class FloatSeries(Sequence[float]):
    """A per-step series held as a float64 array, read as a sequence of Python floats.

    A live snapshot carries ~20 k steps' energies, latencies and items and is taken every
    tick, but the series are read by few (an export, a diff, the SLA panel): built as tuples
    of floats they cost ~1.4 ms a tick.  This keeps a copy of the array (a copy: ~10 µs) and
    makes floats only when iterated; ``np.asarray`` reads the array itself.  Equal to any
    sequence of the same floats (a tuple read back from JSON)."""

    __slots__ = ("_a",)

    def __init__(self, values: npt.ArrayLike) -> None:
        self._a: npt.NDArray[np.float64] = np.array(values, np.float64)
        self._a.flags.writeable = False

    def __len__(self) -> int:
        return len(self._a)

    @overload
    def __getitem__(self, i: int) -> float: ...
    @overload
    def __getitem__(self, i: slice) -> FloatSeries: ...
    def __getitem__(self, i: int | slice) -> float | FloatSeries:
        if isinstance(i, slice):
            return FloatSeries(self._a[i])
        return float(self._a[i])

    def __iter__(self) -> Iterator[float]:
        return iter(self._a.tolist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        return self._a if dtype is None and not copy else self._a.astype(dtype or np.float64)

    def tolist(self) -> list[float]:
        out: list[float] = self._a.tolist()
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FloatSeries):
            return bool(np.array_equal(self._a, other._a))
        if isinstance(other, tuple | list):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"FloatSeries({self.tolist()!r})"


@dataclasses.dataclass(frozen=True, slots=True)
class SensorInfo:
    field: str  # "instant" | "average" | "draw" | "samples" | "meter" | "none"
    period_ms: float
    window_ms: float
    lag_ms: float


@dataclasses.dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    model: str  # preset key, or "unknown"
    sensor: SensorInfo


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    start_ns: int
    end_ns: int

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclasses.dataclass(frozen=True, slots=True)
class Totals:
    energy_j: float
    kernel_energy_j: float
    copy_energy_j: float
    idle_energy_j: float
    active_idle_w: float
    measured_energy_j: float
    closure_error: float  # (energy_j - measured_energy_j) / measured_energy_j, 0 if unmeasured


@dataclasses.dataclass(frozen=True, slots=True)
class KernelRow:
    name: str
    gpu: int
    calls: int
    time_s: float
    energy_j: float
    dynamic_energy_j: float
    dynamic_energy_ci_j: tuple[float, float]
    avg_power_w: float
    resolvable: bool
    precision: str
    cluster: str | None = None  # set when not resolvable: the classes it is inseparable from
    why: str = ""  # why it is (not) resolvable


@dataclasses.dataclass(frozen=True, slots=True)
class CopyRow:
    kind: str
    memory: str
    gpu: int
    calls: int
    bytes: int
    time_s: float
    energy_j: float
    dynamic_energy_j: float
    dynamic_energy_ci_j: tuple[float, float] = (0.0, 0.0)
    resolvable: bool = True
    why: str = ""  # why it is (not) resolvable, as a kernel row's


@dataclasses.dataclass(frozen=True, slots=True)
class IdleRow:
    cause: str
    gpu: int
    time_s: float
    energy_j: float
    count: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Quantiles:
    mean: float
    p50: float
    p95: float
    p99: float


@dataclasses.dataclass(frozen=True, slots=True)
class Steps:
    count: int
    energy_j: Quantiles
    latency_ms: Quantiles
    items_per_j: float | None
    sla_ms: float | None = None
    sla_compliance: float | None = None  # fraction of steps within the SLA
    items_per_j_under_sla: float | None = None
    # per-step series (for diff bootstrap); may be empty in a summary-only snapshot
    step_energy_j: Sequence[float] = ()  # a tuple, or a FloatSeries from the engines
    step_latency_ms: Sequence[float] = ()
    step_items: Sequence[float] = ()
    work_unit: str = "steps"  # what items_per_j_under_sla counts: "items" or "steps"
    source: str = ""  # "ProfilerStep" | "mark_step" | "range:<name>"


@dataclasses.dataclass(frozen=True, slots=True)
class Inefficiency:
    rank: int
    mechanism: str
    energy_j: float
    share: float
    evidence: str
    fix: str
    owner: str
    validation: str
    energy_ci_j: tuple[float, float] | None = None
    resolvable: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    gpus: tuple[GpuInfo, ...]
    window: Window
    totals: Totals
    kernels: tuple[KernelRow, ...]
    copies: tuple[CopyRow, ...]
    idle: tuple[IdleRow, ...]
    steps: Steps | None
    inefficiencies: tuple[Inefficiency, ...] = ()
    warnings: tuple[str, ...] = ()
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schema": SCHEMA}
        d["gpus"] = [_plain(g) for g in self.gpus]
        d["window"] = {
            "start_ns": self.window.start_ns,
            "end_ns": self.window.end_ns,
            "duration_s": self.window.duration_s,
        }
        d["totals"] = _plain(self.totals)
        d["kernels"] = [_plain(k) for k in self.kernels]
        d["copies"] = [_plain(c) for c in self.copies]
        d["idle"] = [_plain(i) for i in self.idle]
        d["steps"] = None if self.steps is None else _plain(self.steps)
        d["inefficiencies"] = [_plain(i) for i in self.inefficiencies]
        d["warnings"] = list(self.warnings)
        d["meta"] = dict(self.meta)
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Snapshot:
        """Parse a snapshot dict; raises ValueError naming the first bad or missing key."""
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} snapshot (schema={d.get('schema')!r})")
        try:
            gpus = tuple(
                GpuInfo(
                    _checked("GpuInfo.index", "int", g["index"]),
                    _checked("GpuInfo.name", "str", g["name"]),
                    _checked("GpuInfo.model", "str", g["model"]),
                    _build(SensorInfo, g["sensor"]),
                )
                for g in _rows(d, "gpus")
            )
            w = d["window"]
            if "duration_s" in w:  # derived from the ns (Window), but a field all the same
                _checked("Window.duration_s", "float", w["duration_s"])
            steps_d = d["steps"]
            steps = None
            if steps_d is not None:
                steps = Steps(
                    count=_checked("Steps.count", "int", steps_d["count"]),
                    energy_j=_build(Quantiles, steps_d["energy_j"]),
                    latency_ms=_build(Quantiles, steps_d["latency_ms"]),
                    items_per_j=_optional(steps_d, "items_per_j"),
                    sla_ms=_optional(steps_d, "sla_ms"),
                    sla_compliance=_optional(steps_d, "sla_compliance"),
                    items_per_j_under_sla=_optional(steps_d, "items_per_j_under_sla"),
                    step_energy_j=_series(steps_d, "step_energy_j"),
                    step_latency_ms=_series(steps_d, "step_latency_ms"),
                    step_items=_series(steps_d, "step_items"),
                    work_unit=str(steps_d.get("work_unit", "steps")),
                    source=str(steps_d.get("source", "")),
                )
            start_ns = _checked("Window.start_ns", "int", w["start_ns"])
            end_ns = _checked("Window.end_ns", "int", w["end_ns"])
            if end_ns < start_ns:
                raise ValueError(f"Window.end_ns {end_ns} is before "
                                 f"start_ns {start_ns}")
            known = {"schema", "gpus", "window", "totals", "kernels", "copies", "idle", "steps",
                     "inefficiencies", "warnings", "meta"}
            return cls(
                gpus=gpus,
                window=Window(start_ns, end_ns),
                totals=_build(Totals, d["totals"]),
                kernels=tuple(_build(KernelRow, k) for k in _rows(d, "kernels")),
                copies=tuple(_build(CopyRow, c) for c in _rows(d, "copies")),
                idle=tuple(_build(IdleRow, i) for i in _rows(d, "idle")),
                steps=steps,
                inefficiencies=tuple(_build(Inefficiency, i)
                                     for i in _rows(d, "inefficiencies")),
                warnings=_warnings(d.get("warnings")),
                meta=dict(d.get("meta", {})),
                extra={k: v for k, v in d.items() if k not in known},
            )
        except KeyError as e:
            raise ValueError(f"snapshot is missing key {e.args[0]!r}") from None
        except (TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"malformed snapshot: {e}") from None


def _rows(d: Mapping[str, Any], key: str) -> list[Any]:
    """A list of rows (an object there iterated as its keys, ``kernels: {}`` as none)."""
    v = d[key]
    if not isinstance(v, list):
        raise TypeError(f"{key} is a {type(v).__name__}, not a list")
    return v


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, FloatSeries):
        return obj.tolist()
    if isinstance(obj, tuple | list):
        return [_plain(x) for x in obj]
    return obj


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# no figure of a real run comes near this; sums of a few such stay finite
FLOAT_MAX = 1e100
# the fields that are durations, counts or full energies: never below 0 in what the engine
# writes (class energies are clamped at 0; a dynamic energy or its interval may go below)
_NON_NEGATIVE = frozenset({
    "Totals.energy_j", "Totals.kernel_energy_j", "Totals.copy_energy_j",
    "Totals.idle_energy_j", "Totals.active_idle_w",
    "KernelRow.calls", "KernelRow.time_s", "KernelRow.energy_j", "KernelRow.avg_power_w",
    "CopyRow.calls", "CopyRow.bytes", "CopyRow.time_s", "CopyRow.energy_j",
    "IdleRow.time_s", "IdleRow.energy_j", "IdleRow.count", "Steps.count",
    "SensorInfo.period_ms", "SensorInfo.window_ms",
    # (2026-12-05, an audit: each was read as given)
    # (window times may be negative: a trace's clock need not start at its epoch)
    "Window.duration_s", "Totals.measured_energy_j",
    "Inefficiency.energy_j", "Inefficiency.share", "Steps.sla_ms",
    "Quantiles.mean", "Quantiles.p50", "Quantiles.p95", "Quantiles.p99",
})


def _checked(where: str, kind: str, v: Any) -> Any:
    """``v`` as the field's annotated ``kind`` (numbers as float or int), or TypeError /
    ValueError naming ``where``: a snapshot read from a file is checked here, not where a
    report first does arithmetic on it.  Integers must fit 64 bits, floats be finite and
    within ``FLOAT_MAX``, and durations, counts and full energies be ``>= 0``."""
    optional = kind.endswith(" | None")
    base = kind.removesuffix(" | None")
    if v is None and optional:
        return None
    if base == "float" and _number(v):
        # an int past FLOAT_MAX is refused before float() (which overflows on 10**400)
        f = float(v) if isinstance(v, float) or abs(v) <= FLOAT_MAX else math.inf
        if not -FLOAT_MAX <= f <= FLOAT_MAX:  # also false for nan
            raise ValueError(f"{where} is {str(v)[:40]!r}: not a finite number of sane size")
        if f < 0 and where in _NON_NEGATIVE:
            raise ValueError(f"{where} is {f!r}: it cannot be negative")
        return f
    if base == "int" and ((isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, float) and math.isfinite(v) and v.is_integer())):
        i = int(v)
        if not INT64_MIN <= i <= INT64_MAX:
            raise ValueError(f"{where} is {str(v)[:40]!r}: outside the 64-bit integer range")
        if i < 0 and where in _NON_NEGATIVE:
            raise ValueError(f"{where} is {i}: it cannot be negative")
        return i
    if (base == "str" and isinstance(v, str)) or (base == "bool" and isinstance(v, bool)):
        return v
    if (base == "tuple[float, float]" and isinstance(v, list | tuple) and len(v) == 2
            and all(_number(x) for x in v)):
        return (_checked(f"{where}[0]", "float", v[0]), _checked(f"{where}[1]", "float", v[1]))
    if base in ("float", "int", "str", "bool", "tuple[float, float]"):
        raise TypeError(f"{where} is {str(v)[:40]!r}, not {kind}")
    return tuple(v) if isinstance(v, list) else v


def _warnings(v: Any) -> tuple[str, ...]:
    """The warnings as text: a list whose entries are not all strings is read as their text
    (a null entry dropped); absent or null is none; anything else is malformed."""
    if v is None:
        return ()
    if not isinstance(v, list):
        raise TypeError(f"warnings is a {type(v).__name__}, not a list")
    return tuple(w if isinstance(w, str) else str(w) for w in v if w is not None)


def _optional(steps_d: Mapping[str, Any], key: str) -> float | None:
    """A steps figure that may be null."""
    v: float | None = _checked(f"Steps.{key}", "float | None", steps_d.get(key))
    return v


def _series(steps_d: Mapping[str, Any], key: str) -> tuple[float, ...]:
    """A per-step series: numbers, or null where orjson wrote a NaN (kept as written)."""
    vals = steps_d.get(key, ())
    if not isinstance(vals, list | tuple):
        raise TypeError(f"Steps.{key} is not a list")
    return tuple(_checked(f"Steps.{key}[{i}]", "float | None", v) for i, v in enumerate(vals))


def _build(cls: type[T], d: Mapping[str, Any]) -> T:
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name in d:
            kwargs[name] = _checked(f"{cls.__name__}.{name}", str(f.type), d[name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise KeyError(name)
    return cls(**kwargs)


def energy_known(snap: Snapshot) -> bool:
    """Whether the snapshot's energies were measured: some GPU had power readings (a sensor
    field) or energy was attributed.  Without, every energy is 0 by convention and nothing
    is ranked (a trace attributed with no ``--power``): views order by time instead."""
    return snap.totals.energy_j > 0 or any(g.sensor.field != "none" for g in snap.gpus)


def rows_by_energy(rows: Sequence[R]) -> list[R]:
    """Rows sorted by full energy, largest first (ties by name/kind for stability: by the
    row's repr, which is formed only for the rows in a tie -- a repr of every row cost ~20 µs
    each, 10 ms a tick for a live view of 500 kernel classes)."""
    out = sorted(rows, key=lambda r: -r.energy_j)
    i = 0
    while i < len(out):
        j = i + 1
        while j < len(out) and out[j].energy_j == out[i].energy_j:
            j += 1
        if j - i > 1:
            out[i:j] = sorted(out[i:j], key=repr)
        i = j
    return out
