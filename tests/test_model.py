"""The columnar data model: validation, concat, selection, shift, string interning, merge."""

from __future__ import annotations

import numpy as np
import pytest

from attribution.model import UNKNOWN_NAME, KernelBatch, PowerBatch, StringTable, Trace


def test_from_columns_fills_unknowns_and_casts() -> None:
    k = KernelBatch.from_columns({"start_ns": [10, 20], "end_ns": [15, 30], "name_id": [0, 1]})
    assert k.start_ns.dtype == np.int64
    assert k.device.tolist() == [-1, -1]
    assert len(k) == 2


def test_unequal_lengths_rejected() -> None:
    with pytest.raises(ValueError, match="rows"):
        PowerBatch(t_ns=np.zeros(2, np.int64), power_mw=np.zeros(3, np.int64),
                   device=np.zeros(2, np.int16), field=np.zeros(2, np.uint8),
                   fresh=np.ones(2, bool))


def test_concat_sort_shift() -> None:
    a = KernelBatch.from_columns({"start_ns": [30, 10], "end_ns": [40, 20]})
    b = KernelBatch.concat([a, KernelBatch.empty(), a])
    assert len(b) == 4
    s = b.sorted_by()
    assert s.start_ns.tolist() == [10, 10, 30, 30]
    assert s.shifted(5).end_ns.tolist() == [25, 25, 45, 45]


def test_merge_reinterns_names() -> None:
    t1 = Trace(strings=StringTable(["gemm"]))
    t1.kernels = KernelBatch.from_columns({"start_ns": [1], "end_ns": [2], "name_id": [0]})
    t2 = Trace(strings=StringTable(["relu", "gemm"]))
    t2.kernels = KernelBatch.from_columns(
        {"start_ns": [3, 4], "end_ns": [4, 5], "name_id": [0, 1]})
    m = t1.merged_with(t2)
    assert [m.name(int(i)) for i in m.kernels.name_id] == ["gemm", "relu", "gemm"]
    assert m.gpu_span_ns() == (1, 5)


def test_empty_batches_are_shared_per_class_and_typed() -> None:
    """``empty()`` hands out one zero-row instance per class (a Trace takes eight): typed
    columns, a different instance per class, and building on it leaves it empty."""
    a, b = Trace(), Trace()
    assert a.kernels is b.kernels is KernelBatch.empty()
    kernels: object = a.kernels  # another class's instance: compared by identity only
    assert PowerBatch.empty() is a.power and PowerBatch.empty() is not kernels
    for name, dtype in KernelBatch.DTYPES.items():
        col = getattr(a.kernels, name)
        assert col.dtype == dtype and col.shape == (0,)
    grown = KernelBatch.concat([a.kernels, KernelBatch.from_columns({"start_ns": [1],
                                                                     "end_ns": [2]})])
    assert len(grown) == 1 and len(KernelBatch.empty()) == 0


def test_a_name_id_outside_the_table_is_never_another_name() -> None:
    # found by fuzzing: a damaged recording's -1 ids read as the table's last name
    t = Trace(strings=StringTable(["a", "b"]))
    assert [t.name(i) for i in (0, 1, 2, -1, 2**32 - 1)] == ["a", "b"] + [UNKNOWN_NAME] * 3
    with pytest.raises(IndexError):
        t.strings[-1]
