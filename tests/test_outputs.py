"""Outputs never destroy inputs or recordings, and replace what was at their path all or
nothing (``fileio.write_atomic``, ``snapshot_io.check_output``; an audit, 2026-12-05)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from ppwtop.cli.main import main
from ppwtop.fileio import write_atomic
from ppwtop.snapshot_io import read_snapshot
from tests.conftest import one_error_line
from tests.test_report import make_snapshot, write


@pytest.fixture(scope="module")
def stray_recording(tmp_path_factory: pytest.TempPathFactory, sim_dir: Path) -> Path:
    """The simulated run with its power log, two kernels stamped ~11.6 days early."""
    import dataclasses

    from ppwtop.importers import load_power, load_trace
    from ppwtop.recording import write_recording

    tr = load_trace(sim_dir / "trace.json.gz")
    k = tr.kernels
    s, e = k.start_ns.copy(), k.end_ns.copy()
    s[:2] -= 10**18
    e[:2] -= 10**18
    tr = dataclasses.replace(tr, kernels=dataclasses.replace(k, start_ns=s, end_ns=e),
                             power=load_power(sim_dir / "power.csv", tz="UTC").power)
    rec = tmp_path_factory.mktemp("stray") / "t.ppw"
    write_recording(rec, tr)
    return rec


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory, sim_dir: Path) -> Path:
    from attribution.model import Trace
    from ppwtop.importers import load_trace
    from ppwtop.recording import write_recording

    p = tmp_path_factory.mktemp("rec") / "r.ppw"
    tr: Trace = load_trace(sim_dir / "trace.json.gz")
    write_recording(p, tr)
    return p




def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
        sim_dir: Path, recording: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each exited 0 with its input replaced (a recording by a snapshot, a power log by a
    snapshot, a snapshot by its own Perfetto export)."""
    rec = tmp_path / "r.ppw"
    rec.write_bytes(recording.read_bytes())
    power = tmp_path / "power.csv"
    power.write_bytes((sim_dir / "power.csv").read_bytes())
    snap = write(tmp_path / "s.json", make_snapshot())
    link = tmp_path / "same.json"
    link.symlink_to(snap)
    cases: list[tuple[list[str], Path]] = [
        (["attribute", "--trace", str(rec), "-o", str(rec)], rec),
        (["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power", str(power),
          "-o", str(power)], power),
        (["export", str(snap), "--perfetto", str(link)], snap),
        (["report", str(snap), "-o", str(tmp_path / "s.json.md")], snap),  # (a control)
        (["replay", str(rec), "--headless", "--export", str(rec)], rec),
    ]
    for argv, kept in cases:
        before = kept.read_bytes()
        rc = main(argv)
        if argv[0] == "report":
            assert rc == 0
            capsys.readouterr()
            continue
        assert rc == 2, argv
        assert "is also this command's input" in one_error_line(capsys)
        assert kept.read_bytes() == before, argv


def test_a_recording_at_the_output_path_is_not_overwritten(
        sim_dir: Path, recording: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "yesterday.ppw"
    other.write_bytes(recording.read_bytes())
    before = other.read_bytes()
    assert main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "-o",
                 str(other)]) == 2
    assert "is a ppwtop recording" in one_error_line(capsys)
    assert main(["demo", "--headless", "--seconds", "1", "--export", str(other)]) == 2
    assert "is a ppwtop recording" in one_error_line(capsys)
    assert other.read_bytes() == before


def test_a_failed_write_leaves_the_old_file_whole(
        sim_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """On a full disk the old snapshot became 28 KB of cut JSON."""
    out = tmp_path / "snap.json"
    assert main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power",
                 str(sim_dir / "power.csv"), "-o", str(out)]) == 0
    good = out.read_bytes()
    out.chmod(0o640)
    real_fdopen = os.fdopen

    class FullDisk:
        """The new file: its first 4 KB written, then the disk is full."""

        def __init__(self, fd: int, mode: str) -> None:
            self.f = real_fdopen(fd, mode)

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def fileno(self) -> int:
            return self.f.fileno()

        def write(self, data: bytes) -> int:
            self.f.write(data[:4096])
            self.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("ppwtop.fileio.os.fdopen", FullDisk)
    capsys.readouterr()
    assert main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power",
                 str(sim_dir / "power.csv"), "--gpu", "h100", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ppwtop: error:") and "No space left on device" in err[-1]
    monkeypatch.undo()
    assert out.read_bytes() == good
    assert read_snapshot(out).gpus[0].model == "a100"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.json"]  # no temporary left
    # a write that works keeps the old file's permissions
    write_atomic(out, b"{}")
    assert out.read_bytes() == b"{}" and stat.S_IMODE(out.stat().st_mode) == 0o640


def test_write_atomic_through_a_symlink_and_to_a_device(tmp_path: Path) -> None:
    target = tmp_path / "runs" / "s.json"
    target.parent.mkdir()
    target.write_bytes(b"old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    write_atomic(link, b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    write_atomic("/dev/null", b"x" * 10)  # not a regular file: written in place
    assert Path("/dev/null").exists() and not Path("/dev/null").is_file()


def test_a_newline_or_escape_in_a_path_keeps_the_error_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "no\nsuch\x1b[31m.json"
    assert main(["attribute", "--trace", str(bad), "-o", str(tmp_path / "o.json")]) == 2
    line = one_error_line(capsys)
    assert "no\\nsuch\\x1b[31m.json: no such file" in line and "\x1b" not in line
    assert main(["attribute", "--trace", "x", "-o", "y", "--x\ny"]) == 2
    assert "--x\\ny" in one_error_line(capsys)


def test_a_recording_cut_inside_its_header_is_an_input_error(
        recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It gave "0.0 J over 0.00 s" and exit 0 from attribute and export (replay refused it)."""
    cut = tmp_path / "cut.ppw"
    cut.write_bytes(recording.read_bytes()[:96])
    for argv in (["attribute", "--trace", str(cut), "-o", str(tmp_path / "s.json")],
                 ["export", str(cut), "--perfetto", str(tmp_path / "p.json")],
                 ["attribute", "--trace", str(recording), "--power", str(cut), "-o",
                  str(tmp_path / "s.json")]):
        assert main(argv) == 2
        assert "holds nothing to read: recording truncated at byte 96 inside its header" in \
            one_error_line(capsys)
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "p.json").exists()


def test_binary_input_is_not_called_a_csv_and_a_snapshot_not_a_trace(
        sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Random bytes named .csv (or gzipped) were "a CSV power log, not a trace"; a snapshot
    given as --power was "a kineto trace" (an audit)."""
    import gzip

    rnd = bytes(range(256)) * 8
    (tmp_path / "r.csv").write_bytes(rnd)
    (tmp_path / "r.gz").write_bytes(gzip.compress(rnd))
    for name, said in (("r.csv", "unknown file format (binary data;"),
                       ("r.gz", "unknown file format (a gzip of binary data;")):
        assert main(["attribute", "--trace", str(tmp_path / name), "-o",
                     str(tmp_path / "o.json")]) == 2
        assert said in one_error_line(capsys)
    snap = write(tmp_path / "s.json", make_snapshot())
    assert main(["attribute", "--trace", str(sim_dir / "trace.json.gz"), "--power", str(snap),
                 "-o", str(tmp_path / "o.json")]) == 2
    assert "is a ppwtop snapshot, not a power log" in one_error_line(capsys)
    assert main(["attribute", "--trace", str(sim_dir / "power.csv"), "-o",
                 str(tmp_path / "o.json")]) == 2  # a real log still says what it is
    assert "is a CSV power log, not a trace" in one_error_line(capsys)


def test_simulate_refuses_a_run_too_large_to_write_and_names_the_seconds_that_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """launch_bound for 900 s (21.9 M events) peaked at 23.5 GB writing its JSON (an
    audit): the limit scaled down here to a 3 s run's size."""
    import ppwtop.cli.simulate as sim_cli

    monkeypatch.setattr(sim_cli, "MAX_EVENTS", 20_000)
    out = tmp_path / "lb"
    assert main(["simulate", "--scenario", "launch_bound", "--seconds", "3", "--out",
                 str(out)]) == 2
    line = one_error_line(capsys)
    assert "holds 0.1 M trace events" in line and "use --seconds" in line
    assert not out.exists()
    most = int(line.rsplit("use --seconds ", 1)[1].split()[0])
    assert main(["simulate", "--scenario", "launch_bound", "--seconds", str(max(most, 1)),
                 "--out", str(out)]) == 0


def test_a_writable_file_in_a_directory_that_takes_no_new_file_is_written_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The temporary beside it cannot be created (a directory ppwtop may not write): the file
    is written in place, as before, rather than the output refused."""
    out = tmp_path / "s.json"
    out.write_bytes(b"old")
    inode = out.stat().st_ino
    real_open = os.open

    def no_new_files(p: Any, flags: int, mode: int = 0o777) -> int:
        if str(p).endswith(".ppwtop-tmp"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(p, flags, mode)

    monkeypatch.setattr("ppwtop.fileio.os.open", no_new_files)
    write_atomic(out, b"new")
    assert out.read_bytes() == b"new" and out.stat().st_ino == inode
    with pytest.raises(PermissionError):  # a new file there: nothing to write in place
        write_atomic(tmp_path / "new.json", b"x")


@pytest.mark.parametrize("split", [False, True])
def test_export_of_a_trace_with_stray_records(stray_recording: Path, tmp_path: Path,
                                              split: bool,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The engine left the strays out and the exporter did not: its slices and energies
    then differed in length (an internal error), and the naive split's idle spanned the
    stretched window (62.9 MJ) (a review)."""
    import orjson

    out = tmp_path / "o.json"
    assert main(["export", str(stray_recording), "--perfetto", str(out)]
                + (["--power-split"] if split else [])) == 0
    assert "2 record(s) lie more than" in capsys.readouterr().err
    md = orjson.loads(out.read_bytes())["metadata"]
    assert md["idle_energy_j"] < 1_000.0  # a 3 s run's idle, not a stretched window's


def test_an_output_to_dev_stdout_in_a_pipe_is_written(sim_dir: Path) -> None:
    """/dev/stdout in a pipe resolves to /proc/N/fd/pipe:[…], where no file can be made: the
    output failed after the run (a review)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "ppwtop", "attribute", "--trace",
                        str(sim_dir / "trace.json.gz"), "-o", "/dev/stdout"],
                       capture_output=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-500:]
    assert r.stdout.lstrip().startswith(b"{") and b'"ppwtop.snapshot/1"' in r.stdout


def test_replay_of_a_recording_with_stray_records(
        stray_recording: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The replay clock starts at the earliest record: one stamped ~11 days early put the
    run that far into replay time, so the first seconds replayed held nothing."""
    assert main(["replay", str(stray_recording), "--headless", "--seconds", "2"]) == 0
    out = capsys.readouterr()
    assert "2 record(s) lie more than" in out.err
    assert " J in 2.0 s" in out.out
