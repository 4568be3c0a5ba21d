"""When the sampling thread runs: at real-time priority (SCHED_FIFO) from the moment it goes to sleep until
it has resumed the threads of the tick it wakes for, and through a short budget (``WORK_BUDGET``) of the
work after; at its own priority for anything longer.

Only a real-time policy makes the wake-up preempt a target thread sharing the sampler's CPU, so that a
thread computing in short bursts is sampled computing, and keeps the threads resumed first from preempting
the sampler before it resumes the rest. A step that runs past the budget is cut by RLIMIT_RTTIME's
SIGXCPU, whose handler (``on_sigxcpu``, on the main thread) drops the sampling thread back.
Why, and what was measured: docs/decisions/sampler-real-time-priority.md."""

from __future__ import annotations

import contextlib
import math
import os
import resource
import signal
import threading
import time
from types import FrameType

from profiler.config import SamplingPriority
from profiler.errors import PermissionDenied

#: SCHED_FIFO priority of the sampling thread: the level ptrace-costs.md section 3 measured. Low among
#: real-time priorities (1-99), so threaded interrupt handlers (50) and audio threads still come first.
FIFO_PRIORITY = 10

#: SCHED_FIFO priority of the main thread while it waits for a sampling thread of its own, whose SIGXCPU
#: handler it runs (module docstring): the lowest, below the sampling thread's, which it never preempts. Any
#: real-time policy has its wake-up placed on a CPU that runs no real-time thread (the kernel's RT push); at
#: its own policy the main thread could be queued behind the sampling thread on that one's CPU, and the
#: handler ran 60-80 ms after the signal in 6 of 8 trials here (until the other CPU's load balancing took
#: it), against 12 ms in the other two
HANDLER_PRIORITY = 1

#: how long the work after a tick's stops may go on at real-time priority: one EEVDF base slice
#: (``sysctl_sched_base_slice``, 0.75 ms, kernel/sched/fair.c, before its scaling by the CPU count), the time
#: the fair scheduler itself lets a thread run before a waiting one is due, so a target thread that shares the
#: sampler's CPU waits no longer than a fair-class neighbour could make it wait
WORK_BUDGET = 0.00075

#: children of the sampling thread (a command it starts, helper threads) do not inherit real-time priority
_FIFO = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK

#: policies whose thread already preempts fair-class threads: nprof leaves them as they are
_REALTIME_POLICIES = frozenset({os.SCHED_FIFO, os.SCHED_RR})

#: how to get real-time priority, for both the notice and the error
_HOW = (
    "Give nprof CAP_SYS_NICE (root has it; in a container, docker run --cap-add SYS_NICE), or allow "
    f"real-time priority with `ulimit -r {FIFO_PRIORITY}`"
)

#: the notice of ``--priority auto`` without real-time priority
NOT_PERMITTED = (
    "the sampling thread cannot have real-time priority (SCHED_FIFO) here, so target threads that share "
    "its CPU are sampled mostly where they block: short bursts of work between sleeps are undercounted. "
    f"{_HOW}; --priority normal hides this notice."
)


#: the policy whose backstop is armed: ``on_sigxcpu`` drops its thread
_armed: SamplingPolicy | None = None


def on_sigxcpu(signum: int, frame: FrameType | None) -> None:
    """SIGXCPU's handler while a sampling thread's backstop is armed (``SamplingPolicy._arm_backstop``)."""
    if _armed is not None:
        _armed._on_sigxcpu()


class SamplingPolicy:
    """Switches the calling thread between SCHED_FIFO (``realtime``) and the policy it had at ``start``
    (``normal``), and bounds the work done at SCHED_FIFO after the stops (``after_stops``, ``check``). Every
    switch is a no-op when already there, or when ``start`` was not granted real-time priority."""

    def __init__(self, mode: SamplingPriority) -> None:
        self.mode = mode
        self._fifo: os.sched_param | None = None  #: the real-time priority ``start`` was granted, if any
        self._own = (os.SCHED_OTHER, os.sched_param(0))  #: the thread's policy before ``start``, to go back to
        #: the thread ``start`` was called on, which the others switch (0: the calling one): the SIGXCPU handler
        #: runs on the main thread
        self._tid = 0
        self._raised = False
        #: monotonic time at which the work after the stops drops back; infinite from ``realtime`` on (the sleep
        #: and the stops), when no budget runs and the backstop leaves the thread at real-time priority
        self._budget_end = math.inf
        #: what ``stop`` restores when the kernel's backstop is armed: the SIGXCPU handler and RLIMIT_RTTIME
        self._backstop: tuple[object, tuple[int, int]] | None = None
        #: the main thread's id and policy, while it waits at HANDLER_PRIORITY (``_raise_handler_thread``)
        self._handler_thread: tuple[int, int, os.sched_param] | None = None
        self.budget_drops = 0  #: ticks whose work after the stops outlasted WORK_BUDGET
        self.backstop_drops = 0  #: steps of that work cut by SIGXCPU

    def start(self) -> str | None:
        """Find out whether real-time priority is permitted, and leave the thread at it if so.

        Returns a notice for the user when ``auto`` cannot have it; raises PermissionDenied when ``fifo``
        (which insists) cannot. A thread already at a real-time policy is left alone."""
        if self.mode is SamplingPriority.NORMAL:
            return None
        policy = os.sched_getscheduler(0)
        if policy & ~os.SCHED_RESET_ON_FORK in _REALTIME_POLICIES:
            return None  # started under chrt -f/-r: it already preempts the target's fair-class threads
        own = (policy, os.sched_getparam(0))
        self._tid = threading.get_native_id()
        for priority in _candidate_priorities():
            fifo = os.sched_param(priority)
            try:
                os.sched_setscheduler(0, _FIFO, fifo)
            except PermissionError:
                continue
            self._fifo, self._own, self._raised = fifo, own, True
            self._arm_backstop()
            return None
        if self.mode is SamplingPriority.FIFO:
            raise PermissionDenied(
                "--priority fifo: real-time priority (SCHED_FIFO) is not permitted.",
                f"{_HOW}, or record at normal priority with --priority auto.",
            )
        return NOT_PERMITTED

    def stop(self) -> None:
        """Back at the thread's own policy, with the SIGXCPU handler and RTTIME limit it had."""
        global _armed
        self.normal()
        if self._backstop is not None:
            handler, limit = self._backstop
            self._backstop = None
            resource.setrlimit(resource.RLIMIT_RTTIME, limit)  # first: no SIGXCPU can come after the handler
            if handler is not None:
                signal.signal(signal.SIGXCPU, handler)  # type: ignore[arg-type]
            _armed = None
        if self._handler_thread is not None:
            tid, policy, param = self._handler_thread
            self._handler_thread = None
            with contextlib.suppress(OSError):  # (a main thread gone: nprof is ending anyway)
                os.sched_setscheduler(tid, policy, param)

    def realtime(self) -> None:
        """Before the sampler sleeps until its next tick: its wake-up must preempt the target."""
        self._budget_end = math.inf
        if self._fifo is not None and not self._raised:
            os.sched_setscheduler(self._tid, _FIFO, self._fifo)
            self._raised = True

    def normal(self) -> None:
        """Back to the thread's own policy at once: for work that can be long."""
        if self._raised:
            os.sched_setscheduler(self._tid, *self._own)
            self._raised = False

    def after_stops(self) -> None:
        """Every thread stopped runs again: the work after may go on at real-time priority for WORK_BUDGET,
        if the kernel's backstop is armed (module docstring); otherwise drop back now."""
        if self._backstop is None:
            self.normal()
        else:
            self._budget_end = time.monotonic() + WORK_BUDGET

    def check(self) -> None:
        """Between steps of the work after the stops: drop back once the budget is spent."""
        if self._raised and time.monotonic() >= self._budget_end:
            self.normal()
            self.budget_drops += 1

    def counters(self) -> dict[str, int]:
        """The session counters of work after the stops that outlasted its budget (the non-zero ones)."""
        drops = {"priority_budget_drops": self.budget_drops, "priority_backstop_drops": self.backstop_drops}
        return {name: value for name, value in drops.items() if value}

    def _arm_backstop(self) -> None:
        """Have the kernel send SIGXCPU when the thread runs at real-time priority for WORK_BUDGET without
        blocking (RLIMIT_RTTIME, setrlimit(2)); its handler drops the thread back. Left unarmed where that
        cannot be done safely: a hard RTTIME limit would SIGKILL nprof at its end if the handler were late, and
        a CPU time limit (RLIMIT_CPU) sends SIGXCPU too, which must still end nprof."""
        global _armed
        if self._backstop is not None:
            return  # armed by an earlier ``start`` that no ``stop`` followed: its handler is the one to restore
        limit = resource.getrlimit(resource.RLIMIT_RTTIME)
        if limit[1] != resource.RLIM_INFINITY or resource.getrlimit(resource.RLIMIT_CPU)[0] != resource.RLIM_INFINITY:
            return
        handler: object = None  #: the handler to put back at ``stop``; None: the main thread installed ours
        if threading.current_thread() is threading.main_thread():
            handler = signal.signal(signal.SIGXCPU, on_sigxcpu)
        elif signal.getsignal(signal.SIGXCPU) is not on_sigxcpu:
            return  # only the main thread may install a handler (module docstring)
        else:
            self._raise_handler_thread()
        _armed = self
        self._backstop = (handler, limit)
        _set_rttime_backstop()

    def _raise_handler_thread(self) -> None:
        """Put the main thread, which runs the SIGXCPU handler for this thread and does nothing else while it
        samples (``target/tracing_thread.py``), at HANDLER_PRIORITY until ``stop``."""
        main = threading.main_thread().native_id
        if main is None:
            return
        own = os.sched_getscheduler(main), os.sched_getparam(main)
        if own[0] & ~os.SCHED_RESET_ON_FORK in _REALTIME_POLICIES:
            return
        try:
            os.sched_setscheduler(main, _FIFO, os.sched_param(HANDLER_PRIORITY))
        except PermissionError:
            return
        self._handler_thread = (main, *own)

    def _on_sigxcpu(self) -> None:
        """A step of the work after the stops ran at real-time priority past the budget: drop back. (A tick's
        stops themselves stay at real-time priority, as they would without the backstop: threads resumed
        first must not preempt the sampler while it still holds others.) The kernel moved the soft limit a
        second on when it sent the signal; it is set back for the next tick."""
        if self._raised and self._budget_end < math.inf:
            self.backstop_drops += 1
            self.normal()
        _set_rttime_backstop()


def _set_rttime_backstop() -> None:
    """RLIMIT_RTTIME's soft limit at WORK_BUDGET (in microseconds); the hard limit stays unlimited."""
    resource.setrlimit(resource.RLIMIT_RTTIME, (round(WORK_BUDGET * 1e6), resource.RLIM_INFINITY))


def require(mode: SamplingPriority) -> None:
    """Fail early (before any process is attached or spawned) when ``mode`` insists on real-time priority
    and cannot have it. The calling thread is left at its own policy either way."""
    if mode is SamplingPriority.FIFO:
        policy = SamplingPolicy(mode)
        policy.start()
        policy.stop()


def _candidate_priorities() -> list[int]:
    """FIFO_PRIORITY, then the highest an unprivileged process may take (RLIMIT_RTPRIO), if lower."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
    limit = FIFO_PRIORITY if soft == resource.RLIM_INFINITY else soft
    return [FIFO_PRIORITY] + ([limit] if 1 <= limit < FIFO_PRIORITY else [])
