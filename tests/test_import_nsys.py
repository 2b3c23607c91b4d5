"""Nsight Systems SQLite importer on the two real pipit exports (schemas 3.13.2 and 2.9.1)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from attribution.model import ApiKind, CopyKind, MarkerKind, MemKind, Trace
from ppwtop.errors import InputError
from ppwtop.importers import load_trace, sniff
from ppwtop.importers.nsys import load_nsys

DATA = Path(__file__).parent / "data" / "pipit_nsys" / "pipit" / "tests" / "data"
CLOVER = DATA / "cloverleaf-nsys" / "perlmutter-cloverleaf-cuda.sqlite"
SAXPY = DATA / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


def _sql(path: Path, query: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def clover() -> Trace:
    return load_nsys(CLOVER)


@pytest.fixture(scope="module")
def saxpy() -> Trace:
    return load_nsys(SAXPY)


def test_cloverleaf_counts_match_readme_and_sql(clover: Trace) -> None:
    n_k = _sql(CLOVER, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    n_c, b_c = _sql(CLOVER, "SELECT COUNT(*), SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0]
    n_r = _sql(CLOVER, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    assert (len(clover.kernels), len(clover.copies), len(clover.apis)) == (n_k, n_c, n_r)
    assert (n_k, n_c, n_r) == (1312, 279, 3048)  # README §5
    assert int(clover.copies.bytes.sum()) == b_c
    assert 224e6 < b_c < 226e6  # "225 MB"
    assert len(clover.memsets) == 0 and len(clover.markers) == 0  # tables absent
    assert clover.meta["nsys_schema_version"] == "3.13.2"


def test_cloverleaf_times_are_epoch_ns(clover: Trace) -> None:
    base = int(str(_sql(CLOVER, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]))
    lo, hi = (int(str(v)) for v in
              _sql(CLOVER, "SELECT MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0])
    assert int(clover.kernels.start_ns.min()) == base + lo
    assert int(clover.kernels.end_ns.max()) == base + hi
    span_ms = (clover.kernels.end_ns.max() - clover.kernels.start_ns.min()) / 1e6
    assert 341.5 < span_ms < 343  # README: 342 ms of kernel span
    # 2023-10-04 (capture date in TARGET_INFO_SESSION_START_TIME.utcTime)
    assert str(np.datetime64(int(clover.kernels.start_ns[0]), "ns"))[:10] == "2023-10-04"
    assert np.all(clover.kernels.end_ns >= clover.kernels.start_ns)


def test_cloverleaf_devices_and_names(clover: Trace) -> None:
    assert [d.index for d in clover.devices] == [0, 1, 2, 3]
    d0 = clover.devices[0]
    assert d0.name == "NVIDIA A100-SXM4-80GB" and d0.sm_count == 108
    assert d0.total_memory_bytes == 84990623744 and d0.compute_capability == "8.0"
    assert set(clover.kernels.device.tolist()) == {0}
    demangled = {r[0] for r in _sql(
        CLOVER, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.demangledName")}
    got = {clover.name(int(i)) for i in np.unique(clover.kernels.name_id)}
    assert got == demangled and len(got) == 102


def test_cloverleaf_copy_and_api_kinds(clover: Trace) -> None:
    # ENUM_CUDA_MEMCPY_OPER: 1 = HtoD, 2 = DtoH.  ENUM_CUDA_MEM_KIND: 0 pageable, 2 device.
    n_htod = _sql(CLOVER, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind=1")
    htod = clover.copies.kind == CopyKind.HTOD
    assert int(htod.sum()) == n_htod[0][0] == 254
    assert int((clover.copies.kind == CopyKind.DTOH).sum()) == 25
    assert np.all(clover.copies.src_mem[htod] == MemKind.PAGEABLE)
    assert np.all(clover.copies.dst_mem[htod] == MemKind.DEVICE)
    assert np.all(clover.copies.src_mem[~htod] == MemKind.DEVICE)
    kinds = np.bincount(clover.apis.kind, minlength=6)
    assert kinds[ApiKind.LAUNCH] == 1312 and kinds[ApiKind.SYNC] == 1312
    assert kinds[ApiKind.MEMCPY] == 279 and kinds[ApiKind.ALLOC] == 68 + 76
    names = {clover.name(int(i)) for i in np.unique(clover.apis.name_id)}
    assert "cudaLaunchKernel" in names and "cudaLaunchKernel_v7000" not in names
    # every kernel's correlation id is one of a launch call's
    launch_corr = clover.apis.correlation[clover.apis.kind == ApiKind.LAUNCH]
    assert np.isin(clover.kernels.correlation, launch_corr).all()


def test_saxpy_counts_old_schema(saxpy: Trace) -> None:
    assert saxpy.meta["nsys_schema_version"] == "2.9.1"
    assert len(saxpy.kernels) == 5 and len(saxpy.copies) == 15
    total = _sql(SAXPY, "SELECT SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]
    assert int(saxpy.copies.bytes.sum()) == total == 3_932_160_000  # "3.9 GB"
    assert saxpy.name(int(saxpy.kernels.name_id[0])) == (
        "saxpy(double *, double *, double *, double, int)")
    assert saxpy.devices[0].name == "NVIDIA A100-SXM4-40GB"
    assert len(saxpy.memsets) == 0  # table present but empty
    copy_ms = (saxpy.copies.end_ns - saxpy.copies.start_ns).sum() / 1e6
    assert 284 < copy_ms < 286  # README: 285 ms of memcpy


def test_saxpy_nvtx_ranges(saxpy: Trace) -> None:
    # The table has 24 rows (README's "24 NVTX ranges"); 2 of them are not ranges
    # (a NvtxDomainCreate and a NvtxThread name, both without an end).
    rows = _sql(SAXPY, "SELECT COUNT(*), SUM(end IS NOT NULL) FROM NVTX_EVENTS")[0]
    assert rows == (24, 22)
    assert len(saxpy.markers) == 22
    assert np.all(saxpy.markers.kind == MarkerKind.NVTX)
    names = [saxpy.name(int(i)) for i in saxpy.markers.name_id]
    assert names.count("saxpy") == 5  # inline text
    assert "MPI_Init" in names and "MPI_Send" in names  # via textId → StringIds
    assert "" not in names
    assert np.all(saxpy.markers.tid == 1230493)  # globalTid low 24 bits


def test_saxpy_backtrace_duplicates_dropped(saxpy: Trace) -> None:
    n_all, n_bt = _sql(SAXPY, "SELECT COUNT(*), SUM(eventClass = 67) "
                              "FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0]
    assert (n_all, n_bt) == (95, 38)
    assert len(saxpy.apis) == 57
    assert int((saxpy.apis.kind == ApiKind.LAUNCH).sum()) == 5
    assert int((saxpy.apis.kind == ApiKind.MEMCPY).sum()) == 15
    assert np.all(saxpy.apis.pid == 1230493)


def test_dispatch_via_load_trace() -> None:
    assert sniff(SAXPY) == "nsys"
    assert len(load_trace(SAXPY).kernels) == 5


def test_non_nsys_sqlite_is_input_error(tmp_path: Path) -> None:
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE foo (x INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        load_nsys(p)


def test_corrupt_sqlite_is_input_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.sqlite"
    p.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(InputError):
        load_nsys(p)
    with pytest.raises(InputError):
        load_nsys(tmp_path / "missing.sqlite")


def test_minimal_export_with_missing_tables(tmp_path: Path) -> None:
    p = tmp_path / "mini.sqlite"
    con = sqlite3.connect(p)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        INSERT INTO StringIds VALUES (1, 'k_short'), (2, 'cudaMemsetAsync_v3020');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT,
            streamId INT, correlationId INT, shortName INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 5, 1);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT,
            correlationId INT, nameId INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (10, 20, NULL, 5, 2);
    """)
    con.commit()
    con.close()
    t = load_nsys(p)
    assert t.kernels.start_ns.tolist() == [100] and t.kernels.stream.tolist() == [7]
    assert t.name(int(t.kernels.name_id[0])) == "k_short"  # no demangledName column
    assert t.kernels.grid_x.tolist() == [-1]
    assert t.apis.kind.tolist() == [ApiKind.MEMSET] and t.apis.pid.tolist() == [-1]
    assert len(t.copies) == 0 and t.devices == []


@pytest.mark.parametrize(("sql", "where"), [
    ("UPDATE NVTX_EVENTS SET end = 'x'", r"NVTX_EVENTS\.end: not a 64-bit integer: 'x'"),
    ("UPDATE NVTX_EVENTS SET textId = 'x', text = NULL", r"NVTX_EVENTS\.textId: not an integer"),
    ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET deviceId = 'x'",
     r"CUPTI_ACTIVITY_KIND_MEMCPY\.deviceId: not a 64-bit integer: 'x'"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 99999999999999999999999",
     r"CUPTI_ACTIVITY_KIND_KERNEL\.start: not a 64-bit integer: 1e\+23"),
    ("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'x'",
     r"TARGET_INFO_SESSION_START_TIME\.utcEpochNs: not an integer: 'x'"),
    ("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 9223372036854775000",
     r"CUPTI_ACTIVITY_KIND_KERNEL\.start: times past the int64 ns range"),
])
def test_a_cell_that_is_no_integer_names_table_and_column(tmp_path: Path, sql: str,
                                                          where: str) -> None:
    # found by fuzzing: int('x') raised ValueError (an internal error) in three places
    p = tmp_path / "n.sqlite"
    p.write_bytes(SAXPY.read_bytes())
    con = sqlite3.connect(p)
    con.execute(sql)
    con.commit()
    con.close()
    with pytest.raises(InputError, match=r"n\.sqlite: " + where):
        load_nsys(p)


