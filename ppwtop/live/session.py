"""The ppwtop side of live collection: one session with one target.

Owns the session loop: accept the agent's connection on a :class:`Listener`, read frames,
decode CUPTI buffers (:class:`ppwtop.collectors.cupti_decode.Decoder`), turn step marks into
STEP_MARK markers, drain the NVML sampler thread, append every slice to the ``.ppw``
recording as it arrives (each chunk is with the OS when written: a SIGKILL of ppwtop keeps all
but the chunk being written) and hand it to the :class:`~ppwtop.live.feed.LiveFeed`.

The session ends when the target disconnects (it exited, or stopped its agent), when the
launched child exits without ever connecting, at the ``seconds`` deadline, or on
:meth:`Session.request_stop`.  A full disk stops the recording (what was written is kept and
the user is told) but not the session.  Run metadata (the handshake, clock pairs, agent and
decoder counters, NVML notes, what a late attach cannot see) goes into the recording as meta
updates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from attribution.model import (
    ApiBatch,
    MarkerBatch,
    MarkerKind,
    Trace,
)
from ppwtop.collectors.cupti_decode import Decoder
from ppwtop.live.feed import LiveFeed
from ppwtop.live.signals import deferred_interrupts
from ppwtop.live.status_out import StatusOut, status_out
from ppwtop.recording import RecordingError, RecordingWriter
from ppwtop.transport import frames
from ppwtop.transport.endpoint import FrameReader, Listener
from ppwtop.transport.frames import FrameType

NVML_DRAIN_S = 0.25
META_EVERY_S = 2.0
LATE_ATTACH_MISSING = ["activity records of work that completed before the attach",
                       "NVTX ranges (NVTX injection is read only when CUDA starts)"]
STEP_MARK_NAME = "ppwtop.mark_step"


@dataclasses.dataclass(slots=True)
class SessionCounts:
    buffers: int = 0
    seq_gaps: int = 0  # buffers the agent dropped, seen as holes in the sequence numbers
    kernels: int = 0
    copies: int = 0
    memsets: int = 0
    apis: int = 0
    markers: int = 0
    steps: int = 0
    power: int = 0
    energy: int = 0
    clocks: int = 0
    frames: int = 0
    decode_ns: int = 0
    latency_ns: list[int] = dataclasses.field(default_factory=list)


class Session:
    """One live session (see module docstring); :func:`serve_session` drives it."""

    def __init__(self, listener: Listener, *, label: str, backend: str,
                 record_path: str | Path | None = None, sampler: Any = None,
                 meta: dict[str, Any] | None = None, devices: list[Any] | None = None,
                 gpu: str | None = None, out: TextIO | StatusOut = sys.stderr) -> None:
        self.listener = listener
        self.backend = backend
        self.label = label
        self.sampler = sampler
        self.out = status_out(out)  # a failed status line never ends the session
        self.decoder = Decoder()
        self.strings = self.decoder.strings
        self._step_name = self.strings.intern(STEP_MARK_NAME)
        self.feed = LiveFeed(self.strings, label=label, gpu=gpu)
        self.feed.devices = list(devices or [])
        self.counts = SessionCounts()
        self.meta: dict[str, Any] = {"backend": backend, "label": label, **(meta or {})}
        self.hello: dict[str, Any] | None = None
        self.agent_stats: dict[str, Any] = {}
        self.clock_pairs: list[dict[str, Any]] = []
        self.reader: FrameReader | None = None
        self.connected_once = False
        self.bye = False
        self.end_reason = ""
        self.record_path = Path(record_path) if record_path is not None else None
        self.writer: RecordingWriter | None = None
        self.recording_error: str | None = None
        self._last_seq = 0
        self.sim_end_ns = 0  # sim backend: when the simulated job's records run out
        self._stop = threading.Event()
        self._stop_reason = "stopped"
        self._last_meta = 0.0
        if self.record_path is not None:
            self.writer = RecordingWriter(self.record_path, self.meta, self.feed.devices)

    # --- control --------------------------------------------------------------------------

    def request_stop(self, reason: str | None = None) -> None:
        """End :meth:`run` at its next turn; ``reason``: what the recording's end says
        (default "stopped")."""
        if reason is not None:
            self._stop_reason = reason
        self._stop.set()

    def say(self, text: str) -> None:
        """One status line; a stream that fails (stderr's reader gone) silences later ones
        and never ends the session (:class:`StatusOut`)."""
        print(f"ppwtop: {text}", file=self.out, flush=True)

    # --- the loop -------------------------------------------------------------------------

    def run(self, *, seconds: float | None = None, child: subprocess.Popen[bytes] | None = None,
            accept_timeout_s: float = 60.0, poll_s: float = 0.05,
            seconds_from_connect: bool = False) -> str:
        """Serve until the session ends; returns why it ended.

        ``seconds_from_connect`` (attach): ``seconds`` count from the agent's connection,
        since an injected agent connects only once it is set up in the target; the session
        then ends if no agent connects within ``accept_timeout_s``.
        """
        t0 = time.monotonic()
        deadline = t0 + seconds if seconds and not seconds_from_connect else math.inf
        next_drain = t0
        warned_no_agent = False
        try:
            while True:
                now = time.monotonic()
                if self._stop.is_set():
                    self.end_reason = self._stop_reason
                    break
                if now >= deadline:
                    self.end_reason = f"{seconds:g} s elapsed"
                    break
                if self.reader is None:
                    conn = self.listener.accept(poll_s)
                    if conn is not None:
                        self.reader = FrameReader(conn)
                        self.connected_once = True
                        if seconds and seconds_from_connect:
                            deadline = now + seconds
                    elif child is not None and child.poll() is not None:
                        self.end_reason = (f"the command exited (status {child.returncode}) "
                                           "without an agent connecting")
                        break
                    elif seconds_from_connect and now - t0 > accept_timeout_s:
                        self.end_reason = f"no agent connected within {accept_timeout_s:g} s"
                        break
                    elif not warned_no_agent and now - t0 > accept_timeout_s:
                        warned_no_agent = True
                        self.say(f"no agent connected after {accept_timeout_s:g} s (not a "
                                 "Python program?): recording NVML only")
                else:
                    self._handle(self.reader.read(poll_s))
                    if self.reader.eof:
                        self.end_reason = "the target disconnected" if not self.bye \
                            else "the target exited"
                        break
                if self.sim_end_ns and time.time_ns() > self.sim_end_ns:
                    self.sim_end_ns = 0
                    self.say("the simulated job has ended: no more kernels from the fake "
                             "CUPTI (PPWTOP_SIM_SECONDS sets a longer one)")
                    self.feed.notes.append("the simulated job has ended")
                if now >= next_drain:
                    self._drain_nvml()
                    next_drain = now + NVML_DRAIN_S
                if now - self._last_meta >= META_EVERY_S:
                    self._write_meta()
        except frames.FrameError as e:
            self.end_reason = f"corrupt data from the target ({e}); connection closed"
            self.say(self.end_reason)
        except KeyboardInterrupt as e:  # Ctrl-C (or SIGTERM/SIGHUP, signals.Terminated): the
            # recording's end says so, written by _finish before it closes
            self.end_reason = self.end_reason or getattr(e, "reason", "interrupted")
            raise
        finally:
            self._finish()
        return self.end_reason

    def _finish(self) -> None:
        """Close the session's recording with its end chunk; a second Ctrl-C (or SIGTERM)
        meanwhile waits until the file is closed (:func:`deferred_interrupts`)."""
        with deferred_interrupts():
            self._finish_held()

    def _finish_held(self) -> None:
        self._drain_nvml()
        self.feed.set_connected(False)
        if self.reader is not None:
            with contextlib.suppress(OSError):
                self.reader.sock.close()
        self.meta["end_reason"] = self.end_reason
        self._write_meta()
        if self.writer is not None:
            try:
                self.writer.close()
            except RecordingError as e:
                self._recording_failed(e)

    # --- frames ---------------------------------------------------------------------------

    def _handle(self, got: list[frames.Frame]) -> None:
        pieces: list[Trace] = []
        steps: list[dict[str, Any]] = []
        for f in got:
            self.counts.frames += 1
            if f.type is FrameType.BUFFER:
                pieces.append(self._buffer(frames.decode_buffer(f.payload)))
            elif f.type is FrameType.STEP:
                steps.extend(f.json().get("steps", []))
            elif f.type is FrameType.HELLO:
                self._hello(f.json())
            elif f.type is FrameType.CLOCK:
                self.clock_pairs.append(f.json())
                del self.clock_pairs[:-50]
            elif f.type is FrameType.STATS:
                self._stats(f.json())
            elif f.type is FrameType.BYE:
                self.bye = True
        if steps:
            pieces.append(Trace(strings=self.strings, markers=self._steps(steps)))
        for p in pieces:
            self._append(p)

    def _hello(self, h: dict[str, Any]) -> None:
        self.hello = h
        self.meta["target"] = h
        self.meta["pid"] = h.get("pid")
        self.meta["late_attach"] = bool(h.get("late_attach"))
        if h.get("late_attach"):
            self.meta["late_attach_missing"] = LATE_ATTACH_MISSING
            self.feed.notes.append("late attach: missing " + "; ".join(LATE_ATTACH_MISSING))
        if h.get("clock"):
            self.clock_pairs.append(h["clock"])
        self._write_meta()

    def _stats(self, s: dict[str, Any]) -> None:
        old = self.agent_stats.get("cupti_status")
        self.agent_stats = s
        status = s.get("cupti_status")
        if status != old and status not in ("ok", "starting", "not started", None):
            self.say(f"target: CUPTI {status}: {s.get('cupti_detail') or ''} "
                     "- going on with NVML data only")
            self.feed.notes.append(f"CUPTI {status} in the target: power only, no kernels")

    def _buffer(self, b: frames.BufferFrame) -> Trace:
        t0 = time.perf_counter_ns()
        c = self.counts
        if b.seq > self._last_seq + 1:
            c.seq_gaps += b.seq - self._last_seq - 1
        self._last_seq = max(self._last_seq, b.seq)
        self.decoder.add_names(b.names)
        d = self.decoder.decode(b.data, dropped_records=b.dropped_records)
        c.buffers += 1
        c.decode_ns += time.perf_counter_ns() - t0
        if b.sent_ns:  # buffer completed in the target -> decoded here (same host clock)
            c.latency_ns.append(time.time_ns() - b.sent_ns)
            del c.latency_ns[:-1000]
        return Trace(strings=self.strings, kernels=d.kernels, copies=d.copies,
                     memsets=d.memsets, apis=ApiBatch.concat([d.apis, d.syncs]),
                     markers=d.markers)

    def _steps(self, steps: list[dict[str, Any]]) -> MarkerBatch:
        items = [s.get("items") for s in steps]
        return MarkerBatch.from_columns({
            "start_ns": np.array([int(s["start_ns"]) for s in steps], np.int64),
            "end_ns": np.array([int(s["end_ns"]) for s in steps], np.int64),
            "device": np.full(len(steps), -1, np.int16),
            "tid": np.array([int(s.get("tid") or -1) for s in steps], np.int64),
            "name_id": np.full(len(steps), self._step_name, np.int32),
            "kind": np.full(len(steps), int(MarkerKind.STEP_MARK), np.uint8),
            "items": np.array([math.nan if i is None else float(i) for i in items], np.float64),
        })

    # --- NVML, recording, feed --------------------------------------------------------------

    def _drain_nvml(self) -> None:
        if self.sampler is None:
            return
        tr = self.sampler.drain()
        self._append(Trace(strings=self.strings, power=tr.power, energy=tr.energy,
                           clocks=tr.clocks))

    def _append(self, piece: Trace) -> None:
        c = self.counts
        for k in ("kernels", "copies", "memsets", "apis", "power", "energy", "clocks"):
            setattr(c, k, getattr(c, k) + len(getattr(piece, k)))
        mk = piece.markers
        c.markers += len(mk)
        c.steps += int(np.count_nonzero(mk.kind == MarkerKind.STEP_MARK))
        if self.writer is not None:
            try:
                self.writer.append_trace_delta(piece)
            except RecordingError as e:
                self._recording_failed(e)
        self.feed.add(piece)

    def _recording_failed(self, e: RecordingError) -> None:
        self.recording_error = str(e)
        self.say(f"error: {e}; recording stopped, what was written is kept")
        w, self.writer = self.writer, None
        if w is not None:
            with contextlib.suppress(RecordingError, OSError):
                w.close()

    def summary_meta(self) -> dict[str, Any]:
        c = self.counts
        d = self.decoder.stats
        lat = np.asarray(c.latency_ns, dtype=np.float64)
        out: dict[str, Any] = {
            "session": {
                "buffers": c.buffers, "buffers_dropped_by_agent": max(
                    c.seq_gaps, int(self.agent_stats.get("dropped_buffers", 0) or 0)),
                "kernels": c.kernels, "copies": c.copies, "steps": c.steps,
                "power_rows": c.power, "frames": c.frames,
                "decode_us_per_buffer": c.decode_ns / 1e3 / max(c.buffers, 1),
                "buffer_latency_ms_p50": float(np.median(lat)) / 1e6 if len(lat) else None,
                "buffer_latency_ms_p95": float(np.percentile(lat, 95)) / 1e6
                if len(lat) else None,
                "end_reason": self.end_reason,
                "recording_error": self.recording_error,
                "recording": str(self.record_path) if self.writer is not None else None,
            },
            "decode": {"buffers": d.buffers, "bytes": d.bytes,
                       "dropped_records": d.dropped_records,
                       "undecodable_buffers": d.undecodable_buffers,
                       "unresolved_names": d.unresolved_names,
                       "overhead_records": d.overhead_records},
            "agent": self.agent_stats,
            "clock_pairs": self.clock_pairs[-10:],
        }
        if self.sampler is not None:
            out.update(self.sampler.meta())
        return out

    def _write_meta(self) -> None:
        self._last_meta = time.monotonic()
        summary = self.summary_meta()
        lost_buf = summary["session"]["buffers_dropped_by_agent"]
        lost_rec = summary["decode"]["dropped_records"]
        if lost_buf or lost_rec:
            self.feed.loss_note = (f"data lost: the agent dropped {lost_buf} buffers (ppwtop "
                                   f"too slow), CUPTI dropped {lost_rec} records")
        self.feed.meta = {k: v for k, v in summary.items() if k != "clock_pairs"}
        if self.writer is not None:
            try:
                self.writer.write_meta({**self.meta, **summary})
            except RecordingError as e:
                self._recording_failed(e)


__all__ = ["Session", "SessionCounts"]
