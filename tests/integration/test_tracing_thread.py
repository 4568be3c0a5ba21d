"""tracing_thread.py: the thread every ptrace call of a recording is made on, whose exit detaches every tracee
without waking it, and whose waits a signal to nprof ends."""

from __future__ import annotations

import errno
import subprocess
import threading
import time

import pytest

from profiler.target import ptrace as pt
from profiler.target.events import AlarmWait, SigchldWait
from profiler.target.procfs import read_status, read_text
from profiler.target.tracing_thread import TracingThread
from tests.support.targets import wait_until


def voluntary_switches(pid: int) -> int:
    """How often the process's main thread went to sleep (proc(5)): a sleep woken early and restarted counts
    once more."""
    text = read_text(f"/proc/{pid}/status") or ""
    return int(next(line for line in text.splitlines() if line.startswith("voluntary_ctxt_switches:")).split()[1])


def test_call_returns_what_the_step_returns_and_raises_what_it_raised():
    with TracingThread() as tracing:
        assert tracing.call(threading.get_native_id) != threading.get_native_id()
        assert tracing.call(lambda a, b=0: a + b, 2, b=3) == 5
        with pytest.raises(KeyError, match="x"):
            tracing.call({}.__getitem__, "x")
        assert tracing.call(lambda: "still serving") == "still serving"


def test_the_thread_s_exit_detaches_a_sleeping_tracee_without_waking_it():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert wait_until(lambda: read_status(sleeper.pid).state == "S"), "asleep in its nanosleep"
        with TracingThread() as tracing:
            assert tracing.call(pt.seize, sleeper.pid, 0) == 0
            tracer = read_status(sleeper.pid).tracer_pid
            assert tracer == tracing.call(threading.get_native_id), "the tracee is the tracing thread's"
            assert tracer != threading.get_native_id()
            before = voluntary_switches(sleeper.pid)
        status = read_status(sleeper.pid)
        assert status.tracer_pid == 0, "detached once the thread has ended"
        assert status.state == "S"
        assert voluntary_switches(sleeper.pid) == before, "its sleep was never interrupted"
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("kind", [SigchldWait, AlarmWait], ids=lambda k: k.__name__)
def test_wake_ends_the_tracing_thread_s_wait(kind):
    """SIGINT reaches the main thread only; its handler wakes the tracing thread, whose wait (SIGCHLD's, or the
    alarm's) then returns EINTR at once rather than at its deadline."""
    child = subprocess.Popen(["sleep", "60"])  # a child, so that the wait has something to wait for
    try:
        with TracingThread() as tracing:
            wait = tracing.call(kind)
            waker = threading.Timer(0.2, tracing.wake)
            waker.start()
            start = time.monotonic()
            tid, _status, err = tracing.call(wait.wait, start + 30)
            took = time.monotonic() - start
            tracing.call(wait.close)
            waker.join()
        assert (tid, err) == (-1, errno.EINTR)
        assert took < 10, f"the wait ended after {took:.1f} s, not at the wake-up"
    finally:
        child.kill()
        child.wait()
