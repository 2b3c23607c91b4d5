"""nvidia-smi CSV power logs (``--query-gpu=... --format=csv[,nounits] -lms N``) → :class:`Trace`.

Owns the header mapping (columns in any order, with or without ``[unit]`` suffixes), value
parsing (units, ``[N/A]``/``[Not Supported]`` → missing), conversion of nvidia-smi's naive
local timestamps to epoch ns, the ``fresh`` flag for repeated polls, and the count of
garbage rows.  Also reads the zeus ``zeus_monitor`` CSV (``Time,Power`` with power in mW).

Parsing is column-wise: the csv module splits rows, then each column is converted to numpy
in one call; only when a column holds garbage is it re-parsed element by element.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import re
import time
import zoneinfo
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.model import (
    POLL_TIME,
    POLL_TIME_KEY,
    ClockBatch,
    DeviceInfo,
    PowerBatch,
    PowerField,
    Trace,
)
from ppwtop.errors import InputError
from ppwtop.fileio import read_bytes

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

_MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]",
            "unknown error", "[gpu is lost]", "[insufficient permissions]", "nan"}

_POWER_COLUMNS: dict[str, PowerField] = {
    "power.draw": PowerField.DRAW,
    "power.draw.instant": PowerField.INSTANT,
    "power.draw.average": PowerField.AVERAGE,
}
_ALIASES = {
    "clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
    "clocks.current.mem": "clocks.current.memory",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "clocks_event_reasons_active": "clocks_event_reasons.active",
    "time": "timestamp",
}
MAX_GPU_INDEX = 1023
"""The largest GPU index a row may carry; a row beyond it (or a fractional or negative index)
is counted as unparsable, not wrapped into the int16 device column."""
MAX_VALUE = 1e9
"""The largest |value| a power, clock or temperature cell may hold (W, MHz, °C; mW in a zeus
log): far beyond any board, and well inside int64 once scaled to mW.  A row with a cell beyond
it (1e30 W, inf) is counted as unparsable, not cast into a wrapped int64 reading."""
_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")
_HEADER_UNIT = re.compile(r"\[([^\]]*)\]\s*$")
_POWER_UNIT_MW = {"w": 1000.0, "mw": 1.0, "kw": 1e6}
UNIT_CELLS = 16
"""Cells read for a power column's unit where its header names none: a ``--format=csv``
log writes it in every cell, a ``nounits`` one in none (a scan of every cell cost a
Python split per row)."""
"""mW per unit of a power column, by the unit its header or cells name (an audit: a
``power.draw [mW]`` log was read as W, every reading then dropped as over 5 kW)."""
_STAMP_OFFSET = re.compile(r"^(.*[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d*)?)?)\s*"
                           r"(Z|[+-]\d{2}(?::?\d{2})?)$", re.IGNORECASE)
_ENDS_IN_OFFSET = re.compile(r"\d\s*(?:Z|[+-]\d{2}(?::?\d{2})?)$", re.IGNORECASE | re.MULTILINE)
"""A stamp that may end in a UTC offset: the cheap test over the whole column (a date-only
stamp's "-25" passes it too; :data:`_STAMP_OFFSET` then decides per stamp)."""
_OFFSET = re.compile(r"^(?:utc|gmt)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


def load_smi_csv(path: str | Path, tz: str | None = None) -> Trace:
    """Read an nvidia-smi CSV log; naive timestamps are local time in ``tz`` (see module doc)."""
    p = Path(path)
    try:
        # a gzipped log is read through; a byte-order mark (a log saved by a Windows editor)
        # is not part of the first column's name
        text = read_bytes(p).decode("utf-8-sig", errors="strict")
    except UnicodeDecodeError:
        raise InputError(p, "not a text CSV file (invalid UTF-8)") from None
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        header_raw = next(reader, None)
    except csv.Error as e:
        raise _csv_error(p, reader, e) from None
    if not header_raw:
        raise InputError(p, "empty CSV file")
    header = [_canon(h) for h in header_raw]
    zeus = header[:2] == ["timestamp", "power"] and "power.draw" not in header
    col = {name: i for i, name in reversed(list(enumerate(header)))}
    if "timestamp" not in col:
        raise InputError(p, "no 'timestamp' column in the CSV header")
    fields = [(c, f) for c, f in _POWER_COLUMNS.items() if c in col]
    if zeus:
        fields = [("power", PowerField.DRAW)]
    if not fields:
        raise InputError(p, "no power column (power.draw, power.draw.instant or "
                            "power.draw.average) in the CSV header")
    ncols = len(header)
    try:
        rows = [r for r in reader if r]
    except csv.Error as e:
        raise _csv_error(p, reader, e) from None
    good = [r for r in rows if len(r) == ncols]
    skipped = len(rows) - len(good)
    cols = list(zip(*good, strict=True)) if good else [() for _ in range(ncols)]

    def column(name: str) -> list[str]:
        return [s.strip() for s in cols[col[name]]] if name in col else []

    n = len(good)
    ok = np.ones(n, dtype=bool)
    stamps, stamp_off_ns = _split_offsets(column("timestamp"))
    t_local_ns, t_ok, far = _parse_times(stamps)
    ok &= t_ok
    values: dict[str, F64] = {}
    numeric = [c for c, _ in fields] + [c for c in ("index", "clocks.current.sm",
                                                     "clocks.current.memory",
                                                     "temperature.gpu") if c in col]
    power_cols = {c for c, _ in fields}
    unknown: dict[str, B] = {}  # auxiliary column → its cells read as unknown
    for c in numeric:
        v, v_ok = _parse_numbers(column(c))
        values[c] = v
        with np.errstate(invalid="ignore"):
            bad = ~v_ok | (np.abs(v) > MAX_VALUE)  # NaN (a missing cell) is not bad
            if c in AUX_COLUMNS:  # a clock or temperature no one can read: unknown, the
                v[bad] = np.nan   # row's power still good
                unknown[c] = bad
                continue
            ok &= ~bad
            if c in power_cols:  # no board draws negative power: the row is damaged
                ok &= ~(v < 0)
    reasons: npt.NDArray[np.uint64] | None = None
    if "clocks_event_reasons.active" in col:
        reasons, r_ok = _parse_hex(column("clocks_event_reasons.active"))
        unknown["clocks_event_reasons.active"] = ~r_ok  # read as no reason
    if "index" in values:  # a GPU index: a small non-negative integer (empty: GPU 0)
        idx = values["index"]
        with np.errstate(invalid="ignore"):
            ok &= np.isnan(idx) | ((idx >= 0) & (idx <= MAX_GPU_INDEX) & (idx == np.floor(idx)))
    skipped += int(n - ok.sum())
    if not ok.any():
        if far:
            raise InputError(p, f"{far} timestamp(s) outside the years 1678-2261 and no "
                                "other parsable data row in the CSV")
        raise InputError(p, "no parsable data row in the CSV")

    if stamp_off_ns is None:
        tz_used, t_ns = _to_epoch_ns(t_local_ns[ok], tz, p)
    else:  # stamps that carry their own UTC offset (ISO 8601) need no zone
        local, off = t_local_ns[ok], stamp_off_ns[ok]
        aware = off != _NO_OFFSET
        t_ns = local - np.where(aware, off, 0)
        tz_used = "the timestamps' own UTC offsets"
        if not aware.all():
            name, t_ns[~aware] = _to_epoch_ns(local[~aware], tz, p)
            tz_used = f"{name} (and the timestamps' own UTC offsets where they carry one)"
    dev_f = values["index"][ok] if "index" in values else np.zeros(int(ok.sum()))
    device = np.where(np.isnan(dev_f), 0, dev_f).astype(np.int16)

    trace = Trace()
    parts = []
    for c, fld in fields:
        w = values[c][ok]
        unit_mw = _power_unit_mw(header_raw[col[c]],
                                 [s.strip() for s in cols[col[c]][:UNIT_CELLS]], p)
        # zeus logs mW; nvidia-smi logs W, unless its header or cells say otherwise
        scale = unit_mw if unit_mw is not None else 1.0 if zeus else 1000.0
        parts.append(_power(t_ns, device, w * scale, fld))
    trace.power = PowerBatch.concat(parts).sorted_by("t_ns")

    clock_cols = [c for c in ("clocks.current.sm", "clocks.current.memory",
                              "temperature.gpu") if c in values]
    if clock_cols or reasons is not None:
        sm = values.get("clocks.current.sm")
        mem = values.get("clocks.current.memory")
        temp = values.get("temperature.gpu")
        trace.clocks = ClockBatch.from_columns({
            "t_ns": t_ns, "device": device,
            "sm_mhz": _int_or_unknown(sm[ok]) if sm is not None else np.full(len(t_ns), -1),
            "mem_mhz": _int_or_unknown(mem[ok]) if mem is not None else np.full(len(t_ns), -1),
            "temp_c": temp[ok] if temp is not None else np.full(len(t_ns), np.nan),
            "clock_reasons": reasons[ok] if reasons is not None else np.zeros(len(t_ns)),
        })

    if "name" in col or "uuid" in col:  # the first row's of each GPU (a uuid column lets
        names = np.asarray(column("name") or [""] * n, dtype=object)[ok]  # the log's GPUs be
        uuids = np.asarray(column("uuid") or [""] * n, dtype=object)[ok]  # matched by uuid)
        first = {d: int(np.flatnonzero(device == d)[0]) for d in np.unique(device).tolist()}
        trace.devices = [DeviceInfo(index=d, name=str(names[i]), uuid=str(uuids[i]))
                         for d, i in sorted(first.items())]

    trace.meta.update({
        "source_path": str(p), "source_format": "zeus_csv" if zeus else "smi_csv",
        "power_fields": [f.label for _, f in fields], "timezone": tz_used,
        "skipped_rows": skipped,
        POLL_TIME_KEY: POLL_TIME,  # rows are stamped when polled, not when published
    })
    notes = [f"skipped {skipped} unparsable row(s) of {len(rows)}"] if skipped else []
    # (counted in the rows kept: a skipped row's cells are in its count already)
    notes += [f"{k} unparsable cell(s) of column {c} read as unknown"
              for c, bad in unknown.items() if (k := int(np.count_nonzero(bad & ok)))]
    if notes:
        trace.meta["notes"] = notes
    return trace


# --------------------------------------------------------------------------------------------


AUX_COLUMNS = frozenset({"clocks.current.sm", "clocks.current.memory", "temperature.gpu"})
"""Columns beside the power whose unparsable cells are unknown values, not damaged rows."""


def _csv_error(p: Path, reader: Any, e: csv.Error) -> InputError:
    """A row the csv module cannot split (a field over its size limit)."""
    return InputError(p, f"not a readable CSV (line {reader.line_num}: {e})")


def _canon(h: str) -> str:
    name = _UNIT.sub("", h.strip()).strip().lower()
    return _ALIASES.get(name, name)


def _power(t_ns: I64, device: npt.NDArray[np.int16], mw: F64, fld: PowerField) -> PowerBatch:
    have = ~np.isnan(mw)
    t, d, v = t_ns[have], device[have], np.rint(mw[have]).astype(np.int64)
    order = np.lexsort((t, d))
    ds, vs = d[order], v[order]
    fresh_sorted = np.ones(len(v), dtype=bool)
    if len(v) > 1:
        fresh_sorted[1:] = ~((ds[1:] == ds[:-1]) & (vs[1:] == vs[:-1]))
    fresh = np.empty_like(fresh_sorted)
    fresh[order] = fresh_sorted
    return PowerBatch.from_columns({"t_ns": t, "power_mw": v, "device": d,
                                    "field": np.full(len(v), int(fld)), "fresh": fresh})


def _int_or_unknown(v: F64) -> I64:
    return np.where(np.isnan(v), -1, np.rint(np.nan_to_num(v))).astype(np.int64)


def _parse_numbers(items: list[str]) -> tuple[F64, B]:
    """Floats (units such as ' W' stripped; N/A → NaN) and a mask of parsable cells."""
    try:
        return np.array(items, dtype=np.float64), np.ones(len(items), dtype=bool)
    except ValueError:
        pass
    parts = items[0].split() if items else []
    if len(parts) == 2:  # "--format=csv" with units: strip the common " W" / " MHz" suffix
        unit = " " + parts[1]
        try:
            stripped = [s.removesuffix(unit) for s in items]
            return np.array(stripped, dtype=np.float64), np.ones(len(items), dtype=bool)
        except ValueError:
            pass
    out = np.full(len(items), np.nan)
    ok = np.ones(len(items), dtype=bool)
    for i, s in enumerate(items):
        low = s.lower()
        if low in _MISSING:
            continue
        tok = low.split()[0] if low else low
        try:
            out[i] = float(tok)
        except ValueError:
            ok[i] = False
    return out, ok


def _parse_hex(items: list[str]) -> tuple[npt.NDArray[np.uint64], B]:
    out = np.zeros(len(items), dtype=np.uint64)
    ok = np.ones(len(items), dtype=bool)
    for i, s in enumerate(items):
        if s.lower() in _MISSING:
            continue
        try:
            out[i] = int(s, 16) if s.lower().startswith("0x") else int(s)
        except (ValueError, OverflowError):  # not a number, or not a 64-bit mask
            ok[i] = False
    return out, ok


# what int64 ns since 1970 holds, less a margin for zone offsets and the ±14 h shift search
_FIRST_US = np.datetime64("1678-01-01", "us")
_END_US = np.datetime64("2262-01-01", "us")


_NO_OFFSET = np.iinfo(np.int64).min
"""``_split_offsets``'s mark of a stamp with no UTC offset of its own."""


def _split_offsets(items: list[str]) -> tuple[list[str], I64 | None]:
    """Stamps with an ISO 8601 UTC offset (``…T09:59:59.311+00:00``, ``…Z``) split into the
    naive stamp and the offset in ns (:data:`_NO_OFFSET` where a stamp has none); None when
    no stamp has one.  An audit: numpy parsed such a stamp as UTC with a warning on stderr,
    and the local zone was then applied on top (5 h off under TZ=America/New_York)."""
    joined = "\n".join(items)
    # nvidia-smi's own stamps (2023/07/25 16:27:49.123) hold none of these characters: a
    # substring test each, not the regex (0.37 s on 500 000 stamps)
    if not any(c in joined for c in "+-Zz") or _ENDS_IN_OFFSET.search(joined) is None:
        return items, None
    naive = list(items)
    off = np.full(len(items), _NO_OFFSET, np.int64)
    for i, s in enumerate(items):
        m = _STAMP_OFFSET.match(s)
        if m is None:
            continue
        naive[i], z = m.group(1), m.group(2)
        if z.upper() == "Z":
            off[i] = 0
            continue
        digits = z[1:].replace(":", "")
        mins = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) >= 4 else 0)
        off[i] = (1 if z[0] == "+" else -1) * mins * 60_000_000_000
    return naive, (off if bool((off != _NO_OFFSET).any()) else None)


def _power_unit_mw(header: str, cells: list[str], p: Path) -> float | None:
    """mW per unit of a power column: its header's ``[unit]``, else its cells' (``"71.3 W"``);
    None where neither names one.  A unit that is not a power is an error."""
    m = _HEADER_UNIT.search(header)
    unit = m.group(1).strip().lower() if m else None
    if not unit:  # the first cells that hold a number say it (a --format=csv log's all do)
        unit = next((parts[1].lower() for parts in (c.split() for c in cells)
                     if len(parts) == 2 and _is_number(parts[0])), None)
    if not unit:
        return None
    if unit not in _POWER_UNIT_MW:
        raise InputError(p, f"power column {header.strip()!r} is in {unit!r}, not W, mW or kW")
    return _POWER_UNIT_MW[unit]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parse_times(items: list[str]) -> tuple[I64, B, int]:
    """Naive local timestamps → ns since the local epoch (no zone applied), a mask, and how
    many parsed but lie outside 1678–2261 (int64 ns cannot hold them: the year 2300 wrapped
    to about 1715 when parsed straight to ns).  The range is checked at µs, which holds any
    year; the values are read at ns (zeus logs carry ns digits)."""
    iso = [s.replace("/", "-", 2).replace(" ", "T", 1) for s in items]
    try:
        us = np.array(iso, dtype="datetime64[us]")
        ok = ~np.isnat(us)
        inside = (us >= _FIRST_US) & (us < _END_US)
        far = int((ok & ~inside).sum())
        ok &= inside
        ns = np.array(iso, dtype="datetime64[ns]").astype(np.int64)
        return np.where(ok, ns, 0), ok, far
    except ValueError:
        pass
    far = 0
    out = np.zeros(len(iso), dtype=np.int64)
    ok = np.zeros(len(iso), dtype=bool)
    for i, s in enumerate(iso):
        if len(s) < 10 or not s[:4].isdigit():
            continue
        try:
            v = np.datetime64(s, "us")
        except ValueError:
            continue
        if np.isnat(v):
            continue
        if not _FIRST_US <= v < _END_US:
            far += 1
            continue
        out[i] = np.datetime64(s, "ns").astype(np.int64)
        ok[i] = True
    return out, ok, far


def resolve_tz(tz: str | None) -> tuple[str, Callable[[dt.datetime], dt.timedelta]]:
    """A name for the zone and a function giving the UTC offset of a naive local time.

    ``tz`` may be a zoneinfo name ('Europe/London'), 'UTC'/'Z', a fixed offset ('+01:00',
    '-0530', 'UTC+1') or None, which means the TZ environment variable, else the system zone.
    """
    spec = tz if tz is not None else os.environ.get("TZ")
    if spec is not None:
        spec = spec.strip().lstrip(":")
        if spec.upper() in ("UTC", "Z", "GMT", "UTC0", "GMT0"):
            return "UTC", lambda _t: dt.timedelta(0)
        m = _OFFSET.match(spec)
        if m:
            sign = -1 if m.group(1) == "-" else 1
            delta = sign * dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0))
            return spec, lambda _t: delta
        try:
            zone = zoneinfo.ZoneInfo(spec)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            if tz is not None:
                raise ValueError(f"unknown time zone {tz!r}") from e
        else:
            return spec, lambda t: t.replace(tzinfo=zone).utcoffset() or dt.timedelta(0)

    if hasattr(time, "tzset"):
        time.tzset()  # make the C library follow the current environment (TZ may have changed)

    def local(t: dt.datetime) -> dt.timedelta:
        return t.astimezone().utcoffset() or dt.timedelta(0)

    return "local", local


WENT_BACK_NS = 30 * 60 * 1_000_000_000
"""How far a row's local time must fall below the latest before it for the log to have gone
back through a repeated (autumn) hour; polls of several GPUs written out of order differ by
milliseconds, a clock change by an hour."""


def _to_epoch_ns(local_ns: I64, tz: str | None, p: Path) -> tuple[str, I64]:
    """Apply the zone's offset, evaluated once per distinct local hour (DST-safe).

    ``local_ns`` in file order.  A local hour the zone repeats (clocks going back) takes its
    first offset, except in the rows from where the log went back into it (a row more than
    :data:`WENT_BACK_NS` before the latest one above it) on: those are its second pass, as
    nvidia-smi writes it, and take the later offset."""
    try:
        name, offset_of = resolve_tz(tz)
    except ValueError as e:
        raise InputError(p, str(e)) from None
    if not len(local_ns):
        return name, local_ns
    hour_ns = 3_600_000_000_000
    hours, inv = np.unique(local_ns // hour_ns, return_inverse=True)
    inv = inv.reshape(-1)
    offs = np.empty((2, len(hours)), dtype=np.int64)
    epoch = dt.datetime(1970, 1, 1)
    for i, h in enumerate(hours.tolist()):
        naive = epoch + dt.timedelta(hours=h)
        for fold in (0, 1):
            offs[fold, i] = int(offset_of(naive.replace(fold=fold)).total_seconds() * 1e9)
    out = local_ns - offs[0, inv]
    repeated = np.flatnonzero(offs[0] > offs[1])  # (a skipped spring hour: offs[0] < offs[1])
    if len(repeated):
        back = local_ns < np.maximum.accumulate(local_ns) - WENT_BACK_NS
        for i in repeated.tolist():
            rows = inv == i
            first_back = np.flatnonzero(rows & back)
            if len(first_back):
                second = rows & (np.arange(len(local_ns)) >= first_back[0])
                out[second] = local_ns[second] - offs[1, i]
    return name, out
