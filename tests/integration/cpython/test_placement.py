"""Python frames where they ran, in every run, on every interpreter (issue 42).

Each recording's placement is checked against readelf (``tests/support/placement.py``): every group of
Python frames must sit right inward of a native frame inside the eval loop, as the interpreter's own symbol
table or its debug file bounds it, and no sample may be ``[unanchored]``. The json loop put ~90% of its
samples' Python frames below the native leaf in 2 of 10 spawned runs (eval-loop frames sampled before the
runtime was found were remembered as "not an anchor"); Debian's stripped 3.14, whose eval loop's body is named
only in its debug file, misplaced 63% without a word.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from profiler.profile.session import Session
from tests.support.placement import placement
from tests.support.targets import run_nprof, running_target
from tests.targets.python.interpreters import (
    SID_ROOT,
    TARGETS,
    interpreter_params,
    pyenv_interpreter,
    sid_interpreter_params,
)

#: runs per mode of the repeated test: the spawn-mode defect showed in 2 of 10
RUNS = 20
#: the share of a run's samples with Python frames that must be placed right
RIGHT = 0.99
#: seconds each target runs, at 1 kHz: a few hundred samples a run
SECONDS = "0.4"
SCRIPTS = ["json_loop.py", "c_heavy.py"]
#: samples with Python frames a run needs for its share placed right to count: at 99%, one wrong of 100
MEANINGFUL = 100
#: recordings of a run at most, when they have too few samples to judge
ATTEMPTS = 3


def recorded(interp_path: str, script: str, mode: str, out: str) -> str:
    """Record ``script`` on ``interp_path``, started by nprof (``spawn``) or attached to (``pid``); returns
    the session's path. A recording with too few samples with Python frames to judge (``MEANINGFUL``: a
    busy machine: 37 samples in all once, with the suite on both CPUs) is made again, up to ``ATTEMPTS``
    times; ``check`` judges the last."""
    path = os.path.join(TARGETS, script)
    session = out.removesuffix(".folded") + ".nprof"
    for _attempt in range(ATTEMPTS):
        if mode == "spawn":
            result = run_nprof("record", "-r", "1000", "-o", out, "--", interp_path, path, "-", SECONDS)
        else:
            with running_target([interp_path, path, "60"], ready_at=2) as target:
                result = run_nprof("record", "--pid", str(target.pid), "-r", "1000", "-d", SECONDS, "-o", out)
        assert result.returncode == 0, result.stderr
        if placement(session, SID_ROOT).with_python >= MEANINGFUL:
            break
    return session


def check(session: str, what: str, version: tuple[int, int], named: bool = True) -> None:
    """The recording's placement (the module docstring); from 3.11, made by the activations' records (names
    placed at most 1%: ``python_placed_by_name``), and never against the names where the interpreter's
    symbol table is complete (``python_anchor_unnamed``, the cross-check)."""
    p = placement(session, SID_ROOT)
    # enough samples with Python frames for the 99% to mean something: a count, not a share of all samples,
    # as the interpreter's start-up grows with load (144 of 387 with two recordings at once and load ~19)
    assert p.with_python >= MEANINGFUL, f"{what}: {p.with_python} of {p.samples} samples had Python frames"
    assert p.share >= RIGHT, f"{what}: {p.right}/{p.with_python} placed right; e.g. {p.wrong}"
    if named:
        assert p.named >= RIGHT * p.activations, f"{what}: {p.named}/{p.activations} activations named"
    counters = Session.load(session).counters
    assert not counters.get("python_anchor_unnamed"), f"{what}: {counters}"
    if version >= (3, 11):
        assert counters.get("python_placed_by_name", 0) <= (1 - RIGHT) * p.with_python, f"{what}: {counters}"


@pytest.mark.parametrize("mode", ["spawn", "pid"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_python_frames_are_placed_right_in_every_run(script, mode, tmp_path):
    """20 runs of each target, started by nprof and attached to, on the machine's CPython 3.11."""
    interp = pyenv_interpreter((3, 11))
    if interp is None:
        pytest.skip("no pyenv CPython 3.11")
    # two at a time: the placement must hold however busy the machine is, and the runs are mostly nprof's
    # start and end, which overlap well (145 s for the four tests one run at a time on 2 CPUs). One at a
    # time when the suite runs on both CPUs already (pytest-xdist): four recordings at once at 1 kHz beside
    # the other worker's tests left a spinning target 9 samples in 0.4 s
    with ThreadPoolExecutor(max_workers=1 if os.environ.get("PYTEST_XDIST_WORKER") else 2) as pool:
        sessions = pool.map(lambda run: recorded(interp.path, script, mode, str(tmp_path / f"run{run}.folded")),
                            range(RUNS))  # fmt: skip
        for run, session in enumerate(sessions):
            check(session, f"{script} {mode} run {run}", interp.version)


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize(
    "interp", interpreter_params() + sid_interpreter_params() + sid_interpreter_params(debug_files=False)
)
def test_python_frames_are_placed_right_on_every_interpreter(interp, script, tmp_path):
    """pyenv's 3.8-3.13, Debian's python3, and sid's stripped 3.14 and 3.13 with their debug files (named)
    and without them (placed by address alone; the eval loop has no name then)."""
    for mode in ("spawn", "pid"):
        session = recorded(interp.path, script, mode, str(tmp_path / f"{mode}.folded"))
        check(session, f"{interp.label} {script} {mode}", interp.version, not interp.label.endswith("-nodbg"))
