"""Which threads a tick stops, and which it counts again without a stop (DESIGN.md section 2).

* a thread whose schedstat run time has not grown since its previous sample has the same stack: it is not
  stopped, its previous stack is counted again (RUNNING if it waits for a CPU, IDLE if it sleeps). The
  exception is a thread that was switched onto a CPU since (schedstat's timeslice count) and is running:
  the kernel has not accounted its time yet, which at rates above the scheduler's tick rate is the usual
  case for a busy thread;
* a thread that has run but is asleep in the kernel now is not stopped either (a ptrace stop can make some
  syscalls return EINTR in the target, signal(7)); it is counted BLOCKED with its last stack, unless
  ``interrupt_sleeping`` asks for exact idle stacks;
* everything else is stopped, all at once.

The decision reads ``/proc`` only (``ThreadProc``: schedstat, and the state letter when schedstat cannot
tell), once per thread and tick, before any thread is stopped.
"""

from __future__ import annotations

from profiler.model import IDLE_CLASSES, SampleClass, StopReason
from profiler.profile.session import Session
from profiler.sampling.sampled_process import SampledThread
from profiler.target.capture import SeizedThread
from profiler.target.procfs import EXITED_STATES

#: Run-time growth below this counts as "has not run": stopping and resuming a sleeping thread itself
#: costs it 16-64 us of run time (measured here), which must not make it look busy at the next tick.
IDLE_EPSILON_NS = 100_000

#: /proc state letters of a thread asleep in the kernel (proc(5)): sleeping, disk sleep, idle kthread
_ASLEEP = frozenset("SDI")
#: stopped by job control or by another tracer: it cannot run, so its stack cannot change
_HALTED = frozenset("Tt")


class IdleCheck:
    """Per thread and tick: stop it, or count its last stack again (into ``session``)."""

    def __init__(self, session: Session, interrupt_sleeping: bool = False) -> None:
        self.session = session
        #: stop threads asleep in the kernel too, for exact idle stacks (config.py)
        self.interrupt_sleeping = interrupt_sleeping

    def reuse(self, record: SeizedThread, state: SampledThread) -> bool:
        """Count a sample without stopping the thread, when its stack cannot have changed (or must not be
        disturbed). False means: stop it."""
        sched = record.proc.schedstat()
        if sched is None:
            return True  # gone; the tracer drops it when its exit is reaped
        run_time, slices = sched
        # Run time that has not grown means the thread has not run since its last sample, or it has been on
        # a CPU all along since it was put there, its time not yet accounted (that waits for a scheduler
        # tick while it stays on the CPU). The second shows as a switch-in since the last sample and the
        # state R now; a stopped thread is switched in again when it is resumed.
        # A thread seen asleep since nprof attached, and never sampled, has a run time to compare with
        # (from that look) but no stack yet: it is left alone like any sleeper, without a sample to count.
        ran = state.last_run_time < 0 or not 0 <= run_time - state.last_run_time <= IDLE_EPSILON_NS
        switched_in = slices != state.last_slices
        if not ran and not switched_in and state.last_class in IDLE_CLASSES:
            state.asleep_checks += 1
            return self._count_again(state, state.last_class)  # asleep then, asleep now: no need to look
        state.asleep_checks = 0
        letter = record.proc.state()
        if letter in EXITED_STATES:
            return True  # exited, not reaped yet (a zombie main thread): it would never answer a stop
        if not ran and not (switched_in and letter == "R"):
            # Same stack. Asleep then, asleep now (it cannot have woken without running); otherwise it may
            # wait for a CPU, which is busy, not idle.
            state.last_slices = slices
            cls = state.last_class
            return self._count_again(state, cls if cls in IDLE_CLASSES or letter == "R" else SampleClass.IDLE)
        halted_with_a_stack = letter in _HALTED and state.last_stack is not None
        if not self.interrupt_sleeping and (letter in _ASLEEP or halted_with_a_stack):
            # it ran, but sleeps now (or is job-control stopped): leave it alone, count its last stack. A
            # stopped thread without one yet (stopped before the attach) is stopped once for it: nothing
            # runs in it that the stop could disturb, and the tracer keeps its job-control stop.
            state.last_run_time, state.last_slices = run_time, slices
            return self._count_again(state, SampleClass.BLOCKED if letter in _ASLEEP else SampleClass.IDLE)
        state.run_time_at_stop, state.slices_at_stop = run_time, slices
        return False

    def _count_again(self, state: SampledThread, cls: SampleClass) -> bool:
        """A sample of the thread's last stack, without stopping it (none if it was never sampled: it has
        slept since nprof attached). Returns True (it was not stopped)."""
        state.last_class = cls
        if state.last_stack is not None:
            self.session.add_sample(state.index, state.last_stack, StopReason.REUSED, cls)
        return True
