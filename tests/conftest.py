"""Shared fixtures: the path to the copied real data; two traces merged as two GPUs; Ctrl-C
deliverable to the tests that send it."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from attribution.model import Trace

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session", autouse=True)
def ctrl_c_deliverable() -> Iterator[None]:
    """A suite started as a background job of a script (``pytest &``, as a CI step or a
    ``nohup`` may run it) inherits SIGINT ignored, and so do the ppwtop commands its tests
    start: the tests that send Ctrl-C then saw it ignored (4 failures, passing in the
    foreground).  Python's own handler for the session; the children then start with the
    default."""
    old = signal.getsignal(signal.SIGINT)
    if old == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if old == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="session")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``ppwtop simulate`` output (varied_mix on an A100, 8 s), made once for the CLI tests."""
    from ppwtop.cli.main import main

    d = tmp_path_factory.mktemp("sim")
    assert main(["simulate", "--scenario", "varied_mix", "--gpu", "a100", "--seconds", "8",
                 "--out", str(d)]) == 0
    return d


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, asserted to be the contract's one ``ppwtop: error:`` line."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ppwtop: error:"), err
    return err[0]


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
