"""Getting code into an already-running Python process (``ppwtop attach PID``).

Preflight checks (``preflight``), the injectors (3.14 ``sys.remote_exec``, the built-in
x86-64 ptrace caller, gdb), and the connect-back that tells the caller the injected code ran.
"""

from ppwtop.inject.attach import start_agent
from ppwtop.inject.connect_back import ConnectBack, attach_code, ppwtop_sys_path
from ppwtop.inject.errors import AttachError
from ppwtop.inject.injector import Injected, inject
from ppwtop.inject.preflight import TargetInfo, inspect_target

__all__ = ["AttachError", "ConnectBack", "Injected", "TargetInfo", "attach_code", "inject",
           "inspect_target", "ppwtop_sys_path", "start_agent"]
