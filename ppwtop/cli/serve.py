"""`ppwtop serve --prometheus HOST:PORT (--demo | --pid PID | -- CMD ...)`: Prometheus exporter.

Owns the command line, the demo source (:class:`DemoWindows`) and the serving loop: a thread
polls the source and folds each snapshot into an
:class:`~ppwtop.exporters.prometheus.EnergyCollector` registered on its own
``CollectorRegistry``, served by ``prometheus_client``'s HTTP server on HOST:PORT.

The demo source attributes tumbling windows of the simulated run (each tick covers the
simulated time since the previous tick), so the collector adds each window's energy to its
counters.  ``--pid`` and ``-- CMD`` need live collection (issue #4), not built yet.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ppwtop.cli.common import parser, positive_float
from ppwtop.errors import PpwtopError

LIVE_ISSUE = 4
DEMO_RUN_S = 120.0  # length of the simulated run the demo replays


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
        snap = self.feed.snapshot_at(t, t - self._last_ns, self.n_boot)
        self._last_ns = t
        return snap


def _poll(source: DemoWindows, collector: Any, interval_s: float,
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
    p = parser("serve", "Prometheus exporter of attributed energy (counters in joules).")
    p.add_argument("--prometheus", required=True, metavar="HOST:PORT",
                   help="address to serve /metrics on, e.g. 127.0.0.1:9464")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--demo", action="store_true", help="serve the built-in simulated GPU")
    src.add_argument("--pid", type=int, help="attach to a running process (not built yet)")
    p.add_argument("--gpu", default="h100", help="demo GPU preset (default h100)")
    p.add_argument("--scenario", default="demo", help="demo scenario (default demo)")
    p.add_argument("--seed", type=int, default=0, help="demo seed")
    p.add_argument("--interval", type=positive_float, default=5.0, metavar="S",
                   help="seconds between attributions, i.e. the length of each attributed "
                        "window (default 5; under 2 s the per-window estimates get noisy)")
    p.add_argument("--seconds", type=positive_float, default=None, metavar="S",
                   help="exit after S seconds (default: run until Ctrl-C)")
    args = p.parse_args(argv)
    host, port = parse_hostport(args.prometheus)
    if args.pid is not None or cmd:
        if args.demo or (args.pid is not None and cmd):
            raise PpwtopError("serve: give one of --demo, --pid PID or -- CMD ...")
        raise PpwtopError("serve: --pid and -- CMD need live collection, not built yet "
                          f"(issue #{LIVE_ISSUE}); use --demo")
    if not args.demo:
        raise PpwtopError("serve: give one of --demo, --pid PID or -- CMD ...")
    return _serve(host, port, args)


def _serve(host: str, port: int, args: Any) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    from ppwtop.exporters.prometheus import EnergyCollector

    source = DemoWindows(args.gpu, args.scenario, args.seed)
    collector = EnergyCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise PpwtopError(f"--prometheus: cannot listen on {host}:{port}: {reason}") from None
    stop = threading.Event()
    poller = threading.Thread(target=_poll, args=(source, collector, args.interval, stop),
                              name="ppwtop-serve-poll", daemon=True)
    poller.start()
    print(f"ppwtop serve: metrics on http://{host}:{port}/metrics "
          f"({source.feed.label}); Ctrl-C to stop", flush=True)
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.1 if deadline is None else min(0.1, max(0.0, deadline - time.monotonic())))
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        poller.join(timeout=5.0)
        server.shutdown()
        server.server_close()
        thread.join(timeout=5.0)
    return 0
