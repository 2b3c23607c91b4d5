"""True board power on a fine grid: active idle + the superposition of every active item's ΔP,
passed through an energy-conserving response, plus labelled extras (consumer boost tail).

Owns :func:`true_power_grid`.  The per-bin mean of the piecewise-constant dynamic power is
computed exactly from the items' rate-change events (cumulative-sum differencing), so the grid
holds ``Σ ΔP·duration`` to float precision; the response is a unit-DC-gain linear filter, which
moves energy in time but neither adds nor removes any.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attribution.model import F64, I64
from attribution.sim.first_order import first_order

GRID_DT_NS = 500_000
"""Grid resolution of the true power (0.5 ms)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Response:
    """Sum of first-order low-passes, weights summing to 1 (unit DC gain)."""

    taus_ms: tuple[float, ...]
    weights: tuple[float, ...]
    tail_frac: float = 0.0  # consumer cards: power left on after the GPU goes idle
    tail_tau_s: float = 0.8
    tail_min_gap_ms: float = 20.0


DATACENTER = Response((0.8,), (1.0,))
CONSUMER = Response((3.0, 120.0), (0.6, 0.4), tail_frac=0.2)


def drawn_datacenter(rng: np.random.Generator) -> Response:
    """A data-centre board's response drawn per board, off the engine's τ grid: τ
    log-uniform in 0.3-2.5 ms (``DATACENTER``'s 0.8 ms is a grid point)."""
    return Response((float(np.exp(rng.uniform(np.log(0.3), np.log(2.5)))),), (1.0,))


def drawn_consumer(rng: np.random.Generator) -> Response:
    """A consumer card's response drawn per board, off the engine's model grid: the slow
    stage's τ₂ log-uniform in 40-300 ms and weight 0.2-0.5, the fast stage 1.5-6 ms, the
    tail 10-30 % of the power at the gap's start decaying over 0.4-2 s in gaps over
    10-40 ms. ``CONSUMER`` sits on the grid the engine searches (τ₂ 120 ms, w 0.4), which
    flatters a fit whose model is that grid."""
    tau2 = float(np.exp(rng.uniform(np.log(40.0), np.log(300.0))))
    w = float(rng.uniform(0.2, 0.5))
    return Response((float(rng.uniform(1.5, 6.0)), tau2), (1.0 - w, w),
                    tail_frac=float(rng.uniform(0.1, 0.3)),
                    tail_tau_s=float(rng.uniform(0.4, 2.0)),
                    tail_min_gap_ms=float(rng.uniform(10.0, 40.0)))


def binned_dynamic_w(start_ns: I64, end_ns: I64, dp_w: F64, grid_t0_ns: int, *, n_bins: int,
                     dt_ns: int = GRID_DT_NS) -> F64:
    """Exact mean of Σ ΔP·1[start ≤ t < end] over each grid bin."""
    s = (start_ns - grid_t0_ns).astype(np.float64) * 1e-9
    e = (end_ns - grid_t0_ns).astype(np.float64) * 1e-9
    tau = np.concatenate([s, e])
    rate = np.concatenate([dp_w, -dp_w])
    order = np.argsort(tau, kind="stable")
    tau, rate = tau[order], rate[order]
    r_cum = np.concatenate([[0.0], np.cumsum(rate)])
    q_cum = np.concatenate([[0.0], np.cumsum(rate * tau)])
    edges = np.arange(n_bins + 1, dtype=np.float64) * (dt_ns * 1e-9)
    k = np.searchsorted(tau, edges, side="right")
    energy_j = edges * r_cum[k] - q_cum[k]
    out: F64 = np.diff(energy_j) / (dt_ns * 1e-9)
    return out


def respond(dyn_w: F64, resp: Response, dt_ns: int = GRID_DT_NS) -> F64:
    """Per-bin means of the continuous response to the piecewise-constant bin means
    ``dyn_w``: for each stage, the state at the bin edges ``s[n+1] = a s[n] + (1 − a) x[n]``
    (``a = exp(−dt/τ)``) and the exact mean over bin n, ``x[n] + (s[n] − x[n]) c`` with
    ``c = (τ/dt)(1 − a)``.  The recursion's own output ``s[n+1]`` read as bin n's mean (as
    before 2026-12-05) ran about half a bin early: the engine's lag, fitted against a true
    first-order response, came out 0.2 ms short (docs/simulator.md)."""
    x = np.asarray(dyn_w, dtype=np.float64)
    out = np.zeros_like(x)
    dt_ms = dt_ns * 1e-6
    for tau, w in zip(resp.taus_ms, resp.weights, strict=True):
        if tau <= 0.0:
            out += w * x
            continue
        a = float(np.exp(-dt_ms / tau))
        c = tau / dt_ms * (1.0 - a)
        s_next = first_order(1.0 - a, a, x)
        s_now = np.concatenate([[0.0], s_next[:-1]])
        out += w * (x + (s_now - x) * c)
    return out


def boost_tail_w(power_dyn_w: F64, gap_start_ns: I64, gap_end_ns: I64, grid_t0_ns: int,
                 *, resp: Response, dt_ns: int = GRID_DT_NS) -> F64:
    """Extra power a consumer card keeps on after going idle (decays within the gap)."""
    out = np.zeros_like(power_dyn_w)
    if resp.tail_frac <= 0:
        return out
    long_ = (gap_end_ns - gap_start_ns) > resp.tail_min_gap_ms * 1e6
    gs, ge = gap_start_ns[long_], gap_end_ns[long_]
    if not len(gs):
        return out
    centers = grid_t0_ns + (np.arange(len(out), dtype=np.int64) * dt_ns + dt_ns // 2)
    gid = np.searchsorted(gs, centers, side="right") - 1
    ok = gid >= 0
    gidc = np.clip(gid, 0, None)
    inside = ok & (centers < ge[gidc])
    b0 = np.clip((gs - grid_t0_ns) // dt_ns - 1, 0, len(out) - 1)
    level = resp.tail_frac * np.maximum(power_dyn_w[b0], 0.0)
    age_s = (centers - gs[gidc]).astype(np.float64) * 1e-9
    out[inside] = (level[gidc] * np.exp(-age_s / resp.tail_tau_s))[inside]
    return out


def cumulative_j(power_w: F64, dt_ns: int = GRID_DT_NS) -> F64:
    """Energy at the grid edges (J), starting at 0: exact for the piecewise-constant grid."""
    return np.concatenate([[0.0], np.cumsum(power_w) * (dt_ns * 1e-9)])


def integral_j(cum_j: F64, grid_t0_ns: int, a_ns: I64, b_ns: I64,
               dt_ns: int = GRID_DT_NS) -> F64:
    """∫ power over [a, b] for each pair, from the cumulative energy at the grid edges."""
    edges = np.arange(len(cum_j), dtype=np.float64)
    fa = (a_ns - grid_t0_ns).astype(np.float64) / dt_ns
    fb = (b_ns - grid_t0_ns).astype(np.float64) / dt_ns
    out: F64 = np.interp(fb, edges, cum_j) - np.interp(fa, edges, cum_j)
    return out
