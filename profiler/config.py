"""Frozen settings for the sampler, the unwinders and the exporters. No argparse here: the CLI and the
daemon both build these."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class SamplingPriority(enum.Enum):
    """Scheduling of the sampling thread from its sleep between ticks to the end of each tick's stops
    (``sampling/priority.py`` says why and measures it)."""

    AUTO = "auto"  #: SCHED_FIFO when permitted; otherwise a notice, and normal priority
    FIFO = "fifo"  #: SCHED_FIFO, and an error when it is not permitted
    NORMAL = "normal"  #: never change the thread's policy


#: the largest ``--stack-bytes``: the default RLIMIT_STACK of the main thread; no real stack window is larger
MAX_STACK_BYTES = 8 << 20
#: how far a thread's stack window grows by default (``--max-stack-bytes``): 16 times the first window. A
#: window grows only for a thread whose walks it cut, and a copy never goes past the top of the stack, so a
#: thread pays for it only while its stack is that deep; a copy costs ~0.1 us per KiB with the thread
#: stopped (ptrace-costs.md, "The C floor"), ~100 us at this size. Deep enough for numpy's OpenBLAS matrix
#: product, whose frames put the caller's eval loop 66 KiB above the stack pointer in its kernel (gdb, on
#: 3.11; 39% of the main thread's samples lost their root at a fixed 64 KiB, none at 128 KiB), and for the
#: 2000-deep C recursion that ``nprof dump`` copies whole with its 1 MiB.
DEFAULT_MAX_STACK_BYTES = 1 << 20
#: the deepest native walk ``--max-frames`` allows: a 1 MiB window holds at most 65536 return addresses
MAX_FRAMES = 65536


@dataclass(frozen=True)
class SamplerConfig:
    rate: float = 100.0  #: samples per second per thread (py-spy's default)
    duration: float | None = None  #: seconds; None runs until Ctrl-C or the target exits
    stack_bytes: int = 64 * 1024  #: stack window a thread's copies start with, cut at the end of its stack
    #: how far a thread's window grows: doubled after each walk it cut short (``SeizedThread.widen``), up to
    #: this or ``stack_bytes``, whichever is larger (equal: a fixed window)
    max_stack_bytes: int = DEFAULT_MAX_STACK_BYTES
    native: bool = True  #: copy and unwind native stacks
    idle: bool = False  #: keep idle samples in outputs (they are always recorded in the session)
    #: depth limit of one native walk (``--max-frames``): twice the frames of a Python recursion at its
    #: default limit (sys.getrecursionlimit() 1000) on 3.8-3.10, where each Python call is 2 native frames
    max_frames: int = 2048
    priority: SamplingPriority = SamplingPriority.AUTO
    #: a due thread that has not reported its stop this long after the interrupt is counted late; its
    #: stop is still collected and resumed whenever it arrives.
    stop_deadline: float = 0.25
    #: Interrupt threads that are asleep in the kernel to get their exact current stack. Off by default:
    #: some syscalls (epoll_wait, semop, sigtimedwait...) return EINTR to the target after any ptrace stop
    #: (signal(7), "Interruption of system calls ... by stop signals"), so nprof leaves sleeping threads
    #: alone unless their idle stacks were asked for.
    interrupt_sleeping: bool = False
    subprocesses: bool = False  #: follow the target's child processes as they appear

    @property
    def window_cap(self) -> int:
        """The largest stack window a thread's copies grow to."""
        return max(self.stack_bytes, self.max_stack_bytes)


@dataclass(frozen=True)
class ExportConfig:
    idle: bool = False  #: include idle and blocked samples
    threads: bool = False  #: keep threads apart in formats that merge them by default (folded)
    gil_only: bool = False  #: keep only samples of the thread holding a runtime's global lock
    hide_interpreter: bool = False  #: drop the interpreter's own native frames (eval loop, call glue, start-up)
    #: a frame per function and line sampled (``--lines``), not per function (``tree/frame_identity.py``)
    lines: bool = False
