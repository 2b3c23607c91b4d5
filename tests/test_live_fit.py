"""The live fit's sufficient-statistics numerics against the direct forms they replace.

The live engine fits from Gram matrices only (``attribution.engine.live_fit``): its solves are
stacked (one Cholesky and triangular solve for a tick's systems), its total Gram matrix is the
sum of the bootstrap's block statistics, and its collinear clusters are read off the group
Gram matrix instead of the (readings × groups) activity.  Each must give what the direct form
gives: the same NNLS minimiser to the bit, the same Gram matrix to rounding, the same
clusters as the batch engine's rule.
"""

from __future__ import annotations

import numpy as np
import pytest

from attribution.engine import regress
from attribution.engine.build import _clusters, clusters_from_gram
from attribution.engine.live_fit import (
    block_stats,
    design_blocks,
    gram,
    nnls_grams,
    with_prior,
)


def _systems(rng: np.random.Generator, k: int, g: int) -> tuple[np.ndarray, np.ndarray]:
    ms, vs = [], []
    for _ in range(k):
        x = rng.random((200, g)) * rng.random(g)
        # some true ΔP negative, so the bound is active in some systems
        y = 50.0 + x @ rng.uniform(-80.0, 300.0, g) + rng.normal(0.0, 5.0, 200)
        m, v = with_prior(*gram(x, y), 55.0)
        ms.append(m)
        vs.append(v)
    return np.array(ms), np.array(vs)


def test_stacked_solves_are_the_single_solves_to_the_bit() -> None:
    rng = np.random.default_rng(3)
    ms, vs = _systems(rng, 9, 7)
    stacked = nnls_grams(ms, vs)
    for i in range(len(ms)):
        single = nnls_grams(ms[i:i + 1], vs[i:i + 1])[0]
        assert np.array_equal(stacked[i], single)
    assert (stacked >= 0).all()
    assert (stacked == 0).any()  # the bound was active somewhere: the NNLS path ran
    assert nnls_grams(ms[:0], vs[:0]).shape == (0, ms.shape[1])


def test_stacked_solve_is_the_constrained_least_squares_minimiser() -> None:
    rng = np.random.default_rng(4)
    ms, vs = _systems(rng, 3, 5)
    for m, v, sol in zip(ms, vs, nnls_grams(ms, vs), strict=True):
        # KKT: gradient m·x − v is zero on the free unknowns and ≥ 0 on the bound ones
        grad = m @ sol - v
        free = sol > 1e-9
        assert np.allclose(grad[free], 0.0, atol=1e-6 * np.abs(v).max())
        assert (grad[~free] >= -1e-6 * np.abs(v).max()).all()


@pytest.mark.parametrize(("k", "block"), [(97, 10), (100, 10), (5, 10), (1, 1), (0, 4)])
def test_block_statistics_sum_to_the_gram_matrix(k: int, block: int) -> None:
    rng = np.random.default_rng(k)
    x = rng.random((k, 4))
    y = rng.random(k) * 100.0
    a, nb = design_blocks(k, 5, block)
    assert len(a) >= k and len(a) == nb * max(1, min(block, k)) and not a.any()
    a[:k, 0] = 1.0
    a[:k, 1:] = x
    yy = np.zeros(len(a))
    yy[:k] = y
    gb, vb = block_stats(a, yy, nb)
    assert gb.shape == (nb, 25) and vb.shape == (nb, 5)
    m, v = gram(x, y)
    assert np.allclose(gb.sum(axis=0).reshape(5, 5), m, rtol=1e-12, atol=1e-9)
    assert np.allclose(vb.sum(axis=0), v, rtol=1e-12, atol=1e-9)


def test_clusters_from_the_gram_matrix_are_the_batch_rule() -> None:
    rng = np.random.default_rng(5)
    n = 400
    base = rng.random(n)
    x = np.column_stack([
        base,                                   # 0 ┐ collinear with each other
        0.5 * base + rng.normal(0, 0.01, n),    # 1 ┘
        rng.random(n),                          # 2 alone
        np.zeros(n),                            # 3 never ran
        np.full(n, 0.25),                       # 4 constant: no variance, no correlation
        rng.random(n),                          # 5 ┐ collinear, but 6 has no exposure
        rng.random(n),                          # 6 ┘ (made so below)
        0.3 * base + 0.1,                       # 7 collinear with 0 and 1
    ])
    x[:, 6] = x[:, 5] * 0.9
    exposure = x.sum(axis=0)
    exposure[6] = 0.0
    m, _ = gram(x, rng.random(n))
    got = clusters_from_gram(m, exposure)
    assert sorted(map(sorted, got)) == sorted(map(sorted, _clusters(x, exposure)))
    assert sorted(map(sorted, got)) == [[0, 1, 7]]
    # too few readings or groups: none, as the batch rule
    assert clusters_from_gram(gram(x[:2], np.ones(2))[0], exposure) == []
    assert clusters_from_gram(gram(x[:, :1], rng.random(n))[0], exposure[:1]) == []


def _rows(a: np.ndarray) -> list[tuple[float, ...]]:
    """The rows of ``a`` as a sorted list (NaN as −1): equality up to row order."""
    return sorted(tuple(r) for r in np.nan_to_num(a, nan=-1.0).tolist())


@pytest.mark.parametrize("seed", range(4))
def test_boot_pool_ring_keeps_the_last_replicates(seed: int) -> None:
    """The pool's ring holds exactly the last ``n_boot`` replicates (units newer than a
    replicate NaN in it), whatever the order it keeps them in: compared with a plain list."""
    from attribution.engine.live_clamp import UnitMap
    from attribution.engine.live_solve import BootPool

    rng = np.random.default_rng(seed)
    pool, model = BootPool(), []
    units = 2
    n_boot = 7 if seed < 2 else 3
    for step in range(40):
        units += int(rng.random() < 0.2)
        k = 1 if step == 25 else int(rng.integers(0, 9))  # (the resize step: one new)
        p = rng.random(k)
        d = rng.random((k, units))
        if step == 25:
            n_boot += 4 if seed % 2 else -2  # a resize keeps the newest
        pool.add(p, d, n_boot)
        model += list(zip(p.tolist(), d, strict=True))
        model = model[-n_boot:]
        assert len(pool) == len(model)
        if not model:
            continue
        time_s = rng.random(units) + 0.1
        um = UnitMap(unit_class=np.arange(units), clamped=np.zeros(units, bool),
                     labels=tuple(f"kernel:k{u}" for u in range(units)),
                     source=(0,) * units, key=tuple((f"k{u}", "") for u in range(units)))
        want = np.full((len(model), units), np.nan)
        for i, (_, row) in enumerate(model):
            want[i, :len(row)] = row * time_s[:len(row)]
        got = pool.class_energy(time_s, um)
        assert _rows(got) == _rows(want)
        lo, hi = np.percentile([q for q, _ in model], [5.0, 95.0])
        mid = (lo + hi) / 2
        assert pool.p_idle_ci(mid, [], 0.0) == pytest.approx((lo, hi), rel=1e-12)
        # the end fits stretch it; the board's gain widens it (in quadrature)
        assert pool.p_idle_ci(mid, [lo - 5.0, hi + 1.0], 0.0) == pytest.approx(
            (lo - 5.0, hi + 1.0), rel=1e-12)
        g_lo, g_hi = pool.p_idle_ci(mid, [], 0.02)
        assert g_lo < lo and g_hi > hi
        assert mid - g_lo >= regress.Z90 * 0.02 * mid * (1 - 1e-12)
        assert g_hi - mid >= regress.Z90 * 0.02 * mid * (1 - 1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_units_to_classes_is_the_incidence_product(seed: int) -> None:
    """Units → classes by layers equals the dense incidence product, to the bit, for a class
    table with clamped units (two units per class), arrays narrower than the table, and
    stacked rows."""
    from attribution.engine.live_clamp import UnitMap

    rng = np.random.default_rng(seed)
    n_cls = 9
    unit_class = np.r_[np.arange(n_cls), rng.choice(n_cls, 4, replace=False)]  # + clamped
    rng.shuffle(unit_class)
    um = UnitMap(unit_class=unit_class, clamped=np.zeros(len(unit_class), bool),
                 labels=tuple(f"kernel:k{c}" for c in range(n_cls)), source=(0,) * n_cls,
                 key=tuple((f"k{c}", "") for c in range(n_cls)))
    onehot = np.zeros((len(unit_class), n_cls))
    onehot[np.arange(len(unit_class)), unit_class] = 1.0
    for shape in [(len(unit_class),), (5, len(unit_class)), (3, len(unit_class) - 3)]:
        x = rng.normal(0.0, 1e3, shape)
        want = x @ onehot[:shape[-1]]
        got = um.to_classes(x)
        assert got.shape == want.shape and np.array_equal(got, want)


def test_group_columns_are_the_incidence_product() -> None:
    """Units → groups (33 groups: 32 of one unit, the last shared; units in no group) equals
    the product with the incidence matrix: to the bit for single-unit groups, to rounding for
    the shared one."""
    from attribution.engine.live_fit import group_columns

    rng = np.random.default_rng(9)
    n_units, n_groups = 60, 33
    group = np.full(n_units, -1, np.int32)
    order = rng.permutation(n_units)[:50]
    group[order] = np.minimum(np.arange(50), n_groups - 1)
    x = rng.random((40, n_units))
    onehot = np.zeros((n_units, n_groups))
    onehot[np.flatnonzero(group >= 0), group[group >= 0]] = 1.0
    want = x @ onehot
    out = np.full((40, n_groups), np.nan)
    group_columns(x, group, n_groups, out)
    assert np.array_equal(out[:, :-1], want[:, :-1])
    assert np.allclose(out[:, -1], want[:, -1], rtol=1e-13)
    # a group with no unit in an array reduced before its units existed: zero
    out2 = np.full((40, n_groups), np.nan)
    group_columns(x[:, :10], group, n_groups, out2)
    assert np.array_equal(out2, x[:, :10] @ onehot[:10])


@pytest.mark.parametrize("seed", range(4))
def test_pool_percentiles_are_numpys_per_column(seed: int) -> None:
    """The interval's 5/95 % per class over the replicates that have it equal
    ``np.percentile`` of each column's finite values, to the bit (columns full, partly NaN,
    all NaN; ties; one replicate)."""
    from attribution.engine.live_solve import _percentiles

    rng = np.random.default_rng(seed)
    n_rep = int(rng.choice([1, 2, 7, 100]))
    e = rng.normal(50.0, 10.0, (n_rep, 12))
    e[:, 3] = 4.0  # ties
    e[rng.random(e.shape) < 0.3] = np.nan
    e[:, 5] = np.nan
    lo, hi, seen = _percentiles(e)
    for c in range(e.shape[1]):
        v = e[np.isfinite(e[:, c]), c]
        assert seen[c] == len(v)
        if len(v):
            want = np.percentile(v, [5.0, 95.0])
            assert lo[c] == want[0] and hi[c] == want[1]
        else:
            assert np.isnan(lo[c]) and np.isnan(hi[c])
