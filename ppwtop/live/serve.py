"""``serve_session``: everything a live command does once it has a listening socket.

Owns the setup around :class:`~ppwtop.live.session.Session` that ``ppwtop run``, ``ppwtop
record`` and ``ppwtop attach`` share: the NVML sampler thread (on the sim backend against the
fake ``pynvml.nvmlLib`` replaying the same anchored simulated run the target's fake libcupti
replays), the recording, launching the target (``launch``, called once everything listens),
the headless loop or the TUI (session loop on a thread, the app on the main thread), the
one-line summary, and waiting for a launched command to exit (:mod:`.wait`).

Returns 2 when the recording failed (disk full: what was written is kept), else the launched
command's exit status when there is one, else 0; a problem the user must fix before anything
runs raises :class:`~ppwtop.errors.PpwtopError`.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ppwtop.errors import PpwtopError
from ppwtop.live.session import Session
from ppwtop.live.signals import Terminated, reinstall_terminate_handlers
from ppwtop.live.status_out import StatusOut, status_out
from ppwtop.live.wait import wait_for_command
from ppwtop.recording import RecordingError
from ppwtop.transport.endpoint import Listener


@contextlib.contextmanager
def _nvml(backend: str, sim: Any, env: dict[str, str] | None, out: StatusOut
          ) -> Iterator[tuple[Any, list[Any], dict[str, Any]]]:
    """An opened, running NvmlSampler (or None), its devices and notes for the run meta."""
    from ppwtop.collectors.nvml import NvmlSampler, NvmlUnavailableError

    with contextlib.ExitStack() as stack:
        notes: dict[str, Any] = {}
        if backend == "sim":
            from ppwtop.fakes.nvml_board import board_from_sim
            from ppwtop.fakes.nvml_lib import FakeNvmlLib, installed
            from ppwtop.fakes.sim_run import anchored_run

            board = board_from_sim(anchored_run(sim))
            stack.enter_context(installed(FakeNvmlLib([board])))
            sampler = NvmlSampler(devices=[0], env={})
            notes["sim"] = {"scenario": sim.scenario, "gpu": sim.gpu, "seed": sim.seed,
                            "seconds": sim.seconds, "anchor_ns": sim.anchor_ns}
        else:
            sampler = NvmlSampler(env=env)
        try:
            sampler.open()
        except NvmlUnavailableError as e:
            hint = " (no NVIDIA driver here? --backend sim runs on the simulator)" \
                if backend == "cupti" else ""
            print(f"ppwtop: {e}: no power data, CUPTI records only{hint}", file=out,
                  flush=True)
            notes["nvml_unavailable"] = str(e)
            yield None, [], notes
            return
        stack.callback(sampler.close)
        sampler.start()
        stack.callback(sampler.stop)
        yield sampler, sampler.device_infos, notes


def serve(listener: Listener, *, label: str, record_path: str | Path | None, headless: bool,
          seconds: float | None, backend: str, gpu: str | None = None, sim: Any = None,
          launch: Callable[[], subprocess.Popen[bytes] | None] | None = None,
          meta: dict[str, Any] | None = None, nvml_env: dict[str, str] | None = None,
          accept_timeout_s: float = 60.0, out: TextIO | StatusOut = sys.stderr,
          seconds_from_connect: bool = False,
          on_session: Callable[[Session], None] | None = None) -> int:
    out = status_out(out)  # status lines that fail (stderr's reader gone) never end the run
    with _nvml(backend, sim, nvml_env, out) as (sampler, devices, notes):
        try:
            session = Session(listener, label=label, backend=backend, record_path=record_path,
                              sampler=sampler, devices=devices, gpu=gpu,
                              meta={**(meta or {}), **notes}, out=out)
        except RecordingError as e:
            raise PpwtopError(str(e)) from None
        if sim is not None:
            session.sim_end_ns = int(sim.anchor_ns + sim.seconds * 1e9)
        if on_session is not None:  # e.g. serve --prometheus polls session.feed
            on_session(session)
        child: subprocess.Popen[bytes] | None = None
        terminated: Terminated | None = None
        try:
            child = launch() if launch is not None else None
            run_kw: dict[str, Any] = {
                "seconds": seconds, "child": child, "accept_timeout_s": accept_timeout_s,
                "seconds_from_connect": seconds_from_connect}
            if headless:
                session.run(**run_kw)
            else:
                _tui(session, run_kw)
        except KeyboardInterrupt as e:  # Ctrl-C; SIGTERM or SIGHUP (signals.Terminated)
            session.request_stop()
            session.end_reason = session.end_reason or getattr(e, "reason", "interrupted")
            # SIGTERM/SIGHUP: the command ppwtop launched goes with it (wait_for_command)
            terminated = e if isinstance(e, Terminated) else None
        print(summary(session), file=out, flush=True)
    failed = 2 if session.recording_error else 0
    c = session.counts
    if not (c.kernels or c.copies or c.power) and session.meta.get("nvml_unavailable") \
            and session.agent_stats.get("cupti_status") in ("failed", "unavailable", "in_use"):
        # neither source worked: an empty recording is not a success (a GPU-less machine
        # without --backend sim, a driver problem)
        print(f"ppwtop: error: nothing was collected: CUPTI "
              f"{session.agent_stats.get('cupti_status')} in the target and NVML unavailable "
              "(no GPU here? --backend sim runs on the simulator)", file=out, flush=True)
        failed = 2
    if terminated:
        failed = failed or terminated.exit_code
    if child is None:
        return failed
    return wait_for_command(child, failed, out, terminated=terminated)


def _tui(session: Session, run_kw: dict[str, Any]) -> None:
    from ppwtop.panel_feed import PanelFeed
    from ppwtop.tui.app import PpwtopApp

    t = threading.Thread(target=session.run, name="ppwtop-session", daemon=True,
                         kwargs=run_kw)
    t.start()
    app = PpwtopApp(PanelFeed(session.feed))
    try:
        app.run()
    finally:
        reinstall_terminate_handlers()  # the app's event loop reset them to the default
        # SIGTERM / SIGHUP: ended as in a headless session, the recording saying why
        ended = Terminated(app.ended_by) if app.ended_by is not None else None
        session.request_stop(ended.reason if ended is not None else None)
        t.join(10.0)
    if ended is not None:
        raise ended


def summary(session: Session) -> str:
    c = session.counts
    st = session.agent_stats
    parts = [f"ppwtop: session ended ({session.end_reason or 'stopped'}): "
             f"{c.kernels} kernels, {c.copies} copies, {c.steps} steps, "
             f"{c.power} power readings"]
    dropped = max(c.seq_gaps, int(st.get("dropped_buffers", 0) or 0))
    if dropped or st.get("dropped_records") or session.decoder.stats.dropped_records:
        parts.append(f"; agent dropped {dropped} buffers, CUPTI dropped "
                     f"{session.decoder.stats.dropped_records} records")
    if not session.connected_once:
        parts.append("; no agent connected")
    if session.writer is not None or session.record_path is not None:
        if session.recording_error:
            state = "incomplete: " + session.recording_error
        elif session.writer is not None and not session.writer.ended:
            state = ("incomplete: interrupted before its end chunk was written (what was "
                     "written reads back)")
        else:
            state = "written"
        parts.append(f"; recording {session.record_path} {state}")
    return "".join(parts)
