"""The live feed: what a session has received, attributed over a sliding horizon for the TUI.

:class:`LiveFeed` is a :class:`~ppwtop.tui.feed.SnapshotFeed`.  The session thread hands it
each slice of new records (:meth:`add`, a :class:`Trace` sharing the session's string table);
it keeps only the last ``keep_s`` seconds (enough for the horizon and the power graph) plus the
first energy-counter reading per GPU (for "energy so far").  Attribution is the live
incremental engine (:class:`attribution.engine.live.LiveEngine`), as for the demo and replay
feeds: each snapshot first hands it the records that completed up to :data:`SETTLE_NS`
behind the newest one received (buffers arrive per stream and per flush, not in completion
order; a record later than that is still given to the engine, with the next delta), so a
tick's cost does not grow with the run.  Until the engine has settled enough data to fit the
sensor lag, snapshots come from the batch engine on the kept window
(:meth:`ppwtop.demo_feed.TraceFeed.snapshot_at`).  Snapshots are duty-cycled like the demo's.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any

import numpy as np

from attribution.engine.live_pending import PendingLaunches
from attribution.model import PowerField, StringTable, Trace
from attribution.snapshot import Snapshot
from ppwtop.demo_feed import DUTY_FACTOR, GRAPH_S, TraceFeed
from ppwtop.tui.feed import PowerTrace, empty_power_trace

_ITEMS = ("kernels", "copies", "memsets", "apis", "markers")
_SAMPLES = ("power", "energy", "clocks")
MAX_BATCH_RECORDS = 300_000
"""While the live engine settles, the batch engine stands in only below this many records
(about 0.3 s of work); above it the screen waits the few seconds the live engine needs."""
MAX_BACKLOG_NS = 10_000_000_000
"""More than this much unattributed time (well past one slow refit): the live engine cannot
keep up; it restarts."""
RESTART_NS = 2_000_000_000
"""What a restarted live engine starts from (the newest settled second)."""
SETTLE_NS = 1_000_000_000
"""Records are handed to the live engine once the newest record is this far past their end
(the agent flushes every 0.1 s; NVML is drained every 0.25 s)."""


def _concat(pieces: list[Trace], strings: StringTable, devices: list[Any]) -> Trace:
    cols = {k: type(getattr(Trace(), k)).concat(getattr(p, k) for p in pieces)
            for k in Trace.BATCH_FIELDS}
    return Trace(strings=strings, devices=list(devices), **cols)


def _split_at(tr: Trace, cut_ns: int) -> tuple[Trace, Trace]:
    """(records ended and readings taken at or before ``cut_ns``, the rest)."""
    ready: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for k in Trace.BATCH_FIELDS:
        b = getattr(tr, k)
        m = (b.end_ns <= cut_ns) if k in _ITEMS else (b.t_ns <= cut_ns)
        ready[k], rest[k] = b.take(m), b.take(~m)
    return (Trace(strings=tr.strings, devices=tr.devices, **ready),
            Trace(strings=tr.strings, devices=tr.devices, **rest))


def _split_pieces(pieces: list[tuple[int, Trace]], cut_ns: int
                  ) -> tuple[list[Trace], list[tuple[int, Trace]]]:
    """:func:`_split_at` of the concatenation of ``(end_ns, piece)``, as pieces: a piece
    wholly on one side of the cut is passed on as it is (no copy); only the pieces straddling
    it are split."""
    ready: list[Trace] = []
    rest: list[tuple[int, Trace]] = []
    for end, q in pieces:
        if end <= cut_ns:
            ready.append(q)
        elif _piece_first_end_ns(q) > cut_ns:
            rest.append((end, q))
        else:
            r, q2 = _split_at(q, cut_ns)
            ready.append(r)
            rest.append((_piece_end_ns(q2), q2))
    return ready, rest


def _piece_first_end_ns(tr: Trace) -> int:
    firsts = [int(getattr(tr, k).end_ns.min()) for k in _ITEMS if len(getattr(tr, k))]
    firsts += [int(getattr(tr, k).t_ns.min()) for k in _SAMPLES if len(getattr(tr, k))]
    return min(firsts) if firsts else 0


def _piece_end_ns(tr: Trace) -> int:
    ends = [int(getattr(tr, k).end_ns.max()) for k in _ITEMS if len(getattr(tr, k))]
    ends += [int(getattr(tr, k).t_ns.max()) for k in _SAMPLES if len(getattr(tr, k))]
    return max(ends) if ends else 0


class LiveFeed:
    """Snapshots of a live session (see module docstring)."""

    def __init__(self, strings: StringTable, *, label: str, gpu: str | None = None,
                 horizon_s: float = 15.0, refresh_s: float = 0.5, n_boot: int = 100) -> None:
        self.strings = strings
        self.gpu = gpu
        self.horizon_ns = int(horizon_s * 1e9)
        self.keep_ns = int((max(horizon_s, GRAPH_S) + 5.0) * 1e9)
        self.refresh_s = refresh_s
        self.n_boot = n_boot
        self._label = label
        self._lock = threading.Lock()
        # (end, first end, piece): the newest and oldest record end or reading of each piece
        self._pieces: collections.deque[tuple[int, int, Trace]] = collections.deque()
        self._latest_ns = 0
        # launches whose items have not come (serve's windows): tracked once asked for, from
        # the pieces received since the last ask taken together (a piece's API records may
        # come a buffer after its items; the engine's hand-overs take them together too)
        self._launches: PendingLaunches | None = None
        self._launch_pieces: list[Trace] = []
        self._latest_power_ns = 0  # the newest power reading received (any device)
        self._first_power_ns = 0  # the oldest power reading received (any device)
        self._first_ns: int | None = None
        self._energy0: dict[int, tuple[int, int]] = {}  # device -> first (t_ns, mJ)
        self._energy_last: dict[int, tuple[int, int]] = {}
        self._power: collections.deque[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = \
            collections.deque()
        self._connected = True
        self._dirty = False
        self._next_due = 0.0
        self.devices: list[Any] = []
        self.meta: dict[str, Any] = {}
        self.notes: list[str] = []  # what the session wants the user to see (late attach, ...)
        self.loss_note: str | None = None  # dropped buffers/records so far
        self.last_cost_s = 0.0
        self.attributions = 0
        self._pending: list[tuple[int, Trace]] = []  # (end, piece) not yet handed over
        self._engine: Any = None
        self._fed_ns = 0
        self.late_records = 0  # records that ended before what the engine had already got
        self.feed_cost_s = 0.0
        self.engine_restarts = 0
        self.live_ticks = 0

    # --- from the session thread ----------------------------------------------------------

    def add(self, piece: Trace) -> None:
        end = _piece_end_ns(piece)
        if end == 0:
            return
        with self._lock:
            self._pieces.append((end, _piece_first_end_ns(piece), piece))
            self._pending.append((end, piece))
            if self._launches is not None:
                self._launch_pieces.append(piece)
            self._latest_ns = max(self._latest_ns, end)
            if len(piece.power):
                self._latest_power_ns = max(self._latest_power_ns, int(piece.power.t_ns.max()))
                first = int(piece.power.t_ns.min())
                self._first_power_ns = min(self._first_power_ns or first, first)
            if self._first_ns is None:
                self._first_ns = end
            lo = self._latest_ns - self.keep_ns
            while self._pieces and self._pieces[0][0] < lo:
                self._pieces.popleft()
            # nobody is taking snapshots (headless): keep the engine's backlog bounded too
            self._pending = [q for q in self._pending if q[0] >= lo]
            self._note_energy(piece)
            self._note_power(piece)
            self._dirty = True

    def set_connected(self, connected: bool) -> None:
        self._connected = connected

    def _note_energy(self, piece: Trace) -> None:
        e = piece.energy
        for dev in np.unique(e.device).tolist():
            rows = e.take(e.device == dev)
            i0, i1 = int(np.argmin(rows.t_ns)), int(np.argmax(rows.t_ns))
            self._energy0.setdefault(dev, (int(rows.t_ns[i0]), int(rows.energy_mj[i0])))
            self._energy_last[dev] = (int(rows.t_ns[i1]), int(rows.energy_mj[i1]))

    def _note_power(self, piece: Trace) -> None:
        p = piece.power
        if not len(p):
            return
        keep = p.fresh & (p.device == p.device.min())
        fields = p.field[keep]
        if not len(fields):
            return
        want = int(PowerField.INSTANT) if bool(np.any(fields == PowerField.INSTANT)) \
            else int(np.bincount(fields).argmax())
        keep &= p.field == want
        order = np.argsort(p.t_ns[keep], kind="stable")
        self._power.append((p.t_ns[keep][order], p.power_mw[keep][order] / 1000.0))
        lo = self._latest_ns - int(GRAPH_S * 1e9)
        while self._power and len(self._power[0][0]) and self._power[0][0][-1] < lo:
            self._power.popleft()

    # --- window and attribution -----------------------------------------------------------

    def window(self, horizon_ns: int | None = None) -> tuple[Trace, int]:
        """The records of the last horizon (all kept records when ``horizon_ns`` is huge)."""
        with self._lock:
            pieces = [p for _, _, p in self._pieces]
            end = self._latest_ns
        cols = {k: type(getattr(Trace(), k)).concat(getattr(p, k) for p in pieces)
                for k in Trace.BATCH_FIELDS}
        tr = Trace(strings=self.strings, devices=list(self.devices), meta=dict(self.meta),
                   **cols)
        return tr, end

    def window_between(self, start_ns: int, end_ns: int) -> Trace:
        """The kept records that completed, and readings taken, in ``[start_ns, end_ns]``."""
        return _concat(self.window_pieces(start_ns, end_ns), self.strings, self.devices)

    def window_pieces(self, start_ns: int, end_ns: int) -> list[Trace]:
        """:meth:`window_between` as the received pieces (no concatenation: the panels read
        a few columns of millions of records)."""
        with self._lock:
            pieces = [(e, f, p) for e, f, p in self._pieces if e >= start_ns]
        inside: list[Trace] = []
        for end, first_end, piece in pieces:  # filter only the pieces straddling an edge
            q, first = piece, first_end
            if end > end_ns:
                q = _split_at(q, end_ns)[0]
                first = _piece_first_end_ns(q)
            if first < start_ns:
                q = _split_at(q, start_ns - 1)[1]
            inside.append(q)
        return inside

    def energy_so_far_j(self) -> float | None:
        with self._lock:
            tot = [(self._energy_last[d][1] - e0[1]) for d, e0 in self._energy0.items()
                   if self._energy_last.get(d, e0)[0] > e0[0]]
        return sum(tot) / 1000.0 if tot else None

    def _feed_engine(self) -> Snapshot | None:
        """Hand the live engine what completed up to the settle cut; its snapshot (None while
        it is still settling)."""
        self.feed_engine()
        snap: Snapshot | None = self._engine.snapshot()
        if snap is not None:
            self.live_ticks += 1
        return snap

    def feed_engine(self) -> None:
        """Hand the live engine what completed up to the settle cut (called on every poll, not
        only when a snapshot is due, so its backlog never outgrows one poll's records)."""
        with self._lock:
            cut = self._latest_ns - SETTLE_NS
            if cut <= self._fed_ns:
                pending: list[tuple[int, Trace]] = []
            else:
                if self._fed_ns and cut - self._fed_ns > MAX_BACKLOG_NS:
                    self._fall_behind(cut)
                pending, self._pending = self._pending, []
        if self._engine is None:
            from attribution.engine.live import LiveEngine

            self._engine = LiveEngine(gpu=self.gpu, devices=list(self.devices),
                                      horizon_s=self.horizon_ns / 1e9, n_boot=self.n_boot)
        if pending:
            ready_parts, rest_parts = _split_pieces(pending, cut)
            ready = _concat(ready_parts, self.strings, self.devices)
            self.late_records += sum(int(np.count_nonzero(getattr(ready, k).end_ns
                                                          <= self._fed_ns)) for k in _ITEMS)
            with self._lock:
                self._pending[:0] = rest_parts
            self._engine.update(ready, cut)
            self._fed_ns = cut

    def _fall_behind(self, cut: int) -> None:
        """The engine got more than :data:`MAX_BACKLOG_NS` behind (the record rate is beyond
        what it attributes on this machine): start it afresh on the last
        :data:`RESTART_NS` so memory and latency stay bounded, and say so.  (Caller holds the
        lock.)  The records themselves are still recorded; only the live view skips them."""
        keep_from = cut - RESTART_NS
        self._pending = [q for q in self._pending if q[0] >= keep_from]
        self._engine = None
        self._fed_ns = keep_from
        self.engine_restarts += 1
        note = ("live attribution fell behind (a record rate beyond what it attributes on "
                "this machine, or polling paused): its view restarted; a recording keeps every "
                "record for `ppwtop attribute`")
        if note not in self.notes:
            self.notes.append(note)

    def snapshot(self, horizon_ns: int | None = None, n_boot: int | None = None
                 ) -> Snapshot | None:
        """The horizon's attribution: the live engine's when ``horizon_ns`` is the feed's own
        and it has settled, else the batch engine on the kept window."""
        snap = self._feed_engine() if horizon_ns is None else None
        with self._lock:
            end = self._latest_ns
        if snap is None:
            tr, end = self.window()
            if not len(tr.kernels) and not len(tr.copies):
                return None
            if horizon_ns is None and len(tr.kernels) + len(tr.copies) > MAX_BATCH_RECORDS:
                return None  # the live engine settles in seconds; a batch fit would take longer
            h = self.horizon_ns if horizon_ns is None else horizon_ns
            snap = TraceFeed(tr, label=self._label, gpu=self.gpu, n_boot=n_boot or self.n_boot,
                             horizon_s=h / 1e9).snapshot_at(end, h, n_boot or self.n_boot)
        self.attributions += 1
        if snap is None:
            return None
        meta = dict(snap.meta)
        if self._first_ns is not None:
            meta["elapsed_s"] = (end - self._first_ns) / 1e9
        so_far = self.energy_so_far_j()
        if so_far is not None:
            meta["energy_so_far_j"] = so_far
        meta["live"] = dict(self.meta)
        # the header's "● rec NAME" and "dropped N" (docs/tui.md), from the session's summary
        session, decode = self.meta.get("session") or {}, self.meta.get("decode") or {}
        if session.get("recording"):
            meta["recording"] = str(session["recording"])
        if isinstance(decode.get("dropped_records"), int):
            meta["dropped_records"] = int(decode["dropped_records"])
        return dataclasses.replace(snap, meta=meta,
                                   warnings=(*self.notes, *([self.loss_note] if self.loss_note
                                                            else []), *snap.warnings))

    def snapshot_between(self, start_ns: int, end_ns: int, n_boot: int | None = None
                         ) -> Snapshot | None:
        """The GPU items overlapping ``[start_ns, end_ns]``, cut to it, attributed alone (a
        tumbling window for counters: an item running across an edge counts in both windows,
        each its own part; ``end_ns`` should lag the latest record by the agent's flush
        period so late buffers are not missed, and not pass :attr:`launch_floor_ns`)."""
        tr, _ = self.window()
        if end_ns <= start_ns:
            return None
        return TraceFeed(tr, label=self._label, gpu=self.gpu, n_boot=n_boot or self.n_boot,
                         horizon_s=(end_ns - start_ns) / 1e9).snapshot_at(
                             end_ns, end_ns - start_ns, n_boot or self.n_boot, clip=True)

    @property
    def launch_floor_ns(self) -> int | None:
        """The call start of the earliest launch whose kernel, copy or memset has not come
        (None: none): a tumbling window ending after it could miss an item still running
        (``attribution.engine.live_pending``). Tracked from the first call on."""
        with self._lock:
            if self._launches is None:
                self._launches = PendingLaunches()
            if self._launch_pieces:
                self._launches.update(_concat(self._launch_pieces, self.strings, self.devices))
                self._launch_pieces = []
            return self._launches.floor_ns(self._latest_ns)

    @property
    def latest_ns(self) -> int:
        """The end of the latest record or sample received (0 before any)."""
        with self._lock:
            return self._latest_ns

    @property
    def latest_power_ns(self) -> int:
        """The time of the newest power reading received (0 before any)."""
        with self._lock:
            return self._latest_power_ns

    @property
    def first_power_ns(self) -> int:
        """The time of the oldest power reading received (0 before any)."""
        with self._lock:
            return self._first_power_ns

    # --- SnapshotFeed ---------------------------------------------------------------------

    def next_snapshot(self) -> Snapshot | None:
        now = time.monotonic()
        if self._dirty and now < self._next_due:
            t0 = time.perf_counter()
            self.feed_engine()
            self.feed_cost_s = time.perf_counter() - t0
        if not self._dirty or now < self._next_due:
            if self._engine is not None:  # the lag refit's work, off the snapshot's path
                self._engine.run_background()
            return None
        self._dirty = False
        t0 = time.perf_counter()
        snap = self.snapshot()
        self.last_cost_s = time.perf_counter() - t0
        self._next_due = now + max(self.refresh_s, DUTY_FACTOR * self.last_cost_s)
        return snap

    def power_trace(self) -> PowerTrace:
        with self._lock:
            parts = list(self._power)
        if not parts:
            return empty_power_trace()
        return (np.concatenate([t for t, _ in parts]), np.concatenate([w for _, w in parts]))

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def label(self) -> str:
        return self._label
