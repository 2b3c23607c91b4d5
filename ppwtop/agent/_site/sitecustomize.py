"""ppwtop's bootstrap for ``ppwtop run``: put first on the child's PYTHONPATH, it chains to
any other ``sitecustomize`` on the path and then starts the agent from PPWTOP_* variables.

It never stops the target from starting: any failure is one ``ppwtop agent:`` line on stderr.
Ctrl-C while it runs (the simulator's setup takes ~0.4 s, longer on a loaded machine) ends
the program as SIGINT ends one that has no handler yet, with one line instead of Python's
"Fatal Python error: init_import_site" dump: an exception cannot leave ``sitecustomize`` cleanly.
"""

import os as _os
import sys as _sys


def _ppwtop_chain() -> None:
    here = _os.path.dirname(_os.path.abspath(__file__))
    me = _sys.modules.get("sitecustomize")
    saved = list(_sys.path)
    try:
        _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
        del _sys.modules["sitecustomize"]
        import importlib

        try:
            importlib.import_module("sitecustomize")
        except ImportError as e:
            if getattr(e, "name", None) != "sitecustomize":
                _sys.stderr.write(f"ppwtop agent: your sitecustomize failed: {e}\n")
        except KeyboardInterrupt:
            _ppwtop_interrupted("your sitecustomize ran")
        except Exception as e:
            _sys.stderr.write(f"ppwtop agent: your sitecustomize failed: {e}\n")
    finally:
        _sys.path[:] = saved
        if me is not None:
            _sys.modules["sitecustomize"] = me


def _ppwtop_boot() -> None:
    try:
        from ppwtop.agent.bootstrap import from_env

        from_env()
    except KeyboardInterrupt:
        _ppwtop_interrupted("the agent started")
    except BaseException as e:  # SystemExit from a library: the program still starts
        _sys.stderr.write(f"ppwtop agent: not started: {type(e).__name__}: {e}\n")


def _ppwtop_interrupted(during: str) -> None:
    """End the process by SIGINT (status 130 to a shell, -2 to ppwtop), as Ctrl-C would
    have ended it a moment later, before any of the program's code ran."""
    import signal

    try:
        _sys.stderr.write(f"ppwtop agent: interrupted (Ctrl-C) while {during}; "
                          "the program did not start\n")
        _sys.stderr.flush()
    except BaseException:  # a second Ctrl-C, or stderr gone: still end quietly
        pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _os.kill(_os.getpid(), signal.SIGINT)
    _os._exit(130)  # SIGINT blocked by the parent: the same status a shell would show


_ppwtop_chain()
_ppwtop_boot()
