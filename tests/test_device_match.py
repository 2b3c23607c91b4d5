"""A power log that numbers the GPUs otherwise than the trace (the job ran under
CUDA_VISIBLE_DEVICES): told by the engine, mapped by ``--power-gpus``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TypeVar

import numpy as np
import orjson
import pytest

from attribution.engine import attribute
from attribution.model import DeviceInfo, EnergyBatch, PowerBatch, Trace
from attribution.sim import simulate
from ppwtop.cli.main import main
from ppwtop.recording import write_recording

MATCH_LINE = "the power log's GPU 3 follows this GPU's work"


B = TypeVar("B", PowerBatch, EnergyBatch)


def _on_device(batch: B, device: int) -> B:
    c = batch.columns()
    c["device"] = np.full(len(batch), device, np.int16)
    return type(batch).from_columns(c)


def _idle_board(power: PowerBatch, device: int, seed: int) -> PowerBatch:
    """Readings of a board nobody uses, at the same stamps: 61 W ± 0.4 W."""
    c = power.columns()
    rng = np.random.default_rng(seed)
    c["power_mw"] = (61_000 + rng.normal(0.0, 400.0, len(power))).astype(np.int64)
    c["device"] = np.full(len(power), device, np.int16)
    return PowerBatch.from_columns(c)


@pytest.fixture(scope="module")
def run() -> Trace:
    return simulate("varied_mix", "a100", seconds=20.0, seed=2).trace


def _logged_as(trace: Trace, idle_at: int, busy_at: int) -> Trace:
    """The run's readings logged under GPU ``busy_at``, an idle board's under ``idle_at``."""
    p = trace.power
    both = PowerBatch.concat([_idle_board(p, idle_at, 0), _on_device(p, busy_at)])
    name = trace.devices[0].name
    return dataclasses.replace(
        trace, power=both, energy=_on_device(trace.energy, busy_at),
        devices=[DeviceInfo(index=0, name=name)])


def test_the_log_gpu_that_follows_the_work_is_named_and_the_classes_flagged(run: Trace) -> None:
    """The job's GPU is the machine's GPU 3; GPU 0 of the log is an idle board.  Before: the
    classes fitted at 0 W under a line about the readings' phase, and GPU 3 was "another
    process's"; now a line names GPU 3 and every class says why it is flagged."""
    snap = attribute(_logged_as(run, idle_at=0, busy_at=3), n_boot=50)
    (line,) = [w for w in snap.warnings if MATCH_LINE in w]
    assert line.startswith("GPU 0:") and "--power-gpus" in line and "CUDA_VISIBLE_DEVICES" in line
    assert snap.kernels and not any(k.resolvable for k in snap.kernels)
    # the readings' own line (which guessed at a phase lock) gives way to this one
    assert not any("show none of the work" in w for w in snap.warnings)
    assert all("GPU 3, not its GPU 0, follows" in (k.why or "") for k in snap.kernels)


def test_the_unused_gpus_readings_are_read_once_for_all_devices(
        run: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two of the trace's GPUs whose own readings follow nothing, beside a log GPU that does:
    that GPU's readings are worked out once, not once per trace GPU."""
    from attribution.engine import build, timebase

    two = dataclasses.replace(
        _logged_as(run, idle_at=0, busy_at=3),
        kernels=type(run.kernels).concat([run.kernels, dataclasses.replace(
            run.kernels, device=np.ones(len(run.kernels), np.int16))]))
    two = dataclasses.replace(two, power=PowerBatch.concat([two.power,
                                                           _idle_board(run.power, 1, 5)]))
    calls: list[int] = []
    real = timebase.readings_for

    def counted(trace: Trace, device: int, preset: object = None) -> object:
        calls.append(device)
        return real(trace, device, preset)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "readings_for", counted)
    snap = attribute(two, n_boot=20)
    assert sum(1 for w in snap.warnings if MATCH_LINE in w) == 2
    assert calls.count(3) == 1


def test_no_word_when_the_log_gpu_of_the_same_index_follows(run: Trace) -> None:
    """The right mapping, another board busy with a job of its own beside it: said of
    neither (the other GPU is left out, as before)."""
    other = simulate("launch_bound", "a100", seconds=20.0, seed=9).trace.power
    shift = int(run.power.t_ns[0]) - int(other.t_ns[0])
    logged = dataclasses.replace(run, power=PowerBatch.concat(
        [run.power, _on_device(other.shifted(shift), 1)]))
    snap = attribute(logged, n_boot=50)
    assert not any("follows this GPU's work" in w for w in snap.warnings)
    assert any(k.resolvable for k in snap.kernels)


def _files(tmp_path: Path, run: Trace) -> tuple[Path, Path, Path]:
    trace = tmp_path / "trace.ppw"
    write_recording(trace, dataclasses.replace(
        run, power=run.power.take(run.power.t_ns < 0),
        energy=run.energy.take(run.energy.t_ns < 0)))
    logs = []
    for name, (idle_at, busy_at) in (("mapped.ppw", (3, 0)), ("machine.ppw", (0, 3))):
        log = _logged_as(run, idle_at=idle_at, busy_at=busy_at)
        power_only = Trace(strings=log.strings, power=log.power, energy=log.energy,
                           devices=[DeviceInfo(index=0, name=log.devices[0].name),
                                    DeviceInfo(index=3, name=log.devices[0].name)])
        write_recording(tmp_path / name, power_only)
        logs.append(tmp_path / name)
    return trace, logs[0], logs[1]


def test_power_gpus_maps_the_machine_log_onto_the_trace(
        tmp_path: Path, run: Trace, capsys: pytest.CaptureFixture[str]) -> None:
    """`--power-gpus 3` on the machine's log gives the snapshot of a log already numbered as
    the trace is; without it the line says what to pass."""
    trace, mapped, machine = _files(tmp_path, run)
    snaps = {}
    for key, log, extra in (("ref", mapped, []), ("flag", machine, ["--power-gpus", "3"]),
                            ("none", machine, [])):
        out = tmp_path / f"{key}.json"
        assert main(["attribute", "--trace", str(trace), "--power", str(log), *extra,
                     "-o", str(out)]) == 0
        snaps[key] = (orjson.loads(out.read_bytes()), capsys.readouterr().err)
    ref, flag, none = (snaps[k][0] for k in ("ref", "flag", "none"))
    assert flag["totals"]["energy_j"] == pytest.approx(ref["totals"]["energy_j"], rel=1e-9)
    assert [k["energy_j"] for k in flag["kernels"]] == pytest.approx(
        [k["energy_j"] for k in ref["kernels"]], rel=1e-9)
    assert flag["meta"]["power_gpus"] == [3]
    assert MATCH_LINE not in snaps["flag"][1] and MATCH_LINE not in snaps["ref"][1]
    assert MATCH_LINE in snaps["none"][1]
    assert none["totals"]["kernel_energy_j"] < 0.5 * ref["totals"]["kernel_energy_j"]


def test_a_log_of_the_job_gpu_alone_gets_the_mapping_hint(
        tmp_path: Path, run: Trace, capsys: pytest.CaptureFixture[str]) -> None:
    """`nvidia-smi -i 3` beside a job under CUDA_VISIBLE_DEVICES=3: the trace's GPU 0 has no
    readings at all, so no correlation can be compared; the no-power line says which GPU
    the log has and how to map it, and `--power-gpus 3` gives the mapped snapshot."""
    trace, mapped, _ = _files(tmp_path, run)
    only3 = tmp_path / "only3.ppw"
    write_recording(only3, Trace(strings=run.strings, power=_on_device(run.power, 3),
                                 energy=_on_device(run.energy, 3),
                                 devices=[DeviceInfo(index=3, name=run.devices[0].name)]))
    out = tmp_path / "s.json"
    assert main(["attribute", "--trace", str(trace), "--power", str(only3), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert ("GPU 0: no power readings; energies are 0 (times only); the power log has "
            "readings of GPU 3: if the job ran there, pass --power-gpus") in err
    ref = tmp_path / "ref.json"
    assert main(["attribute", "--trace", str(trace), "--power", str(mapped), "-o", str(ref)]) == 0
    assert main(["attribute", "--trace", str(trace), "--power", str(only3), "--power-gpus", "3",
                 "-o", str(out)]) == 0
    assert "--power-gpus" not in capsys.readouterr().err
    got, want = (orjson.loads(p.read_bytes())["totals"]["energy_j"] for p in (out, ref))
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("trace_uuid", ["GPU-8c1f0a2e-0000-4d3b-9e55-aa01",
                                        "8c1f0a2e-0000-4d3b-9e55-aa01"])
def test_uuids_on_both_sides_map_the_log_without_a_flag(
        tmp_path: Path, run: Trace, trace_uuid: str, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """A trace that names its GPU's UUID (a recording, Nsight Systems without the ``GPU-``)
    beside a log that names its GPUs' (nvidia-smi ``--query-gpu=...,uuid``): matched exactly,
    no flag and no guess, with a line saying so."""
    trace, mapped, _ = _files(tmp_path, run)
    named = tmp_path / "named.ppw"
    write_recording(named, dataclasses.replace(
        run, power=run.power.take(run.power.t_ns < 0), energy=run.energy.take(
            run.energy.t_ns < 0),
        devices=[dataclasses.replace(run.devices[0], uuid=trace_uuid)]))
    log = _logged_as(run, idle_at=0, busy_at=3)
    machine = tmp_path / "machine_uuids.ppw"
    name = run.devices[0].name
    write_recording(machine, Trace(strings=log.strings, power=log.power, energy=log.energy,
                                   devices=[DeviceInfo(index=0, name=name, uuid="GPU-0ther"),
                                            DeviceInfo(index=3, name=name,
                                                       uuid="GPU-8C1F0A2E-0000-4D3B-9E55-AA01")]))
    out, ref = tmp_path / "s.json", tmp_path / "ref.json"
    assert main(["attribute", "--trace", str(named), "--power", str(machine), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "matched to the trace's by UUID: its GPU 3 is GPU 0 (its GPU 0 left out)" in err
    assert MATCH_LINE not in err and "power readings but no kernel" not in err
    assert main(["attribute", "--trace", str(trace), "--power", str(mapped), "-o", str(ref)]) == 0
    got, want = (orjson.loads(p.read_bytes())["totals"]["energy_j"] for p in (out, ref))
    assert got == pytest.approx(want, rel=1e-9)
    # a log GPU with another UUID: no mapping, the correlation check speaks instead
    write_recording(machine, Trace(strings=log.strings, power=log.power, energy=log.energy,
                                   devices=[DeviceInfo(index=0, name=name, uuid="GPU-0ther"),
                                            DeviceInfo(index=3, name=name, uuid="GPU-1other")]))
    assert main(["attribute", "--trace", str(named), "--power", str(machine), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "by UUID" not in err and MATCH_LINE in err


@pytest.mark.parametrize(("args", "says"), [
    (["--power-gpus", "9"], "the log has no GPU 9 (it logs GPUs 0, 3)"),
    (["--power-gpus", "3,3"], "a GPU index appears twice"),
    (["--power-gpus", "x"], "not a list of GPU indices"),
    (["--power-gpus", "-1"], "not a list of GPU indices"),
])
def test_power_gpus_bad_values_are_one_line(tmp_path: Path, run: Trace, args: list[str],
                                            says: str, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    trace, _, machine = _files(tmp_path, run)
    rc = main(["attribute", "--trace", str(trace), "--power", str(machine), *args,
               "-o", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "s.json").exists()


def test_export_maps_too_and_says_what_the_engine_says(
        tmp_path: Path, run: Trace, capsys: pytest.CaptureFixture[str]) -> None:
    """`export --power-gpus` maps as `attribute` does; without it the engine's line reaches
    stderr (it was only in the file's notes: the export's kernels at a fifth of their
    energy with no word)."""
    trace, _, machine = _files(tmp_path, run)
    out = tmp_path / "p.json"
    got = {}
    for key, extra in (("flag", ["--power-gpus", "3"]), ("none", [])):
        assert main(["export", str(trace), "--power", str(machine), *extra,
                     "--perfetto", str(out)]) == 0
        got[key] = (orjson.loads(out.read_bytes())["metadata"], capsys.readouterr().err)
    assert MATCH_LINE in got["none"][1] and MATCH_LINE not in got["flag"][1]
    assert any(MATCH_LINE in n for n in got["none"][0]["notes"])
    assert got["none"][0]["kernel_energy_j"] < 0.5 * got["flag"][0]["kernel_energy_j"]


def test_power_gpus_without_a_power_log_is_refused(tmp_path: Path, run: Trace,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    trace, _, _ = _files(tmp_path, run)
    for cmd in (["attribute", "--trace", str(trace), "-o", str(tmp_path / "s.json")],
                ["export", str(trace), "--perfetto", str(tmp_path / "p.json")]):
        assert main([*cmd, "--power-gpus", "3"]) == 2
        assert "--power-gpus maps a --power log's GPUs" in capsys.readouterr().err
