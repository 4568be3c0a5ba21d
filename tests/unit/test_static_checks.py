"""The static checks CI runs with the tests: mypy (strict, on ``profiler/`` and ``agents/``) and ruff, both
configured in pyproject.toml and installed by scripts/setup-tests.sh; a type error or a lint finding fails
the suite, with the checker's own report as the message."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ptrace  #: it runs mypy and ruff

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_mypy_strict_finds_nothing():
    result = run("mypy")  # (files and strictness: pyproject.toml's [tool.mypy])
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_finds_nothing():
    result = run("ruff", "check", "profiler", "agents", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr
