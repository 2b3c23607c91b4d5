"""Shared fixtures: the path to the copied real data; two traces merged as two GPUs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from attribution.model import Trace

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


def _on_two_gpus(a: Trace, b: Trace) -> Trace:
    """``a`` as GPU 0 and ``b`` as GPU 1 in one trace (``b``'s records and readings moved to
    device 1; ``b`` is changed in place)."""
    for batch in ("kernels", "copies", "memsets", "power", "energy"):
        cols = getattr(b, batch).columns()
        cols["device"] = np.full(len(cols["device"]), 1, cols["device"].dtype)
        setattr(b, batch, type(getattr(b, batch))(**cols))
    return a.merged_with(b)


@pytest.fixture
def on_two_gpus() -> Callable[[Trace, Trace], Trace]:
    return _on_two_gpus


@pytest.fixture(params=["numpy", "native"])
def native_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test once on the numpy forms and once on the compiled sweeps (skipped where
    ``attribution._native`` was not built): both must give the same bits."""
    from attribution import native

    if request.param == "native" and not native.built():
        pytest.skip("attribution._native is not built")
    was = native.use(request.param == "native")
    try:
        yield request.param
    finally:
        native.use(was)
