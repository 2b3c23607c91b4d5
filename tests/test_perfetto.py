"""`ppwtop export --perfetto`: Chrome trace-event format, energies and counter tracks."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from attribution.model import (
    ApiBatch,
    ApiKind,
    ClockBatch,
    CopyBatch,
    CopyKind,
    DeviceInfo,
    KernelBatch,
    MemKind,
    PowerBatch,
    PowerField,
    StringTable,
    Trace,
)
from attribution.snapshot import GpuInfo, KernelRow, Window
from ppwtop.cli.main import main
from ppwtop.exporters import perfetto
from ppwtop.recording import write_recording
from tests.test_report import make_snapshot

MS = 1_000_000
T0 = 1_700_000_000_000_000_000  # epoch ns
POWER_W = 100.0


def make_trace() -> Trace:
    """Times in ms from T0 (see the energy reasoning in test_power_split_energies)."""
    strings = StringTable(["gemm_a", "gemm_b", "relu", "cudaDeviceSynchronize",
                           "cudaLaunchKernel"])
    k = KernelBatch.from_columns({
        "start_ns": np.array([0, 5, 25, 40]) * MS + T0,
        "end_ns": np.array([10, 15, 30, 41]) * MS + T0,
        "device": [0, 0, 0, 0], "stream": [7, 8, 7, 7], "correlation": [1, 2, 3, 4],
        "name_id": [0, 1, 2, 2],
    })
    c = CopyBatch.from_columns({
        "start_ns": [T0 + 16 * MS], "end_ns": [T0 + 18 * MS], "device": [0], "stream": [7],
        "correlation": [5], "kind": [int(CopyKind.HTOD)], "src_mem": [int(MemKind.PAGEABLE)],
        "dst_mem": [int(MemKind.DEVICE)], "bytes": [1 << 20],
    })
    # a sync call spanning the gap [18, 25) ms; the copy's launch returns just before it runs
    apis = ApiBatch.from_columns({
        "start_ns": [T0 + 17 * MS, T0 + 15 * MS + 500_000],
        "end_ns": [T0 + 25 * MS + 1000, T0 + 15 * MS + 900_000], "pid": [1, 1], "tid": [1, 1],
        "correlation": [-1, 5], "name_id": [3, 4],
        "kind": [int(ApiKind.SYNC), int(ApiKind.LAUNCH)],
    })
    t = np.arange(-5, 46, 1) * MS + T0  # readings every 1 ms, covering the whole span
    power = PowerBatch.from_columns({
        "t_ns": t, "power_mw": np.full(len(t), int(POWER_W * 1000)),
        "device": np.zeros(len(t)), "field": np.full(len(t), int(PowerField.INSTANT)),
        "fresh": np.ones(len(t), bool),
    })
    tc = np.arange(0, 45, 10) * MS + T0
    clocks = ClockBatch.from_columns({
        "t_ns": tc, "device": np.zeros(len(tc)), "sm_mhz": np.full(len(tc), 1410),
        "mem_mhz": np.full(len(tc), 1215), "temp_c": np.full(len(tc), 55.0),
        "clock_reasons": np.zeros(len(tc)),
    })
    return Trace(strings=strings, kernels=k, copies=c, apis=apis, power=power, clocks=clocks,
                 devices=[DeviceInfo(0, "NVIDIA A100-SXM4-40GB")], meta={})


def validate(doc: Any) -> list[dict[str, Any]]:
    """Check a document against the Chrome trace event format; returns the events."""
    assert isinstance(doc, dict)
    assert doc["displayTimeUnit"] in ("ns", "ms")
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    for ev in events:
        for key in ("name", "ph", "ts", "pid", "tid"):
            assert key in ev, (key, ev)
        assert isinstance(ev["name"], str)
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        assert isinstance(ev["ts"], int | float) and math.isfinite(ev["ts"]) and ev["ts"] >= 0
        if ev["ph"] == "X":
            assert isinstance(ev["dur"], int | float) and ev["dur"] >= 0
        elif ev["ph"] == "C":
            assert isinstance(ev["args"], dict) and ev["args"]
            for v in ev["args"].values():
                assert isinstance(v, int | float) and not isinstance(v, bool)
                assert math.isfinite(v)
        elif ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index")
            assert "args" in ev
        else:
            pytest.fail(f"unexpected phase {ev['ph']!r}")
    # every track used by a slice is named
    named = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    procs = {e["pid"] for e in events if e["name"] == "process_name"}
    for e in events:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in named
        if e["ph"] != "M":
            assert e["pid"] in procs
    return list(events)


def slices(events: list[dict[str, Any]], cat: str) -> list[dict[str, Any]]:
    return [e for e in events if e["ph"] == "X" and e.get("cat") == cat]


def test_power_split_energies() -> None:
    """Constant 100 W: a lone record gets P x dur, concurrent ones share by time."""
    doc = orjson.loads(orjson.dumps(perfetto.export_trace(make_trace(), use_engine=False)))
    events = validate(doc)
    assert doc["metadata"]["energy_method"] == "power_split"
    off_us = (T0 - doc["metadata"]["origin_ns"]) / 1e3
    assert off_us == pytest.approx(5000.0)  # the first power reading is 5 ms before T0
    k = {(e["name"], round((e["ts"] - off_us) / 1e3, 6)): e for e in slices(events, "kernel")}
    # gemm_a [0,10) and gemm_b [5,15) overlap for 5 ms: each 5 ms alone + 5 ms at half
    assert k[("gemm_a", 0.0)]["args"]["energy_j"] == pytest.approx(0.75, rel=1e-6)
    assert k[("gemm_b", 5.0)]["args"]["energy_j"] == pytest.approx(0.75, rel=1e-6)
    assert k[("relu", 25.0)]["args"]["energy_j"] == pytest.approx(0.5, rel=1e-6)
    assert k[("relu", 25.0)]["args"]["avg_power_w"] == pytest.approx(POWER_W, rel=1e-6)
    assert k[("gemm_b", 5.0)]["pid"] == 1 and k[("gemm_b", 5.0)]["tid"] == 8
    copies = slices(events, "copy")
    assert len(copies) == 1 and copies[0]["args"]["energy_j"] == pytest.approx(0.2, rel=1e-6)
    assert copies[0]["args"]["bytes"] == 1 << 20 and "HtoD" in copies[0]["name"]
    idle = sorted(slices(events, "idle"), key=lambda e: e["ts"])
    assert [e["name"] for e in idle] == ["idle.launch_gap", "idle.sync_wait", "idle.host_stall"]
    assert [e["dur"] for e in idle] == pytest.approx([1000.0, 7000.0, 10000.0])
    assert all(e["tid"] == perfetto.IDLE_TID for e in idle)
    # board energy over the 41 ms span is all accounted for
    total = sum(e["args"]["energy_j"] for e in events if e["ph"] == "X")
    assert total == pytest.approx(POWER_W * 0.041, rel=1e-6)
    kernel_total = sum(e["args"]["energy_j"] for e in slices(events, "kernel"))
    assert kernel_total == pytest.approx(doc["metadata"]["kernel_energy_j"], rel=1e-3)


def test_counter_tracks() -> None:
    events = validate(perfetto.export_trace(make_trace()))
    power = [e for e in events if e["ph"] == "C" and e["name"].startswith("power")]
    assert len(power) == 51 and all(e["args"]["power_w"] == POWER_W for e in power)
    ts = [e["ts"] for e in power]
    assert min(ts) == 0.0 and ts == sorted(ts)  # the earliest reading is the origin
    names = {e["name"] for e in events if e["ph"] == "C"}
    assert {"SM clock MHz", "memory clock MHz", "temperature C"} <= names
    sm = [e["args"]["sm_mhz"] for e in events if e["name"] == "SM clock MHz"]
    assert sm == [1410] * 5
    procs = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert procs == ["GPU 0 (NVIDIA A100-SXM4-40GB)"]


def test_cli_trace_with_snapshot_class_energies(tmp_path: Path) -> None:
    """--snapshot: each class's slices add up to the snapshot's class energy."""
    rec = tmp_path / "t.ppw"
    write_recording(rec, make_trace())
    base = make_snapshot(n_kernels=0)
    rows = (KernelRow("gemm_a", 0, 1, 0.010, 3.0, 2.0, (1.5, 2.5), 300.0, True, "bf16"),
            KernelRow("gemm_b", 0, 1, 0.010, 2.0, 1.0, (0.5, 1.5), 200.0, True, "bf16"),
            KernelRow("relu", 0, 2, 0.006, 0.6, 0.3, (0.2, 0.4), 100.0, True, "bf16"))
    snap = base.__class__(**{**{f: getattr(base, f) for f in base.__slots__}, "kernels": rows,
                             "window": Window(T0, T0 + 50 * MS)})  # this trace's run
    sp = tmp_path / "s.json"
    sp.write_bytes(orjson.dumps(snap.to_dict()))
    out = tmp_path / "o.json"
    assert main(["export", str(rec), "--snapshot", str(sp), "--perfetto", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    events = validate(doc)
    assert doc["metadata"]["energy_method"] == "snapshot"
    k = slices(events, "kernel")
    total = sum(e["args"]["energy_j"] for e in k)
    assert total == pytest.approx(sum(r.energy_j for r in rows), rel=1e-3)
    relu = sorted((e for e in k if e["name"] == "relu"), key=lambda e: e["ts"])
    # relu runs 5 ms then 1 ms: its 0.6 J split 5:1
    assert [e["args"]["energy_j"] for e in relu] == pytest.approx([0.5, 0.1])
    # idle causes the snapshot knows get its energy (split by time); the rest P_idle x time
    idle = {e["name"]: e["args"]["energy_j"] for e in slices(events, "idle")}
    by_cause = {f"idle.{r.cause}": r.energy_j for r in snap.idle}
    assert idle["idle.host_stall"] == pytest.approx(by_cause["idle.host_stall"])
    assert idle["idle.launch_gap"] == pytest.approx(by_cause["idle.launch_gap"])
    assert idle["idle.sync_wait"] == pytest.approx(0.007 * snap.totals.active_idle_w)


def test_cli_a_snapshot_of_another_run_is_refused_or_told(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--snapshot of another run: a window that misses the trace is an error (its joules
    would be spread over these records); another GPU model, or kernels it does not name, are
    told on stderr and in the file."""
    rec = tmp_path / "t.ppw"
    write_recording(rec, make_trace())
    base = make_snapshot(n_kernels=0)
    fields = {f: getattr(base, f) for f in base.__slots__}
    sp, out = tmp_path / "s.json", tmp_path / "o.json"
    sp.write_bytes(orjson.dumps(base.__class__(**fields).to_dict()))  # window 0 .. 10 s
    assert main(["export", str(rec), "--snapshot", str(sp), "--perfetto", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its window does not overlap the trace's" in err[0]
    other_gpu = (GpuInfo(0, "NVIDIA H100 80GB HBM3", "h100", base.gpus[0].sensor),)
    sp.write_bytes(orjson.dumps(base.__class__(**{
        **fields, "window": Window(T0, T0 + 50 * MS), "gpus": other_gpu}).to_dict()))
    assert main(["export", str(rec), "--snapshot", str(sp), "--perfetto", str(out)]) == 0
    said = capsys.readouterr().err
    assert "GPU 0 is h100 there but a100 in the trace" in said
    assert "names 0 of the trace's 3 kernels" in said
    assert any("GPU 0 is h100 there" in w
               for w in orjson.loads(out.read_bytes())["metadata"]["warnings"])


def test_power_split_averages_readings_sharing_a_stamp_as_the_engine_does() -> None:
    """Two samplers merged: each 100 W reading has a 300 W twin at the same stamp.  The
    split integrates their mean, as the engine reads them (it kept whichever came first)."""
    tr = make_trace()
    cols = tr.power.columns()
    twin = {k: v.copy() for k, v in cols.items()}
    twin["power_mw"] = np.full(len(tr.power), 300_000, np.int64)
    tr = dataclasses.replace(tr, power=PowerBatch(**{k: np.concatenate([cols[k], twin[k]])
                                                     for k in cols}))
    doc = orjson.loads(orjson.dumps(perfetto.export_trace(tr, use_engine=False)))
    relu = [e for e in slices(validate(doc), "kernel") if e["name"] == "relu"]
    assert relu[0]["args"]["energy_j"] == pytest.approx(1.0, rel=1e-6)  # 200 W, not 100 W


def test_engine_path_runs_and_closes(tmp_path: Path) -> None:
    rec = tmp_path / "t.ppw"
    write_recording(rec, make_trace())
    out = tmp_path / "o.json"
    assert main(["export", str(rec), "--perfetto", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    events = validate(doc)
    md = doc["metadata"]
    assert md["energy_method"] in ("engine", "power_split")
    k = sum(e["args"]["energy_j"] for e in slices(events, "kernel"))
    assert k == pytest.approx(md["kernel_energy_j"], rel=1e-3)
    assert len(slices(events, "kernel")) == 4


def test_cli_power_log_is_merged(tmp_path: Path) -> None:
    full = make_trace()
    bare = Trace(strings=full.strings, kernels=full.kernels, copies=full.copies,
                 apis=full.apis, devices=full.devices, meta={})
    power = Trace(power=full.power, devices=full.devices, meta={})
    write_recording(tmp_path / "t.ppw", bare)
    write_recording(tmp_path / "p.ppw", power)
    out = tmp_path / "o.json"
    assert main(["export", str(tmp_path / "t.ppw"), "--power-split", "--perfetto",
                 str(out)]) == 0
    alone = orjson.loads(out.read_bytes())
    assert alone["metadata"]["energy_method"] == "none"
    assert not [e for e in validate(alone) if e["ph"] == "C"]
    assert main(["export", str(tmp_path / "t.ppw"), "--power", str(tmp_path / "p.ppw"),
                 "--power-split", "--perfetto", str(out)]) == 0
    merged = orjson.loads(out.read_bytes())
    events = validate(merged)
    assert merged["metadata"]["energy_method"] == "power_split"
    assert len([e for e in events if e["ph"] == "C"]) == 51
    total = sum(e["args"]["energy_j"] for e in events if e["ph"] == "X")
    assert total == pytest.approx(POWER_W * 0.041, rel=1e-6)


def test_snapshot_input(tmp_path: Path) -> None:
    series = {"t_s": [0.0, 0.5, 1.0], "power_w": [60.0, 250.0, 80.0]}
    snap = make_snapshot(extra={"power_series": series})
    sp = tmp_path / "s.json"
    sp.write_bytes(orjson.dumps(snap.to_dict()))
    out = tmp_path / "o.json"
    assert main(["export", str(sp), "--perfetto", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    events = validate(doc)
    k = slices(events, "kernel")
    assert len(k) == len(snap.kernels)
    assert sum(e["args"]["energy_j"] for e in k) == pytest.approx(snap.totals.kernel_energy_j,
                                                                  rel=1e-3)
    assert '<script>alert("x")</script>' in {e["name"] for e in k}  # JSON, not HTML: verbatim
    power = [e for e in events if e["ph"] == "C"]
    assert [e["args"]["power_w"] for e in power] == [60.0, 250.0, 80.0]
    assert len(slices(events, "idle")) == 2


def test_kineto_input(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
           "traceEvents": [
               {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 1000.0,
                "dur": 50.0, "args": {"device": 0, "stream": 7, "correlation": 1}},
               {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 1100.0,
                "dur": 30.0, "args": {"device": 0, "stream": 7, "correlation": 2}},
           ]}
    src = tmp_path / "trace.json"
    src.write_bytes(orjson.dumps(doc))
    out = tmp_path / "o.json"
    assert main(["export", str(src), "--perfetto", str(out)]) == 0
    events = validate(orjson.loads(out.read_bytes()))
    k = sorted(slices(events, "kernel"), key=lambda e: e["ts"])
    assert [e["name"] for e in k] == ["k1", "k2"]
    assert k[1]["ts"] - k[0]["ts"] == pytest.approx(100.0)
    assert [e["dur"] for e in k] == pytest.approx([50.0, 30.0])


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.json"
    assert main(["export", str(tmp_path / "nope.json"), "--perfetto", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppwtop: error:") and "nope.json" in err and err.count("\n") == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{ this is not json")
    assert main(["export", str(bad), "--perfetto", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppwtop: error:") and "bad.json" in err and err.count("\n") == 1
    assert main(["export", str(bad)]) == 2  # --perfetto is required
    assert capsys.readouterr().err.startswith("ppwtop: error:")
    snap = tmp_path / "s.json"
    snap.write_bytes(orjson.dumps(make_snapshot().to_dict()))
    assert main(["export", str(snap), "--power-split", "--perfetto", str(out)]) == 2
    assert "--power-split only applies when INPUT is a trace" in capsys.readouterr().err
    assert not out.exists()


DATA = Path(__file__).parent / "data"
REAL = [
    DATA / "hta/tests/data/nccl_parser_config/nccl_data.json.gz",  # Kineto, A100, 2 streams
    DATA / "pipit_nsys/pipit/tests/data/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",  # nsys
]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.suffix)
def test_real_traces_export_valid(path: Path, tmp_path: Path) -> None:
    """Real third-party traces (no power): valid events, one slice per kernel/copy/memset."""
    if not path.exists():
        pytest.skip(f"{path} not in this checkout")
    from ppwtop.importers import load_trace

    trace = load_trace(path)
    out = tmp_path / "o.json"
    assert main(["export", str(path), "--perfetto", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    events = validate(doc)
    assert len(slices(events, "kernel")) == len(trace.kernels) > 0
    assert len(slices(events, "copy")) == len(trace.copies)
    assert len(slices(events, "memset")) == len(trace.memsets)
    # durations survive the µs conversion (to the ns)
    dur_us = sorted(e["dur"] for e in slices(events, "kernel"))
    want = np.sort((trace.kernels.end_ns - trace.kernels.start_ns) / 1e3)
    assert np.allclose(dur_us, want, atol=1e-3)
    names = {trace.strings[i] for i in trace.kernels.name_id.tolist()}
    assert {e["name"] for e in slices(events, "kernel")} == names
    streams = {(e["pid"], e["tid"]) for e in slices(events, "kernel")}
    assert streams == {(int(d) + 1, int(s)) for d, s in
                       zip(trace.kernels.device.tolist(), trace.kernels.stream.tolist(),
                           strict=True)}


@pytest.mark.parametrize("damaged_mw", [-100_000, 900_000_000_000])
def test_power_split_drops_damaged_readings_as_the_engine_does(damaged_mw: int) -> None:
    """Every other reading damaged to -100 W or 9·10⁸ W: the split integrates the good 100 W
    ones (before: it integrated the damaged ones too, and a log of negative ones gave
    negative J, one of 9·10⁸ W gigajoules)."""
    tr = make_trace()
    mw = tr.power.power_mw.copy()
    mw[1::2] = damaged_mw
    cols = tr.power.columns()
    cols["power_mw"] = mw
    tr = dataclasses.replace(tr, power=PowerBatch(**cols))
    doc = orjson.loads(orjson.dumps(perfetto.export_trace(tr, use_engine=False)))
    events = validate(doc)
    energies = [e["args"]["energy_j"] for e in events if e["ph"] == "X"]
    assert min(energies) >= 0
    relu = [e for e in slices(events, "kernel") if e["name"] == "relu"]
    assert relu[0]["args"]["energy_j"] == pytest.approx(0.5, rel=1e-6)


def test_gpus_a_trace_only_declares_get_no_idle_slices() -> None:
    """A trace with host calls and eight declared GPUs but no GPU record or reading (a CUPTI
    range profiler's trace): no idle slices, as the engine gives no idle rows there (each GPU
    drew one slice as long as the run before)."""
    tr = make_trace()
    assert len(tr.apis)
    gpu0 = DeviceInfo(index=0, name="NVIDIA A100-SXM4-40GB")
    tr = dataclasses.replace(tr, kernels=KernelBatch.empty(), copies=CopyBatch.empty(),
                             power=PowerBatch.empty(),
                             devices=[dataclasses.replace(gpu0, index=i) for i in range(8)])
    doc = orjson.loads(orjson.dumps(perfetto.export_trace(tr, use_engine=False)))
    assert slices(doc["traceEvents"], "idle") == []
    assert slices(perfetto.export_trace(make_trace(), use_engine=False)["traceEvents"], "idle")


def test_the_snapshot_split_reads_backwards_items_as_the_engine_does(tmp_path: Path) -> None:
    """``export --snapshot`` shared each class's energy by ``end − start``: items that end
    before they start got negative joules and the others more than theirs (a review).  The
    export now repairs the times as the engine does: zero length, zero joules, a line."""
    from attribution.engine import attribute

    tr = make_trace()
    snap = attribute(tr, n_boot=5)
    k = tr.kernels
    s, e = k.start_ns.copy(), k.end_ns.copy()
    s[0], e[0] = e[0], s[0]  # one kernel's ends swapped
    bad = dataclasses.replace(tr, kernels=dataclasses.replace(k, start_ns=s, end_ns=e))
    doc = orjson.loads(orjson.dumps(perfetto.export_trace(bad, snap, use_engine=False)))
    joules = [ev["args"]["energy_j"] for ev in slices(validate(doc), "kernel")]
    assert min(joules) >= 0.0
    assert any("end before they start" in n for n in doc["metadata"]["notes"])
