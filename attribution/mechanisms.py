"""The delta between two snapshots split by mechanism (part of the ``ppwtop.diff/1`` verdict).

Owns the mechanism names (``kernel:<name>``, ``copy:<kind>/<memory>``, ``idle.<cause>``,
``clamp.<reason>``), each snapshot's energy and uncertainty per mechanism (a clamp's joules
moved out of the kernels it stretched), and the ordering of the decomposition (an
unresolvable mechanism ranks only on the part of its delta beyond its intervals).  Pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from attribution.owners import OwnerMap
from attribution.snapshot import Snapshot


@dataclasses.dataclass(frozen=True, slots=True)
class Mechanism:
    mechanism: str
    delta_j: float  # candidate - baseline, per step or per second (as the metric)
    share_of_delta: float  # delta_j / sum of all mechanisms' delta_j, sign kept
    baseline_j: float
    candidate_j: float
    owner: str | None = None
    resolvable: bool = True  # False: a prior-based split on at least one side

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "mechanism": self.mechanism,
            "delta_j": self.delta_j,
            "share_of_delta": self.share_of_delta,
            "baseline_j": self.baseline_j,
            "candidate_j": self.candidate_j,
            "resolvable": self.resolvable,
        }
        if self.owner is not None:
            d["owner"] = self.owner
        return d


def mechanism_energies(s: Snapshot) -> dict[str, float]:
    """Energy per mechanism name (rows of all GPUs summed), in joules over the window.

    ``clamp.<reason>`` entries come from ``extra["clamps"]``; where an entry names the kernels
    its joules were taken from (``by_kernel_j``), they are taken out of those kernel rows."""
    out: dict[str, float] = {}

    def add(name: str, e: float) -> None:
        if math.isfinite(e):
            out[name] = out.get(name, 0.0) + e

    for k in s.kernels:
        add(f"kernel:{k.name}", k.energy_j)
    for c in s.copies:
        add(f"copy:{c.kind}/{c.memory}", c.energy_j)
    for i in s.idle:
        add(f"idle.{i.cause}", i.energy_j)
    for reason, e in _clamps(s.extra.get("clamps")):
        add(f"clamp.{reason}", e)
    # a clamp's cost sits inside the stretched kernels' rows: move it, so the parts still add up
    raw = s.extra.get("clamps")
    for item in raw if isinstance(raw, list) else ():
        moved = item.get("by_kernel_j") if isinstance(item, Mapping) else None
        if isinstance(moved, Mapping):
            for name, e in moved.items():
                key = f"kernel:{name}"
                if key in out and isinstance(e, int | float) and not isinstance(e, bool):
                    out[key] -= float(e)
    return out


def _clamps(raw: Any) -> Iterable[tuple[str, float]]:
    """Clamp energies from ``extra["clamps"]``: a list of {reason, energy_j} or a mapping."""
    if isinstance(raw, Mapping):
        for k, item in raw.items():
            v = item.get("energy_j") if isinstance(item, Mapping) else item
            if isinstance(v, int | float) and not isinstance(v, bool):
                yield str(k), float(v)
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, Mapping):
                e = item.get("energy_j")
                reason = item.get("reason", item.get("name"))
                if reason is not None and isinstance(e, int | float) and not isinstance(e, bool):
                    yield str(reason), float(e)


def mechanism_uncertainty(s: Snapshot) -> dict[str, tuple[float, bool]]:
    """Per kernel/copy mechanism: (half-width of its 90 % interval in J, resolvable)."""
    out: dict[str, tuple[float, bool]] = {}
    rows = [(f"kernel:{k.name}", k.dynamic_energy_ci_j, k.resolvable) for k in s.kernels]
    rows += [(f"copy:{c.kind}/{c.memory}", c.dynamic_energy_ci_j, c.resolvable)
             for c in s.copies]
    for name, ci, ok in rows:
        half = abs(float(ci[1]) - float(ci[0])) / 2.0
        h0, ok0 = out.get(name, (0.0, True))
        out[name] = (math.hypot(h0, half) if math.isfinite(half) else h0, ok0 and bool(ok))
    return out


def mechanisms(
    a: Snapshot, b: Snapshot, *, per_step: bool, owners: OwnerMap | None = None
) -> tuple[Mechanism, ...]:
    """The delta split by mechanism, largest |delta_j| first -- except that a mechanism the
    data cannot resolve on either side (a prior-based split) is ordered by the part of its
    delta beyond its two 90 % half-widths: it tops the list only on the part it is sure of."""
    na, nb = _normaliser(a, per_step), _normaliser(b, per_step)
    ea = {k: v / na for k, v in mechanism_energies(a).items()}
    eb = {k: v / nb for k, v in mechanism_energies(b).items()}
    ua, ub = mechanism_uncertainty(a), mechanism_uncertainty(b)
    names = sorted(set(ea) | set(eb))
    deltas = {n: eb.get(n, 0.0) - ea.get(n, 0.0) for n in names}
    total = sum(deltas.values())
    rows = [
        Mechanism(
            mechanism=n, delta_j=deltas[n],
            share_of_delta=deltas[n] / total if total != 0 else 0.0,
            baseline_j=ea.get(n, 0.0), candidate_j=eb.get(n, 0.0),
            owner=None if owners is None else owners.owner_for(n),
            resolvable=ua.get(n, (0.0, True))[1] and ub.get(n, (0.0, True))[1],
        )
        for n in names
    ]

    def key(m: Mechanism) -> float:
        if m.resolvable:
            return abs(m.delta_j)
        half = ua.get(m.mechanism, (0.0, True))[0] / na + ub.get(m.mechanism, (0.0, True))[0] / nb
        return max(0.0, abs(m.delta_j) - half)

    rows.sort(key=lambda m: (-key(m), m.mechanism))
    return tuple(rows)


def _normaliser(s: Snapshot, per_step: bool) -> float:
    if per_step:
        assert s.steps is not None
        n = s.steps.count if s.steps.count > 0 else len(s.steps.step_energy_j)
        return float(max(n, 1))
    dur = s.window.duration_s
    return dur if dur > 0 else 1.0
