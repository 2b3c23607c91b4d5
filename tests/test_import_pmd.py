"""PMD meter decoder and timestamps.csv edges, checked against the README reference energies."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from attribution.model import PowerBatch, PowerField
from ppwtop.errors import InputError
from ppwtop.importers.pmd import decode_pmd, load_edges, load_pmd, load_window
from ppwtop.importers.smi_csv import load_smi_csv

RUN = Path(__file__).parent / "data" / "gpu_power_benchmark" / "plotting" / "data" / "5050" / "3090"


def _energy_j(t_ns: npt.NDArray[np.int64], w: npt.NDArray[np.float64], a: int, b: int) -> float:
    """Exact integral of the piecewise-linear signal through (t, w) over [a, b]."""
    inside = (t_ns > a) & (t_ns < b)
    tt = np.concatenate(([a], t_ns[inside], [b])).astype(np.float64)
    ww = np.concatenate(([np.interp(a, t_ns, w)], w[inside], [np.interp(b, t_ns, w)]))
    return float(np.trapezoid(ww, tt) * 1e-9)


def _split(p: PowerBatch, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
           window: tuple[int, int]) -> tuple[float, float]:
    w = p.power_mw / 1000.0
    total = _energy_j(p.t_ns, w, *window)
    kernels = sum(_energy_j(p.t_ns, w, int(a), int(b)) for a, b in zip(starts, ends, strict=True))
    return total, kernels


@pytest.fixture(scope="module")
def meter() -> PowerBatch:
    return load_pmd(RUN / "PMD_data.bin", RUN / "PMD_start_ts.txt")


def test_edges() -> None:
    starts, ends = load_edges(RUN / "timestamps.csv")
    assert len(starts) == len(ends) == 80  # README: 80 kernels
    dur_ms = (ends - starts) / 1e6
    gap_ms = (starts[1:] - ends[:-1]) / 1e6
    assert np.all((dur_ms > 45) & (dur_ms < 60))  # about 50 ms each
    assert np.all((gap_ms > 45) & (gap_ms < 60))  # about 50 ms idle between
    lo, hi = load_window(RUN / "timestamps.csv")
    assert lo == starts[0] and hi > ends[-1]  # 161 unique edges: a trailing idle edge
    assert 7.9 < (hi - lo) / 1e9 < 8.1  # README: 8.0 s


def test_meter_decoding_shape(meter: PowerBatch) -> None:
    n = (RUN / "PMD_data.bin").stat().st_size // 18
    assert len(meter) == n
    assert np.all(meter.field == PowerField.METER) and meter.fresh.all()
    start_us = int((RUN / "PMD_start_ts.txt").read_text())
    assert meter.t_ns[0] == (start_us - 50_000) * 1000
    dt_us = np.diff(meter.t_ns) / 1e3
    assert np.all(dt_us > 0)  # tick wraps unrolled
    assert 4.5e3 < 1e6 / np.median(dt_us) < 5.3e3  # about 4.9 kHz
    w = meter.power_mw / 1000.0
    lo, _hi = load_window(RUN / "timestamps.csv")
    idle = w[meter.t_ns < lo]
    assert 100 < np.median(idle) < 160  # idle 3090 board, before the first kernel


def test_meter_reproduces_reference_energies(meter: PowerBatch) -> None:
    starts, ends = load_edges(RUN / "timestamps.csv")
    total, kernels = _split(meter, starts, ends, load_window(RUN / "timestamps.csv"))
    assert total == pytest.approx(2389, rel=0.01)  # README: 2389 J for the window
    assert kernels == pytest.approx(1697, rel=0.01)  # README: 1697 J inside the kernels


@pytest.mark.parametrize(("field", "window_err", "kernel_err"), [
    (PowerField.DRAW, -9.2, -36.6), (PowerField.INSTANT, -5.8, -34.3),
])
def test_nvidia_smi_error_against_meter(meter: PowerBatch, field: PowerField,
                                        window_err: float, kernel_err: float) -> None:
    """Naive trapezoid over all polls (fresh and repeated) gives the README's errors."""
    starts, ends = load_edges(RUN / "timestamps.csv")
    window = load_window(RUN / "timestamps.csv")
    ref_total, ref_kernels = _split(meter, starts, ends, window)
    smi = load_smi_csv(RUN / "gpudata.csv", tz="+01:00")
    total, kernels = _split(smi.power.take(smi.power.field == field), starts, ends, window)
    assert 100 * (total / ref_total - 1) == pytest.approx(window_err, abs=0.5)
    assert 100 * (kernels / ref_kernels - 1) == pytest.approx(kernel_err, abs=0.5)


def test_decode_synthetic_records() -> None:
    def rec(tick: int, ch: list[int]) -> bytes:
        return struct.pack("<9H", tick, *[(c << 4) & 0xFFFF for c in ch])

    # sample 1: V1 raw 1000, I1 raw 500; V2 raw with bit 11 set (→ 0); c5/c6 and c7/c8 used
    raw = (rec(65000, [0] * 8)
           + rec(65000 + 2934 - 65536 + 1, [1000, 500, 0x900, 300, 1600, 100, 1585, 50])
           + rec(65000 + 2935 - 65536 + 29345, [0] * 8))
    t_ns, w = decode_pmd(raw, start_us=1_000_000)
    assert t_ns[0] == (1_000_000 - 50_000) * 1000
    assert t_ns[1] - t_ns[0] == round(2935 / 2934.5 * 1e6)  # one wrap added
    assert t_ns[2] - t_ns[0] == round((2935 + 29345) / 2934.5 * 1e6)
    expect = (1000 * 0.007568 * 500 * 0.0488  # V1·I1
              + 0.0                           # V2 zeroed by bit 11
              + 1585 * 0.007568 * 50 * 0.0488  # V4·I4
              + (1600 * 0.0075) * (100 * 0.0488))  # (c5·0.0075)·(c6·0.0488)
    assert w[1] == pytest.approx(expect)
    assert w[0] == 0 and w[2] == 0


def test_bad_inputs(tmp_path: Path) -> None:
    short = tmp_path / "PMD_data.bin"
    short.write_bytes(b"\x00" * 10)
    ts = tmp_path / "PMD_start_ts.txt"
    ts.write_text("1688840907467245\n")
    with pytest.raises(InputError, match="shorter than 18"):
        load_pmd(short, ts)
    ts.write_text("soon")
    with pytest.raises(InputError, match="integer"):
        load_pmd(RUN / "PMD_data.bin", ts)
    with pytest.raises(InputError, match="cannot read"):
        load_pmd(tmp_path / "none.bin", RUN / "PMD_start_ts.txt")
    edges = tmp_path / "timestamps.csv"
    edges.write_text("timestamp\n12\n")
    with pytest.raises(InputError, match="fewer than two"):
        load_edges(edges)
