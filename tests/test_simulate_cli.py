"""`ppwtop simulate` writes a Kineto trace, an nvidia-smi CSV and the truth, and the files
say what the simulator says."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest

from attribution.model import PowerField
from attribution.sim import simulate
from attribution.sim.truth import Truth
from ppwtop.cli import main as cli_main
from ppwtop.cli.simulate import main
from ppwtop.errors import PpwtopError


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sim") / "run"
    mp = pytest.MonkeyPatch()
    mp.setenv("TZ", "America/New_York")
    try:
        assert main(["--scenario", "pageable_copies", "--gpu", "a100", "--seconds", "4",
                     "--seed", "5", "--out", str(d)]) == 0
    finally:
        mp.undo()
    return d


def test_writes_three_files(out: Path) -> None:
    for name in ("trace.json.gz", "power.csv", "truth.json"):
        assert (out / name).stat().st_size > 1000


def test_kineto_file_matches_the_trace(out: Path) -> None:
    doc = orjson.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))
    res = simulate("pageable_copies", "a100", 4.0, seed=5)
    base = doc["baseTimeNanoseconds"]
    assert doc["deviceProperties"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    ev = doc["traceEvents"]
    kern = [e for e in ev if e.get("cat") == "kernel"]
    assert len(kern) == len(res.trace.kernels)
    ts_ns = np.array([round(e["ts"] * 1000) for e in kern], dtype=np.int64) + base
    assert np.array_equal(ts_ns, res.trace.kernels.start_ns)
    assert {"device", "stream", "correlation", "grid", "block"} <= set(kern[0]["args"])
    cp = [e for e in ev if e.get("cat") == "gpu_memcpy"]
    assert any(e["name"] == "Memcpy HtoD (Pageable -> Device)" for e in cp)
    launches = {e["args"]["correlation"] for e in ev
                if e.get("cat") == "cuda_runtime" and e["name"] == "cudaLaunchKernel"}
    assert {e["args"]["correlation"] for e in kern} <= launches
    steps = [e for e in ev if e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]
    assert len(steps) == len(res.trace.markers)


def test_csv_is_nvidia_smi_format_and_round_trips(out: Path) -> None:
    lines = (out / "power.csv").read_text().splitlines()
    assert lines[0] == ("timestamp, index, name, power.draw.instant [W], power.draw [W], "
                        "clocks.current.sm [MHz], temperature.gpu, clocks_event_reasons.active")
    cells = lines[1].split(", ")
    assert cells[2] == "NVIDIA A100-SXM4-80GB"
    assert cells[3].endswith(" W")
    assert cells[5].endswith(" MHz")
    assert cells[7].startswith("0x") and len(cells[7]) == 18  # nvidia-smi's 64-bit hex mask
    # 2026-01-15 10:00 UTC is 05:00 in New York: the stamps are local time
    assert cells[0].startswith("2026/01/15 04:59:")
    from ppwtop.importers.smi_csv import load_smi_csv

    got = load_smi_csv(out / "power.csv", tz="America/New_York").power
    res = simulate("pageable_copies", "a100", 4.0, seed=5)
    pw = res.trace.power
    polls = ~pw.fresh & (pw.field == int(PowerField.INSTANT))
    gi = got.field == int(PowerField.INSTANT)
    assert int(gi.sum()) == int(polls.sum())
    assert np.all(np.abs(got.t_ns[gi] - pw.t_ns[polls]) < 1_000_000)  # ms stamps
    assert np.all(np.abs(got.power_mw[gi] - pw.power_mw[polls]) <= 5)  # 10 mW printing


def test_truth_json_loads(out: Path) -> None:
    d = orjson.loads((out / "truth.json").read_bytes())
    t = Truth.from_dict(d)
    assert t.scenario == "pageable_copies"
    assert t.total_energy_j > 0
    assert d["schema"] == "ppwtop.truth/1"
    assert "copy:HtoD/pageable" in t.class_dynamic_j
    assert set(t.idle_energy_j) == {"idle.launch_gap", "idle.sync_wait", "idle.host_stall",
                                    "idle.other"}


@pytest.mark.parametrize("argv", [
    ["--scenario", "nope", "--out", "x"],
    ["--gpu", "gtx480", "--out", "x"],
    ["--seconds", "0", "--out", "x"],
    ["--seconds", "99999", "--out", "x"],
    ["--seconds", "abc", "--out", "x"],
    ["--seconds", "inf", "--out", "x"],
    ["--seed", "-1", "--out", "x"],
    ["--workload-seed", "1.5", "--out", "x"],
    ["--seconds", "1", "--seed", str(2**64), "--out", "x"],  # fuzzing: failed mid-write
    ["--seconds", "1", "--workload-seed", str(2**63), "--out", "x"],
    ["--seconds", "1", "--out", ""],  # before: wrote the three files into the cwd
    [],
])
def test_bad_args_are_one_line_errors(argv: list[str], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(PpwtopError):
        main([a if a != "x" else str(tmp_path / "o") for a in argv])
    rc = cli_main.main(["simulate", *[a if a != "x" else str(tmp_path / "o") for a in argv]])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1
    assert err[0].startswith("ppwtop: error:") and "internal error" not in err[0]
    assert not (tmp_path / "o").exists()  # refused before anything is written


def test_out_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(PpwtopError, match="not a directory"):
        main(["--seconds", "1", "--out", str(f)])


def test_kineto_round_trip_through_the_importer(out: Path) -> None:
    from ppwtop.importers.kineto import load_kineto

    got = load_kineto(out / "trace.json.gz")
    want = simulate("pageable_copies", "a100", 4.0, seed=5).trace
    for f in ("kernels", "copies", "apis", "markers"):
        assert len(getattr(got, f)) == len(getattr(want, f)), f
    gk = got.kernels.take(np.argsort(got.kernels.correlation))
    wk = want.kernels.take(np.argsort(want.kernels.correlation))
    for col in ("start_ns", "end_ns", "stream", "grid_x", "block_x"):
        assert np.array_equal(getattr(gk, col), getattr(wk, col)), col
    assert [got.strings[i] for i in gk.name_id.tolist()] == [
        want.strings[i] for i in wk.name_id.tolist()]
    gc = got.copies.take(np.argsort(got.copies.correlation))
    wc = want.copies.take(np.argsort(want.copies.correlation))
    for col in ("start_ns", "kind", "src_mem", "dst_mem", "bytes"):
        assert np.array_equal(getattr(gc, col), getattr(wc, col)), col
    assert np.array_equal(np.sort(got.apis.kind), np.sort(want.apis.kind))
    assert np.array_equal(np.sort(got.markers.start_ns), want.markers.start_ns)
    assert got.devices[0].name == "NVIDIA A100-SXM4-80GB"


def test_workload_seed_flag_reaches_the_simulator(tmp_path: Path) -> None:
    def truth(*extra: str) -> dict[str, object]:
        d = tmp_path / "_".join(extra or ("default",))
        assert main(["--scenario", "varied_mix", "--gpu", "a100", "--seconds", "3",
                     "--out", str(d), *extra]) == 0
        doc: dict[str, object] = orjson.loads((d / "truth.json").read_bytes())
        return doc

    default, explicit, other = truth(), truth("--workload-seed", "0"), truth("--workload-seed",
                                                                               "5")
    assert default["workload_seed"] == explicit["workload_seed"] == 0
    assert other["workload_seed"] == 5
    assert default["class_dynamic_j"] == explicit["class_dynamic_j"]
    assert other["class_dynamic_j"] != default["class_dynamic_j"]
