"""The capture of one tick: interrupt every due thread, then copy and resume each one the moment it reports
its stop (DESIGN.md section 2, rule 1). Which threads are seized is ``threads.py``'s.

Safety rules this module owns (DESIGN.md section 5):

* Every stop nprof sees is answered at once, also between ticks: ``pump`` blocks in ``waitpid`` rather than
  sleeping, so a signal delivered to the target (a signal-delivery-stop) is passed on within microseconds.
* A group-stop (the target was sent SIGSTOP) is answered with PTRACE_LISTEN, so job control still holds.
* A child seized at its parent's exit (``follow_exits``) is detached at the end like any thread, also one
  that never became a sampled process: left traced, its signals would wait for a tracer that no longer
  answers (nprof may wait on for the command it started).
* Nothing is ever written to the target.

Waiting for a stop, bounded by a deadline, is ``events.py``'s: ``sigtimedwait`` on SIGCHLD where every
thread of nprof blocks it, else a blocking ``waitpid`` ended by a thread-directed alarm; a tick's first stop
is polled for briefly before either (``FirstStopSpin``), as the tracer's wake-up from a sleep is most of
the time its stopped thread waits.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator

from profiler.target import procfs
from profiler.target import ptrace as pt
from profiler.target.capture import AgentCapture, Capture, SeizedThread, Slot, TracerStats
from profiler.target.events import EventWait, FirstStopSpin, open_event_wait
from profiler.target.orphans import FOLLOW_OPTIONS, Orphans
from profiler.target.process import TargetProcess
from profiler.target.ptrace import (
    FAILED,
    PTRACE_CONT,
    PTRACE_EVENT_STOP,
    PTRACE_GETREGS,
    PTRACE_INTERRUPT,
    raw_ptrace,
)
from profiler.target.threads import SeizedThreads

#: bytes below rsp copied with the stack window: the System V x86-64 ABI's red zone (section 3.2.2, "The
#: 128-byte area beyond the location pointed to by %rsp ... will not be modified by signal or interrupt
#: handlers"). A function's epilogue leaves its CFI naming a saved register there: after ``pop %rbp``,
#: gcc's CFI still says rbp is saved at CFA-16, now rsp-8, and without it 8-12% of the samples of a small
#: frame-pointer function ending in a call were cut short at it (BAD_FRAME)
RED_ZONE = 128

#: the most of a new slot paged in ahead: record's first window (``SamplerConfig.stack_bytes``, 64 KiB), so that
#: no stop waits for those pages. ``nprof dump``'s 1 MiB windows were paged in whole, one slot per thread it
#: holds: 484 MB of memory for 400 threads (a sweep); past this, a copy pages in what it writes.
PAGED_IN_AT_MOST = 64 << 10

#: seconds ``detach_all`` waits at most for threads that keep stopping: a bound on nprof's end, where each
#: stop answered gives the rest its ``timeout`` again (the kernel detaches any left when nprof exits)
DETACH_AT_MOST = 60.0

#: ``Tracer._held``'s way to resume a group-stopped thread: PTRACE_LISTEN (any other value is the signal that
#: PTRACE_CONT delivers, 0 for none)
LISTEN = -1


def resume_action(status: int) -> int:
    """How to resume a due thread from the stop ``status`` reports (an interrupt-, group- or signal-delivery-
    stop), once it is copied: ``LISTEN`` for a group-stop, the signal for a signal-delivery-stop, else 0.

    A signal-delivery-stop is taken as the sample. It answers the interrupt ("any trap clears pending STOP
    trap", kernel/signal.c ptrace_stop()), and its registers are where the signal arrived. Passing the
    signal on and interrupting again instead stopped the thread at its handler's first instruction, whose
    frame the kernel builds first: a handler doing only ``flag++`` on a 5 ms timer took 20% of the samples
    (41 of 202 at 100 Hz)."""
    sig, event = (status >> 8) & 0xFF, status >> 16
    if event == 0:
        return sig
    return LISTEN if sig != signal.SIGTRAP else 0


class Tracer:
    """Seizes processes (their threads are in ``seized``), captures ticks, and answers every tracee event,
    across one or more processes."""

    def __init__(
        self,
        stack_bytes: int = 64 * 1024,
        stop_deadline: float = 0.25,
        max_stack_bytes: int = 0,
        follow_exits: bool = False,
    ) -> None:
        """``stack_bytes``: the window a thread's copies start with; a thread's own grows as the sampler
        widens it (``SeizedThread.widen``), up to ``max_stack_bytes``, which the slots are reserved for
        (0, or less than ``stack_bytes``: a fixed window). ``follow_exits``: every process is seized with
        ``FOLLOW_OPTIONS``, and the children of an exiting thread are seized into ``orphans``."""
        self.follow_exits = follow_exits
        self.stack_bytes = stack_bytes
        self.max_stack_bytes = max(stack_bytes, max_stack_bytes)
        self.stop_deadline = stop_deadline
        self.stats = TracerStats()
        self.seized = SeizedThreads(self.stats)  #: every thread seized, by process (``threads.py``)
        #: children seized at their parent's exit, not processes of their own yet (``orphans.py``)
        self.orphans = Orphans(self.seized, self.stats)
        self._waiter = pt.Waiter()  #: for WNOHANG checks; blocking waits go through ``_events``
        self._events: EventWait | None = None
        self.first_stop = FirstStopSpin(self._waiter, self.stats)  #: a tick polls for its first stop first
        self._slots: list[Slot] = []
        #: threads stopped by us (the guard) -> how to resume each: ``LISTEN`` (a group-stop), 0 (continue) or
        #: the signal to deliver (a signal-delivery-stop taken as the sample)
        self._held: dict[int, int] = {}
        self._late: dict[int, tuple[int, AgentCapture | None]] = {}  # tid -> how to copy its late stop
        self._late_slots: list[Slot] = []
        self._late_used = 0
        self.late_captures: list[Capture] = []
        self._stack_readers: dict[int, pt.StackReader] = {}
        #: pids held in their exec stop (PTRACE_EVENT_EXEC) until ``resume_exec``: their new program has not
        #: run an instruction yet, so nothing of it is missed while nprof maps it
        self.exec_stopped: list[int] = []

    # --- attach / threads -------------------------------------------------------------------------------

    def add_process(
        self, process: TargetProcess, trace_exec: bool = False, at_exec: bool = False, orphan: bool = False
    ) -> None:
        """Seize every thread of ``process`` (``threads.py``). Raises PermissionDenied with a diagnosis if
        refused. ``trace_exec``: its execs stop it (``exec_stopped``) until ``resume_exec``. ``at_exec``: it
        was seized so already and waits in its exec stop (``launch.py``); it too waits for ``resume_exec``.
        ``orphan``: its leader was seized at its parent's exit (``orphans``), with ``FOLLOW_OPTIONS``."""
        if self._events is None:
            self._events = open_event_wait()
        if self.follow_exits:
            options = FOLLOW_OPTIONS
            if at_exec:  # launch.py seized it with PTRACE_O_TRACEEXEC alone; it is in a ptrace-stop now
                pt.set_options(process.pid, options)
        else:
            options = pt.PTRACE_O_TRACEEXEC if trace_exec or at_exec else 0
        self.seized.add_process(process, options, seized=at_exec or orphan)
        self.orphans.pop(process.pid, None)
        self._stack_readers[process.pid] = pt.StackReader(process.pid)
        if at_exec:
            self.exec_stopped.append(process.pid)

    def resume_exec(self, pid: int) -> None:
        """Let a process held in its exec stop run its new program."""
        if pid in self.exec_stopped:
            self.exec_stopped.remove(pid)
            pt.cont(pid)

    def release_exec(self, pid: int) -> None:
        """Let go of a process held in its exec stop that nprof cannot sample (a program of another
        architecture): detached from that stop, with the one thread an exec leaves, it runs its new program
        untraced."""
        if pid in self.exec_stopped:
            self.exec_stopped.remove(pid)
        for record in self.seized.threads_of(pid):
            pt.detach(record.tid, 0)
            self._drop(record, exited=False)
        self.seized.forget_process(pid)

    def _exited(self, tid: int, status: int) -> None:
        """A tracee's exit (or death) status: the end of its process if it is a leader, and of the thread."""
        if tid in self.seized.processes:
            self.seized.leader_exited(tid, status)
        self.orphans.pop(tid, None)
        record = self.seized.records.get(tid)
        if record is not None:
            self._drop(record)

    def _drop(self, record: SeizedThread, exited: bool = True) -> None:
        """Forget a thread that exited (or was detached: ``exited`` False), and any stop of it nprof was
        holding or still expecting."""
        self.seized.drop(record, exited)
        self._held.pop(record.tid, None)
        self._late.pop(record.tid, None)

    # --- the capture of one tick (the hot loop) ---------------------------------------------------------

    def capture(
        self,
        due: Iterable[SeizedThread],
        copy_stack: bool = True,
        agent_capture: AgentCapture | None = None,
        window: float | None = None,
        late_agent_capture: AgentCapture | None = None,
    ) -> list[Capture]:
        """Interrupt every due thread, then copy and resume each as it reports its stop.

        Only syscalls happen while a thread is stopped: GETREGS, one process_vm_readv of the stack window
        and whatever the agent hook copies. The tick waits ``window`` seconds at most (default: the stop
        deadline): a thread that is runnable but not on a CPU stops only when the scheduler next runs it,
        which can take a whole scheduler slice (4-13 ms measured here with 8 busy threads on 2 CPUs).
        Such a late thread is copied and resumed the moment its stop arrives, whenever that is; its capture
        is handed out by ``take_late_captures``, copied with ``late_agent_capture`` if given.

        The captures live in the tracer's slots until its next ``capture`` call: record them before it.
        """
        stack_bytes = self.stack_bytes if copy_stack else 0
        pending = self._interrupt(due)
        captures = self._collect(pending, stack_bytes, agent_capture, window, spin=True)
        if pending:  # missed the window: their stops are copied when they come
            late_hook = agent_capture if late_agent_capture is None else late_agent_capture
            for tid in pending:
                self._late[tid] = (stack_bytes, late_hook)
        self.stats.captures += len(captures)
        return captures

    def take_late_captures(self) -> list[Capture]:
        """Captures of threads whose stop came after their tick's window; valid until the next call."""
        late, self.late_captures = self.late_captures, []
        self._late_used = 0
        return late

    @contextlib.contextmanager
    def hold(
        self, threads: Iterable[SeizedThread], copy_stack: bool = True, agent_capture: AgentCapture | None = None
    ) -> Iterator[list[Capture]]:
        """Stop every thread and keep them all stopped while the caller reads more (``nprof dump``): one
        consistent snapshot of the whole process. Every thread is resumed on leaving, whatever happens."""
        stack_bytes = self.stack_bytes if copy_stack else 0
        start = time.perf_counter_ns()
        try:
            yield self._collect(self._interrupt(threads), stack_bytes, agent_capture, keep=True)
        finally:
            self._release_held()
            self.stats.process_held_ns = time.perf_counter_ns() - start

    def _new_slot(self) -> Slot:
        """A slot for any thread's window: reserved for the largest, paged in for the first (at most
        ``PAGED_IN_AT_MOST``)."""
        return Slot(self.max_stack_bytes + RED_ZONE, touched=min(self.stack_bytes, PAGED_IN_AT_MOST) + RED_ZONE)

    def _interrupt(self, threads: Iterable[SeizedThread]) -> dict[int, SeizedThread]:
        pending: dict[int, SeizedThread] = {}
        for record in threads:
            if record.interrupt_pending:
                self._late.pop(record.tid, None)  # still on its way: collect it as this tick's
                pending[record.tid] = record
                continue
            if raw_ptrace(PTRACE_INTERRUPT, record.tid, 0, 0) == FAILED:
                self._drop(record)  # ESRCH: the thread has exited
                continue
            record.interrupt_pending = True
            pending[record.tid] = record
        self.stats.interrupts += len(pending)
        while len(self._slots) < len(pending):
            self._slots.append(self._new_slot())
        return pending

    def _collect(
        self,
        pending: dict[int, SeizedThread],
        stack_bytes: int,
        agent_capture: AgentCapture | None,
        window: float | None = None,
        keep: bool = False,
        spin: bool = False,
    ) -> list[Capture]:
        """Wait for the stop of every pending thread, in the order they stop; copy each at once and, unless
        ``keep``, resume it. Answer any other event on the way. Gives up after ``window`` seconds (default:
        the stop deadline), leaving the rest in ``pending``. Without ``keep``, a thread still held at the
        end (a copy failed) is resumed; with it, the caller releases them (``hold``). With ``spin``, the
        first stop is polled for before any sleep (``FirstStopSpin``).

        The one loop of the hot path: each step here is paid per stopped thread, so the copy and the
        resume are written out rather than called through a callback."""
        captures: list[Capture] = []
        if not pending:
            return captures
        events = self._events
        assert events is not None, "captures of threads seized, whose seizing opened the event wait"
        held = self._held
        slots = self._slots
        stats = self.stats
        deadline = time.monotonic() + (self.stop_deadline if window is None else window)
        first, status = self.first_stop.poll() if spin else (0, 0)
        try:
            while pending:
                if first:
                    tid, err, first = first, 0, 0
                else:
                    tid, status, err = events.wait(deadline, early=True)
                if tid < 0:
                    if err == errno.EINTR:
                        if time.monotonic() >= deadline:
                            stats.late_stops += len(pending)
                            break
                        continue
                    if err == errno.ECHILD:
                        break  # nothing left to wait for: every tracee has exited
                    raise OSError(err, os.strerror(err))
                record = pending.get(tid)
                if record is None or (status & 0xFF) != 0x7F or status >> 16 not in (PTRACE_EVENT_STOP, 0):
                    self._handle_event(tid, status)
                    if record is not None and (
                        record.gone or tid in self.exec_stopped or status >> 16 == pt.PTRACE_EVENT_EXIT
                    ):
                        del pending[tid]  # exiting, or its interrupt-stop comes after its exec stop is resumed
                    continue
                # an interrupt-stop, a group-stop or a signal-delivery-stop of a due thread: held until resumed
                # (the guard); the signal's stop answered the interrupt, and is the sample (``resume_action``)
                seen = time.perf_counter_ns()
                action = held[tid] = resume_action(status)
                record.interrupt_pending = False
                record.group_stopped = action == LISTEN
                if action > 0:
                    stats.signals_forwarded += 1
                del pending[tid]
                captures.append(self._copy(record, slots[len(captures)], stack_bytes, agent_capture))
                if not keep:
                    self._resume(tid)
                    stats.note_held(time.perf_counter_ns() - seen)
        finally:
            if not keep and held:
                self._release_held()
        return captures

    def _copy(
        self, record: SeizedThread, slot: Slot, stack_bytes: int, agent_capture: AgentCapture | None
    ) -> Capture:
        """Registers, the stack window and the agent's bytes of one stopped thread: syscalls only.

        The agent's hook runs first: what it returns may name ranges to copy with the stack window
        (``co_read``, runtime.py), in the same ``process_vm_readv``."""
        regs = slot.regs
        if raw_ptrace(PTRACE_GETREGS, record.tid, 0, slot.regs_ref) == FAILED:
            # killed (SIGKILL) since it reported its stop: the slot holds an earlier thread's registers
            ctypes.memset(ctypes.addressof(regs), 0, ctypes.sizeof(regs))
            return Capture(record, slot, 0, -ctypes.get_errno(), False)
        rsp = base = regs.rsp
        # the thread's own window (widened by the sampler), never past what the slots hold; 0: no stack copy
        window = (min(record.stack_window, self.max_stack_bytes) or stack_bytes) if stack_bytes else 0
        size = window
        if window and record.stack_lo <= rsp < record.stack_hi:
            size = min(size, record.stack_hi - rsp)
            below = min(RED_ZONE, rsp - record.stack_lo)  # not below a mapping known (a first copy)
            base, size = rsp - below, size + below
        data = co_read = None
        if agent_capture is not None:
            data = agent_capture(record, regs)
            # (``runtime.StopCopy``; read defensively: an agent's bug must not raise here, the thread stopped)
            co_read = getattr(data, "co_read", None) if data is not None else None
        # through the stopped thread itself, alive for sure: a process whose main thread exited (pthread_exit
        # in main) has a zombie leader, with no memory to read through the pid
        if co_read is not None:
            n = co_read.read_with_stack(record.tid, slot.address, base, size)
        else:
            n = self._stack_readers[record.pid].read_into(slot.address, base, size, record.tid) if size else 0
        capture = Capture(record, slot, base, n, window > 0 and n - (rsp - base) == window, data)
        capture.after_signal = record.signal_passed
        if window and record.home_hi and not record.home_lo <= rsp < record.home_hi:
            self._copy_home(capture, window)
        return capture

    def _copy_home(self, capture: Capture, stack_bytes: int) -> None:
        """A thread stopped off its own stack (a signal handler on an alternate signal stack): the frames
        it interrupted are on its own stack, near the top unless deeper than the window; copy that too.
        Done in the stop once the thread's own stack is known: learnt from the walk of an earlier copy (a
        recording's previous sample of the thread; ``nprof dump``'s brief stop before its hold)."""
        record, slot = capture.thread, capture.slot
        home = max(record.home_lo, record.home_hi - stack_bytes)
        buffer = slot.home_buffer()
        got = self._stack_readers[record.pid].read_into(ctypes.addressof(buffer), home, record.home_hi - home,
                                                        record.tid)  # fmt: skip
        capture.home_base, capture.home_len = home, max(got, 0)

    def _resume(self, tid: int) -> None:
        """Let a thread we hold go: PTRACE_LISTEN keeps a job-control stop, PTRACE_CONT resumes (delivering
        the signal of a signal-delivery-stop)."""
        action = self._held.pop(tid)
        if action == LISTEN:
            pt.listen(tid)
        else:
            raw_ptrace(PTRACE_CONT, tid, 0, action)
            if action:
                self._passed_signal(tid, action)

    def _passed_signal(self, tid: int, sig: int) -> None:
        """Note that ``tid`` was resumed with ``sig``: its handler's frame is built on the way back to user
        mode, and a stop before it runs (an interrupt sent meanwhile) is sampled where the signal arrived
        (``unwind/sigframe.py``)."""
        record = self.seized.records.get(tid)
        if record is not None:
            record.signal_passed = sig

    # --- everything that is not a due stop -----------------------------------------------------------------

    def _handle_event(self, tid: int, status: int) -> None:
        """Answer a wait status that is not a capture: exits, signals, group-stops, late interrupts, execs.

        Any ptrace-stop answers a PTRACE_INTERRUPT still pending ("any trap clears pending STOP trap",
        ptrace_stop() in kernel/signal.c): after a signal's or an exec's stop, no interrupt-stop follows
        the interrupt sent before it, and a thread still counted as interrupted would be waited for at
        every tick from then on, and never sampled again."""
        if (status & 0xFF) != 0x7F:  # exited or killed
            self._exited(tid, status)
            return
        record = self.seized.records.get(tid)
        sig, event = pt.decode_stop(status)
        if event == pt.PTRACE_EVENT_EXIT:
            if record is not None:
                record.interrupt_pending = False  # answered by this stop; no interrupt-stop comes after it
                self._late.pop(tid, None)
            self.orphans.seize_children(record.pid if record is not None else tid, tid)
            pt.cont(tid)  # to its death, reported as any (or, a thread torn down by another's exec, not)
            return
        if event == pt.PTRACE_EVENT_EXEC and record is None and tid in self.orphans:
            pt.cont(tid)  # a child not sampled yet: nothing to map while it waits, the next look maps it
            return
        if event == pt.PTRACE_EVENT_EXEC:
            # tid is the leader's (an exec from another thread takes its tid): held for the sampler to map
            # the new program before it runs (``resume_exec``)
            if record is not None:
                record.interrupt_pending = False  # answered by this stop: no sample this tick
                self._late.pop(tid, None)
            self.exec_stopped.append(tid)
            return
        if event in (pt.PTRACE_EVENT_STOP, 0) and record is not None and tid in self._late:
            self._capture_late(record, status)
            return
        if event == pt.PTRACE_EVENT_STOP:  # a group-stop, or an interrupt-stop no tick waits for any more
            group_stop = sig in pt.STOP_SIGNALS
            if record is not None:
                record.interrupt_pending = False
                record.group_stopped = group_stop
            self.stats.group_stops += group_stop
        elif event == 0:  # a signal-delivery-stop
            self.stats.signals_forwarded += 1
        pt.pass_on(tid, sig, event)
        if event == 0 and record is not None:
            record.signal_passed = sig
        if event == 0 and record is not None and record.interrupt_pending:
            pt.interrupt(tid)  # the signal's stop answered it: ask again for the stop still awaited

    def _capture_late(self, record: SeizedThread, status: int) -> None:
        """The stop of a thread that missed its tick's window: copy it now, then let it go. Its hold is noted
        like a tick's (the session's ``stops`` counts every stop its samples came from)."""
        seen = time.perf_counter_ns()
        stack_bytes, agent_capture = self._late.pop(record.tid)
        action = self._held[record.tid] = resume_action(status)
        record.interrupt_pending = False
        record.group_stopped = action == LISTEN
        self.stats.signals_forwarded += action > 0
        try:
            if self._late_used == len(self._late_slots):
                self._late_slots.append(self._new_slot())
            slot = self._late_slots[self._late_used]
            self._late_used += 1
            self.late_captures.append(self._copy(record, slot, stack_bytes, agent_capture))
            self.stats.late_captures += 1
        finally:
            self._resume(record.tid)
            self.stats.note_held(time.perf_counter_ns() - seen)

    def pump(self, until: float, should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Answer tracee events until monotonic time ``until``, or until a process stops in its exec (the
        caller maps it, then ``resume_exec``); False once nothing is traced any more."""
        events = self._events
        if events is None:  # nothing was ever seized
            return False
        while True:
            if time.monotonic() >= until or should_stop() or self.exec_stopped:
                return True
            tid, status, err = events.wait(until)  # returns at once if a stop is already pending
            if tid > 0:
                self._handle_event(tid, status)
                continue
            if err == errno.ECHILD:
                self._forget_all()
                return False
            # EINTR: the deadline, or a signal to nprof (SIGINT/SIGTERM set should_stop)

    def answer_events(self) -> None:
        """Answer every stop already reported, without blocking (one WNOHANG wait when there is none)."""
        waiter = self._waiter
        while True:
            tid, status, _err = waiter.wait(nohang=True)
            if tid <= 0:
                return
            self._handle_event(tid, status)

    def _forget_all(self, exited: bool = True) -> None:
        """Forget every thread and orphan: all exited (ECHILD), or, ``exited`` False, all detached."""
        for record in list(self.seized.records.values()):
            self._drop(record, exited)
        self.orphans.clear()

    # --- the guard and detaching --------------------------------------------------------------------------

    def _release_held(self) -> None:
        """Resume every thread still stopped by us (after ``hold``, or if a capture was cut by an error)."""
        for tid in list(self._held):
            self._resume(tid)

    def detach_all(self, timeout: float = 2.0) -> list[int]:
        """Stop each thread briefly and PTRACE_DETACH it. Returns tids that did not stop in time; the kernel
        detaches those when nprof exits (no EXITKILL), and their pending interrupt is cleared then.

        ``timeout`` runs from the last stop answered, not from the start, up to ``DETACH_AT_MOST``: on a
        machine whose CPUs a target's threads keep busy, nprof gets little time itself, and 1000 threads
        took longer than 2 s to answer; those that stopped after the give-up waited in their stop, 65 of
        them, until nprof had written its outputs and exited (16 s), and got no sample either (a sweep).

        Threads in uninterruptible sleep (a hung program, what ``nprof dump`` is run on) are waited for one
        stop deadline, not ``timeout``: they stop when they wake, which may be never, and waiting the whole
        of it made every dump of a hung process 2 s longer."""
        self._release_held()
        for tid in self.exec_stopped:  # already in a ptrace-stop: detached from it at once
            pt.detach(tid, 0)
            record = self.seized.records.get(tid)
            if record is not None:
                self._drop(record, exited=False)
        self.exec_stopped.clear()
        #: tid -> its record, or None for an orphan never seized as a process (``orphans``)
        waiting: dict[int, SeizedThread | None] = {}
        for record in list(self.seized.records.values()):
            if record.proc.state() in procfs.EXITED_STATES:  # an exited thread cannot stop: not waited for
                if record.tid != record.pid:
                    # A traced thread that exited stays a zombie until its tracer reaps it, and its process
                    # cannot be reported exited before: unreaped, a command nprof launched was never reaped,
                    # and nprof waited for it for ever (a thread seized by the last look for new threads,
                    # exited before the detach). A zombie leader waits for its other threads, not for nprof.
                    pt.reap(record.tid)
                self._drop(record)
                continue
            if record.interrupt_pending or pt.interrupt(record.tid) == 0:
                record.interrupt_pending = True
                waiting[record.tid] = record
            else:
                self._drop(record)
        self._wait_for_orphans(waiting)
        start = time.monotonic()
        deadline, stuck_by = start + timeout, start + min(timeout, self.stop_deadline)
        if waiting and self._events is None:
            self._events = open_event_wait()  # called again after a detach, or before any add_process
        events = self._events
        try:
            while waiting:
                now = time.monotonic()
                if now >= deadline:
                    break
                if now >= stuck_by and all(
                    r is not None and r.proc.state() == procfs.DISK_SLEEP for r in waiting.values()
                ):
                    break  # they stop when they wake, which may be never; the kernel detaches them at exit
                assert events is not None  # (opened above for the threads waited for)
                tid, status, err = events.wait(stuck_by if now < stuck_by else deadline)
                if tid < 0:
                    if err == errno.ECHILD:
                        break
                    continue
                if tid not in waiting:
                    self._handle_event(tid, status)  # an exit stop among them: its orphans are waited for too
                    self._wait_for_orphans(waiting)
                    continue
                record = waiting.pop(tid)
                deadline = min(max(deadline, time.monotonic() + timeout), start + DETACH_AT_MOST)
                if (status & 0xFF) != 0x7F:
                    self._exited(tid, status)
                    continue
                sig, event = pt.decode_stop(status)
                pt.detach(tid, sig if event == 0 else 0)  # a signal-delivery-stop: deliver the signal
                if record is not None:
                    self._drop(record, exited=False)
                self.orphans.pop(tid, None)
        finally:
            self._forget_processes()
        return list(waiting)

    def leave_to_thread_exit(self) -> list[int]:
        """The end of tracing on a thread that exits next (``tracing_thread.py``), whose exit detaches every
        tracee without stopping any, where ``detach_all`` interrupts even the sleeping threads: resume the
        threads nprof holds, answer the stops already reported, and forget every tracee.

        A stop still awaited (a thread that missed its tick's window, runnable but not on a CPU) is waited for
        first, up to the stop deadline: its interrupt has woken the thread already, and the detach clears the
        interrupt but not the wake-up, so a thread that then went to sleep in ``epoll_wait`` would take an
        EINTR for it. Not for threads in uninterruptible sleep, which stop when they wake, maybe never.
        Returns the tids of the threads whose stop did not come (the kernel clears their interrupt)."""
        self._release_held()
        deadline = time.monotonic() + self.stop_deadline
        while self._events is not None and time.monotonic() < deadline:
            states = [r.proc.state() for r in self.seized.records.values() if r.interrupt_pending]
            if all(s is None or s == procfs.DISK_SLEEP or s in procfs.EXITED_STATES for s in states):
                break
            tid, status, err = self._events.wait(deadline)
            if tid > 0:
                self._handle_event(tid, status)  # a late stop is copied and resumed (``_capture_late``)
            elif err == errno.ECHILD:
                break
        self.answer_events()
        self.late_captures.clear()
        unstopped = [r.tid for r in self.seized.records.values() if r.interrupt_pending and not r.proc.exited()]
        self._forget_all(exited=False)
        self.exec_stopped.clear()  # woken by the thread's exit into their new program, as ``resume_exec`` does
        self._forget_processes()
        return unstopped

    def _forget_processes(self) -> None:
        """The end of ``detach_all`` and ``leave_to_thread_exit``: no process is traced any more."""
        self._close_events()
        self._stack_readers.clear()
        self.seized.processes.clear()

    def _wait_for_orphans(self, waiting: dict[int, SeizedThread | None]) -> None:
        """Ask a stop of every orphan that ``detach_all`` does not wait for yet."""
        for tid in self.orphans.keys() - waiting.keys():
            if pt.interrupt(tid) == 0:
                waiting[tid] = None
            else:
                del self.orphans[tid]  # gone

    # --- the wait that bounds every blocking wait ------------------------------------------------------

    def _close_events(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
