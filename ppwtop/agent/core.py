"""The in-target agent: connects to ppwtop, runs the CUPTI raw-buffer collector, ships buffers.

Owns the agent's life inside the user's process: the connection and handshake (HELLO with
versions, pid, argv, backend, clock pair, CUPTI status, late-attach flag), the collector
(:class:`ppwtop.collectors.cupti_raw.RawCollector` against the real libcupti or, on the sim
backend, :class:`ppwtop.fakes.paced_cupti.PacedSimCuptiLib`), the non-blocking sink into the
:class:`ppwtop.transport.sender.Sender`, step marks, and a housekeeping thread that sends a
fresh clock pair and the counters every few seconds.

Rules it keeps: nothing here may block or crash the target.  A full send queue drops the
whole buffer and counts it; a closed socket (ppwtop exited or crashed) stops the collector
and the target runs on unprofiled; CUPTI held by another profiler is reported in the
handshake and stats and the agent carries on without activity records (ppwtop then has
NVML data only).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import threading
import time
from typing import Any

from ppwtop import __version__
from ppwtop.transport import frames
from ppwtop.transport.endpoint import connect
from ppwtop.transport.frames import FrameType
from ppwtop.transport.sender import Sender

CLOCK_PERIOD_S = 2.0
FLUSH_PERIOD_S = 0.1
CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39
BACKENDS = ("cupti", "sim")


class AgentError(RuntimeError):
    """The agent could not start (no ppwtop listening, unknown backend)."""


def _c_version(lib_names: tuple[str, ...], fn: str) -> int | None:
    """An int a C ``fn(int*)`` version getter answers, or None (never initialises CUDA)."""
    for name in lib_names:
        try:
            lib = ctypes.CDLL(name)
            out = ctypes.c_int(0)
            if getattr(lib, fn)(ctypes.byref(out)) == 0:
                return int(out.value)
        except (OSError, AttributeError):
            continue
    return None


class Agent:
    """One agent per process (see :func:`ppwtop.agent.start`)."""

    def __init__(self, socket_path: str, backend: str = "cupti", *, late_attach: bool = False,
                 flush_period_s: float = FLUSH_PERIOD_S, clock_period_s: float = CLOCK_PERIOD_S,
                 lib: Any = None, connect_timeout_s: float = 5.0,
                 max_queue_bytes: int | None = None) -> None:
        if backend not in BACKENDS:
            raise AgentError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
        self.socket_path = socket_path
        self.backend = backend
        self.late_attach = late_attach
        self.flush_period_s = flush_period_s
        self.clock_period_s = clock_period_s
        self.connect_timeout_s = connect_timeout_s
        self.lib = lib
        self.collector: Any = None
        self.sender: Sender | None = None
        self.cupti_status = "not started"
        self.cupti_detail = ""
        self.buffers_offered = 0
        self.buffers_dropped = 0
        self.sink_ns = 0  # thread CPU time in the sink (encode + offer): GIL time it holds
        self.steps_sent = 0
        self.steps_dropped = 0
        self._step_lock = threading.Lock()
        self._last_mark_ns: int | None = None
        self._stop = threading.Event()
        self._stopped = False
        self._house: threading.Thread | None = None
        self._max_queue_bytes = max_queue_bytes

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._open_collector()  # first: the session sees a connection only once it is ready
        try:
            sock = connect(self.socket_path, self.connect_timeout_s)
        except OSError as e:
            self._close_collector()
            raise AgentError(f"cannot connect to ppwtop at {self.socket_path}: "
                             f"{e.strerror or e}") from None
        try:
            sock.settimeout(self.connect_timeout_s)
            sock.sendall(frames.encode_json(FrameType.HELLO, self.hello()))
        except OSError as e:
            sock.close()
            self._close_collector()
            raise AgentError(f"handshake with ppwtop failed: {e}") from None
        kw: dict[str, Any] = {}
        if self._max_queue_bytes is not None:
            kw["max_queue_bytes"] = self._max_queue_bytes
        self.sender = Sender(sock, on_disconnect=self._on_disconnect, **kw)
        if self.collector is not None:
            try:
                self.collector.start(self.flush_period_s)
                self.cupti_status = "ok"
            except Exception as e:
                self._cupti_failed(e)
        self._send_json(FrameType.STATS, self.stats())
        self._house = threading.Thread(target=self._housekeeping, name="ppwtop-agent-clock",
                                       daemon=True)
        self._house.start()
        atexit.register(self.stop)
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _open_collector(self) -> None:
        try:
            from ppwtop.agent.bootstrap import import_with_deps

            raw = import_with_deps("ppwtop.collectors.cupti_raw")  # numpy, cupti
            if self.lib is None:
                self.lib = self._load_lib()
            self.collector = raw.RawCollector(self.lib, self._sink)
        except Exception as e:
            self.collector = None
            self.cupti_status = "unavailable"
            self.cupti_detail = f"{type(e).__name__}: {e}"

    def _load_lib(self) -> Any:
        if self.backend == "sim":
            from ppwtop.fakes.paced_cupti import PacedSimCuptiLib
            from ppwtop.fakes.sim_run import SimRunConfig

            busy = os.environ.get("PPWTOP_SIM_CUPTI_BUSY") == "1"
            return PacedSimCuptiLib(SimRunConfig.from_env(os.environ), busy=busy,
                                    late=self.late_attach)
        from ppwtop.collectors.cupti_raw import load_libcupti

        return load_libcupti()

    def _cupti_failed(self, e: Exception) -> None:
        text = str(e)
        busy = f"error {CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED}"
        if "MULTIPLE_SUBSCRIBERS" in text or busy in text:
            self.cupti_status = "in_use"
            self.cupti_detail = ("CUPTI is already in use by another profiler in this process: "
                                 f"no kernel/copy records ({text})")
        else:
            self.cupti_status = "failed"
            self.cupti_detail = text
        self.collector = None

    @property
    def connected(self) -> bool:
        """Started, not stopped, and its ppwtop still there."""
        return (not self._stopped and self.sender is not None
                and bool(self.sender.connected))

    def stop(self) -> None:
        """Flush the last records, send the final stats and BYE, close.  Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        self._close_collector()
        if self._house is not None:
            self._house.join(1.0)
        if self.sender is not None:
            self._send_json(FrameType.STATS, self.stats())
            self._send_json(FrameType.BYE, {"pid": os.getpid()})
            self.sender.close(timeout_s=3.0)
        self._write_sim_report()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def _close_collector(self) -> None:
        c, self.collector = self.collector, None
        if c is not None:
            with contextlib.suppress(Exception):
                c.stop()
            self._last_collector = c

    def _after_fork_in_child(self) -> None:
        """A forked child (e.g. a DataLoader worker) is not profiled: it closes its copy of the
        connection and never touches CUPTI or the socket again."""
        self._stopped = True
        self.collector = None
        self._lock_reset()
        if self.sender is not None:
            self.sender.abandon()

    def _lock_reset(self) -> None:
        self._step_lock = threading.Lock()

    def _on_disconnect(self) -> None:
        """ppwtop went away: stop collecting (the target keeps running, unprofiled)."""
        self._stop.set()
        threading.Thread(target=self._close_collector, name="ppwtop-agent-stop",
                         daemon=True).start()

    # --- what goes on the wire ---------------------------------------------------------------

    def clock_pair(self) -> dict[str, int | None]:
        """CUPTI's timestamp next to ``time.time_ns()`` (CUPTI's is None when unknown)."""
        host = time.time_ns()
        cupti_ns: int | None = None
        fn = getattr(self.lib, "cuptiGetTimestamp", None)
        if fn is not None:
            out = ctypes.c_uint64(0)
            try:
                if fn(ctypes.pointer(out)) == 0:
                    cupti_ns = int(out.value)
            except Exception:
                cupti_ns = None
        return {"cupti_ns": cupti_ns, "host_ns": host, "host_after_ns": time.time_ns()}

    def hello(self) -> dict[str, Any]:
        real = self.backend == "cupti"
        cupti_version: int | None = None
        if real and self.lib is not None and hasattr(self.lib, "cuptiGetVersion"):
            out = ctypes.c_uint32(0)
            try:
                if self.lib.cuptiGetVersion(ctypes.byref(out)) == 0:
                    cupti_version = int(out.value)
            except Exception:
                cupti_version = None
        return {
            "protocol": frames.PROTOCOL_VERSION, "ppwtop_version": __version__,
            "pid": os.getpid(), "argv": list(getattr(sys, "argv", []) or []),
            "python": sys.version.split()[0], "executable": sys.executable,
            "backend": self.backend, "late_attach": self.late_attach,
            "cuda_driver_version": _c_version(("libcuda.so.1", "libcuda.so"),
                                              "cuDriverGetVersion") if real else None,
            "cuda_runtime_version": _c_version(("libcudart.so",), "cudaRuntimeGetVersion")
            if real else None,
            "cupti_version": cupti_version,
            "cupti_status": self.cupti_status if self.collector is None else "starting",
            "cupti_detail": self.cupti_detail,
            "clock": self.clock_pair(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    def stats(self) -> dict[str, Any]:
        c = self.collector or getattr(self, "_last_collector", None)
        raw = c.stats if c is not None else None
        s = self.sender
        return {
            "cupti_status": self.cupti_status, "cupti_detail": self.cupti_detail,
            "buffers": raw.buffers if raw else 0, "bytes": raw.bytes if raw else 0,
            "dropped_records": raw.dropped_records if raw else 0,
            "dropped_buffers": self.buffers_dropped,
            "callback_errors": raw.callback_errors if raw else 0,
            "steps_sent": self.steps_sent, "steps_dropped": self.steps_dropped,
            "sink_us_mean": self.sink_ns / 1e3 / max(self.buffers_offered, 1),
            "frames_sent": s.frames_sent if s else 0, "bytes_sent": s.bytes_sent if s else 0,
            "connected": bool(s and s.connected),
            "sender_error": s.error if s else None,
        }

    def _sink(self, raw: Any) -> bool:
        """RawCollector's sink: encode and queue; never blocks (False = dropped, counted)."""
        t0 = time.thread_time_ns()
        self.buffers_offered += 1
        ok = False
        s = self.sender
        if s is not None:
            try:
                parts = frames.encode_buffer_parts(
                    raw.data, seq=raw.seq, context=raw.context, stream_id=raw.stream_id,
                    dropped_records=raw.dropped_records, names=raw.names,
                    sent_ns=time.time_ns())
                ok = s.offer(parts)
            except frames.FrameError:
                ok = False
        if not ok:
            self.buffers_dropped += 1
        self.sink_ns += time.thread_time_ns() - t0
        return ok

    def _send_json(self, ftype: FrameType, obj: dict[str, Any]) -> bool:
        s = self.sender
        if s is None:
            return False
        return s.offer([frames.encode_json(ftype, obj)])

    def mark_step(self, items: float | None = None) -> None:
        """End the current step (begun at the previous call) with ``items`` work units."""
        now = time.time_ns()
        with self._step_lock:
            start, self._last_mark_ns = self._last_mark_ns, now
        if start is None:
            return
        ok = self._send_json(FrameType.STEP, {"steps": [
            {"start_ns": start, "end_ns": now, "items": items, "tid": threading.get_ident()}]})
        if ok:
            self.steps_sent += 1
        else:
            self.steps_dropped += 1

    def _housekeeping(self) -> None:
        while not self._stop.wait(self.clock_period_s):
            s = self.sender
            if s is None or not s.connected:
                return
            self._send_json(FrameType.CLOCK, self.clock_pair())
            self._send_json(FrameType.STATS, self.stats())

    def _write_sim_report(self) -> None:
        """Sim backend: what the fake delivered, counted by the fake (for tests)."""
        path = os.environ.get("PPWTOP_SIM_REPORT")
        if self.backend != "sim" or not path or self.lib is None:
            return
        import json

        try:
            with open(path, "w") as f:
                json.dump({"delivered": dict(getattr(self.lib, "delivered", {})),
                           "stats": self.stats()}, f)
        except OSError:
            pass

