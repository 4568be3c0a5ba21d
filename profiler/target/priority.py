"""The sampler's scheduling policy while threads are stopped: SCHED_FIFO when permitted, quietly not when not.

../shared/reference/ptrace-costs.md section 3: when the target has more runnable threads than CPUs, a
sampler at normal priority is preempted by the threads it has just resumed, and the ones not yet resumed
stay stopped a whole scheduler tick (p90 3.9 ms); under SCHED_FIFO the p90 was 118-142 us.
"""

from __future__ import annotations

import os

#: SCHED_FIFO priority used during a capture; the level ptrace-costs.md section 3 measured
FIFO_PRIORITY = 10


class FifoPriority:
    """Raise the calling thread to SCHED_FIFO for a capture, and back to SCHED_OTHER after it."""

    def __init__(self) -> None:
        self.available = True  #: False once the kernel refused (no CAP_SYS_NICE, no RT budget)
        self._raised = False

    def enter(self) -> None:
        if not self.available:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
            self._raised = True
        except OSError:
            self.available = False  # not permitted here: fall back quietly, and stop trying

    def leave(self) -> None:
        if self._raised:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            self._raised = False
