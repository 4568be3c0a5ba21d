"""The CPython interpreters the cpython agent is tested on: every pyenv 3.8-3.13, Debian's /usr/bin/python3,
and Debian sid's python3.14 (and 3.13) run in the sid root that scripts/setup-tests.sh makes.

Each one becomes a pytest parameter; a missing interpreter is a skipped parameter with the reason, never a
silently shorter test list (issue 4, "Tests").

A sid interpreter's ``path`` is a wrapper script (``sid_wrapper``) that runs it chroot'ed into the sid root,
in a mount namespace of its own where the repository and /tmp are bind-mounted at their own paths: a test
passes it the paths of its scripts and files as it does to any interpreter. The wrapper execs, so the
process it starts is the interpreter's (a pid the tests attach to). Its interpreter binary is stripped, as
Debian ships it; its debug file is in the root's /usr/lib/debug, which nprof finds through /proc/PID/root,
or, for the ``-nodbg`` variant, hidden under an empty tmpfs.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shlex
import subprocess
from dataclasses import dataclass

import pytest

PYENV_ROOT = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
MINORS = [(3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13)]
DISTRO_PYTHON = "/usr/bin/python3"
#: Debian's debug build (Py_DEBUG) of its python3, from python3.11-dbg (scripts/setup-tests.sh)
DISTRO_DEBUG_PYTHON = "/usr/bin/python3.11d"
TARGETS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(TARGETS)))
#: the Debian sid root made by scripts/setup-tests.sh, and the versions it holds
SID_ROOT = os.path.join(os.environ.get("NPROF_TEST_CACHE") or os.path.expanduser("~/.cache/nprof-tests"), "sid")
SID_MINORS = [(3, 14), (3, 13)]


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
    return params + sid_interpreter_params([(3, 14)])


#: runs ``python`` in ``root`` with /tmp and the directories ``shared`` (the repository, pyenv's root: the
#: files tests name) bind-mounted at their own paths, and with the root's debug files hidden for "nodbg"
_SID_WRAPPER = """#!/bin/sh
# written by tests/targets/python/interpreters.py: {label}, in the Debian sid root of scripts/setup-tests.sh
exec unshare --mount --propagation private sh -c '
root=$0 python=$1 debug=$2 shared=$3; shift 3
mount --rbind /tmp "$root/tmp" || exit 111
for dir in $shared; do
    case "$dir" in /tmp/*) ;; *) mount --bind "$dir" "$root$dir" || exit 111 ;; esac
done
if [ "$debug" = nodbg ]; then mount -t tmpfs none "$root/usr/lib/debug" || exit 111; fi
exec chroot "$root" "$python" "$@"' {root} {python} {debug} {shared} "$@"
"""


def sid_interpreter(minor: tuple[int, int], debug_files: bool = True) -> Interpreter | str:
    """Debian sid's ``python3.X`` as an ``Interpreter`` whose path is its wrapper, or why there is none."""
    label = f"sid-{minor[0]}.{minor[1]}" + ("" if debug_files else "-nodbg")
    python = f"/usr/bin/python{minor[0]}.{minor[1]}"
    if not os.access(SID_ROOT + python, os.X_OK):
        return f"no {python} in {SID_ROOT} (scripts/setup-tests.sh makes it)"
    if os.geteuid() != 0:
        return f"{label} runs chroot'ed in a mount namespace of its own, which takes root"
    shared = [d for d in (REPO, os.path.realpath(PYENV_ROOT)) if os.path.isdir(d) and " " not in d]
    for directory in shared:
        os.makedirs(SID_ROOT + directory, exist_ok=True)  # (the bind mounts' mount points)
    # one per checkout: it mounts its repository, and two checkouts' test runs (worktrees) rewrote one
    # wrapper under each other, each then running the other's files
    checkout = hashlib.sha256(REPO.encode()).hexdigest()[:8]
    wrapper = os.path.join(os.path.dirname(SID_ROOT), f"run-{label}-{checkout}")
    text = _SID_WRAPPER.format(label=label, root=shlex.quote(SID_ROOT), python=python,
                               debug="dbg" if debug_files else "nodbg",
                               shared=shlex.quote(" ".join(shared)))  # fmt: skip
    try:
        with open(wrapper, encoding="utf-8") as f:
            current = f.read()
    except OSError:
        current = ""
    if current != text:
        fresh = f"{wrapper}.{os.getpid()}.new"  # (two sessions of one checkout at once: each its own)
        with open(fresh, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(fresh, 0o755)
        os.replace(fresh, wrapper)
    return Interpreter(label, wrapper, minor)


def sid_interpreter_params(minors: list[tuple[int, int]] = SID_MINORS, debug_files: bool = True) -> list:
    """pytest params for sid's interpreters of ``minors``, skipped with the reason where one is missing."""
    params = []
    for minor in minors:
        found = sid_interpreter(minor, debug_files)
        label = f"sid-{minor[0]}.{minor[1]}" + ("" if debug_files else "-nodbg")
        if isinstance(found, str):
            params.append(pytest.param(None, id=label, marks=pytest.mark.skip(reason=found)))
        else:
            params.append(pytest.param(found, id=label))
    return params


def debug_interpreter_params() -> list:
    """pytest params for the distro's debug interpreter (its own object allocator checks, and a name with
    the "d" ABI flag), skipped with a reason where it is missing."""
    if not os.access(DISTRO_DEBUG_PYTHON, os.X_OK):
        return [pytest.param(None, id="debian-debug", marks=pytest.mark.skip(reason=f"no {DISTRO_DEBUG_PYTHON}"))]
    return [pytest.param(Interpreter("debian-3.11d", DISTRO_DEBUG_PYTHON, (3, 11)), id="debian-3.11d")]
