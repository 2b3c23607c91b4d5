"""What a CUDA runtime or driver call does, from its name: the one classifier the CUPTI
collector and the Kineto and Nsight Systems importers share.

Owns :func:`api_kind_of`. The kind decides how an idle gap's cause is read (a launch that
ended late, a synchronising call spanning the gap) and which calls the live engine waits on
for their GPU record (``engine.live_pending``). Until 2026-12-05 each reader had its own copy
and they disagreed: the collector's called ``cudaStreamWaitEvent`` OTHER where the importers
called it SYNC, and the importers called ``cudaLaunchHostFunc`` (a host callback, no GPU
record) a launch.
"""

from __future__ import annotations

import re

from attribution.model import ApiKind

_VERSION_SUFFIX = re.compile(r"_v\d+$")
_PREFIXES = ("cuda", "cu")
_SYNC_WAITS = ("cudaStreamWaitEvent", "cuStreamWaitEvent")


def api_kind_of(name: str) -> ApiKind:
    """Classify a runtime/driver call by name: a ``_v7000``-style suffix and the leading
    underscores of internal entry points (``__cudaLaunchKernel``) are ignored, ``cu64…`` is
    read as ``cu…``, a ``_ptsz``/``_ptds`` suffix is kept."""
    n = _VERSION_SUFFIX.sub("", name).lstrip("_")
    if n.startswith("cu64"):  # the old 64-bit driver entry points (cu64MemcpyHtoD ...)
        n = "cu" + n[4:]
    if not n.startswith(_PREFIXES):
        return ApiKind.OTHER
    if "HostFunc" in n:  # a host callback: no GPU record follows
        return ApiKind.OTHER
    if "Launch" in n:  # kernels, cooperative kernels, graphs
        return ApiKind.LAUNCH
    if "Graph" in n:  # graph construction (cudaGraphAddMemcpyNode ...): nothing runs
        return ApiKind.OTHER
    if "Synchronize" in n or n.startswith(_SYNC_WAITS):
        return ApiKind.SYNC
    if n.startswith(("cudaMemcpy", "cuMemcpy")):
        return ApiKind.MEMCPY
    if n.startswith(("cudaMemset", "cuMemset")):
        return ApiKind.MEMSET
    if n.startswith(("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree")):
        return ApiKind.ALLOC
    return ApiKind.OTHER
