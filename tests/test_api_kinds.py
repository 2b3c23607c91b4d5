"""The API-name classifier the collector and both importers share (``attribution.api_kinds``)."""

from __future__ import annotations

import pytest

from attribution.api_kinds import api_kind_of
from attribution.model import ApiKind
from ppwtop.collectors import cupti_layout as cl

L, S, C, M, A, OT = (ApiKind.LAUNCH, ApiKind.SYNC, ApiKind.MEMCPY, ApiKind.MEMSET,
                    ApiKind.ALLOC, ApiKind.OTHER)


@pytest.mark.parametrize(("name", "kind"), [
    ("cudaLaunchKernel", L), ("cudaLaunchKernel_v7000", L), ("cuLaunchKernel", L),
    ("cudaLaunchKernelExC_v11060", L), ("cudaLaunchKernel_ptsz", L),
    ("__cudaLaunchKernel_v13000", L), ("cudaGraphLaunch", L), ("cuGraphLaunch_ptsz", L),
    ("cudaLaunchCooperativeKernel", L),
    # a host callback runs no kernel (the importers called it a launch)
    ("cudaLaunchHostFunc", OT), ("cuLaunchHostFunc_v2_ptsz", OT),
    ("cudaDeviceSynchronize_v3020", S), ("cudaStreamSynchronize_ptsz", S),
    ("cudaEventSynchronize", S), ("cuCtxSynchronize", S),
    # the collector called these OTHER, both importers SYNC
    ("cudaStreamWaitEvent", S), ("cuStreamWaitEvent_ptsz", S),
    ("cudaMemcpyAsync", C), ("cuMemcpyHtoDAsync_v2", C), ("cu64MemcpyHtoD", C),
    ("cudaMemsetAsync", M), ("cuMemsetD8_v2", M),
    # "memset" inside a name is not a memset (the collector's substring rule said so)
    ("cuMemSetAccess", OT), ("cudaMemSetMemPool", OT),
    ("cudaMalloc", A), ("cudaMallocHost", A), ("cudaFree_v3020", A), ("cudaFreeHost", A),
    ("cuMemAlloc_v2", A), ("cu64MemFree", A),
    ("cudaGraphAddMemcpyNode", OT), ("cudaHostRegister_v4000", OT), ("cudaGetDevice", OT),
    ("nvtxRangePush", OT),
])
def test_api_kind_of(name: str, kind: ApiKind) -> None:
    assert api_kind_of(name) == kind


def test_every_cupti_call_name_is_classed_by_its_prefix() -> None:
    """Over the cbid tables the collector decodes with (~1 300 names): every launch-like
    name is a ``cuda``/``cu`` call with ``Launch`` in it and no host callback; every memcpy
    and memset starts with one (a substring rule called ``cuMemSetAccess`` a memset)."""
    names = set(cl.RUNTIME_CBID_NAMES.values()) | set(cl.DRIVER_CBID_NAMES.values())
    assert len(names) > 1000
    kinds = {n: api_kind_of(n) for n in names}
    launches = [n for n, k in kinds.items() if k == L]
    assert any("HostFunc" in n for n in names) and launches
    assert all("Launch" in n and "HostFunc" not in n for n in launches)
    for n, k in kinds.items():
        base = n.lstrip("_").replace("cu64", "cu", 1)
        if k == C:
            assert base.startswith(("cudaMemcpy", "cuMemcpy")), n
        if k == M:
            assert base.startswith(("cudaMemset", "cuMemset")), n
