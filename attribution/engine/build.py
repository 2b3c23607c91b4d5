"""The engine's array level: per-record energies for one trace.

Owns the pipeline per device -- items and classes (split by clamp state into regressor
units), idle gaps, readings and sensor model, lag search (and on consumer boards the slow
response stage and boost tail), regression, bootstrap and the interval's sensitivity terms,
resolvability -- and the conventions of CONTRACT.md:
dynamic energy ``ΔP_c × duration``; full energy adds ``P_idle × time share``; idle energy
``P_idle × idle time`` by cause; so Σ items + Σ idle = P_idle × window + Σ dynamic.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from attribution.engine import publish_grid, regress
from attribution.engine.activity import (
    KERNEL,
    BusyFunction,
    Items,
    idle_share_s,
    items_for_device,
)
from attribution.engine.aliasing import (
    anchor_warning,
    counter_scale,
    locked_interval,
    locked_lag_warning,
    locked_warning,
    phase_locked,
    spread_ratio,
    unanchored_warning,
)
from attribution.engine.blind import (
    UNSEEN_WHY,
    blind_anchor_warning,
    blind_cap_w,
    blind_to_work,
    blind_warning,
    blind_why,
)
from attribution.engine.block_rows import block_means, readings_per_row
from attribution.engine.boost_span import neighbour_designs, stage_at_edge, stage_edge_warning
from attribution.engine.boot_blocks import (
    floor_rows,
    resample_block,
    short_run_scale,
    short_run_warning,
    small_sample_scale,
)
from attribution.engine.bound_limit import AT_BOUND_W, bound_upper_w
from attribution.engine.clamp import clamped_items
from attribution.engine.clock_shift import LogShift, log_shift, shift_warning
from attribution.engine.counter import counter_energy_j
from attribution.engine.device_match import (
    OtherDevice,
    other_device_warning,
    other_device_why,
    other_log_device,
)
from attribution.engine.idle_place import (
    MIN_JUDGED,
    idle_leverage,
    idle_lines,
    judge_idle,
    sanity_band_w,
    unheld_ends_w,
)
from attribution.engine.lag_refine import (
    lag_at_edge,
    lag_edge_warning,
    lag_edge_why,
    lag_ends_ms,
    lag_profile_ms,
    lag_reach_ms,
    lag_rise,
    refine_grid_lag,
    slack_from_profile,
    slack_lags,
)
from attribution.engine.power_cover import (
    CLASS_BELOW,
    WARN_BELOW,
    covered_stretches,
    partial_warning,
)
from attribution.engine.quiet_idle import (
    QuietIdle,
    quiet_after_s,
    quiet_idle,
    quiet_warning,
)
from attribution.engine.tail import (
    held_tail_params,
    scan_tail,
    tail_energy_s,
    tail_fractions,
    tail_model,
    tail_unplaced_warning,
)
from attribution.engine.timebase import (
    DEFAULT_LAG,
    MAX_BOARD_POWER_W,
    MIN_LAG_READINGS,
    LagMatrices,
    Readings,
    Sensor,
    fit_lag,
    fit_lag_response,
    fit_slow_response,
    implausible_readings,
    implausible_warning,
    readings_for,
    sensor_model,
    usable,
    window_fractions,
)
from attribution.engine.timing_checks import kernel_timing, repaired, timing_warnings
from attribution.engine.verdict import class_verdicts
from attribution.idle import (
    IdleIntervals,
    covered_ns,
    device_indices,
    idle_intervals,
    union_segments,
    work_devices,
)
from attribution.intsets import counts
from attribution.model import F64, I32, I64, B, PowerField, Trace
from attribution.presets import NOMINAL_LAG_MS, GpuPreset, get_preset, preset_for_name

MAX_GROUPS = 32
"""Classes beyond the 32 busiest share one regressor ("rest")."""
COLLINEAR = 0.95
N_BOOT = 200
WINDOW_FRACTIONS = (0.25, 0.5, 1.0)
"""Candidate W / T for a board with no preset (DESIGN.md §3: 25 %, 50 %, 100 % seen)."""
Z90 = 1.645
GAIN_SIGMA = 0.03
"""Board gain spread assumed for an unknown GPU (presets carry their own)."""
TAIL_KIND = 99
"""Prior kind of the boost-tail column (its own pooled centre)."""
HELD_IDLE_READINGS = 100.0
"""P_idle prior weight per reading when the fit is degenerate (holds P_idle at the prior)."""
BLOCK_S = 1.0
"""Bootstrap blocks span max(1 s, 3 W) of readings (readings closer are correlated)."""


def readings_block(window_ms: float, period_ms: float) -> int:
    """Readings per ``BLOCK_S`` block (at least 3 windows): the bootstrap's block, and the
    readings whose residuals the lag's bound counts as one (both engines); 1 where the sensor
    model is not known."""
    if not (math.isfinite(window_ms) and math.isfinite(period_ms)):
        return 1
    return max(1, round(max(BLOCK_S * 1e3, 3.0 * window_ms) / max(period_ms, 1e-3)))


def _gpu_list(devices: list[int]) -> str:
    """``GPU 3`` or ``GPUs 1-7`` or ``GPUs 0, 2, 5``."""
    if len(devices) == 1:
        return f"GPU {devices[0]}"
    if devices == list(range(devices[0], devices[-1] + 1)):
        return f"GPUs {devices[0]}-{devices[-1]}"
    return "GPUs " + ", ".join(str(d) for d in devices)


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceResult:
    """Everything the engine decided for one GPU."""

    device: int
    name: str
    model: str
    sensor: Sensor
    p_idle_w: float
    p_idle_ci_w: tuple[float, float]
    items: Items
    class_group: I32  # class → regressor group
    group_dp_w: F64
    class_dynamic_j: F64
    class_ci_j: F64  # (classes, 2)
    class_resolvable: tuple[bool, ...]
    class_cluster: tuple[str | None, ...]
    class_why: tuple[str, ...]
    item_dynamic_j: F64
    item_energy_j: F64
    n_readings: int
    rms_w: float
    response_ms: float  # fitted board response time constant τ
    busy: Callable[[I64], F64]  # B_g(t), seconds per group
    clusters: tuple[tuple[str, ...], ...]
    class_calls: I64
    """Items per class."""
    class_time_s: F64
    """Σ item durations per class (the items' own, not clipped to the window), in row order."""
    class_energy_j: F64
    """Σ item energies per class, in row order."""
    slow_response: tuple[float, float] = (0.0, 0.0)
    """(τ₂ ms, weight) of the slow second response stage fitted on consumer boards."""
    boost_tail_j: float = 0.0
    """Energy of the fitted consumer boost tail over the window (in no item, not idle)."""
    lag_profile_ms: float = math.inf
    """The lag's measured 90 % uncertainty before the intervals' floor and ceiling
    (``lag_refine.lag_profile_ms``); inf where no fit ran or no minimum was resolved."""
    item_group: I32 = dataclasses.field(default_factory=lambda: np.empty(0, np.int32))
    """Regressor group of each item (a kernel class's clamped instances have their own)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Arrays:
    """Per-record energies aligned with the trace's rows, plus idle intervals."""

    window_start_ns: int
    window_end_ns: int
    kernel_dynamic_j: F64
    kernel_energy_j: F64
    copy_dynamic_j: F64
    copy_energy_j: F64
    memset_dynamic_j: F64
    memset_energy_j: F64
    idle: IdleIntervals
    idle_energy_j: F64
    devices: tuple[DeviceResult, ...]
    has_power: bool
    warnings: tuple[str, ...]


def trace_window(trace: Trace) -> tuple[int, int] | None:
    """The profiled span: GPU items, host API calls and markers (power logs excluded)."""
    starts, ends = [], []
    for b in (trace.kernels, trace.copies, trace.memsets, trace.apis, trace.markers):
        if len(b):
            starts.append(int(b.start_ns.min()))
            ends.append(int(b.end_ns.max()))
    if not starts:
        return None
    return min(starts), max(ends)


def _preset(trace: Trace, device: int, gpu: str | None) -> GpuPreset | None:
    if gpu is not None:
        return get_preset(gpu)
    for d in trace.devices:
        if d.index == device:
            return preset_for_name(d.name)
    return None


def _with_reason(why: list[str | None] | None, mask: B, reason: str) -> list[str | None] | None:
    """``why`` (per class, None: no reason yet; None in all: no list) with ``reason`` given to
    the classes of ``mask`` that have none (an earlier reason, the power log's, stands)."""
    if not bool(mask.any()):
        return why
    old = why if why is not None else [None] * len(mask)
    return [reason if m and w is None else w for m, w in zip(mask.tolist(), old, strict=True)]


def model_override_warning(trace: Trace, device: int, gpu: str | None) -> str | None:
    """The line when the model asked for (``gpu``) is not the one the device's name denotes
    (both known): its sensor model and board values are used, which a typo or a stale
    script gets wrong without a word (an A100 attributed as an RTX 3090 held its active idle
    at 130 W against 62 W)."""
    if gpu is None:
        return None
    named = preset_for_name(_device_name(trace, device))
    asked = get_preset(gpu)
    if named is None or named.key == asked.key:
        return None
    return (f"GPU {device}: attributed as {asked.key} (asked for), but the trace names it "
            f"{_device_name(trace, device)!r} ({named.key}): the {asked.key}'s sensor model "
            "and board values are used")


def _device_name(trace: Trace, device: int) -> str:
    for d in trace.devices:
        if d.index == device:
            return d.name
    return ""


def _with_gain(ci: F64, est: F64, gain_sigma: float) -> F64:
    """Widen bootstrap intervals by the board's gain uncertainty (not correctable, so it
    belongs in the interval): relative half-widths add in quadrature."""
    g = Z90 * gain_sigma
    lo_rel = np.divide(est - ci[:, 0], est, out=np.zeros_like(est), where=est > 0)
    hi_rel = np.divide(ci[:, 1] - est, est, out=np.zeros_like(est), where=est > 0)
    lo = est * (1.0 - np.sqrt(np.clip(lo_rel, 0, None) ** 2 + g * g))
    hi = est * (1.0 + np.sqrt(np.clip(hi_rel, 0, None) ** 2 + g * g))
    return np.column_stack([np.minimum(np.clip(lo, 0.0, None), ci[:, 0]),
                            np.maximum(hi, ci[:, 1])])


def board_floor_w(board_w: float, gain_sigma: float) -> float:
    """The board's active idle as its sensor may read it at the low end of the gain's 90 %
    span: where P_idle's interval reaches down to the board's value (a boost tail that no
    candidate could place, both engines), it reaches this."""
    return board_w * (1.0 - Z90 * gain_sigma)


def _held_tail_fit(x: F64, y: F64, board_w: float, items: tuple[I64, I64], t_ns: I64, *,
                   window_ms: float, lag_ms: float, kinds: I32, per_row: int,
                   prior_scale: float = 1.0) -> regress.Fit:
    """The fit with P_idle held at the board's value and the boost tail refitted on the
    readings' excess over it (:func:`tail.held_tail_params` on the items' (start, end) times;
    no candidate: the classes take the excess): an end of the intervals where the free fit
    could place no tail.  The tail is searched on the readings, the fit made on rows of
    ``per_row`` of them (``block_rows``)."""
    params = held_tail_params(x, y - board_w, *items, t_ns, window_ms=window_ms, lag_ms=lag_ms)
    model = tail_model(params, *items)
    xh = x if model is None else np.column_stack([x, tail_fractions(
        model[0], model[1], t_ns, window_ms=window_ms, lag_ms=lag_ms, tau_s=model[2])])
    k = np.r_[kinds.astype(np.int64), [TAIL_KIND] * (xh.shape[1] - x.shape[1])]
    xb, yb = block_means(xh, per_row), block_means(y, per_row)
    return regress.fit(xb, yb, board_w, pooled=regress.pooled_by_kind(xb, yb, k),
                       idle_weight=HELD_IDLE_READINGS * len(y), per_row=per_row,
                       prior_scale=prior_scale)


def _other_gpus_hint(untraced: Sequence[int]) -> str:
    """Where a GPU with work has no readings and the log has GPUs without work (a log of
    ``nvidia-smi -i 3`` beside a trace of a job under ``CUDA_VISIBLE_DEVICES=3``): how to map
    them (``device_match`` tells the mismatch only where the trace's index has readings)."""
    if not untraced:
        return ""
    return (f"; the power log has readings of {_gpu_list(list(untraced))}: if the job ran "
            "there, pass --power-gpus (its CUDA_VISIBLE_DEVICES)")


def untraced_warning(devices: list[int]) -> str:
    """The line for GPUs with power readings but no work in the trace (both engines)."""
    return (f"{_gpu_list(devices)}: power readings but no kernel, copy or memset in the trace "
            "(another process's GPU?): left out")


def _log_rows_ns(trace: Trace, device: int, field: PowerField) -> I64:
    """Times of the power log's rows of ``field`` (the one the fit reads) for ``device`` (a
    log with no device column: all its rows of the field)."""
    p = trace.power
    of = p.field == int(field)
    on = of & (p.device == device)
    if not bool(on.any()):
        on = of & (p.device < 0)
    return np.asarray(p.t_ns[on], np.int64)


def _power_log_checks(device: int, shift: LogShift | None, win: tuple[int, int], *,
                      items: tuple[I64, I64], polls_ns: I64, key: npt.NDArray[np.intp],
                      n_cls: int, warnings: list[str], other: OtherDevice | None = None
                      ) -> list[str | None] | None:
    """Whether the power log can be trusted for the split: whether another of its GPUs
    follows this one's work instead (``other``, from ``device_match``), its clock against
    the trace's (``shift``: ``clock_shift.log_shift`` of the device's readings) and how
    much of each class's busy time it covers (``power_cover``, on every row ``polls_ns`` the
    log has on the device).  Appends the lines to ``warnings``; returns per class why it
    cannot, or None."""
    if other is not None:
        warnings.append(other_device_warning(other))
        return [other_device_why(other)] * n_cls
    if shift is not None and shift.off:
        warnings.append(shift_warning(device, shift))
        return [f"the power log's clock looks {shift.shift_s:+.1f} s off the trace's"] * n_cls
    cover = covered_stretches(polls_ns, win)
    share = float((cover[1] - cover[0]).sum()) / max(win[1] - win[0], 1)
    if share >= WARN_BELOW:
        return None
    dur = _float_diff(items[1], items[0])
    inside = covered_ns(*cover, *items).astype(np.float64)
    total = np.bincount(key, weights=dur, minlength=n_cls)
    got = np.bincount(key, weights=inside, minlength=n_cls)
    frac = np.divide(got, total, out=np.ones(n_cls), where=total > 0)
    why: list[str | None] = [
        f"{100 * (1 - f):.0f}% of its busy time lies outside the power log" if f < CLASS_BELOW
        else None for f in frac.tolist()]
    warnings.append(partial_warning(device, share, (win[1] - win[0]) * 1e-9,
                                    sum(w is not None for w in why)))
    return why if any(w is not None for w in why) else None


def p_idle_interval(p_idle_w: float, boot_q_w: tuple[float, float], ends_w: Sequence[float],
                    gain_sigma: float) -> tuple[float, float]:
    """P_idle's 90 % interval, built as the classes' are: the bootstrap's 5–95 %
    (``boot_q_w``), widened by the board's gain uncertainty, and stretched to the fits at the
    lag ± ``LAG_SLACK_MS`` and the ΔP prior's centre span (``ends_w``: their P_idle; with
    P_idle held at the board's value, also the value the readings gave).  The bootstrap
    alone covered the simulator's P_idle in 8 of 54 runs: the gain and the lag move P_idle
    too."""
    q = np.array([boot_q_w], np.float64)
    lo, hi = _with_gain(q, np.array([p_idle_w]), gain_sigma)[0]
    if len(ends_w):
        lo, hi = min(lo, *ends_w), max(hi, *ends_w)
    return float(lo), float(hi)


def _fit_window(busy: Callable[[I64], F64], t_ns: I64, power_w: F64, period_ms: float,
                win: tuple[int, int], *, spread_ns: I64 | None = None) -> float:
    """Unknown board: pick W among T/4, T/2, T by the residual at each W's best lag (all
    candidates scored on the same readings; poll-stamped ones over their publish spread)."""
    cands = [period_ms * f for f in WINDOW_FRACTIONS]
    idx = usable(t_ns, max(cands), win[0], win[1])
    if len(idx) < 8:
        return period_ms
    t_k, y = t_ns[idx], power_w[idx]
    sp = spread_ns[idx] if spread_ns is not None else None
    scores = []
    for w in cands:
        lag = fit_lag(busy, t_k, y, w, regress.quick_rss, spread_ns=sp)
        scores.append(regress.quick_rss(window_fractions(busy, t_k, w, lag, spread_ns=sp), y))
    return float(cands[int(np.argmin(scores))])


def label_ranks(labels: Sequence[str]) -> I64:
    """Each label's rank in Python's string order (equal labels, equal ranks): an integer
    key that sorts as the labels do."""
    if not len(labels):
        return np.empty(0, np.int64)
    # an object array sorts with Python's own comparison, so the order is str's exactly
    _, inv = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return np.asarray(inv, np.int64).reshape(-1)


def rank_units(busy_s: F64, label_rank: I64, clamped: B, present: B
               ) -> tuple[I64, I32, int]:
    """Regressor groups of units (a class, or its clamped instances): the present units,
    busiest first (then label, free before clamped, then unit index), each of the first
    ``MAX_GROUPS`` a group of its own and the rest sharing the last one.  ``label_rank``:
    :func:`label_ranks` of the units' labels.  Returns (units in rank order, unit → group
    (−1: not present), number of groups).  The batch and the live engine both rank by it
    (one stable ``lexsort``: a Python sort with a tuple key per unit was ~1 ms a call at 480
    units)."""
    p = np.flatnonzero(present)
    order = p[np.lexsort((np.asarray(clamped, bool)[p], np.asarray(label_rank)[p],
                          -np.asarray(busy_s, np.float64)[p]))]
    group = np.full(len(present), -1, np.int32)
    group[order] = np.minimum(np.arange(len(order)), MAX_GROUPS)
    return order, group, min(len(order), MAX_GROUPS + 1)


def _clusters(x: F64, exposure: F64) -> list[list[int]]:
    """Groups whose activity fractions correlate above COLLINEAR (connected components)."""
    g = x.shape[1]
    if g < 2 or x.shape[0] < 3:
        return []
    sd = x.std(axis=0)
    live = np.flatnonzero((sd > 1e-12) & (exposure > 0))
    if len(live) < 2:
        return []
    return _components(np.asarray(np.corrcoef(x[:, live].T), np.float64), live)


def clusters_from_gram(m: F64, exposure: F64) -> list[list[int]]:
    """:func:`_clusters` from the Gram matrix ``m`` of ``[1, x]`` alone (a fit that keeps only
    sufficient statistics): ``n = m₀₀``, means ``m₀ⱼ / n``, covariance ``mᵢⱼ / n − μᵢμⱼ``.  A
    column whose variance is within rounding of ``E[x²]`` counts as constant."""
    n = float(m[0, 0]) if len(m) else 0.0
    g = len(m) - 1
    if g < 2 or n < 3:
        return []
    mean = m[0, 1:] / n
    cov = m[1:, 1:] / n - np.outer(mean, mean)
    var = np.diagonal(cov)
    sd = np.sqrt(np.maximum(var, 0.0))
    live = np.flatnonzero((sd > 1e-12) & (var > 1e-12 * np.diagonal(m)[1:] / n)
                          & (exposure > 0))
    if len(live) < 2:
        return []
    return _components(cov[np.ix_(live, live)] / np.outer(sd[live], sd[live]), live)


def _components(c: F64, live: I64) -> list[list[int]]:
    """Connected components (of more than one) of ``c > COLLINEAR`` over the columns ``live``."""
    parent = list(range(len(live)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    ii, jj = np.nonzero(np.triu(c > COLLINEAR, 1))
    for i, j in zip(ii.tolist(), jj.tolist(), strict=True):
        parent[find(i)] = find(j)
    comps: dict[int, list[int]] = {}
    for i in range(len(live)):
        comps.setdefault(find(i), []).append(int(live[i]))
    return [v for v in comps.values() if len(v) > 1]


def group_kinds(order: I64, group: I32, n_groups: int, unit_kind: I64) -> I32:
    """Prior kind of each group from its units' (``unit_kind``, in rank order ``order``): a
    group of one unit has that unit's, the shared last group its least busy unit's."""
    kind = np.zeros(n_groups, np.int32)
    k = min(len(order), MAX_GROUPS)
    kind[group[order[:k]]] = unit_kind[:k]
    if len(order) > MAX_GROUPS:
        kind[MAX_GROUPS] = unit_kind[-1]
    return kind


@dataclasses.dataclass(frozen=True, slots=True)
class _Units:
    """:func:`_unit_groups`' result."""

    item_group: I32  # item → group
    class_group: I32  # class → main group
    kind: I32  # group → prior kind
    n_groups: int
    class_calls: I64  # items per class
    whole_classes: bool
    """Every class's items are in one group (no clamped kernel: the common case)."""


def _unit_groups(items: Items, clamped: B, key: npt.NDArray[np.intp], duration_ns_f: F64
                 ) -> _Units:
    """Regressor units: one per class and clamp state (kernels only are split), ranked into
    groups by :func:`rank_units`; the prior kind is ``2 × source + clamped`` (kernels and
    copies, free and clamped, each get their own pooled ΔP prior centre).  ``key``: the
    items' classes as intp; ``duration_ns_f``: their durations as float64 ns."""
    n_cls = len(items.labels)
    # kernels come first (a key of the column's dtype: a Python int would convert the column)
    n_kernels = int(np.searchsorted(items.source, np.asarray(KERNEL, items.source.dtype),
                                    side="right"))
    whole = bool(len(items)) and not bool(clamped[:n_kernels].any())
    t = np.zeros(2 * n_cls)
    present = np.zeros(2 * n_cls, bool)
    if whole:
        # no clamped unit: unit 2c holds class c's items, 2c + 1 none; the bins are those of
        # the general form's bincounts (each class's items in row order)
        calls = counts(items.cls, n_cls)
        t[0::2] = np.bincount(key, weights=duration_ns_f, minlength=n_cls)
        present[0::2] = calls > 0
    else:
        st = (clamped & (items.source == KERNEL)).astype(np.int64)
        unit = items.cls.astype(np.int64) * 2 + st
        t[:] = np.bincount(unit, weights=duration_ns_f, minlength=2 * n_cls)
        per_unit = np.bincount(unit, minlength=2 * n_cls)
        present[:] = per_unit > 0
        calls = (per_unit[0::2] + per_unit[1::2]).astype(np.int64, copy=False)
    order, group_of_unit, n_groups = rank_units(t, np.repeat(label_ranks(items.labels), 2),
                                                np.arange(2 * n_cls) % 2 == 1, present)
    class_group = np.where(group_of_unit[0::2] >= 0, group_of_unit[0::2], group_of_unit[1::2])
    kind = group_kinds(order, group_of_unit, n_groups,
                       2 * np.asarray(items.class_source)[order // 2] + order % 2)
    if whole:
        item_group = np.take(group_of_unit[0::2], items.cls)
    else:
        item_group = group_of_unit[unit] if len(items) else np.empty(0, np.int32)
    return _Units(item_group, class_group.astype(np.int32), kind, n_groups, calls, whole)


def _float_diff(a: I64, b: I64) -> F64:
    """``(a - b).astype(np.float64)`` in one pass (the difference in int64, then cast)."""
    out = np.empty(len(a), np.float64)
    np.subtract(a, b, out=out, casting="unsafe")
    return out


def _class_times(items: Items, s_ns: I64, e_ns: I64, *, units: _Units,
                 key: npt.NDArray[np.intp], duration_ns_f: F64) -> tuple[F64, F64, F64]:
    """(each item's duration in seconds over the window, group × class busy time in seconds
    (class energy = Σ_g ΔP_g × time[g, c]), each class's time over its whole items (the
    rows' ``time_s``)).  ``s_ns``/``e_ns``: the items clipped to the window (the items' own
    columns when none needed it); ``duration_ns_f`` (the unclipped durations) is scaled to
    seconds in place when it is the first."""
    n_cls, n_groups = len(items.labels), units.n_groups
    whole = s_ns is items.start_ns and e_ns is items.end_ns
    if whole:
        dur_s = np.multiply(duration_ns_f, 1e-9, out=duration_ns_f)
    else:
        dur_s = (e_ns - s_ns).astype(np.float64) * 1e-9
    class_s = np.asarray(np.bincount(key, weights=dur_s, minlength=n_cls), np.float64)
    if units.whole_classes:
        # each class's items in one group: its bin of the group × class bincount is its
        # bin here (the same items in the same order), the other bins are empty
        g_c_time = np.zeros((n_groups, n_cls), np.float64)
        on = np.flatnonzero(units.class_calls > 0)
        g_c_time[units.class_group[on], on] = class_s[on]
    else:
        g_c_time = np.bincount(units.item_group.astype(np.int64) * max(n_cls, 1) + items.cls,
                               weights=dur_s, minlength=n_groups * n_cls
                               ).astype(np.float64, copy=False).reshape(n_groups, n_cls)
    rows_s = class_s if whole else np.asarray(
        np.bincount(key, weights=duration_ns_f * 1e-9, minlength=n_cls), np.float64)
    return dur_s, g_c_time, rows_s


def _clipped(items: Items, win: tuple[int, int]) -> tuple[I64, I64]:
    """Item starts and ends clipped to the window (the columns themselves when every item
    lies inside it, as the batch window from :func:`trace_window` makes them)."""
    if len(items) and (int(items.start_ns.min()) >= win[0] and int(items.end_ns.max()) <= win[1]
                       and int(items.end_ns.min()) >= win[0]
                       and int(items.start_ns.max()) <= win[1]):
        return items.start_ns, items.end_ns
    return np.clip(items.start_ns, win[0], win[1]), np.clip(items.end_ns, win[0], win[1])


def locked_polls_warning(device: int, scatter: float, *, flipped: float | None = None,
                         grid_iqr_ms: float | None = None) -> str:
    """The snapshot's warning line for a power log whose polls ran in step with the sensor
    (``flipped``: the share of readings placed a poll gap earlier, the delay from publish to
    stamp then taken as one, fitted with the lag; ``grid_iqr_ms``: the readings were moved
    to their publish on the sensor's grid instead, and the delays taken off spread this
    much; both None: not placed)."""
    ends = ("; the per-class intervals also span the fits with the publishes at either end of "
            "the poll interval and the poll-interval average")
    if grid_iqr_ms is not None:
        how = ("one delay after its publish, fitted with the lag (each reading moved to its "
               f"publish on the sensor's grid, the delays taken off {grid_iqr_ms:.1f} ms IQR: "
               "the fit's residual preferred it to the stamps); the per-class intervals also "
               "span the fit at the stamps")
    elif flipped is not None:
        how = (f"one delay after its publish, fitted with the lag ({100 * flipped:.0f}% of "
               "them shown a poll gap later, where the poll phase crossed a publish, placed "
               "back)" + ends)
    else:
        how = ("about the same point of its poll interval, which point is unknown: the "
               "per-class intervals span either end")
    return (f"GPU {device}: the power log's polls ran in step with the sensor (each new value "
            f"at one phase of the poll cycle: scatter {scatter:.2f} of the poll gap), so each "
            f"reading was shown {how}, and may still be too narrow (simulated: 90% coverage "
            "against 93% with free-running polls); `ppwtop record` keeps NVML's own "
            "timestamps")


@dataclasses.dataclass(frozen=True)
class LockedPlacing:
    """Where a locked log's readings were placed (:func:`_locked_placing`), with the (lag, τ)
    each candidate placing was fitted at on ``window_ms``: the engine's own lag fit and the
    interval's end fit at the placing passed over are those, while the window stays."""

    delays_ns: I64 | None
    """What to take off each reading's stamp (None: the readings stay spread over their
    poll interval)."""
    on_grid: bool
    """The sensor's grid's placing was kept (``Readings.delay_grid_ns``)."""
    window_ms: float
    kept: tuple[float, float]
    passed_over: tuple[float, float]


def _locked_placing(busy: Callable[[I64], F64], rd: Readings, idx: I32, window_ms: float
                    ) -> LockedPlacing | None:
    """A locked log's readings: placed by the delay's flips (or, where those are not told,
    spread over their poll interval) or moved to their publish on the sensor's grid
    (``Readings.delay_grid_ns``), whichever the fit's residual at its own best lag and
    response prefers; None where there is no grid placing to weigh.  The grid's placing
    assumes the publishes keep one period on the host's clock; where the sensor's clock
    wanders against it (the real A100 200 s log: its stamps' phase moves ±15 ms over
    minutes) the stamps follow their publishes and the grid misplaces them."""
    flips, grid = rd.delay_flip_ns, rd.delay_grid_ns
    if grid is None:
        return None
    y = rd.power_w[idx]

    def fitted(t_read: I64, spread: I64 | None) -> tuple[float, tuple[float, float]]:
        t_k, sp = t_read[idx], None if spread is None else spread[idx]
        lag, tau = fit_lag_response(busy, t_k, y, window_ms, regress.quick_rss, spread_ns=sp)
        return regress.quick_rss(window_fractions(busy, t_k, window_ms, lag, tau,
                                                  spread_ns=sp), y), (lag, tau)

    stamps = (fitted(rd.t_ns, rd.spread_ns) if flips is None else fitted(rd.t_ns - flips, None))
    on_grid = fitted(rd.t_ns - grid, None)
    if on_grid[0] < stamps[0]:
        return LockedPlacing(grid, True, window_ms, on_grid[1], stamps[1])
    return LockedPlacing(flips, False, window_ms, stamps[1], on_grid[1])


def _attribute_device(trace: Trace, device: int, win: tuple[int, int], *, gpu: str | None,
                      n_boot: int, warnings: list[str], untraced: Sequence[int] = (),
                      untraced_readings: Callable[[], Mapping[int, tuple[I64, F64]]] = dict
                      ) -> DeviceResult:
    """One device's attribution; ``untraced``: the log's GPUs with readings but no work in
    the trace, ``untraced_readings()`` their readings (read once for all devices, on the
    first call: ``device_match``)."""
    preset = _preset(trace, device, gpu)
    items = items_for_device(trace, device)
    n_cls = len(items.labels)
    clamped = clamped_items(trace, device, items.start_ns)
    key = items.cls.astype(np.intp)  # the per-class bincounts' key (each would cast to it)
    duration_ns_f = _float_diff(items.end_ns, items.start_ns)
    units = _unit_groups(items, clamped, key, duration_ns_f)
    item_group, group, group_kind, n_groups = (units.item_group, units.class_group, units.kind,
                                               units.n_groups)
    origin = win[0]
    s_ns, e_ns = _clipped(items, win)

    busy = BusyFunction(s_ns, e_ns, item_group, n_groups, origin_ns=origin)

    rd = readings_for(trace, device, preset)
    period_ms, window_ms, source = sensor_model(preset, rd)
    field = rd.field.label if rd.field is not None else "none"
    if rd.fresh_from_values:
        warnings.append(f"GPU {device}: the {field} rows carry no fresh marks while their value "
                        f"repeats between changes: each change of value taken as a new "
                        f"reading ({len(rd.t_ns)} of them), published some time since the "
                        "poll before (as an nvidia-smi log's)")
    idx = usable(rd.t_ns, window_ms, win[0], win[1]) if rd.field is not None else np.empty(0,
                                                                                         np.int32)
    t_k, y = rd.t_ns[idx], rd.power_w[idx]
    prior = preset.active_idle_w if preset is not None else None
    board_w = prior  # (prior may become the quiet readings' level where P_idle is held)
    # group × class busy time: class energy = Σ_g ΔP_g × time[g, c]
    dur_s, g_c_time, class_time_s = _class_times(items, s_ns, e_ns, units=units, key=key,
                                                 duration_ns_f=duration_ns_f)
    lag, tau = DEFAULT_LAG
    slow = (0.0, 0.0)
    tail: tuple[I64, I64, float] | None = None
    tail_unplaced = False
    tail_params: tuple[float, float] | None = None  # (min_gap ms, τ_t s) of ``tail``
    held_p: list[float] = []
    tail_j = 0.0
    degenerate_w: float | None = None
    profile = math.inf  # the lag's measured uncertainty (set by the fit)
    locked: float | None = None  # the readings' spread ratio when they are phase-locked
    unplaced_reason: str | None = None  # why, when the readings' windows are busy throughout
    said_scale: float | None = None  # a short run's widening, where it is said (boot_blocks)
    if rd.field is None:
        if len(items):  # a declared GPU with nothing at all gets one line (attribute_arrays)
            warnings.append(f"GPU {device}: no power readings; energies are 0 (times only)"
                            + _other_gpus_hint(untraced))
    elif len(y) == 0 and not len(rd.power_w):
        # a field whose every reading was unusable (negative, not finite, implausible): as
        # no power at all
        warnings.append(f"GPU {device}: no usable power reading at all (every "
                        f"{rd.field.label} reading negative, not finite or over "
                        f"{MAX_BOARD_POWER_W:.0f} W); energies are 0 (times only)")
    elif len(y) == 0:
        warnings.append(
            f"GPU {device}: no usable power reading inside the trace window ({len(rd.t_ns)} "
            "readings; a window must hold the sensor's lag and averaging window): "
            + (f"idle at the board's active idle ({preset.active_idle_w:.0f} W), "
               if preset is not None else "idle at the readings' median, ")
            + "no dynamic energy")
    elif len(y) < MIN_JUDGED:
        warnings.append(f"GPU {device}: only {len(y)} usable power reading"
                        f"{'' if len(y) == 1 else 's'} inside the trace "
                        "window; the fit rests on the priors"
                        + (f" (active idle held at the board's {preset.active_idle_w:.0f} W; "
                           "every class flagged)" if preset is not None else ""))
    # the log's every row on this device, fresh or not, says when it ran (a change-of-value
    # log shows a repeated value only as a poll: its fresh readings alone leave false holes)
    other: OtherDevice | None = None
    power_why: list[str | None] | None = None
    if len(y) and n_groups and rd.field is not None:
        # another of the log's GPUs following this one's work (CUDA_VISIBLE_DEVICES): told
        # instead of the blind readings' line below, which would guess at another cause
        # (the readings' correlation with the work is worked out once, for both checks)
        shift = log_shift(busy, rd.t_ns, rd.power_w, win)
        other = other_log_device(
            device, busy, 0.0 if shift is None else shift.r_near,
            untraced_readings, win)
        power_why = _power_log_checks(
            device, shift, win, items=(s_ns, e_ns),
            polls_ns=_log_rows_ns(trace, device, rd.field), key=key, n_cls=n_cls,
            warnings=warnings, other=other)
    poll_lock = rd.poll_lock if rd.poll_lock is not None else float("nan")
    polls_locked = poll_lock < publish_grid.LOCKED_POLLS  # NaN: not poll-stamped, not judged
    # locked polls: each reading shown one delay after its publish (the lag absorbs it) once
    # the delay's flips by a poll gap are taken off, or moved to its publish on the sensor's
    # grid, whichever placing the readings fit better
    placing = _locked_placing(busy, rd, idx, window_ms) if len(y) >= 8 and n_groups else None
    flips = placing.delays_ns if placing is not None else rd.delay_flip_ns
    on_grid = placing is not None and placing.on_grid
    t_read = rd.t_ns if flips is None else rd.t_ns - flips
    if polls_locked:
        warnings.append(locked_polls_warning(
            device, poll_lock,
            flipped=None if flips is None or on_grid else float(np.mean(flips != 0)),
            grid_iqr_ms=float(np.subtract(*np.percentile(flips, [75, 25]))) / 1e6
            if flips is not None and on_grid else None))
    if source == "measured" and len(y) >= 8 and n_groups:
        window_ms = _fit_window(busy, t_read, rd.power_w, period_ms, win,
                                spread_ns=rd.spread_ns if flips is None else None)
        source = "measured+fitted"
        idx = usable(rd.t_ns, window_ms, win[0], win[1])
        y = rd.power_w[idx]
    t_k = t_read[idx]
    # poll-timestamped readings (nvidia-smi logs): published some time since the last poll;
    # locked and placed: at one point (the poll interval is kept for an end fit)
    sp_poll = rd.spread_ns[idx] if rd.spread_ns is not None else None
    sp_k = sp_poll if flips is None else None
    # a locked log's placing was chosen by fitting it on these readings: its lag, unless
    # the window has been fitted since
    same_window = placing is not None and placing.window_ms == window_ms
    bound_up: F64 | None = None  # set by the fit: upper ends of groups held at ΔP = 0
    every_class_why: str | None = None  # set by the fit: why every class is flagged
    lag_lost = False  # set by the fit: the lag sits at its search's edge
    if len(y) >= 1 and n_groups:
        lag, tau = (placing.kept if placing is not None and same_window else
                    fit_lag_response(busy, t_k, y, window_ms, regress.quick_rss,
                                     spread_ns=sp_k))
        if preset is not None and preset.consumer_boost:
            lag, slow = fit_slow_response(busy, t_k, y, window_ms, lag_ms=lag, tau_ms=tau,
                                          rss=regress.quick_rss, spread_ns=sp_k)
            if stage_at_edge(slow):
                warnings.append(stage_edge_warning(device, slow))
        # the activity at the lags asked next, read in batches (each matrix once)
        act = LagMatrices(busy, t_k, window_ms, tau, spread_ns=sp_k)

        def rss_at(lags: Sequence[float], stage: tuple[float, float] = (0.0, 0.0)
                   ) -> list[float]:
            return [regress.quick_rss(m, y) for m in act.at(lags, stage)]

        # between the grid's points (a consumer board's lag is fitted with its slow stage)
        if slow == (0.0, 0.0) and len(y) >= MIN_LAG_READINGS:
            lag = refine_grid_lag(rss_at, lag)
            act.release()
        # the fitted lag's matrix with the neighbours lag_profile_ms reads, in one pass
        x = act.at([lag, *slack_lags(lag)], slow)[0]
        spread = spread_ratio(busy, t_k, x, window_ms, lag_ms=lag, tau_ms=tau, slow=slow,
                              spread_ns=sp_k)
        if phase_locked(spread):
            locked = spread
            warnings.append(locked_warning(device, spread, held=prior is not None))
            if (lag, tau) != (NOMINAL_LAG_MS, 0.0):  # every lag sees one slice: the fitted
                warnings.append(locked_lag_warning(device, lag, NOMINAL_LAG_MS))  # one is any
                lag, tau = NOMINAL_LAG_MS, 0.0
                act = LagMatrices(busy, t_k, window_ms, tau, spread_ns=sp_k)
                x = act.at([lag, *slack_lags(lag)], slow)[0]
        if preset is not None and preset.consumer_boost:
            scan = scan_tail(x, y, s_ns, e_ns, t_k, window_ms=window_ms, lag_ms=lag,
                             rss=regress.quick_rss)
            tail, tail_unplaced = tail_model(scan.params, s_ns, e_ns), scan.unplaced
            tail_params = scan.params

        def design(d_ms: float, *, plain: bool = False) -> F64:
            """Activity at lag + d_ms, with the tail column appended when it is modelled;
            ``plain``: without the consumer-board extras (slow stage, tail)."""
            if plain:
                return act.at([lag])[0]
            xd = x if d_ms == 0 else act.at([lag + d_ms], slow)[0]
            if tail is None:
                return xd
            return np.column_stack([xd, tail_fractions(tail[0], tail[1], t_k,
                                                       window_ms=window_ms, lag_ms=lag + d_ms,
                                                       tau_s=tail[2])])

        xf = design(0.0)
        kinds = np.r_[group_kind.astype(np.int64), [TAIL_KIND] * (xf.shape[1] - n_groups)]
        # a consumer board's class regression fits means of consecutive readings (block_rows)
        per_row = readings_per_row(period_ms, consumer=preset is not None
                                   and preset.consumer_boost)
        xfb, yb = block_means(xf, per_row), block_means(y, per_row)
        # the ΔP prior weighs in proportion on a run shorter than 20 s (regress)
        pscale = regress.prior_scale_for((win[1] - win[0]) * 1e-9)

        def fit_rows(xd: F64, p_prior: float | None, *, pooled: F64,
                     idle_weight: float = regress.IDLE_PRIOR_READINGS,
                     scale: float | None = None) -> regress.Fit:
            """:func:`regress.fit` of design ``xd`` (one row per reading) in rows of
            ``per_row`` readings."""
            return regress.fit(xfb if xd is xf else block_means(xd, per_row), yb, p_prior,
                               pooled=pooled, idle_weight=idle_weight, per_row=per_row,
                               prior_scale=pscale if scale is None else scale)

        def readings_rms(e: regress.Fit) -> float:
            """The fit's residual RMS over the readings themselves (its own, over its rows,
            where each row is one reading)."""
            if per_row == 1:
                return e.rms_w
            r = y - (e.p_idle_w + xf @ e.dp_w)
            return float(np.sqrt(np.mean(r ** 2)))

        centre = regress.pooled_by_kind(xfb, yb, kinds)
        f = fit_rows(xf, prior, pooled=centre)
        idle_w = regress.IDLE_PRIOR_READINGS
        block = readings_block(window_ms, period_ms)
        judged = judge_idle(f.p_idle_w, prior, rss_w2=readings_rms(f) ** 2 * len(y), n=len(y),
                            n_params=xf.shape[1] + 1, block=block,
                            leverage=idle_leverage(xf), phase_locked=locked is not None)
        quiet: QuietIdle | None = None
        if judged.hold:
            # the readings cannot place P_idle: hold it at the level the readings taken with
            # nothing running agree on (quiet_idle), else at the board's active idle, so idle
            # energy stays sane; every class is flagged below
            degenerate_w = f.p_idle_w
            if locked is None and not judged.unplaced:
                quiet = quiet_idle(t_k, y, *union_segments(s_ns, e_ns), lag_ms=lag,
                                   window_ms=window_ms, spread_ns=sp_k,
                                   after_s=quiet_after_s(preset is not None
                                                         and preset.consumer_boost))
            if quiet is not None:
                prior = quiet.power_w
            idle_w = HELD_IDLE_READINGS * len(y)
            f = fit_rows(xf, prior, pooled=centre, idle_weight=idle_w)
        unplaced_reason, lines = idle_lines(
            device, judged, p_idle_w=f.p_idle_w, board_w=board_w,
            phase_locked=locked is not None,
            held=None if degenerate_w is None or quiet is not None else (degenerate_w, f.p_idle_w))
        if quiet is not None and degenerate_w is not None:
            lines.append(quiet_warning(device, degenerate_w, board_w, quiet))
        warnings += lines
        # sensitivity of the estimate to the lag (± its measured uncertainty, at least
        # LAG_SLACK_MS) and to the ΔP prior's centre (± its measured spread,
        # regress.prior_span): both go into the interval below
        resid = regress.quick_resid(x, y)  # x: the matrix at the lag
        r_lag = float(resid @ resid)
        profile = lag_profile_ms(lambda d: rss_at([d], slow)[0], lag,
                                 n_readings=len(y), n_params=n_groups + 1, block=block,
                                 at_lag=r_lag, scores=lambda lags: rss_at(lags, slow))
        slack = slack_from_profile(profile)
        # the parabola's reach, or the residual's own where it stays low further (a notch
        # on a plateau); not on a consumer board, whose slow stage moves the lag on purpose
        reach = ((0.0, 0.0) if slow != (0.0, 0.0) or len(y) < MIN_LAG_READINGS else
                 lag_reach_ms(lambda lags: rss_at(lags, slow), lag, r_0=r_lag,
                              rise=lag_rise(resid, x, block=block)))
        below, above = lag_ends_ms(slack, reach)
        lag_ends = (-below, above)
        act.release()
        act.at([lag + d for d in lag_ends], slow)  # both ends in one pass
        lag_fits = [fit_rows(design(d), prior, pooled=centre, idle_weight=idle_w)
                    for d in lag_ends]
        act.release()
        prior_fits = [fit_rows(xf, prior, pooled=centre * m, idle_weight=idle_w)
                      for m in regress.prior_span(f.dp_w, centre, kinds, xf.sum(axis=0))]
        # the readings alone (no ΔP prior): where they hardly tell the short classes apart,
        # the prior decides them and moves P_idle further than its span says (regress
        # .DATA_ALONE_SCALE)
        prior_fits.append(fit_rows(xf, prior, pooled=centre, idle_weight=idle_w,
                                   scale=regress.DATA_ALONE_SCALE))
        if quiet is not None:
            # held at the quiet readings' level: it may be anywhere their values spread
            prior_fits += [fit_rows(xf, q_w, pooled=centre, idle_weight=idle_w)
                           for q_w in quiet.range_w]
        elif prior is not None and judged.hold and locked is None:
            # held because the readings do not place P_idle: it may be anywhere the sanity
            # band allows (phase-locked readings get their own interval below)
            prior_fits += [fit_rows(xf, band_w, pooled=centre, idle_weight=idle_w)
                           for band_w in sanity_band_w(prior)]
        if prior is None:  # no board value to hold P_idle at where the readings cannot
            # place it: the classes span the fits with it anywhere they allow
            prior_fits += [fit_rows(xf, p_w, pooled=centre,
                                    idle_weight=HELD_IDLE_READINGS * len(y))
                           for p_w in unheld_ends_w(judged, prior, y,
                                                    phase_locked=locked is not None)]
        if (tail_unplaced and preset is not None and prior is not None and not judged.hold
                and f.p_idle_w > prior):
            # no tail candidate could be told from the constant (every idle gap alike): the
            # fitted P_idle may hold the tail's power; the intervals span the fit with P_idle
            # at the board's value (in true watts: the sensor's gain spans it) and the tail
            # refitted where it now can be, else the classes taking the rest
            held = _held_tail_fit(x, y, prior, (s_ns, e_ns), t_k, window_ms=window_ms,
                                  lag_ms=lag, kinds=group_kind, per_row=per_row,
                                  prior_scale=pscale)
            prior_fits.append(held)
            held_p = [board_floor_w(prior, preset.gain_sigma)]
            warnings.append(tail_unplaced_warning(device, f.p_idle_w, prior))
        if slow != (0.0, 0.0) or tail is not None:
            # the boost model is itself uncertain: the fit without the stage and tail, and
            # the fits at its grid's neighbours (a real card sits between the grid's points)
            for xb in [design(0.0, plain=True), *neighbour_designs(
                    act, x, lag_ms=lag, slow=slow, tail_params=tail_params,
                    tail_col=xf[:, n_groups:] if tail is not None else None,
                    items=(s_ns, e_ns), t_ns=t_k, window_ms=window_ms)]:
                prior_fits.append(fit_rows(xb, prior, pooled=centre[:xb.shape[1]],
                                           idle_weight=idle_w))
        if sp_poll is not None and polls_locked:
            # polls locked to the sensor: each publish sits at one point of its poll interval,
            # not spread over it; the interval spans the fits with the publishes at either end
            # (placed by the delay's flips, the fit above has them at one point; the
            # poll-interval average too then, should the placing be wrong; the stamps as
            # shown only where the placing moved some: else they are the fit above's)
            # moved onto the sensor's grid (a measured delay, ~1 ms: no end of the poll
            # interval to span), the one end fit is the placing the residual passed over
            t_shown = rd.t_ns[idx]
            moved = flips is None or bool(flips.any())
            alt = rd.delay_flip_ns
            placings: tuple[tuple[I64, I64 | None], ...] = (
                (((t_shown - alt[idx], None) if alt is not None else (t_shown, sp_poll)),)
                if on_grid else
                ((t_shown - sp_poll, None), *(((t_shown, None),) if moved else ()),
                 *(() if flips is None else ((t_shown, sp_poll),))))
            for t_end, sp_end in placings:
                lag_e, tau_e = (placing.passed_over  # the one end fit: fitted when weighed
                                if on_grid and placing is not None and same_window else
                                fit_lag_response(busy, t_end, y, window_ms, regress.quick_rss,
                                                 spread_ns=sp_end))
                prior_fits.append(fit_rows(
                    window_fractions(busy, t_end, window_ms, lag_e, tau_e, spread_ns=sp_end),
                    prior, pooled=centre[:n_groups], idle_weight=idle_w))
        lag_dp = np.array([e.dp_w[:n_groups] for e in lag_fits])
        prior_dp = np.array([e.dp_w[:n_groups] for e in prior_fits])
        end_p = [e.p_idle_w for e in lag_fits + prior_fits] + held_p
        if degenerate_w is not None:  # held at the board's value: the readings said this
            end_p.append(degenerate_w)
        # too few readings, windows busy throughout or phase lock, and no board value
        end_p += unheld_ends_w(judged, prior, y, phase_locked=locked is not None)
        boot_block = max(1, block // per_row)  # the bootstrap's block, in rows
        # a short run: resampled in shorter blocks, its spread scaled by Student's t for the
        # few independent seconds it holds (boot_blocks)
        p_boot, dp_boot = regress.bootstrap(
            xfb, yb, prior, n_boot=n_boot, pooled=centre, idle_weight=idle_w, per_row=per_row,
            prior_scale=pscale,
            block=resample_block(len(yb), boot_block, floor_rows(window_ms, period_ms,
                                                                 per_row)))
        dp_boot = dp_boot[:, :n_groups]
        p_idle, dp = f.p_idle_w, f.dp_w[:n_groups]
        t_scale = small_sample_scale(len(yb), boot_block)
        said_scale = short_run_scale(t_scale) if judged.few is None else None
        if said_scale is not None:  # (too few readings has its own line, above)
            warnings.append(short_run_warning(device, len(yb), boot_block,
                                              boot_block * per_row * period_ms * 1e-3,
                                              said_scale))
        dp_boot = np.maximum(dp + t_scale * (dp_boot - dp), 0.0)
        p_boot = np.maximum(p_idle + t_scale * (p_boot - p_idle), 0.0)
        rms = readings_rms(f)
        bound_up = bound_upper_w(xfb, yb, f.dp_w, rms_w=f.rms_w, p_idle_w=p_idle,
                                 block=boot_block, idle_weight=idle_w / per_row)[:n_groups]
        if tail is not None:
            tail_j = float(f.dp_w[n_groups]) * tail_energy_s(tail[0], tail[1], tail[2],
                                                              win[0], win[1])
        window_s = (win[1] - win[0]) * 1e-9
        group_time_s = g_c_time.sum(axis=1)
        blind = (not judged.unplaced  # (busy throughout says why: the readings see it all)
                 and blind_to_work(np.asarray(dp, np.float64), group_time_s, window_s, len(y)))
        # the lag at its search's edge (not where a slow stage refits it past the grid on
        # purpose, nor where busy-throughout windows leave it unplaced and say so)
        lag_lost = (len(y) >= MIN_LAG_READINGS and slow == (0.0, 0.0)
                    and not judged.unplaced and lag_at_edge(lag, tau))
        if locked is not None or blind:  # the counter knows the total the readings cannot
            # readings that show none of the work fit no power to spread the counter's by:
            # equal power per busy second (their split is unknown either way)
            fit_dp = np.ones(n_groups) if blind else np.asarray(dp, np.float64)
            fitted_j = float(fit_dp @ group_time_s)
            measured_j = counter_energy_j(trace, device, win[0], win[1])
            k = counter_scale(fitted_j, measured_j, p_idle * (win[1] - win[0]) * 1e-9 + tail_j)
            if k is not None:
                dp, dp_boot, lag_dp, prior_dp = fit_dp * k, dp_boot * k, lag_dp * k, prior_dp * k
                warnings.append(blind_anchor_warning(device, fitted_j * k) if blind
                                else anchor_warning(device, k, fitted_j))
            elif locked is not None:
                warnings.append(unanchored_warning(device, measured_j))
            if blind:
                cap_w = max(blind_cap_w(preset, p_idle), k if k is not None else 0.0)
                bound_up = np.full(n_groups, cap_w)
                share = float(group_time_s.sum()) / window_s
                if other is None:
                    warnings.append(blind_warning(device, share, cap_w,
                                                  anchored=k is not None))
                every_class_why = blind_why(share)
        exposure = x.sum(axis=0)
    elif len(y) >= 1:  # power but no activity: everything is idle
        p_idle = float(np.mean(y))
        dp = np.zeros(n_groups)
        lag_dp = prior_dp = np.zeros((2, n_groups))
        end_p = []
        p_boot, dp_boot = np.full(max(n_boot, 1), p_idle), np.zeros((max(n_boot, 1), n_groups))
        rms = float(np.std(y))
        x = np.zeros((len(y), n_groups))
        exposure = np.zeros(n_groups)
    else:
        # no usable reading: idle at the board's value (or, with no board value, the readings'
        # median, an upper bound), known only to the engine's sanity band around it
        p_idle = (0.0 if rd.field is None or not len(rd.power_w) else  # no power: times only
                  prior if prior is not None else float(np.median(rd.power_w)))
        dp = np.zeros(n_groups)
        lag_dp = prior_dp = np.zeros((2, n_groups))
        end_p = ([] if p_idle == 0.0 else
                 list(sanity_band_w(p_idle)) if prior is not None
                 else [0.0, p_idle])
        p_boot, dp_boot = np.zeros(1), np.zeros((1, n_groups))
        rms = 0.0
        x = np.zeros((0, n_groups))
        exposure = np.zeros(n_groups)
    has_power = rd.field is not None
    class_dyn = np.asarray(dp, np.float64) @ g_c_time if n_cls else np.zeros(0)
    boot_dyn = dp_boot @ g_c_time if n_cls else np.zeros((1, 0))
    ci = np.percentile(boot_dyn, [5.0, 95.0], axis=0).T if n_cls else np.zeros((0, 2))
    gain_sigma = preset.gain_sigma if preset is not None else GAIN_SIGMA
    ci = _with_gain(ci, class_dyn, gain_sigma)
    if n_cls:  # lag known to ±LAG_SLACK_MS, prior centre to its spread: cover both ends
        ends = np.vstack([lag_dp, prior_dp]) @ g_c_time
        ci = np.column_stack([np.minimum(ci[:, 0], ends.min(axis=0)),
                              np.maximum(ci[:, 1], ends.max(axis=0))])
    if bound_up is not None and n_cls:  # groups held at ΔP = 0: what the readings allow
        ci[:, 1] = np.maximum(ci[:, 1], bound_up @ g_c_time)
    if locked is not None and n_cls:  # the readings do not split the classes
        ci = np.column_stack(locked_interval(ci[:, 0], ci[:, 1], class_dyn))
    clusters = _clusters(x, exposure) if has_power else []
    if every_class_why is None and lag_lost:
        warnings.append(lag_edge_warning(device, lag, tau))
        every_class_why = lag_edge_why(lag, tau)
    if every_class_why is not None:  # (the readings show none of the work, or the lag is lost)
        power_why = _with_reason(power_why, np.ones(n_cls, bool), every_class_why)
    elif has_power and len(y) >= MIN_JUDGED and n_cls:  # one class the readings show nothing of
        unseen = (np.asarray(dp, np.float64)[np.asarray(group)] <= AT_BOUND_W) & (class_time_s > 0)
        power_why = _with_reason(power_why, unseen, UNSEEN_WHY)
    resolvable, cluster, why = class_verdicts(
        dyn_j=class_dyn, ci_j=ci, group=group,
        pooled_group=MAX_GROUPS if n_groups > MAX_GROUPS else -1, g_c_time_s=g_c_time,
        exposure=exposure, clusters=clusters, has_power=has_power, window_ms=window_ms,
        held_idle=(None if degenerate_w is None else
                   (degenerate_w, board_w if board_w is not None else p_idle, p_idle)),
        phase_locked=locked, idle_unplaced=unplaced_reason, power_why=power_why,
        short_run=said_scale,
        consumer_why=("consumer-card boost: the fitted slow stage and tail are an approximate "
                      "model; the interval spans the fits without them and one grid step away"
                      if preset is not None and preset.consumer_boost else None))
    item_dyn, item_energy = _item_energies(np.asarray(dp, np.float64), item_group, dur_s,
                                           p_idle, idle_share_s(s_ns, e_ns, origin))
    names = tuple(tuple(items.labels[c] for c in range(n_cls) if int(group[c]) in comp)
                  for comp in clusters)
    return DeviceResult(
        device=device, name=_device_name(trace, device),
        model=preset.key if preset is not None else "unknown",
        sensor=Sensor(field, period_ms if has_power else 0.0, window_ms if has_power else 0.0,
                      lag if has_power else 0.0, source),
        p_idle_w=p_idle,
        p_idle_ci_w=p_idle_interval(p_idle, (float(np.percentile(p_boot, 5)),
                                             float(np.percentile(p_boot, 95))),
                                    end_p, gain_sigma),
        items=items, class_group=group, group_dp_w=np.asarray(dp, np.float64),
        class_dynamic_j=class_dyn, class_ci_j=ci, class_resolvable=tuple(resolvable),
        class_cluster=tuple(cluster), class_why=tuple(why), item_dynamic_j=item_dyn,
        item_energy_j=item_energy, n_readings=len(y), rms_w=rms, response_ms=tau, busy=busy,
        clusters=names, item_group=item_group, slow_response=slow, boost_tail_j=tail_j,
        lag_profile_ms=profile,
        class_calls=units.class_calls, class_time_s=class_time_s,
        # the items' sum and ΔP × the class's time round differently: a class's energy is
        # never below its dynamic part (at P_idle = 0 it fell 1e-16..1e-13 J short)
        class_energy_j=np.maximum(np.bincount(key, weights=item_energy, minlength=n_cls),
                                  class_dyn).astype(np.float64),
    )


def _item_energies(dp_w: F64, item_group: I32, dur_s: F64, p_idle_w: float, share_s: F64
                   ) -> tuple[F64, F64]:
    """Each item's dynamic energy ``ΔP_g × duration`` and full energy (dynamic + ``P_idle`` ×
    time share), the latter written over ``share_s`` (the caller's, fresh: one array less)."""
    dyn = np.take(dp_w, item_group)
    np.multiply(dyn, dur_s, out=dyn)
    full = np.multiply(p_idle_w, share_s, out=share_s)
    np.add(dyn, full, out=full)
    return dyn, full


def _idle_power_w(results: tuple[DeviceResult, ...], device: I64 | np.ndarray) -> F64:
    """Each idle gap's ``P_idle`` (its device's; 0 for a device without a result)."""
    p = np.zeros(len(device), np.float64)
    for r in results:
        p[device == r.device] = r.p_idle_w
    return p


def attribute_arrays(trace: Trace, *, gpu: str | None = None, n_boot: int = N_BOOT
                     ) -> Arrays:
    """Per-record energies (kernels, copies, memsets aligned with the trace's rows) and idle
    intervals with cause and energy."""
    trace, warnings = repaired(trace)  # (the lines saying what was repaired start the list)
    implausible = implausible_readings(trace.power)
    if implausible:
        warnings.append(implausible_warning(implausible))
    win = trace_window(trace)
    if win is None:
        if len(trace.power):
            win = (int(trace.power.t_ns.min()), int(trace.power.t_ns.max()))
        else:
            win = (0, 0)
    devs = device_indices(trace)
    busy_devs = set(work_devices(trace))
    untraced = [d for d in devs if d not in busy_devs]
    if busy_devs and untraced:
        # power readings of a GPU the trace has no work on (nvidia-smi logs every GPU, the
        # profiler one process's): nothing says what ran there, so it is not this run's
        warnings.append(untraced_warning(untraced))
        devs = [d for d in devs if d in busy_devs]
    for d in devs:
        warnings += timing_warnings(d, kernel_timing(trace.kernels, d))
        override = model_override_warning(trace, d, gpu)
        if override is not None:
            warnings.append(override)
    # the log's GPUs with readings but no work (device_match, the no-readings hint): where
    # some GPU has work, device_indices' others are exactly those with readings
    others = untraced if busy_devs else []

    @functools.cache
    def others_readings() -> Mapping[int, tuple[I64, F64]]:
        """The readings of the log's GPUs without work, each as its own board reads them,
        worked out once (on the first device that needs them; none usable is an answer)."""
        read: dict[int, tuple[I64, F64]] = {}
        for e in others:
            o = readings_for(trace, e, _preset(trace, e, gpu))
            if len(o.t_ns):
                read[e] = (o.t_ns, o.power_w)
        return read

    results = tuple(_attribute_device(trace, d, win, gpu=gpu, n_boot=n_boot,
                                      warnings=warnings, untraced=others,
                                      untraced_readings=others_readings) for d in devs)
    empty = [r.device for r in results if not len(r.items) and r.sensor.field == "none"]
    if empty:
        warnings.append(f"{_gpu_list(empty)}: in the trace's device list, but no kernel, copy "
                        "or power reading; nothing to attribute there")
    if len(trace.kernels) == 0 and (not devs or len(empty) < len(devs)):  # else: the line above
        warnings.append("the trace has no kernels")
    # a GPU with nothing to attribute has no idle either: the profiler saw a context, not a
    # run there (8 GPUs x the window of host_stall on a trace of one process's ranges)
    idle = idle_intervals(trace, win[0], win[1], [d for d in devs if d not in empty])
    idle_e = _idle_power_w(results, idle.device) * idle.duration_ns.astype(np.float64) * 1e-9
    out: dict[int, tuple[F64, F64]] = {}
    for src, batch in ((0, trace.kernels), (1, trace.copies), (2, trace.memsets)):
        # items come kernels, then copies, then memsets (items_for_device), rows ascending
        spans: list[tuple[DeviceResult, int, int]] = []
        for r in results:
            a, b = np.searchsorted(r.items.source, np.array([src, src + 1], r.items.source.dtype))
            spans.append((r, int(a), int(b)))
        whole = [(r, a, b) for r, a, b in spans if len(batch) and b - a == len(batch)]
        if whole:  # every row of the batch is on this device, in order: its arrays, no copy
            r, a, b = whole[0]
            out[src] = (r.item_dynamic_j[a:b], r.item_energy_j[a:b])
            continue
        dyn = np.zeros(len(batch))
        full = np.zeros(len(batch))
        for r, a, b in spans:
            dyn[r.items.row[a:b]] = r.item_dynamic_j[a:b]
            full[r.items.row[a:b]] = r.item_energy_j[a:b]
        out[src] = (dyn, full)
    return Arrays(
        window_start_ns=win[0], window_end_ns=win[1],
        kernel_dynamic_j=out[0][0], kernel_energy_j=out[0][1],
        copy_dynamic_j=out[1][0], copy_energy_j=out[1][1],
        memset_dynamic_j=out[2][0], memset_energy_j=out[2][1],
        idle=idle, idle_energy_j=idle_e, devices=results,
        has_power=any(r.sensor.field != "none" for r in results),
        warnings=tuple(warnings),
    )
