"""Threads asleep for long are not read at every tick: their process's CPU clock vouches for them.

A thread that has slept for ``DORMANT_AFTER`` is *dormant*: counted with its last stack at every tick
without its schedstat being read, for as long as the process's CPU clock (``clock_getcpuclockid``), read
before and after the tick's reads of the other threads, shows that no dormant thread can have run. Anything
the clock does not explain (a thread seized since, an exit) wakes every dormant thread. A dormant thread's
samples are deferred (``Session.deferred_samples``) and added when it wakes or the recording ends.
The proof, its one blind spot and the costs measured: docs/decisions/dormant-threads.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from profiler.model import StopReason
from profiler.profile.session import Session
from profiler.target.capture import SeizedThread

if TYPE_CHECKING:
    from profiler.sampling.sampled_process import SampledThread  # (target.py holds a Dormancy)

#: seconds a thread must have slept before it is made dormant: a dormant thread that wakes may be counted
#: asleep for up to one scheduler tick of its run (above), so only threads that sleep for long are: at most
#: 4 ms per second asleep, at HZ=250
DORMANT_AFTER = 1.0

#: processes with fewer threads are checked as before: the two clock reads and the bookkeeping of a tick
#: cost about what reading two or three threads does
MIN_THREADS = 8

#: include/linux/posix-timers_types.h: the per-process CPU clock that counts scheduler run time (ns)
CPUCLOCK_SCHED = 2


def process_cpu_clock(pid: int) -> int:
    """The clock id ``clock_getcpuclockid(pid)`` returns: ``make_process_cpuclock`` in
    include/linux/posix-timers.h, ``((~pid) << 3) | CPUCLOCK_SCHED``."""
    return ((~pid) << 3) | CPUCLOCK_SCHED


def read_clock(clock_id: int) -> int | None:
    """The clock in ns, or None (the process is gone)."""
    try:
        return time.clock_gettime_ns(clock_id)
    except OSError:
        return None


#: ``IdleCheck.reuse``: count the thread without a stop (True) or stop it (False)
Check = Callable[[SeizedThread, "SampledThread"], bool]


class Dormancy:
    """One process's threads split into watched (read every tick) and dormant (vouched for by the clock)."""

    def __init__(self, pid: int, session: Session, after_checks: int) -> None:
        self.clock_id = process_cpu_clock(pid)
        self.session = session
        self.after_checks = after_checks  #: consecutive asleep checks that make a thread dormant
        self.watched: list[SeizedThread] = []
        #: dormant thread -> [``quiet_ticks`` when its deferred samples were last added, its run-time reading]
        self.dormant: dict[SeizedThread, list[int]] = {}
        self.dormant_sum = 0  #: S: the dormant threads' run-time readings, summed
        self.bound: int | None = None  #: a lower bound on Q (above) as of the last tick's first clock read
        self.quiet_ticks = 0  #: ticks that counted the dormant threads without reading them
        self.wakes = 0  #: ticks that read the dormant threads because the clock could not vouch for them
        self._stacked = 0  #: dormant threads with a stack: the samples each quiet tick defers
        self._records: list[SeizedThread] | None = None  #: the list ``watched`` was made from

    def decide(
        self, records: list[SeizedThread], check: Check, state_of: Callable[[SeizedThread], SampledThread],
        due: list[SeizedThread],
    ) -> int:  # fmt: skip
        """One tick's idle checks for the process: the threads to stop go to ``due``; returns how many were
        counted without a stop."""
        if records is not self._records:
            self._adopt(records)
        before = read_clock(self.clock_id)
        reused = 0
        watched_sum = 0
        sleepers: list[SeizedThread] = []
        after_checks = self.after_checks
        for record in self.watched:
            if record.gone:
                continue
            state = record.user or state_of(record)
            if check(record, state):
                reused += 1
            else:
                due.append(record)
            reading = record.proc.last_schedstat
            if reading is not None:  # (None: gone; out of T from now on)
                watched_sum += reading[0]
                if state.asleep_checks >= after_checks:
                    sleepers.append(record)
        if self.dormant:
            if not self._vouched(watched_sum):
                reused += self._wake(check, due)
            else:
                self.quiet_ticks += 1
                self.session.deferred_samples += self._stacked
                reused += len(self.dormant)
        self.bound = None if before is None else before - watched_sum - self.dormant_sum
        if sleepers:
            self._put_to_sleep(sleepers)
        return reused

    def _vouched(self, watched_sum: int) -> bool:
        """Whether the clock proves that no dormant thread ran since it was last read (above).

        A watched thread's run time accounted between its reading and the clock's (a scheduler tick of a
        busy thread landing in those microseconds) looks like a dormant thread's: 48 of ~5,000 ticks at
        1 kHz beside one busy thread. So before reading every dormant thread, the watched ones are read
        again, then the clock: the argument holds for any readings taken after the tick's first clock read."""
        bound = self.bound
        if bound is None:
            return False
        after = read_clock(self.clock_id)
        if after is not None and after - watched_sum - bound <= self.dormant_sum:
            return True
        again = 0
        for record in self.watched:
            reading = None if record.gone else record.proc.schedstat()
            if reading is not None:
                again += reading[0]
        after = read_clock(self.clock_id)
        return after is not None and after - again - bound <= self.dormant_sum

    def _wake(self, check: Check, due: list[SeizedThread]) -> int:
        """Check every dormant thread as a watched one is checked; those that ran are watched again."""
        self.wakes += 1
        reused = 0
        total = stacked = 0
        woken: list[SeizedThread] = []
        dormant = self.dormant
        quiet = self.quiet_ticks
        for record in list(dormant):
            self._add_deferred(record)
            state: SampledThread = record.user
            if record.gone:
                del dormant[record]
                continue
            if check(record, state):
                reused += 1
            else:
                due.append(record)
            reading = record.proc.last_schedstat
            if reading is None:
                del dormant[record]
            elif state.asleep_checks >= self.after_checks:
                dormant[record] = [quiet, reading[0]]
                total += reading[0]
                stacked += state.last_stack is not None
            else:
                del dormant[record]
                woken.append(record)
        self.watched.extend(woken)
        self.dormant_sum, self._stacked = total, stacked
        return reused

    def _put_to_sleep(self, sleepers: list[SeizedThread]) -> None:
        asleep = set()
        for record in sleepers:
            reading = record.proc.last_schedstat  # (read this tick, maybe again by ``_vouched``)
            if reading is None:
                continue  # gone since: out of T
            self.dormant[record] = [self.quiet_ticks, reading[0]]
            self.dormant_sum += reading[0]
            self._stacked += record.user.last_stack is not None
            asleep.add(record)
        self.watched = [r for r in self.watched if r not in asleep]

    def _adopt(self, records: list[SeizedThread]) -> None:
        """The process's thread list changed (``Sampler._sync_threads``): watch the new threads, drop the
        dormant ones that left it, and read everything at this tick if any thread is new to T."""
        known = set(self.watched)
        dormant = self.dormant
        if any(r not in known and r not in dormant for r in records):
            self.bound = None
        listed = set(records)
        for record in [r for r in dormant if r not in listed]:
            self._add_deferred(record)
            self._forget(record)
        self.watched = [r for r in records if r not in dormant]
        self._records = records

    def _forget(self, record: SeizedThread) -> None:
        self.dormant_sum -= self.dormant.pop(record)[1]
        self._stacked -= record.user.last_stack is not None

    def _add_deferred(self, record: SeizedThread) -> None:
        """Add a dormant thread's samples since it was last added (one per quiet tick) to the session."""
        entry = self.dormant[record]
        count = self.quiet_ticks - entry[0]
        state: SampledThread = record.user
        if count and state.last_stack is not None:
            self.session.add_sample(state.index, state.last_stack, StopReason.REUSED, state.last_class, count)
            self.session.deferred_samples -= count
        entry[0] = self.quiet_ticks

    def flush(self) -> None:
        """Add every deferred sample to the session (the recording ends, or a reader wants it whole)."""
        for record in self.dormant:
            self._add_deferred(record)

    def wake_all(self) -> None:
        """Watch every thread again, from the next tick: their states are about to change behind the idle
        check's back (an exec, a runtime found since their last samples)."""
        self.flush()
        self.watched.extend(self.dormant)
        self.dormant.clear()
        self.dormant_sum = self._stacked = 0
        self.bound = None
