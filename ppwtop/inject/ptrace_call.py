"""Built-in x86-64 Linux injector: run ``PyRun_SimpleString`` in a target's main thread by ptrace.

Owns the register-level dance a debugger's ``call`` does, written with ctypes so it needs no
gdb, and so it saves and restores the *whole* x86 extended state (XSAVE area, AMX included)
at its real size. gdb 13 cannot write that state on CPUs with AMX ("Couldn't write extended
state status: Bad address"), which is why this exists next to the gdb path (see
docs/attach.md).

The sequence, all on the main thread (tid == pid):

1. ``PTRACE_SEIZE`` + ``PTRACE_INTERRUPT`` (no signal is sent), wait for the event stop.
2. Save general registers (``PTRACE_GETREGS``) and the XSAVE area (``PTRACE_GETREGSET``).
3. For each call: point ``rip`` at the function, ``rdi`` at its argument, push a return
   address of 0 on a 16-byte aligned stack below the red zone, set ``orig_rax = -1`` so the
   kernel does not restart an interrupted syscall into our call, continue, and wait for the
   SIGSEGV at address 0 that marks the return (``rax`` holds the result). Signals that arrive
   meanwhile are passed on.
4. ``PyGILState_Ensure`` -> ``PyRun_SimpleString(code)`` -> ``PyGILState_Release``.
5. Restore both register sets exactly (``orig_rax``/``rax`` included, so a ``sleep`` that was
   interrupted is restarted by the kernel) and ``PTRACE_DETACH`` without a signal.

On timeout the thread is interrupted, restored and detached; the error says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import signal
import struct
import time
from collections.abc import Callable

from ppwtop.inject.elfsyms import read_maps, resolve
from ppwtop.inject.errors import AttachError

PTRACE_PEEKDATA = 2
PTRACE_POKEDATA = 5
PTRACE_CONT = 7
PTRACE_SINGLESTEP = 9
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_GETFPREGS = 14
PTRACE_SETFPREGS = 15
PTRACE_DETACH = 17
PTRACE_GETREGSET = 0x4204
PTRACE_SETREGSET = 0x4205
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
NT_X86_XSTATE = 0x202
WALL = 0x40000000
_XSTATE_MAX = 1 << 16

_REG_NAMES = (
    "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx",
    "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base", "ds",
    "es", "fs", "gs",
)
NEEDED_SYMBOLS = {"PyGILState_Ensure", "PyGILState_Release", "PyRun_SimpleString",
                  "Py_AddPendingCall"}

# Blocking syscalls in which the main thread holds no libc or interpreter lock of its own
# (time.sleep, select/poll, a blocking read/accept/wait): calling into Python right there is
# as safe as a signal handler running Python code. x86-64 numbers.
SAFE_SYSCALLS = {
    0: "read", 7: "poll", 23: "select", 34: "pause", 35: "nanosleep", 43: "accept",
    45: "recvfrom", 47: "recvmsg", 61: "wait4", 128: "rt_sigtimedwait", 130: "rt_sigsuspend",
    230: "clock_nanosleep", 232: "epoll_wait", 247: "waitid", 270: "pselect6", 271: "ppoll",
    281: "epoll_pwait", 288: "accept4", 441: "epoll_pwait2",
}
# What rax holds while a syscall is interrupted: -ERESTARTSYS, -ERESTARTNOINTR,
# -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK, or -EINTR once it has returned.
_INTERRUPTED = {-512, -513, -514, -516, -4}
_SYS_MMAP = 9


class _Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in _REG_NAMES]


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def supported() -> bool:
    """True where this injector can run: Linux on x86-64."""
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return libc


class _Tracee:
    """A seized, stopped main thread; every method raises AttachError on failure."""

    def __init__(self, pid: int, deadline: float) -> None:
        self.pid = pid
        self.deadline = deadline
        self.libc = _libc()
        self.saved = _Regs()
        self.xstate = ctypes.create_string_buffer(_XSTATE_MAX)
        self.xstate_len = 0
        self.fpregs = ctypes.create_string_buffer(512)

    def _pt(self, req: int, addr: int = 0, data: int | ctypes.c_void_p | None = None,
            what: str = "ptrace") -> int:
        ctypes.set_errno(0)
        rc = int(self.libc.ptrace(req, self.pid, ctypes.c_void_p(addr), data))
        err = ctypes.get_errno()
        if rc == -1 and err:
            raise AttachError(self.pid, f"{what} failed: {os.strerror(err)}")
        return rc

    def seize(self) -> None:
        ctypes.set_errno(0)
        if self.libc.ptrace(PTRACE_SEIZE, self.pid, None, None) == -1:
            err = ctypes.get_errno()
            if err == 1:  # EPERM
                raise AttachError(self.pid, "ptrace attach not permitted (EPERM)",
                                  "run as the target's user or root; check "
                                  "/proc/sys/kernel/yama/ptrace_scope and the container's "
                                  "seccomp/CAP_SYS_PTRACE")
            if err == 3:  # ESRCH
                raise AttachError(self.pid, "no such process")
            raise AttachError(self.pid, f"ptrace attach failed: {os.strerror(err)}")
        self._pt(PTRACE_INTERRUPT, what="ptrace interrupt")
        self._wait_stop(expect_event=True)

    def _wait_status(self) -> int:
        delay = 0.00005
        while True:
            wpid, status = os.waitpid(self.pid, os.WNOHANG | WALL)
            if wpid == self.pid:
                if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                    raise AttachError(self.pid, "the target exited during injection")
                return status
            if time.monotonic() > self.deadline:
                raise TimeoutError
            time.sleep(delay)
            delay = min(delay * 2, 0.001)

    def _wait_stop(self, expect_event: bool, want: int = signal.SIGSEGV) -> int:
        """Wait for the event stop (``expect_event``) or a stop by ``want``; pass other
        signals on to the target; return the stop signal."""
        while True:
            status = self._wait_status()
            sig = os.WSTOPSIG(status)
            event = status >> 16
            if expect_event and event:
                return sig
            if not expect_event and not event and sig == want:
                return sig
            if event or sig in (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
                self._pt(PTRACE_CONT, 0, None, what="ptrace cont")
            else:
                self._pt(PTRACE_CONT, 0, ctypes.c_void_p(sig), what="ptrace cont")

    def save(self) -> None:
        self._pt(PTRACE_GETREGS, 0, ctypes.cast(ctypes.pointer(self.saved), ctypes.c_void_p),
                 what="read registers")
        iov = _IoVec(ctypes.cast(self.xstate, ctypes.c_void_p), _XSTATE_MAX)
        ctypes.set_errno(0)
        if self.libc.ptrace(PTRACE_GETREGSET, self.pid, ctypes.c_void_p(NT_X86_XSTATE),
                            ctypes.cast(ctypes.pointer(iov), ctypes.c_void_p)) == 0:
            self.xstate_len = int(iov.len)
        else:
            self._pt(PTRACE_GETFPREGS, 0, ctypes.cast(self.fpregs, ctypes.c_void_p),
                     what="read FP registers")

    def restore(self) -> None:
        if self.xstate_len:
            iov = _IoVec(ctypes.cast(self.xstate, ctypes.c_void_p), self.xstate_len)
            self._pt(PTRACE_SETREGSET, NT_X86_XSTATE,
                     ctypes.cast(ctypes.pointer(iov), ctypes.c_void_p),
                     what="restore extended registers")
        else:
            self._pt(PTRACE_SETFPREGS, 0, ctypes.cast(self.fpregs, ctypes.c_void_p),
                     what="restore FP registers")
        self._pt(PTRACE_SETREGS, 0, ctypes.cast(ctypes.pointer(self.saved), ctypes.c_void_p),
                 what="restore registers")

    def detach(self) -> None:
        self._pt(PTRACE_DETACH, 0, None, what="ptrace detach")

    def poke(self, addr: int, data: bytes) -> None:
        data = data + b"\0" * (-len(data) % 8)
        for i in range(0, len(data), 8):
            word, = struct.unpack_from("<Q", data, i)
            self._pt(PTRACE_POKEDATA, addr + i, ctypes.c_void_p(word), what="write memory")

    def _copy_saved(self) -> _Regs:
        regs = _Regs()
        ctypes.memmove(ctypes.byref(regs), ctypes.byref(self.saved), ctypes.sizeof(_Regs))
        return regs

    def raw_syscall(self, insn_addr: int, nr: int, *args: int) -> int:
        """Execute one raw ``syscall`` instruction found at ``insn_addr``; return rax.

        No libc code runs, so no lock the thread may hold is touched.
        """
        regs = self._copy_saved()
        regs.rip = insn_addr
        regs.rax = nr
        regs.orig_rax = (1 << 64) - 1
        for name, value in zip(("rdi", "rsi", "rdx", "r10", "r8", "r9"), args, strict=False):
            setattr(regs, name, value & ((1 << 64) - 1))
        self._pt(PTRACE_SETREGS, 0, ctypes.cast(ctypes.pointer(regs), ctypes.c_void_p),
                 what="set registers")
        self._pt(PTRACE_SINGLESTEP, 0, None, what="ptrace single-step")
        self._wait_stop(expect_event=False, want=signal.SIGTRAP)
        self._pt(PTRACE_GETREGS, 0, ctypes.cast(ctypes.pointer(regs), ctypes.c_void_p),
                 what="read registers")
        return ctypes.c_long(regs.rax).value

    def call(self, func: int, arg: int, stack_top: int, arg2: int = 0) -> int:
        """Call ``func(arg, arg2)`` with the stack below ``stack_top``; return rax."""
        regs = self._copy_saved()
        sp = (stack_top & ~0xF) - 8
        self.poke(sp, b"\0" * 8)  # return address 0: the return faults where we catch it
        regs.rsp = sp
        regs.rip = func
        regs.rdi = arg
        regs.rsi = arg2
        regs.rax = 0
        regs.orig_rax = (1 << 64) - 1  # no syscall restart into our call
        self._pt(PTRACE_SETREGS, 0, ctypes.cast(ctypes.pointer(regs), ctypes.c_void_p),
                 what="set registers")
        self._pt(PTRACE_CONT, 0, None, what="ptrace cont")
        self._wait_stop(expect_event=False)
        self._pt(PTRACE_GETREGS, 0, ctypes.cast(ctypes.pointer(regs), ctypes.c_void_p),
                 what="read registers")
        if regs.rip != 0:
            raise AttachError(self.pid, f"the target faulted at {regs.rip:#x} inside the "
                                        "injected call")
        return int(regs.rax)

    def interrupt_and_restore(self) -> None:
        """After a timeout: stop the thread wherever it is, restore it, detach."""
        self.deadline = time.monotonic() + 2.0
        self._pt(PTRACE_INTERRUPT, what="ptrace interrupt")
        self._wait_stop(expect_event=True)
        self.restore()
        self.detach()


def _stack_room(pid: int, sp: int, need: int) -> bool:
    """True if [sp - need, sp) lies inside one mapped, writable region of the target."""
    return any(m.start <= sp - need and sp <= m.end and "w" in m.perms for m in read_maps(pid))


def _thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def safe_syscall(orig_rax: int, rax: int) -> str | None:
    """The name of the interrupted blocking syscall if calling into Python there is safe."""
    nr = ctypes.c_long(orig_rax).value
    if nr in SAFE_SYSCALLS and ctypes.c_long(rax).value in _INTERRUPTED:
        return SAFE_SYSCALLS[nr]
    return None


def _find_syscall_insn(pid: int) -> int:
    """Address of a ``syscall`` instruction (0f 05) in an executable mapping of the target."""
    maps = [m for m in read_maps(pid) if "x" in m.perms and m.path.startswith("/")]
    maps.sort(key=lambda m: "libc" not in m.path.rsplit("/", 1)[-1])
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for m in maps:
            mem.seek(m.start)
            chunk = mem.read(min(m.end - m.start, 1 << 16))
            at = chunk.find(b"\x0f\x05")
            if at >= 0:
                return m.start + at
    raise AttachError(pid, "found no syscall instruction in the target's code")


def run_simple_string(pid: int, source: bytes, *, timeout_s: float,
                      on_stopped: Callable[[], None] | None = None) -> str:
    """Have ``pid``'s main thread run ``source`` (Python, no NUL bytes); return how.

    * ``"now:<syscall>"``: a single-threaded target blocked in a safe syscall
      (``SAFE_SYSCALLS``): ``PyGILState_Ensure`` / ``PyRun_SimpleString`` /
      ``PyGILState_Release`` ran there and then, and the syscall was restarted.
    * ``"pending"``: other threads exist, or the thread was running or waiting on a lock;
      calling into the interpreter there can deadlock (seen: a 3.12 target stopped inside
      the GIL's condition variable), so ``Py_AddPendingCall(PyRun_SimpleString, page)``
      queues the source for the next bytecode boundary of the main thread, from a page
      mapped with a raw ``mmap`` syscall (one 4 KiB page per attach stays mapped).

    ``source`` must catch its own exceptions (a pending call that fails would surface as a
    SystemError in the target). ``on_stopped`` is called while the thread is stopped.
    """
    if b"\0" in source:
        raise ValueError("source must not contain NUL bytes")
    try:
        addrs = resolve(pid, NEEDED_SYMBOLS)
    except LookupError as e:
        raise AttachError(pid, str(e), "is this a CPython with its C API exported?") from e
    except OSError as e:
        raise AttachError(pid, f"cannot read the target's memory map: {e.strerror}") from e
    text = source + b"\0"
    deadline = time.monotonic() + timeout_s
    t = _Tracee(pid, deadline)
    t.seize()
    try:
        t.save()
        if on_stopped is not None:
            on_stopped()
        blocked_in = safe_syscall(t.saved.orig_rax, t.saved.rax)
        # Only a single-threaded target is sure to have nobody else holding the GIL, so
        # that PyGILState_Ensure cannot block. A call stuck waiting for the GIL could not be
        # abandoned safely: its thread would stay registered in the GIL's condition
        # variable and the next GIL hand-off could hang the process.
        if blocked_in is not None and _thread_count(pid) == 1:
            text_addr = (t.saved.rsp - 512 - len(text) - 64) & ~0xF
            stack_top = text_addr - 64
            if not _stack_room(pid, t.saved.rsp, t.saved.rsp - text_addr + 64):
                raise AttachError(pid, "the main thread's stack has no room below its pointer")
            t.poke(text_addr, text)
            gil_state = t.call(addrs["PyGILState_Ensure"], 0, stack_top)
            t.call(addrs["PyRun_SimpleString"], text_addr, stack_top)
            t.call(addrs["PyGILState_Release"], gil_state & 0xFFFFFFFF, stack_top)
            how = f"now:{blocked_in}"
        else:
            size = (len(text) + 4095) & ~4095
            page = t.raw_syscall(_find_syscall_insn(pid), _SYS_MMAP, 0, size, 3, 0x22, -1, 0)
            if -4096 < page < 0:
                raise AttachError(pid, f"mmap in the target failed: {os.strerror(-page)}")
            t.poke(page, text)
            stack_top = (t.saved.rsp - 512) & ~0xF
            rc = t.call(addrs["Py_AddPendingCall"], addrs["PyRun_SimpleString"], stack_top,
                        arg2=page)
            if ctypes.c_int(rc & 0xFFFFFFFF).value != 0:
                raise AttachError(pid, "the interpreter's pending-call queue is full",
                                  "try again in a moment")
            how = "pending"
    except TimeoutError:
        with contextlib.suppress(AttachError, TimeoutError):
            t.interrupt_and_restore()
        raise AttachError(pid, f"the injected call did not finish within {timeout_s:g} s; "
                               "the target was restored and released",
                          "the injected code itself did not return") from None
    except BaseException:
        try:
            t.restore()
            t.detach()
        except (AttachError, TimeoutError):
            pass
        raise
    t.restore()
    t.detach()
    return how
