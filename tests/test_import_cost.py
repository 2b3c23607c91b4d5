"""What the start-up of a live session and of the simulator imports: neither the engine's
pipeline nor scipy, which cost 0.4 s and 0.3-0.7 s before anything ran (docs/performance.md,
"Start-up of the simulated agent").  Each check runs in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
import {module}
heavy = sorted(m for m in sys.modules
               if m.split(".")[0] == "scipy" or m == "attribution.engine.build")
print(",".join(heavy) or "none")
"""


@pytest.mark.parametrize("module", [
    "ppwtop.live.launch",      # ppwtop run / record before the command starts
    "attribution.sim",         # the sim agent in the target, the demo's simulator
    "ppwtop.agent.bootstrap",  # the agent's own start
])
def test_start_up_imports_no_pipeline_and_no_scipy(module: str) -> None:
    out = subprocess.run([sys.executable, "-c", CHECK.format(module=module)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.strip() == "none"


def test_the_engine_names_still_import_from_the_package() -> None:
    code = ("from attribution.engine import N_BOOT, Arrays, attribute, attribute_arrays, "
            "build_snapshot, regress; import attribution.engine as e; "
            "print(N_BOOT > 0, callable(attribute_arrays), regress.__name__, "
            "hasattr(e, 'no_such_name'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.split() == ["True", "True", "attribution.engine.regress", "False"]
