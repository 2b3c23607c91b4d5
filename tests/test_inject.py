"""The injector behind ``ppwtop attach``: real target processes, preflight refusals, gdb and
remote_exec failure mapping, the connect-back and the wrapper it reports from."""

from __future__ import annotations

import ast
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ppwtop.inject import (
    AttachError,
    ConnectBack,
    attach_code,
    inject,
    inspect_target,
    ptrace_call,
    start_agent,
)
from ppwtop.inject import gdb as gdb_mod
from ppwtop.inject.elfsyms import resolve
from ppwtop.inject.injector import bootstrap_source, choose_method
from ppwtop.inject.preflight import TargetInfo, ptrace_permission, python_version_from_paths
from ppwtop.inject.remote_exec import inject_remote_exec, map_remote_exec, remote_exec_command

REPO = Path(__file__).resolve().parents[1]

# The target: prints "ready", loops (sleeping or busy) until a stop file appears, then prints
# one JSON line with its iteration count and the longest gap between iterations.
TARGET = textwrap.dedent("""
    import json, os, sys, threading, time
    mode, stop = sys.argv[1], sys.argv[2]
    if mode == "sleep-threaded":
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    print("ready", flush=True)
    n, gap, last = 0, 0.0, time.perf_counter()
    while not os.path.exists(stop):
        if mode.startswith("sleep"):
            time.sleep(0.2)
        else:
            for _ in range(200):
                pass
        now = time.perf_counter()
        gap, last, n = max(gap, now - last), now, n + 1
    print(json.dumps({"n": n, "max_gap_s": gap}), flush=True)
""")


def _ptrace_unavailable() -> str | None:
    """Why the real-injection tests cannot run here, or None."""
    if not ptrace_call.supported():
        return "the built-in injector needs Linux on x86-64"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        if libc.ptrace(ptrace_call.PTRACE_SEIZE, child.pid, None, None) != 0:
            return f"ptrace is not permitted here: {os.strerror(ctypes.get_errno())}"
        libc.ptrace(ptrace_call.PTRACE_DETACH, child.pid, None, None)
        return None
    finally:
        child.kill()
        child.wait()


_NO_PTRACE = _ptrace_unavailable()
needs_ptrace = pytest.mark.skipif(_NO_PTRACE is not None, reason=_NO_PTRACE or "")


class Target:
    """A running target process; ``finish`` stops it and returns its exit code and report."""

    def __init__(self, tmp: Path, mode: str, argv_prefix: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, exe: str = sys.executable) -> None:
        self.stop = tmp / f"stop-{mode}"
        self.proc = subprocess.Popen(
            [exe, *argv_prefix, "-c", TARGET, mode, str(self.stop)],
            stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        self.pid = self.proc.pid

    def finish(self) -> tuple[int, dict[str, float]]:
        self.stop.touch()
        out, _ = self.proc.communicate(timeout=10)
        return self.proc.returncode, json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _wait_file(path: Path, timeout_s: float = 5.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path} was not written within {timeout_s} s")


# ---- real injection ---------------------------------------------------------------------

@needs_ptrace
@pytest.mark.parametrize("mode", ["sleep", "busy", "sleep-threaded"])
def test_injected_code_runs_in_the_target_which_keeps_running(tmp_path: Path, mode: str) -> None:
    target = Target(tmp_path, mode)
    try:
        out = tmp_path / "ran.txt"
        code = f"import os, threading\nopen({str(out)!r}, 'w').write(" \
               "f'{os.getpid()} {threading.current_thread() is threading.main_thread()}')"
        done = inject(target.pid, code, timeout_s=10)
        assert done.method == "ptrace"
        # A single-threaded target blocked in time.sleep runs it there and then (the sleep
        # syscall is named); a busy or multi-threaded one queues it for its next bytecode.
        if mode == "sleep":
            assert done.detail.startswith("now:")
        else:
            assert done.detail == "pending"
        assert _wait_file(out) == f"{target.pid} True"
        before = time.monotonic()
        time.sleep(0.3)  # the target must keep iterating after the injection
        rc, report = target.finish()
        assert rc == 0
        assert report["n"] > 0
        assert time.monotonic() - before < 10
    finally:
        target.kill()


CONTENDED = textwrap.dedent("""
    import os, sys, threading, time
    def spin():
        x = 0
        while True:
            x += 1
    for _ in range(2):
        threading.Thread(target=spin, daemon=True).start()
    print("ready", flush=True)
    n = 0
    while not os.path.exists(sys.argv[1]):
        n += 1
        if n % 1000 == 0:
            time.sleep(0.0005)
""")


@needs_ptrace
def test_repeated_injection_into_a_gil_contended_target_never_hangs_it(tmp_path: Path) -> None:
    # Two threads fight the main thread for the GIL, so injections land inside the GIL's
    # hand-off; calling into the interpreter there once hung a target for good.
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-c", CONTENDED, str(stop)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for i in range(6):
            out = tmp_path / f"ran-{i}"
            done = inject(proc.pid, f"open({str(out)!r}, 'w').write('x')", timeout_s=5)
            assert done.detail == "pending"
            assert _wait_file(out) == "x"
        stop.touch()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


OTHER_PYTHONS = sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3.[0-9]*")
                       + glob.glob("/usr/bin/python3.[0-9]*"))
OTHER_PYTHONS = [p for p in OTHER_PYTHONS if re.fullmatch(r".*python3\.\d+", p)]


@needs_ptrace
@pytest.mark.skipif(not OTHER_PYTHONS, reason="no other CPython interpreters on this machine")
@pytest.mark.parametrize("exe", OTHER_PYTHONS or ["none"])
def test_other_cpython_versions(tmp_path: Path, exe: str) -> None:
    for mode in ("sleep", "busy"):
        target = Target(tmp_path, mode, exe=exe, argv_prefix=("-I",))
        try:
            out = tmp_path / f"{mode}.txt"
            inject(target.pid, f"import os; open({str(out)!r}, 'w').write(str(os.getpid()))",
                   timeout_s=10)
            assert _wait_file(out) == str(target.pid)
            rc, _ = target.finish()
            assert rc == 0
        finally:
            target.kill()


@needs_ptrace
def test_user_code_with_quotes_and_errors_cannot_break_the_target(tmp_path: Path) -> None:
    target = Target(tmp_path, "sleep")
    try:
        out = tmp_path / "q.txt"
        code = f"s = 'it\\'s \"quoted\" \\\\ and\\n'\nopen({str(out)!r}, 'w').write(s)\n" \
               "raise RuntimeError('boom')"
        inject(target.pid, code, timeout_s=10)
        assert _wait_file(out) == "it's \"quoted\" \\ and\n"
        rc, _ = target.finish()
        assert rc == 0
    finally:
        target.kill()


@needs_ptrace
def test_connect_back_reports_ok_from_the_entry_in_the_target(tmp_path: Path) -> None:
    standin = tmp_path / "standin"
    standin.mkdir()
    (standin / "standin_entry.py").write_text(
        "import os\n"
        "def entry(socket_path, backend):\n"
        "    open(socket_path, 'w').write(f'{os.getpid()} {backend}')\n")
    env = {**os.environ, "PYTHONPATH": str(standin)}
    target = Target(tmp_path, "busy", env=env)
    try:
        agent_socket = tmp_path / "agent.out"
        with ConnectBack() as cb:
            code = attach_code(str(agent_socket), "sim", [], report_path=cb.path,
                               entry="standin_entry:entry")
            inject(target.pid, code, timeout_s=10)
            report = cb.wait(target.pid, timeout_s=10)
        assert report["pid"] == target.pid
        assert agent_socket.read_text() == f"{target.pid} sim"
        rc, _ = target.finish()
        assert rc == 0
    finally:
        target.kill()


@needs_ptrace
def test_start_agent_end_to_end_with_a_stand_in_entry(tmp_path: Path) -> None:
    standin = tmp_path / "standin"
    standin.mkdir()
    (standin / "standin_entry.py").write_text(
        "def entry(socket_path, backend):\n"
        "    open(socket_path, 'w').write(backend)\n")
    target = Target(tmp_path, "sleep-threaded", env={**os.environ, "PYTHONPATH": str(standin)})
    try:
        done, report = start_agent(target.pid, str(tmp_path / "s"), "sim", timeout_s=10,
                                   entry="standin_entry:entry")
        assert (done.method, done.detail) == ("ptrace", "pending")
        assert report["ok"] is True and report["pid"] == target.pid
        assert (tmp_path / "s").read_text() == "sim"
        rc, _ = target.finish()
        assert rc == 0
    finally:
        target.kill()


@needs_ptrace
@pytest.mark.parametrize(("backend", "extra", "expected"), [
    # ppwtop found through the extra path, cupti-python not: the backend's import is named.
    ("cupti", [str(REPO)], "target Python cannot import cupti-python: ModuleNotFoundError"),
    # no path to ppwtop at all
    ("sim", [], "target Python cannot import ppwtop: ModuleNotFoundError"),
])
def test_a_target_without_the_modules_reports_one_line(tmp_path: Path, backend: str,
                                                      extra: list[str], expected: str) -> None:
    target = Target(tmp_path, "sleep", argv_prefix=("-I", "-S"))  # no site-packages
    try:
        with ConnectBack() as cb:
            inject(target.pid, attach_code(str(tmp_path / "a.sock"), backend, extra,
                                           report_path=cb.path), timeout_s=10)
            with pytest.raises(AttachError) as e:
                cb.wait(target.pid, timeout_s=10)
        assert str(e.value).startswith(f"pid {target.pid}: {expected}")
        assert "\n" not in str(e.value)
        rc, _ = target.finish()
        assert rc == 0
    finally:
        target.kill()


@needs_ptrace
def test_symbols_resolved_from_elf_match_the_loaded_addresses() -> None:
    names = {"PyRun_SimpleString", "PyGILState_Ensure", "Py_AddPendingCall"}
    found = resolve(os.getpid(), names)
    for name in names:
        assert found[name] == ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


# ---- preflight --------------------------------------------------------------------------

def test_dead_pid_is_refused() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(AttachError, match=rf"^pid {proc.pid}: no such process$"):
        inspect_target(proc.pid)


def test_zombie_is_refused() -> None:
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while Path(f"/proc/{proc.pid}/status").read_text().find("State:\tZ") < 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        with pytest.raises(AttachError, match="exited"):
            inspect_target(proc.pid)
    finally:
        proc.wait()


def test_non_python_pid_is_refused_without_touching_it() -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    proc = subprocess.Popen([sleep, "60"])
    try:
        with pytest.raises(AttachError, match=rf"^pid {proc.pid}: not a Python process"):
            inject(proc.pid, "pass", timeout_s=5)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert "TracerPid:\t0" in status
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


@needs_ptrace
def test_a_target_traced_by_someone_else_is_refused(tmp_path: Path) -> None:
    target = Target(tmp_path, "sleep")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    try:
        assert libc.ptrace(ptrace_call.PTRACE_SEIZE, target.pid, None, None) == 0
        with pytest.raises(AttachError, match=rf"already being traced by pid {os.getpid()}"):
            inject(target.pid, "pass", timeout_s=5)
        # A seized tracee must be stopped before it can be detached.
        assert libc.ptrace(ptrace_call.PTRACE_INTERRUPT, target.pid, None, None) == 0
        os.waitpid(target.pid, ptrace_call.WALL)
        assert libc.ptrace(ptrace_call.PTRACE_DETACH, target.pid, None, None) == 0
        rc, _ = target.finish()
        assert rc == 0
    finally:
        target.kill()


def test_inspect_a_real_python_target(tmp_path: Path) -> None:
    target = Target(tmp_path, "sleep")
    try:
        info = inspect_target(target.pid)
        assert info.python == sys.version_info[:2]
        assert info.uid == os.geteuid()
        assert Path(info.exe).resolve() == Path(sys.executable).resolve()
    finally:
        target.kill()


def test_python_version_from_paths() -> None:
    assert python_version_from_paths("/usr/bin/python3.11", []) == (3, 11)
    assert python_version_from_paths("/opt/app/uwsgi",
                                     ["/usr/lib/libpython3.12.so.1.0"]) == (3, 12)
    assert python_version_from_paths("/usr/bin/python3.13t", []) == (3, 13)
    assert python_version_from_paths("/usr/bin/sleep", ["/lib/libc.so.6"]) is None
    assert python_version_from_paths("/usr/bin/python2.7", []) is None


@pytest.mark.parametrize(("kw", "ok", "words"), [
    ({"scope": 0, "euid": 1000, "cap": False, "target_uid": 1001}, False, "belongs to user"),
    ({"scope": 0, "euid": 0, "cap": True, "target_uid": 1001}, True, ""),
    ({"scope": 1, "euid": 1000, "cap": False, "target_uid": 1000, "descendant": False}, False,
     "sudo sysctl kernel.yama.ptrace_scope=0"),
    ({"scope": 1, "euid": 1000, "cap": False, "target_uid": 1000, "descendant": True}, True, ""),
    ({"scope": 2, "euid": 1000, "cap": False, "target_uid": 1000}, False, "CAP_SYS_PTRACE"),
    ({"scope": 2, "euid": 0, "cap": True, "target_uid": 1000}, True, ""),
    ({"scope": 3, "euid": 0, "cap": True, "target_uid": 0}, False, "ptrace_scope=3"),
])
def test_ptrace_permission_rules(kw: dict[str, object], ok: bool, words: str) -> None:
    target_uid = kw.pop("target_uid")
    got_ok, why = ptrace_permission(12345, target_uid, **kw)  # type: ignore[arg-type]
    assert got_ok is ok
    assert words in why


def test_refused_permission_stops_before_touching_the_target(tmp_path: Path) -> None:
    target = Target(tmp_path, "sleep")
    try:
        info = inspect_target(target.pid)
        refused = TargetInfo(pid=info.pid, exe=info.exe, python=info.python, uid=info.uid,
                             may_ptrace=False, ptrace_note="kernel.yama.ptrace_scope=3")
        with pytest.raises(AttachError, match=r"not permitted to attach .*ptrace_scope=3"):
            inject(target.pid, "raise SystemExit(3)", timeout_s=5, info=refused)
        rc, _ = target.finish()
        assert rc == 0
    finally:
        target.kill()


def test_method_choice() -> None:
    def info(version: tuple[int, int]) -> TargetInfo:
        return TargetInfo(pid=1, exe="/usr/bin/python", python=version, uid=0, may_ptrace=True)

    assert choose_method(info((3, 14))) == "remote_exec"
    assert choose_method(info((3, 11))) == ("ptrace" if ptrace_call.supported() else "gdb")
    assert choose_method(info((3, 11)), "gdb") == "gdb"
    with pytest.raises(AttachError, match=r"needs Python >= 3\.14"):
        choose_method(info((3, 13)), "remote_exec")


# ---- what crosses into the target -------------------------------------------------------

def test_bootstrap_runs_the_payload_removes_it_and_swallows_errors(tmp_path: Path) -> None:
    staging = tmp_path / "stage"
    staging.mkdir()
    payload = staging / "payload.py"
    out = tmp_path / "out.txt"
    payload.write_text(f"open({str(out)!r}, 'w').write(__name__)\nraise KeyboardInterrupt")
    boot = bootstrap_source(str(payload), str(staging))
    assert "\n" not in boot
    proc = subprocess.run([sys.executable, "-c", boot], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "__ppwtop_inject__"
    assert not staging.exists()


@pytest.mark.parametrize("text", ['exec("a\\"b")', "back\\slash", "tab\there\nnl", "plain"])
def test_gdb_string_literal_escaping(text: str) -> None:
    # The escapes used (\" \\ \n \ooo) mean the same in C and in Python literals.
    assert ast.literal_eval(gdb_mod.c_string(text)) == text


def test_gdb_script_order() -> None:
    lines = gdb_mod.gdb_script("print(1)").splitlines()
    calls = [i for i, ln in enumerate(lines) if "Py" in ln]
    assert "PyGILState_Ensure" in lines[calls[0]]
    assert 'PyRun_SimpleString("print(1)")' in lines[calls[1]]
    assert "PyGILState_Release($ppw_gil)" in lines[calls[2]]
    assert lines.index("detach") > calls[2]
    cmd = gdb_mod.gdb_command("/usr/bin/gdb", 42, "/tmp/s")
    assert cmd[cmd.index("-p") + 1] == "42" and "-batch" in cmd and "-nx" in cmd


@pytest.mark.parametrize(("output", "words"), [
    ("ptrace: Operation not permitted.\n", "not permitted to attach"),
    ("ptrace: No such process.\n", "no such process"),
    ("Couldn't write extended state status: Bad address.\n", "extended register state"),
    ('No symbol "PyGILState_Ensure" in current context.\n', "no Python C API symbols"),
    ("Program received signal SIGSEGV\nThe program being debugged was signaled while in a "
     "function called from GDB.\n", "fatal signal"),
    ("some new gdb complaint\n", "gdb injection failed: some new gdb complaint"),
    ("PPWTOP_RC=-1\n", "raised inside the target"),
])
def test_gdb_failures_map_to_one_line(output: str, words: str) -> None:
    err = gdb_mod.map_gdb_output(7, 1, output)
    assert err is not None
    assert words in str(err)
    assert str(err).startswith("pid 7: ") and "\n" not in str(err)
    if "permitted" in words:
        assert "ptrace_scope" in str(err)


def test_gdb_success_maps_to_none() -> None:
    assert gdb_mod.map_gdb_output(7, 0, "[Inferior 1 (process 7) detached]\nPPWTOP_RC=0\n") \
        is None


def _gdb_unusable() -> str | None:
    gdb = gdb_mod.find_gdb()
    if gdb is None:
        return "gdb is not installed"
    if _NO_PTRACE is not None:
        return _NO_PTRACE
    return gdb_mod.gdb_problem(gdb)


@pytest.mark.skipif(_gdb_unusable() is not None, reason=f"gdb injection: {_gdb_unusable()}")
def test_gdb_injection_real(tmp_path: Path) -> None:
    target = Target(tmp_path, "sleep")
    try:
        out = tmp_path / "gdb.txt"
        done = inject(target.pid, f"import os; open({str(out)!r}, 'w').write(str(os.getpid()))",
                      timeout_s=15, method="gdb")
        assert done.method == "gdb"
        assert _wait_file(out) == str(target.pid)
        rc, _ = target.finish()
        assert rc == 0
    finally:
        target.kill()


# ---- Python >= 3.14: sys.remote_exec with a stand-in interpreter ------------------------

def test_remote_exec_command() -> None:
    cmd = remote_exec_command("/proc/9/exe", 9, "/tmp/x y/boot.py")
    assert cmd[:3] == ["/proc/9/exe", "-I", "-c"]
    assert cmd[3] == "import sys; sys.remote_exec(9, '/tmp/x y/boot.py')"


def test_remote_exec_flow_with_a_stand_in_interpreter(tmp_path: Path) -> None:
    # The stand-in gives sys a remote_exec that runs the script here, like the target would.
    fake = tmp_path / "python3.14"
    fake.write_text(f"#!{sys.executable}\n"
                    "import sys\n"
                    "def remote_exec(pid, path):\n"
                    "    exec(open(path).read(), {})\n"
                    "sys.remote_exec = remote_exec\n"
                    "exec(sys.argv[-1])\n")
    fake.chmod(0o755)
    out = tmp_path / "ran.txt"
    staging = tmp_path / "stage"
    staging.mkdir()
    (staging / "payload.py").write_text(f"open({str(out)!r}, 'w').write('ran')")
    script = staging / "boot.py"
    script.write_text(bootstrap_source(str(staging / "payload.py"), str(staging)))
    inject_remote_exec(os.getpid(), str(script), timeout_s=10, interpreter=str(fake))
    assert out.read_text() == "ran"
    assert not staging.exists()


@pytest.mark.parametrize(("stderr", "words"), [
    ("PermissionError: [Errno 1] Operation not permitted", "ptrace_scope"),
    ("RuntimeError: Remote debugging is not enabled in the remote process",
     "PYTHON_DISABLE_REMOTE_DEBUG"),
    ("AttributeError: module 'sys' has no attribute 'remote_exec'", ">= 3.14"),
    ("OSError: something else\n", "sys.remote_exec failed: OSError: something else"),
])
def test_remote_exec_failures_map_to_one_line(stderr: str, words: str) -> None:
    err = map_remote_exec(5, 1, stderr)
    assert err is not None and words in str(err) and "\n" not in str(err)
    assert map_remote_exec(5, 0, "") is None


# ---- the connect-back -------------------------------------------------------------------

def test_connect_back_times_out_with_one_line() -> None:
    with ConnectBack() as cb:
        t0 = time.monotonic()
        with pytest.raises(AttachError, match=r"did not report back within 0.3 s"):
            cb.wait(99, timeout_s=0.3)
        assert time.monotonic() - t0 < 2.0


def test_connect_back_rejects_garbage() -> None:
    import socket

    with ConnectBack() as cb:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(cb.path)
        s.sendall(b"not json\n")
        with pytest.raises(AttachError, match="unreadable report"):
            cb.wait(3, timeout_s=2)
        s.close()


def test_attach_code_is_valid_python_and_checks_the_backend() -> None:
    compile(attach_code("/tmp/a b'c.sock", "cupti", ["/x'y"]), "<attach>", "exec")
    with pytest.raises(ValueError, match="unknown backend"):
        attach_code("/tmp/a.sock", "nope", [])
