"""The engine's per-record bookkeeping outside the sweeps gives exactly what the plain forms
gave.

Each rewritten pass -- the device's items and their classes, the regressor units and their
ranking, the per-class and group × class times, the items' energies and their scatter back to
the trace's rows, the rows' per-class sums, the idle rows' sums, the steps' busy time, the
bootstrap's replicates -- is compared here, on random inputs built to hit the awkward cases
(several devices, a device holding every row or none, name ids few, many, negative or sparse,
labels shared by two ids, clamped kernels and copies, more classes than regressors, items
clipped by the window, zero-length and reversed items, huge durations, gaps of other devices or
no cause), against the plain implementation it replaced, kept in this file as the reference.
Equality is bit for bit: the rewrites add the same values in the same order.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attribution.engine import build, rows
from attribution.engine.activity import (
    COPY,
    KERNEL,
    MEMSET,
    Items,
    _name,
    copy_memory_label,
    items_for_device,
)
from attribution.engine.build import (
    Arrays,
    DeviceResult,
    attribute_arrays,
    group_kinds,
    label_ranks,
    rank_units,
)
from attribution.idle import IdleIntervals
from attribution.intsets import unique_inverse
from attribution.model import (
    F64,
    I32,
    I64,
    B,
    CopyBatch,
    CopyKind,
    KernelBatch,
    MarkerBatch,
    MarkerKind,
    MemKind,
    MemsetBatch,
    Trace,
)
from attribution.precision import precision_of
from attribution.sim import simulate
from attribution.snapshot import IDLE_CAUSES, CopyRow, KernelRow, Steps
from attribution.steps import step_spans, step_stats, summarize

SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- the plain forms the engine used before (references) -------------------------------


def ref_items_for_device(trace: Trace, device: int) -> Items:
    k, c, m = trace.kernels, trace.copies, trace.memsets
    km, cm, mm = k.device == device, c.device == device, m.device == device
    k_rows, c_rows, m_rows = np.flatnonzero(km), np.flatnonzero(cm), np.flatnonzero(mm)
    k_sel = slice(None) if len(k_rows) == len(k) else k_rows
    labels: list[str] = []
    src: list[int] = []
    keys: list[tuple[str, str]] = []
    index: dict[str, int] = {}

    def add(label: str, source: int, key: tuple[str, str]) -> int:
        i = index.get(label)
        if i is None:
            i = len(labels)
            index[label] = i
            labels.append(label)
            src.append(source)
            keys.append(key)
        return i

    kid = k.name_id[k_sel]
    uk, kinv = unique_inverse(kid)
    names = [_name(trace, int(u)) for u in uk.tolist()]
    kmap = np.array([add("kernel:" + n, KERNEL, (n, "")) for n in names], dtype=np.int32)
    ckey = (c.kind[c_rows].astype(np.int64) * 64 + c.src_mem[c_rows].astype(np.int64) * 8
            + c.dst_mem[c_rows].astype(np.int64))
    uc, cinv = unique_inverse(ckey)
    cl: list[int] = []
    for u in uc:
        kv = int(u) // 64
        kind = CopyKind(kv).label if kv in CopyKind._value2member_map_ else "other"
        mem = copy_memory_label((int(u) // 8) % 8, int(u) % 8)
        cl.append(add(f"copy:{kind}/{mem}", COPY, (kind, mem)))
    cmap = np.array(cl, dtype=np.int32)
    mkey = m.mem[m_rows].astype(np.int64)
    um, minv = unique_inverse(mkey)
    ml: list[int] = []
    for u in um:
        mem = MemKind(int(u)).label if int(u) in MemKind._value2member_map_ else "unknown"
        ml.append(add(f"copy:memset/{mem}", MEMSET, ("memset", mem)))
    mmap = np.array(ml, dtype=np.int32)
    cls = np.concatenate([kmap[kinv] if len(kmap) else np.empty(0, np.int32),
                          cmap[cinv] if len(cmap) else np.empty(0, np.int32),
                          mmap[minv] if len(mmap) else np.empty(0, np.int32)])
    return Items(
        device=device,
        start_ns=np.concatenate([k.start_ns[k_sel], c.start_ns[c_rows], m.start_ns[m_rows]]),
        end_ns=np.concatenate([k.end_ns[k_sel], c.end_ns[c_rows], m.end_ns[m_rows]]),
        source=np.concatenate([np.full(len(k_rows), KERNEL, np.int32),
                               np.full(len(c_rows), COPY, np.int32),
                               np.full(len(m_rows), MEMSET, np.int32)]),
        row=np.concatenate([k_rows, c_rows, m_rows]).astype(np.int64, copy=False),
        cls=cls.astype(np.int32, copy=False),
        labels=tuple(labels), class_source=tuple(src), class_key=tuple(keys))


def ref_unit_groups(items: Items, clamped: B) -> tuple[I32, I32, I32, int]:
    n_cls = len(items.labels)
    st_ = (clamped & (items.source == KERNEL)).astype(np.int64)
    unit = items.cls.astype(np.int64) * 2 + st_
    t = np.asarray(np.bincount(unit, weights=items.duration_ns.astype(np.float64),
                               minlength=2 * n_cls), np.float64)
    present = np.bincount(unit, minlength=2 * n_cls) > 0
    order, group_of_unit, n_groups = rank_units(t, np.repeat(label_ranks(items.labels), 2),
                                                np.arange(2 * n_cls) % 2 == 1, present)
    class_group = np.where(group_of_unit[0::2] >= 0, group_of_unit[0::2], group_of_unit[1::2])
    kind = group_kinds(order, group_of_unit, n_groups,
                       2 * np.asarray(items.class_source)[order // 2] + order % 2)
    item_group = group_of_unit[unit] if len(items) else np.empty(0, np.int32)
    return (item_group, class_group.astype(np.int32), kind, n_groups)


def ref_class_times(items: Items, s_ns: I64, e_ns: I64, item_group: I32, n_groups: int
                    ) -> tuple[F64, F64]:
    n_cls = len(items.labels)
    dur_s = (e_ns - s_ns).astype(np.float64) * 1e-9
    g_c_time = np.bincount(item_group.astype(np.int64) * max(n_cls, 1) + items.cls,
                           weights=dur_s, minlength=n_groups * n_cls
                           ).astype(np.float64, copy=False).reshape(n_groups, n_cls)
    return dur_s, g_c_time


def ref_item_energies(dp: F64, item_group: I32, dur_s: F64, p_idle: float, share: F64
                      ) -> tuple[F64, F64]:
    item_dyn = np.asarray(dp, np.float64)[item_group] * dur_s if len(item_group) else np.zeros(0)
    return item_dyn, item_dyn + p_idle * share


def ref_record_energies(trace: Trace, results: tuple[DeviceResult, ...]
                        ) -> dict[int, tuple[F64, F64]]:
    out: dict[int, tuple[F64, F64]] = {}
    for src, batch in ((0, trace.kernels), (1, trace.copies), (2, trace.memsets)):
        dyn = np.zeros(len(batch))
        full = np.zeros(len(batch))
        for r in results:
            a, b = np.searchsorted(r.items.source, [src, src + 1])
            if b - a == len(batch):
                dyn[:] = r.item_dynamic_j[a:b]
                full[:] = r.item_energy_j[a:b]
            else:
                dyn[r.items.row[a:b]] = r.item_dynamic_j[a:b]
                full[r.items.row[a:b]] = r.item_energy_j[a:b]
        out[src] = (dyn, full)
    return out


def ref_kernel_copy_rows(trace: Trace, r: DeviceResult) -> tuple[list[KernelRow], list[CopyRow]]:
    it = r.items
    n_cls = len(it.labels)
    dur_s = it.duration_ns.astype(np.float64) * 1e-9
    calls = np.bincount(it.cls, minlength=n_cls)
    time_s = np.bincount(it.cls, weights=dur_s, minlength=n_cls)
    energy = np.bincount(it.cls, weights=r.item_energy_j, minlength=n_cls)
    nbytes = np.zeros(n_cls, np.int64)
    for src, batch in ((COPY, trace.copies), (MEMSET, trace.memsets)):
        m = it.source == src
        if bool(m.any()):
            nbytes += np.bincount(it.cls[m], weights=batch.bytes[it.row[m]].astype(np.float64),
                                  minlength=n_cls).astype(np.int64)
    kernels: list[KernelRow] = []
    copies: list[CopyRow] = []
    for c in range(n_cls):
        ci = (float(r.class_ci_j[c, 0]), float(r.class_ci_j[c, 1]))
        t = float(time_s[c])
        if it.class_source[c] == KERNEL:
            name = it.class_key[c][0]
            kernels.append(KernelRow(
                name=name, gpu=r.device, calls=int(calls[c]), time_s=t,
                energy_j=float(energy[c]), dynamic_energy_j=float(r.class_dynamic_j[c]),
                dynamic_energy_ci_j=ci, avg_power_w=float(energy[c]) / t if t > 0 else 0.0,
                resolvable=r.class_resolvable[c], precision=precision_of(name),
                cluster=r.class_cluster[c], why=r.class_why[c]))
        else:
            kind, mem = it.class_key[c]
            copies.append(CopyRow(
                kind=kind, memory=mem, gpu=r.device, calls=int(calls[c]), bytes=int(nbytes[c]),
                time_s=t, energy_j=float(energy[c]), dynamic_energy_j=float(r.class_dynamic_j[c]),
                dynamic_energy_ci_j=ci, resolvable=r.class_resolvable[c], why=r.class_why[c]))
    return kernels, copies


def ref_idle_rows(arrays: Arrays) -> dict[tuple[int, int], tuple[float, float, int]]:
    idle = arrays.idle
    causes = len(IDLE_CAUSES)
    dev_ix = {r.device: i for i, r in enumerate(arrays.devices)}
    if len(dev_ix) == 1:
        slot = np.where(idle.device == arrays.devices[0].device, 0, 1)
    else:
        lut = np.full(1 << 16, len(dev_ix), np.int64)
        for d, i in dev_ix.items():
            lut[d & 0xFFFF] = i
        slot = lut[idle.device.astype(np.int64) & 0xFFFF]
    key = np.where(idle.cause < causes, slot * causes + idle.cause, (len(dev_ix) + 1) * causes)
    n_keys = (len(dev_ix) + 1) * causes + 1
    by_key = np.argsort(key.astype(np.uint8 if n_keys <= 256 else np.int64), kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(key, minlength=n_keys))]
    dur_ns = idle.duration_ns
    out: dict[tuple[int, int], tuple[float, float, int]] = {}
    for r in arrays.devices:
        for ci in range(causes):
            j = dev_ix[r.device] * causes + ci
            m = by_key[bounds[j]:bounds[j + 1]]
            out[r.device, ci] = (float(dur_ns[m].sum()) * 1e-9,
                                 float(arrays.idle_energy_j[m].sum()), len(m))
    return out


def ref_step_stats(trace: Trace, arrays: Arrays) -> Steps | None:
    s, e, items, source = step_spans(trace, None, [])
    m = (e > s) & (s >= arrays.window_start_ns) & (e <= arrays.window_end_ns)
    if not bool(m.any()):
        return None
    s, e, items = s[m], e[m], items[m]
    dur_s = (e - s).astype(np.float64) * 1e-9
    energy = np.zeros(len(s))
    for r in arrays.devices:
        b = r.busy(np.concatenate([s, e]))
        busy = b[len(s):] - b[:len(s)]
        energy += r.p_idle_w * dur_s + busy @ r.group_dp_w
    return summarize(dur_s, energy, items, sla_ms=None, source=source)


# ---- exact comparison -------------------------------------------------------------------


def bits(x: Any) -> Any:
    """A form of ``x`` whose ``==`` is bit equality (floats by their bytes: -0.0 is not 0.0,
    NaN equals NaN of the same payload), through arrays, dataclasses and sequences."""
    if isinstance(x, np.ndarray):
        return (x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, float | np.floating):
        return np.float64(x).tobytes()
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__, *(bits(getattr(x, f.name)) for f in dataclasses.fields(x)))
    if isinstance(x, list | tuple):
        return tuple(bits(v) for v in x)
    if isinstance(x, dict):
        return {k: bits(v) for k, v in x.items()}
    if hasattr(x, "__len__") and hasattr(x, "__getitem__") and not isinstance(x, str):
        return tuple(bits(v) for v in x)  # FloatSeries and other sequences
    return x


def same_items(a: Items, b: Items) -> None:
    for f in ("start_ns", "end_ns", "source", "row", "cls"):
        assert bits(getattr(a, f)) == bits(getattr(b, f)), f
    assert (a.device, a.labels, a.class_source, a.class_key) == (
        b.device, b.labels, b.class_source, b.class_key)


# ---- random inputs ----------------------------------------------------------------------

T0 = 1_700_000_000_000_000_000
ID_MODES = ("one", "few", "many", "negative", "sparse", "out_of_table")


def _trace(seed: int, n: int, *, devices: int, ids: str, copies: bool, memsets: bool,
           one_device: bool) -> Trace:
    """Kernels (name ids per ``ids``), copies and memsets on ``devices`` GPUs (all on GPU 0
    when ``one_device``); zero-length, reversed and huge items among them."""
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 10**9, n))
    dur = rng.integers(0, 10**6, n)
    dur[rng.random(n) < 0.1] = 0
    dur[rng.random(n) < 0.02] = -rng.integers(1, 1000)  # end before start
    dur[rng.random(n) < 0.02] = 1 << 50  # sums past 2**53: float sums round
    end = start + dur
    dev = (np.zeros(n) if one_device else rng.integers(0, devices, n)).astype(np.int16)
    if ids == "one":
        name_id = np.full(n, 3)
    elif ids == "few":
        name_id = 2 + rng.integers(0, rng.integers(1, 13), n)
    elif ids == "many":  # more classes than regressors
        name_id = rng.integers(0, 45, n)
    elif ids == "negative":
        name_id = rng.integers(-2, 5, n)
    elif ids == "sparse":
        name_id = rng.choice(np.array([1, 7, 10**6, 10**8]), n)
    else:  # ids past the string table
        name_id = rng.integers(40, 70, n)
    n_k = n if not (copies or memsets) else n * 7 // 10
    n_c = (n - n_k) if not memsets else (n - n_k) // 2 if copies else 0
    kc = {"start_ns": T0 + start[:n_k], "end_ns": T0 + end[:n_k], "device": dev[:n_k],
          "name_id": name_id[:n_k].astype(np.int32)}
    sl = slice(n_k, n_k + n_c)
    cc = {"start_ns": T0 + start[sl], "end_ns": T0 + end[sl], "device": dev[sl],
          "kind": rng.integers(0, 7, n_c).astype(np.uint8),
          "src_mem": rng.integers(0, 7, n_c).astype(np.uint8),
          "dst_mem": rng.integers(0, 7, n_c).astype(np.uint8),
          "bytes": rng.integers(0, 1 << 30, n_c)}
    ms = slice(n_k + n_c, n)
    mc = {"start_ns": T0 + start[ms], "end_ns": T0 + end[ms], "device": dev[ms],
          "mem": rng.integers(0, 8, n - n_k - n_c).astype(np.uint8),
          "bytes": rng.integers(0, 1 << 30, n - n_k - n_c)}
    # a string table with a name twice (two ids, one label)
    strings = [f"k{i % 9}" for i in range(50)]
    return Trace(kernels=KernelBatch.from_columns(kc), copies=CopyBatch.from_columns(cc),
                 memsets=MemsetBatch.from_columns(mc), strings=strings)  # type: ignore[arg-type]


TRACES = st.tuples(st.integers(0, 10_000), st.integers(0, 600), st.integers(1, 3),
                   st.sampled_from(ID_MODES), st.booleans(), st.booleans(), st.booleans())


@SLOW
@given(TRACES)
def test_items_for_device_matches_the_plain_form(case: tuple[Any, ...]) -> None:
    seed, n, devices, ids, copies, memsets, one = case
    tr = _trace(seed, n, devices=devices, ids=ids, copies=copies, memsets=memsets,
                one_device=one)
    for d in range(devices + 1):  # the last: a device with nothing
        same_items(items_for_device(tr, d), ref_items_for_device(tr, d))


def test_items_for_device_reads_shared_labels_and_every_id_mode() -> None:
    for ids in ID_MODES:
        tr = _trace(4, 500, devices=1, ids=ids, copies=True, memsets=True, one_device=True)
        it = items_for_device(tr, 0)
        same_items(it, ref_items_for_device(tr, 0))
        assert len(it) == 500
    tr = _trace(4, 500, devices=1, ids="many", copies=False, memsets=False, one_device=True)
    it = items_for_device(tr, 0)
    assert len(set(tr.kernels.name_id.tolist())) > len(it.labels)  # k0 and k9 ... share


@SLOW
@given(TRACES, st.sampled_from(("none", "copies", "some", "all")), st.floats(0.0, 0.3))
def test_units_and_class_times_match_the_plain_form(case: tuple[Any, ...], clamp: str,
                                                    clip: float) -> None:
    seed, n, devices, ids, copies, memsets, one = case
    tr = _trace(seed, n, devices=devices, ids=ids, copies=copies, memsets=memsets,
                one_device=one)
    rng = np.random.default_rng(seed + 1)
    for d in range(devices):
        it = items_for_device(tr, d)
        kern = it.source == KERNEL
        clamped = {"none": np.zeros(len(it), bool), "copies": ~kern & (rng.random(len(it)) < .5),
                   "some": rng.random(len(it)) < 0.3, "all": np.ones(len(it), bool)}[clamp]
        key = it.cls.astype(np.intp)
        d_ns = build._float_diff(it.end_ns, it.start_ns)
        assert bits(d_ns) == bits(it.duration_ns.astype(np.float64))
        units = build._unit_groups(it, clamped, key, d_ns)
        want = ref_unit_groups(it, clamped)
        assert bits((units.item_group, units.class_group, units.kind, units.n_groups)) == bits(
            want)
        assert bits(units.class_calls) == bits(np.bincount(it.cls, minlength=len(it.labels)))
        if len(it):  # the window: every item inside it, or some clipped
            lo, hi = int(it.start_ns.min()), int(it.end_ns.max())
            cut = int((hi - lo) * clip)
            win = (lo + cut, hi - cut)
        else:
            win = (0, 1)
        s_ns, e_ns = build._clipped(it, win)
        dur_s, g_c_time, class_s = build._class_times(it, s_ns, e_ns, units=units, key=key,
                                                      duration_ns_f=d_ns)
        assert bits((dur_s, g_c_time)) == bits(ref_class_times(it, s_ns, e_ns, want[0],
                                                               want[3]))
        rows_s = np.bincount(it.cls, weights=it.duration_ns.astype(np.float64) * 1e-9,
                             minlength=len(it.labels))
        assert bits(class_s) == bits(rows_s.astype(np.float64))  # (int64 when empty)


def test_units_cover_both_forms() -> None:
    """The inputs above reach the general form with clamped units sharing the last group."""
    tr = _trace(9, 3000, devices=1, ids="many", copies=True, memsets=False, one_device=True)
    it = items_for_device(tr, 0)
    clamped = np.random.default_rng(0).random(len(it)) < 0.3
    key = it.cls.astype(np.intp)
    units = build._unit_groups(it, clamped, key, build._float_diff(it.end_ns, it.start_ns))
    assert not units.whole_classes and units.n_groups == build.MAX_GROUPS + 1
    pooled = units.item_group == build.MAX_GROUPS
    assert len(set(it.cls[pooled & clamped].tolist()) & set(it.cls[pooled & ~clamped].tolist()))
    free = build._unit_groups(it, np.zeros(len(it), bool), key,
                              build._float_diff(it.end_ns, it.start_ns))
    assert free.whole_classes


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 300), st.integers(1, 40))
def test_item_energies_match_the_plain_form(seed: int, n: int, n_groups: int) -> None:
    rng = np.random.default_rng(seed)
    dp = rng.normal(0.0, 50.0, n_groups)
    dp[::3] = -0.0
    group = rng.integers(0, n_groups, n).astype(np.int32)
    dur_s = rng.random(n) * 1e-3
    dur_s[::4] = 0.0
    dur_s[1::9] = np.inf
    share = rng.random(n) * 1e-3
    share[::5] = 0.0
    for p_idle in (61.5, 0.0, -0.0, float(rng.normal(60.0, 5.0))):
        with np.errstate(invalid="ignore"):  # 0 × inf: NaN both ways
            want = ref_item_energies(dp, group, dur_s, p_idle, share)
            got = build._item_energies(dp, group, dur_s, p_idle, share.copy())
        assert bits(got) == bits(want)


def test_float_diff_casts_after_the_int64_difference() -> None:
    a = np.array([2**60 + 2**55 + 3, 2**62, 2**62, 2**54 + 1, 5], np.int64)
    b = np.array([2**60 + 1, 3, -2**62, 2**53 + 1, 9], np.int64)  # one wraps, as int64 does
    assert bits(build._float_diff(a, b)) == bits((a - b).astype(np.float64))


# ---- the engine's results and the snapshot's rows ------------------------------------------


@pytest.fixture(scope="module")
def one_gpu() -> tuple[Trace, Arrays]:
    tr = simulate(scenario="launch_bound", gpu="a100", seconds=4.0, seed=3).trace
    return tr, attribute_arrays(tr, n_boot=10)


@pytest.fixture(scope="module")
def two_gpus() -> tuple[Trace, Arrays]:
    from tests.conftest import _on_two_gpus

    a = simulate(scenario="clamp_episode", gpu="h100", seconds=4.0, seed=1).trace
    b = simulate(scenario="varied_mix", gpu="a100", seconds=4.0, seed=2).trace
    tr = _on_two_gpus(a, b)
    p = np.random.default_rng(0).permutation(len(tr.copies))
    tr.copies = type(tr.copies)(**{k: v[p] for k, v in tr.copies.columns().items()})
    return tr, attribute_arrays(tr, n_boot=10)


@pytest.mark.parametrize("which", ["one_gpu", "two_gpus"])
def test_rows_and_record_energies_match_the_plain_forms(which: str,
                                                        request: pytest.FixtureRequest) -> None:
    tr, arr = request.getfixturevalue(which)
    for r in arr.devices:
        assert bits(rows._kernel_copy_rows(tr, r)) == bits(ref_kernel_copy_rows(tr, r))
    want = ref_record_energies(tr, arr.devices)
    got = {0: (arr.kernel_dynamic_j, arr.kernel_energy_j),
           1: (arr.copy_dynamic_j, arr.copy_energy_j),
           2: (arr.memset_dynamic_j, arr.memset_energy_j)}
    assert bits(got) == bits(want)
    if which == "one_gpu":  # one device holds every kernel: its arrays, not a copy
        assert np.shares_memory(arr.kernel_energy_j, arr.devices[0].item_energy_j)
    else:
        assert any(np.unique(r.item_group).size > len(r.items.labels) for r in arr.devices)


@pytest.mark.parametrize("which", ["one_gpu", "two_gpus"])
def test_step_busy_time_matches_the_plain_form(which: str,
                                               request: pytest.FixtureRequest) -> None:
    tr, arr = request.getfixturevalue(which)
    rng = np.random.default_rng(5)
    lo, hi = arr.window_start_ns, arr.window_end_ns
    # steps back to back, overlapping, repeated, empty and past the window's ends
    bounds = np.sort(rng.integers(lo - 10**6, hi + 10**6, 400))
    s = np.r_[bounds[:-1], bounds[5:50], bounds[::7]]
    e = np.r_[bounds[1:], bounds[5:50] + 10**6, bounds[::7]]
    mk = MarkerBatch.from_columns({"start_ns": s, "end_ns": e, "name_id": np.zeros(len(s)),
                                   "kind": np.full(len(s), int(MarkerKind.PROFILER_STEP))})
    tr = dataclasses.replace(tr, markers=mk)
    got, want = step_stats(tr, arr), ref_step_stats(tr, arr)
    assert got is not None and want is not None and got.count > 300
    assert bits(got) == bits(want)


def _idle(rng: np.random.Generator, n: int, devices: list[int], *, huge: bool
          ) -> IdleIntervals:
    s = np.sort(rng.integers(0, 10**9, n))
    d = rng.integers(0, 10**6, n)
    if huge:  # sums past int64: they wrap, as the plain form's did
        d[::3] = 1 << 61
    return IdleIntervals(start_ns=s, end_ns=s + d,
                         device=rng.choice(np.array(devices, np.int16), n),
                         cause=rng.choice(np.array([0, 0, 0, 1, 2, 3, 4, 7], np.uint8), n))


@SLOW
@given(st.integers(0, 10_000), st.integers(0, 500),
       st.sampled_from(("one", "others too", "no cause", "one cause", "two gpus")),
       st.booleans())
def test_idle_rows_match_the_plain_form(seed: int, n: int, mode: str, huge: bool) -> None:
    rng = np.random.default_rng(seed)
    base = Arrays(window_start_ns=0, window_end_ns=1, kernel_dynamic_j=np.zeros(40),
                  kernel_energy_j=np.zeros(40), copy_dynamic_j=np.zeros(0),
                  copy_energy_j=np.zeros(0), memset_dynamic_j=np.zeros(0),
                  memset_energy_j=np.zeros(0), idle=_idle(rng, 0, [0], huge=False),
                  idle_energy_j=np.zeros(0), devices=(), has_power=True, warnings=())
    devices = [1, 0] if mode == "two gpus" else [0]
    idle = _idle(rng, n, {"others too": [0, 3], "two gpus": [0, 1, 3]}.get(mode, [0]),
                 huge=huge)
    if mode == "one cause":
        idle = dataclasses.replace(idle, cause=np.full(n, 3, np.uint8))
    elif mode != "no cause":
        idle = dataclasses.replace(idle, cause=np.minimum(idle.cause, 3))
    energy = rng.normal(0.0, 1.0, n)
    energy[::6] = -0.0
    results = tuple(_device_result(d) for d in devices)
    arr = dataclasses.replace(base, idle=idle, idle_energy_j=energy, devices=results)
    got = {k: (float(ns) * 1e-9, e, c) for k, (ns, e, c) in rows._idle_sums(arr).items()}
    assert bits(got) == bits(ref_idle_rows(arr))


@functools.cache
def _device_result(device: int) -> DeviceResult:
    """A stand-in result for ``device``: the idle rows read only its index."""
    tr = _trace(1, 40, devices=1, ids="few", copies=False, memsets=False, one_device=True)
    r = build._attribute_device(tr, 0, (T0, T0 + 2 * 10**9), gpu=None, n_boot=1, warnings=[])
    return dataclasses.replace(r, device=device)


# ---- the bootstrap -----------------------------------------------------------------------


def ref_bootstrap(x: F64, y: F64, prior: float | None, *, n_boot: int, block: int,
                  seed: int = 0, pooled: float | F64 | None = None,
                  idle_weight: float = 0.5) -> tuple[F64, F64]:
    """The bootstrap as it was: one :func:`regress.fit` of each replicate's readings."""
    from attribution.engine import regress

    rng = np.random.default_rng(seed)
    k, g = x.shape
    p, dp = np.zeros(n_boot), np.zeros((n_boot, g))
    if k == 0:
        return p, dp
    for b in range(n_boot):
        idx = regress.block_indices(k, block, rng)
        f = regress.fit(x[idx], y[idx], prior, pooled=pooled, idle_weight=idle_weight)
        p[b], dp[b] = f.p_idle_w, f.dp_w
    return p, dp


@SLOW
@given(st.integers(0, 2**31), st.tuples(st.integers(0, 60), st.integers(1, 6), st.integers(1, 12)),
       st.sampled_from(["none", "scalar", "per_group"]), st.booleans(), st.booleans())
def test_bootstrap_is_a_fit_per_replicate(seed: int, shape: tuple[int, int, int], pooled: str,
                                          with_prior: bool, held: bool) -> None:
    """Readings k, groups g, bootstrap block; centres none, one or per group; a P_idle
    prior or none, weak or holding it."""
    from attribution.engine import regress

    k, g, block = shape
    rng = np.random.default_rng(seed)
    x = rng.random((k, g)) * (rng.random(g) > 0.2)  # some groups never busy
    y = 60.0 + x @ rng.uniform(0, 300, g) + rng.normal(0, 5, k)
    centre: float | F64 | None = {"none": None, "scalar": 120.0,
                                  "per_group": rng.uniform(10, 300, g)}[pooled]
    prior = 62.0 if with_prior else None
    weight = 1e4 if held else regress.IDLE_PRIOR_READINGS
    got = regress.bootstrap(x, y, prior, n_boot=7, block=block, seed=seed % 1000,
                            pooled=centre, idle_weight=weight)
    want = ref_bootstrap(x, y, prior, n_boot=7, block=block, seed=seed % 1000, pooled=centre,
                         idle_weight=weight)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert a.tobytes() == b.tobytes()
