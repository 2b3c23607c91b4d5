"""``ppwtop attribute`` end to end on simulator output (Kineto trace + nvidia-smi CSV)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import orjson
import pytest

from ppwtop.cli.main import main
from ppwtop.snapshot_io import read_snapshot
from tests.conftest import one_error_line
from tests.fifo_guard import unblocked_after

REQUIRED = {"schema", "gpus", "window", "totals", "kernels", "copies", "idle", "steps",
            "inefficiencies"}




def test_end_to_end_snapshot(sim_dir: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "snap.json"
    owners = tmp_path / "owners.toml"
    owners.write_text('[[owner]]\npattern = "idle.host_*"\nowner = "@input-team"\n')
    rc = main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power",
               str(sim_dir / "power.csv"), "--power-tz", "UTC", "--owners", str(owners),
               "-o", str(out)])
    assert rc == 0
    line = capsys.readouterr().out.strip().splitlines()
    assert len(line) == 1 and "J over" in line[0]
    d = orjson.loads(out.read_bytes())
    assert set(d) >= REQUIRED and d["schema"] == "ppwtop.snapshot/1"
    snap = read_snapshot(out)
    t = snap.totals
    parts = (sum(k.energy_j for k in snap.kernels) + sum(c.energy_j for c in snap.copies)
             + sum(i.energy_j for i in snap.idle))
    assert t.energy_j > 0 and parts == pytest.approx(t.energy_j, rel=1e-3)
    assert snap.gpus[0].model == "a100" and snap.gpus[0].sensor.field in ("instant", "draw")
    assert snap.meta["owners"] == str(owners)
    owner = {i.mechanism: i.owner for i in snap.inefficiencies}
    assert owner["idle.host_stall"] == "@input-team" and owner["idle.sync_wait"] == "unowned"
    # the simulator's truth: attributed total within the ±5 % board gain of the true total
    truth = orjson.loads((sim_dir / "truth.json").read_bytes())
    assert t.energy_j == pytest.approx(truth["total_energy_j"], rel=0.07)
    assert snap.steps is not None and snap.steps.count > 0
    assert {i.cause for i in snap.idle} == {"launch_gap", "sync_wait", "host_stall", "other"}


def test_time_zone_mixup_is_shifted_with_a_warning(sim_dir: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "snap.json"
    # the CSV was written in UTC; reading it as +05:30 puts it 5.5 h early
    rc = main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power",
               str(sim_dir / "power.csv"), "--power-tz", "+05:30", "-o", str(out)])
    assert rc == 0
    err = capsys.readouterr().err
    assert "shifted by +5.50 h" in err
    # the zone was given: the hint is about it, not to give one
    assert "--power-tz +05:30 may not be the zone the log was written in" in err
    snap = read_snapshot(out)
    assert any("shifted" in w for w in snap.warnings)
    assert snap.totals.energy_j > 0


def test_a_kineto_trace_whose_kernel_durations_were_lost_is_told(
        sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every kernel's ``dur`` 0 in the file: the importer keeps them, the engine gives them
    0 J, and stderr and the snapshot say why (exit 0: the input is usable, the data kept)."""
    doc = orjson.loads(gzip.decompress((sim_dir / "trace.json.gz").read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels:
        e["dur"] = 0
    trace, out = tmp_path / "dur0.json", tmp_path / "snap.json"
    trace.write_bytes(orjson.dumps(doc))
    assert main(["attribute", "--trace", str(trace), "--power", str(sim_dir / "power.csv"),
                 "--power-tz", "UTC", "-o", str(out)]) == 0
    line = f"GPU 0: {len(kernels)} of {len(kernels)} kernels (100%) have no duration"
    assert f"ppwtop: warning: {line}" in capsys.readouterr().err
    snap = read_snapshot(out)
    assert any(w.startswith(line) for w in snap.warnings)
    assert sum(k.energy_j for k in snap.kernels) == 0.0


def test_power_log_that_never_overlaps_is_an_input_error(
        sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "old.csv"
    text = (sim_dir / "power.csv").read_text()
    date = text.splitlines()[1].split(",")[0].split()[0]
    csv.write_text(text.replace(date, "2025/06/01"))
    rc = main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power", str(csv),
               "--power-tz", "UTC", "-o", str(tmp_path / "s.json")])
    assert rc == 2
    assert "old.csv" in one_error_line(capsys)


@pytest.mark.parametrize("which", ["missing", "csv_as_trace", "bad_gpu"])
def test_bad_inputs_exit_2_with_one_line(which: str, sim_dir: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    trace = {"missing": str(tmp_path / "nope.json"), "csv_as_trace": str(sim_dir / "power.csv"),
             "bad_gpu": str(sim_dir / "trace.json.gz")}[which]
    argv = ["attribute", "--trace", trace, "-o", str(tmp_path / "s.json")]
    if which == "bad_gpu":
        argv += ["--gpu", "tpu9000"]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert {"missing": "no such file", "csv_as_trace": "not a trace",
            "bad_gpu": "tpu9000"}[which] in line


@pytest.mark.parametrize("option", ["--step-range", "--power-tz"])
def test_an_option_text_that_is_not_utf8_is_a_one_line_error(
        option: str, sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # found by fuzzing: --step-range $'\xff' (argv bytes that are not UTF-8 arrive as a lone
    # surrogate) reached the snapshot writer: "internal error: TypeError"
    out = tmp_path / "s.json"
    assert main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), option, "\udcff",
                 "-o", str(out)]) == 2
    line = one_error_line(capsys)
    assert option in line and "not valid UTF-8" in line and "internal error" not in line
    assert not out.exists()


def test_a_trace_path_that_is_not_utf8_is_written_escaped(
        sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a file name is bytes: b"t\xff.json.gz" is a good name; the snapshot records it escaped
    trace = tmp_path / "t\udcff.json.gz"
    trace.write_bytes((sim_dir / "trace.json.gz").read_bytes())
    out = tmp_path / "s.json"
    assert main(["attribute", "--trace", str(trace), "--power", str(sim_dir / "power.csv"),
                 "--power-tz", "UTC", "-o", str(out)]) == 0
    assert read_snapshot(out).meta["trace"] == str(tmp_path / "t\\xff.json.gz")


@pytest.mark.parametrize("which", ["--trace", "--power"])
def test_a_fifo_input_is_refused_not_waited_on(which: str, sim_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # found by fuzzing: `attribute --trace FIFO` with no writer blocked forever
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    files = {"--trace": str(sim_dir / "trace.json.gz"), "--power": str(sim_dir / "power.csv")}
    files[which] = str(fifo)

    with unblocked_after(fifo):  # should the FIFO be opened after all: EOF, not a hang
        assert main(["attribute", "--trace", files["--trace"], "--power", files["--power"],
                     "-o", str(tmp_path / "s.json")]) == 2
    line = one_error_line(capsys)
    assert line == f"ppwtop: error: {fifo}: is a named pipe (FIFO), not a regular file"


def test_read_snapshot_rejects_non_snapshots(tmp_path: Path) -> None:
    from ppwtop.errors import InputError

    p = tmp_path / "x.json"
    p.write_bytes(b'{"schema": "something/else"}')
    with pytest.raises(InputError, match=r"x\.json"):
        read_snapshot(p)
    p.write_bytes(b"not json")
    with pytest.raises(InputError, match="not JSON"):
        read_snapshot(p)
    # a recording where a snapshot belongs (found by an audit: "not JSON: str is not valid
    # UTF-8: surrogates ...") is named as one, with the command that makes the snapshot
    from attribution.sim import simulate
    from ppwtop.recording import write_recording

    rec = tmp_path / "r.ppw"
    write_recording(rec, simulate("varied_mix", "a100", 2.0, seed=1).trace)
    with pytest.raises(InputError, match=r"is a ppwtop recording, not a snapshot: attribute"):
        read_snapshot(rec)


@pytest.mark.parametrize(("where", "value"), [
    (("kernels", 0, "energy_j"), "abc"), (("totals", "energy_j"), "x"),
    (("kernels", 0, "calls"), 2.5), (("kernels", 0, "dynamic_energy_ci_j"), [1.0]),
    (("kernels", 0, "resolvable"), "yes"), (("idle", 0, "cause"), 3),
    (("steps", "sla_ms"), "fast"), (("steps", "step_energy_j", 0), "x"), (("steps", "count"), "9"),
])
def test_a_snapshot_field_of_the_wrong_type_names_the_file(
        sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        where: tuple[str | int, ...], value: object) -> None:
    # found by an audit: `report` on such a file ended in "internal error: TypeError" (no file
    # named), where the renderer first did arithmetic on the field
    snap = tmp_path / "s.json"
    assert main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power",
                 str(sim_dir / "power.csv"), "--power-tz", "UTC", "-o", str(snap)]) == 0
    capsys.readouterr()
    d = orjson.loads(snap.read_bytes())
    node = d
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps(d))
    assert main(["report", str(bad), "-o", str(tmp_path / "r.md")]) == 2
    line = one_error_line(capsys)
    field = ".".join(str(k) for k in where if isinstance(k, str))  # "kernels.energy_j" …
    assert "bad.json" in line and "internal error" not in line
    assert field.split(".")[-1] in line.split("bad.json", 1)[1]  # the field, after the file
    assert read_snapshot(snap).kernels  # the untouched file still reads


def test_debug_zero_keeps_the_one_line_message(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # PPWTOP_DEBUG=0 is "off", not "set": an unexpected error stays one line (exit 2)
    from ppwtop.cli import demo

    def boom(argv: list[str]) -> int:
        raise RuntimeError("unexpected")
    monkeypatch.setattr(demo, "main", boom)
    monkeypatch.setenv("PPWTOP_DEBUG", "0")
    assert main(["demo"]) == 2
    assert "internal error: RuntimeError: unexpected" in one_error_line(capsys)
    monkeypatch.setenv("PPWTOP_DEBUG", "1")
    with pytest.raises(RuntimeError, match="unexpected"):
        main(["demo"])


def test_help_answers(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["attribute", "--help"])
    assert e.value.code == 0
    assert "--power-tz" in capsys.readouterr().out


def test_no_command_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    got = capsys.readouterr()
    assert "attribute" in got.out  # the usage, as before
    assert got.err.strip().splitlines() == [
        "ppwtop: error: a command is required (see 'ppwtop --help')"]
    assert main(["--help"]) == 0
    assert capsys.readouterr().err == ""


def test_device_name_from_the_power_log(tmp_path: Path) -> None:
    from attribution.model import DeviceInfo, Trace
    from ppwtop.cli.attribute import fill_device_names

    tr = Trace(devices=[DeviceInfo(0, ""), DeviceInfo(1, "Tesla V100-SXM2-32GB")])
    pw = Trace(devices=[DeviceInfo(0, "NVIDIA A100-SXM4-80GB"), DeviceInfo(1, "other")])
    assert fill_device_names(tr, pw) == []  # "other" names no known model: nothing to say
    assert [d.name for d in tr.devices] == ["NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB"]
    # a log whose GPU is another model than the trace's: kept, and told
    pw = Trace(devices=[DeviceInfo(1, "NVIDIA H100 80GB HBM3")])
    (line,) = fill_device_names(tr, pw)
    assert line.startswith("GPU 1: the trace names it 'Tesla V100-SXM2-32GB' (v100) but the "
                           "power log 'NVIDIA H100 80GB HBM3' (h100)")
    assert tr.devices[1].name == "Tesla V100-SXM2-32GB"


def test_a_gpu_model_that_contradicts_the_trace_is_told(
        sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "snap.json"
    args = ["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power",
            str(sim_dir / "power.csv"), "--power-tz", "UTC", "-o", str(out)]
    assert main([*args, "--gpu", "rtx3090"]) == 0
    line = ("GPU 0: attributed as rtx3090 (asked for), but the trace names it "
            "'NVIDIA A100-SXM4-80GB' (a100)")
    assert f"ppwtop: warning: {line}" in capsys.readouterr().err
    assert any(w.startswith(line) for w in read_snapshot(out).warnings)
    assert main([*args, "--gpu", "A100"]) == 0  # the same model: nothing to say
    assert "attributed as" not in capsys.readouterr().err


def test_garbage_csv_rows_are_skipped_counted_and_reported(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    sim = tmp_path / "sim"
    assert main(["simulate", "--scenario", "varied_mix", "--gpu", "a100", "--seconds", "4",
                 "--out", str(sim)]) == 0
    lines = (sim / "power.csv").read_text().splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([*lines[:5], "garbage,row", "2026/13/45 99:99:99.000, 0, x, y",
                              *lines[5:]]) + "\n")
    out = tmp_path / "snap.json"
    capsys.readouterr()
    assert main(["attribute", "--trace", str(sim / "trace.json.gz"), "--power", str(bad),
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    snap = read_snapshot(out)
    skipped = [w for w in snap.warnings if "skipped 2 unparsable row" in w]
    assert skipped, snap.warnings
    assert "skipped 2 unparsable row" in err
    assert snap.totals.energy_j > 0


def test_a_recording_given_as_its_own_power_log_gives_the_same_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--trace r.ppw --power r.ppw` merged the recording's readings, and its records, a
    second time (copies 185 → 200 J in the audit); the log's readings now replace the
    trace's own, with a warning."""
    from attribution.sim import simulate
    from ppwtop.recording import write_recording

    rec = tmp_path / "r.ppw"
    write_recording(rec, simulate("varied_mix", "a100", 8.0, seed=1).trace)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["attribute", "--trace", str(rec), "-o", str(a)]) == 0
    capsys.readouterr()
    assert main(["attribute", "--trace", str(rec), "--power", str(rec), "-o", str(b)]) == 0
    assert "readings are replaced by" in capsys.readouterr().err
    sa, sb = orjson.loads(a.read_bytes()), orjson.loads(b.read_bytes())
    assert sa["totals"] == sb["totals"] and sa["kernels"] == sb["kernels"]


def test_a_negative_diff_seed_is_a_flag_error(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # before: accepted by argparse, then reported as "A vs B: cannot compare" (a file problem)
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--seed",
                 "-1"]) == 2
    line = one_error_line(capsys)
    assert "--seed" in line and "cannot compare" not in line


@pytest.mark.parametrize("where", ["dir", "missing_parent", "file_as_parent", "empty"])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(
        where: str, sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    out = {"dir": str(tmp_path), "missing_parent": str(tmp_path / "no" / "s.json"),
           "file_as_parent": str(tmp_path / "f" / "s.json"), "empty": ""}[where]
    rc = main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power",
               str(sim_dir / "power.csv"), "-o", out])
    assert rc == 2  # before: the run's warnings were printed first, then the error
    line = one_error_line(capsys)
    assert "cannot write" in line
