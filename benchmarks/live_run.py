"""The simulated run the live-tick benchmarks share: its arguments, its trace, and its ticks.

Owns what ``live_tick.py``, ``live_update_parts.py`` and ``live_tick_ab.py``'s workers would
each write again: ``--scenario/--gpu/--horizon/--measure/--tick/--split-classes``, the
simulated trace (``--horizon`` + ``--measure`` + 1 s, seed 0, kernel names optionally split
into variants), and the feed of it to a live engine tick by tick -- records as they complete,
readings as taken -- marking the ticks once the horizon is full (the measured ones).  Uses
only ``simulate``, ``Deltas`` and the trace model, so an A/B worker can drive another
checkout's engine with it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator

import numpy as np

from attribution.engine.deltas import Deltas
from attribution.model import Trace
from attribution.sim import simulate


def add_run_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--scenario", default="demo")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--horizon", type=float, default=300.0)
    ap.add_argument("--measure", type=float, default=60.0)
    ap.add_argument("--tick", type=float, default=0.5)
    ap.add_argument("--split-classes", type=int, default=1,
                    help="split each kernel name into N variants (a model with many kernels)")


def run_trace(args: argparse.Namespace) -> Trace:
    """The run the arguments describe."""
    tr = simulate(scenario=args.scenario, gpu=args.gpu,
                  seconds=args.horizon + args.measure + 1, seed=0).trace
    return split_kernel_names(tr, args.split_classes) if args.split_classes > 1 else tr


def split_kernel_names(tr: Trace, n: int) -> Trace:
    """Each kernel renamed at random (seeded) to one of ``n`` variants of its name: the
    simulator's six kernel classes become ~6n, as a real model's hundreds."""
    k = tr.kernels
    variant = np.random.default_rng(0).integers(0, n, len(k))
    key = k.name_id.astype(np.int64) * n + variant
    uniq, inv = np.unique(key, return_inverse=True)
    strings = tr.strings.names()
    new_id = np.arange(len(strings), len(strings) + len(uniq), dtype=np.int64)
    strings += [f"{tr.strings[int(u) // n]}_v{int(u) % n}" for u in uniq]
    kernels = dataclasses.replace(k, name_id=new_id[inv].astype(k.name_id.dtype))
    return dataclasses.replace(tr, kernels=kernels, strings=type(tr.strings)(strings))


def ticks(tr: Trace, *, horizon_s: float, tick_s: float) -> Iterator[tuple[int, Trace, bool]]:
    """``(now, delta, measured)`` per tick over the run: the records that completed and the
    readings taken since the last tick; ``measured`` once the horizon (plus 1 s) is full."""
    span = tr.gpu_span_ns()
    assert span is not None
    deltas = Deltas(tr)
    tick_ns = int(tick_s * 1e9)
    full_ns = span[0] + int((horizon_s + 1.0) * 1e9)
    prev, now = span[0] - 1, span[0]
    while now < span[1]:
        now = min(now + tick_ns, span[1])
        yield now, deltas.between(prev, now), now >= full_ns
        prev = now
