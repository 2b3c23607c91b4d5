"""Kineto / PyTorch-profiler importer: real traces (modern and legacy schema) and bad input.

Expected counts and spans are recomputed here independently with plain ``json`` + ``gzip`` and
exact rational arithmetic (``fractions.Fraction``), and a few are checked against the literal
values in the shared data set (data/real beside the project)/README.md.
"""

from __future__ import annotations

import functools
import gzip
import json
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attribution.model import ApiKind, CopyKind, MarkerKind, MemKind
from ppwtop.errors import InputError
from ppwtop.importers import load_trace
from ppwtop.importers.kineto import NO_GPU_NOTE, load_kineto
from ppwtop.importers.kineto_columns import copy_kind_of, memset_mem_of

DATA = Path(__file__).parent / "data"
ALEXNET = (DATA / "hta/tests/data/critical_path/alexnet/"
           "benchmark_result_2869224_1695835535_trace.json.gz")
TRITON = DATA / "hta/tests/data/triton_example/triton_example.json.gz"
AMD = DATA / "hta/tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
CUPTI = DATA / "hta/tests/data/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"
NS_RES = DATA / "hta/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
NCCL = DATA / "hta/tests/data/nccl_parser_config/nccl_data.json.gz"
LEGACY = (DATA / "kineto/tb_plugin/samples/resnet50_num_workers_0/"
          "worker0.1623143089861.pt.trace.json.gz")
BERT = DATA / "tracelens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"

NVIDIA_FILES = [ALEXNET, TRITON, CUPTI, NS_RES, NCCL, LEGACY, BERT]

REF_CATS = {
    "kernel": {"kernel", "Kernel"},
    "memcpy": {"gpu_memcpy", "Memcpy"},
    "memset": {"gpu_memset", "Memset"},
    "api": {"cuda_runtime", "cuda_driver", "Runtime"},
}


@functools.cache
def _doc(path: Path) -> dict[str, Any]:
    """The decoded file (cached: tests only read it)."""
    with gzip.open(path, "rt") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _exact_ns(ts_us: float | int, base_ns: int) -> Fraction:
    return Fraction(ts_us) * 1000 + base_ns


def _reference(path: Path) -> dict[str, Any]:
    """Straightforward per-event reference: counts, exact GPU span, device name."""
    doc = _doc(path)
    base = int(doc.get("baseTimeNanoseconds", 0))
    counts = dict.fromkeys(REF_CATS, 0)
    starts: list[Fraction] = []
    ends: list[Fraction] = []
    for e in doc["traceEvents"]:
        for key, cats in REF_CATS.items():
            if e.get("cat") in cats:
                counts[key] += 1
                if key != "api":
                    s = _exact_ns(e["ts"], base)
                    starts.append(s)
                    ends.append(s + Fraction(e["dur"]) * 1000)
    props = doc.get("deviceProperties") or [{}]
    return {
        "counts": counts,
        "span": (min(starts), max(ends)) if starts else None,
        "device": props[0].get("name", ""),
        "rank": (doc.get("distributedInfo") or {}).get("rank"),
    }


@pytest.mark.parametrize("path", NVIDIA_FILES, ids=lambda p: p.name[:24])
def test_counts_span_device_match_reference(path: Path) -> None:
    ref = _reference(path)
    t = load_kineto(path)
    assert len(t.kernels) == ref["counts"]["kernel"]
    assert len(t.copies) == ref["counts"]["memcpy"]
    assert len(t.memsets) == ref["counts"]["memset"]
    assert len(t.apis) == ref["counts"]["api"]
    assert t.devices[0].name == ref["device"]
    span = t.gpu_span_ns()
    if ref["span"] is None:
        assert span is None
    else:
        assert span is not None
        assert abs(span[0] - ref["span"][0]) <= 1
        assert abs(span[1] - ref["span"][1]) <= 2
    assert t.meta["format"] == "kineto"
    assert t.meta["source"] == str(path)
    assert t.meta.get("rank") == ref["rank"]
    for batch in (t.kernels, t.copies, t.memsets, t.apis, t.markers):
        assert np.all(batch.end_ns >= batch.start_ns)
        assert np.all(np.diff(batch.start_ns) >= 0)


def test_readme_literals() -> None:
    """Values from the shared data set (data/real beside the project)/README.md's tables."""
    legacy = load_kineto(LEGACY)
    assert (len(legacy.kernels), len(legacy.copies), len(legacy.memsets)) == (8772, 12, 312)
    assert legacy.meta["schema"] == "legacy"
    assert legacy.devices[0].name == "Tesla V100-DGXS-32GB"
    k_span_ms = (legacy.kernels.end_ns.max() - legacy.kernels.start_ns.min()) / 1e6
    assert round(k_span_ms) == 994
    alex = load_kineto(ALEXNET)
    assert (len(alex.kernels), len(alex.copies), len(alex.memsets)) == (79, 16, 3)
    span = alex.gpu_span_ns()
    assert span is not None and round((span[1] - span[0]) / 1e9, 1) == 12.9
    nccl = load_kineto(NCCL)
    assert (len(nccl.kernels), len(nccl.copies), len(nccl.memsets)) == (2700, 960, 114)
    assert nccl.meta["rank"] == 0 and nccl.meta["world_size"] == 2
    assert len(np.unique(nccl.kernels.stream)) == 2
    ns = load_kineto(NS_RES)
    assert (len(ns.kernels), len(ns.copies), len(ns.memsets)) == (4350, 1600, 145)
    assert ns.devices[0].name == "Tesla V100-SXM2-32GB"
    bert = load_kineto(BERT)
    assert len(bert.kernels) == 60
    assert bert.devices[0].name == "NVIDIA H100 80GB HBM3"
    bspan = bert.gpu_span_ns()
    assert bspan is not None and round((bspan[1] - bspan[0]) / 1e6, 1) == 3.9


def test_modern_base_time_and_kernel_args() -> None:
    doc = _doc(TRITON)
    base = doc["baseTimeNanoseconds"]
    (k,) = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    t = load_kineto(TRITON)
    assert t.meta["schema"] == "modern"
    assert int(t.kernels.start_ns[0]) == round(_exact_ns(k["ts"], base))
    assert int(t.kernels.end_ns[0] - t.kernels.start_ns[0]) == round(Fraction(k["dur"]) * 1000)
    a = k["args"]
    assert t.name(int(t.kernels.name_id[0])) == k["name"]
    assert int(t.kernels.stream[0]) == a["stream"]
    assert int(t.kernels.correlation[0]) == a["correlation"]
    assert int(t.kernels.device[0]) == a["device"]
    assert [int(t.kernels.grid_x[0]), int(t.kernels.grid_y[0]),
            int(t.kernels.grid_z[0])] == a["grid"]
    assert [int(t.kernels.block_x[0]), int(t.kernels.block_y[0]),
            int(t.kernels.block_z[0])] == a["block"]
    assert int(t.kernels.registers[0]) == a["registers per thread"]
    assert int(t.kernels.shared_mem_bytes[0]) == a["shared memory"]
    pairs = zip(t.apis.name_id, t.apis.kind, strict=True)
    kinds = {t.name(int(i)): ApiKind(int(kd)) for i, kd in pairs}
    assert kinds == {"cuLaunchKernel": ApiKind.LAUNCH, "cudaDeviceSynchronize": ApiKind.SYNC}
    steps = t.markers.kind == MarkerKind.PROFILER_STEP
    assert [t.name(int(i)) for i in t.markers.name_id[steps]] == ["ProfilerStep#1"]
    d = t.devices[0]
    props = doc["deviceProperties"][0]
    assert (d.sm_count, d.total_memory_bytes) == (props["numSms"], props["totalGlobalMem"])
    assert d.compute_capability == f"{props['computeMajor']}.{props['computeMinor']}"


def test_ns_resolution_floats_are_rounded_not_truncated() -> None:
    doc = _doc(NS_RES)
    ev = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    exact = sorted(_exact_ns(e["ts"], 0) for e in ev)
    got = load_kineto(NS_RES).kernels.start_ns
    diffs = [abs(int(g) - x) for g, x in zip(got.tolist(), exact, strict=True)]
    assert max(diffs) <= Fraction(1, 2)  # nearest ns of the float value
    assert np.any(got % 1000 != 0)  # sub-µs resolution kept


def test_legacy_schema_details() -> None:
    doc = _doc(LEGACY)
    t = load_kineto(LEGACY)
    assert "baseTimeNanoseconds" not in doc
    htod = [e for e in doc["traceEvents"] if e.get("cat") == "Memcpy"
            and e["name"].startswith("Memcpy HtoD (Pageable -> Device)")]
    assert len(htod) == int(np.sum(t.copies.kind == CopyKind.HTOD))
    i = int(np.argmin(t.copies.start_ns))
    first = min(htod, key=lambda e: e["ts"])
    assert int(t.copies.start_ns[i]) == first["ts"] * 1000
    assert int(t.copies.bytes[i]) == first["args"]["bytes"]
    assert (t.copies.src_mem[i], t.copies.dst_mem[i]) == (MemKind.PAGEABLE, MemKind.DEVICE)
    # tid is the string "25738" in the legacy schema; the numeric value must come through.
    tids = {int(e["tid"]) for e in doc["traceEvents"] if e.get("cat") == "Runtime"}
    assert set(np.unique(t.apis.tid).tolist()) == tids
    streams = {e["args"]["stream"] for e in doc["traceEvents"] if e.get("cat") == "Kernel"}
    assert set(np.unique(t.kernels.stream).tolist()) == streams
    n_launch = sum(1 for e in doc["traceEvents"]
                   if e.get("cat") == "Runtime" and e["name"] == "cudaLaunchKernel")
    assert int(np.sum(t.apis.kind == ApiKind.LAUNCH)) == n_launch
    n_steps = sum(1 for e in doc["traceEvents"] if e.get("cat") == "Operator"
                  and e["name"].startswith("ProfilerStep#"))
    assert int(np.sum(t.markers.kind == MarkerKind.PROFILER_STEP)) == n_steps > 0


def test_amd_trace_refused() -> None:
    with pytest.raises(InputError, match="AMD/ROCm trace: ppwtop supports NVIDIA GPUs only"):
        load_kineto(AMD)


def test_hip_runtime_names_refused(tmp_path: Path) -> None:
    doc = {"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel",
                            "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0, "args": {}}]}
    p = tmp_path / "hip.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="AMD/ROCm"):
        load_kineto(p)


def test_no_gpu_events_is_a_note_not_an_error() -> None:
    t = load_kineto(CUPTI)
    assert len(t.kernels) == 0 and t.gpu_span_ns() is None
    assert NO_GPU_NOTE in t.meta["notes"]
    assert any("cuda_profiler_range" in n for n in t.meta["notes"])
    assert len(t.apis) > 0


def test_plain_json_and_dispatch(tmp_path: Path) -> None:
    p = tmp_path / "bert.json"
    p.write_bytes(gzip.decompress(BERT.read_bytes()))
    a = load_trace(p)
    b = load_kineto(BERT)
    assert np.array_equal(a.kernels.start_ns, b.kernels.start_ns)
    assert a.devices == b.devices


def test_synthetic_malformed_events_dropped_with_note(tmp_path: Path) -> None:
    good = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0006,
            "dur": 1.5, "args": {"device": 0, "stream": 7, "correlation": 3}}
    bad = {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": "oops"}
    memset = {"ph": "X", "cat": "gpu_memset", "name": "Memset (Pinned)", "ts": 20, "dur": 1,
              "args": {"bytes": 64}}
    doc = {"traceEvents": [good, bad, memset], "baseTimeNanoseconds": 1_000_000_000,
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    t = load_kineto(p)
    assert len(t.kernels) == 1
    assert int(t.kernels.start_ns[0]) == 1_000_010_001  # 10.0006 µs → 10000.6 ns → 10001 (rounded)
    assert int(t.kernels.end_ns[0] - t.kernels.start_ns[0]) == 1500
    assert int(t.kernels.grid_x[0]) == -1
    assert any("dropped 1 malformed kernel" in n for n in t.meta["notes"])
    assert int(t.memsets.mem[0]) == MemKind.PINNED and int(t.memsets.bytes[0]) == 64


@pytest.mark.parametrize("bad", [
    {"name": None}, {"name": 7}, {"ts": 1e30}, {"ts": -1e30}, {"dur": 1e30},
], ids=["null name", "numeric name", "ts far future", "ts far past", "dur huge"])
def test_events_that_would_wrap_or_carry_no_name_are_dropped(tmp_path: Path,
                                                             bad: dict[str, object]) -> None:
    # found by an audit: a null name reached the engine as None (an internal error there), and
    # ts 1e30 µs wrapped in int64 ns, placing the kernel at an arbitrary time with a numpy
    # warning; each is now a malformed event, dropped and noted like a non-numeric ts
    good: dict[str, Any] = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                            "ts": 10.0, "dur": 1.5,
                            "args": {"device": 0, "stream": 7, "correlation": 3}}
    doc = {"traceEvents": [good, {**good, **bad, "args": {**good["args"], "correlation": 4}}],
           "baseTimeNanoseconds": 1_000_000_000}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy cast warning on the way
        t = load_kineto(p)
    assert len(t.kernels) == 1 and int(t.kernels.correlation[0]) == 3
    assert any("dropped 1 malformed kernel" in n for n in t.meta["notes"])


def test_a_base_time_that_is_no_number_names_the_trace(tmp_path: Path) -> None:
    # before: read as 0, so the power log "did not overlap" and the error named the CSV
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [], "baseTimeNanoseconds": "x"}))
    with pytest.raises(InputError, match=r"t\.json: baseTimeNanoseconds"):
        load_kineto(p)
    for ok in (0, "00", 1.7e18):  # counts of ns, "00" among them (it used to be refused)
        p.write_text(json.dumps({"traceEvents": [], "baseTimeNanoseconds": ok}))
        assert load_kineto(p).meta["format"] == "kineto"
    p.write_text(json.dumps({"traceEvents": [], "baseTimeNanoseconds": True}))
    with pytest.raises(InputError, match="baseTimeNanoseconds"):
        load_kineto(p)


def test_name_classifiers() -> None:
    assert copy_kind_of("Memcpy DtoH (Device -> Pinned)") == (
        CopyKind.DTOH, MemKind.DEVICE, MemKind.PINNED)
    assert copy_kind_of("Memcpy PtoP (Device -> Device)")[0] == CopyKind.PTOP
    assert copy_kind_of("Memcpy DtoA (Device -> Array)") == (
        CopyKind.OTHER, MemKind.DEVICE, MemKind.ARRAY)
    assert memset_mem_of("Memset (Managed)") == MemKind.MANAGED
    assert memset_mem_of("Memset") == MemKind.UNKNOWN


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


def test_truncated_gzip(tmp_path: Path) -> None:
    p = tmp_path / "cut.json.gz"
    raw = ALEXNET.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputError, match="truncated or corrupt gzip"):
        load_kineto(p)


@pytest.mark.parametrize(("content", "what"), [
    (b'{"schemaVersion": 1, "foo": []}', "no traceEvents"),
    (b"[1, 2, 3]", "no traceEvents"),
    (b'{"traceEvents": [1, 2]}', "non-objects"),
    (b'{"traceEvents": [', "not valid JSON"),
    (b"\x00\x01garbage\xff bytes", "not valid JSON"),
    (b"", "empty"),
])
def test_bad_json(tmp_path: Path, content: bytes, what: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(InputError, match=what) as ei:
        load_kineto(p)
    assert ei.value.path == str(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_kineto(tmp_path / "nope.json")


def test_null_and_string_values_fall_back_per_column(tmp_path: Path) -> None:
    k = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 5,
         "dur": 2, "args": {"device": 0, "stream": None, "correlation": 9,
                            "grid": [4, 2, 1], "block": [32, 1, 1]}}
    api = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
           "tid": "thread 12", "ts": 4, "dur": 0.5, "args": {"correlation": 9}}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [k, api]}))
    t = load_kineto(p)
    assert int(t.kernels.stream[0]) == -1
    assert (int(t.kernels.grid_x[0]), int(t.kernels.grid_y[0])) == (4, 2)
    assert int(t.kernels.correlation[0]) == 9
    assert int(t.apis.tid[0]) == 12 and int(t.apis.end_ns[0] - t.apis.start_ns[0]) == 500
    assert t.devices[0].index == 0 and t.devices[0].name == ""


def _kernel(**args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0,
            "dur": 1.5, "args": {"device": 0, "stream": 7, "correlation": 3, **args}}


@pytest.mark.parametrize("other", [{}, {"stream": None}],
                         ids=["fast path", "slow path (a null stream in another kernel)"])
def test_an_event_with_an_id_beyond_2_53_is_dropped_with_a_note(tmp_path: Path,
                                                                other: dict[str, Any]) -> None:
    # found by fuzzing: device 2**64 was cast with a numpy warning (fast path: a wrapped
    # device) or raised OverflowError (slow path: an internal error); like a ts that would
    # wrap, such an event is malformed: dropped and noted
    doc = {"traceEvents": [_kernel(device=2**64, correlation=4), _kernel(**other),
                           _kernel(correlation=5, grid=[2**60, 1, 1]),
                           _kernel(correlation=6, stream="stream " + "9" * 30),
                           {**_kernel(correlation=7), "cat": "gpu_memcpy", "name": "Memcpy HtoD",
                            "args": {"device": 0, "bytes": 1e300}}]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy cast warning on the way
        t = load_kineto(p)
    assert t.kernels.correlation.tolist() == [3] and t.kernels.device.tolist() == [0]
    assert len(t.copies) == 0
    assert "dropped 3 malformed kernel event(s)" in t.meta["notes"]
    assert "dropped 1 malformed memcpy event(s)" in t.meta["notes"]


@pytest.mark.parametrize("base", [2**63, 1e300, 2**63 - 1000, -(2**64)])
def test_a_base_time_out_of_range_names_the_field(tmp_path: Path, base: float) -> None:
    # found by fuzzing: 2**63 and 1e300 raised OverflowError; 2**63 - 1000 wrapped the
    # event times negative without a word
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [_kernel()], "baseTimeNanoseconds": base}))
    with pytest.raises(InputError, match=r"t\.json: baseTimeNanoseconds out of range"):
        load_kineto(p)


def test_a_base_time_that_pushes_event_times_past_int64_names_the_field(
        tmp_path: Path) -> None:
    # each is in range alone; together they would wrap in int64 ns
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [{**_kernel(), "ts": 3e15}],
                             "baseTimeNanoseconds": 7 * 10**18}))
    with pytest.raises(InputError, match=r"t\.json: baseTimeNanoseconds 7000000000000000000 "
                                         "puts event times past"):
        load_kineto(p)


def test_a_negative_dur_or_no_device_is_said(tmp_path: Path) -> None:
    """Both vanished without a word (an audit): a negative dur read as 0 and a kernel whose
    args.device is no index left out by the engine."""
    def k(i: int, **over: Any) -> dict[str, Any]:
        e = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0 * i,
             "dur": 2.0, "args": {"device": 0, "stream": 7, "correlation": i}}
        e.update(over)
        return e

    events = [k(1), k(2, dur=-100), k(3, args={"device": "zero", "correlation": 3}),
              k(4, args={"device": -1, "correlation": 4}), k(5)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events,
                             "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    t = load_kineto(p)
    assert len(t.kernels) == 5 and bool((t.kernels.end_ns >= t.kernels.start_ns).all())
    notes = t.meta["notes"]
    assert "1 kernel event(s) with a negative dur: read as zero length" in notes
    assert any(n.startswith("2 kernel event(s) name no GPU") for n in notes)
