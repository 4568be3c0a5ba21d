"""Waiting for the next tracee event (a stop, an exit) until a deadline, in the cheapest way the process allows.

``SigchldWait`` waits for SIGCHLD, blocked in every thread of nprof, with ``sigtimedwait`` (which has a
timeout) and takes the event with ``waitpid(WNOHANG)``; ``AlarmWait``, where another thread does not block
SIGCHLD, ends a blocking ``waitpid`` with a thread-directed alarm (``alarm.py``). ``open_event_wait`` picks
one. A tick's first stop is polled for first (``FirstStopSpin``). Both return ``(tid, status, errno)``: tid
-1 with EINTR at the deadline or another signal, with ECHILD when nothing is traced any more.
Why, and what each costs: docs/decisions/event-wait.md."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import struct
import time
from collections.abc import Iterable, Iterator

from profiler.target import ptrace as pt
from profiler.target.alarm import ThreadAlarm
from profiler.target.capture import TracerStats
from profiler.target.libc import libc

#: backstop period of the alarm after a deadline has passed, in case it fired between our check of the clock
#: and the start of the blocking waitpid (there is no "pwaitpid" to close that race)
ALARM_BACKSTOP = 0.001

#: (const sigset_t *, siginfo_t *, const struct timespec *), all passed as ctypes buffers or None: no
#: argtypes, whose converters cost ~230 ns per call here (ptrace.py, "The calls")
_sigtimedwait = libc.sigtimedwait
_sigtimedwait.restype = ctypes.c_int
_sigemptyset = libc.sigemptyset
_sigaddset = libc.sigaddset
_SIGSET_BYTES = 128  #: glibc's sigset_t (1024 bits)
_TIMESPEC = struct.Struct("<qq")  #: struct timespec {time_t tv_sec; long tv_nsec;} on x86-64

#: "SigBlk:" of /proc/self/task/TID/status is a hex mask with bit (signo - 1) set for each blocked signal
_SIGCHLD_BIT = 1 << (signal.SIGCHLD - 1)


#: how long a tick's wait for its first stop polls ``waitpid(WNOHANG)`` before it sleeps (``FirstStopSpin``).
#: Interleaved pairs of recordings of the 3.12 chain at 1 kHz (6 pairs, benchmarks/bench_python.py's
#: target): off-CPU per stop 51.6 us sleeping, 34.9 us polling for 20 us, 34.4 us for 40 us; a stop from
#: another CPU is seen within 20 us
FIRST_STOP_SPIN_NS = 40_000
#: ticks that wait without polling after a poll that saw nothing, doubled per such poll in a row up to this:
#: a thread queued on nprof's own CPU cannot stop while nprof polls, and waits out the whole poll (the chain
#: pinned to nprof's CPU: slowdown 1.22 sleeping, 1.29 polling at every tick)
FIRST_STOP_BACKOFF_MAX = 64


def sigchld_blocked_everywhere() -> bool:
    """Whether every thread of this process blocks SIGCHLD (read from /proc/self/task/*/status)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                blocked = next((line.split()[1] for line in f if line.startswith("SigBlk:")), None)
        except OSError:
            continue  # a thread that just ended
        if blocked is None or not int(blocked, 16) & _SIGCHLD_BIT:
            return False
    return True


@contextlib.contextmanager
def sigchld_blocked(also: Iterable[int] = ()) -> Iterator[None]:
    """Block SIGCHLD (and the signals ``also``) in this thread for the ``with`` body only. Threads started
    inside (numpy's BLAS workers, at numpy's import) inherit the mask and keep it, so they never take the
    SIGCHLD ``SigchldWait`` waits for; this thread gets its mask back, so a command it spawns later does not
    inherit a blocked SIGCHLD."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, *also})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class SigchldWait:
    """``waitpid(WNOHANG)`` and ``sigtimedwait(SIGCHLD)`` in turn; SIGCHLD stays blocked in this thread until
    ``close``."""

    def __init__(self) -> None:
        self._waiter = pt.Waiter()
        #: the last wait ended at its deadline: ``waitpid`` had found nothing and no SIGCHLD came after, so
        #: every event since then has a SIGCHLD pending and the next wait can go to ``sigtimedwait`` at once
        #: (the tick's stop wait starts so: one ``waitpid`` fewer per tick)
        self._drained = False
        self._old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        self._set = ctypes.create_string_buffer(_SIGSET_BYTES)
        _sigemptyset(self._set)
        _sigaddset(self._set, signal.SIGCHLD)
        self._timeout = ctypes.create_string_buffer(_TIMESPEC.size)

    def wait(self, deadline: float, early: bool = False) -> tuple[int, int, int]:
        """The next event, or ``(-1, 0, EINTR)`` at ``deadline`` (monotonic) or on another signal. (``early``
        is for ``AlarmWait``: this wait ends at the deadline exactly anyway.)"""
        waiter = self._waiter
        while True:
            if not self._drained:
                tid, status, err = waiter.wait(nohang=True)
                if tid != 0:
                    return tid, status, err
            self._drained = False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return -1, 0, errno.EINTR
            ns = int(remaining * 1e9)
            _TIMESPEC.pack_into(self._timeout, 0, ns // 1_000_000_000, ns % 1_000_000_000)
            if _sigtimedwait(self._set, None, self._timeout) < 0:
                err = ctypes.get_errno()
                if err == errno.EAGAIN:
                    self._drained = True
                    return -1, 0, errno.EINTR  # the deadline
                return -1, 0, err  # EINTR: another signal (SIGINT, SIGTERM): the caller checks its flag
            # SIGCHLD: an event is ready (or one already taken by an earlier WNOHANG: then it loops)

    def close(self) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self._old_mask)


class FirstStopSpin:
    """Polls for a tick's first stop for ``FIRST_STOP_SPIN_NS`` before the tracer sleeps for it.

    A thread on another CPU stops within microseconds of its interrupt, but the tracer asleep for that stop
    is woken by it, and on this VM a sleeping vCPU takes ~17 us to wake (ptrace-costs.md: the cross-CPU round
    trip is 25 us polling against 38 us waiting, in C): time the stopped thread waits. Polling for the
    first stop only, as the others of a tick arrive while the first is copied, and a thread that waits for
    nprof's own CPU can only stop once nprof sleeps. A poll that sees nothing (the target queued on nprof's
    CPU) backs off for 2, 4, ... ``FIRST_STOP_BACKOFF_MAX`` ticks. Each poll is counted in ``stats``
    (``first_stop_polls_caught``, ``first_stop_polls_missed``)."""

    __slots__ = ("_waiter", "_stats", "_skip", "_misses")

    def __init__(self, waiter: pt.Waiter, stats: TracerStats) -> None:
        self._waiter = waiter  #: the tracer's, for its ``waitpid(WNOHANG)``
        self._stats = stats
        self._skip = 0  #: ticks left to wait without polling
        self._misses = 0  #: polls in a row that saw nothing

    def poll(self) -> tuple[int, int]:
        """``(tid, status)`` of the first event ``waitpid(WNOHANG)`` returns within the poll; tid 0 if none
        came (or this tick backs off, or nothing is traced any more), and the caller waits as usual. Called
        right after the interrupts."""
        if self._skip:
            self._skip -= 1
            return 0, 0
        clock, wait = time.monotonic_ns, self._waiter.wait
        until = clock() + FIRST_STOP_SPIN_NS
        while True:
            tid, status, _err = wait(nohang=True)
            if tid > 0:
                self._stats.first_stop_polls_caught += 1
                self._misses = 0
                return tid, status
            if tid < 0:
                return 0, 0  # ECHILD, nothing traced any more: the wait that follows says so
            if clock() >= until:
                break
        self._stats.first_stop_polls_missed += 1
        self._misses += 1
        self._skip = min(1 << self._misses, FIRST_STOP_BACKOFF_MAX)
        return 0, 0


class AlarmWait:
    """A blocking ``waitpid`` bounded by a thread-directed alarm (``alarm.py``)."""

    def __init__(self) -> None:
        self._waiter = pt.Waiter()
        self._alarm = ThreadAlarm()

    def wait(self, deadline: float, early: bool = False) -> tuple[int, int, int]:
        """The next event, or ``(-1, 0, EINTR)`` when the alarm (or another signal) ends the wait first.

        The alarm fires at ``deadline``, and then every ALARM_BACKSTOP until re-armed. With ``early``, the
        caller only needs a wake-up *by* the deadline (it re-checks its clock on every EINTR), so an alarm
        that already repeats often enough is left alone: one ``timer_settime`` per tick, not two."""
        delay = deadline - time.monotonic()
        if delay <= 0:
            return -1, 0, errno.EINTR
        if not (early and self._alarm.fires_within(delay)):
            self._alarm.arm(delay, ALARM_BACKSTOP)
        return self._waiter.wait()

    def close(self) -> None:
        self._alarm.close()


EventWait = SigchldWait | AlarmWait


def open_event_wait() -> EventWait:
    """The SIGCHLD wait if every thread blocks SIGCHLD once this one does, else the alarm."""
    wait = SigchldWait()
    if sigchld_blocked_everywhere():
        return wait
    wait.close()
    return AlarmWait()
