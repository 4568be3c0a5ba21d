"""The CPython interpreters the cpython agent is tested on: every pyenv 3.8-3.13 and Debian's /usr/bin/python3.

Each one becomes a pytest parameter; a missing interpreter is a skipped parameter with the reason, never a
silently shorter test list (issue 4, "Tests").
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from dataclasses import dataclass

import pytest

PYENV_ROOT = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
MINORS = [(3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13)]
DISTRO_PYTHON = "/usr/bin/python3"
#: Debian's debug build (Py_DEBUG) of its python3, from python3.11-dbg (scripts/setup-tests.sh)
DISTRO_DEBUG_PYTHON = "/usr/bin/python3.11d"
TARGETS = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Interpreter:
    label: str  #: test id, e.g. "3.12" or "debian-3.11"
    path: str
    version: tuple[int, int]


def pyenv_interpreter(minor: tuple[int, int]) -> Interpreter | None:
    """The newest pyenv CPython of ``minor`` (e.g. (3, 12)), or None if none is installed."""
    pattern = os.path.join(PYENV_ROOT, "versions", f"{minor[0]}.{minor[1]}.*", "bin", f"python{minor[0]}.{minor[1]}")
    found = sorted(p for p in glob.glob(pattern) if re.search(r"/\d+\.\d+\.\d+/bin/", p))
    if not found:
        return None
    return Interpreter(f"{minor[0]}.{minor[1]}", found[-1], minor)


def _distro() -> Interpreter | None:
    if not os.access(DISTRO_PYTHON, os.X_OK):
        return None
    out = subprocess.run([DISTRO_PYTHON, "-c", "import sys; print(*sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30)
    major, minor = map(int, out.stdout.split())
    return Interpreter(f"debian-{major}.{minor}", os.path.realpath(DISTRO_PYTHON), (major, minor))


def interpreter_params() -> list:
    """pytest params, one per interpreter, skipped with a reason where it is missing."""
    params = []
    for minor in MINORS:
        found = pyenv_interpreter(minor)
        label = f"{minor[0]}.{minor[1]}"
        if found is None:
            reason = f"no CPython {label} under {PYENV_ROOT}/versions"
            params.append(pytest.param(None, id=label, marks=pytest.mark.skip(reason=reason)))
        else:
            params.append(pytest.param(found, id=label))
    distro = _distro()
    if distro is None:
        params.append(pytest.param(None, id="debian", marks=pytest.mark.skip(reason=f"no {DISTRO_PYTHON}")))
    elif distro.version not in MINORS:
        reason = f"{DISTRO_PYTHON} is {distro.version}, outside 3.8-3.13"
        params.append(pytest.param(None, id="debian", marks=pytest.mark.skip(reason=reason)))
    else:
        params.append(pytest.param(distro, id=distro.label))
    return params


def debug_interpreter_params() -> list:
    """pytest params for the distro's debug interpreter (its own object allocator checks, and a name with
    the "d" ABI flag), skipped with a reason where it is missing."""
    if not os.access(DISTRO_DEBUG_PYTHON, os.X_OK):
        return [pytest.param(None, id="debian-debug", marks=pytest.mark.skip(reason=f"no {DISTRO_DEBUG_PYTHON}"))]
    return [pytest.param(Interpreter("debian-3.11d", DISTRO_DEBUG_PYTHON, (3, 11)), id="debian-3.11d")]
