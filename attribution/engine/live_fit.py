"""The live engine's small solves: columns → group sums, the bootstrap on per-block sufficient
statistics, and the ``resolvable`` verdict per class.

Owns the numerics that :mod:`attribution.engine.live` runs on its ring of per-reading rows.
The point fit is :func:`attribution.engine.regress.fit` on Gram statistics: the same prior rows
(:func:`regress.prior_system`, whose centre the caller takes per kind from
:func:`regress.pooled_by_kind_gram`, as the batch engine does), the same NNLS minimiser; the
bootstrap is the batch engine's block bootstrap re-expressed on sufficient statistics: the
readings are cut into non-overlapping blocks, each block keeps its Gram matrix ``AᵀA`` and
``Aᵀy`` (``A = [1, x]``), and a replicate is a multinomial draw of blocks, i.e. one matrix
product for all replicates and then one (groups+1)-sized NNLS each (through a Cholesky
factor, which has the same minimiser as the tall system).  Cost: independent of how many
readings the horizon holds once the block statistics are summed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.optimize import nnls

from attribution.engine import regress
from attribution.engine.build import (
    COLLINEAR,
    GAIN_SIGMA,
    MAX_GROUPS,
    _with_gain,
    clusters_from_gram,
)
from attribution.engine.verdict import class_verdicts
from attribution.model import F64, I32, I64
from attribution.presets import GpuPreset

__all__ = ["COLLINEAR", "ClassVerdict", "block_stats", "bootstrap_blocks", "bootstrap_gram",
           "design_blocks", "gram", "group_columns", "nnls_grams", "prior_gram", "solve_gram",
           "verdicts", "with_prior"]


def group_columns(x: F64, group: I32, n_groups: int, out: F64) -> None:
    """Unit columns of ``x`` summed into group columns (group −1: dropped), written into
    ``out`` (rows × groups): a group of one unit (every group but the shared last one, at
    most) is that unit's column, copied; a group of several is their sum.  (A product with
    the (units × groups) incidence matrix gives the same values, up to the order of that sum,
    at ~20x the cost with 500 units.)"""
    ran = np.flatnonzero(group[:x.shape[1]] >= 0)
    g = group[ran]
    counts = np.bincount(g, minlength=n_groups)
    single = counts[g] == 1
    gs, us = g[single], ran[single]
    order = np.argsort(gs, kind="stable")
    k = len(gs)
    if k and int(gs[order[-1]]) == k - 1:  # groups 0..k-1 (ranked groups: the usual case):
        out[:, :k] = x[:, us[order]]  # one gather into a slice (3x a scatter to columns)
    else:
        out[:, gs] = x[:, us]
    empty = np.flatnonzero(counts == 0)
    if len(empty):
        out[:, empty] = 0.0
    for k in np.flatnonzero(counts > 1).tolist():  # a product with the group's 0/1 column:
        w = np.zeros(x.shape[1])  # ~15x a gather of its columns and a sum at 450 units
        w[ran[g == k]] = 1.0
        out[:, k] = x @ w


def _nnls_gram(m: F64, v: F64) -> F64:
    """argmin ‖Ax − b‖², x ≥ 0, given only ``m = AᵀA`` and ``v = Aᵀb`` (m positive definite)."""
    return np.asarray(nnls_grams(m[None], v[None])[0], np.float64)


def nnls_grams(m: F64, v: F64) -> F64:
    """:func:`_nnls_gram` of a stack of systems (``m``: (k, n, n), ``v``: (k, n)) with one
    scaling, one Cholesky and one triangular solve for the whole stack (LAPACK runs per
    matrix, so each result is the one a call per system gives, to the bit)."""
    k, n = v.shape
    out = np.empty((k, n))
    if k == 0:
        return out
    d = np.sqrt(np.maximum(np.diagonal(m, axis1=1, axis2=2), 1e-12))
    ms = m / d[:, :, None] / d[:, None, :]
    vs = v / d
    lower = np.linalg.cholesky(ms + 1e-12 * np.eye(n))
    rhs = np.linalg.solve(lower, vs[:, :, None])[:, :, 0]
    upper = np.swapaxes(lower, 1, 2)
    for i in range(k):
        out[i], _ = nnls(upper[i], rhs[i], maxiter=50 * n)
    return np.asarray(out / d, np.float64)


def design_blocks(k: int, width: int, block: int) -> tuple[F64, int]:
    """A zeroed design buffer for ``k`` rows of ``width`` columns whose row count is a whole
    number of bootstrap blocks (the padding rows stay zero: they add nothing to any Gram
    matrix), and the number of blocks."""
    block = max(1, min(block, k))
    nb = -(-k // block) if k else 0
    return np.zeros((nb * block, width)), nb


def block_stats(a: F64, y: F64, nb: int) -> tuple[F64, F64]:
    """Per-block ``AᵀA`` (flattened) and ``Aᵀy`` of a padded design from :func:`design_blocks`
    (``y`` zero-padded alike): their sums over the blocks are the whole fit's."""
    w = a.shape[1]
    if nb == 0:
        return np.zeros((0, w * w)), np.zeros((0, w))
    a3 = a.reshape(nb, -1, w)
    gb = np.matmul(a3.transpose(0, 2, 1), a3).reshape(nb, -1)  # 4x an einsum's speed
    vb = np.einsum("bij,bi->bj", a3, y.reshape(nb, -1))
    return gb, vb


def bootstrap_blocks(gb: F64, vb: F64, p_idle_prior_w: float | None, *, n_boot: int,
                     seed: int = 0, pooled: float | F64 | None = None,
                     idle_weight: float = regress.IDLE_PRIOR_READINGS,
                     prior_scale: float = 1.0) -> tuple[F64, F64]:
    """Block-bootstrap replicates of (P_idle, ΔP) from per-block statistics
    (:func:`block_stats`): a replicate is a multinomial draw of the blocks, i.e. one matrix
    product for all replicates, then the priors (same ``pooled`` centre, ``idle_weight`` and
    ``prior_scale`` for every replicate) and one NNLS each."""
    nb, w = vb.shape
    g = w - 1
    p = np.zeros(n_boot)
    dp = np.zeros((n_boot, g))
    if nb == 0 or n_boot == 0:
        return p, dp
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(nb, np.full(nb, 1.0 / nb), size=n_boot).astype(np.float64)
    m_all = (counts @ gb).reshape(n_boot, w, w)
    v_all = counts @ vb
    if pooled is not None:  # one prior for every replicate: one stacked solve
        fixed = prior_gram(g, pooled, p_idle_prior_w, idle_weight, prior_scale)
        sols = nnls_grams(m_all + fixed[0], v_all + fixed[1])
        return sols[:, 0].copy(), sols[:, 1:].copy()
    for b in range(n_boot):
        sol = solve_gram(m_all[b], v_all[b], p_idle_prior_w, idle_weight=idle_weight,
                         prior_scale=prior_scale)
        p[b] = sol[0]
        dp[b] = sol[1:]
    return p, dp


def bootstrap_gram(x: F64, y: F64, p_idle_prior_w: float | None, *, n_boot: int, block: int,
                   seed: int = 0, pooled: float | F64 | None = None,
                   idle_weight: float = regress.IDLE_PRIOR_READINGS,
                   prior_scale: float = 1.0) -> tuple[F64, F64]:
    """Block-bootstrap replicates of (P_idle, ΔP) as :func:`regress.bootstrap` draws them
    (same ``pooled`` centre, ``idle_weight`` and ``prior_scale`` for every replicate), with
    non-overlapping blocks and the fit done on summed block statistics."""
    k, g = x.shape
    a, nb = design_blocks(k, g + 1, block)
    a[:k, 0] = 1.0
    a[:k, 1:] = x
    yy = np.zeros(len(a))
    yy[:k] = y
    gb, vb = block_stats(a, yy, nb)
    return bootstrap_blocks(gb, vb, p_idle_prior_w, n_boot=n_boot, seed=seed, pooled=pooled,
                            idle_weight=idle_weight, prior_scale=prior_scale)


def gram(x: F64, y: F64) -> tuple[F64, F64]:
    """``AᵀA`` and ``Aᵀy`` of ``A = [1, x]``."""
    a = np.column_stack([np.ones(len(y)), x])
    return np.asarray(a.T @ a, np.float64), np.asarray(a.T @ y, np.float64)


def prior_gram(g: int, pooled: float | F64, p_idle_prior_w: float | None,
               idle_weight: float = regress.IDLE_PRIOR_READINGS,
               prior_scale: float = 1.0) -> tuple[F64, F64]:
    """``(A_pᵀA_p, A_pᵀb_p)`` of the batch fit's prior rows (:func:`regress.prior_system`)."""
    a_p, b_p = regress.prior_system(g, pooled, p_idle_prior_w, idle_weight=idle_weight,
                                    prior_scale=prior_scale)
    return np.asarray(a_p.T @ a_p, np.float64), np.asarray(a_p.T @ b_p, np.float64)


def solve_gram(m: F64, v: F64, p_idle_prior_w: float | None, *,
               pooled: float | F64 | None = None,
               idle_weight: float = regress.IDLE_PRIOR_READINGS,
               prior: tuple[F64, F64] | None = None, prior_scale: float = 1.0) -> F64:
    """:func:`regress.fit` from ``gram(x, y)`` alone -- the same prior rows
    (:func:`regress.prior_system`: ``pooled`` centre, default the all-busy pooled ΔP,
    ``idle_weight`` and the ΔP prior's ``prior_scale``; or ``prior`` = :func:`prior_gram`
    already built), the same NNLS minimiser: ``[P_idle, ΔP_1, …]``."""
    return _nnls_gram(*with_prior(m, v, p_idle_prior_w, pooled=pooled,
                                  idle_weight=idle_weight, prior=prior,
                                  prior_scale=prior_scale))


def with_prior(m: F64, v: F64, p_idle_prior_w: float | None, *,
               pooled: float | F64 | None = None,
               idle_weight: float = regress.IDLE_PRIOR_READINGS,
               prior: tuple[F64, F64] | None = None,
               prior_scale: float = 1.0) -> tuple[F64, F64]:
    """The Gram system :func:`solve_gram` minimises: ``gram(x, y)`` plus the prior rows'
    (arguments as :func:`solve_gram`'s), for a caller that stacks several into
    :func:`nnls_grams`."""
    if prior is None:
        if pooled is None:
            pooled = regress.pooled_fit_gram(m, v)
        prior = prior_gram(len(v) - 1, pooled, p_idle_prior_w, idle_weight, prior_scale)
    return m + prior[0], v + prior[1]


@dataclasses.dataclass(frozen=True, slots=True)
class ClassVerdict:
    ci_j: F64  # (classes, 2)
    resolvable: tuple[bool, ...]
    cluster: tuple[str | None, ...]
    why: tuple[str, ...]
    clusters: tuple[tuple[int, ...], ...]  # class indices per cluster


def verdicts(*, dyn_j: F64, ci_j: F64, group: I32, n_groups: int, gram_g: F64,
             g_c_time_s: F64, window_ms: float, preset: GpuPreset | None, has_power: bool,
             computed: I64, held_idle: tuple[float, float] | None = None,
             boost_modelled: bool = False, phase_lock: float | None = None,
             idle_unplaced: str | None = None) -> ClassVerdict:
    """The batch engine's ``resolvable`` rules applied to the live fit, per class over its
    units (``g_c_time_s``: groups × classes busy time; ``group``: each class's main group;
    ``gram_g``: the Gram matrix of ``[1, group activity]`` over the horizon's readings, whose
    first row is each group's exposure and which gives the collinear clusters).
    ``computed`` marks the classes whose interval the last bootstrap covered (newer ones are
    not resolvable until the next interval refresh); ``held_idle`` = (fitted, held) P_idle
    when the fit was degenerate and P_idle was held at the board's value (no class is then
    resolvable); ``boost_modelled``: the consumer slow stage and tail are in the fit;
    ``phase_lock``: the readings' spread ratio when they are phase-locked (``aliasing``);
    ``idle_unplaced``: the reason when the readings' windows are busy throughout
    (``idle_place``)."""
    n_cls = len(dyn_j)
    ci = _with_gain(ci_j, dyn_j, preset.gain_sigma if preset is not None else GAIN_SIGMA)
    m = gram_g[:n_groups + 1, :n_groups + 1]  # without a boost tail column
    exposure = m[0, 1:].copy() if len(m) else np.zeros(n_groups)
    comps = clusters_from_gram(m, exposure) if has_power else []
    consumer = preset is not None and preset.consumer_boost
    res, clu, why = class_verdicts(
        dyn_j=dyn_j, ci_j=ci, group=group,
        pooled_group=MAX_GROUPS if n_groups > MAX_GROUPS else -1, g_c_time_s=g_c_time_s,
        exposure=exposure, clusters=comps, has_power=has_power, window_ms=window_ms,
        held_idle=(None if held_idle is None else
                   (held_idle[0], preset.active_idle_w if preset is not None else held_idle[1],
                    held_idle[1])),
        consumer_why=(None if not consumer else
                      "consumer-card boost: the fitted slow stage and tail are an approximate "
                      "model" if boost_modelled else
                      "consumer-card boost: the live engine does not model the slow stage and "
                      "tail (the batch engine fits them approximately)"),
        computed=np.asarray(computed, bool), phase_locked=phase_lock,
        idle_unplaced=idle_unplaced)
    members = tuple(tuple(c for c in range(n_cls) if int(group[c]) in comp) for comp in comps)
    return ClassVerdict(ci, tuple(res), tuple(clu), tuple(why), members)
