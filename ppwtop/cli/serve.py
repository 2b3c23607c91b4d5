"""`ppwtop serve --prometheus HOST:PORT (--demo | --pid PID | -- CMD ...)`: Prometheus exporter.

Owns the command line, the demo source (:class:`DemoWindows`) and the serving loop: a thread
polls the source and folds each snapshot into an
:class:`~ppwtop.exporters.prometheus.EnergyCollector` registered on its own
``CollectorRegistry``, served by ``prometheus_client``'s HTTP server on HOST:PORT.

Both sources attribute tumbling windows (each tick covers the time since the previous tick),
so the collector adds each window's energy to its counters: :class:`DemoWindows` over the
simulated run, :class:`LiveWindows` over a live session (``--pid``: the agent injected as by
``ppwtop attach``; ``-- CMD``: launched as by ``ppwtop run``), whose windows end
:data:`SETTLE_S` behind the newest record so buffers the agent flushes late still land in
their own window, no later than the newest power reading, and last at least
:data:`MIN_WINDOW_S` (the last one, after the target is gone, runs to the end).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ppwtop.cli.common import bounded_float, parser, seed_int, session_seconds
from ppwtop.errors import PpwtopError

DEMO_RUN_S = 120.0  # length of the simulated run the demo replays
SETTLE_S = 1.0  # live windows end this far behind the newest record (agent flush ~0.1 s)
MIN_WINDOW_S = 0.5
"""A live window closes only once it is this long and its end is covered by a power reading:
records arrive in bursts, and a 26 ms window cut between two readings was attributed with no
power at all (its kernels' counters got 0 J)."""
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 86_400.0
"""--interval's range: a poll loop of 1e-320 s spins, and 1e308 s overflowed the poller's
wait (its thread died; /metrics served nothing and serve exited 0)."""


def parse_hostport(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); PpwtopError if malformed."""
    host, sep, port_s = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise PpwtopError(f"--prometheus: expected HOST:PORT with PORT in 1..65535, "
                          f"got {text!r}")
    return host, int(port_s)


class DemoWindows:
    """The demo feed cut into non-overlapping windows: each :meth:`next_window` attributes
    the simulated time since the previous one (records that completed in it)."""

    def __init__(self, gpu: str, scenario: str, seed: int, *, n_boot: int = 20) -> None:
        from ppwtop.demo_feed import DemoFeed

        self.feed = DemoFeed(scenario, gpu, DEMO_RUN_S, seed=seed, n_boot=n_boot)
        self._last_ns = self.feed.start_ns
        self.n_boot = n_boot

    @property
    def done(self) -> bool:
        return self._last_ns >= self.feed.end_ns

    def next_window(self) -> Any:
        """The snapshot of ``[previous end, now)`` in simulated time, or None if empty."""
        t = self.feed.sim_now_ns()
        if t <= self._last_ns:
            return None
        snap = self.feed.snapshot_at(t, t - self._last_ns, self.n_boot, clip=True)
        self._last_ns = t
        return snap


class LiveWindows:
    """A live session's feed cut into non-overlapping windows that end :data:`SETTLE_S`
    behind the newest record; once the target is gone the last window runs to the end.

    With ``power`` (the session has a sampler) no window closes before the first power
    reading, and the first one starts there: records from before it have no reading to be
    attributed with, and a window closed on records alone gave its kernels 0 J for good.
    Without a sampler (NVML unavailable) windows close on records alone, times only."""

    def __init__(self, feed: Any, *, n_boot: int = 20, power: bool = True) -> None:
        self.feed = feed
        self.n_boot = n_boot
        self.power = power
        self._last_ns = 0

    @property
    def done(self) -> bool:
        return not self.feed.connected and self._last_ns >= self.feed.latest_ns > 0

    def next_window(self) -> Any:
        latest = self.feed.latest_ns
        if latest == 0:
            return None
        end = latest if not self.feed.connected else latest - int(SETTLE_S * 1e9)
        first_power = self.feed.first_power_ns if self.power else 0
        if self.feed.connected and self.power:
            if not first_power:
                return None  # no reading yet: nothing to attribute these records with
            end = min(end, self.feed.latest_power_ns)  # readings cover the window's end
        if self.feed.connected:  # every item running across the end has come
            floor = self.feed.launch_floor_ns
            end = end if floor is None else min(end, floor)
        if self._last_ns == 0:  # the first window: everything the feed keeps
            self._last_ns = end - self.feed.keep_ns
            if first_power:
                self._last_ns = max(self._last_ns, first_power - 1)
        if end <= self._last_ns or (self.feed.connected
                                    and end - self._last_ns < int(MIN_WINDOW_S * 1e9)):
            return None
        snap = self.feed.snapshot_between(self._last_ns, end, self.n_boot)
        self._last_ns = end
        return snap


def _poll(source: DemoWindows | LiveWindows, collector: Any, interval_s: float,
          stop: threading.Event) -> None:
    while not stop.is_set() and not source.done:
        snap = source.next_window()
        if snap is not None:
            collector.update(snap)
        stop.wait(interval_s)


def main(argv: list[str]) -> int:
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    p = parser("serve", "Prometheus exporter of attributed energy (counters in joules).  "
                        "The source: --demo, --pid PID, or a command after '--' "
                        "(ppwtop serve --prometheus HOST:PORT -- CMD ...).")
    p.add_argument("--prometheus", required=True, metavar="HOST:PORT",
                   help="address to serve /metrics on, e.g. 127.0.0.1:9464")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--demo", action="store_true", help="serve the built-in simulated GPU")
    src.add_argument("--pid", type=int,
                     help="attach to a running Python process (as ppwtop attach does)")
    p.add_argument("--backend", choices=("cupti", "sim"), default="cupti",
                   help="with --pid or -- CMD: cupti (the real GPU, default) or sim (the "
                        "simulator behind fake CUPTI and NVML)")
    p.add_argument("--gpu", default=None,
                   help="GPU preset (--demo: the simulated GPU, default h100; live: the "
                        "attribution preset, default from the device name)")
    p.add_argument("--scenario", default=None,
                   help="simulator scenario for --demo or --backend sim (default demo)")
    p.add_argument("--seed", type=seed_int, default=0, help="simulator seed")
    p.add_argument("--interval", type=bounded_float(MIN_INTERVAL_S, MAX_INTERVAL_S, "s"),
                   default=5.0, metavar="S",
                   help="seconds between attributions, i.e. the length of each attributed "
                        "window (0.1 to 86400, default 5; under 2 s the per-window "
                        "estimates get noisy)")
    p.add_argument("--seconds", type=session_seconds, default=None, metavar="S",
                   help="exit after S seconds (default: run until Ctrl-C)")
    args = p.parse_args(argv)
    host, port = parse_hostport(args.prometheus)
    given = sum((args.demo, args.pid is not None, bool(cmd)))
    if given != 1:
        raise PpwtopError("serve: give one of --demo, --pid PID or -- CMD ..."
                          if not given else
                          "serve: give only one of --demo, --pid PID or -- CMD ...")
    if args.demo:
        return _serve(host, port, args, DemoWindows(args.gpu or "h100",
                                                    args.scenario or "demo", args.seed))
    return _serve_live(host, port, args, cmd)


def _serve_live(host: str, port: int, args: Any, cmd: list[str]) -> int:
    """Serve a live session's windows until the target goes (or ``--seconds``)."""
    from ppwtop.cli.run import check_gpu
    from ppwtop.live.launch import attach_process, run_command

    check_gpu(args.gpu)
    stoppers: list[Any] = []

    def on_session(session: Any) -> None:
        windows = LiveWindows(session.feed, power=session.sampler is not None)
        stoppers.append(_start(host, port, windows, args.interval))

    kw = {"record": None, "headless": True, "seconds": args.seconds, "backend": args.backend,
          "gpu": args.gpu, "scenario": args.scenario, "seed": args.seed,
          "on_session": on_session}
    try:
        if args.pid is not None:
            rc = attach_process(args.pid, **kw)
        else:
            rc = run_command(cmd, verb="serve", **kw)
    finally:
        for stop_serving in stoppers:
            stop_serving()
    return rc


def _start(host: str, port: int, source: DemoWindows | LiveWindows, interval_s: float
           ) -> Any:
    """Start /metrics on HOST:PORT and the window poller; returns a function that stops both
    (after folding in what is left) and returns the number of windows served."""
    from prometheus_client import CollectorRegistry, start_http_server

    from ppwtop.exporters.prometheus import EnergyCollector

    collector = EnergyCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise PpwtopError(f"--prometheus: cannot listen on {host}:{port}: {reason}") from None
    stop = threading.Event()
    poller = threading.Thread(target=_poll, args=(source, collector, interval_s, stop),
                              name="ppwtop-serve-poll", daemon=True)
    poller.start()
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
    print(f"ppwtop serve: metrics on http://{shown}:{port}/metrics "
          f"({source.feed.label}); Ctrl-C to stop", flush=True)

    def stop_serving() -> int:
        stop.set()
        poller.join(timeout=30.0)
        if isinstance(source, LiveWindows):  # the last window, up to the final record
            snap = source.next_window()
            if snap is not None:
                collector.update(snap)
        server.shutdown()
        server.server_close()
        thread.join(timeout=5.0)
        return int(collector.updates)

    return stop_serving


def _serve(host: str, port: int, args: Any, source: DemoWindows) -> int:
    stop_serving = _start(host, port, source, args.interval)
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.1 if deadline is None else min(0.1, max(0.0, deadline - time.monotonic())))
    except KeyboardInterrupt:
        pass
    finally:
        stop_serving()
    return 0
