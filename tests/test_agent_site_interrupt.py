"""Ctrl-C while the agent's ``sitecustomize`` runs in the target (the simulator's setup takes
seconds) ends the program as SIGINT does, with one ``ppwtop agent:`` line and no "Fatal
Python error: init_import_site" dump; other failures still let the program start."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ppwtop.agent.bootstrap import child_env

USER_SITE = {
    "agent": "import ppwtop.agent.bootstrap as b\n"
             "def boom():\n    raise KeyboardInterrupt\n"
             "b.from_env = boom\n",
    "chain": "raise KeyboardInterrupt\n",
}


def _run(tmp_path: Path, user_site: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text(user_site)
    env = child_env(str(tmp_path / "no.sock"), "sim",
                    base={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    return subprocess.run([sys.executable, "-c", "print('program ran')"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("where", sorted(USER_SITE))
def test_ctrl_c_while_the_agent_starts_ends_the_program_quietly(tmp_path: Path,
                                                                where: str) -> None:
    r = _run(tmp_path, USER_SITE[where])
    assert r.returncode == -signal.SIGINT, r.stderr
    assert "Fatal Python error" not in r.stderr and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ppwtop agent: interrupted (Ctrl-C)")
    assert "program ran" not in r.stdout


def test_system_exit_in_the_agent_start_still_runs_the_program(tmp_path: Path) -> None:
    r = _run(tmp_path, "import ppwtop.agent.bootstrap as b\n"
                       "def boom():\n    raise SystemExit(3)\n"
                       "b.from_env = boom\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "program ran"
    assert r.stderr.strip() == "ppwtop agent: not started: SystemExit: 3"
