"""The demo feed: the built-in simulator replayed in wall-clock time, attributed live.

``DemoFeed`` simulates a whole run once (``attribution.sim.simulate``), then on each call
hands the records "seen so far" to the engine: records that completed inside the sliding
horizon ``[now - horizon_s, now]`` of simulated time (CUPTI delivers records when they
complete), power/energy/clock readings taken in it.  Each tick feeds only what completed since
the previous tick to the live incremental engine (``attribution.engine.live``), whose cost per
tick does not grow with the run or the horizon's record count; until it has settled enough
data to fit the sensor lag (its first ~5 s), ticks fall back to one batch attribution of the
horizon.  ``snapshot_at`` (explicit ends: ``--headless``, ``serve``, replay exports) is always
the batch engine.  Slicing is ``searchsorted`` on batches sorted once up front; attributions
are spaced at least ``refresh_s`` of wall time apart and at least three times their own cost
(so the engine never takes more than a third of a core from the UI), while the power trace
(cheap) follows the replay clock at every call.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from attribution.columns import Columns
from attribution.engine.deltas import GPU_ITEMS, Deltas
from attribution.model import Trace
from attribution.snapshot import Snapshot
from ppwtop.errors import PpwtopError
from ppwtop.tui.feed import PowerTrace

_ITEM_BATCHES = ("kernels", "copies", "memsets", "apis", "markers")
_SAMPLE_BATCHES = ("power", "energy", "clocks")
GRAPH_S = 20.0  # power graph history
HEAD_START_S = 2.0  # the replay starts this far into the run so the first tick has data
DUTY_FACTOR = 3.0  # wall time between attributions >= 3 x the last attribution's cost


def _live_engine(**kw: Any) -> Any:
    from attribution.engine.live import LiveEngine

    return LiveEngine(**kw)


def _engine() -> tuple[Callable[..., Any], Callable[..., Snapshot]]:
    """The simulator and the batch engine, imported on first use (a shorter start-up)."""
    from attribution.engine import attribute
    from attribution.sim import simulate

    return simulate, attribute


def _clipped(b: Columns, i1: int, lo: int, hi: int) -> Any:
    """Of ``b`` (sorted by start; ``i1``: the first starting at or after ``hi``) the items
    that overlap ``(lo, hi)``, their start and end cut to ``[lo, hi]``."""
    head: Any = b.take(slice(0, i1))
    on = np.asarray(head.end_ns > lo, bool)
    sl = head if bool(on.all()) else head.take(on)
    s_ns, e_ns = sl.start_ns, sl.end_ns
    if len(sl) and (int(s_ns.min()) < lo or int(e_ns.max()) > hi):
        sl = dataclasses.replace(sl, start_ns=np.maximum(s_ns, lo), end_ns=np.minimum(e_ns, hi))
    return sl


class TraceFeed:
    """A :class:`~ppwtop.tui.feed.SnapshotFeed` replaying a Trace in wall-clock time.

    ``gpu`` None lets the engine pick the preset from the recorded device name.  Ticks feed
    ``delta(after_ns, end_ns)`` (what completed since the last tick) to the live engine; a
    subclass whose trace grows while it runs overrides ``delta`` (the base class slices the
    batches sorted at construction).
    """

    def __init__(self, trace: Trace, *, label: str, gpu: str | None = None,
                 horizon_s: float = 15.0, refresh_s: float = 0.5, speed: float = 1.0,
                 n_boot: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        _, self._attribute = _engine()
        tr = trace
        self.trace = tr
        self.notes: tuple[str, ...] = ()  # what the file's reader noted (a replayed file)
        self.gpu = gpu
        self.horizon_ns = int(horizon_s * 1e9)
        self.refresh_s = refresh_s
        self.speed = speed
        self.n_boot = n_boot
        self._clock = clock
        self._label = label
        self._sorted: dict[str, Columns] = {}
        for name in _ITEM_BATCHES:
            self._sorted[name] = getattr(tr, name).sorted_by("start_ns")
        for name in _SAMPLE_BATCHES:
            self._sorted[name] = getattr(tr, name).sorted_by("t_ns")
        span = tr.gpu_span_ns()
        self.start_ns, self.end_ns = span if span is not None else (0, 0)
        pw = tr.power
        # the graph shows each published reading once, of the field the engine uses first
        keep = pw.fresh & (pw.device == (pw.device.min() if len(pw) else 0))
        if len(pw) and keep.any():
            fields = pw.field[keep]
            keep &= pw.field == np.bincount(fields).argmax()
        order = np.argsort(pw.t_ns[keep], kind="stable")
        self._power_t_ns = pw.t_ns[keep][order]
        self._power_w = pw.power_mw[keep][order] / 1000.0
        self._wall0: float | None = None
        self._next_due = -np.inf
        self.last_cost_s = 0.0
        self._last_sim_ns = -1
        self.attributions = 0
        self._deltas = Deltas(tr)  # what completed between two ticks
        self._live = _live_engine(gpu=gpu, devices=list(tr.devices), horizon_s=horizon_s,
                                  n_boot=n_boot)
        self._fed_ns = self.start_ns - 1
        self.live_ticks = 0

    # ------------------------------------------------------------------ clock

    def sim_now_ns(self) -> int:
        now = self._clock()
        if self._wall0 is None:
            self._wall0 = now
        t = self.start_ns + int((HEAD_START_S + (now - self._wall0) * self.speed) * 1e9)
        return min(t, self.end_ns)

    # ------------------------------------------------------------------ slicing

    def window(self, end_ns: int, horizon_ns: int | None = None, *,
               clip: bool = False) -> Trace:
        """The records that completed in ``[end_ns - horizon, end_ns]`` (sim time); with
        ``clip``, the GPU items that overlap it, cut to it (a tumbling window: an item
        running across its edge counts in both windows, each its own part)."""
        lo = end_ns - (self.horizon_ns if horizon_ns is None else horizon_ns)
        parts: dict[str, Any] = {}
        for name in _ITEM_BATCHES:
            b = self._sorted[name]
            start: Any = getattr(b, "start_ns")  # noqa: B009
            if clip and name in GPU_ITEMS:
                parts[name] = _clipped(b, int(np.searchsorted(start, end_ns)), lo, end_ns)
                continue
            i0, i1 = np.searchsorted(start, [lo, end_ns], side="left")
            sl = b.take(slice(int(i0), int(i1)))
            done = getattr(sl, "end_ns") <= end_ns  # noqa: B009
            parts[name] = sl if bool(done.all()) else sl.take(done)
        for name in _SAMPLE_BATCHES:
            b = self._sorted[name]
            t_ns: Any = getattr(b, "t_ns")  # noqa: B009 - sample batches all have t_ns
            i0, i1 = np.searchsorted(t_ns, [lo, end_ns], side="right")
            parts[name] = b.take(slice(int(i0), int(i1)))
        return Trace(strings=self.trace.strings, devices=list(self.trace.devices),
                     meta=dict(self.trace.meta), **parts)

    def window_between(self, start_ns: int, end_ns: int) -> Trace:
        """The records that completed in ``[start_ns, end_ns]`` (what a snapshot covers)."""
        return self.window(end_ns, end_ns - start_ns + 1)

    def snapshot_at(self, end_ns: int, horizon_ns: int | None = None,
                    n_boot: int | None = None, *, clip: bool = False) -> Snapshot | None:
        tr = self.window(end_ns, horizon_ns, clip=clip)
        if not len(tr.kernels) and not len(tr.copies):
            return None
        self.attributions += 1
        snap: Snapshot = self._attribute(tr, gpu=self.gpu, n_boot=n_boot or self.n_boot)
        return self._with_meta(snap, end_ns)

    def delta(self, after_ns: int, end_ns: int) -> Trace:
        """Records that completed, and readings taken, in ``(after_ns, end_ns]``."""
        return self._deltas.between(after_ns, end_ns)

    def live_snapshot_at(self, end_ns: int) -> Snapshot | None:
        """Feed what completed since the last call to the live engine and take its snapshot
        of the horizon; the batch engine while the live one is still settling."""
        if end_ns > self._fed_ns:
            self._live.update(self.delta(self._fed_ns, end_ns), end_ns)
            self._fed_ns = end_ns
        snap: Snapshot | None = self._live.snapshot()
        if snap is None:
            return self.snapshot_at(end_ns)
        self.attributions += 1
        self.live_ticks += 1
        return self._with_meta(snap, end_ns)

    def _with_meta(self, snap: Snapshot, end_ns: int) -> Snapshot:
        so_far = self.energy_so_far_j(end_ns)
        meta = dict(snap.meta)
        meta["elapsed_s"] = (end_ns - self.start_ns) / 1e9
        if so_far is not None:
            meta["energy_so_far_j"] = so_far
        return dataclasses.replace(snap, meta=meta,
                                   warnings=(*self.notes, *snap.warnings))

    def energy_so_far_j(self, end_ns: int) -> float | None:
        """Board energy from the start of the run to ``end_ns`` (the energy counter)."""
        e = self._sorted["energy"]
        t_ns: Any = getattr(e, "t_ns")  # noqa: B009
        mj: Any = getattr(e, "energy_mj")  # noqa: B009
        i0 = int(np.searchsorted(t_ns, self.start_ns, side="left"))
        i1 = int(np.searchsorted(t_ns, end_ns, side="right")) - 1
        if i1 <= i0:
            return None
        return float(mj[i1] - mj[i0]) / 1000.0

    def final_snapshot(self, n_boot: int = 200) -> Snapshot | None:
        """The whole run attributed at once (``--headless``)."""
        return self.snapshot_at(self.end_ns, self.end_ns - self.start_ns + 1, n_boot)

    # ------------------------------------------------------------------ SnapshotFeed

    def next_snapshot(self) -> Snapshot | None:
        now_wall = self._clock()
        t = self.sim_now_ns()
        if t == self._last_sim_ns or now_wall < self._next_due:
            self._live.run_background()  # the lag refit's work, off the snapshot's path
            return None
        self._last_sim_ns = t
        t0 = time.perf_counter()
        snap = self.live_snapshot_at(t)
        self.last_cost_s = time.perf_counter() - t0
        # the engine gets at most a third of a core: a slow tick spaces out the next ones
        self._next_due = now_wall + max(self.refresh_s, DUTY_FACTOR * self.last_cost_s)
        return snap

    def power_trace(self) -> PowerTrace:
        t = self.sim_now_ns()
        i1 = int(np.searchsorted(self._power_t_ns, t, side="right"))
        i0 = int(np.searchsorted(self._power_t_ns, t - int(GRAPH_S * 1e9), side="left"))
        return self._power_t_ns[i0:i1], self._power_w[i0:i1]

    @property
    def connected(self) -> bool:
        """False once the replay reached the end of the simulated run."""
        return self._wall0 is None or self.sim_now_ns() < self.end_ns

    @property
    def label(self) -> str:
        return self._label


class DemoFeed(TraceFeed):
    """A :class:`TraceFeed` over a freshly simulated run (``ppwtop demo``)."""

    def __init__(self, scenario: str = "demo", gpu: str = "h100", seconds: float = 60.0, *,
                 seed: int = 0, horizon_s: float = 15.0, refresh_s: float = 0.5,
                 speed: float = 1.0, n_boot: int = 100,
                 clock: Callable[[], float] = time.monotonic) -> None:
        simulate, _ = _engine()
        try:
            res = simulate(scenario=scenario, gpu=gpu, seconds=seconds, seed=seed)
        except (KeyError, ValueError) as e:
            raise PpwtopError(str(e.args[0] if e.args else e)) from None
        super().__init__(res.trace, label=f"demo ({scenario} on {gpu})", gpu=gpu,
                         horizon_s=horizon_s, refresh_s=refresh_s, speed=speed,
                         n_boot=n_boot, clock=clock)
