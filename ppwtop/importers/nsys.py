"""Nsight Systems SQLite export (``nsys export --type sqlite``) → :class:`Trace`.

Owns the mapping from the nsys export schema (both the 2.x generation, e.g. 2.9.1 with
``EXPORT_META_DATA``, and the 3.x generation, e.g. 3.13.2 with ``META_DATA_EXPORT``) to the
columnar data model.  Columns are pulled with plain SQL straight into numpy arrays; no
per-row objects are kept.

Times in the export are ns since the session start; ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``
is added to get ns since the Unix epoch.  Names come from ``StringIds``.  A cell that is not the
integer the schema promises (text in ``end``, a start time past int64 ns) is an InputError
naming the table and column.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from attribution.api_kinds import api_kind_of
from attribution.model import (
    ApiBatch,
    CopyBatch,
    CopyKind,
    DeviceInfo,
    KernelBatch,
    MarkerBatch,
    MarkerKind,
    MemKind,
    MemsetBatch,
    StringTable,
    Trace,
)
from ppwtop.errors import InputError
from ppwtop.fileio import reading

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
_KNOWN = (KERNEL, MEMCPY, MEMSET, RUNTIME, NVTX)

# CUPTI_ACTIVITY_MEMCPY_KIND_* / nsys ENUM_CUDA_MEMCPY_OPER codes → CopyKind.
# 3..7 involve CUDA arrays (OTHER); 11..13 are unified-memory migrations.
_COPY_KIND = np.full(256, CopyKind.OTHER, dtype=np.uint8)
_COPY_KIND[1] = CopyKind.HTOD
_COPY_KIND[2] = CopyKind.DTOH
_COPY_KIND[8] = CopyKind.DTOD
_COPY_KIND[9] = CopyKind.HTOH
_COPY_KIND[10] = CopyKind.PTOP
_COPY_KIND[11] = CopyKind.HTOD
_COPY_KIND[12] = CopyKind.DTOH
_COPY_KIND[13] = CopyKind.DTOD

# nsys numbers memory kinds differently from CUPTI: its ENUM_CUDA_MEM_KIND
# (CUDA_MEMOPR_MEMORY_KIND_*) is 0 pageable, 1 pinned, 2 device, 3 array, 4 managed,
# 5 device static, 6 managed static, 7 unknown.  Used when the file has no enum table.
_NSYS_MEM_DEFAULT: dict[int, MemKind] = {
    0: MemKind.PAGEABLE, 1: MemKind.PINNED, 2: MemKind.DEVICE, 3: MemKind.ARRAY,
    4: MemKind.MANAGED, 5: MemKind.DEVICE, 6: MemKind.MANAGED, 7: MemKind.UNKNOWN,
}
_MEM_BY_SUFFIX: dict[str, MemKind] = {
    "PAGEABLE": MemKind.PAGEABLE, "PINNED": MemKind.PINNED, "DEVICE": MemKind.DEVICE,
    "ARRAY": MemKind.ARRAY, "MANAGED": MemKind.MANAGED, "DEVICE_STATIC": MemKind.DEVICE,
    "MANAGED_STATIC": MemKind.MANAGED, "UNKNOWN": MemKind.UNKNOWN,
}

# ENUM_NSYS_EVENT_CLASS: 67/68 are "CUDA backtrace" duplicates of real runtime rows.
_BACKTRACE_CLASSES = (67, 68)
# NVTX event types that are not ranges: 33 category, 34 mark, 39 thread name,
# 75/76 domain create/destroy.
_NVTX_NON_RANGE = (33, 34, 39, 75, 76)

_VERSION_SUFFIX = re.compile(r"_v\d+$")


def load_nsys(path: str | Path) -> Trace:
    """Read an Nsight Systems SQLite export; raise InputError for anything else."""
    p = Path(path)
    with reading(p):  # missing, a directory, a FIFO or a device: one InputError
        pass
    try:
        con = sqlite3.connect(p.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as e:
        raise InputError(p, f"cannot open SQLite file: {e}") from None
    try:
        return _load(con, p)
    except sqlite3.DatabaseError as e:
        raise InputError(p, f"corrupt or unreadable SQLite file: {e}") from None
    except _BadValue as e:
        raise InputError(p, str(e)) from None
    finally:
        con.close()


# --------------------------------------------------------------------------------------------


class _BadValue(Exception):
    """A cell that is not the integer the schema promises; the message names TABLE.column."""


def _int(v: Any, where: str) -> int:
    """One integer cell (``where``: TABLE.column)."""
    try:
        return int(v)
    except (ValueError, TypeError, OverflowError):  # 'x', a blob, inf
        raise _BadValue(f"{where}: not an integer: {v!r:.40}") from None


def _int_col(values: Any, where: str) -> np.ndarray[Any, Any]:
    """A column of integer cells as int64 (``where``: TABLE.column)."""
    try:
        return np.asarray(values, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        for v in values:
            try:
                np.int64(v)
            except (ValueError, TypeError, OverflowError):
                raise _BadValue(f"{where}: not a 64-bit integer: {v!r:.40}") from None
        raise _BadValue(f"{where}: not a column of integers") from None


class _Db:
    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        rows = con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        self.tables = {str(r[0]) for r in rows}
        self._cols: dict[str, set[str]] = {}

    def cols(self, table: str) -> set[str]:
        if table not in self._cols:
            info = self.con.execute(f"PRAGMA table_info({table})").fetchall()
            self._cols[table] = {str(r[1]) for r in info}
        return self._cols[table]

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str, sql: str, names: list[str]) -> dict[str, np.ndarray[Any, Any]]:
        """Run ``sql`` and return one int64 array per selected column (NULL → -1)."""
        rows = self.con.execute(sql).fetchall()
        if not rows:
            return {n: np.empty(0, dtype=np.int64) for n in names}
        arr = np.array(rows, dtype=object)
        arr[arr == None] = -1  # noqa: E711  (elementwise NULL test on an object array)
        try:
            out = np.asarray(arr, dtype=np.int64)
        except (ValueError, TypeError, OverflowError):
            return {n: _int_col(arr[:, i], f"{table}.{n}") for i, n in enumerate(names)}
        return {n: out[:, i] for i, n in enumerate(names)}


def _load(con: sqlite3.Connection, p: Path) -> Trace:
    db = _Db(con)
    if not any(db.has(t) for t in _KNOWN) or not db.has("StringIds"):
        shown = ", ".join(sorted(db.tables)[:5]) or "no tables"
        raise InputError(p, f"not an Nsight Systems export (unknown schema: {shown})")

    base_ns = 0
    if db.has("TARGET_INFO_SESSION_START_TIME"):
        row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        if row and row[0] is not None:
            base_ns = _int(row[0], "TARGET_INFO_SESSION_START_TIME.utcEpochNs")
            if not 0 <= base_ns < 2**63:
                raise _BadValue(f"TARGET_INFO_SESSION_START_TIME.utcEpochNs out of range: "
                                f"{base_ns}")

    # nsys string ids → our table, built lazily only for ids that are referenced.
    sid_rows = con.execute("SELECT id, value FROM StringIds").fetchall()
    nsys_strings = {_int(i, "StringIds.id"): str(v) for i, v in sid_rows}
    strings = StringTable()
    cache: dict[int, int] = {}

    def intern_ids(ids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        uniq, inv = np.unique(ids, return_inverse=True)
        mapped = np.empty(len(uniq), dtype=np.int32)
        for j, sid in enumerate(uniq.tolist()):
            got = cache.get(sid)
            if got is None:
                text = nsys_strings.get(sid)
                got = -1 if text is None else strings.intern(text)
                cache[sid] = got
            mapped[j] = got
        return mapped[inv.reshape(-1)]

    trace = Trace(strings=strings)
    notes: list[str] = []
    if db.has(KERNEL):
        trace.kernels = _kernels(db, base_ns, intern_ids)
    if db.has(MEMCPY):
        trace.copies = _copies(db, base_ns, _mem_map(db))
    if db.has(MEMSET):
        trace.memsets = _memsets(db, base_ns, _mem_map(db))
    if db.has(RUNTIME):
        trace.apis, dropped = _apis(db, base_ns, intern_ids, strings)
        if dropped:
            notes.append(f"{dropped} CUDA-backtrace duplicate runtime rows dropped")
    if db.has(NVTX):
        trace.markers = _nvtx(db, base_ns, nsys_strings, strings)
    trace.devices = _devices(db)
    trace.meta.update(_meta(db, p, base_ns))
    if notes:
        trace.meta["notes"] = notes
    return trace


def _epoch(t: np.ndarray[Any, Any], base_ns: int, where: str) -> np.ndarray[Any, Any]:
    """Session-relative ns → epoch ns; a time that would wrap int64 is a _BadValue."""
    if len(t) and not (int(t.min()) + base_ns >= -(2**63) and int(t.max()) + base_ns < 2**63):
        raise _BadValue(f"{where}: times past the int64 ns range once "
                        f"TARGET_INFO_SESSION_START_TIME.utcEpochNs ({base_ns}) is added")
    return t + np.int64(base_ns)


def _t(c: dict[str, np.ndarray[Any, Any]], base_ns: int,
       table: str) -> dict[str, np.ndarray[Any, Any]]:
    c["start_ns"] = _epoch(c.pop("start"), base_ns, f"{table}.start")
    c["end_ns"] = _epoch(c.pop("end"), base_ns, f"{table}.end")
    return c


def _kernels(db: _Db, base_ns: int, intern_ids: Any) -> KernelBatch:
    cols = db.cols(KERNEL)
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    want = ["start", "end", "deviceId", "streamId", "correlationId", name_col,
            "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
            "staticSharedMemory", "dynamicSharedMemory"]
    sel = [w if w in cols else "NULL" for w in want]
    c = db.columns(KERNEL, f"SELECT {', '.join(sel)} FROM {KERNEL} ORDER BY start", want)
    c = _t(c, base_ns, KERNEL)
    shared = c.pop("staticSharedMemory").clip(0) + c.pop("dynamicSharedMemory").clip(0)
    return KernelBatch.from_columns({
        "start_ns": c["start_ns"], "end_ns": c["end_ns"], "device": c["deviceId"],
        "stream": c["streamId"], "correlation": c["correlationId"],
        "name_id": intern_ids(c[name_col]) if len(c[name_col]) else c[name_col],
        "grid_x": c["gridX"], "grid_y": c["gridY"], "grid_z": c["gridZ"],
        "block_x": c["blockX"], "block_y": c["blockY"], "block_z": c["blockZ"],
        "registers": c["registersPerThread"], "shared_mem_bytes": shared,
    })


def _mem_map(db: _Db) -> np.ndarray[Any, Any]:
    """nsys memory-kind code → MemKind lookup (from ENUM_CUDA_MEM_KIND when present)."""
    table = np.full(257, MemKind.UNKNOWN, dtype=np.uint8)  # index 256 holds NULL (-1)
    mapping = dict(_NSYS_MEM_DEFAULT)
    if db.has("ENUM_CUDA_MEM_KIND"):
        for code, name in db.con.execute("SELECT id, name FROM ENUM_CUDA_MEM_KIND"):
            suffix = str(name or "").replace("CUDA_MEMOPR_MEMORY_KIND_", "")
            if suffix in _MEM_BY_SUFFIX:
                mapping[_int(code, "ENUM_CUDA_MEM_KIND.id")] = _MEM_BY_SUFFIX[suffix]
    for code, kind in mapping.items():
        if 0 <= code < 256:
            table[code] = kind
    return table


def _lookup(table: np.ndarray[Any, Any], codes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    idx = np.where((codes >= 0) & (codes < len(table) - 1), codes, len(table) - 1)
    return table[idx]


def _copies(db: _Db, base_ns: int, mem: np.ndarray[Any, Any]) -> CopyBatch:
    cols = db.cols(MEMCPY)
    want = ["start", "end", "deviceId", "streamId", "correlationId", "copyKind",
            "srcKind", "dstKind", "bytes"]
    sel = [w if w in cols else "NULL" for w in want]
    c = _t(db.columns(MEMCPY, f"SELECT {', '.join(sel)} FROM {MEMCPY} ORDER BY start", want),
           base_ns, MEMCPY)
    copy_table = np.append(_COPY_KIND, np.uint8(CopyKind.OTHER))
    return CopyBatch.from_columns({
        "start_ns": c["start_ns"], "end_ns": c["end_ns"], "device": c["deviceId"],
        "stream": c["streamId"], "correlation": c["correlationId"],
        "kind": _lookup(copy_table, c["copyKind"]),
        "src_mem": _lookup(mem, c["srcKind"]), "dst_mem": _lookup(mem, c["dstKind"]),
        "bytes": c["bytes"],
    })


def _memsets(db: _Db, base_ns: int, mem: np.ndarray[Any, Any]) -> MemsetBatch:
    cols = db.cols(MEMSET)
    want = ["start", "end", "deviceId", "streamId", "correlationId", "memKind", "bytes"]
    sel = [w if w in cols else "NULL" for w in want]
    c = _t(db.columns(MEMSET, f"SELECT {', '.join(sel)} FROM {MEMSET} ORDER BY start", want),
           base_ns, MEMSET)
    return MemsetBatch.from_columns({
        "start_ns": c["start_ns"], "end_ns": c["end_ns"], "device": c["deviceId"],
        "stream": c["streamId"], "correlation": c["correlationId"],
        "mem": _lookup(mem, c["memKind"]), "bytes": c["bytes"],
    })


def _split_tid(gtid: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """nsys globalTid packs pid in bits 24..47 and tid in bits 0..23."""
    ok = gtid >= 0
    pid = np.where(ok, (gtid >> 24) & 0xFFFFFF, -1)
    tid = np.where(ok, gtid & 0xFFFFFF, -1)
    return pid, tid


def _apis(db: _Db, base_ns: int, intern_ids: Any,
          strings: StringTable) -> tuple[ApiBatch, int]:
    cols = db.cols(RUNTIME)
    want = ["start", "end", "globalTid", "correlationId", "nameId"]
    sel = [w if w in cols else "NULL" for w in want]
    where = ""
    dropped = 0
    if "eventClass" in cols:
        codes = ", ".join(str(x) for x in _BACKTRACE_CLASSES)
        where = f" WHERE eventClass NOT IN ({codes})"
        row = db.con.execute(
            f"SELECT COUNT(*) FROM {RUNTIME} WHERE eventClass IN ({codes})").fetchone()
        dropped = int(row[0]) if row else 0
    c = _t(db.columns(RUNTIME, f"SELECT {', '.join(sel)} FROM {RUNTIME}{where} ORDER BY start",
                      want), base_ns, RUNTIME)
    raw_ids = c["nameId"]
    nsys_ids = intern_ids(raw_ids) if len(raw_ids) else raw_ids.astype(np.int32)
    # Kineto spells runtime calls without nsys's "_v7000" suffix: re-intern stripped names.
    uniq, inv = np.unique(nsys_ids, return_inverse=True)
    new_ids = np.empty(len(uniq), dtype=np.int32)
    kinds = np.empty(len(uniq), dtype=np.uint8)
    for j, i in enumerate(uniq.tolist()):
        name = _VERSION_SUFFIX.sub("", strings[i]) if i >= 0 else ""
        new_ids[j] = strings.intern(name) if i >= 0 else -1
        kinds[j] = api_kind_of(name)
    inv = inv.reshape(-1)
    pid, tid = _split_tid(c["globalTid"])
    return ApiBatch.from_columns({
        "start_ns": c["start_ns"], "end_ns": c["end_ns"], "pid": pid, "tid": tid,
        "correlation": c["correlationId"], "name_id": new_ids[inv], "kind": kinds[inv],
    }), dropped


def _nvtx(db: _Db, base_ns: int, nsys_strings: dict[int, str],
          strings: StringTable) -> MarkerBatch:
    cols = db.cols(NVTX)
    text = "text" if "text" in cols else "NULL"
    text_id = "textId" if "textId" in cols else "NULL"
    gtid = "globalTid" if "globalTid" in cols else "NULL"
    etype = "eventType" if "eventType" in cols else "-1"
    non_range = ", ".join(str(x) for x in _NVTX_NON_RANGE)
    rows = db.con.execute(
        f"SELECT start, end, {gtid}, {text}, {text_id} FROM {NVTX} "
        f"WHERE end IS NOT NULL AND end >= start AND {etype} NOT IN ({non_range}) "
        "ORDER BY start").fetchall()
    if not rows:
        return MarkerBatch.empty()
    n = len(rows)
    start = _int_col([r[0] for r in rows], f"{NVTX}.start")
    end = _int_col([r[1] for r in rows], f"{NVTX}.end")
    g = _int_col([-1 if r[2] is None else r[2] for r in rows], f"{NVTX}.globalTid")
    names = np.fromiter(
        (strings.intern(r[3] if r[3] is not None else nsys_strings.get(
            -1 if r[4] is None else _int(r[4], f"{NVTX}.textId"), "")) for r in rows),
        dtype=np.int32, count=n)
    _, tid = _split_tid(g)
    return MarkerBatch.from_columns({
        "start_ns": _epoch(start, base_ns, f"{NVTX}.start"),
        "end_ns": _epoch(end, base_ns, f"{NVTX}.end"),
        "device": np.full(n, -1), "tid": tid, "name_id": names,
        "kind": np.full(n, MarkerKind.NVTX),
    })


def _devices(db: _Db) -> list[DeviceInfo]:
    for table in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"):
        if not db.has(table):
            continue
        cols = db.cols(table)
        want = ["id", "name", "uuid", "totalMemory", "smCount", "computeMajor",
                "computeMinor"]
        sel = [w if w in cols else "NULL" for w in want]
        out: dict[int, DeviceInfo] = {}
        for r in db.con.execute(f"SELECT {', '.join(sel)} FROM {table}"):
            idx = _int(r[0], f"{table}.id") if r[0] is not None else len(out)
            cc = f"{r[5]}.{r[6]}" if r[5] is not None and r[6] is not None else ""
            out[idx] = DeviceInfo(
                index=idx, name=str(r[1] or ""), uuid=str(r[2] or ""),
                total_memory_bytes=_int(r[3], f"{table}.totalMemory") if r[3] is not None
                else -1,
                sm_count=_int(r[4], f"{table}.smCount") if r[4] is not None else -1,
                compute_capability=cc)
        if out:
            return [out[k] for k in sorted(out)]
    return []


def _meta(db: _Db, p: Path, base_ns: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"source_path": str(p), "source_format": "nsys",
                            "session_start_ns": base_ns}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(table):
            kv = dict(db.con.execute(
                f"SELECT name, value FROM {table} WHERE name IN "
                "('EXPORT_SCHEMA_VERSION', 'EXPORT_PRODUCT_VERSION')").fetchall())
            if "EXPORT_SCHEMA_VERSION" in kv:
                meta["nsys_schema_version"] = kv["EXPORT_SCHEMA_VERSION"]
            if "EXPORT_PRODUCT_VERSION" in kv:
                meta["nsys_version"] = kv["EXPORT_PRODUCT_VERSION"]
    return meta
