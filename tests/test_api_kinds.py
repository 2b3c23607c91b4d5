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


def test_no_cupti_call_that_issues_gpu_work_escapes_its_kind() -> None:
    """Over the cbid tables the collector decodes with (~1 300 names): every call whose name
    says it launches a kernel or a graph, copies or sets memory is classed so, whatever its
    version or stream suffix (the live engine waits only on the calls classed as launches,
    copies and memsets: one that escaped would be settled past its own item)."""
    names = set(cl.RUNTIME_CBID_NAMES.values()) | set(cl.DRIVER_CBID_NAMES.values())
    assert len(names) > 1000
    seen = set()
    for n in names:
        base = n.lstrip("_").replace("cu64", "cu", 1).split("_")[0]
        if base in ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cuGraphLaunch",
                    "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel",
                    "cudaLaunchKernelExC", "cuLaunchKernelEx"):
            assert api_kind_of(n) == L, n
            seen.add(L)
        elif base.startswith(("cudaMemcpy", "cuMemcpy")) and "Node" not in base:
            assert api_kind_of(n) == C, n
            seen.add(C)
        elif base.startswith(("cudaMemset", "cuMemset")) and "Node" not in base:
            assert api_kind_of(n) == M, n
            seen.add(M)
        elif base in ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cuCtxSynchronize",
                      "cuStreamSynchronize", "cudaEventSynchronize", "cuEventSynchronize"):
            assert api_kind_of(n) == S, n
            seen.add(S)
    assert seen == {L, C, M, S}  # each family met in the tables
