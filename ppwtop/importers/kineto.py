"""PyTorch profiler / Kineto Chrome-trace JSON (``.json`` or ``.json.gz``) → :class:`Trace`.

Owns reading the file (gzip detected by magic bytes), decoding it with one ``orjson.loads``,
recognising the schema generation, refusing what ppwtop cannot use (not a trace, AMD/ROCm), and
assembling the Trace (devices, run metadata, notes).  The per-category column extraction lives
in :mod:`ppwtop.importers.kineto_columns`.

Schemas:

* modern (PyTorch ≥ 2.x Kineto): lowercase categories (``kernel``, ``gpu_memcpy``,
  ``gpu_memset``, ``cuda_runtime``, ``cuda_driver``, ``user_annotation``,
  ``gpu_user_annotation``), ``ts`` float µs, optionally relative to ``baseTimeNanoseconds``.
* legacy (2021 Kineto): capitalised categories (``Kernel``, ``Memcpy``, ``Memset``,
  ``Runtime``, ``Operator``), ``tid`` strings such as ``"stream 7"``, integer µs since the epoch.

All times come out as int64 ns since the Unix epoch.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from attribution.model import DeviceInfo, MarkerKind, StringTable, Trace
from ppwtop.errors import InputError
from ppwtop.fileio import read_bytes
from ppwtop.importers import kineto_columns as kc

_AMD_NAME = re.compile(r"\bAMD\b|Instinct|Radeon|\bMI\d{3}|gfx\d", re.IGNORECASE)
NO_GPU_NOTE = "no GPU events (kernels, memcpy, memset) in the trace: nothing to attribute"


def read_document(path: str | Path) -> dict[str, Any]:
    """The decoded top-level JSON object; InputError for anything that is not one."""
    p = Path(path)
    raw = read_bytes(p)
    if not raw.strip():
        raise InputError(p, "file is empty")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InputError(p, f"not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(p, "not a Kineto/Chrome trace (no traceEvents)")
    return doc


def load_kineto(path: str | Path) -> Trace:
    """Read a Kineto/Chrome trace; raise InputError for files ppwtop cannot use."""
    # The document is millions of small dicts that are never cyclic garbage: the cyclic GC
    # would rescan them again and again while they are built and walked (≈2x the decode time).
    # The document is freed before the GC is switched back on, so the GC never has to walk it.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        doc = read_document(path)
        trace = trace_from_document(doc, path)
        del doc
    finally:
        if was_enabled:
            gc.enable()
    return trace


def trace_from_document(doc: dict[str, Any], path: str | Path) -> Trace:
    """Build the Trace from an already decoded document (see :func:`read_document`)."""
    props = doc.get("deviceProperties")
    props_list = [d for d in props if isinstance(d, dict)] if isinstance(props, list) else []
    if _amd_devices(props_list):
        raise _amd(path)
    try:
        groups = kc.group_by_cat(doc["traceEvents"])
    except (AttributeError, TypeError):
        raise InputError(
            path, "not a Kineto/Chrome trace (traceEvents holds non-objects)") from None
    api_ev = groups["cuda_runtime"] + groups["cuda_driver"] + groups["Runtime"]

    legacy = any(groups[c] for c in kc.LEGACY_CATS)
    base = doc.get("baseTimeNanoseconds")
    base_ns = _base_ns(base)
    if base_ns is None:
        raise InputError(path, f"baseTimeNanoseconds is not a count of ns: {str(base)[:40]!r}")
    if abs(base_ns) > kc.EPOCH_MAX_NS:
        raise InputError(path, f"baseTimeNanoseconds out of range: {str(base)[:40]} (more "
                               f"than {kc.EPOCH_MAX_NS:.3g} ns from the epoch)")
    notes: list[str] = []
    strings = StringTable()

    def run(fn: Any, cats: tuple[str, ...], what: str) -> Any:
        ev = groups[cats[0]] if len(cats) == 1 else [e for c in cats for e in groups[c]]
        return kc.tolerant(fn, ev, strings, base_ns, what=what, notes=notes)

    try:
        kernels = run(kc.kernels, kc.KERNEL_CATS, "kernel")
        copies = run(kc.copies, kc.COPY_CATS, "memcpy")
        memsets = run(kc.memsets, kc.MEMSET_CATS, "memset")
        apis = kc.tolerant(kc.apis, api_ev, strings, base_ns, what="runtime/driver",
                           notes=notes)
        if any(strings[int(i)].startswith("hip") for i in np.unique(apis.name_id)):
            raise _amd(path)  # ROCm runtime calls (hipLaunchKernel, ...) under cuda_runtime
        host_ev = groups["user_annotation"] + [e for c in kc.STEP_CATS
                                               for e in kc.step_ops(groups[c])]
        host = kc.tolerant(
            functools.partial(kc.markers, kind=MarkerKind.USER_ANNOTATION, on_gpu=False),
            host_ev, strings, base_ns, what="user_annotation", notes=notes)
        gpu = kc.tolerant(
            functools.partial(kc.markers, kind=MarkerKind.GPU_USER_ANNOTATION, on_gpu=True),
            groups["gpu_user_annotation"], strings, base_ns, what="gpu_user_annotation",
            notes=notes)
    except kc.TimeRangeError:
        raise InputError(path, f"baseTimeNanoseconds {base_ns} puts event times past "
                               "the int64 ns range (beyond the year 2262)") from None
    markers = type(host).concat([host, gpu]).sorted_by()
    kernels, copies, memsets = (_checked_items(b, what, notes) for b, what in (
        (kernels, "kernel"), (copies, "memcpy"), (memsets, "memset")))

    if not (len(kernels) or len(copies) or len(memsets)):
        notes.append(NO_GPU_NOTE)
    n_range = len(groups["cuda_profiler_range"])
    if n_range:
        notes.append(f"{n_range} cuda_profiler_range event(s) (CUPTI range profiler) are "
                     "counter ranges, not kernel executions; ignored")

    meta: dict[str, Any] = {
        "source": str(path),
        "format": "kineto",
        "schema": "legacy" if legacy else "modern",
        "notes": notes,
    }
    dist = doc.get("distributedInfo")
    if isinstance(dist, dict):
        for key in ("rank", "world_size"):
            if isinstance(dist.get(key), int):
                meta[key] = dist[key]
    for key in ("displayTimeUnit", "schemaVersion", "cuda_runtime_version",
                "cuda_driver_version", "cupti_version"):
        if isinstance(doc.get(key), (str, int)):
            meta[key] = doc[key]

    devices = _devices(props_list, kernels.device, copies.device, memsets.device)
    if not props_list and devices:
        notes.append("no deviceProperties: device names unknown")
    return Trace(strings=strings, kernels=kernels, copies=copies, memsets=memsets, apis=apis,
                 markers=markers, devices=devices, meta=meta)


# --------------------------------------------------------------------------------------------


def _amd(path: str | Path) -> InputError:
    return InputError(path, "AMD/ROCm trace: ppwtop supports NVIDIA GPUs only")


def _amd_devices(props: list[dict[str, Any]]) -> bool:
    for d in props:
        text = " ".join(str(d.get(k, "")) for k in ("name", "vendor", "gcnArchName"))
        if _AMD_NAME.search(text):
            return True
    return False


def _base_ns(v: Any) -> int | None:
    """``baseTimeNanoseconds`` in ns: 0 when the trace has none, None when it is no count of
    ns (a bool, a word, a non-finite number)."""
    if v is None:
        return 0
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return int(v)
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def _int(v: Any, default: int = -1) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _checked_items(b: Any, what: str, notes: list[str]) -> Any:
    """``b`` (kernels, copies or memsets) with a negative ``dur`` read as 0, and a note for
    those and for events that name no GPU (an audit: both vanished without a word; the engine
    leaves the latter out, as nothing says where they ran)."""
    back = b.end_ns < b.start_ns
    n_back = int(np.count_nonzero(back))
    if n_back:
        notes.append(f"{n_back} {what} event(s) with a negative dur: read as zero length")
        b = dataclasses.replace(b, end_ns=np.maximum(b.end_ns, b.start_ns))
    n_nodev = int(np.count_nonzero(b.device < 0))
    if n_nodev:
        notes.append(f"{n_nodev} {what} event(s) name no GPU (args.device missing or not a "
                     "GPU index): left out")
    return b


def _devices(props: list[dict[str, Any]], *device_cols: Any) -> list[DeviceInfo]:
    out: dict[int, DeviceInfo] = {}
    for i, d in enumerate(props):
        index = _int(d.get("id"), i)
        major, minor = d.get("computeMajor"), d.get("computeMinor")
        cc = f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else ""
        out[index] = DeviceInfo(
            index=index,
            name=str(d.get("name", "")),
            uuid=str(d.get("uuid", "")),
            total_memory_bytes=_int(d.get("totalGlobalMem")),
            sm_count=_int(d.get("numSms")),
            compute_capability=cc,
        )
    for col in device_cols:
        for dev in (int(x) for x in np.unique(col)):
            if dev >= 0 and dev not in out and not props:
                out[dev] = DeviceInfo(index=dev)
    return [out[k] for k in sorted(out)]
