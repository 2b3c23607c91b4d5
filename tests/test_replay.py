"""ReplayFeed and `ppwtop replay`: a recording replayed with a fake clock, headless export,
bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from attribution.sim import simulate
from attribution.snapshot import Snapshot
from ppwtop.cli.main import main
from ppwtop.recording import write_recording
from ppwtop.replay_feed import ReplayFeed
from ppwtop.tui.feed import SnapshotFeed


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "demo.ppw"
    write_recording(path, simulate("demo", "h100", 10, seed=0).trace)
    return path


def test_feed_replays_recording_until_disconnected(recording: Path) -> None:
    clock = FakeClock()
    feed = ReplayFeed.from_file(recording, clock=clock, n_boot=20)
    assert isinstance(feed, SnapshotFeed)
    assert feed.label == "replay demo.ppw"
    assert feed.connected
    snap = feed.next_snapshot()
    assert isinstance(snap, Snapshot)
    assert snap.kernels and snap.totals.energy_j > 0
    # the engine read the GPU model from the recorded device name (no --gpu)
    assert "H100" in snap.gpus[0].name
    # same wall instant: nothing new
    assert feed.next_snapshot() is None
    t_ns, w = feed.power_trace()
    assert len(t_ns) > 0 and (w > 0).all() and (t_ns <= feed.sim_now_ns()).all()
    clock.t += 2.0
    snap2 = feed.next_snapshot()
    assert snap2 is not None
    assert snap2.meta["elapsed_s"] == pytest.approx(snap.meta["elapsed_s"] + 2.0, abs=1e-6)
    assert feed.connected
    clock.t += 60.0  # past the end of the 10 s recording
    assert not feed.connected
    assert feed.sim_now_ns() == feed.end_ns


def test_speed_scales_replay_clock(recording: Path) -> None:
    clock = FakeClock()
    feed = ReplayFeed.from_file(recording, clock=clock, speed=4.0)
    t0 = feed.sim_now_ns()
    clock.t += 1.0
    assert feed.sim_now_ns() - t0 == 4_000_000_000


def test_headless_writes_valid_snapshot(recording: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "snap.json"
    assert main(["replay", str(recording), "--headless", "--seconds", "4",
                 "--export", str(out)]) == 0
    d = orjson.loads(out.read_bytes())
    assert d["schema"] == "ppwtop.snapshot/1"
    snap = Snapshot.from_dict(d)
    assert snap.kernels
    assert snap.window.duration_s == pytest.approx(4.0, abs=0.2)
    k_sum = sum(k.energy_j for k in snap.kernels)
    assert k_sum == pytest.approx(snap.totals.kernel_energy_j, rel=1e-6)
    assert "ppwtop replay demo.ppw:" in capsys.readouterr().out


def test_a_cut_recording_is_replayed_and_exported_with_its_readers_note(
        recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recording cut part-way (a crash, a full disk, a copy still being written) is read up
    to its last whole chunk; `attribute` said so, `replay` and `export` were silent."""
    data = recording.read_bytes()
    cut = tmp_path / "cut.ppw"
    cut.write_bytes(data[: int(len(data) * 0.9)])
    out = tmp_path / "snap.json"
    assert main(["replay", str(cut), "--headless", "--export", str(out)]) == 0
    err = capsys.readouterr().err
    assert "ppwtop: warning:" in err and "truncated" in err and "cut.ppw" in err
    assert any("truncated" in w for w in Snapshot.from_dict(orjson.loads(
        out.read_bytes())).warnings)
    pf = tmp_path / "pf.json"
    assert main(["export", str(cut), "--perfetto", str(pf)]) == 0
    assert "truncated" in capsys.readouterr().err
    assert any("truncated" in w for w in orjson.loads(pf.read_bytes())["metadata"]["warnings"])
    # the whole recording: no such word
    assert main(["replay", str(recording), "--headless"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_headless_seconds_beyond_the_recording_replays_all_of_it(
        recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # found by fuzzing: --seconds 1e300 (inf ns) raised OverflowError, an internal error
    whole, huge = tmp_path / "whole.json", tmp_path / "huge.json"
    assert main(["replay", str(recording), "--headless", "--export", str(whole)]) == 0
    assert main(["replay", str(recording), "--headless", "--seconds", "1e300",
                 "--export", str(huge)]) == 0
    assert "error" not in capsys.readouterr().err
    a, b = (Snapshot.from_dict(orjson.loads(p.read_bytes())) for p in (whole, huge))
    assert b.window.duration_s == pytest.approx(a.window.duration_s, abs=0.01)
    assert b.totals.energy_j == pytest.approx(a.totals.energy_j, rel=1e-3)


def test_headless_says_what_the_snapshot_says(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A trace with no power log replays as 0 J: the snapshot's line saying there is no power
    reaches stderr (it was only inside the exported JSON), once, whole run or cut short."""
    trace = simulate("varied_mix", "a100", 4, seed=1).trace
    path = tmp_path / "nopower.ppw"
    write_recording(path, dataclasses.replace(trace, power=trace.power.take(
        trace.power.t_ns < 0), energy=trace.energy.take(trace.energy.t_ns < 0)))
    for extra in ([], ["--seconds", "2"]):
        assert main(["replay", str(path), "--headless", *extra]) == 0
        err = capsys.readouterr().err
        assert err.count("ppwtop: warning: GPU 0: no power readings; energies are 0") == 1


@pytest.mark.parametrize("content", [b"hello world\n", b"PPWREC garbage", b"a,b\n1,2\n"])
def test_bad_file_exits_2_with_one_line(tmp_path: Path, content: bytes,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.ppw"
    bad.write_bytes(content)
    assert main(["replay", str(bad), "--headless"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppwtop: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_missing_file_and_bad_flags_exit_2(tmp_path: Path, recording: Path) -> None:
    assert main(["replay", str(tmp_path / "nope.ppw")]) == 2
    assert main(["replay", str(recording), "--export", str(tmp_path / "x.json")]) == 2
    assert main(["replay", str(recording), "--speed", "0"]) == 2
