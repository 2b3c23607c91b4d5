"""A synthetic live source for ``benchmarks/tui_load.py``: kernel records at a fixed rate.

Owns the record generator and :class:`LoadFeed`, a :class:`~ppwtop.tui.feed.SnapshotFeed`
built the way a live Session is: a collector thread appends columnar chunks (kernels, power
readings at T = 100 ms / W = 25 ms, energy counter, clocks, ProfilerStep markers) to the
session's own :class:`ppwtop.live.feed.LiveFeed` (and to a ring of ``horizon_s`` for the
benchmark's counts), and ``next_snapshot`` is that feed's, wrapped in
:class:`ppwtop.panel_feed.PanelFeed` as ``ppwtop run`` wraps it: the live incremental engine
(the batch engine while it settles), duty-cycled as every feed is.  Memory is therefore
bounded by the horizon, not by how long the run lasts.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from attribution.model import (
    ClockBatch,
    DeviceInfo,
    EnergyBatch,
    KernelBatch,
    MarkerBatch,
    MarkerKind,
    PowerBatch,
    PowerField,
    StringTable,
    Trace,
)
from attribution.snapshot import Snapshot
from ppwtop.demo_feed import GRAPH_S
from ppwtop.live.feed import LiveFeed
from ppwtop.panel_feed import PanelFeed
from ppwtop.tui.feed import PowerTrace

N_CLASSES = 24
P_IDLE_W = 75.0
PERIOD_NS = 100_000_000
WINDOW_NS = 25_000_000
STEP_NS = 100_000_000
BUSY_SHARE = 0.8


class Chunk(TypedDict):
    """One chunk of the run, as :meth:`RecordSource.chunk` gives it (Trace's own field names)."""

    kernels: KernelBatch
    power: PowerBatch
    energy: EnergyBatch
    clocks: ClockBatch
    markers: MarkerBatch


class RecordSource:
    """Generates the records of ``[t_from_ns, t_to_ns)`` of a run at ``rate_per_s`` kernels/s.

    Deterministic per chunk boundary (seeded by the chunk's start), vectorised."""

    def __init__(self, rate_per_s: float, *, seed: int = 0) -> None:
        self.rate_per_s = rate_per_s
        self.seed = seed
        self.strings = StringTable()
        self.name_ids = self.strings.intern_many(
            f"void synthetic::kernel_{i:02d}<float, {i % 4}>(float*, int)"
            for i in range(N_CLASSES))
        self.step_name = int(self.strings.intern("ProfilerStep#0"))
        rng = np.random.default_rng(seed)
        self.dp_w = rng.uniform(50.0, 450.0, N_CLASSES)
        self.energy_mj = 0.0

    def _mix(self, t_ns: npt.NDArray[np.int64], u: npt.NDArray[np.float64]
             ) -> npt.NDArray[np.int64]:
        """Per-kernel class: a skewed mix rotated by a per-step offset, so the mix differs
        from one 100 ms step (one power reading) to the next and classes stay separable."""
        step = t_ns // STEP_NS
        shift = (step * 2654435761 + self.seed) % N_CLASSES
        return (np.minimum((N_CLASSES * u**2).astype(np.int64), N_CLASSES - 1) + shift) \
            % N_CLASSES

    def chunk(self, t_from_ns: int, t_to_ns: int) -> Chunk:
        rng = np.random.default_rng([self.seed, t_from_ns])
        # kernels back to back for the first 80 % of each 100 ms step, then a host stall;
        # the rate over the whole run is rate_per_s
        n_all = round((t_to_ns - t_from_ns) * 1e-9 * self.rate_per_s / BUSY_SHARE)
        slot_ns = (t_to_ns - t_from_ns) / max(n_all, 1)
        start = t_from_ns + (np.arange(n_all) * slot_ns).astype(np.int64)
        start = start[start % STEP_NS < BUSY_SHARE * STEP_NS]
        n = len(start)
        dur = np.maximum((slot_ns * 0.85 * rng.lognormal(0.0, 0.25, n)).astype(np.int64), 1)
        dur = np.minimum(dur, int(slot_ns * 0.98))
        end = start + dur
        cls = self._mix(start, rng.random(n))
        kernels = KernelBatch.from_columns({
            "start_ns": start, "end_ns": end, "device": np.zeros(n),
            "stream": np.full(n, 7), "correlation": start // 100,
            "name_id": self.name_ids[cls], "grid_x": np.full(n, 128), "grid_y": np.ones(n),
            "grid_z": np.ones(n), "block_x": np.full(n, 256), "block_y": np.ones(n),
            "block_z": np.ones(n), "registers": np.full(n, 64)}, n)
        # power readings at the 100 ms grid inside the chunk, each the mean over 25 ms
        t_read = np.arange(-(-t_from_ns // PERIOD_NS) * PERIOD_NS, t_to_ns, PERIOD_NS,
                           dtype=np.int64)
        dyn_j = self.dp_w[cls] * dur * 1e-9
        cum = np.concatenate([[0.0], np.cumsum(dyn_j)])
        lo = np.searchsorted(start, t_read - WINDOW_NS)
        hi = np.searchsorted(start, t_read)
        win_w = P_IDLE_W + (cum[hi] - cum[lo]) / (WINDOW_NS * 1e-9)
        power_w = win_w + rng.normal(0.0, 2.0, len(t_read))
        nr = len(t_read)
        power = PowerBatch.from_columns({
            "t_ns": t_read, "power_mw": np.round(power_w * 1000), "device": np.zeros(nr),
            "field": np.full(nr, int(PowerField.INSTANT)), "fresh": np.ones(nr, bool)}, nr)
        # the counter: energy at the chunk start + idle and dynamic energy up to each reading
        e_mj = self.energy_mj + (P_IDLE_W * (t_read - t_from_ns) * 1e-9
                                 + cum[hi]) * 1000.0
        self.energy_mj += (P_IDLE_W * (t_to_ns - t_from_ns) * 1e-9 + cum[-1]) * 1000.0
        energy = EnergyBatch.from_columns({"t_ns": t_read, "energy_mj": np.round(e_mj),
                                           "device": np.zeros(nr)}, nr)
        clamp = ((t_read // 10_000_000_000) % 3 == 2).astype(np.uint64) * np.uint64(0x4)
        clocks = ClockBatch.from_columns({
            "t_ns": t_read, "device": np.zeros(nr), "sm_mhz": np.where(clamp > 0, 1500, 1980),
            "mem_mhz": np.full(nr, 2619), "temp_c": 55.0 + (power_w - P_IDLE_W) / 20.0,
            "clock_reasons": clamp}, nr)
        st = np.arange(-(-t_from_ns // STEP_NS) * STEP_NS, t_to_ns, STEP_NS, dtype=np.int64)
        ns = len(st)
        markers = MarkerBatch.from_columns({
            "start_ns": st, "end_ns": st + STEP_NS - 1000, "device": np.full(ns, -1),
            "tid": np.full(ns, 1), "name_id": np.full(ns, self.step_name),
            "kind": np.full(ns, int(MarkerKind.PROFILER_STEP))}, ns)
        return {"kernels": kernels, "power": power, "energy": energy, "clocks": clocks,
                "markers": markers}


class LoadFeed:
    """A live-session-shaped feed over :class:`RecordSource` (see the module docstring)."""

    def __init__(self, rate_per_s: float, *, horizon_s: float = 15.0, refresh_s: float = 0.5,
                 chunk_s: float = 0.05, n_boot: int = 100, gpu: str = "h100",
                 engine: bool = True) -> None:
        self.engine = engine
        self.source = RecordSource(rate_per_s)
        self.horizon_ns = int(horizon_s * 1e9)
        self.refresh_s = refresh_s
        self.chunk_ns = int(chunk_s * 1e9)
        self.n_boot = n_boot
        self.gpu = gpu
        self._ring: collections.deque[tuple[int, Chunk]] = collections.deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t0_wall = time.monotonic()
        self.t0_ns = 1_800_000_000_000_000_000
        self._now_ns = self.t0_ns
        self.engine_s: list[float] = []
        self.snapshot_at: list[float] = []
        self.generate_s = 0.0
        self.records = 0
        self.behind_s = 0.0
        self.live = LiveFeed(self.source.strings, label=self.label, gpu=gpu,
                             horizon_s=horizon_s, refresh_s=refresh_s, n_boot=n_boot)
        self.live.devices = [DeviceInfo(0, "NVIDIA H100 80GB HBM3")]
        self.panels = PanelFeed(self.live)
        self._thread = threading.Thread(target=self._collect, name="load-collector",
                                        daemon=True)
        self._thread.start()

    # collector thread: what CUPTI buffers + the NVML sampler are in a live session
    def _collect(self) -> None:
        while not self._stop.is_set():
            target = self.t0_ns + int((time.monotonic() - self._t0_wall) * 1e9)
            while self._now_ns + self.chunk_ns <= target:
                t_from = self._now_ns
                g0 = time.perf_counter()
                ch = self.source.chunk(t_from, t_from + self.chunk_ns)
                self.generate_s += time.perf_counter() - g0
                self.records += len(ch["kernels"])
                self.live.add(Trace(strings=self.source.strings, **ch))
                with self._lock:
                    self._ring.append((t_from, ch))
                    while self._ring and self._ring[0][0] < t_from - self.horizon_ns:
                        self._ring.popleft()
                self._now_ns = t_from + self.chunk_ns
            self.behind_s = (target - self._now_ns) / 1e9
            self._stop.wait(self.chunk_ns / 1e9 / 2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def ring_records(self) -> int:
        with self._lock:
            return sum(len(c["kernels"]) for _, c in self._ring)

    def trace(self) -> Trace:
        with self._lock:
            chunks = [c for _, c in self._ring]
        tr = Trace(strings=self.source.strings,
                   devices=[DeviceInfo(0, "NVIDIA H100 80GB HBM3")], meta={"source": "load"})
        tr.kernels = KernelBatch.concat([c["kernels"] for c in chunks])
        tr.power = PowerBatch.concat([c["power"] for c in chunks])
        tr.energy = EnergyBatch.concat([c["energy"] for c in chunks])
        tr.clocks = ClockBatch.concat([c["clocks"] for c in chunks])
        tr.markers = MarkerBatch.concat([c["markers"] for c in chunks])
        return tr

    # ------------------------------------------------------------------ SnapshotFeed
    def next_snapshot(self) -> Snapshot | None:
        if not self.engine:  # the control run: collection and UI only
            time.sleep(0.05)
            return None
        t0 = time.perf_counter()
        snap = self.panels.next_snapshot()
        if snap is None:
            time.sleep(0.02)
            return None
        self.engine_s.append(time.perf_counter() - t0)
        self.snapshot_at.append(time.monotonic())
        return snap

    def power_trace(self) -> PowerTrace:
        with self._lock:
            chunks = [c["power"] for _, c in self._ring]
        pw = PowerBatch.concat(chunks)
        keep = pw.t_ns >= (pw.t_ns[-1] - int(GRAPH_S * 1e9) if len(pw) else 0)
        return pw.t_ns[keep], pw.power_mw[keep] / 1000.0

    @property
    def connected(self) -> bool:
        return not self._stop.is_set()

    @property
    def label(self) -> str:
        return f"load {self.source.rate_per_s:,.0f} kernels/s"
