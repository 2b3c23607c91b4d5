"""The in-target agent on its own: handshake content, never blocking on a ppwtop that does not
read (whole buffers dropped and counted), and mark_step with and without an agent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ppwtop.agent as agent_api
from attribution.model import Trace
from attribution.sim import simulate
from ppwtop.agent.core import Agent, AgentError
from ppwtop.fakes.cupti_lib import FakeCuptiLib
from ppwtop.transport.endpoint import FrameReader, Listener
from ppwtop.transport.frames import Frame, FrameType


@pytest.fixture(scope="module")
def sim_trace() -> Trace:
    return simulate("varied_mix", "h100", seconds=4.0, seed=1).trace


def test_handshake_carries_versions_pid_backend_and_a_clock_pair(sim_trace: Trace) -> None:
    with Listener() as lis:
        a = Agent(lis.path, "sim", lib=FakeCuptiLib(sim_trace), flush_period_s=0)
        a.start()
        conn = lis.accept(5.0)
        assert conn is not None
        r = FrameReader(conn)
        got: list[Frame] = []
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            got = r.read(0.1)
        hello = got[0]
        assert hello.type is FrameType.HELLO
        h = hello.json()
        import os
        import sys

        assert h["pid"] == os.getpid() and h["backend"] == "sim"
        assert h["python"] == sys.version.split()[0]
        assert h["protocol"] == 1 and h["late_attach"] is False
        assert h["cuda_driver_version"] is None and h["cupti_version"] is None
        assert h["clock"]["host_ns"] <= h["clock"]["host_after_ns"]
        import threading

        a.lib.cuptiActivityFlushAll(0)
        stopper = threading.Thread(target=a.stop)  # stop() waits for the reader to read
        stopper.start()
        types = [f.type for f in got[1:]]
        deadline = time.monotonic() + 10
        while not r.eof and time.monotonic() < deadline:
            types += [f.type for f in r.read(0.1)]
        stopper.join(5)
        assert FrameType.BUFFER in types and types[-1] is FrameType.BYE


def test_agent_drops_whole_buffers_when_ppwtop_does_not_read(sim_trace: Trace) -> None:
    with Listener() as lis:
        lib = FakeCuptiLib()
        a = Agent(lis.path, "sim", lib=lib, flush_period_s=0, max_queue_bytes=256 << 10)
        a.start()
        conn = lis.accept(5.0)  # accepted, never read
        assert conn is not None
        worst = 0.0
        for _ in range(40):
            lib.add_trace(sim_trace)
            t0 = time.perf_counter()
            assert lib.cuptiActivityFlushAll(0) == 0
            worst = max(worst, time.perf_counter() - t0)
        st = a.stats()
        assert st["dropped_buffers"] > 0
        assert a.collector.stats.dropped_buffers == st["dropped_buffers"]
        assert st["connected"] is True
        # one flush lays out and hands over ~80k records: bounded by that work, not the socket
        assert worst < 5.0
        t0 = time.perf_counter()
        a.stop()
        assert time.perf_counter() - t0 < 6.0
        conn.close()


def test_agent_without_ppwtop_is_a_clear_error() -> None:
    with pytest.raises(AgentError, match="cannot connect"):
        Agent("/nonexistent/ppwtop.sock", "sim", lib=FakeCuptiLib()).start()
    with pytest.raises(AgentError, match="unknown backend"):
        Agent("/x", "rocm")


def test_the_package_root_carries_mark_step_and_import_stays_light() -> None:
    # the contract's spelling, ppwtop.mark_step(items=N), is the agent's own function
    import ppwtop
    assert ppwtop.mark_step is agent_api.mark_step
    with pytest.raises(AttributeError, match="no_such_thing"):
        getattr(ppwtop, "no_such_thing")  # noqa: B009 (the module hook under test)
    # and `import ppwtop` alone, in a fresh interpreter, loads neither the agent nor numpy
    code = ("import sys, ppwtop; print(sorted(m for m in sys.modules "
            "if m.startswith(('ppwtop.', 'numpy'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, timeout=60)
    assert r.stdout.strip() == "[]"


def test_mark_step_without_an_agent_is_a_no_op() -> None:
    assert agent_api.running() is None
    agent_api.mark_step(items=3)  # must not raise
    agent_api.stop()


def test_a_child_outside_ppwtops_environment_finds_its_dependencies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ppwtop run -- /usr/bin/python3 ...`: the target's interpreter had neither numpy nor
    cupti-python, so the agent recorded no kernel (and the run looked fine).  The child's
    environment names ppwtop's site-packages; the agent appends them only when an import
    fails, after the target's own."""
    import sys

    from ppwtop.agent.bootstrap import ENV_DEPS, child_env, import_with_deps

    deps = tmp_path / "site"
    deps.mkdir()
    (deps / "ppw_probe_dep.py").write_text("VALUE = 7\n")
    (tmp_path / "ppw_probe_user.py").write_text(
        "import ppw_probe_dep\nVALUE = ppw_probe_dep.VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))  # restored after the test
    monkeypatch.delenv(ENV_DEPS, raising=False)
    with pytest.raises(ModuleNotFoundError):
        import_with_deps("ppw_probe_user")
    sys.modules.pop("ppw_probe_user", None)
    monkeypatch.setenv(ENV_DEPS, str(deps))
    mod = import_with_deps("ppw_probe_user")
    assert mod.VALUE == 7
    assert sys.path[-1] == str(deps)  # appended: the target's own packages come first
    env = child_env("/tmp/x.sock", "sim", base={})
    assert all(Path(p).is_dir() for p in env[ENV_DEPS].split(os.pathsep))
    for name in ("ppw_probe_user", "ppw_probe_dep"):
        sys.modules.pop(name, None)


def test_a_process_can_be_attached_to_again_after_its_session_ended(sim_trace: Trace) -> None:
    """start() returned the first, disconnected agent to a second attach, which then never
    connected ("no agent connected within 60 s", audit)."""
    first_lis = Listener()
    first = agent_api.start(first_lis.path, "sim", lib=FakeCuptiLib(sim_trace),
                            flush_period_s=0)
    try:
        conn = first_lis.accept(5.0)
        assert conn is not None
        conn.close()  # the session ends: ppwtop goes away
        first_lis.close()
        deadline = time.monotonic() + 5
        while first.connected and time.monotonic() < deadline:
            first.mark_step(1)  # traffic lets the sender see the peer gone
            time.sleep(0.05)
        assert not first.connected
        with Listener() as lis:
            second = agent_api.start(lis.path, "sim", lib=FakeCuptiLib(sim_trace),
                                     flush_period_s=0)
            assert second is not first and second.connected
            conn = lis.accept(5.0)
            assert conn is not None
            got: list[Frame] = []
            r = FrameReader(conn)
            deadline = time.monotonic() + 5
            while not got and time.monotonic() < deadline:
                got = r.read(0.1)
            assert got and got[0].type is FrameType.HELLO
            assert agent_api.start(lis.path, "sim") is second  # idempotent while connected
            conn.close()
    finally:
        agent_api.stop()
        first.stop()
