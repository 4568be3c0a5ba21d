"""The end of a recording says the rate asked was not kept only when ticks that were due were skipped: never
for a target whose threads sleep, which gives few samples at any rate (issue 44: an idle web app was told
"sampled at 53 Hz ... nprof could not keep up with this target")."""

from __future__ import annotations

import os
import sys

from profiler.profile.session import Session
from tests.support.targets import NO_FRAME_POINTERS, build_c, record, running_target
from tests.targets.python.interpreters import TARGETS

#: a Python program of 20 threads asleep in an Event's wait and a main thread asleep in time.sleep
SLEEPING_PYTHON = """
import os, sys, threading, time
done = threading.Event()
for _ in range(20):
    threading.Thread(target=done.wait, daemon=True).start()
os.write(int(sys.argv[1]), b"ready\\n")
time.sleep(600)
"""


def assert_no_rate_notice(stderr: str, session: Session) -> None:
    assert "sampled at" not in stderr and "ticks due were skipped" not in stderr, stderr
    ticks = session.counters["ticks"]
    assert ticks >= 150, f"{ticks} ticks in 2 s at 100 Hz"
    assert session.counters.get("ticks_missed", 0) < 0.2 * ticks, session.counters


def test_a_sleeping_python_program_gets_no_rate_notice(tmp_path):
    with running_target([sys.executable, "-c", SLEEPING_PYTHON], ready_at=3) as target:
        result = record(target.pid, str(tmp_path / "idle.folded"))
    session = Session.load(str(tmp_path / "idle.nprof"))
    assert session.total_samples < 0.5 * session.counters["ticks"] * 21, "the threads slept: few samples"
    assert_no_rate_notice(result.stderr, session)


def test_a_sleeping_c_program_gets_no_rate_notice(tmp_path):
    """dormant.c's 20 threads asleep on a pipe, and its worker waiting for a go that never comes."""
    program = build_c("dormant.c", str(tmp_path), NO_FRAME_POINTERS)
    go_read, go_write = os.pipe()
    try:
        with running_target([program, str(go_read), "20"], pass_fds=[go_read]) as target:
            result = record(target.pid, str(tmp_path / "idle.folded"))
    finally:
        os.close(go_read)
        os.close(go_write)
    assert_no_rate_notice(result.stderr, Session.load(str(tmp_path / "idle.nprof")))


def test_a_rate_beyond_what_a_tick_takes_is_told_with_the_ticks_skipped(tmp_path):
    """At 20 kHz a tick's 50 us period is shorter than stopping, copying and unwinding a running thread,
    so ticks are skipped whatever the machine's load: the notice says how many, and why."""
    with running_target([sys.executable, os.path.join(TARGETS, "chain.py")], ready_at=2) as target:
        result = record(target.pid, str(tmp_path / "fast.folded"), "-r", "20000", duration="1")
    session = Session.load(str(tmp_path / "fast.nprof"))
    notice = next((line for line in result.stderr.splitlines() if "sampled at" in line), None)
    assert notice is not None and "not the 20,000 Hz asked" in notice and "of the ticks due were skipped" in notice, (
        result.stderr
    )
    assert session.counters["ticks_missed"] >= 0.2 * (session.counters["ticks"] + session.counters["ticks_missed"])
