"""Lint, types and import layering run inside the test command (so CI cannot skip them)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_clean() -> None:
    r = _run(sys.executable, "-m", "ruff", "check", "attribution", "ppwtop", "tests",
             "benchmarks", "scripts")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_clean() -> None:
    # tests/, benchmarks/ and scripts/ too (pyproject's explicit_package_bases names their
    # modules from the repository root: tests.test_x, as the tests import each other)
    r = _run(sys.executable, "-m", "mypy", "attribution", "ppwtop", "tests", "benchmarks",
             "scripts")
    assert r.returncode == 0, r.stdout + r.stderr


def test_import_layering() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("import-linter is not installed (pip install -e '.[test]')")
    r = _run(exe)
    assert r.returncode == 0, r.stdout + r.stderr
