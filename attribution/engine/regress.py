"""Bounded non-negative regression of power readings on class activity, and its bootstrap.

Owns the fit ``power_w[k] ≈ P_idle + Σ_g ΔP_g · x[k, g]`` where ``x[k, g]`` is class g's busy
time inside reading k's sensor window divided by the window length.  All unknowns are
non-negative (``scipy.optimize.nnls`` on an augmented system).  Two weak priors keep
under-determined classes sane: each ``ΔP_g`` is pulled toward a centre -- the pooled ``ΔP`` of
all busy time, or per group (:func:`pooled_by_kind`: the pooled ΔP of the group's kind, kernels
or copies, so a low-power copy is not dragged toward the kernels' power) -- with the weight of
``PRIOR_READINGS`` readings fully occupied by g, and ``P_idle`` toward the preset's
active-idle power (when known) with the weight of ``IDLE_PRIOR_READINGS`` idle readings
(:func:`prior_system` builds these rows; the live engine adds them to its Gram matrix).  Also
owns the moving-block bootstrap over readings and the Gram-statistics forms of the prior
centres (:func:`pooled_fit_gram`, :func:`pooled_by_kind_gram`), and the measured uncertainty of
those centres (:func:`prior_span`), which the batch and the live engine fold into their
intervals.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.optimize import nnls

from attribution.model import F64, I64

PRIOR_READINGS = 0.005
"""Weight of the ΔP prior, in readings fully occupied by the class (Σ x² units).  Measured
(docs/accuracy.md, "Prior weight"): at 0.02 the prior decided the short classes wherever
long sensor windows smooth the activity (W = T = 100 ms), and P_idle paid for it."""
PRIOR_REF_S = 20.0
"""The run length below which the ΔP prior weighs in proportion (:func:`prior_scale_for`)."""
IDLE_PRIOR_READINGS = 0.5
"""Weight of the P_idle prior, in idle readings."""
PRIOR_SPAN_UNKNOWN = (0.0, 2.0)
"""Prior-centre multiples refitted when the spread of ΔP within kinds cannot be measured (no
kind has two well-exposed groups): an uncertainty as large as the centre itself."""
SPREAD_MIN_EXPOSURE = 3.0
"""Groups with less exposure (reading-equivalents) do not enter the measured spread: their
fitted ΔP is the prior's as much as the data's."""
Z90 = 1.645


@dataclasses.dataclass(frozen=True, slots=True)
class Fit:
    p_idle_w: float
    dp_w: F64  # ΔP per group
    rms_w: float  # residual RMS over the readings
    pooled_dp_w: float


def pooled_fit(x: F64, y: F64) -> tuple[float, float]:
    """``y ≈ a + m · Σ_g x_g`` by least squares, both clamped to ≥ 0."""
    s = x.sum(axis=1)
    if len(y) < 2 or float(np.ptp(s)) < 1e-9:
        return float(max(np.mean(y) if len(y) else 0.0, 0.0)), 0.0
    a_mat = np.column_stack([np.ones_like(s), s])
    coef = np.linalg.lstsq(a_mat, y, rcond=None)[0]
    return float(max(coef[0], 0.0)), float(max(coef[1], 0.0))


def _kind_slope(ata: F64, aty: F64) -> float:
    """Last coefficient of the (lightly ridged) normal equations ``ata · c = aty``, ≥ 0."""
    lam = 1e-6 * float(np.trace(ata)) / ata.shape[0]
    coef = np.linalg.solve(ata + lam * np.eye(ata.shape[0]), aty)
    return max(float(coef[-1]), 0.0)


def pooled_by_kind(x: F64, y: F64, kind: I64) -> F64:
    """Prior centre per group: for each kind j (e.g. kernels, copies), the ΔP of kind j's
    pooled activity ``Σ_{g: kind_g = j} x_g`` in a least-squares fit where every group of the
    other kinds keeps its own column (so the pooled ΔP of the copies is not asked to absorb
    the kernels' differences), clamped to ≥ 0.  One kind only, or a kind the readings cannot
    separate: the all-busy pooled ΔP of :func:`pooled_fit`."""
    g = x.shape[1]
    _, allp = pooled_fit(x, y)
    out = np.full(g, allp)
    kinds = np.unique(kind) if g else np.zeros(0, np.int64)
    if len(kinds) < 2:
        return out
    for j in kinds:
        mine = kind == j
        s = x[:, mine].sum(axis=1)
        a_mat = np.column_stack([np.ones(len(y)), x[:, ~mine], s])
        if len(y) < a_mat.shape[1] + 2 or float(np.ptp(s)) < 1e-9:
            continue
        out[mine] = _kind_slope(a_mat.T @ a_mat, a_mat.T @ y)
    return out


def pooled_fit_gram(m: F64, v: F64) -> float:
    """:func:`pooled_fit`'s slope (clamped ≥ 0) from ``m = AᵀA``, ``v = Aᵀy`` of
    ``A = [1, x]`` alone (0 when the busy sum does not vary)."""
    n = m[0, 0]
    s1 = float(m[0, 1:].sum())
    s2 = float(m[1:, 1:].sum())
    sy = float(v[1:].sum())
    den = n * s2 - s1 * s1
    if n < 2 or den <= 1e-12 * max(n * s2, 1e-300):
        return 0.0
    return float(max((n * sy - s1 * float(v[0])) / den, 0.0))


def pooled_by_kind_gram(m: F64, v: F64, kind: I64) -> F64:
    """:func:`pooled_by_kind` from the Gram statistics of ``[1, x]`` alone (for fits that
    keep only ``AᵀA`` and ``Aᵀy``): each kind's design ``[1, x_other, Σ x_mine]`` is a linear
    map ``T`` of ``[1, x]``, so its normal equations are ``TᵀmT``, ``Tᵀv``."""
    g = len(v) - 1
    out = np.full(g, pooled_fit_gram(m, v))
    kinds = np.unique(kind) if g else np.zeros(0, np.int64)
    if len(kinds) < 2:
        return out
    n = float(m[0, 0])
    for j in kinds:
        mine = kind == j
        others = np.flatnonzero(~mine)
        t = np.zeros((g + 1, len(others) + 2))
        t[0, 0] = 1.0
        t[others + 1, np.arange(1, len(others) + 1)] = 1.0
        t[np.flatnonzero(mine) + 1, -1] = 1.0
        ata = t.T @ m @ t
        var_s = n * ata[-1, -1] - ata[0, -1] ** 2  # n² × variance of the pooled activity
        if n < t.shape[1] + 2 or var_s <= 1e-12 * max(n * ata[-1, -1], 1e-300):
            continue
        out[mine] = _kind_slope(ata, t.T @ v)
    return out


def prior_span(dp_w: F64, centre_w: F64, kind: I64, exposure: F64) -> tuple[float, float]:
    """Multiples ``(1 − k, 1 + k)`` of the ΔP prior centre at which the fit is redone to put
    the prior's pull into the interval, with ``k = Z90 · τ`` (at most 1): ``τ`` is the measured
    relative spread of the fitted ΔP around their kind's centre, ``√mean(((ΔP_g − c_g)/c_g)²)``
    over the groups with ``exposure ≥ SPREAD_MIN_EXPOSURE`` of every kind that has at least two
    such groups (a kind of one group is centred on that group's own fit: no spread to see).
    The prior says "a class draws about what its kind draws"; how far off that is, is read
    from the classes the data does determine.  None measurable: ``PRIOR_SPAN_UNKNOWN``."""
    dp_w = np.asarray(dp_w, np.float64)[:len(kind)]
    centre_w = np.asarray(centre_w, np.float64)[:len(kind)]
    ok = (np.asarray(exposure)[:len(kind)] >= SPREAD_MIN_EXPOSURE) & (centre_w > 0)
    kinds, counts = np.unique(kind[ok], return_counts=True)
    use = ok & np.isin(kind, kinds[counts >= 2])
    if not bool(use.any()):
        return PRIOR_SPAN_UNKNOWN
    rel = (dp_w[use] - centre_w[use]) / centre_w[use]
    k = min(Z90 * float(np.sqrt(np.mean(rel * rel))), 1.0)
    return 1.0 - k, 1.0 + k


DATA_ALONE_SCALE = 1e-6
"""The ΔP prior's weight in the intervals' "readings alone" end (both engines): the fit
without the prior, in effect (a millionth of its weight, not zero: a group no reading sees
keeps a diagonal, and the live engine's Cholesky a positive one).  The prior-span ends
(:func:`prior_span`) move the prior's centre by the spread of ΔP fits the prior has already
shrunk, so they understate its pull where the readings are weak: windows that each hold one
whole 25 ms step (varied_mix/h100, seed 1) differ only by the step-to-step mix, the prior
lifted the short classes 174 → 423 W and P_idle read 60.7 W against 70.5 W true, outside its
53.0–68.3 W interval; without the prior the fit reads 70.0 W.  On the kept suites no
resolvable class and no resolvable coverage moves (docs/attribution.md, "Intervals")."""


def prior_scale_for(span_s: float) -> float:
    """The ΔP prior's weight on a run of ``span_s`` seconds, as a multiple of
    :data:`PRIOR_READINGS`: ``min(1, span / PRIOR_REF_S)``.  The weight was chosen on runs of
    20-60 s; against a few seconds of readings the same weight pulls the weakly exposed
    short classes toward their kind's centre and P_idle pays (3 s H100 runs: median −9.1 %).
    Measured (docs/accuracy.md, "Short runs"; 1.5-5 s, every scenario × preset, seeds 0-2):
    flagged classes' intervals holding the truth 78-81 → 87-91 %, P_idle more than 20 % off
    on 43 → 4 of 648 runs; the 20 s check's pooled coverage 86.6 → 85.9 %; 60 s runs
    unchanged (a 60 s reference put the 20 s check at 83.5 %)."""
    return min(1.0, max(span_s, 0.0) / PRIOR_REF_S)


def prior_system(g: int, pooled: float | F64, p_idle_prior_w: float | None, *,
                 idle_weight: float = IDLE_PRIOR_READINGS, per_row: int = 1,
                 prior_scale: float = 1.0) -> tuple[F64, F64]:
    """The priors of :func:`fit` as extra rows ``(A_p, b_p)`` over ``[P_idle, ΔP_1…ΔP_g]``:
    ΔP toward ``pooled`` (one value or one per group) with weight ``PRIOR_READINGS``, and
    P_idle toward ``p_idle_prior_w`` (if given) with weight ``idle_weight``.  Both weights
    are in readings: where each row is the mean of ``per_row`` readings
    (``block_rows.block_means``), they are divided by it, so the priors weigh what they
    weigh against the readings themselves; ``prior_scale`` multiplies the ΔP prior's
    (:func:`prior_scale_for`)."""
    centre = np.broadcast_to(np.asarray(pooled, np.float64), (g,))
    n = g + (p_idle_prior_w is not None)
    a_p = np.zeros((n, g + 1))
    b_p = np.empty(n)
    w = np.sqrt(PRIOR_READINGS * prior_scale / per_row)
    a_p[np.arange(g), np.arange(1, g + 1)] = w
    b_p[:g] = w * centre
    if p_idle_prior_w is not None:
        wi = np.sqrt(idle_weight / per_row)
        a_p[g, 0] = wi
        b_p[g] = wi * p_idle_prior_w
    return a_p, b_p


def fit(x: F64, y: F64, p_idle_prior_w: float | None, *,
        pooled: float | F64 | None = None, idle_weight: float = IDLE_PRIOR_READINGS,
        per_row: int = 1, prior_scale: float = 1.0) -> Fit:
    """The non-negative fit with weak priors (see the module docstring).  ``pooled`` is the
    ΔP prior centre: one value for every group or one per group; ``idle_weight`` the P_idle
    prior's weight in idle readings (large: P_idle held at the prior); ``per_row``: the
    readings each row of ``x``/``y`` is the mean of (:func:`prior_system`)."""
    k, g = x.shape
    if pooled is None:
        _, pooled = pooled_fit(x, y)
    centre = np.broadcast_to(np.asarray(pooled, np.float64), (g,))
    a_p, b_p = prior_system(g, centre, p_idle_prior_w, idle_weight=idle_weight,
                            per_row=per_row, prior_scale=prior_scale)
    a_mat = np.vstack([np.column_stack([np.ones(k), x]), a_p])
    b = np.concatenate([y, b_p])
    scale = np.maximum(np.sqrt((a_mat ** 2).sum(axis=0)), 1e-12)
    sol, _ = nnls(a_mat / scale, b, maxiter=50 * (g + 1))
    sol = sol / scale
    resid = y - (sol[0] + x @ sol[1:])
    rms = float(np.sqrt(np.mean(resid ** 2))) if k else 0.0
    return Fit(float(sol[0]), np.asarray(sol[1:], np.float64), rms,
               float(np.mean(centre)) if g else 0.0)


def quick_rss(x: F64, y: F64) -> float:
    """Residual sum of squares of an unconstrained ridge fit (for the lag grid search)."""
    r = quick_resid(x, y)
    return float(r @ r)


def quick_resid(x: F64, y: F64) -> F64:
    """The residuals of :func:`quick_rss`'s fit, reading by reading."""
    k, g = x.shape
    a_mat = np.empty((k, g + 1))
    a_mat[:, 0] = 1.0
    a_mat[:, 1:] = x
    lam = 1e-3 * max(float(np.mean(x ** 2)) * k, 1e-9)
    ata = a_mat.T @ a_mat
    # + λ on the ΔP diagonal, then + 1e-12 on the whole diagonal, in place (the same sums
    # as adding λ·diag(0, 1, …) and 1e-12·I: the other entries only ever add exact zeros)
    ata.flat[g + 2::g + 2] += lam
    ata.flat[::g + 2] += 1e-12
    coef = np.linalg.solve(ata, a_mat.T @ y)
    return np.asarray(y - a_mat @ coef, np.float64)


def block_indices(n: int, block: int, rng: np.random.Generator) -> I64:
    """One moving-block bootstrap resample of ``n`` indices in blocks of ``block``."""
    block = max(1, min(block, n))
    n_blocks = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=n_blocks)
    idx = (starts[:, None] + np.arange(block)[None, :]).reshape(-1)[:n]
    return idx.astype(np.int64)


def bootstrap(x: F64, y: F64, p_idle_prior_w: float | None, *, n_boot: int, block: int,
              seed: int = 0, pooled: float | F64 | None = None,
              idle_weight: float = IDLE_PRIOR_READINGS, per_row: int = 1,
              prior_scale: float = 1.0) -> tuple[F64, F64]:
    """Bootstrap replicates of (P_idle, ΔP): shapes ``(n_boot,)`` and ``(n_boot, groups)``.

    Each replicate is :func:`fit` of the resampled readings (rows of ``per_row`` readings
    each, ``block`` counted in rows).  With a given ``pooled`` centre
    the prior rows and the readings' design ``[1, x]`` are the same in every replicate, so
    they are built once and each replicate gathers its rows into one reused system: the
    same matrix, scaling and ``nnls`` call as :func:`fit` makes, so the same bits (the
    residual, which the replicates do not use, is not computed)."""
    rng = np.random.default_rng(seed)
    k, g = x.shape
    p = np.zeros(n_boot)
    dp = np.zeros((n_boot, g))
    if k == 0:
        return p, dp
    if pooled is None:  # each replicate pools its own readings
        for b in range(n_boot):
            idx = block_indices(k, block, rng)
            f = fit(x[idx], y[idx], p_idle_prior_w, pooled=pooled, idle_weight=idle_weight,
                    per_row=per_row, prior_scale=prior_scale)
            p[b] = f.p_idle_w
            dp[b] = f.dp_w
        return p, dp
    centre = np.broadcast_to(np.asarray(pooled, np.float64), (g,))
    a_p, b_p = prior_system(g, centre, p_idle_prior_w, idle_weight=idle_weight,
                            per_row=per_row, prior_scale=prior_scale)
    design = np.column_stack([np.ones(k), x])
    a_mat = np.empty((k + len(a_p), g + 1))
    a_mat[k:] = a_p
    b_vec = np.empty(k + len(b_p))
    b_vec[k:] = b_p
    sq = np.empty_like(a_mat)
    for b in range(n_boot):
        idx = block_indices(k, block, rng)
        np.take(design, idx, axis=0, out=a_mat[:k])
        np.take(y, idx, out=b_vec[:k])
        np.multiply(a_mat, a_mat, out=sq)  # a ** 2 of a float array is a * a
        scale = np.maximum(np.sqrt(sq.sum(axis=0)), 1e-12)
        np.divide(a_mat, scale, out=sq)
        sol, _ = nnls(sq, b_vec, maxiter=50 * (g + 1))
        sol = sol / scale
        p[b] = sol[0]
        dp[b] = sol[1:]
    return p, dp
