"""The tracer's value types: a seized thread, the preallocated buffers one copy goes into, what one stopped
thread yielded, and the tracer's counters."""

from __future__ import annotations

import array
import ctypes
import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from profiler.runtime import StopCopy
from profiler.target import ptrace as pt
from profiler.target.procfs import ThreadProc

#: hold times kept for percentiles (a ring: a long recording does not grow it)
HELD_TIMES = 1 << 16


@dataclass(eq=False)
class SeizedThread:
    """One seized thread. Keyed by ``(tid, start_time)`` wherever a cache outlives a tick."""

    pid: int
    tid: int
    start_time: int
    name: str
    proc: ThreadProc
    interrupt_pending: bool = False  #: PTRACE_INTERRUPT sent, stop not yet collected
    group_stopped: bool = False  #: in a job-control stop that nprof keeps with PTRACE_LISTEN
    stack_lo: int = 0  #: cached stack mapping [stack_lo, stack_hi) holding the last rsp
    stack_hi: int = 0
    #: the thread's own stack, [home_lo, home_hi): the mapping of its first sample's rsp. A stop with rsp
    #: elsewhere (a signal handler on an alternate signal stack) copies the top of it too
    home_lo: int = 0
    home_hi: int = 0
    gone: bool = False
    #: the signal nprof last resumed this thread with (0: none): a stop may be at that signal's handler's
    #: first instruction (``unwind/sigframe.py``); kept after a copy, as a thread resumed and stopped again
    #: before the scheduler ran it is still there (docs/decisions/true-notices.md)
    signal_passed: int = 0
    #: bytes of stack its copies take, from rsp up (0: the tracer's first window); grown by ``widen``
    stack_window: int = 0
    #: the sampler's per-thread state, kept here to spare a lookup per tick (Any: the tracer does not know
    #: its type, and the sampler reads it as ``record.user or ...`` on every tick without a cast call)
    user: Any = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.tid, self.start_time)

    def widen(self, first: int, cap: int) -> bool:
        """Double the thread's stack window (``first`` until widened), up to ``cap``: its walk was cut by the
        window while its stack went on. False if the window is at ``cap`` already.

        Doubling reaches any depth up to ``cap`` in a few samples (four from 64 KiB to 1 MiB), each cut
        short, and never copies more than twice what the stack needs. The window does not shrink: a copy
        stops at the top of the stack anyway (``Tracer._copy``), so a wide window costs only while the
        stack is that deep, when the walk needs it."""
        window = self.stack_window or first
        if window >= cap:
            return False
        self.stack_window = min(2 * window, cap)
        return True


class Slot:
    """Preallocated destination of one thread's copy: registers and the stack window.

    The buffer is reserved for the largest window (``size``) and backed by pages only as copies reach
    them: an anonymous mapping reads as zeros and is paged in on first write. A thread whose window grew
    (``SeizedThread.widen``) copies into any slot without an allocation during its stop, and slots that
    only ever take shallow stacks cost what they hold. The first window's pages (``touched``, default all)
    are paged in here, so that no stop waits for them."""

    __slots__ = ("regs", "regs_ref", "buffer", "address", "size", "_home")

    def __init__(self, size: int, touched: int | None = None) -> None:
        self.regs = pt.user_regs_struct()
        self.regs_ref = ctypes.byref(self.regs)  #: the registers' address, as PTRACE_GETREGS takes it
        self.buffer = _reserve(size)
        self.address = ctypes.addressof(self.buffer)
        self.size = size
        ctypes.memset(self.address, 0, size if touched is None else min(touched, size))
        self._home: ctypes.Array[ctypes.c_char] | None = None

    def home_buffer(self) -> ctypes.Array[ctypes.c_char]:
        """A second buffer of the slot's size, for the top of a thread's own stack (made at its first use:
        only a thread stopped on another stack needs it)."""
        if self._home is None:
            self._home = _reserve(self.size)
        return self._home


def _reserve(size: int) -> ctypes.Array[ctypes.c_char]:
    """``size`` bytes of an anonymous mapping, paged in as written (the array keeps the mapping alive)."""
    return (ctypes.c_char * size).from_buffer(mmap.mmap(-1, size))


@dataclass(slots=True)
class Capture:
    """What one stopped thread yielded. Valid until the next ``Tracer.capture`` reuses its slot."""

    thread: SeizedThread
    slot: Slot
    stack_base: int
    stack_len: int  #: bytes copied (0 if none); negative errno if process_vm_readv failed
    window_full: bool  #: the whole configured window was copied, so the stack may go on above it
    agent_data: StopCopy | None = None  #: the agent's copy (``runtime.StopCopy``), opaque here
    home_base: int = 0  #: where the copy of the top of the thread's own stack starts (``home_len`` bytes)
    home_len: int = 0  #: 0 unless the thread was stopped on another stack
    #: the signal the thread was last resumed with (``SeizedThread.signal_passed``)
    after_signal: int = 0

    @property
    def stack(self) -> memoryview:
        n = max(self.stack_len, 0)
        return memoryview(self.slot.buffer).cast("B")[:n]

    @property
    def home(self) -> memoryview:
        return memoryview(self.slot.home_buffer()).cast("B")[: self.home_len]


@dataclass
class TracerStats:
    interrupts: int = 0
    captures: int = 0
    late_stops: int = 0  #: due threads that did not report their stop within their tick's window
    late_captures: int = 0  #: of those, the stops copied when they came (the rest: exits, detach)
    first_stop_polls_caught: int = 0  #: polls for a tick's first stop that saw it (``events.FirstStopSpin``)
    first_stop_polls_missed: int = 0  #: ... that gave up, the tracer sleeping for it then
    #: how long each thread was held: from nprof seeing its stop to resuming it (the last HELD_TIMES)
    held_ns: array.array[int] = field(default_factory=lambda: array.array("q"))
    held_total_ns: int = 0
    held_count: int = 0  #: every hold noted, also those the ring no longer keeps
    #: ``Tracer.hold`` (``nprof dump``): how long the last one kept the process stopped, from its first
    #: interrupt to its last resume
    process_held_ns: int = 0

    signals_forwarded: int = 0
    group_stops: int = 0
    threads_seen: int = 0
    threads_exited: int = 0
    orphans_seized: int = 0  #: children seized at their parent's exit (``Tracer.follow_exits``)

    def note_held(self, ns: int) -> None:
        self.held_total_ns += ns
        n = self.held_count
        self.held_count = n + 1
        if n < HELD_TIMES:
            self.held_ns.append(ns)
        else:
            self.held_ns[n % HELD_TIMES] = ns  # the oldest: one tick's captures go to as many places

    def held_quantile(self, q: float) -> int | None:
        """The ``q`` quantile (0.5: the median) of the hold times kept, in ns; None before any capture."""
        if not self.held_ns:
            return None
        held = sorted(self.held_ns)
        return held[min(len(held) - 1, int(q * len(held)))]


#: agent hook called while a thread is stopped: (thread, regs) -> bytes-like or None
AgentCapture = Callable[["SeizedThread", pt.user_regs_struct], "StopCopy | None"]
