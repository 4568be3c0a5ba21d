"""When the sampling thread runs: at real-time priority (SCHED_FIFO) from the moment it goes to sleep until
it has resumed the threads of the tick it wakes for, and at its own priority for all the work after.

Why the wake-up. A sampler at normal priority that shares a CPU with a busy target thread does not run
when its timer fires: the fair scheduler (EEVDF, kernel 6.6+) lets the running thread go on to the end of
its slice, so the sampler runs when that thread blocks, and finds it blocked. A thread that computes in
short bursts between sleeps is then never seen computing. Measured here (2026-11-22, kernel 6.18, 2 vCPUs):
a Python thread busy 200 us of every ~1.05 ms (``tests/targets/python/duty.py``), sampled at 100 Hz for 4 s
with every stop's position kept (``--idle``), three runs each:

* sampler and target on one CPU: 0 of ~400 stops in the busy loop at normal priority; 15-20% with the
  wake-ups and stops at SCHED_FIFO (its share of the time is ~19%);
* unpinned: 2-3% at normal priority, 14-24% at SCHED_FIFO.

On one CPU, a shorter EEVDF slice for the sampler (``sched_setattr``'s ``sched_runtime``, which needs no
privilege) and a timer slack of 1 ns left it at 0%; ``nice -20`` brought it to 16% (single runs). Only a
real-time policy makes the wake-up preempt a fair-class thread for certain.

Why the stops (``../shared/reference/ptrace-costs.md`` section 3): with more runnable threads than CPUs, a
sampler at normal priority is preempted by the threads it has just resumed, and the ones it has not
resumed yet stay stopped a whole scheduler tick (p90 3.9 ms, against 118-142 us under SCHED_FIFO).

Why not the work after. Unwinding, interning and new processes are deferred work of unbounded length: the
first unwind in a module decodes its CFI, a new child's ELF files are read. At real-time priority that
would hold a CPU from the target for as long. So the thread drops back to its own policy once its threads
run again (``normal``), and raises itself again before it next sleeps (``realtime``): two
``sched_setscheduler`` calls per tick, 4.6 us here for the pair.
"""

from __future__ import annotations

import os
import resource

from profiler.config import SamplingPriority
from profiler.errors import PermissionDenied

#: SCHED_FIFO priority of the sampling thread: the level ptrace-costs.md section 3 measured. Low among
#: real-time priorities (1-99), so threaded interrupt handlers (50) and audio threads still come first.
FIFO_PRIORITY = 10

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


class SamplingPolicy:
    """Switches the calling thread between SCHED_FIFO (``realtime``) and the policy it had at ``start``
    (``normal``). Both are no-ops when already there, or when ``start`` was not granted real-time priority."""

    def __init__(self, mode: SamplingPriority) -> None:
        self.mode = mode
        self._fifo: os.sched_param | None = None  #: the real-time priority ``start`` was granted, if any
        self._own = (os.SCHED_OTHER, os.sched_param(0))  #: the thread's policy before ``start``, to go back to
        self._raised = False

    def start(self) -> str | None:
        """Find out whether real-time priority is permitted, and leave the thread at it if so.

        Returns a notice for the user when ``auto`` cannot have it; raises PermissionDenied when ``fifo``
        (which insists) cannot. A thread already at a real-time policy is left alone."""
        if self.mode is SamplingPriority.NORMAL:
            return None
        policy = os.sched_getscheduler(0)
        if policy in _REALTIME_POLICIES:
            return None  # started under chrt -f/-r: it already preempts the target's fair-class threads
        own = (policy, os.sched_getparam(0))
        for priority in _candidate_priorities():
            fifo = os.sched_param(priority)
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, fifo)
            except PermissionError:
                continue
            self._fifo, self._own, self._raised = fifo, own, True
            return None
        if self.mode is SamplingPriority.FIFO:
            raise PermissionDenied(
                "--priority fifo: real-time priority (SCHED_FIFO) is not permitted.",
                f"{_HOW}, or record at normal priority with --priority auto.",
            )
        return NOT_PERMITTED

    def realtime(self) -> None:
        """Before the sampler sleeps until its next tick: its wake-up must preempt the target."""
        if self._fifo is not None and not self._raised:
            os.sched_setscheduler(0, os.SCHED_FIFO, self._fifo)
            self._raised = True

    def normal(self) -> None:
        """Once every stopped thread runs again: back to the thread's own policy for the deferred work."""
        if self._raised:
            os.sched_setscheduler(0, *self._own)
            self._raised = False


def require(mode: SamplingPriority) -> None:
    """Fail early (before any process is attached or spawned) when ``mode`` insists on real-time priority
    and cannot have it. The calling thread is left at its own policy either way."""
    if mode is SamplingPriority.FIFO:
        policy = SamplingPolicy(mode)
        policy.start()
        policy.normal()


def _candidate_priorities() -> list[int]:
    """FIFO_PRIORITY, then the highest an unprivileged process may take (RLIMIT_RTPRIO), if lower."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
    limit = FIFO_PRIORITY if soft == resource.RLIM_INFINITY else soft
    return [FIFO_PRIORITY] + ([limit] if 1 <= limit < FIFO_PRIORITY else [])
