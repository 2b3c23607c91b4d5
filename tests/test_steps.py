"""`attribution.steps`: steps from ProfilerStep#N, --step-range ranges and mark_step marks;
items per joule and throughput per watt under the SLA."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from attribution.engine import attribute, attribute_arrays
from attribution.model import MarkerBatch, MarkerKind, Trace
from attribution.sim import simulate
from attribution.snapshot import FloatSeries, Snapshot
from attribution.steps import step_stats
from ppwtop.cli.main import main


@pytest.fixture(scope="module")
def run() -> tuple[Trace, Any]:
    sim = simulate("varied_mix", seconds=4, seed=5)
    return sim.trace, attribute_arrays(sim.trace, n_boot=20)


def _with_markers(trace: Trace, markers: MarkerBatch) -> Trace:
    out = Trace(strings=trace.strings, kernels=trace.kernels, copies=trace.copies,
                memsets=trace.memsets, apis=trace.apis, markers=markers, power=trace.power,
                energy=trace.energy, clocks=trace.clocks, devices=trace.devices,
                meta=trace.meta)
    return out


def _profiler_steps(trace: Trace) -> MarkerBatch:
    mk = trace.markers
    return mk.take(mk.kind == int(MarkerKind.PROFILER_STEP))


def test_profiler_steps(run: tuple[Trace, Any]) -> None:
    trace, arrays = run
    st = step_stats(trace, arrays)
    assert st is not None and st.source == "ProfilerStep" and st.work_unit == "steps"
    assert st.count == len(st.step_energy_j) > 100
    assert st.items_per_j is None and st.sla_compliance is None
    e = np.array(st.step_energy_j)
    assert st.energy_j.mean == pytest.approx(e.mean())
    assert st.energy_j.p50 <= st.energy_j.p95 <= st.energy_j.p99


def test_mark_step_instants_carry_items(run: tuple[Trace, Any]) -> None:
    trace, arrays = run
    ps = _profiler_steps(trace)
    ref = step_stats(trace, arrays)
    assert ref is not None
    # mark_step(items=32) called at each step boundary: instants at every step start + the end
    t = np.concatenate([ps.start_ns, ps.end_ns[-1:]])
    n = len(t)
    marks = MarkerBatch.from_columns({
        "start_ns": t, "end_ns": t, "device": np.full(n, -1), "tid": np.ones(n),
        "name_id": np.full(n, trace.strings.intern("ppwtop.mark_step")),
        "kind": np.full(n, int(MarkerKind.STEP_MARK)), "items": np.full(n, 32.0)})
    st = step_stats(_with_markers(trace, MarkerBatch.concat([ps, marks])), arrays)
    assert st is not None and st.source == "mark_step" and st.work_unit == "items"
    # the same spans as the ProfilerSteps: the same per-step energies
    assert st.count == ref.count
    assert np.allclose(st.step_energy_j, ref.step_energy_j)
    assert st.items_per_j == pytest.approx(32 * st.count / sum(st.step_energy_j))


def test_step_range_by_name_and_glob(run: tuple[Trace, Any]) -> None:
    trace, arrays = run
    ps = _profiler_steps(trace)
    half = ps.take(np.arange(0, len(ps), 2))
    n = len(half)
    rng = MarkerBatch.from_columns({
        "start_ns": half.start_ns, "end_ns": half.end_ns, "device": np.full(n, -1),
        "tid": np.ones(n), "name_id": np.full(n, trace.strings.intern("train_step")),
        "kind": np.full(n, int(MarkerKind.NVTX))})
    other = rng.take(np.arange(min(3, n)))
    other = MarkerBatch.from_columns({**other.columns(), "name_id": np.full(
        len(other), trace.strings.intern("eval_step"))})
    tr = _with_markers(trace, MarkerBatch.concat([ps, rng, other]))
    for pattern in ("train_step", "train_*"):
        st = step_stats(tr, arrays, step_range=pattern)
        assert st is not None and st.count == n and st.source == f"range:{pattern}"
    warnings: list[str] = []
    st = step_stats(tr, arrays, step_range="no_such_range", warnings=warnings)
    assert st is not None and st.source == "ProfilerStep"
    assert len(warnings) == 1 and "no_such_range" in warnings[0]
    # the profiler's own steps are ranges too (the importer keeps them a kind apart)
    warnings.clear()
    st = step_stats(tr, arrays, step_range="ProfilerStep*", warnings=warnings)
    assert st is not None and st.count == len(ps) and st.source == "range:ProfilerStep*"
    assert warnings == []


def test_profiler_steps_recorded_as_nvtx_ranges_are_steps(run: tuple[Trace, Any]) -> None:
    """A CUPTI recording holds torch.profiler's ``ProfilerStep#N`` as NVTX ranges, not the
    Kineto importer's own kind: they are the steps there too (they read ``steps: null``).
    Other names, and ranges of the own kind where both exist, are not taken instead."""
    trace, arrays = run
    ps = _profiler_steps(trace)
    ref = step_stats(trace, arrays)
    assert ref is not None
    as_nvtx = MarkerBatch.from_columns({**ps.columns(), "kind": np.full(len(ps),
                                                                         int(MarkerKind.NVTX))})
    decoy = MarkerBatch.from_columns({**as_nvtx.columns(), "name_id": np.full(
        len(ps), trace.strings.intern("ProfilerStep#3 (copy)"))})
    st = step_stats(_with_markers(trace, MarkerBatch.concat([as_nvtx, decoy])), arrays)
    assert st is not None and st.source == "ProfilerStep" and st.count == ref.count
    assert np.allclose(st.step_energy_j, ref.step_energy_j)
    assert step_stats(_with_markers(trace, decoy), arrays) is None
    both = step_stats(_with_markers(trace, MarkerBatch.concat([ps.take(np.arange(5)),
                                                               as_nvtx])), arrays)
    assert both is not None and both.count == 5


def test_sla_compliance_and_items_per_joule_within_it(run: tuple[Trace, Any]) -> None:
    trace, arrays = run
    ref = step_stats(trace, arrays)
    assert ref is not None
    lat = np.array(ref.step_latency_ms)
    sla = float(np.percentile(lat, 80))
    st = step_stats(trace, arrays, sla_ms=sla)
    assert st is not None and st.sla_ms == sla
    ok = lat <= sla
    assert st.sla_compliance == pytest.approx(ok.mean())
    # steps as work units: steps within the SLA per joule of all steps
    assert st.items_per_j_under_sla == pytest.approx(ok.sum() / sum(st.step_energy_j))
    tight = step_stats(trace, arrays, sla_ms=float(lat.min()) / 2)
    assert tight is not None and tight.sla_compliance == 0.0
    assert tight.items_per_j_under_sla == 0.0


def test_snapshot_round_trip_keeps_work_unit_and_source(run: tuple[Trace, Any]) -> None:
    from attribution.engine import build_snapshot

    trace, arrays = run
    snap = build_snapshot(trace, arrays, sla_ms=50.0)
    back = Snapshot.from_dict(snap.to_dict())
    assert back.steps == snap.steps
    assert back.steps is not None and back.steps.source == "ProfilerStep"


def test_cli_step_range_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "sim"
    assert main(["simulate", "--scenario", "varied_mix", "--gpu", "a100", "--seconds", "3",
                 "--out", str(d)]) == 0
    out = tmp_path / "snap.json"
    rc = main(["attribute", "--trace", str(d / "trace.json.gz"), "--power",
               str(d / "power.csv"), "--power-tz", "UTC", "--step-range", "no_such_range",
               "--sla-ms", "20", "-o", str(out)])
    assert rc == 0
    err = capsys.readouterr().err
    assert "no_such_range" in err
    from ppwtop.snapshot_io import read_snapshot

    snap = read_snapshot(out)
    assert snap.meta["step_range"] == "no_such_range"
    assert snap.steps is not None and snap.steps.sla_compliance is not None


def test_step_range_on_a_real_kineto_trace() -> None:
    """HTA's DDP sample: 5 ProfilerSteps, each with a `## forward ##` user annotation (and its
    GPU-side projection, which must not double the count)."""
    from ppwtop.importers import load_trace

    path = (Path(__file__).parent / "data" / "hta" / "tests" / "data" / "ns_resolution_trace"
            / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    trace = load_trace(str(path))
    arrays = attribute_arrays(trace, n_boot=20)
    ps = step_stats(trace, arrays)
    fwd = step_stats(trace, arrays, step_range="## forward ##")
    assert ps is not None and fwd is not None
    mk = trace.markers
    host = (mk.kind == int(MarkerKind.USER_ANNOTATION)) & np.array(
        [trace.name(int(i)) == "## forward ##" for i in mk.name_id])
    assert fwd.count == int(host.sum()) > 0 and fwd.source == "range:## forward ##"
    # forward passes are shorter than whole steps
    assert fwd.latency_ms.p50 < ps.latency_ms.p50
    opt = step_stats(trace, arrays, step_range="Optimizer.step*")
    assert opt is not None and opt.count > 0 and opt.latency_ms.p50 < ps.latency_ms.p50


def test_step_series_read_as_floats_and_round_trip(run: tuple[Trace, Any]) -> None:
    """The engines hand the per-step series out as FloatSeries (an array, floats on demand):
    it must read, compare, hash and serialise as the tuple of floats the contract holds."""
    trace, arrays = run
    st = step_stats(trace, arrays)
    assert st is not None and isinstance(st.step_energy_j, FloatSeries)
    floats = tuple(float(x) for x in np.asarray(st.step_energy_j))
    assert all(type(x) is float for x in st.step_energy_j)
    assert st.step_energy_j == floats and list(st.step_energy_j) == list(floats)
    assert hash(st.step_energy_j) == hash(floats)
    assert st.step_energy_j[3] == floats[3] and st.step_energy_j[-2:] == floats[-2:]
    assert st.step_energy_j != floats[:-1] and st.step_energy_j != (*floats[:-1], -1.0)
    a = np.asarray(st.step_energy_j)
    with pytest.raises(ValueError):  # read-only: a snapshot is immutable
        a[0] = 0.0
    src = np.array(floats)  # the caller's array is copied in: later writes do not reach it
    kept = FloatSeries(src)
    src[0] = -5.0
    assert kept == st.step_energy_j
    snap = Snapshot.from_dict(orjson.loads(orjson.dumps(
        _snapshot_with(st).to_dict())))
    assert snap.steps is not None and snap.steps == st  # tuples back, equal to the series
    assert pickle.loads(pickle.dumps(st)) == st


def _snapshot_with(st: Any) -> Snapshot:
    tr = simulate("demo", seconds=3, seed=1).trace
    snap = attribute(tr, n_boot=10)
    return dataclasses.replace(snap, steps=st)
