"""The inefficiency ranking: which mechanism wastes the energy, the bounded fix, who owns it.

``rank(inputs, owners)`` gathers candidates from the mechanism modules -- ``idle_copies``
(idle by cause, pageable copies), ``storms`` (tiny-kernel storms), ``clamps`` (clock clamps),
``efficiency`` (precision mix, FP32 matrix math, the same kernel hotter on one GPU) -- and
orders them into the snapshot's ``inefficiencies``.  See docs/ranking.md.

Ordering: by wasted joules, except that a candidate the data cannot resolve (its numbers are a
prior-based split) is ranked by the lower end of its 90 % interval (0 without one) and never
takes rank 1 while a resolvable candidate exists; a candidate under :data:`MIN_SHARE` of
the run's energy is not ranked.  Owners: the owners file's rule for the
mechanism name, else for the kernel / NVTX-range names behind it, else ``unowned``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attribution.owners import UNOWNED, OwnerMap
from attribution.ranking.clamps import clamp_candidates, clamp_episodes
from attribution.ranking.common import Candidate, RankInputs, RowInputs
from attribution.ranking.efficiency import fp32_candidate, hot_gpu_candidates, precision_mix
from attribution.ranking.idle_copies import (
    copy_candidates,
    idle_candidates,
    idle_row_candidates,
)
from attribution.ranking.storms import find_storms, storm_candidate
from attribution.snapshot import Inefficiency

__all__ = ["Candidate", "RankInputs", "Ranking", "RowInputs", "order", "rank", "rank_rows"]


@dataclasses.dataclass(frozen=True, slots=True)
class Ranking:
    items: tuple[Inefficiency, ...]
    clamps: list[dict[str, Any]]  # → snapshot extra["clamps"]
    precision_mix: list[dict[str, Any]]  # → snapshot extra["precision_mix"]


def rank(inp: RankInputs, owners: OwnerMap | None = None) -> Ranking:
    storms, names = find_storms(inp)
    cands: list[Candidate] = []
    cands += idle_candidates(inp, storms)
    s = storm_candidate(inp, storms, names)
    if s is not None:
        cands.append(s)
    cands += copy_candidates(inp)
    episodes = clamp_episodes(inp)
    cands += clamp_candidates(episodes)
    mix = precision_mix(inp.kernels)
    f = fp32_candidate(inp, mix)
    if f is not None:
        cands.append(f)
    cands += hot_gpu_candidates(inp)
    return Ranking(order(cands, inp.total_j, owners), episodes, mix)


def rank_rows(inp: RowInputs, p_idle_ci_w: dict[int, tuple[float, float]],
              owners: OwnerMap | None = None) -> tuple[Inefficiency, ...]:
    """The ranking from snapshot rows alone, for the live engine (which keeps per-class and
    per-cause sums, not per-record energies): idle by cause, pageable copies, FP32 matrix
    math and hot GPUs.  Tiny-kernel storms and clock clamps need the records: they appear in
    snapshots from the batch engine (``ppwtop attribute``, exports, the demo's final
    snapshot)."""
    cands: list[Candidate] = []
    cands += idle_row_candidates(inp.idle, p_idle_ci_w)
    cands += copy_candidates(inp)
    f = fp32_candidate(inp, precision_mix(inp.kernels))
    if f is not None:
        cands.append(f)
    cands += hot_gpu_candidates(inp)
    return order(cands, inp.total_j, owners)


MIN_SHARE = 1e-3
"""Candidates wasting less than this share of the run's energy are not ranked: a fix plan
for 1 mJ (one 10 µs launch gap, found on the real transient runs at rank 2) is noise."""


def _key(c: Candidate) -> float:
    if c.resolvable:
        return c.energy_j
    return max(0.0, c.energy_ci_j[0]) if c.energy_ci_j is not None else 0.0


def owner_of(c: Candidate, owners: OwnerMap | None) -> str:
    if owners is None:
        return UNOWNED
    o = owners.owner_for(c.mechanism)
    for n in c.owner_names:
        if o != UNOWNED:
            break
        o = owners.owner_for(n)
    return o


def order(cands: list[Candidate], total_j: float, owners: OwnerMap | None = None
          ) -> tuple[Inefficiency, ...]:
    """Rank candidates (see the module docstring); drops those wasting nothing."""
    floor = MIN_SHARE * total_j if total_j > 0 else 0.0
    live = sorted((c for c in cands if c.energy_j > 0 and c.energy_j >= floor),
                  key=lambda c: (-_key(c), c.mechanism))
    if live and not live[0].resolvable:
        first = next((i for i, c in enumerate(live) if c.resolvable), None)
        if first is not None:
            live.insert(0, live.pop(first))
    out = []
    for i, c in enumerate(live):
        ev = c.evidence
        if not c.resolvable:
            ev += "; NOT RESOLVABLE: " + (
                c.unresolved_why or "the classes behind this number cannot be separated by "
                                    "the data, it is a prior-based split")
        out.append(Inefficiency(
            rank=i + 1, mechanism=c.mechanism, energy_j=c.energy_j,
            share=c.energy_j / total_j if total_j > 0 else 0.0, evidence=ev, fix=c.fix,
            owner=owner_of(c, owners), validation=c.validation, energy_ci_j=c.energy_ci_j,
            resolvable=c.resolvable))
    return tuple(out)
