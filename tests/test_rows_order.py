"""``snapshot.rows_by_energy``: largest energy first, ties by the row's repr.

The tie-break used to be computed for every row (a dataclass repr each, ~10 ms a tick on a live
view of 500 kernel classes); now only the rows in a tie get one.  The order must be the same as
sorting every row by ``(−energy, repr)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from attribution.snapshot import KernelRow, rows_by_energy


def _row(rng: np.random.Generator, i: int) -> KernelRow:
    e = float(rng.choice([0.0, 1.5, 2.0, 7.25, float(i)]))  # many ties, zeros among them
    name = str(rng.choice(["gemm", "gemm ", "gemm_a", "ab", "ab c", "z", "Z"]))
    return KernelRow(name=name, gpu=int(rng.integers(0, 3)), calls=int(rng.integers(1, 9)),
                     time_s=float(rng.random()), energy_j=e, dynamic_energy_j=e / 2,
                     dynamic_energy_ci_j=(0.0, e), avg_power_w=1.0, resolvable=bool(i % 2),
                     precision="fp32")


@pytest.mark.parametrize("seed", range(5))
def test_order_is_energy_then_repr(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = [_row(rng, i) for i in range(int(rng.integers(0, 60)))]
    got = rows_by_energy(rows)
    assert got == sorted(rows, key=lambda r: (-r.energy_j, repr(r)))
    assert [r.energy_j for r in got] == sorted((r.energy_j for r in rows), reverse=True)
