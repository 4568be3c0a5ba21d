"""events.py: both ways of waiting for a child's event until a deadline, and which one the CLI gets."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from profiler.target.events import AlarmWait, SigchldWait, sigchld_blocked

WAITS = [SigchldWait, AlarmWait]


@pytest.mark.parametrize("kind", WAITS, ids=lambda k: k.__name__)
def test_wait_ends_at_its_deadline_then_sees_the_exit(kind):
    child = subprocess.Popen(["sleep", "30"])
    wait = kind()
    try:
        start = time.monotonic()
        tid, _status, err = wait.wait(start + 0.05)
        while tid < 0 and err == errno.EINTR and time.monotonic() < start + 0.05:
            tid, _status, err = wait.wait(start + 0.05)  # the alarm's backstop may end a wait early
        took = time.monotonic() - start
        assert (tid, err) == (-1, errno.EINTR), "nothing happened: the wait ends at the deadline"
        assert 0.05 <= took < 1.0
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 5
        while True:
            tid, status, err = wait.wait(deadline)
            if tid > 0 or time.monotonic() >= deadline:
                break
        assert tid == child.pid, "the exit is reported as soon as it happens"
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        child.returncode = -signal.SIGKILL  # reaped here, not by Popen
    finally:
        wait.close()
        if child.returncode is None:
            child.kill()
            child.wait()


def test_sigchld_wait_restores_the_signal_mask():
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    wait = SigchldWait()
    assert signal.SIGCHLD in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    wait.close()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before


def test_sigchld_wait_after_a_quiet_deadline_goes_straight_to_sigtimedwait():
    """A wait that ended at its deadline had found no event and seen no SIGCHLD after, so any later event
    leaves a SIGCHLD pending: the next wait needs no waitpid first (one system call fewer per tick), and
    still reports an exit that comes during it."""
    child = subprocess.Popen(["sleep", "30"])
    wait = SigchldWait()
    calls = []
    real = wait._waiter.wait

    class Counting:
        @staticmethod
        def wait(nohang: bool = False) -> tuple[int, int, int]:
            calls.append(nohang)
            return real(nohang)

    wait._waiter = Counting()
    try:
        assert wait.wait(time.monotonic() + 0.02)[0] == -1
        assert wait.wait(time.monotonic() + 0.02)[0] == -1
        assert calls == [True], "the second wait made no waitpid"
        child.kill()
        tid, status, _err = wait.wait(time.monotonic() + 5)
        assert tid == child.pid and os.WIFSIGNALED(status)
        child.returncode = -signal.SIGKILL
    finally:
        wait.close()
        if child.returncode is None:
            child.kill()
            child.wait()


def python_c(code: str) -> list[str]:
    """The words a fresh interpreter prints running ``code`` (a process of its own: its threads and mask)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def blocks_sigchld(native_id: int) -> bool:
    with open(f"/proc/self/task/{native_id}/status") as f:
        mask = next(line.split()[1] for line in f if line.startswith("SigBlk:"))
    return bool(int(mask, 16) & (1 << (signal.SIGCHLD - 1)))


def test_sigchld_blocked_marks_threads_started_inside_and_restores_this_one():
    """A thread started inside blocks SIGCHLD for good; the calling thread gets its mask back."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    release = threading.Event()
    with sigchld_blocked():
        worker = threading.Thread(target=release.wait, daemon=True)
        worker.start()
    try:
        assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
        assert blocks_sigchld(worker.native_id), "the worker started inside blocks SIGCHLD"
        assert blocks_sigchld(threading.get_native_id()) == (signal.SIGCHLD in before)
    finally:
        release.set()
        worker.join()


def test_the_command_line_waits_with_sigtimedwait_and_spawns_with_a_clean_mask():
    """The CLI imports numpy with SIGCHLD blocked, so its BLAS threads block it too: the tracer can use
    sigtimedwait. A command it spawns still starts with SIGCHLD unblocked."""
    kind, child_mask = python_c(
        "import profiler.cli.main, subprocess\n"
        "from profiler.target.events import open_event_wait\n"
        "out = subprocess.run(['grep', 'SigBlk', '/proc/self/status'], capture_output=True, text=True).stdout\n"
        "w = open_event_wait(); print(type(w).__name__, out.split()[1]); w.close()\n"
    )
    assert kind == "SigchldWait"
    assert not int(child_mask, 16) & (1 << (signal.SIGCHLD - 1))


def test_open_event_wait_falls_back_to_the_alarm_when_a_thread_would_take_sigchld():
    words = python_c(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
        "from profiler.target.events import open_event_wait\n"
        "w = open_event_wait(); print(type(w).__name__); w.close()\n"
    )
    assert words == ["AlarmWait"]
