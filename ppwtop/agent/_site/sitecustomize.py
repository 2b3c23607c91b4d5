"""ppwtop's bootstrap for ``ppwtop run``: put first on the child's PYTHONPATH, it chains to
any other ``sitecustomize`` on the path and then starts the agent from PPWTOP_* variables.

It never stops the target from starting: any failure is one ``ppwtop agent:`` line on stderr.
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
    except Exception as e:
        _sys.stderr.write(f"ppwtop agent: not started: {type(e).__name__}: {e}\n")


_ppwtop_chain()
_ppwtop_boot()
