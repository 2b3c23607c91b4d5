"""nvidia-smi CSV importer: real GPU_Power_Benchmark logs, header variants, garbage, zones."""

from __future__ import annotations

import csv
import datetime as dt
import warnings
import zoneinfo
from pathlib import Path

import numpy as np
import pytest

from attribution.model import PowerField
from ppwtop.errors import InputError
from ppwtop.importers import load_power
from ppwtop.importers.smi_csv import load_smi_csv

GPB = Path(__file__).parent / "data" / "gpu_power_benchmark" / "plotting" / "data"
RUN_3090 = GPB / "5050" / "3090"
A100_HEAD = GPB / "A100" / "find_pwr_update_freq" / "gpudata.head1000.csv"
ZEUS = Path(__file__).parent / "data" / "zeus" / "zeus_monitor" / "sample.csv"


def _epoch_ns(s: str, offset_h: float) -> int:
    naive = dt.datetime.strptime(s, "%Y/%m/%d %H:%M:%S.%f")
    aware = naive.replace(tzinfo=dt.timezone(dt.timedelta(hours=offset_h)))
    return round(aware.timestamp() * 1e6) * 1000


def _write(tmp_path: Path, text: str, name: str = "log.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_3090_three_fields_and_alignment_with_kernel_edges() -> None:
    t = load_smi_csv(RUN_3090 / "gpudata.csv", tz="+01:00")
    with (RUN_3090 / "gpudata.csv").open() as f:
        rows = list(csv.reader(f, skipinitialspace=True))[1:]
    n = len(rows)
    assert n == 1690
    counts = np.bincount(t.power.field, minlength=3)
    assert counts.tolist() == [n, n, n]  # draw, average, instant
    draw = t.power.take(t.power.field == PowerField.DRAW)
    assert draw.t_ns[0] == _epoch_ns(rows[0][0], 1.0)
    assert draw.power_mw[0] == 126960 and draw.power_mw[-1] == round(float(rows[-1][5]) * 1000)
    inst = t.power.take(t.power.field == PowerField.INSTANT)
    assert inst.power_mw[0] == 126800
    # kernel edges are UTC µs; after the +01:00 conversion the first one is inside the log
    edges_us = np.unique(np.loadtxt(RUN_3090 / "timestamps.csv", skiprows=1, dtype=np.int64))
    e0 = int(edges_us[0]) * 1000
    assert draw.t_ns.min() < e0 < draw.t_ns.max()
    assert draw.t_ns.min() < int(edges_us[-1]) * 1000 < draw.t_ns.max()
    # read as if UTC, the log lies an hour late: the kernels would fall before it
    t_utc = load_smi_csv(RUN_3090 / "gpudata.csv", tz="UTC")
    assert int(t_utc.power.t_ns.min()) - int(t.power.t_ns.min()) == 3_600_000_000_000
    assert int(edges_us[-1]) * 1000 < t_utc.power.t_ns.min()
    # clocks: SM clock and temperature present, memory clock not logged
    assert len(t.clocks) == n
    assert t.clocks.sm_mhz[0] == 1800 and t.clocks.temp_c[0] == 54.0
    assert np.all(t.clocks.mem_mhz == -1)
    assert t.meta["skipped_rows"] == 0
    assert t.devices == []  # no name column


def test_fresh_flag_matches_value_changes_a100() -> None:
    t = load_smi_csv(A100_HEAD, tz="+01:00")
    with A100_HEAD.open() as f:
        rows = list(csv.reader(f, skipinitialspace=True))[1:]
    assert len(rows) == 1000
    for col, fld in ((5, PowerField.DRAW), (6, PowerField.INSTANT)):
        vals = [r[col] for r in rows]
        expect = [True] + [a != b for a, b in zip(vals[1:], vals[:-1], strict=True)]
        got = t.power.take(t.power.field == fld)
        assert len(got) == 1000
        assert got.fresh.tolist() == expect
    # the A100 publishes ~every 100 ms and is polled ~every 12 ms: most polls repeat
    draw = t.power.take(t.power.field == PowerField.DRAW)
    assert 0.03 < draw.fresh.mean() < 0.5


def test_units_and_nounits_give_the_same_rows(tmp_path: Path) -> None:
    units = _write(tmp_path, (
        "timestamp, index, power.draw [W], clocks.current.sm [MHz], temperature.gpu\n"
        "2024/01/10 12:00:00.000, 0, 100.50 W, 1410 MHz, 40\n"
        "2024/01/10 12:00:00.100, 0, 101.25 W, 1410 MHz, 41\n"), "u.csv")
    nounits = _write(tmp_path, (
        "timestamp, index, power.draw [W], clocks.current.sm [MHz], temperature.gpu\n"
        "2024/01/10 12:00:00.000, 0, 100.50, 1410, 40\n"
        "2024/01/10 12:00:00.100, 0, 101.25, 1410, 41\n"), "n.csv")
    a, b = load_smi_csv(units, tz="UTC"), load_smi_csv(nounits, tz="UTC")
    assert a.power.power_mw.tolist() == b.power.power_mw.tolist() == [100500, 101250]
    assert a.power.t_ns.tolist() == b.power.t_ns.tolist()
    assert a.power.t_ns[0] == int(dt.datetime(2024, 1, 10, 12, tzinfo=dt.UTC).timestamp()) * 10**9
    assert a.clocks.sm_mhz.tolist() == [1410, 1410]


def test_column_order_and_multi_gpu(tmp_path: Path) -> None:
    p = _write(tmp_path, (
        "power.draw.instant [W],name,pstate,index,timestamp,clocks_event_reasons.active,"
        "power.draw.average [W]\n"
        "250.0,NVIDIA H100 80GB HBM3,P0,0,2024/01/10 12:00:00.000,0x0000000000000004,240.0\n"
        "90.0,NVIDIA A100-SXM4-40GB,P0,1,2024/01/10 12:00:00.000,0x0000000000000001,[N/A]\n"
        "250.0,NVIDIA H100 80GB HBM3,P0,0,2024/01/10 12:00:00.050,0x0000000000000000,241.0\n"))
    t = load_smi_csv(p, tz="UTC")
    inst = t.power.take(t.power.field == PowerField.INSTANT)
    avg = t.power.take(t.power.field == PowerField.AVERAGE)
    assert inst.device.tolist() == [0, 1, 0] and inst.power_mw.tolist() == [250000, 90000, 250000]
    assert inst.fresh.tolist() == [True, True, False]  # device 0 repeated; device 1 is new
    assert avg.power_mw.tolist() == [240000, 241000]  # [N/A] is missing, not a row
    assert not (t.power.field == PowerField.DRAW).any()
    assert [(d.index, d.name) for d in t.devices] == [
        (0, "NVIDIA H100 80GB HBM3"), (1, "NVIDIA A100-SXM4-40GB")]
    assert t.clocks.clock_reasons.tolist() == [4, 1, 0]
    assert t.meta["skipped_rows"] == 0


def test_garbage_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    p = _write(tmp_path, (
        "timestamp, power.draw [W], temperature.gpu\n"
        "2024/01/10 12:00:00.000, 100.0, 40\n"
        "not a time, 100.0, 40\n"                       # bad timestamp
        "2024/01/10 12:00:00.010, lots, 40\n"           # bad value
        "2024/01/10 12:00:00.020, 100.0\n"              # wrong column count
        "timestamp, power.draw [W], temperature.gpu\n"  # repeated header
        "2024/01/10 12:00:00.030, [Not Supported], 40\n"  # missing, row kept for clocks
        "2024/01/10 12:00:00.040, 100.0, 41\n"))
    t = load_smi_csv(p, tz="UTC")
    assert t.meta["skipped_rows"] == 4
    assert any("skipped 4" in n for n in t.meta["notes"])
    assert len(t.power) == 2 and t.power.fresh.tolist() == [True, False]
    assert len(t.clocks) == 3 and t.clocks.temp_c.tolist() == [40.0, 40.0, 41.0]


def test_rows_whose_gpu_index_is_no_small_integer_are_skipped(tmp_path: Path) -> None:
    # found by an audit: index 99999999999999999999 wrapped into the int16 device column (a
    # numpy warning and a GPU that does not exist); such rows are unparsable, like a bad value
    p = _write(tmp_path, (
        "timestamp, index, power.draw [W]\n"
        "2024/01/10 12:00:00.000, 0, 100.0\n"
        "2024/01/10 12:00:00.010, 99999999999999999999, 101.0\n"
        "2024/01/10 12:00:00.020, -1, 102.0\n"
        "2024/01/10 12:00:00.030, 1.5, 103.0\n"
        "2024/01/10 12:00:00.040, 1, 104.0\n"
        "2024/01/10 12:00:00.050, , 105.0\n"))  # empty index: GPU 0, as before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = load_smi_csv(p, tz="UTC")
    assert t.meta["skipped_rows"] == 3
    assert t.power.device.tolist() == [0, 1, 0]
    assert t.power.power_mw.tolist() == [100000, 104000, 105000]


def test_rows_with_a_value_no_board_reads_are_skipped(tmp_path: Path) -> None:
    # found by fuzzing: a clock-event mask wider than 64 bits raised OverflowError (an
    # internal error), and 1e30 W / inf W were cast into a wrapped int64 reading with a numpy
    # warning; a row whose power no board reads is unparsable, one whose clock or mask no
    # board reads keeps its power with that cell unknown (a later audit: one bad clock
    # column had voided every row of a log)
    p = _write(tmp_path, (
        "timestamp, power.draw [W], clocks.current.sm [MHz], clocks_event_reasons.active\n"
        "2024/01/10 12:00:00.000, 100.0, 1410, 0x0000000000000004\n"
        "2024/01/10 12:00:00.010, 101.0, 1410, 0x" + "f" * 17 + "\n"
        "2024/01/10 12:00:00.020, 102.0, 1410, -4\n"
        "2024/01/10 12:00:00.030, 1e30, 1410, 0x0\n"
        "2024/01/10 12:00:00.040, inf, 1410, 0x0\n"
        "2024/01/10 12:00:00.050, 105.0, 1e30, 0x0\n"
        "2024/01/10 12:00:00.060, 106.0, 1410, 0x0\n"
        "2024/01/10 12:00:00.070, inf, 1e30, -4\n"))  # skipped: its bad cells count there
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = load_smi_csv(p, tz="UTC")
    assert t.meta["skipped_rows"] == 3
    assert t.power.power_mw.tolist() == [100000, 101000, 102000, 105000, 106000]
    assert t.clocks.clock_reasons.tolist() == [4, 0, 0, 0, 0]
    assert t.clocks.sm_mhz.tolist() == [1410, 1410, 1410, -1, 1410]
    assert sorted(t.meta["notes"]) == [
        "1 unparsable cell(s) of column clocks.current.sm read as unknown",
        "2 unparsable cell(s) of column clocks_event_reasons.active read as unknown",
        "skipped 3 unparsable row(s) of 8"]


def test_negative_power_is_a_damaged_row(tmp_path: Path) -> None:
    """No board draws negative power: such a row is skipped like an unparsable one (the
    engine used to drop the readings silently, and a log of nothing else gave a snapshot of
    0 J whose warning said idle ran at the board's value); a log with no other row is an
    input error."""
    p = _write(tmp_path, (
        "timestamp, power.draw [W], clocks.current.sm [MHz]\n"
        "2024/01/10 12:00:00.000, 100.0, 1410\n"
        "2024/01/10 12:00:00.010, -5.0, 1410\n"
        "2024/01/10 12:00:00.020, 102.0, -1\n"))
    t = load_smi_csv(p, tz="UTC")
    assert t.meta["skipped_rows"] == 1
    assert t.power.power_mw.tolist() == [100000, 102000]  # a negative clock is not power
    q = _write(tmp_path, ("timestamp, power.draw [W]\n"
                          "2024/01/10 12:00:00.000, -5.0\n"
                          "2024/01/10 12:00:00.010, -6.0\n"))
    with pytest.raises(InputError, match="no parsable data row"):
        load_smi_csv(q, tz="UTC")


def test_a_row_the_csv_module_cannot_split_is_one_input_error(tmp_path: Path) -> None:
    # found by fuzzing: a field over csv's 128 KiB limit raised _csv.Error (an internal error)
    p = _write(tmp_path, SAMPLE + "9" * 131073 + "\n")
    with pytest.raises(InputError, match=r"log\.csv: not a readable CSV \(line 3: field "
                                         "larger than field limit"):
        load_smi_csv(p)


def test_unusable_files_are_input_errors(tmp_path: Path) -> None:
    no_power = _write(tmp_path, "timestamp, temperature.gpu\n2024/01/10 12:00:00.000, 40\n",
                      "a.csv")
    with pytest.raises(InputError, match="no power column"):
        load_smi_csv(no_power)
    all_bad = _write(tmp_path, "timestamp, power.draw [W]\nx, y\n", "b.csv")
    with pytest.raises(InputError, match="no parsable"):
        load_smi_csv(all_bad)
    with pytest.raises(InputError, match="empty"):
        load_smi_csv(_write(tmp_path, "", "c.csv"))
    with pytest.raises(InputError, match="no such file"):
        load_smi_csv(tmp_path / "missing.csv")
    with pytest.raises(InputError, match="time zone"):
        load_smi_csv(RUN_3090 / "gpudata.csv", tz="Mars/Olympus")


SAMPLE = "timestamp, power.draw [W]\n2023/07/08 19:28:27.236, 100.0\n"
EPOCH_UTC = int(dt.datetime(2023, 7, 8, 19, 28, 27, 236000, tzinfo=dt.UTC).timestamp() * 1e6)


@pytest.mark.parametrize(("tz", "offset_h"), [
    ("UTC", 0), ("+01:00", 1), ("Europe/London", 1), ("-0530", -5.5), ("UTC+2", 2),
    ("America/New_York", -4), ("Asia/Kolkata", 5.5),
])
def test_timezones(tmp_path: Path, tz: str, offset_h: float) -> None:
    t = load_smi_csv(_write(tmp_path, SAMPLE), tz=tz)
    assert int(t.power.t_ns[0]) == (EPOCH_UTC - round(offset_h * 3600e6)) * 1000


def test_tz_env_and_dst_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    t = load_smi_csv(_write(tmp_path, SAMPLE))
    assert int(t.power.t_ns[0]) == (EPOCH_UTC - 9 * 3_600_000_000) * 1000
    assert t.meta["timezone"] == "Asia/Tokyo"
    # London leaves BST at 02:00 local on 2023-10-29: 00:30 is +01:00, 03:30 is +00:00
    p = _write(tmp_path, "timestamp, power.draw [W]\n2023/10/29 00:30:00.000, 1\n"
                         "2023/10/29 03:30:00.000, 2\n", "dst.csv")
    t = load_smi_csv(p, tz="Europe/London")
    assert np.diff(t.power.t_ns).tolist() == [4 * 3_600_000_000_000]


@pytest.mark.parametrize(("zone", "day", "gpus"), [("America/New_York", "2026/11/01", 1),
                                                   ("Europe/London", "2026/10/25", 2)])
def test_a_log_through_the_autumn_change_keeps_its_hour_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str, day: str, gpus: int) -> None:
    """Clocks go back at 02:00: nvidia-smi writes 01:00-01:59 twice, in order.  The second
    pass used to be read as the first (the earlier offset), so two hours of readings were
    laid over one and an hour left empty after them; now the rows after the log went back
    take the later offset: one reading a second (per GPU) for three hours, in order.  The
    same through the system zone (TZ) as through --power-tz."""
    start = dt.datetime.strptime(day, "%Y/%m/%d").replace(hour=0, minute=30,
                                                         tzinfo=zoneinfo.ZoneInfo(zone))
    t0 = int(start.timestamp())
    rows = ["timestamp, index, power.draw [W]"]
    for k in range(3 * 3600):
        local = dt.datetime.fromtimestamp(t0 + k, zoneinfo.ZoneInfo(zone))
        for g in range(gpus):
            rows.append(f"{local:%Y/%m/%d %H:%M:%S}.000, {g}, {100 + k % 7}.0")
    path = _write(tmp_path, "\n".join(rows) + "\n")
    monkeypatch.setenv("TZ", zone)
    for tz in (zone, None):
        t = load_smi_csv(path, tz=tz)
        for g in range(gpus):
            got = t.power.t_ns[t.power.device == g]
            assert len(got) == 3 * 3600
            assert np.all(np.diff(got) == 1_000_000_000)
            assert int(got[0]) == t0 * 10**9


def test_a_log_that_starts_in_the_repeated_hour_reads_it_as_the_first_pass(
        tmp_path: Path) -> None:
    """With nothing before it in the file, a repeated local hour is the first of the two
    (the documented choice; the trace-overlap check corrects a whole-hour slip)."""
    p = _write(tmp_path, "timestamp, power.draw [W]\n2026/11/01 01:30:00.000, 1\n"
                         "2026/11/01 01:31:00.000, 2\n")
    t = load_smi_csv(p, tz="America/New_York")
    first = dt.datetime(2026, 11, 1, 1, 30, tzinfo=zoneinfo.ZoneInfo("America/New_York"))
    assert int(t.power.t_ns[0]) == int(first.timestamp()) * 10**9


def test_a_uuid_column_names_each_gpu(tmp_path: Path) -> None:
    """``--query-gpu=timestamp,index,uuid,power.draw``: each GPU's UUID is kept, for matching
    the log's GPUs to a trace's by UUID (docs/cli.md, ``--power-gpus``)."""
    p = _write(tmp_path, "timestamp, index, uuid, power.draw [W]\n"
                         "2024/01/10 12:00:00.000, 0, GPU-aaa, 100\n"
                         "2024/01/10 12:00:00.000, 3, GPU-bbb, 200\n")
    t = load_smi_csv(p, tz="UTC")
    assert [(d.index, d.uuid, d.name) for d in t.devices] == [(0, "GPU-aaa", ""),
                                                                (3, "GPU-bbb", "")]


def test_zeus_monitor_sample_mw() -> None:
    t = load_power(ZEUS, tz="UTC")
    assert t.meta["source_format"] == "zeus_csv"
    assert len(t.power) == 19
    assert t.power.power_mw[0] == 32402  # the file logs mW already
    assert t.power.t_ns[0] == int(
        dt.datetime(2022, 7, 13, 2, 7, 36, tzinfo=dt.UTC).timestamp()) * 10**9 + 708783111
    assert 32_000 < np.mean(t.power.power_mw) < 33_000  # idle GPU, about 32.4 W
    assert t.power.fresh.tolist()[:4] == [True, False, True, False]


def test_system_local_zone_when_no_tz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.delenv("TZ", raising=False)
    t = load_smi_csv(_write(tmp_path, SAMPLE))
    assert t.meta["timezone"] == "local"
    naive = dt.datetime(2023, 7, 8, 19, 28, 27)
    expect_ns = int(time.mktime(naive.timetuple())) * 10**9 + 236_000_000
    assert int(t.power.t_ns[0]) == expect_ns


def test_timestamps_past_what_int64_ns_holds_are_refused_not_wrapped(tmp_path: Path) -> None:
    head = "timestamp, power.draw [W]\n"
    far = _write(tmp_path, head + "2300/01/10 12:00:00.000, 100.5 W\n"
                 "2300/01/10 12:00:00.100, 101.5 W\n")
    with pytest.raises(InputError, match=r"2 timestamp\(s\) outside the years 1678-2261"):
        load_smi_csv(far, tz="UTC")  # before: read as about 1715, exit 0
    mixed = _write(tmp_path, head + "2300/01/10 12:00:00.000, 100.5 W\n"
                   "2024/01/10 12:00:00.100, 101.5 W\n", "mixed.csv")
    t = load_smi_csv(mixed, tz="UTC")
    assert t.power.t_ns.tolist() == [_epoch_ns("2024/01/10 12:00:00.100", 0)]
    assert t.meta["notes"] == ["skipped 1 unparsable row(s) of 2"]


def test_a_log_centuries_before_the_trace_does_not_read_as_overlapping() -> None:
    from ppwtop.cli.attribute import _overlap_ns

    win = (1_700_000_000_000_000_000, 1_700_000_010_000_000_000)
    t_1700 = np.array([-8_500_000_000_000_000_000, -8_499_000_000_000_000_000], np.int64)
    shifts = np.array([0, 3_600_000_000_000], np.int64)
    assert _overlap_ns(t_1700, win, shifts).tolist() == [0, 0]  # before: b - a wrapped > 0
    t_now = np.array([1_700_000_001_000_000_000, 1_700_000_002_000_000_000], np.int64)
    assert _overlap_ns(t_now, win, shifts).tolist() == [1_000_000_000, 0]


def test_a_byte_order_mark_and_gzip_are_read_through(tmp_path: Path) -> None:
    """A log saved by a Windows editor starts with a BOM ("no 'timestamp' column" before); a
    gzipped log was taken for a Kineto trace; a gzip that does not inflate says so."""
    import gzip

    text = ("timestamp, index, power.draw [W]\n"
            "2024/01/10 12:00:00.000, 0, 100.50 W\n"
            "2024/01/10 12:00:00.100, 0, 101.25 W\n")
    plain = load_power(_write(tmp_path, text, "plain.csv"), tz="UTC")
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    packed = tmp_path / "log.csv.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    for p in (bom, packed):
        got = load_power(p, tz="UTC")
        assert got.power.power_mw.tolist() == plain.power.power_mw.tolist() == [100500, 101250]
        assert got.power.t_ns.tolist() == plain.power.t_ns.tolist()
    broken = tmp_path / "broken.csv.gz"
    broken.write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    with pytest.raises(InputError, match="corrupt gzip"):
        load_power(broken)


@pytest.mark.parametrize("tz", ["America/New_York", "UTC", "Asia/Kolkata"])
def test_stamps_with_their_own_utc_offset_ignore_the_zone(
        tmp_path: Path, tz: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ISO 8601 stamps with an offset: numpy took them as UTC (with a warning on stderr) and
    the local zone was applied on top, 5 h off under New York time (an audit)."""
    monkeypatch.setenv("TZ", tz)
    p = _write(tmp_path, "timestamp, index, power.draw [W]\n"
                         "2026-01-15T09:59:59.311+00:00, 0, 100.0\n"
                         "2026-01-15T11:00:00.311+01:00, 0, 110.0\n"
                         "2026-01-15T10:00:01.311Z, 0, 120.0\n"
                         "2026-01-15T04:30:02.311-0530, 0, 130.0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy UserWarning
        t = load_smi_csv(p)
    want = np.datetime64("2026-01-15T09:59:59.311", "ns").astype(np.int64)
    assert t.power.t_ns.tolist() == [want + i * 1_000_000_000 for i in range(4)]
    assert t.meta["timezone"] == "the timestamps' own UTC offsets"


def test_a_log_mixing_offset_and_naive_stamps_applies_the_zone_to_the_naive_ones(
        tmp_path: Path) -> None:
    p = _write(tmp_path, "timestamp, power.draw [W]\n"
                         "2026-01-15 10:00:00.000+02:00, 100.0\n"
                         "2026-01-15 09:00:01.000, 110.0\n")
    t = load_smi_csv(p, tz="+01:00")
    assert int(t.power.t_ns[1] - t.power.t_ns[0]) == 1_000_000_000
    assert "own UTC offsets where they carry one" in t.meta["timezone"]


@pytest.mark.parametrize(("unit", "value", "watts"), [
    ("W", "71.5", 71.5), ("mW", "71500", 71.5), ("kW", "0.0715", 71.5)])
def test_the_power_unit_in_the_header_is_read(tmp_path: Path, unit: str, value: str,
                                              watts: float) -> None:
    """``power.draw [mW]`` was read as W: 71 500 W per reading, every one then dropped as
    over any board's 5 kW (an audit)."""
    p = _write(tmp_path, f"timestamp, power.draw [{unit}]\n2026-01-15 10:00:00.000, {value}\n"
                         f"2026-01-15 10:00:01.000, {value}\n")
    assert load_smi_csv(p, tz="UTC").power.power_mw.tolist() == [round(watts * 1000)] * 2
    q = _write(tmp_path, f"timestamp, power.draw\n2026-01-15 10:00:00.000, {value} {unit}\n"
                         "2026-01-15 10:00:01.000, [Not Supported]\n", name="cells.csv")
    assert load_smi_csv(q, tz="UTC").power.power_mw.tolist()[:1] == [round(watts * 1000)]


def test_a_power_column_in_another_unit_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, "timestamp, power.draw [%]\n2026-01-15 10:00:00.000, 50\n")
    with pytest.raises(InputError, match=r"is in '%', not W, mW or kW"):
        load_smi_csv(p, tz="UTC")
