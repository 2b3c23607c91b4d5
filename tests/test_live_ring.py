"""The live engine's reading-row ring (``live_ring.RowRing``): what it hands out is what was
appended, through class growth, expiry and reallocation, and writes through its views land
in the ring (the refit's re-reduction writes redone rows that way)."""

from __future__ import annotations

import numpy as np
import pytest

from attribution.engine.live_ring import RowRing


@pytest.mark.parametrize("seed", range(4))
def test_row_ring_views_equal_the_rows_appended(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ring = RowRing()
    t_all = np.empty(0, np.int64)
    y_all = np.empty(0)
    x_all = [np.zeros((0, 0)) for _ in range(3)]
    t_ns, cols = 0, 1
    for _ in range(80):
        k = int(rng.integers(0, 9))
        cols = max(cols, cols + int(rng.integers(-2, 3)))  # classes first seen later
        t = t_ns + np.arange(k, dtype=np.int64) * 10
        t_ns += 100
        y = rng.random(k)
        xs = tuple(rng.random((k, cols)) for _ in range(3))
        ring.append(t, y, xs)  # type: ignore[arg-type]
        width = max(x_all[0].shape[1], cols)
        x_all = [np.vstack([np.pad(a, ((0, 0), (0, width - a.shape[1]))),
                            np.pad(x, ((0, 0), (0, width - cols)))])
                 for a, x in zip(x_all, xs, strict=True)]
        t_all, y_all = np.r_[t_all, t], np.r_[y_all, y]
        if rng.random() < 0.3:
            cut = t_ns - int(rng.integers(0, 6)) * 100
            keep = t_all >= cut
            ring.expire(cut)
            t_all, y_all, x_all = t_all[keep], y_all[keep], [a[keep] for a in x_all]
        vt, vy, *vx = ring.view()
        assert len(ring) == len(t_all) and ring.n_cls == x_all[0].shape[1]
        np.testing.assert_array_equal(vt, t_all)
        np.testing.assert_array_equal(vy, y_all)
        for got, want in zip(vx, x_all, strict=True):
            np.testing.assert_array_equal(got, want)
        if len(t_all) and rng.random() < 0.3:  # a write through the view is the ring's
            r, c = int(rng.integers(len(t_all))), int(rng.integers(ring.n_cls))
            vx[1][r, c] = -1.0
            x_all[1][r, c] = -1.0
            np.testing.assert_array_equal(ring.view()[3], x_all[1])
