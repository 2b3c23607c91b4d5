"""The snapshot reader checks values, not only types: a file whose numbers no ppwtop run can
write (integers past 64 bits, 1e308 energies, negative times, a reversed window) is refused
with one line naming the file and the field, before diff, report or export work on it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from ppwtop.errors import InputError
from ppwtop.snapshot_io import read_snapshot

GOOD: dict[str, Any] = {
    "schema": "ppwtop.snapshot/1",
    "gpus": [{"index": 0, "name": "g", "model": "a100",
              "sensor": {"field": "instant", "period_ms": 100, "window_ms": 25,
                         "lag_ms": -1.5}}],
    "window": {"start_ns": -5, "end_ns": 2_000_000_000, "duration_s": 2.0},
    "totals": {"energy_j": 10.0, "kernel_energy_j": 6.0, "copy_energy_j": 1.0,
               "idle_energy_j": 3.0, "active_idle_w": 60.0, "measured_energy_j": 10.0,
               "closure_error": -0.01},
    "kernels": [{"name": "k", "gpu": 0, "calls": 3, "time_s": 0.5, "energy_j": 6.0,
                 "dynamic_energy_j": -0.2, "dynamic_energy_ci_j": [-0.5, 0.1],
                 "avg_power_w": 12.0, "resolvable": True, "precision": "bf16"}],
    "copies": [{"kind": "HtoD", "memory": "pageable", "gpu": 0, "calls": 1, "bytes": 2**62,
                "time_s": 0.1, "energy_j": 1.0, "dynamic_energy_j": 0.5}],
    "idle": [{"cause": "launch_gap", "gpu": 0, "time_s": 0.0, "energy_j": 0.0}],
    "steps": {"count": 2, "energy_j": {"mean": 5.0, "p50": 5.0, "p95": 5.0, "p99": 5.0},
              "latency_ms": {"mean": 1.0, "p50": 1.0, "p95": 1.0, "p99": 1.0},
              "items_per_j": None, "step_energy_j": [5.0, None]},
    "inefficiencies": [],
}


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(GOOD)
    at: Any = d
    for k in path[:-1]:
        at = at[k]
    at[path[-1]] = value
    return d


def test_the_edges_a_run_can_write_are_read(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_bytes(orjson.dumps(GOOD))
    s = read_snapshot(p)  # negative dynamic energy, lag and start_ns; 2**62 bytes; a null step
    assert s.copies[0].bytes == 2**62 and s.window.start_ns == -5


@pytest.mark.parametrize(("path", "value", "said"), [
    (["kernels", 0, "calls"], 1e308, "KernelRow.calls is '1e+308': outside the 64-bit"),
    (["copies", 0, "bytes"], 2**64, "CopyRow.bytes is '1.8446744073709552e+19': outside"),
    (["window", "start_ns"], 1e19, "Window.start_ns is '1e+19': outside the 64-bit"),
    (["gpus", 0, "index"], 1e300, "GpuInfo.index is '1e+300': outside the 64-bit"),
    (["kernels", 0, "energy_j"], 1e308, "KernelRow.energy_j is '1e+308': not a finite"),
    (["steps", "step_energy_j"], [1e308], "Steps.step_energy_j[0] is '1e+308'"),
    (["kernels", 0, "dynamic_energy_ci_j"], [0.0, 1e300],
     "KernelRow.dynamic_energy_ci_j[1] is '1e+300'"),
    (["kernels", 0, "time_s"], -1.5, "KernelRow.time_s is -1.5: it cannot be negative"),
    (["idle", 0, "energy_j"], -1.0, "IdleRow.energy_j is -1.0: it cannot be negative"),
    (["totals", "energy_j"], -3.0, "Totals.energy_j is -3.0: it cannot be negative"),
    (["steps", "count"], -5, "Steps.count is -5: it cannot be negative"),
    (["window", "end_ns"], -6, "Window.end_ns -6 is before start_ns -5"),
    # read as given before (an audit, 2026-12-05)
    (["gpus", 0, "name"], {"a": 1}, "GpuInfo.name is \"{'a': 1}\", not str"),
    (["gpus", 0, "model"], [1], "GpuInfo.model is '[1]', not str"),
    (["kernels"], {}, "kernels is a dict, not a list"),
    (["window", "duration_s"], "x", "Window.duration_s is 'x', not float"),
    (["totals", "measured_energy_j"], -1e9, "Totals.measured_energy_j is -1000000000.0: it"),
    (["inefficiencies"], [{"rank": 1, "mechanism": "idle.other", "energy_j": 1.0,
                           "share": -0.5, "evidence": "", "fix": "", "owner": "",
                           "validation": ""}], "Inefficiency.share is -0.5: it cannot be"),
])
def test_values_no_run_writes_are_refused_naming_the_field(
        tmp_path: Path, path: list[Any], value: Any, said: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_with(path, value)))  # json: orjson cannot write 2**64
    with pytest.raises(InputError, match="malformed snapshot") as e:
        read_snapshot(p)
    assert str(p) in str(e.value) and said in str(e.value)


def test_export_and_diff_say_one_line_for_a_huge_integer(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(orjson.dumps(_with(["kernels", 0, "calls"], 1e308)))
    good = tmp_path / "good.json"
    good.write_bytes(orjson.dumps(GOOD))
    for args in (["export", str(p), "--perfetto", str(tmp_path / "x.json")],
                 ["diff", str(good), str(p)]):
        r = subprocess.run([sys.executable, "-m", "ppwtop", *args], capture_output=True,
                           text=True, check=False, timeout=120)
        assert r.returncode == 2, r.stderr  # before: export's internal error, diff's exit 0
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("ppwtop: error:")
        assert "KernelRow.calls" in r.stderr
