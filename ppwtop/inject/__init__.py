"""Getting code into an already-running Python process (``ppwtop attach PID``).

Preflight checks (``preflight``), the injectors (3.14 ``sys.remote_exec``, the built-in
x86-64 ptrace caller, gdb), and the connect-back that tells the caller the injected code ran.
"""
